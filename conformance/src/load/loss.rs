//! Which calls of a row were lost or run twice (R-CNF-13). An error is not a loss: a
//! call that failed and said so was not lost, however a loaded machine made it fail. Lost is
//! a call the tool never ran although no error was reported for it (it got an answer, or
//! nothing at all); duplicated is a call the tool ran more than once.

use std::collections::HashMap;

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
    pub duplicated: usize,
}

/// Tallies `ended` (one entry per call, in call order, each with the key it sent). `runs` is
/// how often the upstream ran each key, from its ledger, or `None` for a path whose work does
/// not reach the upstream (the floor): then nothing tells whether a call ran, so none counts
/// as lost or duplicated (an unanswered call is an error the driver reported: on a saturated
/// machine the floor's calls do pass the driver's 60 s limit).
pub fn tally(ended: &[(String, Ended)], runs: Option<&HashMap<String, usize>>) -> Tally {
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
            if n > 1 {
                t.duplicated += 1;
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
            tally(&ended, Some(&runs)),
            Tally {
                errors: 1,
                lost: 0,
                duplicated: 0
            }
        );
    }

    #[test]
    fn a_call_never_run_without_an_error_is_lost() {
        // Unanswered and never run; answered although the tool never ran.
        let ended = calls(&[("a", Ended::Unanswered), ("b", Ended::Answered)]);
        let t = tally(&ended, Some(&HashMap::new()));
        assert_eq!((t.errors, t.lost), (1, 2));
    }

    #[test]
    fn an_unanswered_call_that_ran_is_an_error_only() {
        let ended = calls(&[("a", Ended::Unanswered)]);
        let runs = HashMap::from([("a".to_owned(), 1)]);
        assert_eq!((tally(&ended, Some(&runs)).lost), 0);
    }

    #[test]
    fn a_call_run_twice_is_duplicated_whatever_its_caller_saw() {
        let ended = calls(&[("a", Ended::Answered), ("b", Ended::Failed)]);
        let runs = HashMap::from([("a".to_owned(), 2), ("b".to_owned(), 3)]);
        let t = tally(&ended, Some(&runs));
        assert_eq!((t.errors, t.lost, t.duplicated), (1, 0, 2));
    }

    #[test]
    fn without_a_ledger_nothing_is_lost_and_silence_is_an_error() {
        let ended = calls(&[
            ("a", Ended::Answered),
            ("b", Ended::Failed),
            ("c", Ended::Unanswered),
        ]);
        let t = tally(&ended, None);
        assert_eq!((t.errors, t.lost, t.duplicated), (2, 0, 0));
    }
}
