//! The Temporal connection's settings as a binary's flags (or the proxy's `[temporal]` table)
//! give them, laid over Temporal's environment configuration (R-RUN-1): a setting given here
//! wins over `TEMPORAL_*` variables, which win over the `temporal.toml` profile. A connection
//! that fails says which setting to look at (R-RUN-2), and never shows the API key or a key
//! file's contents.

use std::{fmt, path::PathBuf, str::FromStr};

use serde::Deserialize;
use temporalio_client::{ClientOptions, Connection, ConnectionOptions};
use temporalio_common::envconfig::{
    ClientConfigProfile, ClientConfigTLS, DataSource, LoadClientConfigProfileOptions,
    load_client_config_profile,
};

use super::{ConnectError, TemporalConnection};

/// The connection settings given explicitly; `None` leaves a setting to Temporal's
/// environment configuration. `Debug` hides the API key.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ConnectionSettings {
    /// `--address`: `host:port` or a URL.
    pub address: Option<String>,
    /// `--namespace`.
    pub namespace: Option<String>,
    /// `--tls-enabled`: TLS on or off whatever else is set (without it: on with any other TLS
    /// setting or an API key).
    pub tls: Option<bool>,
    /// `--tls-ca`: the CA certificate (PEM) the server's certificate must chain to.
    pub tls_ca: Option<PathBuf>,
    /// `--tls-cert`: the client certificate (PEM) for mTLS.
    pub tls_cert: Option<PathBuf>,
    /// `--tls-key`: the client certificate's private key (PEM).
    pub tls_key: Option<PathBuf>,
    /// `--tls-server-name`: the name the server's certificate must carry (SNI).
    pub tls_server_name: Option<String>,
    /// `--api-key`: sent as `authorization: Bearer <key>`.
    pub api_key: Option<String>,
    /// `--profile`: the `temporal.toml` profile (else `TEMPORAL_PROFILE`, else `default`).
    pub profile: Option<String>,
    /// `--grpc-compression`: how gRPC messages to and from Temporal are compressed (R-RUN-7);
    /// `None` keeps the Temporal client's default, gzip.
    pub grpc_compression: Option<GrpcCompression>,
}

/// Transport compression of the gRPC messages to and from Temporal (R-RUN-7).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GrpcCompression {
    /// Gzip every request and accept gzipped answers: the Temporal client's default. It pays
    /// for large payloads sent to a remote server.
    #[default]
    Gzip,
    /// No compression: about 1.2 ms less CPU per call in the proxy on loopback, where bytes
    /// cost nothing.
    None,
}

impl FromStr for GrpcCompression {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "gzip" => Ok(GrpcCompression::Gzip),
            "none" => Ok(GrpcCompression::None),
            other => Err(format!(
                "unknown gRPC compression {other:?}: use gzip or none"
            )),
        }
    }
}

impl From<GrpcCompression> for temporalio_client::GrpcCompression {
    fn from(c: GrpcCompression) -> Self {
        match c {
            GrpcCompression::Gzip => temporalio_client::GrpcCompression::Gzip,
            GrpcCompression::None => temporalio_client::GrpcCompression::None,
        }
    }
}

impl fmt::Debug for ConnectionSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectionSettings")
            .field("address", &self.address)
            .field("namespace", &self.namespace)
            .field("tls", &self.tls)
            .field("tls_ca", &self.tls_ca)
            .field("tls_cert", &self.tls_cert)
            .field("tls_key", &self.tls_key)
            .field("tls_server_name", &self.tls_server_name)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("profile", &self.profile)
            .field("grpc_compression", &self.grpc_compression)
            .finish()
    }
}

impl ConnectionSettings {
    /// These settings, each one left unset taken from `fallback` (flags over a config file).
    pub fn or(self, fallback: ConnectionSettings) -> ConnectionSettings {
        ConnectionSettings {
            address: self.address.or(fallback.address),
            namespace: self.namespace.or(fallback.namespace),
            tls: self.tls.or(fallback.tls),
            tls_ca: self.tls_ca.or(fallback.tls_ca),
            tls_cert: self.tls_cert.or(fallback.tls_cert),
            tls_key: self.tls_key.or(fallback.tls_key),
            tls_server_name: self.tls_server_name.or(fallback.tls_server_name),
            api_key: self.api_key.or(fallback.api_key),
            profile: self.profile.or(fallback.profile),
            grpc_compression: self.grpc_compression.or(fallback.grpc_compression),
        }
    }

