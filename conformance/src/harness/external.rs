//! A Temporal server the user already runs, e.g. a team's staging cluster in a release
//! pipeline (`run --temporal-address`, R-CNF-5).
//!
//! TLS and API keys come from Temporal's usual environment configuration (`TEMPORAL_API_KEY`,
//! `TEMPORAL_TLS_*`, `TEMPORAL_PROFILE`, `TEMPORAL_CONFIG_FILE`), exactly as the proxy and the
//! connector read them; only the address and the namespace are given on the command line. The
//! harness never starts, stops or restarts such a server.

use temporalio_client::{ConnectionOptions, envconfig::LoadClientConfigProfileOptions, tonic};
use temporalio_protos::temporal::api::workflowservice::v1::{
    DescribeNamespaceRequest, GetSystemInfoRequest,
};
use url::Url;

use super::{HarnessError, ServerVersion, provision};

/// Connection settings for an existing server.
pub(crate) struct ExternalServer {
    address: String,
    options: ConnectionOptions,
    version: Option<ServerVersion>,
}

/// `address` as a URL: kept when it has a scheme, else `https://` with TLS and `http://`
/// without (what Temporal's own clients do with a bare `host:port`).
pub(crate) fn target_url(address: &str, tls: bool) -> Result<Url, HarnessError> {
    let text = if address.contains("://") {
        address.to_owned()
    } else {
        format!("{}://{address}", if tls { "https" } else { "http" })
    };
    Url::parse(&text)
        .ok()
        .filter(|u| u.host_str().is_some() && u.port_or_known_default().is_some())
        .ok_or_else(|| HarnessError::InvalidSetting {
            name: "--temporal-address",
            value: address.to_owned(),
            hint: "give HOST:PORT, e.g. temporal.example.com:7233".to_owned(),
        })
}

impl ExternalServer {
    /// Loads Temporal's environment configuration, points it at `address`, and checks that the
    /// server answers and knows `namespace`.
    pub(crate) async fn connect(address: &str, namespace: &str) -> Result<Self, HarnessError> {
        let (mut options, _) = temporalio_client::ClientOptions::load_from_config(
            LoadClientConfigProfileOptions::default(),
        )
        .map_err(|e| HarnessError::InvalidSetting {
            name: "Temporal environment configuration",
            value: e.to_string(),
            hint: "check TEMPORAL_PROFILE, TEMPORAL_CONFIG_FILE and the TEMPORAL_TLS_* variables"
                .to_owned(),
        })?;
        options.target = target_url(address, options.tls_options.is_some())?;
        options.identity = format!("durable-mcp-conformance@{}", std::process::id());
        let conn = provision::connect(&options).await?;
        let described = conn
            .workflow_service()
            .describe_namespace(tonic::Request::new(DescribeNamespaceRequest {
                namespace: namespace.to_owned(),
                ..Default::default()
            }))
            .await;
        match described {
            Ok(_) => {}
            Err(s) if s.code() == tonic::Code::NotFound => {
                return Err(HarnessError::InvalidState(format!(
                    "namespace {namespace:?} does not exist on {address}: pass --namespace with \
                     one that does (the runner creates no namespaces on a server it does not own)"
                )));
            }
            Err(s) => {
                return Err(HarnessError::rpc(
                    format!("DescribeNamespace({namespace})"),
                    s,
                ));
            }
        }
        let version = conn
            .workflow_service()
            .get_system_info(tonic::Request::new(GetSystemInfoRequest::default()))
            .await
            .ok()
            .map(|info| ServerVersion {
                cli: "-".to_owned(),
                server: info.into_inner().server_version,
            });
        Ok(Self {
            address: address.to_owned(),
            options,
            version,
        })
    }

    pub(crate) fn address(&self) -> &str {
        &self.address
    }

    pub(crate) fn options(&self) -> &ConnectionOptions {
        &self.options
    }

    pub(crate) fn version(&self) -> Option<&ServerVersion> {
        self.version.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_addresses_get_the_scheme_tls_implies() {
        assert_eq!(
            target_url("127.0.0.1:7233", false).unwrap().as_str(),
            "http://127.0.0.1:7233/"
        );
        assert_eq!(
            target_url("ns.acct.tmprl.cloud:7233", true)
                .unwrap()
                .as_str(),
            "https://ns.acct.tmprl.cloud:7233/"
        );
        assert_eq!(
            target_url("http://localhost:7233", true).unwrap().as_str(),
            "http://localhost:7233/"
        );
        let err = target_url("not an address", false).unwrap_err();
        assert!(err.to_string().contains("HOST:PORT"), "{err}");
    }
}
