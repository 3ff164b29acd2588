//! The compact task ID (version 2, R-CON-6): the operation ID and run ID as bytes, the shapes
//! the connector makes them in held in a few bytes each, everything else in the MAC. Pure
//! functions; the module above signs and verifies.
//!
//! ```text
//! version (2) | kid hint | form | run | op          then the tag, 16 bytes
//!
//! form  bits 0-1: the op's shape (0 call, 1 keyed call, 2 other); bit 2: the run as text
//! run   a UUID's 16 bytes, or (bit 2) u16 length + UTF-8
//! op    call:  round | prefix length | prefix | UUID's 16 bytes
//!              = <connector name>-<prefix>-<uuid>[~r<round>]   (prefix at most 32 bytes)
//!       keyed: round | 32 bytes
//!              = <connector name>-idem-<base64url of the 32 bytes>[~r<round>]
//!       other: u16 length + UTF-8, the operation ID as it is
//! ```
//!
//! An operation ID takes a shape only when that shape renders it back exactly; any other ID
//! (another connector name, a longer prefix, an older build's) is held as text.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use durable_mcp_contract::input::{round_id, split_round};
use uuid::Uuid;

use crate::operation_id::OPERATION_MARK;

/// The first byte of every compact task ID.
pub(super) const VERSION: u8 = 2;
/// Bytes of the truncated HMAC-SHA256 that ends the ID: 128 bits.
pub(super) const TAG_LEN: usize = 16;
/// Bytes before the run: version, kid hint, form.
const HEADER_LEN: usize = 3;
/// Longest operation-id prefix a call's shape holds.
pub const MAX_PREFIX_LEN: usize = 32;

const CALL: u8 = 0;
const KEYED: u8 = 1;
const OTHER: u8 = 2;
const SHAPE_BITS: u8 = 0b011;
const RUN_AS_TEXT: u8 = 0b100;
/// Characters of a hyphenated UUID.
const UUID_TEXT_LEN: usize = 36;

/// An operation ID as the task ID holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Op<'a> {
    Call {
        prefix: &'a str,
        id: Uuid,
        round: u8,
    },
    Keyed {
        hash: [u8; 32],
        round: u8,
    },
    Other(&'a str),
}

/// The shape `op` takes under `connector`, or [`Op::Other`].
fn op_shape<'a>(connector: &str, op: &'a str) -> Op<'a> {
    shaped(connector, op)
        .filter(|shape| render_op(connector, shape) == op)
        .unwrap_or(Op::Other(op))
}

fn shaped<'a>(connector: &str, op: &'a str) -> Option<Op<'a>> {
    let (first, round) = split_round(op);
    let round = u8::try_from(round).ok()?;
    let rest = first.strip_prefix(connector)?.strip_prefix('-')?;
    let keyed = rest
        .strip_prefix(OPERATION_MARK)
        .and_then(|r| r.strip_prefix('-'))
        .and_then(|hash| URL_SAFE_NO_PAD.decode(hash).ok())
        .and_then(|hash| <[u8; 32]>::try_from(hash).ok());
    if let Some(hash) = keyed {
        return Some(Op::Keyed { hash, round });
    }
    let split = rest.len().checked_sub(UUID_TEXT_LEN + 1)?;
    let prefix = rest.get(..split)?;
    let id = Uuid::parse_str(rest.get(split..)?.strip_prefix('-')?).ok()?;
    (prefix.len() <= MAX_PREFIX_LEN).then_some(Op::Call { prefix, id, round })
}

fn render_op(connector: &str, op: &Op<'_>) -> String {
    match op {
        Op::Call { prefix, id, round } => {
            round_id(&format!("{connector}-{prefix}-{id}"), u32::from(*round))
        }
        Op::Keyed { hash, round } => round_id(
            &format!(
                "{connector}-{OPERATION_MARK}-{}",
                URL_SAFE_NO_PAD.encode(hash)
            ),
            u32::from(*round),
        ),
        Op::Other(op) => (*op).to_owned(),
    }
}

/// A run ID's UUID, when it is one written the way Temporal writes it.
fn run_uuid(run: &str) -> Option<Uuid> {
    Uuid::parse_str(run)
        .ok()
        .filter(|id| id.hyphenated().to_string() == run)
}

