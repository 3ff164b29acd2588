//! Which calls of a row were lost or run twice (R-CNF-13). An error is not a loss: a
//! call that failed and said so was not lost, however a loaded machine made it fail. Lost is
//! a call the tool never ran although no error was reported for it (it got an answer, or
//! nothing at all); duplicated is a call the tool ran more than once. On the inline path a call
//! run more than once is a re-run instead: R-PRX-30 lets the server send an inline call's start
//! again (its answer came after the request deadline, or the handler failed retryably), and
//! only re-runnable tools go inline, so a second run is allowed there and fails nothing.

use std::collections::HashMap;

use super::paths::PathKind;

/// How one call ended for its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// It got its own answer.
    Answered,
    /// An error was reported to the caller (a JSON-RPC error, an `isError` result, someone
    /// else's answer).
    Failed,
    /// No answer and no error within the driver's limit.
    Unanswered,
}

/// A row's tally.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Calls that did not end with their own answer (failed or unanswered).
    pub errors: usize,
    pub lost: usize,
    /// Calls run more than once where that is not allowed: these fail the run.
    pub duplicated: usize,
    /// Calls run more than once where R-PRX-30 allows it (the inline path): reported only.
    pub rerun: usize,
}

/// Whether a call of `path` may run more than once: only on the inline path, whose re-sent
/// starts R-PRX-30 allows for the re-runnable tools it places inline.
pub fn reruns_allowed(path: PathKind) -> bool {
    path == PathKind::InlineHttp
}

/// Tallies `ended` (one entry per call, in call order, each with the key it sent). `runs` is
/// how often the upstream ran each key, from its ledger, or `None` for a path whose work does
/// not reach the upstream (the floor): then nothing tells whether a call ran, so none counts
/// as lost or duplicated (an unanswered call is an error the driver reported: on a saturated
/// machine the floor's calls do pass the driver's 60 s limit). With `reruns_allowed`
/// ([`reruns_allowed`]) a call run more than once counts as re-run, not duplicated.
pub fn tally(
    ended: &[(String, Ended)],
    runs: Option<&HashMap<String, usize>>,
    reruns_allowed: bool,
) -> Tally {
    let mut t = Tally::default();
    for (key, how) in ended {
        if *how != Ended::Answered {
            t.errors += 1;
        }
        if let Some(runs) = runs {
            let n = runs.get(key).copied().unwrap_or(0);
            if n == 0 && *how != Ended::Failed {
                t.lost += 1;
            }
            match n {
                0 | 1 => {}
                _ if reruns_allowed => t.rerun += 1,
                _ => t.duplicated += 1,
            }
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calls(list: &[(&str, Ended)]) -> Vec<(String, Ended)> {
        list.iter().map(|(k, e)| ((*k).to_owned(), *e)).collect()
    }

    #[test]
    fn a_reported_error_is_an_error_not_a_loss() {
        let ended = calls(&[("a", Ended::Answered), ("b", Ended::Failed)]);
        let runs = HashMap::from([("a".to_owned(), 1)]);
        assert_eq!(
            tally(&ended, Some(&runs), false),
            Tally {
                errors: 1,
                ..Tally::default()
            }
        );
    }

    #[test]
    fn a_call_never_run_without_an_error_is_lost() {
        // Unanswered and never run; answered although the tool never ran.
        let ended = calls(&[("a", Ended::Unanswered), ("b", Ended::Answered)]);
        let t = tally(&ended, Some(&HashMap::new()), false);
        assert_eq!((t.errors, t.lost), (1, 2));
    }

    #[test]
    fn an_unanswered_call_that_ran_is_an_error_only() {
        let ended = calls(&[("a", Ended::Unanswered)]);
        let runs = HashMap::from([("a".to_owned(), 1)]);
        assert_eq!((tally(&ended, Some(&runs), false).lost), 0);
    }

    #[test]
    fn a_call_run_twice_is_duplicated_whatever_its_caller_saw() {
        let ended = calls(&[("a", Ended::Answered), ("b", Ended::Failed)]);
        let runs = HashMap::from([("a".to_owned(), 2), ("b".to_owned(), 3)]);
        let t = tally(&ended, Some(&runs), false);
        assert_eq!((t.errors, t.lost, t.duplicated), (1, 0, 2));
    }

    #[test]
    fn an_inline_call_run_twice_is_a_rerun_and_no_duplicate() {
        let ended = calls(&[("a", Ended::Answered), ("b", Ended::Answered)]);
        let runs = HashMap::from([("a".to_owned(), 2), ("b".to_owned(), 1)]);
        let inline = tally(&ended, Some(&runs), reruns_allowed(PathKind::InlineHttp));
        assert_eq!((inline.duplicated, inline.rerun, inline.lost), (0, 1, 0));
        // Every other path: the same ledger is a duplicate.
        for path in PathKind::ALL
            .into_iter()
            .filter(|p| *p != PathKind::InlineHttp)
        {
            let t = tally(&ended, Some(&runs), reruns_allowed(path));
            assert_eq!((t.duplicated, t.rerun), (1, 0), "{path:?}");
        }
        // A re-run never hides a loss.
        let ended = calls(&[("a", Ended::Answered), ("c", Ended::Answered)]);
        let t = tally(&ended, Some(&runs), true);
        assert_eq!((t.lost, t.rerun, t.duplicated), (1, 1, 0));
    }

    #[test]
    fn without_a_ledger_nothing_is_lost_and_silence_is_an_error() {
        let ended = calls(&[
            ("a", Ended::Answered),
            ("b", Ended::Failed),
            ("c", Ended::Unanswered),
        ]);
        let t = tally(&ended, None, false);
        assert_eq!((t.errors, t.lost, t.duplicated), (2, 0, 0));
    }
}
