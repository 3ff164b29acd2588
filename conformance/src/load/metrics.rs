//! The dev server's own Prometheus counters (`--metrics-port`): which RPCs and how much
//! persistence work each call costs inside Temporal.

use std::collections::BTreeMap;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// Counter values by `"<service>/<operation>"` for RPCs (`service_requests`) and
/// `"persistence/<operation>"` for database operations (`persistence_requests`), summed over
/// namespaces.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Counters(pub BTreeMap<String, f64>);

impl Counters {
    /// What happened between `before` and `self`.
    pub fn since(&self, before: &Counters) -> Counters {
        Counters(
            self.0
                .iter()
                .map(|(k, v)| (k.clone(), v - before.0.get(k).copied().unwrap_or(0.0)))
                .filter(|(_, v)| *v > 0.0)
                .collect(),
        )
    }

    /// The sum of every counter whose key starts with `prefix`.
    pub fn total(&self, prefix: &str) -> f64 {
        self.0
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(_, v)| v)
            .sum()
    }
}

/// Parses the Prometheus text format, keeping `service_requests` and `persistence_requests`.
pub fn parse(text: &str) -> Counters {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let (metric, persistence) = if let Some(rest) = line.strip_prefix("service_requests{") {
            (rest, false)
        } else if let Some(rest) = line.strip_prefix("persistence_requests{") {
            (rest, true)
        } else {
            continue;
        };
        let Some((labels, value)) = metric.rsplit_once('}') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let label = |name: &str| {
            labels.split(',').find_map(|kv| {
                let (k, v) = kv.split_once('=')?;
                (k.trim() == name).then(|| v.trim().trim_matches('"').to_owned())
            })
        };
        let Some(operation) = label("operation") else {
            continue;
        };
        let service = if persistence {
            "persistence".to_owned()
        } else {
            label("service_name").unwrap_or_else(|| "unknown".into())
        };
        *out.entry(format!("{service}/{operation}")).or_insert(0.0) += value;
    }
    Counters(out)
}

/// GETs `http://<addr>/metrics` (plain HTTP/1.0 on loopback) and parses it.
pub async fn scrape(addr: &str) -> anyhow::Result<Counters> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await?;
    let mut body = Vec::new();
    stream.read_to_end(&mut body).await?;
    Ok(parse(&String::from_utf8_lossy(&body)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_namespaces_and_keeps_services_apart() {
        let text = r#"# HELP service_requests x
service_requests{namespace="default",operation="PollNexusTaskQueue",service_name="frontend"} 3
service_requests{namespace="_unknown_",operation="PollNexusTaskQueue",service_name="frontend"} 2
service_requests{namespace="default",operation="PollNexusTaskQueue",service_name="matching"} 7
persistence_requests{namespace="default",operation="UpdateWorkflowExecution",service_name="history"} 4
service_latency_bucket{operation="X",le="1"} 99
"#;
        let c = parse(text);
        assert_eq!(c.0["frontend/PollNexusTaskQueue"], 5.0);
        assert_eq!(c.0["matching/PollNexusTaskQueue"], 7.0);
        assert_eq!(c.0["persistence/UpdateWorkflowExecution"], 4.0);
        assert_eq!(c.0.len(), 3);
        assert_eq!(c.total("frontend/"), 5.0);
    }

    #[test]
    fn deltas_drop_unchanged_counters() {
        let before = parse(
            "service_requests{operation=\"A\",service_name=\"frontend\"} 1\nservice_requests{operation=\"B\",service_name=\"frontend\"} 2\n",
        );
        let after = parse(
            "service_requests{operation=\"A\",service_name=\"frontend\"} 4\nservice_requests{operation=\"B\",service_name=\"frontend\"} 2\n",
        );
        let d = after.since(&before);
        assert_eq!(d.0.len(), 1);
        assert_eq!(d.0["frontend/A"], 3.0);
    }
}