/// Everything a compact task ID holds before its tag.
pub(super) fn body(kid_hint: u8, connector: &str, op: &str, run: &str) -> Vec<u8> {
    let op = op_shape(connector, op);
    let run_id = run_uuid(run);
    let mut form = match op {
        Op::Call { .. } => CALL,
        Op::Keyed { .. } => KEYED,
        Op::Other(_) => OTHER,
    };
    if run_id.is_none() {
        form |= RUN_AS_TEXT;
    }
    let mut out = vec![VERSION, kid_hint, form];
    match run_id {
        Some(id) => out.extend_from_slice(id.as_bytes()),
        None => put_text(&mut out, run),
    }
    match op {
        Op::Call { prefix, id, round } => {
            out.push(round);
            out.push(u8::try_from(prefix.len()).expect("a prefix is at most 32 bytes"));
            out.extend_from_slice(prefix.as_bytes());
            out.extend_from_slice(id.as_bytes());
        }
        Op::Keyed { hash, round } => {
            out.push(round);
            out.extend_from_slice(&hash);
        }
        Op::Other(op) => put_text(&mut out, op),
    }
    out
}

/// `text` after its length as two bytes. Temporal's IDs are at most 1,000 bytes by default;
/// a longer one is cut at 65,535, and its task ID (far past `MAX_TASK_ID_LEN`) never
/// verifies, as every ID that long.
fn put_text(out: &mut Vec<u8>, text: &str) {
    let len = u16::try_from(text.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&text.as_bytes()[..usize::from(len)]);
}

/// The operation ID and run ID a verified `body` holds; `None` for anything [`body`] does not
/// write (checked although the MAC already vouches for it).
pub(super) fn parse(body: &[u8], connector: &str) -> Option<(String, String)> {
    let mut r = Reader(body);
    let [version, _kid_hint, form]: [u8; HEADER_LEN] = r.array()?;
    if version != VERSION || form & !(SHAPE_BITS | RUN_AS_TEXT) != 0 {
        return None;
    }
    let run = match form & RUN_AS_TEXT {
        0 => Uuid::from_bytes(r.array()?).hyphenated().to_string(),
        _ => r.text()?.to_owned(),
    };
    let op = match form & SHAPE_BITS {
        CALL => {
            let [round, len] = r.array()?;
            let prefix = std::str::from_utf8(r.take(usize::from(len))?).ok()?;
            let id = Uuid::from_bytes(r.array()?);
            (usize::from(len) <= MAX_PREFIX_LEN && round >= 1).then_some(Op::Call {
                prefix,
                id,
                round,
            })?
        }
        KEYED => {
            let [round] = r.array()?;
            let hash = r.array()?;
            (round >= 1).then_some(Op::Keyed { hash, round })?
        }
        OTHER => Op::Other(r.text()?),
        _ => return None,
    };
    r.0.is_empty().then(|| (render_op(connector, &op), run))
}

