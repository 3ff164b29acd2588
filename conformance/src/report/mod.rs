//! Reporting, one model for every run (R-CNF-10): a run emits [`Event`]s; a [`Recorder`] folds
//! them into a [`RunRecord`]; the live progress lines, the summary table, JUnit XML and JSON are
//! all rendered from those, for bundled scenarios and third-party checks alike.

use std::time::Duration;

use crate::run::ScenarioResult;

mod case_outcome;
mod event;
pub use case_outcome::{CaseOutcome, Counts, Verdict, junit};
pub use event::{Event, Recorder, RunKind, RunRecord, progress_line};

/// A scenario's result as a [`CaseOutcome`] (the case its `Event::Finished` carries).
pub fn scenario_outcome(r: &ScenarioResult) -> CaseOutcome {
    CaseOutcome {
        name: r.id.clone(),
        suite: r.family.clone(),
        verdict: if r.passed {
            Verdict::Pass
        } else if let Some(why) = &r.skipped {
            Verdict::Skip(why.clone())
        } else {
            Verdict::Fail(r.message.clone().unwrap_or_default())
        },
        duration: Some(r.duration),
        rules: r.rules.clone(),
        output: r.steps.join("\n"),
    }
}

/// A long run's progress line, `run [mm:ss]: what`, with the time since it began (minutes past
/// 59 keep counting: `load [75:02]`).
pub fn elapsed_line(run: &str, elapsed: Duration, what: &str) -> String {
    let s = elapsed.as_secs();
    format!("{run} [{:02}:{:02}]: {what}", s / 60, s % 60)
}

pub fn fmt_duration(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}
