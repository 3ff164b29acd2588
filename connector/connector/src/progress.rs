//! Upstream progress for the connector's callers. A proxied tool call runs in an activity
//! whose heartbeats carry the upstream's latest `notifications/progress`
//! ([`CallHeartbeat`]); the Nexus operation's token names that activity ([`CallToken`]). So a
//! caller that sent a `progressToken` gets MCP progress while it waits, and `tasks/get` shows the
//! latest progress message. A Workflow-backed native tool's token names its Workflow
//! ([`WorkflowCallToken`]), whose memo holds the latest progress ([`PROGRESS_MEMO_KEY`]). A call
//! that ends before its progress could be read this way carries it with its result, and the
//! caller gets it replayed before the result. Other operations simply have none.

use std::{
    sync::Mutex,
    time::{Duration, SystemTime},
};

use rmcp::{
    Peer, RoleServer,
    model::{ProgressNotificationParam, ProgressToken},
};

use durable_mcp_contract::call::{
    CallHeartbeat, CallNotification, CallNotifications, CallToken, LiveNotifications,
    PROGRESS_MEMO_KEY, ToolLog, ToolProgress, WorkflowCallToken, call_activity_id,
};
use durable_mcp_contract::operation_name::tool_for_operation;
use durable_mcp_contract::payload::{decode_one, to_json};
use durable_mcp_runtime::nexus::{OperationClient, OperationDescription, OperationRef};
use durable_mcp_runtime::temporal::{activity::describe_activity, workflow::describe_workflow};

/// Where a call's progress is kept: the proxy's call Activity or a native tool's Workflow.
#[derive(Debug, Clone, PartialEq)]
pub enum ProgressSource {
    Activity(CallToken),
    Workflow(WorkflowCallToken),
}

impl ProgressSource {
    /// The source an operation token names, if it names one.
    pub fn parse(operation_token: &str) -> Option<Self> {
        CallToken::parse(operation_token)
            .map(Self::Activity)
            .or_else(|| WorkflowCallToken::parse(operation_token).map(Self::Workflow))
    }

    /// The source the token of the operation `described` names, only when it is that
    /// operation's own call: the Activity (or Workflow) id a tool service derives from the
    /// operation's service, tool and handler request id ([`call_activity_id`]). A token that
    /// names anything else, such as another caller's call named by a hostile or broken tool
    /// service, is not followed: its progress and log messages are not this caller's (R-CON-10).
    pub fn of(described: &OperationDescription) -> Option<Self> {
        let source = Self::parse(&described.operation_token)?;
        let tool = tool_for_operation(&described.operation)?;
        let own = call_activity_id(&described.service, &tool, &described.handler_request_id);
        let named = match &source {
            Self::Activity(token) => &token.activity_id,
            Self::Workflow(token) => &token.workflow_id,
        };
        (!described.handler_request_id.is_empty() && *named == own).then_some(source)
    }
}

/// When a waiting caller's progress is looked up (R-CON-10, R-CON-26). Each look-up is one or two Temporal
/// RPCs and every call a client makes carries a progress token (rmcp sends one with every
/// request), so looking every second made a call's cost grow with its duration: a loaded server
/// (slow calls) was asked the most. Instead: nothing for the first [`FIRST_LOOKUP`] (a shorter
/// call's progress travels with its result and is replayed before it); then every
/// [`PROGRESS_POLL`] after a look-up that found new progress, and twice the last wait, up to
/// [`QUIET_POLL_MAX`], after one that found nothing new. A call that reports nothing costs
/// a few look-ups however long it runs; a steady reporter is read every second.
///
/// The activity is not long-polled (`DescribeActivityExecution` with its `long_poll_token`):
/// the server answers such a poll at any change of the activity, and each heartbeat is one, even
/// with unchanged details. Measured on the dev server, a quiet 13 s call's long poll came back
/// every 2 s, once per heartbeat: more RPCs than this schedule, not one per progress change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LookupSchedule {
    wait: Duration,
}

