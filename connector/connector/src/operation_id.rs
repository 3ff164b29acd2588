//! The shapes of the operation IDs the connector starts, which task IDs carry in a few bytes
//! (R-CON-6): one place, so the writers and the task ID reader agree.

/// What follows the connector name in a keyed call's operation ID (R-CON-7).
pub const OPERATION_MARK: &str = "idem";

/// A call's operation ID: `<connector name>-<prefix>-<uuid>`. Task IDs hold one in a few
/// bytes when the prefix is at most 32 bytes (`MAX_OPERATION_ID_PREFIX_LEN`).
pub fn call_operation_id(connector_name: &str, prefix: &str, id: uuid::Uuid) -> String {
    format!("{connector_name}-{prefix}-{}", id.hyphenated())
}
