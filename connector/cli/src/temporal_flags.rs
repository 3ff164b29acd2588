//! The Temporal connection flags both binaries take (R-RUN-1), in seed 001's names. Each one
//! given wins over Temporal's environment configuration (`TEMPORAL_*` variables, then the
//! `temporal.toml` profile), which fills in whatever is left out.

use std::path::PathBuf;

use clap::Args;
use durable_mcp_runtime::temporal::{ConnectionSettings, GrpcCompression};

/// The Temporal connection, as flags.
#[derive(Args, Clone, Default)]
#[command(
    next_help_heading = "Temporal connection (each flag wins over TEMPORAL_* and temporal.toml)"
)]
pub struct TemporalFlags {
    /// The Temporal frontend, `host:port` or a URL [default: TEMPORAL_ADDRESS, the profile's
    /// address, else localhost:7233].
    #[arg(long, visible_alias = "host", value_name = "HOST:PORT")]
    pub address: Option<String>,
    /// The Temporal namespace [default: TEMPORAL_NAMESPACE, the profile's, else default].
    #[arg(long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// TLS on or off. Without it TLS is on when any other --tls-* flag or an API key is
    /// given (or the environment or profile turns it on).
    #[arg(long, value_name = "BOOL")]
    pub tls_enabled: Option<bool>,
    /// The CA certificate (PEM file) the server's certificate must chain to [default:
    /// TEMPORAL_TLS_SERVER_CA_CERT_PATH, else the system's roots].
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// The client certificate (PEM file) for mTLS; needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM file); needs --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// The name the server's certificate must carry, when it differs from the address's host.
    #[arg(long, value_name = "NAME")]
    pub tls_server_name: Option<String>,
    /// An API key, sent as a bearer token (turns TLS on). Prefer TEMPORAL_API_KEY or the
    /// temporal.toml profile's api_key: every local process can read a command line (both
    /// binaries overwrite their own copy once parsed, but it shows until then).
    #[arg(long, value_name = "KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// The temporal.toml profile to start from [default: TEMPORAL_PROFILE, else default].
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// Compression of gRPC messages to and from Temporal (R-RUN-7): gzip costs about 1.2 ms of
    /// CPU per call in the proxy on loopback and saves bandwidth to a remote server [default:
    /// gzip, the Temporal client's default].
    #[arg(long, value_name = "gzip|none")]
    pub grpc_compression: Option<GrpcCompression>,
}

/// The API key is never shown (R-RUN-2).
impl std::fmt::Debug for TemporalFlags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TemporalFlags")
            .field("address", &self.address)
            .field("namespace", &self.namespace)
            .field("tls_enabled", &self.tls_enabled)
            .field("tls_ca", &self.tls_ca)
            .field("tls_cert", &self.tls_cert)
            .field("tls_key", &self.tls_key)
            .field("tls_server_name", &self.tls_server_name)
            .field("api_key", &self.api_key.as_ref().map(|_| "<hidden>"))
            .field("profile", &self.profile)
            .field("grpc_compression", &self.grpc_compression)
            .finish()
    }
}

impl TemporalFlags {
    /// The flags as connection settings.
    pub fn settings(&self) -> ConnectionSettings {
        ConnectionSettings {
            address: self.address.clone(),
            namespace: self.namespace.clone(),
            tls: self.tls_enabled,
            tls_ca: self.tls_ca.clone(),
            tls_cert: self.tls_cert.clone(),
            tls_key: self.tls_key.clone(),
            tls_server_name: self.tls_server_name.clone(),
            api_key: self.api_key.clone(),
            profile: self.profile.clone(),
            grpc_compression: self.grpc_compression,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[test]
    fn the_api_key_is_never_shown() {
        let flags = TemporalFlags {
            api_key: Some("sekrit-key".into()),
            ..TemporalFlags::default()
        };
        let shown = format!("{flags:?}");
        assert!(
            !shown.contains("sekrit-key") && shown.contains("<hidden>"),
            "{shown}"
        );
    }

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        temporal: TemporalFlags,
    }

    fn parse(args: &[&str]) -> Result<ConnectionSettings, String> {
        Cli::try_parse_from(std::iter::once(&"bin").chain(args))
            .map(|c| c.temporal.settings())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn connection_flags_become_settings() {
        let got = parse(&[
            "--host",
            "t:7233",
            "--namespace",
            "ns",
            "--tls-ca",
            "ca.pem",
            "--tls-cert",
            "c.pem",
            "--tls-key",
            "k.pem",
            "--tls-server-name",
            "t.local",
            "--api-key",
            "key",
            "--profile",
            "prod",
            "--tls-enabled",
            "true",
            "--grpc-compression",
            "none",
        ])
        .unwrap();
        assert_eq!(got.address.as_deref(), Some("t:7233"));
        assert_eq!(got.namespace.as_deref(), Some("ns"));
        assert_eq!(got.tls, Some(true));
        assert_eq!(got.tls_ca, Some("ca.pem".into()));
        assert_eq!(got.tls_cert, Some("c.pem".into()));
        assert_eq!(got.tls_key, Some("k.pem".into()));
        assert_eq!(got.tls_server_name.as_deref(), Some("t.local"));
        assert_eq!(got.api_key.as_deref(), Some("key"));
        assert_eq!(got.profile.as_deref(), Some("prod"));
        assert_eq!(got.grpc_compression, Some(GrpcCompression::None));
        assert_eq!(parse(&[]).unwrap(), ConnectionSettings::default());
    }

    #[test]
    fn a_client_certificate_needs_its_key_and_back() {
        for args in [&["--tls-cert", "c.pem"], &["--tls-key", "k.pem"]] {
            let err = parse(args).unwrap_err();
            assert!(
                err.contains("--tls-cert") && err.contains("--tls-key"),
                "{err}"
            );
        }
        let err = parse(&["--tls-enabled", "maybe"]).unwrap_err();
        assert!(err.contains("--tls-enabled"), "{err}");
        let err = parse(&["--grpc-compression", "zstd"]).unwrap_err();
        assert!(
            err.contains("--grpc-compression") && err.contains("gzip or none"),
            "{err}"
        );
    }
}