/// No progress look-up before a call has run this long.
pub const FIRST_LOOKUP: Duration = Duration::from_secs(2);
/// The wait after a look-up that found new progress.
pub const PROGRESS_POLL: Duration = Duration::from_secs(1);
/// The longest wait between look-ups of a call whose progress does not change.
pub const QUIET_POLL_MAX: Duration = Duration::from_secs(8);

impl Default for LookupSchedule {
    fn default() -> Self {
        Self::new()
    }
}

impl LookupSchedule {
    pub fn new() -> Self {
        Self { wait: FIRST_LOOKUP }
    }

    /// How long to wait before the next look-up.
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// Records what the look-up found: new progress, or nothing new.
    pub fn looked(&mut self, changed: bool) {
        self.wait = if changed {
            PROGRESS_POLL
        } else {
            (self.wait * 2).min(QUIET_POLL_MAX)
        };
    }
}

/// How long a call whose operation started `ran` ago still waits before its Activity (or
/// Workflow) is first looked up (R-CON-26): nothing is read before the call has run
/// [`FIRST_LOOKUP`], so a call that waited in the server's queue past the first look-up of its
/// operation, and ends within [`FIRST_LOOKUP`] of its start, costs no describe of its Activity
/// (its progress travels with its result). `ran` is measured from the operation's last change,
/// its start for a running one with a token: an error means the server's clock is ahead of
/// ours, read as just started; no time recorded, as long enough. Never more than
/// [`FIRST_LOOKUP`], however the clocks differ.
pub fn until_run_long_enough(
    ran: Option<Result<Duration, std::time::SystemTimeError>>,
) -> Duration {
    match ran {
        None => Duration::ZERO,
        Some(Ok(ran)) => FIRST_LOOKUP.saturating_sub(ran),
        Some(Err(_)) => FIRST_LOOKUP,
    }
}

/// What looking up a call's progress found.
enum Lookup {
    /// What the call's heartbeat (or a Workflow's progress memo) holds.
    Found(CallHeartbeat),
    /// Nothing reported yet, or a passing failure: ask again later.
    NotYet,
    /// The activity cannot be seen from here (another namespace, no permission): stop asking.
    Unreachable,
}

fn unreachable_or_not_yet(status: &tonic::Status) -> Lookup {
    match status.code() {
        tonic::Code::PermissionDenied | tonic::Code::InvalidArgument | tonic::Code::NotFound => {
            Lookup::Unreachable
        }
        _ => Lookup::NotYet,
    }
}

async fn lookup(client: &OperationClient, source: &ProgressSource) -> Lookup {
    let call = match source {
        ProgressSource::Activity(call) => call,
        ProgressSource::Workflow(wf) => {
            return match describe_workflow(
                client.connection(),
                client.namespace(),
                &wf.workflow_id,
                &wf.run_id,
            )
            .await
            {
                Ok(Some(found)) => found
                    .memo
                    .get(PROGRESS_MEMO_KEY)
                    .and_then(|p| serde_json::from_value::<ToolProgress>(p.clone()).ok())
                    .map_or(Lookup::NotYet, |progress| {
                        Lookup::Found(CallHeartbeat {
                            progress: Some(progress),
                            ..CallHeartbeat::default()
                        })
                    }),
                Ok(None) => Lookup::Unreachable,
                Err(status) => unreachable_or_not_yet(&status),
            };
        }
    };
    match describe_activity(
        client.connection(),
        client.namespace(),
        &call.activity_id,
        &call.run_id,
    )
    .await
    {
        Ok(Some(activity)) => {
            // With a codec the proxy's heartbeats are encoded too (R-PRX-20).
            let heartbeat = match (activity.heartbeat, activity.encoded_heartbeat) {
                (Some(h), _) => Some(h),
                (None, Some(p)) => decode_one(client.codec().as_ref(), p)
                    .await
                    .ok()
                    .and_then(|p| to_json(&p).ok()),
                (None, None) => None,
            };
            heartbeat
                .and_then(|h| serde_json::from_value::<CallHeartbeat>(h).ok())
                .map_or(Lookup::NotYet, Lookup::Found)
        }
        Ok(None) => Lookup::Unreachable,
        Err(status) => unreachable_or_not_yet(&status),
    }
}

