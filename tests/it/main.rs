//! Integration tests against the real Temporal dev server (started by the conformance harness).
//!
//! One test binary on purpose: each binary costs a link on a 2-core machine. Tests share one
//! dev server per process and isolate themselves with their own task queues and endpoints.

mod support;

mod codec_client;
mod connector;
mod connector_auth;
mod connector_http;
mod connector_http_limits;
mod connector_keys;
mod connector_limits;
mod connector_outage;
mod connector_task_support;
mod docs;
mod durable_input;
mod feature_limits;
mod feature_notices;
mod grpc_compression;
mod health;
mod hostile_input;
mod hostile_upstream;
mod images;
mod input_relay;
mod input_rounds;
mod layers;
mod metrics;
mod native_input;
mod native_resources;
mod native_tools;
mod nexus_cancel;
mod nexus_errors;
mod nexus_roundtrip;
mod panic_free;
mod progress;
mod protocol_versions;
mod proxy;
mod proxy_everything;
mod proxy_fairness;
mod proxy_inline;
mod proxy_library;
mod proxy_options;
mod python_client;
mod resource_subscriptions;
mod resources;
mod result_types;
mod route_notices;
mod secrets;
mod server_restart;
mod service_logs;
mod spec_rules;
mod task_fidelity;
mod temporal_tls;
mod temporal_tools;
mod tls_front;
mod traces;
mod upstream_jsonrpc_errors;
mod upstream_oauth;
mod upstream_task_input;
mod upstream_tasks;
mod wire_fuzz;
mod workflow_client;
mod workflow_traces;
