//! The bottom layer: connecting to Temporal (settings from the environment and `temporal.toml`
//! profiles), JSON payloads and the codec hook, standalone Activities, failure chains and small
//! conversions to Temporal's protobuf types. Nothing here knows Nexus handlers or MCP.

pub mod activity;
pub mod codec;
pub mod direct_http;
pub mod failure;
pub mod probe;
pub mod settings;
pub mod workflow;

use std::{collections::HashMap, time::Duration};

use temporalio_client::Connection;
use temporalio_protos::temporal::api::{
    common::v1::{Callback, Payload, Payloads, callback},
    sdk::v1::UserMetadata,
    taskqueue::v1::TaskQueue,
};

use durable_mcp_contract::payload;

pub use settings::{ConnectionSettings, GrpcCompression, connect};

/// A Temporal connection and the namespace it was configured for.
#[derive(Clone)]
pub struct TemporalConnection {
    pub connection: Connection,
    pub namespace: String,
}

/// Why connecting failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error(
        "invalid Temporal connection settings: {0} (check --address, --namespace, --profile and the TLS flags, or TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_PROFILE and TEMPORAL_CONFIG_FILE)"
    )]
    Config(String),
    #[error("could not connect to Temporal at {target}: {reason} ({hint})")]
    Connect {
        target: String,
        reason: String,
        /// Which setting to check ([`settings::failure_hint`]).
        hint: String,
    },
}

/// Connects with Temporal's standard environment configuration alone: `TEMPORAL_ADDRESS`,
/// `TEMPORAL_NAMESPACE`, `TEMPORAL_API_KEY`, TLS variables, `TEMPORAL_PROFILE` and
/// `TEMPORAL_CONFIG_FILE` (a `temporal.toml`), as every Temporal SDK reads them.
pub async fn connect_from_env(identity: &str) -> Result<TemporalConnection, ConnectError> {
    connect(&ConnectionSettings::default(), identity).await
}

/// Connects to an explicit address (`host:port` or a URL) without TLS; for tests and tools.
pub async fn connect_to(address: &str, identity: &str) -> Result<Connection, ConnectError> {
    let target = if address.contains("://") {
        address.to_owned()
    } else {
        format!("http://{address}")
    };
    let url = url::Url::parse(&target)
        .map_err(|e| ConnectError::Config(format!("address {address:?}: {e}")))?;
    let options = temporalio_client::ConnectionOptions::new(url)
        .identity(identity.to_owned())
        .build();
    Connection::connect(options).await.map_err(|e| {
        let reason = e.to_string();
        ConnectError::Connect {
            hint: settings::failure_hint(&reason, settings::Tls::Off),
            target,
            reason,
        }
    })
}

/// The fields a Workflow start and a standalone Activity start request build alike.
pub(crate) struct StartParts {
    pub task_queue: Option<TaskQueue>,
    pub input: Option<Payloads>,
    pub completion_callbacks: Vec<Callback>,
    pub user_metadata: Option<UserMetadata>,
}

impl StartParts {
    /// The task queue, the input, the Nexus completion callback (URL, headers) if any and the
    /// one-line summary for the Temporal UI if any.
    pub(crate) fn new(
        task_queue: String,
        input: Vec<Payload>,
        completion_callback: Option<(String, HashMap<String, String>)>,
        summary: Option<String>,
    ) -> Self {
        Self {
            task_queue: Some(TaskQueue {
                name: task_queue,
                ..Default::default()
            }),
            input: Some(Payloads { payloads: input }),
            completion_callbacks: completion_callback
                .map(|(url, header)| Callback {
                    variant: Some(callback::Variant::Nexus(callback::Nexus { url, header })),
                    ..Default::default()
                })
                .into_iter()
                .collect(),
            user_metadata: summary.map(|s| UserMetadata {
                summary: payload::to_payload(&s).ok(),
                details: None,
            }),
        }
    }
}

/// A std duration as a protobuf duration (saturating at i64 seconds).
pub fn proto_duration(d: Duration) -> prost_wkt_types::Duration {
    prost_wkt_types::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: d.subsec_nanos() as i32,
    }
}

/// A protobuf timestamp as a system time (`None` before 1970 or out of range).
pub fn system_time(ts: prost_wkt_types::Timestamp) -> Option<std::time::SystemTime> {
    let secs = u64::try_from(ts.seconds).ok()?;
    let nanos = u32::try_from(ts.nanos).ok()?;
    std::time::SystemTime::UNIX_EPOCH.checked_add(Duration::new(secs, nanos))
}

/// A protobuf duration as a std duration (negative becomes zero).
pub fn std_duration(d: &prost_wkt_types::Duration) -> Duration {
    if d.seconds < 0 || d.nanos < 0 {
        return Duration::ZERO;
    }
    Duration::new(d.seconds as u64, d.nanos as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_round_trip() {
        for d in [
            Duration::ZERO,
            Duration::from_millis(1500),
            Duration::from_secs(3600),
        ] {
            assert_eq!(std_duration(&proto_duration(d)), d);
        }
        assert_eq!(
            std_duration(&prost_wkt_types::Duration {
                seconds: -1,
                nanos: 0
            }),
            Duration::ZERO
        );
    }
}
