//! Bearer-token checks: pure functions of the token, the issuer's keys and the configuration,
//! so every rule is testable without a network.

use std::collections::BTreeSet;

use jsonwebtoken::{DecodingKey, Validation, jwk::JwkSet};
use serde::Deserialize;

use super::config::AuthConfig;
use crate::task_ref::CallerScope;

/// Who a verified token speaks for. Tasks and idempotency keys are scoped to (issuer, subject),
/// so a renewed token, or another replica, keeps the same scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedCaller {
    pub issuer: String,
    pub subject: String,
    pub scopes: BTreeSet<String>,
}

/// The OAuth scopes a verified token carries, in the HTTP request's extensions beside its
/// [`CallerScope`]: tools that need a scope of their own check it (R-OPS-5).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GrantedScopes(pub BTreeSet<String>);

impl VerifiedCaller {
    pub fn scope(&self) -> CallerScope {
        CallerScope::Subject {
            issuer: self.issuer.clone(),
            subject: self.subject.clone(),
        }
    }
}

/// Why a request was not let in. The messages go back to the client (they help it recover)
/// and to logs; none contains the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No `Authorization: Bearer` header: the client should start the OAuth flow.
    #[error("no bearer token")]
    Missing,
    /// The token is not acceptable (malformed, wrong signature, issuer, audience, expired...).
    #[error("invalid token: {0}")]
    Invalid(String),
    /// A good token without every required scope.
    #[error("the token lacks the required scopes: {}", .missing.join(" "))]
    InsufficientScope { missing: Vec<String> },
    /// The issuer's keys could not be fetched: not the client's fault.
    #[error("the identity provider's keys are unavailable: {0}")]
    KeysUnavailable(String),
}

impl AuthError {
    /// A fixed word for the refusal, the metrics' label (R-RUN-6): never the token or why it
    /// was invalid.
    pub const fn reason(&self) -> &'static str {
        match self {
            Self::Missing => "missing_token",
            Self::Invalid(_) => "invalid_token",
            Self::InsufficientScope { .. } => "insufficient_scope",
            Self::KeysUnavailable(_) => "keys_unavailable",
        }
    }
}

/// The token of an `Authorization` header value (`Bearer <token>`, scheme case-insensitive).
pub fn bearer_token(header: Option<&str>) -> Result<&str, AuthError> {
    let value = header.ok_or(AuthError::Missing)?.trim();
    let (scheme, token) = value.split_once(' ').ok_or_else(|| {
        AuthError::Invalid("the Authorization header is not `Bearer <token>`".into())
    })?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(AuthError::Invalid(format!(
            "the Authorization scheme is {scheme:?}, not Bearer"
        )));
    }
    let token = token.trim();
    if token.is_empty() {
        return Err(AuthError::Missing);
    }
    Ok(token)
}

/// The key id a token names, for picking (or refreshing) the issuer's keys.
pub fn key_id(token: &str) -> Result<Option<String>, AuthError> {
    jsonwebtoken::decode_header(token)
        .map(|h| h.kid)
        .map_err(|e| AuthError::Invalid(format!("malformed token: {e}")))
}

