//! The OTLP exporter of the spans (R-RUN-9): installed only when an endpoint is given.

use opentelemetry::global;
use opentelemetry_otlp::{SpanExporter, WithExportConfig};
use opentelemetry_sdk::{Resource, trace::SdkTracerProvider};

/// The standard variables naming the OTLP endpoint, the traces' own first.
pub const ENDPOINT_VARIABLES: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

/// Where spans go: `flag` (`--otlp-endpoint`, or a config key) if given, else the first of
/// [`ENDPOINT_VARIABLES`] that `env` has (non-empty), else nowhere. An endpoint that is not an
/// `http://` URL is refused naming `setting`: the exporter is built without TLS, so an
/// `https://` collector would fail at the first export instead of at start.
pub fn endpoint(
    flag: Option<&str>,
    setting: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<String>, String> {
    let (value, from) = match flag {
        Some(v) => (v.to_owned(), setting.to_owned()),
        None => match ENDPOINT_VARIABLES
            .iter()
            .find_map(|name| env(name).filter(|v| !v.is_empty()).map(|v| (v, *name)))
        {
            Some((v, name)) => (v, name.to_owned()),
            None => return Ok(None),
        },
    };
    let parsed = url::Url::parse(&value).ok();
    if parsed.as_ref().is_some_and(|u| u.scheme() == "https") {
        return Err(format!(
            "{from} names an https:// collector, but spans are exported over plain OTLP/gRPC \
             only; run a collector on a trusted network (e.g. http://localhost:4317) that \
             forwards over TLS, and point {from} at it"
        ));
    }
    if !parsed.is_some_and(|u| u.scheme() == "http" && u.has_host()) {
        return Err(format!(
            "{from} must be the URL of an OTLP/gRPC collector, such as http://localhost:4317 \
             (got {}); fix {from} or leave it out to export no spans",
            shown(&value)
        ));
    }
    Ok(Some(value))
}

/// The endpoint as a log line or error may show it: scheme, host and port only, since its
/// user info, path or query may hold a secret (a `${VAR}` expanded into the URL).
pub fn shown(endpoint: &str) -> String {
    match url::Url::parse(endpoint) {
        Ok(u) if u.has_host() => {
            let port = u.port().map(|p| format!(":{p}")).unwrap_or_default();
            format!(
                "{}://{}{port}",
                u.scheme(),
                u.host_str().unwrap_or_default()
            )
        }
        _ => "a value that is not a URL".to_owned(),
    }
}

/// The installed exporter: flush it with [`Exporter::shutdown`] before the process ends.
#[derive(Debug)]
pub struct Exporter {
    provider: SdkTracerProvider,
}

/// Sends spans to the OTLP/gRPC collector at `endpoint`, as `service_name`, in batches (the
/// standard `OTEL_BSP_*` variables tune them), and makes it the global tracer provider. Call
/// within a Tokio runtime: the gRPC channel lives on it.
pub fn install(endpoint: &str, service_name: &'static str) -> Result<Exporter, String> {
    let exporter = SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .build()
        .map_err(|e| format!("setting up the OTLP exporter to {}: {e}", shown(endpoint)))?;
    let provider = SdkTracerProvider::builder()
        .with_resource(Resource::builder().with_service_name(service_name).build())
        .with_batch_exporter(exporter)
        .build();
    global::set_tracer_provider(provider.clone());
    Ok(Exporter { provider })
}

impl Exporter {
    /// Sends the spans still waiting, then stops the exporter.
    pub async fn shutdown(self) {
        let provider = self.provider;
        let flushed = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        if let Ok(Err(e)) = flushed {
            tracing::warn!(error = %e, "the OTLP exporter did not flush its last spans");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_is_shown_without_user_info_path_or_query() {
        let secret = "http://user:s3cret@collector:4317/v1/traces?token=s3cret";
        assert_eq!(shown(secret), "http://collector:4317");
        assert_eq!(shown("http://localhost"), "http://localhost");
        assert_eq!(shown("not a url s3cret"), "a value that is not a URL");
        let refused = endpoint(
            Some("localhost:4317?token=s3cret"),
            "--otlp-endpoint",
            |_| None,
        );
        assert!(!refused.unwrap_err().contains("s3cret"));
    }

    #[test]
    fn the_flag_wins_over_the_variables_and_nothing_means_no_export() {
        let env = |name: &str| {
            (name == "OTEL_EXPORTER_OTLP_ENDPOINT").then(|| "http://env:4317".to_owned())
        };
        let flag = endpoint(Some("http://flag:4317"), "--otlp-endpoint", env);
        assert_eq!(flag.unwrap().as_deref(), Some("http://flag:4317"));
        let from_env = endpoint(None, "--otlp-endpoint", env);
        assert_eq!(from_env.unwrap().as_deref(), Some("http://env:4317"));
        assert_eq!(endpoint(None, "--otlp-endpoint", |_| None), Ok(None));
        let empty = |_: &str| Some(String::new());
        assert_eq!(endpoint(None, "--otlp-endpoint", empty), Ok(None));
    }

    #[test]
    fn a_bad_endpoint_names_where_it_came_from() {
        let e = endpoint(Some("localhost:4317"), "--otlp-endpoint", |_| None).unwrap_err();
        assert!(
            e.contains("--otlp-endpoint") && e.contains("http://localhost:4317"),
            "{e}"
        );
        let env = |_: &str| Some("ftp://x".to_owned());
        let e = endpoint(None, "--otlp-endpoint", env).unwrap_err();
        assert!(e.contains("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), "{e}");
        let e = endpoint(Some("https://otel.example:4317"), "--otlp-endpoint", |_| {
            None
        });
        let e = e.unwrap_err();
        assert!(
            e.contains("--otlp-endpoint") && e.contains("https://"),
            "{e}"
        );
    }
}
