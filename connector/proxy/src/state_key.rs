//! The proxy's state key (R-PRX-35): an HMAC-SHA256 key that signs the `requestState` the
//! proxy makes for an upstream task waiting for input (R-PRX-29), so that only a state this
//! proxy made is honoured, and only in the round that follows the one that made it.
//!
//! Every worker on a task queue verifies what another made, so they share the key:
//! [`STATE_KEY_ENV`] (base64, at least [`MIN_KEY_BYTES`] random bytes) and, during a rotation,
//! [`PREVIOUS_STATE_KEYS_ENV`]. Without one, each process makes a random key of its own
//! ([`StateKeys::per_process`]): a state then dies with the process, which loses nothing for a
//! stdio child's or a factory connection's task (it dies with its connection anyway, R-PRX-28),
//! but would lose an HTTP upstream's task, which outlives the process; so such a task's input
//! is relayed only with a shared key. The key never leaves this type: `Debug` prints `***`, and
//! what goes into a state is its MAC and a key ID (a MAC of a constant).

use std::{fmt, sync::OnceLock};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use hmac::{Hmac, KeyInit as _, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq as _;

type HmacSha256 = Hmac<Sha256>;

/// The environment variable holding the proxy's state key (base64).
pub const STATE_KEY_ENV: &str = "MCP_PROXY_STATE_KEY";
/// Earlier state keys (base64, separated by commas or whitespace) whose states still verify.
pub const PREVIOUS_STATE_KEYS_ENV: &str = "MCP_PROXY_STATE_KEYS_PREVIOUS";
/// Fewest key bytes accepted: HMAC-SHA256's own 256 bits.
pub const MIN_KEY_BYTES: usize = 32;
/// Length of a [`StateKey::id`].
const KEY_ID_LEN: usize = 8;

/// One state key. Its bytes never leave it.
#[derive(Clone)]
pub struct StateKey(Vec<u8>);

impl fmt::Debug for StateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("StateKey(***)")
    }
}

/// Why a state key was refused; never quotes key material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateKeyError {
    #[error(
        "{STATE_KEY_ENV} is set but empty; set it to at least {MIN_KEY_BYTES} random bytes in base64 (for example `openssl rand -base64 32`), the same on every proxy worker, or unset it"
    )]
    Empty,
    #[error("{0} is not valid UTF-8; it must be base64 text")]
    NotUnicode(&'static str),
    #[error(
        "{STATE_KEY_ENV} is not valid base64 (standard or URL-safe alphabet); generate one with `openssl rand -base64 32`"
    )]
    NotBase64,
    #[error(
        "{STATE_KEY_ENV} decodes to {bytes} bytes; at least {MIN_KEY_BYTES} random bytes are required (for example `openssl rand -base64 32`)"
    )]
    TooShort { bytes: usize },
    #[error("entry {position} of {PREVIOUS_STATE_KEYS_ENV} is unusable: {reason}")]
    Previous {
        position: usize,
        reason: Box<StateKeyError>,
    },
    #[error("{PREVIOUS_STATE_KEYS_ENV} is set but {STATE_KEY_ENV} is not; set the current key too")]
    PreviousWithoutCurrent,
}

/// Standard and URL-safe base64, padded or not: whatever tool made the key.
const LENIENT: GeneralPurposeConfig =
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent);
const STANDARD_LENIENT: GeneralPurpose = GeneralPurpose::new(&base64::alphabet::STANDARD, LENIENT);
const URL_SAFE_LENIENT: GeneralPurpose = GeneralPurpose::new(&base64::alphabet::URL_SAFE, LENIENT);