    /// `profile` (from the environment and `temporal.toml`) with these settings laid over it.
    pub fn apply(&self, mut profile: ClientConfigProfile) -> ClientConfigProfile {
        if let Some(address) = &self.address {
            profile.address = Some(address.clone());
        }
        if let Some(namespace) = &self.namespace {
            profile.namespace = Some(namespace.clone());
        }
        if let Some(key) = &self.api_key {
            profile.api_key = Some(key.clone());
        }
        let any_tls = self.tls_ca.is_some()
            || self.tls_cert.is_some()
            || self.tls_key.is_some()
            || self.tls_server_name.is_some();
        if self.tls == Some(false) {
            profile
                .tls
                .get_or_insert_with(ClientConfigTLS::default)
                .disabled = Some(true);
            return profile;
        }
        if !any_tls && self.tls.is_none() {
            return profile;
        }
        let tls = profile.tls.get_or_insert_with(ClientConfigTLS::default);
        tls.disabled = Some(false);
        let path = |p: &PathBuf| DataSource::Path(p.to_string_lossy().into_owned());
        if let Some(ca) = &self.tls_ca {
            tls.server_ca_cert = Some(path(ca));
        }
        if let Some(cert) = &self.tls_cert {
            tls.client_cert = Some(path(cert));
        }
        if let Some(key) = &self.tls_key {
            tls.client_key = Some(path(key));
        }
        if let Some(name) = &self.tls_server_name {
            tls.server_name = Some(name.clone());
        }
        profile
    }

    /// The connection and client options: Temporal's environment configuration (the profile
    /// of `--profile`) with these settings over it.
    pub fn options(&self) -> Result<(ConnectionOptions, ClientOptions), ConnectError> {
        let load = LoadClientConfigProfileOptions::builder()
            .maybe_config_file_profile(self.profile.clone())
            .build();
        let profile = load_client_config_profile(load, None).map_err(|e| {
            ConnectError::Config(match &self.profile {
                Some(name) => format!("--profile {name:?}: {e}"),
                None => e.to_string(),
            })
        })?;
        let profile = self.apply(profile);
        let namespace = profile
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned());
        let (has_cert, has_key) = profile
            .tls
            .as_ref()
            .map(|t| (t.client_cert.is_some(), t.client_key.is_some()))
            .unwrap_or_default();
        if has_cert != has_key {
            return Err(ConnectError::Config(
                "a client certificate needs its key and a key its certificate: give both \
                 --tls-cert and --tls-key (or TEMPORAL_TLS_CLIENT_CERT_PATH and \
                 TEMPORAL_TLS_CLIENT_KEY_PATH)"
                    .into(),
            ));
        }
        let mut conn = ConnectionOptions::try_from(profile).map_err(|e| {
            ConnectError::Config(format!(
                "{e} (a file named by --tls-ca, --tls-cert or --tls-key, or its \
                 TEMPORAL_TLS_* variable, may be missing)"
            ))
        })?;
        if let Some(compression) = self.grpc_compression {
            conn.grpc_compression = compression.into();
        }
        Ok((conn, ClientOptions::new(namespace).build()))
    }
}

/// Connects as `settings` and Temporal's environment configuration say (R-RUN-1); a failure
/// names the setting to check (R-RUN-2).
pub async fn connect(
    settings: &ConnectionSettings,
    identity: &str,
) -> Result<TemporalConnection, ConnectError> {
    let (mut conn_opts, client_opts) = settings.options()?;
    conn_opts.identity = identity.to_owned();
    let target = conn_opts.target.to_string();
    let tls = match &conn_opts.tls_options {
        None => Tls::Off,
        Some(t) if t.client_tls_options.is_some() => Tls::WithClientCertificate,
        Some(_) => Tls::On,
    };
    let connection = Connection::connect(conn_opts).await.map_err(|e| {
        let reason = format!("{e}");
        ConnectError::Connect {
            hint: failure_hint(&reason, tls),
            target,
            reason,
        }
    })?;
    Ok(TemporalConnection {
        connection,
        namespace: client_opts.namespace.clone(),
    })
}

/// How a connection used TLS, for [`failure_hint`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tls {
    Off,
    On,
    WithClientCertificate,
}