/// Reads a body front to back; every read fails past its end.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (taken, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(taken)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    fn text(&mut self) -> Option<&'a str> {
        let len = u16::from_be_bytes(self.array()?);
        std::str::from_utf8(self.take(usize::from(len))?).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::idempotency::{FingerprintKey, IdempotencyKey, operation_id};
    use crate::operation_id::call_operation_id;

    const RUN: &str = "019a7c3e-5b2d-7f10-8e4a-6c9d0b1a2f3e";

    fn round_trip(connector: &str, op: &str, run: &str) -> Vec<u8> {
        let body = body(7, connector, op, run);
        assert_eq!(
            parse(&body, connector),
            Some((op.to_owned(), run.to_owned())),
            "{op:?} {run:?}"
        );
        body
    }

    fn keyed_op(connector: &str) -> String {
        operation_id(
            &FingerprintKey::from_bytes([3; 32]),
            connector,
            "owner",
            "tool",
            &IdempotencyKey::new("k").unwrap(),
        )
    }

    #[test]
    fn the_connectors_own_operation_ids_take_their_shapes() {
        let call = call_operation_id("acme", "p7", Uuid::new_v4());
        assert!(matches!(
            op_shape("acme", &call),
            Op::Call {
                prefix: "p7",
                round: 1,
                ..
            }
        ));
        let keyed = keyed_op("acme");
        assert!(matches!(
            op_shape("acme", &keyed),
            Op::Keyed { round: 1, .. }
        ));
        let third = format!("{keyed}~r3");
        assert!(matches!(
            op_shape("acme", &third),
            Op::Keyed { round: 3, .. }
        ));
        // Sizes: a call with the default 8-character prefix, a keyed call.
        assert_eq!(
            round_trip("acme", &call, RUN).len(),
            HEADER_LEN + 16 + 2 + "p7".len() + 16
        );
        assert_eq!(round_trip("acme", &keyed, RUN).len(), 3 + 16 + 1 + 32);
    }

    #[test]
    fn any_other_operation_id_is_held_as_text() {
        let id = Uuid::new_v4();
        for (connector, op) in [
            ("other", call_operation_id("acme", "p7", id)),
            ("acme", call_operation_id("acme", &"p".repeat(33), id)),
            ("acme", format!("acme-p7-{}", id.simple())),
            (
                "acme",
                format!("acme-p7-{}", id.hyphenated().to_string().to_uppercase()),
            ),
            (
                "acme",
                format!("{}~r1", call_operation_id("acme", "p7", id)),
            ),
            (
                "acme",
                format!("{}~r02", call_operation_id("acme", "p7", id)),
            ),
            (
                "acme",
                format!("{}~r256", call_operation_id("acme", "p7", id)),
            ),
            ("acme", "acme-idem-short".into()),
            ("acme", format!("{}=", keyed_op("acme"))),
            ("acme", String::new()),
            ("", "-p-x".into()),
        ] {
            assert_eq!(op_shape(connector, &op), Op::Other(&op), "{op:?}");
            round_trip(connector, &op, RUN);
        }
        // Reserved operations put their kind in the prefix; still a call's shape.
        let reserved = call_operation_id("acme", "p7-reserved", id);
        assert!(matches!(
            op_shape("acme", &reserved),
            Op::Call {
                prefix: "p7-reserved",
                ..
            }
        ));
    }

    #[test]
    fn run_ids_are_uuids_when_temporal_wrote_them_so_else_text() {
        let v4 = Uuid::new_v4().to_string();
        for run in [RUN, v4.as_str(), "00000000-0000-0000-0000-000000000000"] {
            assert_eq!(run_uuid(run).map(|u| u.to_string()).as_deref(), Some(run));
        }
        for run in [
            &RUN.to_uppercase(),
            "{019a7c3e-5b2d-7f10-8e4a-6c9d0b1a2f3e}",
            "run",
            "",
        ] {
            assert_eq!(run_uuid(run), None, "{run}");
            let body = round_trip("acme", "acme-p-x", run);
            assert_eq!(body[2] & RUN_AS_TEXT, RUN_AS_TEXT);
        }
    }

    #[test]
    fn bodies_not_written_here_are_refused() {
        let good = body(7, "acme", &keyed_op("acme"), RUN);
        let mut cases = vec![Vec::new(), good[..good.len() - 1].to_vec()];
        let mut longer = good.clone();
        longer.push(0);
        cases.push(longer);
        for (at, value) in [(0, 1), (0, 3), (2, 3), (2, 0b1000), (HEADER_LEN + 16, 0)] {
            let mut bad = good.clone();
            bad[at] = value;
            cases.push(bad);
        }
        // A call's prefix past the limit, and a prefix that is not UTF-8.
        let call = body(7, "acme", &call_operation_id("acme", "p", Uuid::nil()), RUN);
        let mut long = call[..HEADER_LEN + 16].to_vec();
        long.extend([1, 33]);
        long.extend([b'p'; 33]);
        long.extend([0; 16]);
        cases.push(long);
        let mut invalid = call.clone();
        invalid[HEADER_LEN + 18] = 0xff;
        cases.push(invalid);
        for bad in cases {
            assert_eq!(parse(&bad, "acme"), None, "{bad:?}");
        }
    }
}