#[derive(Deserialize)]
struct Claims {
    iss: String,
    sub: String,
    #[serde(default)]
    scope: Option<String>,
    /// Some providers put scopes in `scp`, as a list or a space-separated string.
    #[serde(default)]
    scp: Option<ScopeClaim>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ScopeClaim {
    Text(String),
    List(Vec<String>),
}

/// Verifies `token` against the issuer's `keys` and the configuration: signature with an
/// allowed algorithm and a key of the issuer's set, `iss`, `aud`, `exp` (required), `nbf`,
/// a non-empty `sub`, and the required scopes.
pub fn verify(
    token: &str,
    keys: &JwkSet,
    config: &AuthConfig,
) -> Result<VerifiedCaller, AuthError> {
    let header = jsonwebtoken::decode_header(token)
        .map_err(|e| AuthError::Invalid(format!("malformed token: {e}")))?;
    check_type(header.typ.as_deref(), config.accept_untyped_tokens)?;
    if !config.algorithms.contains(&header.alg) {
        return Err(AuthError::Invalid(format!(
            "algorithm {:?} is not accepted",
            header.alg
        )));
    }
    let candidates: Vec<_> = match &header.kid {
        Some(kid) => keys.find(kid).into_iter().collect(),
        None => keys.keys.iter().collect(),
    };
    if candidates.is_empty() {
        return Err(AuthError::Invalid(
            "no key of the issuer matches the token's key id".into(),
        ));
    }
    let mut validation = Validation::new(header.alg);
    validation.set_issuer(&[&config.issuer]);
    validation.set_audience(&[&config.audience]);
    validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
    validation.validate_nbf = true;
    validation.leeway = config.leeway.as_secs();
    let mut last = None;
    for jwk in candidates {
        // Keys meant for encryption, or of another family than the token's algorithm, cannot
        // have signed it (and would only hide the real reason with a key-mismatch error).
        if jwk.common.public_key_use == Some(jsonwebtoken::jwk::PublicKeyUse::Encryption) {
            continue;
        }
        // A key that names its algorithm signs with that one only: a token claiming another
        // must not be checked with it (RFC 7517 `alg`).
        if jwk
            .common
            .key_algorithm
            .is_some_and(|alg| alg != jsonwebtoken::jwk::KeyAlgorithm::from(header.alg))
        {
            continue;
        }
        let Ok(key) = DecodingKey::from_jwk(jwk) else {
            continue;
        };
        if key.family() != header.alg.family() {
            continue;
        }
        match jsonwebtoken::decode::<Claims>(token, &key, &validation) {
            Ok(data) => return caller(data.claims, config),
            Err(e) => last = Some(e),
        }
    }
    Err(AuthError::Invalid(match last {
        Some(e) => describe(&e),
        None => "no usable key of the issuer matches the token".into(),
    }))
}

/// The token's `typ` must say access token: `at+jwt` (RFC 9068 section 4, also as
/// `application/at+jwt`), so that no other JWT the issuer signs for this audience (an ID
/// token, a logout or DPoP proof, a security event) is taken for one. With `untyped` (the
/// auth file's `accept_untyped_tokens`, for providers that do not type access tokens) the
/// generic `JWT` and a missing `typ` pass too; other types never do.
fn check_type(typ: Option<&str>, untyped: bool) -> Result<(), AuthError> {
    let t = typ.map(|t| t.to_ascii_lowercase());
    let t = t
        .as_deref()
        .map(|t| t.strip_prefix("application/").unwrap_or(t));
    match t {
        Some("at+jwt") => return Ok(()),
        None | Some("jwt") if untyped => return Ok(()),
        _ => {}
    }
    let shown = typ.map_or_else(|| "none".to_owned(), |t| format!("{t:?}"));
    let hint = if matches!(t, None | Some("jwt")) {
        "; if the identity provider does not type its access tokens, set \
         auth.accept_untyped_tokens: true in --auth-config"
    } else {
        ""
    };
    Err(AuthError::Invalid(format!(
        "the token's type {shown} is not an access token (at+jwt, RFC 9068){hint}"
    )))
}

fn caller(claims: Claims, config: &AuthConfig) -> Result<VerifiedCaller, AuthError> {
    if claims.sub.is_empty() {
        return Err(AuthError::Invalid("the token has an empty subject".into()));
    }
    let mut scopes = BTreeSet::new();
    if let Some(s) = &claims.scope {
        scopes.extend(s.split_whitespace().map(str::to_owned));
    }
    match claims.scp {
        Some(ScopeClaim::Text(s)) => scopes.extend(s.split_whitespace().map(str::to_owned)),
        Some(ScopeClaim::List(l)) => scopes.extend(l),
        None => {}
    }
    let missing: Vec<String> = config
        .required_scopes
        .iter()
        .filter(|s| !scopes.contains(*s))
        .cloned()
        .collect();
    if !missing.is_empty() {
        return Err(AuthError::InsufficientScope { missing });
    }
    Ok(VerifiedCaller {
        issuer: claims.iss,
        subject: claims.sub,
        scopes,
    })
}

/// A short reason for the client, from jsonwebtoken's error kind.
fn describe(e: &jsonwebtoken::errors::Error) -> String {
    use jsonwebtoken::errors::ErrorKind as K;
    match e.kind() {
        K::ExpiredSignature => "the token has expired".into(),
        K::ImmatureSignature => "the token is not valid yet (nbf)".into(),
        K::InvalidIssuer => "the token's issuer is not trusted".into(),
        K::InvalidAudience => "the token is not for this resource (aud)".into(),
        K::InvalidSignature => "the token's signature does not verify".into(),
        K::MissingRequiredClaim(c) => format!("the token has no {c} claim"),
        K::InvalidAlgorithm => "the token's algorithm does not match its key".into(),
        _ => format!("the token was rejected: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use aws_lc_rs::{
        rand::SystemRandom,
        signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair},
    };
    use jsonwebtoken::{Algorithm, EncodingKey, Header, jwk::Jwk};
    use serde_json::{Value, json};

    use super::*;

    struct Issuer {
        key: EncodingKey,
        jwk: Jwk,
    }

    fn issuer(kid: &str) -> Issuer {
        let pkcs8 =
            EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &SystemRandom::new())
                .unwrap();
        let key = EncodingKey::from_ec_der(pkcs8.as_ref());
        let mut jwk = Jwk::from_encoding_key(&key, Algorithm::ES256).unwrap();
        jwk.common.key_id = Some(kid.into());
        Issuer { key, jwk }
    }