impl StateKey {
    /// Decodes a base64 key of at least [`MIN_KEY_BYTES`] bytes (surrounding whitespace and
    /// padding ignored).
    pub fn from_base64(text: &str) -> Result<Self, StateKeyError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(StateKeyError::Empty);
        }
        let bytes = STANDARD_LENIENT
            .decode(text)
            .or_else(|_| URL_SAFE_LENIENT.decode(text))
            .map_err(|_| StateKeyError::NotBase64)?;
        if bytes.len() < MIN_KEY_BYTES {
            return Err(StateKeyError::TooShort { bytes: bytes.len() });
        }
        Ok(Self(bytes))
    }

    fn random() -> Self {
        let mut bytes = vec![0u8; MIN_KEY_BYTES];
        getrandom::fill(&mut bytes).expect("the operating system's random number generator");
        Self(bytes)
    }

    fn mac(&self) -> HmacSha256 {
        HmacSha256::new_from_slice(&self.0).expect("HMAC takes keys of any length")
    }

    /// The key's public name, which a state carries so the verifier knows which key to try:
    /// HMAC(key, "kid"), cut short; it reveals nothing of the key.
    pub fn id(&self) -> String {
        let mut mac = self.mac();
        mac.update(b"kid");
        let mut id = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
        id.truncate(KEY_ID_LEN);
        id
    }

    /// The MAC of `body`, base64url.
    fn sign(&self, body: &[u8]) -> String {
        let mut mac = self.mac();
        mac.update(b"state:");
        mac.update(body);
        URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
    }

    /// Whether `tag` is the MAC of `body`, in constant time.
    fn verifies(&self, body: &[u8], tag: &str) -> bool {
        let expected = self.sign(body);
        expected.as_bytes().ct_eq(tag.as_bytes()).into()
    }
}

/// The key that signs new states and the earlier ones still accepted; see the module.
#[derive(Clone, Debug)]
pub struct StateKeys {
    current: StateKey,
    previous: Vec<StateKey>,
    /// Set from configuration (every worker has it), not made up by this process.
    shared: bool,
}

impl StateKeys {
    /// Keys given by the operator, the same on every worker: `current` signs, `previous`
    /// still verify.
    pub fn shared(current: StateKey, previous: Vec<StateKey>) -> Self {
        Self {
            current,
            previous,
            shared: true,
        }
    }

    /// This process's own random key (one per process, made on first use): a state it signs
    /// verifies nowhere else and dies with the process.
    pub fn per_process() -> Self {
        static KEY: OnceLock<StateKey> = OnceLock::new();
        Self {
            current: KEY.get_or_init(StateKey::random).clone(),
            previous: Vec::new(),
            shared: false,
        }
    }

    /// The keys in [`STATE_KEY_ENV`] and [`PREVIOUS_STATE_KEYS_ENV`]; [`StateKeys::per_process`]
    /// when neither is set; an error (naming the variable, never the value) when one is
    /// unusable.
    pub fn from_env() -> Result<Self, StateKeyError> {
        let read = |name: &'static str| {
            std::env::var_os(name)
                .map(|v| v.into_string().map_err(|_| StateKeyError::NotUnicode(name)))
                .transpose()
        };
        Self::from_values(read(STATE_KEY_ENV)?, read(PREVIOUS_STATE_KEYS_ENV)?)
    }

    fn from_values(
        current: Option<String>,
        previous: Option<String>,
    ) -> Result<Self, StateKeyError> {
        let previous = previous.as_deref().map(parse_previous).transpose()?;
        match (current, previous) {
            (Some(current), previous) => Ok(Self::shared(
                StateKey::from_base64(&current)?,
                previous.unwrap_or_default(),
            )),
            (None, Some(list)) if !list.is_empty() => Err(StateKeyError::PreviousWithoutCurrent),
            (None, _) => Ok(Self::per_process()),
        }
    }

    /// Whether every worker holds these keys (configured), rather than this process alone.
    pub fn is_shared(&self) -> bool {
        self.shared
    }

    /// `body` signed with the current key: `<key id>.<mac>`.
    pub fn sign(&self, body: &[u8]) -> String {
        format!("{}.{}", self.current.id(), self.current.sign(body))
    }

    /// Whether `signature` (as [`StateKeys::sign`] writes it) is a MAC of `body` under the
    /// current key or a previous one.
    pub fn verify(&self, body: &[u8], signature: &str) -> bool {
        let Some((id, tag)) = signature.split_once('.') else {
            return false;
        };
        std::iter::once(&self.current)
            .chain(&self.previous)
            .filter(|key| key.id() == id)
            .any(|key| key.verifies(body, tag))
    }
}

