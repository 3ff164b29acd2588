//! RFC 7523 client assertions for `private_key_jwt` (R-PRX-15): a JWT signed with the client's
//! private key, by `jsonwebtoken` (aws-lc-rs). The key is given as PEM: PKCS#8 (`BEGIN PRIVATE
//! KEY`, what `openssl genpkey` writes) for every algorithm, or PKCS#1 (`BEGIN RSA PRIVATE KEY`)
//! for RSA. Errors never hold the key.

use base64::Engine as _;
use jsonwebtoken::{Algorithm, EncodingKey, Header};

use super::config::ClientCredentials;

/// RFC 7523 section 2.2.
pub const CLIENT_ASSERTION_TYPE: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";
/// How long a client assertion is valid, in seconds.
pub const ASSERTION_LIFETIME: u64 = 60;

/// The key that signs client assertions with `algorithm`, from a PEM private key; none if the
/// PEM holds no key of the algorithm's family (checked by signing once).
pub fn signing_key(pem: &str, algorithm: Algorithm) -> Option<EncodingKey> {
    use jsonwebtoken::Algorithm::*;
    let (label, der) = pem_der(pem)?;
    let key = match (algorithm, label.as_str()) {
        (RS256 | RS384 | RS512 | PS256 | PS384 | PS512, "RSA PRIVATE KEY") => {
            EncodingKey::from_rsa_der(&der)
        }
        (RS256 | RS384 | RS512 | PS256 | PS384 | PS512, "PRIVATE KEY") => {
            EncodingKey::from_rsa_der(pkcs8_private_key(&der)?)
        }
        (ES256 | ES384, "PRIVATE KEY") => EncodingKey::from_ec_der(&der),
        (EdDSA, "PRIVATE KEY") => EncodingKey::from_ed_der(&der),
        _ => return None,
    };
    jsonwebtoken::encode(&Header::new(algorithm), &serde_json::json!({}), &key)
        .ok()
        .map(|_| key)
}

/// A client assertion (RFC 7523 section 3): `iss` and `sub` the client id, `aud` the token
/// endpoint, issued at `now` (seconds since the epoch), valid [`ASSERTION_LIFETIME`] seconds,
/// with a fresh `jti`.
pub fn client_assertion(
    c: &ClientCredentials,
    token_url: &url::Url,
    key_file: &std::path::Path,
    algorithm: Algorithm,
    key_id: Option<String>,
    now: u64,
) -> Result<String, String> {
    let pem = std::fs::read_to_string(key_file).map_err(|e| {
        format!(
            "cannot read the private key (oauth.private_key_file): {}",
            e.kind()
        )
    })?;
    let key = signing_key(&pem, algorithm).ok_or_else(|| {
        format!(
            "oauth.private_key_file holds no PEM private key for {algorithm:?} \
             (check oauth.signing_algorithm)"
        )
    })?;
    let mut header = Header::new(algorithm);
    header.kid = key_id;
    let claims = serde_json::json!({
        "iss": c.client_id,
        "sub": c.client_id,
        "aud": token_url.as_str(),
        "iat": now,
        "exp": now + ASSERTION_LIFETIME,
        "jti": uuid::Uuid::new_v4().to_string(),
    });
    jsonwebtoken::encode(&header, &claims, &key)
        .map_err(|e| format!("cannot sign the client assertion: {:?}", e.kind()))
}

/// The label and DER bytes of the first PEM block in `pem`.
fn pem_der(pem: &str) -> Option<(String, Vec<u8>)> {
    let start = pem.find("-----BEGIN ")? + "-----BEGIN ".len();
    let label_end = start + pem[start..].find("-----")?;
    let label = pem[start..label_end].to_owned();
    let body_start = label_end + "-----".len();
    let end = body_start + pem[body_start..].find(&format!("-----END {label}-----"))?;
    let body: String = pem[body_start..end]
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .ok()?;
    Some((label, der))
}

/// The `privateKey` of a PKCS#8 `PrivateKeyInfo` (RFC 5208: a SEQUENCE of the version, the
/// algorithm and this OCTET STRING): for RSA, the PKCS#1 key.
fn pkcs8_private_key(der: &[u8]) -> Option<&[u8]> {
    let (tag, info, _) = tlv(der)?;
    if tag != 0x30 {
        return None;
    }
    let (_version, _, rest) = tlv(info)?;
    let (_algorithm, _, rest) = tlv(rest)?;
    let (tag, key, _) = tlv(rest)?;
    (tag == 0x04).then_some(key)
}

/// One DER element: its tag, its contents and what follows it.
fn tlv(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |l, b| l << 8 | usize::from(*b));
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn der_elements_are_read_with_short_and_long_lengths() {
        assert_eq!(
            tlv(&[0x04, 2, 7, 8, 9]),
            Some((4, &[7u8, 8][..], &[9u8][..]))
        );
        let long = [&[0x04, 0x81, 3][..], &[1, 2, 3]].concat();
        assert_eq!(tlv(&long), Some((4, &[1u8, 2, 3][..], &[][..])));
        assert_eq!(tlv(&[0x04, 5, 1]), None, "shorter than it says");
        assert_eq!(pem_der("no pem"), None);
        assert_eq!(
            pem_der("-----BEGIN X-----\nAAEC\n-----END X-----\n"),
            Some(("X".into(), vec![0, 1, 2]))
        );
    }

    #[test]
    fn a_key_of_another_family_signs_nothing() {
        assert!(
            signing_key("-----BEGIN X-----\nAAEC\n-----END X-----", Algorithm::ES256).is_none()
        );
        assert!(signing_key("", Algorithm::RS256).is_none());
    }
}