    fn config() -> AuthConfig {
        AuthConfig::parse(
            "auth:\n  resource: https://mcp.example.com/mcp\n  issuer: https://idp.example.com/\n  required_scopes: [tools]\n  leeway: 0s\n",
        )
        .unwrap()
    }

    fn now() -> i64 {
        jsonwebtoken::get_current_timestamp() as i64
    }

    fn good_claims() -> Value {
        json!({
            "iss": "https://idp.example.com/",
            "sub": "alice",
            "aud": "https://mcp.example.com/mcp",
            "exp": now() + 300,
            "scope": "tools other",
        })
    }

    fn mint(issuer: &Issuer, kid: Option<&str>, claims: &Value) -> String {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = kid.map(str::to_owned);
        header.typ = Some("at+jwt".into());
        jsonwebtoken::encode(&header, claims, &issuer.key).unwrap()
    }

    fn keys(issuers: &[&Issuer]) -> JwkSet {
        JwkSet {
            keys: issuers.iter().map(|i| i.jwk.clone()).collect(),
        }
    }

    #[test]
    fn a_good_token_names_its_caller() {
        let idp = issuer("k1");
        let token = mint(&idp, Some("k1"), &good_claims());
        let caller = verify(&token, &keys(&[&idp]), &config()).unwrap();
        assert_eq!(caller.subject, "alice");
        assert_eq!(caller.issuer, "https://idp.example.com/");
        assert!(caller.scopes.contains("tools"));
        assert_eq!(
            caller.scope(),
            CallerScope::Subject {
                issuer: "https://idp.example.com/".into(),
                subject: "alice".into()
            }
        );
        // No kid: every key of the set is tried.
        let token = mint(&idp, None, &good_claims());
        assert!(verify(&token, &keys(&[&issuer("k0"), &idp]), &config()).is_ok());
    }

    #[test]
    fn only_access_token_types_are_accepted() {
        let idp = issuer("k1");
        let set = keys(&[&idp]);
        let typed = |typ: Option<&str>| {
            let mut header = Header::new(Algorithm::ES256);
            header.kid = Some("k1".into());
            header.typ = typ.map(str::to_owned);
            jsonwebtoken::encode(&header, &good_claims(), &idp.key).unwrap()
        };
        let untyped = AuthConfig {
            accept_untyped_tokens: true,
            ..config()
        };
        for ok in [Some("at+jwt"), Some("application/at+JWT")] {
            assert!(verify(&typed(ok), &set, &config()).is_ok(), "{ok:?}");
            assert!(verify(&typed(ok), &set, &untyped).is_ok(), "{ok:?}");
        }
        // RFC 9068: a generic or missing type is refused unless the operator opted in.
        for generic in [None, Some("JWT"), Some("jwt")] {
            let refused = verify(&typed(generic), &set, &config()).unwrap_err();
            assert!(
                matches!(&refused, AuthError::Invalid(r) if r.contains("accept_untyped_tokens")),
                "{refused:?}"
            );
            assert!(
                verify(&typed(generic), &set, &untyped).is_ok(),
                "{generic:?}"
            );
        }
        for bad in ["dpop+jwt", "logout+jwt", "secevent+jwt", "id_token+jwt"] {
            for config in [config(), untyped.clone()] {
                let refused = verify(&typed(Some(bad)), &set, &config).unwrap_err();
                assert!(
                    matches!(&refused, AuthError::Invalid(r) if r.contains(bad) && r.contains("at+jwt")),
                    "{refused:?}"
                );
            }
        }
    }

    #[test]
    fn scp_lists_and_strings_count_as_scopes() {
        let idp = issuer("k1");
        for scp in [json!(["tools"]), json!("x tools")] {
            let mut claims = good_claims();
            claims.as_object_mut().unwrap().remove("scope");
            claims["scp"] = scp;
            let token = mint(&idp, Some("k1"), &claims);
            assert!(verify(&token, &keys(&[&idp]), &config()).is_ok());
        }
    }

    #[test]
    fn a_key_that_names_its_algorithm_checks_only_tokens_of_that_algorithm() {
        let idp = issuer("k1");
        let token = mint(&idp, Some("k1"), &good_claims());
        let mut bound = keys(&[&idp]);
        bound.keys[0].common.key_algorithm = Some(jsonwebtoken::jwk::KeyAlgorithm::ES384);
        let refused = verify(&token, &bound, &config()).unwrap_err();
        assert!(
            matches!(&refused, AuthError::Invalid(reason) if reason.contains("no usable key")),
            "{refused:?}"
        );
        bound.keys[0].common.key_algorithm = None;
        assert!(verify(&token, &bound, &config()).is_ok());
    }