fn parse_previous(list: &str) -> Result<Vec<StateKey>, StateKeyError> {
    list.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|entry| !entry.is_empty())
        .enumerate()
        .map(|(i, entry)| {
            StateKey::from_base64(entry).map_err(|reason| StateKeyError::Previous {
                position: i + 1,
                reason: Box::new(reason),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    const B: &str = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8";

    fn key(text: &str) -> StateKey {
        StateKey::from_base64(text).unwrap()
    }

    #[test]
    fn states_verify_under_the_current_or_a_previous_key_only() {
        let old = StateKeys::shared(key(A), vec![]);
        let rotated = StateKeys::shared(key(B), vec![key(A)]);
        let signed = old.sign(b"body");
        assert!(old.verify(b"body", &signed) && rotated.verify(b"body", &signed));
        assert!(!old.verify(b"other", &signed));
        assert!(!StateKeys::shared(key(B), vec![]).verify(b"body", &signed));
        // A key ID that names the key, with another key's MAC: refused.
        let (id, _) = signed.split_once('.').unwrap();
        let (_, other_tag) = StateKeys::shared(key(B), vec![])
            .sign(b"body")
            .split_once('.')
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
            .unwrap();
        assert!(!old.verify(b"body", &format!("{id}.{other_tag}")));
        for broken in ["", "no-dot", ".", "x.y"] {
            assert!(!old.verify(b"body", broken), "{broken}");
        }
        // A process's own key verifies only there (one per process).
        let own = StateKeys::per_process();
        assert!(!own.is_shared() && own.verify(b"b", &StateKeys::per_process().sign(b"b")));
        assert!(!old.verify(b"b", &own.sign(b"b")));
    }

    #[test]
    fn keys_are_read_from_the_environment_and_errors_never_quote_them() {
        let read = |current: Option<&str>, previous: Option<&str>| {
            StateKeys::from_values(current.map(str::to_owned), previous.map(str::to_owned))
        };
        assert!(read(Some(A), None).unwrap().is_shared());
        assert!(!read(None, None).unwrap().is_shared());
        assert!(!read(None, Some(" ")).unwrap().is_shared());
        let rotated = read(Some(B), Some(&format!("{A}, "))).unwrap();
        assert!(rotated.verify(b"x", &read(Some(A), None).unwrap().sign(b"x")));
        let short = "c2hvcnQ=";
        for (current, previous, wanted) in [
            (Some(""), None, StateKeyError::Empty),
            (Some("!!"), None, StateKeyError::NotBase64),
            (Some(short), None, StateKeyError::TooShort { bytes: 5 }),
            (None, Some(A), StateKeyError::PreviousWithoutCurrent),
        ] {
            let error = read(current, previous).unwrap_err();
            assert_eq!(error, wanted);
            assert!(!error.to_string().contains(short) && !error.to_string().contains(A));
        }
        let error = read(Some(A), Some(&format!("{B},{short}"))).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("entry 2 of MCP_PROXY_STATE_KEYS_PREVIOUS"),
            "{error}"
        );
        assert_eq!(format!("{:?}", key(A)), "StateKey(***)");
    }
}

/// Property tests of the state key's text and signatures (R-PRX-35, R-CON-51).
#[cfg(test)]
mod props {
    use super::*;
    use crate::props::{mutate, mutation};
    use proptest::prelude::*;

    proptest! {
        /// Key text of any kind is a key or an error, and an error never shows the text.
        #[test]
        fn key_text_of_any_kind_is_a_key_or_an_error_that_never_shows_it(text in "[A-Za-z0-9+/=_-]{8,60}|\\PC{8,60}") {
            if let Err(e) = StateKey::from_base64(&text).and_then(|_| parse_previous(&text).map(|_| ())) {
                prop_assert!(!e.to_string().contains(text.trim()));
            }
        }

        /// A signature verifies its body only; any changed byte of either is refused.
        #[test]
        fn a_signature_verifies_its_body_and_any_changed_byte_is_refused(
            key in prop::collection::vec(any::<u8>(), MIN_KEY_BYTES..64),
            body in "\\PC{0,60}",
            m in mutation(),
        ) {
            let keys = StateKeys::shared(StateKey(key), vec![]);
            let signature = keys.sign(body.as_bytes());
            prop_assert!(keys.verify(body.as_bytes(), &signature));
            if let Some(changed) = mutate(&signature, &m) {
                prop_assert!(!keys.verify(body.as_bytes(), &changed));
            }
            if let Some(changed) = mutate(&body, &m) {
                prop_assert!(!keys.verify(changed.as_bytes(), &signature));
            }
        }
    }
}