/// The latest progress the upstream reported for a call, if any.
pub async fn call_progress(
    client: &OperationClient,
    call: &ProgressSource,
) -> Option<ToolProgress> {
    match lookup(client, call).await {
        Lookup::Found(h) => h.progress,
        Lookup::NotYet | Lookup::Unreachable => None,
    }
}

/// Whether a waiting caller's call is followed while it runs ([`forward_live`]): when the caller
/// asked for progress (a token) or log messages (a level), unless the tool's listing says its
/// calls are answered inline (`io.durable-mcp/inline`, R-PRX-30). An inline call has no
/// Activity and no operation token, so every look-up of it would find nothing: at 2, 6 and 14 s
/// of a call queued on a saturated server, one `DescribeNexusOperationExecution` each
/// (R-CON-26). A call of such a tool that runs in an Activity after all still gets what it
/// reported replayed with its result (R-CON-10).
pub fn follows_live(token: &Option<ProgressToken>, min_level: Option<usize>, inline: bool) -> bool {
    !inline && (token.is_some() || min_level.is_some())
}

/// Sends the caller what its call reports while it runs: `notifications/progress` under its own
/// token whenever the progress changes (when it sent a token), and the upstream's log messages
/// at or above `min_level` (when it has one), in order (R-CON-10, R-CON-13). Runs until dropped
/// (the caller's wait ends), or until it is clear that there is nothing to read: an operation
/// that is not a proxied tool call, or an activity this connector cannot see (the proxy's
/// activities live in the endpoint's target namespace, which must be the connector's). One RPC
/// per look-up once the call is known; look-ups follow [`LookupSchedule`] (R-CON-26). `live`
/// records what the caller got, for the replay.
pub async fn forward_live(
    client: &OperationClient,
    op: &OperationRef,
    peer: &Peer<RoleServer>,
    token: Option<ProgressToken>,
    min_level: Option<usize>,
    live: &Mutex<LiveNotifications>,
) {
    if token.is_none() && min_level.is_none() {
        return;
    }
    let mut call: Option<ProgressSource> = None;
    let mut schedule = LookupSchedule::new();
    loop {
        tokio::time::sleep(schedule.wait()).await;
        if call.is_none() {
            let Ok(described) = client.describe(op).await else {
                schedule.looked(false);
                continue;
            };
            if described.operation_token.is_empty() {
                // Not started yet (or a sync operation, which ends with its answer).
                schedule.looked(false);
                continue;
            }
            match ProgressSource::of(&described) {
                Some(found) => call = Some(found),
                // Neither a proxied call nor a Workflow-backed tool, or not this call's.
                None => return,
            }
            // A call queued before its start has not run yet: its Activity is not looked up
            // before it has run FIRST_LOOKUP, so one that then ends quickly costs no describe.
            let ran = described
                .times
                .last_changed
                .map(|at| SystemTime::now().duration_since(at));
            tokio::time::sleep(until_run_long_enough(ran)).await;
        }
        let Some(found) = &call else { continue };
        let heartbeat = match lookup(client, found).await {
            Lookup::Found(h) => h,
            Lookup::NotYet => {
                schedule.looked(false);
                continue;
            }
            Lookup::Unreachable => return,
        };
        let new = live.lock().unwrap().from_heartbeat(&heartbeat, min_level);
        schedule.looked(!new.is_empty());
        for item in &new {
            if send(peer, token.as_ref(), item).await.is_err() {
                return; // The caller is gone; the wait ends on its own.
            }
        }
    }
}

/// Sends the caller, in order, what its call's result carried that it has not had: progress
/// later than what it got live under its progress token, when it sent one, and log messages
/// it did not get live at or above `min_level` (R-CON-10, R-CON-13).
pub async fn replay_notifications(
    peer: &Peer<RoleServer>,
    token: Option<&ProgressToken>,
    carried: &CallNotifications,
    live: &LiveNotifications,
    min_level: Option<usize>,
) {
    for item in live.replay(carried, min_level) {
        if send(peer, token, item).await.is_err() {
            return;
        }
    }
}