    #[test]
    fn every_bad_token_is_refused_with_its_reason() {
        let idp = issuer("k1");
        let other = issuer("k1");
        let set = keys(&[&idp]);
        let with = |k: &str, v: Value| {
            let mut c = good_claims();
            c[k] = v;
            c
        };
        let without = |k: &str| {
            let mut c = good_claims();
            c.as_object_mut().unwrap().remove(k);
            c
        };
        let cases: Vec<(String, &str)> = vec![
            (
                mint(&idp, Some("k1"), &with("iss", json!("https://evil/"))),
                "issuer",
            ),
            (
                mint(&idp, Some("k1"), &with("aud", json!("https://other/"))),
                "aud",
            ),
            (
                mint(&idp, Some("k1"), &with("exp", json!(now() - 10))),
                "expired",
            ),
            (
                mint(&idp, Some("k1"), &with("nbf", json!(now() + 600))),
                "nbf",
            ),
            (mint(&idp, Some("k1"), &without("exp")), "exp"),
            (mint(&idp, Some("k1"), &without("sub")), "sub"),
            (
                mint(&idp, Some("k1"), &with("sub", json!(""))),
                "empty subject",
            ),
            (mint(&other, Some("k1"), &good_claims()), "signature"),
            (mint(&idp, Some("k9"), &good_claims()), "key id"),
            (
                jsonwebtoken::encode(
                    &Header {
                        typ: Some("at+jwt".into()),
                        ..Header::new(Algorithm::HS256)
                    },
                    &good_claims(),
                    &EncodingKey::from_secret(b"guess").unwrap(),
                )
                .unwrap(),
                "not accepted",
            ),
            ("not.a.jwt".into(), "malformed"),
        ];
        for (token, reason) in cases {
            match verify(&token, &set, &config()) {
                Err(AuthError::Invalid(msg)) => assert!(msg.contains(reason), "{reason}: {msg}"),
                other => panic!("{reason}: {other:?}"),
            }
        }
        // An unsigned token (alg none) never verifies.
        let none = format!(
            "{}.{}.",
            base64::Engine::encode(
                &base64::engine::general_purpose::URL_SAFE_NO_PAD,
                r#"{"alg":"none"}"#
            ),
            base64::Engine::encode(
                &base64::engine::general_purpose::URL_SAFE_NO_PAD,
                good_claims().to_string()
            )
        );
        assert!(matches!(
            verify(&none, &set, &config()),
            Err(AuthError::Invalid(_))
        ));
    }

    #[test]
    fn missing_scopes_are_named() {
        let idp = issuer("k1");
        let mut claims = good_claims();
        claims["scope"] = json!("other");
        let token = mint(&idp, Some("k1"), &claims);
        assert_eq!(
            verify(&token, &keys(&[&idp]), &config()),
            Err(AuthError::InsufficientScope {
                missing: vec!["tools".into()]
            })
        );
    }

    #[test]
    fn bearer_header_parsing() {
        assert_eq!(bearer_token(Some("Bearer abc")), Ok("abc"));
        assert_eq!(bearer_token(Some("bearer  abc ")), Ok("abc"));
        assert_eq!(bearer_token(None), Err(AuthError::Missing));
        assert!(matches!(
            bearer_token(Some("Basic abc")),
            Err(AuthError::Invalid(_))
        ));
        assert!(matches!(
            bearer_token(Some("abc")),
            Err(AuthError::Invalid(_))
        ));
    }
}

/// Property tests of the `Authorization` header (R-CON-51).
#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn an_authorization_header_of_any_text_gives_a_token_or_an_error(value in "\\PC{0,80}") {
            if let Ok(token) = bearer_token(Some(&value)) {
                prop_assert!(!token.is_empty());
                prop_assert!(value.contains(token));
            }
        }

        /// The token a header carries reads back, whatever the scheme's case and the spaces.
        #[test]
        fn a_bearer_header_reads_back_as_its_token(
            token in "[A-Za-z0-9._~+/=-]{1,60}",
            scheme in prop::sample::select(&["Bearer", "bearer", "BEARER", "bEaReR"][..]),
            pad in " {0,3}",
        ) {
            let header = format!("{pad}{scheme} {pad}{token}{pad}");
            prop_assert_eq!(bearer_token(Some(&header)), Ok(token.as_str()));
        }

        #[test]
        fn a_token_of_any_text_names_a_key_id_or_is_malformed(token in "\\PC{0,120}") {
            let _ = key_id(&token);
        }
    }
}