/// Which setting a failed connection points at, from the failure's text and how it used TLS
/// (R-RUN-2).
pub fn failure_hint(reason: &str, tls: Tls) -> String {
    let has = |needles: &[&str]| needles.iter().any(|n| reason.contains(n));
    // A server that wants a client certificate it did not get closes the connection after the
    // handshake (TLS 1.3): the client sees the first call's stream cut, often without the alert.
    // The cut shows as a close, a broken pipe or a reset, depending on when the client writes.
    let closed = has(&[
        "connection closed",
        "broken pipe",
        "BrokenPipe",
        "connection reset",
        "ConnectionReset",
        "connection was not ready",
        "CertificateRequired",
        "certificate required",
    ]);
    let refused_cert = has(&[
        "BadCertificate",
        "UnknownCA",
        "bad certificate",
        "unknown ca",
    ]);
    let not_tls = has(&["InvalidContentType", "corrupt message", "tls handshake eof"]);
    // The first call failed on a connection that was made (TLS included): how the cut shows
    // varies with timing, so with TLS on and no client certificate it points at the certificate.
    let after_handshake = has(&["call error after connection"]);
    let wants_tls = has(&[
        "frame with invalid size",
        "connection reset",
        "h2 protocol error",
    ]);
    if has(&["NotValidForName", "CertNotValidForName"]) {
        "the server's certificate does not carry the name connected to: set --tls-server-name \
         (TEMPORAL_TLS_SERVER_NAME) to a name it carries"
    } else if has(&["UnknownIssuer", "invalid peer certificate", "BadSignature"]) {
        "the server's certificate is not signed by a CA trusted here: check --tls-ca \
         (TEMPORAL_TLS_SERVER_CA_CERT_PATH; the system's roots when neither is set)"
    } else if has(&["Unauthenticated", "PermissionDenied"]) {
        "the server refused the credentials: check --api-key (TEMPORAL_API_KEY)"
    } else if tls == Tls::On && (closed || (after_handshake && !not_tls)) {
        "the server closed the connection after the TLS handshake, as one that requires a \
         client certificate does: give --tls-cert and --tls-key \
         (TEMPORAL_TLS_CLIENT_CERT_PATH, TEMPORAL_TLS_CLIENT_KEY_PATH)"
    } else if tls == Tls::WithClientCertificate && (closed || refused_cert) {
        "the server refused the client certificate: check --tls-cert and --tls-key (a \
         certificate its CA signed, with the key that belongs to it)"
    } else if tls != Tls::Off && not_tls {
        "the server does not speak TLS: drop the TLS settings or set --tls-enabled false"
    } else if tls == Tls::Off && wants_tls {
        "the server may expect TLS: set --tls-enabled true (or --tls-ca)"
    } else {
        "is the server running at --address (TEMPORAL_ADDRESS)? `just temporal` starts a dev \
         server"
    }
    .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tls_settings() -> ConnectionSettings {
        ConnectionSettings {
            tls_ca: Some("ca.pem".into()),
            tls_cert: Some("c.pem".into()),
            tls_key: Some("k.pem".into()),
            tls_server_name: Some("temporal.local".into()),
            ..Default::default()
        }
    }

    #[test]
    fn settings_win_over_the_profile_and_leave_the_rest() {
        let profile = ClientConfigProfile::builder()
            .address("env:7233")
            .namespace("env-ns")
            .api_key("env-key")
            .build();
        let settings = ConnectionSettings {
            address: Some("flag:7233".into()),
            ..Default::default()
        };
        let got = settings.apply(profile.clone());
        assert_eq!(got.address.as_deref(), Some("flag:7233"));
        assert_eq!(got.namespace.as_deref(), Some("env-ns"));
        assert_eq!(got.api_key.as_deref(), Some("env-key"));
        assert_eq!(got.tls, None, "no TLS setting given: the profile's stands");
        assert_eq!(
            ConnectionSettings::default().apply(profile.clone()),
            profile
        );
    }

    #[test]
    fn grpc_compression_reaches_the_connection_options_and_defaults_to_gzip() {
        let with = |c| ConnectionSettings {
            address: Some("localhost:7233".into()),
            grpc_compression: c,
            ..Default::default()
        };
        let got = |c| with(c).options().unwrap().0.grpc_compression;
        use temporalio_client::GrpcCompression as Client;
        assert_eq!(got(None), Client::Gzip, "the client's default stands");
        assert_eq!(got(Some(GrpcCompression::None)), Client::None);
        assert_eq!(got(Some(GrpcCompression::Gzip)), Client::Gzip);
        assert_eq!("none".parse(), Ok(GrpcCompression::None));
        assert_eq!("gzip".parse(), Ok(GrpcCompression::Gzip));
        let err = "zstd".parse::<GrpcCompression>().unwrap_err();
        assert!(err.contains("gzip or none"), "{err}");
        let flag = with(Some(GrpcCompression::None));
        assert_eq!(
            flag.clone().or(with(Some(GrpcCompression::Gzip))),
            flag,
            "a flag wins over the file"
        );
        assert_eq!(
            with(None).or(flag).grpc_compression,
            Some(GrpcCompression::None),
            "the file fills in a flag left out"
        );
    }

    #[test]
    fn any_tls_setting_turns_tls_on_and_false_turns_it_off() {
        let profile = ClientConfigProfile::builder()
            .tls(ClientConfigTLS::builder().disabled(true).build())
            .build();
        let tls = tls_settings().apply(profile.clone()).tls.unwrap();
        assert_eq!(tls.disabled, Some(false));
        assert_eq!(tls.server_ca_cert, Some(DataSource::Path("ca.pem".into())));
        assert_eq!(tls.client_cert, Some(DataSource::Path("c.pem".into())));
        assert_eq!(tls.client_key, Some(DataSource::Path("k.pem".into())));
        assert_eq!(tls.server_name.as_deref(), Some("temporal.local"));
        let on = ConnectionSettings {
            tls: Some(true),
            ..Default::default()
        };
        assert_eq!(on.apply(profile).tls.unwrap().disabled, Some(false));
        let off = ConnectionSettings {
            tls: Some(false),
            ..tls_settings()
        };
        let tls = off.apply(ClientConfigProfile::default()).tls.unwrap();
        assert_eq!(tls.disabled, Some(true));
    }

    #[test]
    fn flags_win_over_the_file_setting_by_setting() {
        let flags = ConnectionSettings {
            address: Some("flag:1".into()),
            api_key: Some("k".into()),
            ..Default::default()
        };
        let file = ConnectionSettings {
            address: Some("file:1".into()),
            namespace: Some("ns".into()),
            ..Default::default()
        };
        let got = flags.or(file);
        assert_eq!(got.address.as_deref(), Some("flag:1"));
        assert_eq!(got.namespace.as_deref(), Some("ns"));
        assert_eq!(got.api_key.as_deref(), Some("k"));
    }

    #[test]
    fn debug_hides_the_api_key() {
        let settings = ConnectionSettings {
            api_key: Some("s3cret-key".into()),
            ..Default::default()
        };
        let shown = format!("{settings:?}");
        assert!(
            !shown.contains("s3cret-key") && shown.contains("<redacted>"),
            "{shown}"
        );
    }

    #[test]
    fn a_certificate_without_its_key_names_both_flags() {
        let settings = ConnectionSettings {
            tls_cert: Some("c.pem".into()),
            ..Default::default()
        };
        let err = settings.options().err().unwrap().to_string();
        assert!(
            err.contains("--tls-cert") && err.contains("--tls-key"),
            "{err}"
        );
    }

    #[test]
    fn failures_name_the_setting_to_check() {
        let closed = "hyper::Error(Canceled, \"connection closed\")";
        // (failure text, how TLS was used, what the hint must say)
        let cases = [
            (
                "invalid peer certificate: UnknownIssuer",
                Tls::On,
                "--tls-ca",
            ),
            (
                "invalid peer certificate: NotValidForName",
                Tls::On,
                "--tls-server-name",
            ),
            (
                "received fatal alert: CertificateRequired",
                Tls::On,
                "--tls-cert",
            ),
            (closed, Tls::On, "give --tls-cert"),
            (
                "hyper::Error(Io, Custom { kind: BrokenPipe, error: \"stream closed because of a broken pipe\" })",
                Tls::On,
                "give --tls-cert",
            ),
            (
                "status: Cancelled, message: \"operation was canceled\", source: hyper::Error(Canceled, \"connection was not ready\")",
                Tls::On,
                "give --tls-cert",
            ),
            (
                "`get_system_info` call error after connection: Status { code: Unknown, message: \"h2 protocol error: some other cut\" }",
                Tls::On,
                "give --tls-cert",
            ),
            (
                closed,
                Tls::WithClientCertificate,
                "refused the client certificate",
            ),
            (
                "status: Unauthenticated, message: \"bad key\"",
                Tls::On,
                "--api-key",
            ),
            ("status: PermissionDenied", Tls::Off, "--api-key"),
            (
                "corrupt message of type InvalidContentType",
                Tls::On,
                "--tls-enabled false",
            ),
            (
                "h2 protocol error: frame with invalid size",
                Tls::Off,
                "--tls-enabled true",
            ),
            ("Connection refused (os error 111)", Tls::Off, "--address"),
            (closed, Tls::Off, "--address"),
        ];
        for (reason, tls, flag) in cases {
            let hint = failure_hint(reason, tls);
            assert!(hint.contains(flag), "{reason} {tls:?}: {hint}");
        }
    }
}
