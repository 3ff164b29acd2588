//! Property tests of what a caller brings back signed (R-CON-40, R-CON-51): a round's
//! `requestState` (the input-state prefix and a task ID) with any byte changed names no task,
//! and a signing key of any text is a key or an error, never a panic.

use super::*;
use crate::props::{mutate, mutation};
use crate::server::INPUT_STATE_PREFIX;
use proptest::prelude::*;

/// What the connector's `tools/call` does with a `requestState`: the task it names, if any.
fn task_of(state: &str, key: &SigningKey, d: &Deployment<'_>, owner: &str) -> Option<TaskRef> {
    let task_id = state.strip_prefix(INPUT_STATE_PREFIX)?;
    verify(key, task_id, d, owner).ok()
}

proptest! {
    #[test]
    fn a_request_state_reads_back_and_any_changed_byte_names_no_task(
        op in "[a-z0-9-]{1,60}~r[2-9]",
        run in "[0-9a-f-]{36}",
        subject in "\\PC{0,20}",
        key_byte in any::<u8>(),
        m in mutation(),
    ) {
        let key = SigningKey(vec![key_byte; 32]);
        let owner = caller_hash(&key, &CallerScope::Process(subject));
        let r = TaskRef::new("default", op, run, owner.clone());
        let d = Deployment { namespace: "default", connector_name: "conn" };
        let state = format!("{INPUT_STATE_PREFIX}{}", sign(&key, "conn", &r));
        prop_assert_eq!(task_of(&state, &key, &d, &owner), Some(r));
        if let Some(changed) = mutate(&state, &m) {
            prop_assert_eq!(task_of(&changed, &key, &d, &owner), None);
        }
    }

    /// A key of any text is a key or an error, and neither shows the text (R-CON-6's keys
    /// never reach a log line).
    #[test]
    fn a_signing_key_of_any_text_is_a_key_or_an_error_that_never_shows_it(
        text in "[A-Za-z0-9+/=_-]{8,60}|\\PC{8,60}",
    ) {
        let shown = match SigningKey::from_base64(&text) {
            Ok(key) => format!("{key:?}"),
            Err(e) => e.to_string(),
        };
        prop_assert!(!shown.contains(text.trim()) || text.trim().len() < 8, "{shown}");
    }
}