/// One notification to the caller; progress only under its token (none without one).
async fn send(
    peer: &Peer<RoleServer>,
    token: Option<&ProgressToken>,
    item: &CallNotification,
) -> Result<(), rmcp::service::ServiceError> {
    match (item, token) {
        (CallNotification::Progress(progress), Some(token)) => notify(peer, token, progress).await,
        (CallNotification::Progress(_), None) => Ok(()),
        (CallNotification::Log(log), _) => notify_log(peer, log).await,
    }
}

#[allow(deprecated)] // MCP logging (SEP-2577 deprecates it; callers still use it)
async fn notify_log(
    peer: &Peer<RoleServer>,
    log: &ToolLog,
) -> Result<(), rmcp::service::ServiceError> {
    let level = serde_json::from_value(serde_json::Value::from(log.level.as_str()))
        .unwrap_or(rmcp::model::LoggingLevel::Info);
    let mut note = rmcp::model::LoggingMessageNotificationParam::new(level, log.data.clone());
    note.logger = log.logger.clone();
    peer.notify_logging_message(note).await
}

async fn notify(
    peer: &Peer<RoleServer>,
    token: &ProgressToken,
    progress: &ToolProgress,
) -> Result<(), rmcp::service::ServiceError> {
    let mut note = ProgressNotificationParam::new(token.clone(), progress.progress);
    note.total = progress.total;
    note.message = progress.message.clone();
    peer.notify_progress(note).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A running operation of `tool` on `service` whose handler got `request_id`, with `token`.
    fn described(service: &str, tool: &str, request_id: &str, token: &str) -> OperationDescription {
        OperationDescription {
            reference: OperationRef {
                operation_id: "op".into(),
                run_id: "run".into(),
            },
            status: durable_mcp_runtime::nexus::OperationStatus::Running,
            endpoint: "ep".into(),
            service: service.into(),
            operation: durable_mcp_contract::operation_name::operation_for_tool(tool),
            attempt: 1,
            last_attempt_failure: None,
            headers: Default::default(),
            operation_token: token.into(),
            handler_request_id: request_id.into(),
            outcome: None,
            input: None,
            times: Default::default(),
            cancellation: None,
        }
    }

    fn activity(id: &str) -> String {
        serde_json::to_string(&CallToken {
            activity_id: id.into(),
            run_id: "r".into(),
        })
        .unwrap()
    }

    fn workflow(id: &str) -> String {
        serde_json::to_string(&WorkflowCallToken {
            workflow_id: id.into(),
            run_id: "r".into(),
        })
        .unwrap()
    }

    #[test]
    fn only_a_token_naming_this_operations_own_call_is_followed() {
        let own = call_activity_id("svc", "get sum", "req-1");
        let d = described("svc", "get sum", "req-1", &activity(&own));
        assert!(matches!(
            ProgressSource::of(&d),
            Some(ProgressSource::Activity(_))
        ));
        let d = described("svc", "get sum", "req-1", &workflow(&own));
        assert!(matches!(
            ProgressSource::of(&d),
            Some(ProgressSource::Workflow(_))
        ));
        // Another caller's call (another request id), another tool's, another service's: a
        // hostile tool service's token is not followed.
        for other in [
            call_activity_id("svc", "get sum", "req-2"),
            call_activity_id("svc", "delete", "req-1"),
            call_activity_id("other", "get sum", "req-1"),
            "wf-elsewhere".into(),
        ] {
            for token in [activity(&other), workflow(&other)] {
                let d = described("svc", "get sum", "req-1", &token);
                assert_eq!(ProgressSource::of(&d), None, "{token}");
            }
        }
        // No handler request id known: nothing is followed.
        let d = described(
            "svc",
            "get sum",
            "",
            &activity(&call_activity_id("svc", "get sum", "")),
        );
        assert_eq!(ProgressSource::of(&d), None);
    }

    #[test]
    fn calls_of_a_tool_listed_inline_are_not_followed_live() {
        let token = Some(ProgressToken(rmcp::model::NumberOrString::Number(1)));
        assert!(follows_live(&token, None, false));
        assert!(follows_live(&None, Some(0), false));
        assert!(!follows_live(&None, None, false), "nothing asked for");
        assert!(!follows_live(&token, None, true));
        assert!(!follows_live(&token, Some(0), true));
    }

    #[test]
    fn a_call_is_not_looked_up_in_its_activity_before_it_has_run_the_first_interval() {
        let ran = |secs| Some(Ok(Duration::from_millis(secs)));
        // Started just now (queued until then): the whole first interval still.
        assert_eq!(until_run_long_enough(ran(0)), FIRST_LOOKUP);
        assert_eq!(until_run_long_enough(ran(500)), Duration::from_millis(1500));
        // Started long enough ago: looked up at once.
        assert_eq!(until_run_long_enough(ran(2000)), Duration::ZERO);
        assert_eq!(until_run_long_enough(ran(9000)), Duration::ZERO);
        assert_eq!(until_run_long_enough(None), Duration::ZERO);
        // The server's clock ahead of ours: at most the first interval.
        let ahead = SystemTime::UNIX_EPOCH.duration_since(SystemTime::now());
        assert_eq!(until_run_long_enough(Some(ahead)), FIRST_LOOKUP);
    }

    #[test]
    fn nothing_is_looked_up_before_the_first_interval() {
        assert_eq!(LookupSchedule::new().wait(), FIRST_LOOKUP);
        assert!(FIRST_LOOKUP > PROGRESS_POLL);
    }

    #[test]
    fn quiet_calls_are_looked_up_ever_less_often_up_to_the_cap() {
        let mut s = LookupSchedule::new();
        let mut waits = vec![s.wait()];
        for _ in 0..5 {
            s.looked(false);
            waits.push(s.wait());
        }
        let secs: Vec<u64> = waits.iter().map(|w| w.as_secs()).collect();
        assert_eq!(secs, [2, 4, 8, 8, 8, 8]);
    }

    #[test]
    fn new_progress_brings_the_next_look_up_back_to_a_second() {
        let mut s = LookupSchedule::new();
        s.looked(false);
        s.looked(false);
        s.looked(true);
        assert_eq!(s.wait(), PROGRESS_POLL);
        s.looked(false);
        assert_eq!(s.wait(), Duration::from_secs(2));
    }

    /// Look-ups of a call that reports nothing for `secs` seconds: bounded by the logarithm of
    /// its duration, where one a second made it linear.
    fn quiet_lookups(secs: u64) -> usize {
        let mut s = LookupSchedule::new();
        let (mut at, mut n) = (Duration::ZERO, 0);
        loop {
            at += s.wait();
            if at > Duration::from_secs(secs) {
                return n;
            }
            n += 1;
            s.looked(false);
        }
    }

    #[test]
    fn a_quiet_call_costs_few_look_ups_however_long_it_runs() {
        // Look-ups at 2, 6, 14, 22, ... s.
        assert_eq!(quiet_lookups(1), 0);
        assert_eq!(quiet_lookups(5), 1);
        assert_eq!(quiet_lookups(6), 2);
        assert_eq!(quiet_lookups(13), 2);
        assert_eq!(quiet_lookups(60), 8);
    }
}

/// Property tests of the operation tokens a tool service writes (R-CON-10, R-CON-51).
#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn an_operation_token_of_any_text_names_a_source_or_none(token in "\\PC{0,80}") {
            let _ = ProgressSource::parse(&token);
        }

        /// The tokens the proxy and native tools write read back as the source they name.
        #[test]
        fn written_operation_tokens_read_back(id in "\\PC{0,40}", run in "\\PC{0,40}", workflow in any::<bool>()) {
            let (token, expected) = if workflow {
                let t = WorkflowCallToken { workflow_id: id, run_id: run };
                (t.to_token(), ProgressSource::Workflow(t))
            } else {
                let t = CallToken { activity_id: id, run_id: run };
                (t.to_token(), ProgressSource::Activity(t))
            };
            prop_assert_eq!(ProgressSource::parse(&token), Some(expected));
        }
    }
}
