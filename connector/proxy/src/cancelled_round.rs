//! The round a cancel took while the call waited for input (R-CON-46, R-PRX-29): the
//! connector starts the marker operation [`CANCELLED_ROUND`] with the waiting round's recorded
//! `requestState`. When that names an upstream task of this service that this proxy left
//! waiting (its signature verifies, and the marker is the round right after the one that made
//! it, R-PRX-35), the proxy sends it `tasks/cancel` on the connection that made it (best effort, at
//! most [`CANCEL_WAIT`]); either way it then refuses the operation exactly as a proxy that does
//! not serve it would (no tool's operation), so the task reads `cancelled` and the round stays
//! taken whichever proxy answered.

use std::{sync::Arc, time::Duration};

use temporalio_protos::temporal::api::common::v1::Payload;
use tracing::{info, warn};

use super::{
    state_key::StateKeys,
    task_input::{Round, task_to_cancel},
    upstream::UpstreamClient,
};
use durable_mcp_contract::{
    input::{CANCELLED_ROUND, CancelledRound},
    payload,
};
use durable_mcp_runtime::nexus::{HandlerError, Service, StartError, start_fn};

/// How long the `tasks/cancel` may take, as for a cancelled call (R-PRX-28).
const CANCEL_WAIT: Duration = Duration::from_secs(5);

/// Adds the marker operation to `service` (the Nexus service of upstream `name`); `refuse` is
/// the refusal of a name that is no tool's, which the marker answers after its cancel.
pub fn add_operation(
    service: Service,
    name: String,
    client: Arc<UpstreamClient>,
    keys: StateKeys,
    refuse: fn(&str) -> Result<String, HandlerError>,
) -> Service {
    service.operation(
        CANCELLED_ROUND,
        start_fn(move |start, input| {
            let (name, client, keys) = (name.clone(), client.clone(), keys.clone());
            async move {
                let here = Round::of(&start.links);
                cancel_waiting_task(&name, &client, &input, here.as_ref(), &keys).await;
                Err(StartError::from(
                    refuse(&start.operation).expect_err("the marker names no tool"),
                ))
            }
        }),
    )
}

/// Sends `tasks/cancel` to the task the marker's input names, if any (R-PRX-29), when the
/// marker is the round `here` right after the one that made it (R-PRX-35). A connection that is
/// gone sends nothing (`cancel_task` goes only to the task's origin).
async fn cancel_waiting_task(
    service: &str,
    client: &UpstreamClient,
    input: &Payload,
    here: Option<&Round>,
    keys: &StateKeys,
) {
    let state = payload::to_json(input)
        .ok()
        .and_then(|v| serde_json::from_value::<CancelledRound>(v).ok())
        .and_then(|m| m.request_state);
    let Some(task) = task_to_cancel(state.as_deref(), service, here, keys) else {
        return;
    };
    let cancel = client.cancel_task(&task.task_id, &task.origin);
    match tokio::time::timeout(CANCEL_WAIT, cancel).await {
        Ok(Ok(())) => info!(tool = %task.tool, "cancelled the upstream task that waited for input"),
        Ok(Err(error)) => {
            warn!(tool = %task.tool, %error, "tasks/cancel of the upstream task that waited for input failed");
        }
        Err(_) => warn!(tool = %task.tool, "no answer to tasks/cancel in time"),
    }
}
