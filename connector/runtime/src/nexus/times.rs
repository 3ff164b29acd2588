//! When an operation was scheduled and when its state last changed, as the server records them.
//! A task's `createdAt` and `lastUpdatedAt` report these (R-CON-29), so they hold still between
//! two reads and every replica gives the same.

use std::time::SystemTime;

use temporalio_protos::temporal::api::nexus::v1::NexusOperationExecutionInfo;

use crate::temporal::system_time;

/// An operation's times, from `DescribeNexusOperationExecution`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OperationTimes {
    /// When the server accepted the start (`schedule_time`).
    pub scheduled: Option<SystemTime>,
    /// The latest state change the server records: the schedule, the last start attempt's
    /// completion (the handler started the work), a cancel request, the close.
    pub last_changed: Option<SystemTime>,
    /// When the operation ended (`close_time`) or, while it runs, when it must end by
    /// (`expiration_time`, its schedule-to-close deadline): Temporal keeps it for the
    /// namespace's retention after that.
    pub ends_by: Option<SystemTime>,
}

impl OperationTimes {
    pub fn of(info: &NexusOperationExecutionInfo) -> Self {
        let changes = [
            info.schedule_time,
            info.last_attempt_complete_time,
            info.cancellation_info
                .as_ref()
                .and_then(|c| c.requested_time),
            info.close_time,
        ];
        Self {
            scheduled: info.schedule_time.and_then(system_time),
            last_changed: changes.into_iter().flatten().filter_map(system_time).max(),
            ends_by: info
                .close_time
                .or(info.expiration_time)
                .and_then(system_time),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use prost_wkt_types::Timestamp;
    use temporalio_protos::temporal::api::nexus::v1::NexusOperationExecutionCancellationInfo;

    use super::*;

    fn at(seconds: i64) -> Option<Timestamp> {
        Some(Timestamp { seconds, nanos: 0 })
    }

    fn time(seconds: u64) -> Option<SystemTime> {
        Some(SystemTime::UNIX_EPOCH + Duration::from_secs(seconds))
    }

    #[test]
    fn the_last_change_is_the_latest_recorded_time() {
        let mut info = NexusOperationExecutionInfo {
            schedule_time: at(100),
            ..Default::default()
        };
        assert_eq!(
            OperationTimes::of(&info),
            OperationTimes {
                scheduled: time(100),
                last_changed: time(100),
                ends_by: None,
            }
        );
        info.expiration_time = at(200);
        assert_eq!(OperationTimes::of(&info).ends_by, time(200));
        info.last_attempt_complete_time = at(101);
        info.cancellation_info = Some(NexusOperationExecutionCancellationInfo {
            requested_time: at(105),
            ..Default::default()
        });
        assert_eq!(OperationTimes::of(&info).last_changed, time(105));
        info.close_time = at(107);
        let times = OperationTimes::of(&info);
        assert_eq!(
            (times.scheduled, times.last_changed, times.ends_by),
            (time(100), time(107), time(107))
        );
    }

    #[test]
    fn missing_times_stay_missing() {
        let times = OperationTimes::of(&NexusOperationExecutionInfo::default());
        assert_eq!(times, OperationTimes::default());
    }
}
