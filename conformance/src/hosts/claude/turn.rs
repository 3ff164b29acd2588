//! One turn of the Claude Code run (R-CNF-22), played by what the driver observes, never by
//! fixed waits: the prompt is typed only into an idle, empty prompt box and sent once its echo
//! is exactly right (a garbled line is cleared and typed again); an elicitation form is
//! answered key by key as it shows each state; a call the host cancels in the foreground gets
//! Escape while Claude Code shows it running; the turn is over when the answer reached the
//! model (the stand-in's record) or, for a cancelled call, when the upstream's ledger shows
//! the cancel. A key that showed no effect is pressed again after a growing pause ([`Pacer`]).

use std::time::{Duration, Instant};

use super::{
    Played, background_task,
    pty::Pty,
    screen::Screen,
    standin::{self, StandIn, Turn, result_text},
};
use crate::fixtures::{Ledger, LedgerEvent};

/// How long one turn may take before it fails naming itself.
pub const TURN_TIMEOUT: Duration = Duration::from_secs(90);
/// How often the driver looks at the screen and the stand-in's record.
const POLL: Duration = Duration::from_millis(100);
/// Ctrl+U: clears the prompt's line; Backspace then joins a second line to it.
const CLEAR_LINE: &[u8] = b"\x15\x7f";

/// When a key that showed no effect may be pressed again: `base` after the last press, twice
/// that after the next, up to 16 times `base`.
#[derive(Debug, Clone, Copy)]
pub struct Pacer {
    base: Duration,
    last: Option<Instant>,
    presses: u32,
}

impl Pacer {
    pub const fn new(base: Duration) -> Self {
        Self {
            base,
            last: None,
            presses: 0,
        }
    }

    pub fn due(&self, now: Instant) -> bool {
        let wait = self.base * 2u32.pow(self.presses.saturating_sub(1).min(4));
        self.last.is_none_or(|last| now >= last + wait)
    }

    pub fn press(&mut self, now: Instant) {
        self.last = Some(now);
        self.presses += 1;
    }

    pub fn reset(&mut self) {
        self.last = None;
        self.presses = 0;
    }
}

/// Types a turn's marker into Claude Code's prompt the way a careful person does.
#[derive(Debug)]
pub struct Typist {
    marker: String,
    stage: Stage,
    typed: Pacer,
    enter: Pacer,
    cleared: Pacer,
    /// How many times the marker was typed, and Enter pressed.
    pub typings: usize,
    pub enters: usize,
}

/// Where the marker stands in this round (a round ends when the model got it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Nothing typed: what the prompt shows is not ours (or a stale drawing of the last round).
    Fresh,
    Typed,
    /// Enter pressed when the stand-in had had this many requests holding the marker.
    Sent(usize),
}

impl Typist {
    pub fn new(marker: String) -> Self {
        let pacer = Pacer::new(Duration::from_secs(2));
        Self {
            marker,
            stage: Stage::Fresh,
            typed: pacer,
            enter: pacer,
            cleared: pacer,
            typings: 0,
            enters: 0,
        }
    }

    /// What to type now, seeing `screen`, when the stand-in has had `asked` requests holding
    /// the marker (one that did not list the turn's tool yet means: type it again); `None`:
    /// wait.
    pub fn next(&mut self, screen: &Screen, asked: usize, now: Instant) -> Option<Vec<u8>> {
        let input = screen.input();
        let echoed = input.as_deref() == Some(self.marker.as_str());
        if let Stage::Sent(at) = self.stage {
            if asked > at {
                // The model got it without the turn's tool: a new round.
                self.stage = Stage::Fresh;
                for pacer in [&mut self.typed, &mut self.enter, &mut self.cleared] {
                    pacer.reset();
                }
            } else {
                // Not at the model yet: Enter again only while the marker still sits in the
                // prompt (that Enter was lost, not slow).
                return (echoed && self.enter.due(now)).then(|| self.press_enter(now, at));
            }
        }
        if echoed && self.stage == Stage::Typed {
            return Some(self.press_enter(now, asked));
        }
        let input = input?;
        if screen.busy() || screen.form().is_some() {
            return None;
        }
        if input.is_empty() {
            if !self.typed.due(now) {
                return None;
            }
            self.typed.press(now);
            (self.typings, self.stage) = (self.typings + 1, Stage::Typed);
            return Some(self.marker.as_bytes().to_vec());
        }
        let arriving = self.stage == Stage::Typed && self.marker.starts_with(&input);
        if (arriving && !self.typed.due(now)) || !self.cleared.due(now) {
            return None;
        }
        self.cleared.press(now);
        self.typed.reset();
        self.stage = Stage::Fresh;
        Some(CLEAR_LINE.to_vec())
    }

    fn press_enter(&mut self, now: Instant, asked: usize) -> Vec<u8> {
        self.enter.press(now);
        self.enters += 1;
        self.stage = Stage::Sent(asked);
        b"\r".to_vec()
    }
}

/// Answers elicitation forms as they show each state (tick, Accept, send); counts the forms
/// it sent that then left the screen.
#[derive(Debug)]
pub struct FormAnswerer {
    last: Option<&'static [u8]>,
    pacer: Pacer,
    sent: bool,
    pub answered: usize,
}

impl Default for FormAnswerer {
    fn default() -> Self {
        Self {
            last: None,
            pacer: Pacer::new(Duration::from_secs(1)),
            sent: false,
            answered: 0,
        }
    }
}

impl FormAnswerer {
    /// The key to press now, seeing `screen`; `None`: wait.
    pub fn next(&mut self, screen: &Screen, now: Instant) -> Option<&'static [u8]> {
        let Some(form) = screen.form() else {
            self.answered += usize::from(std::mem::take(&mut self.sent));
            self.last = None;
            self.pacer.reset();
            return None;
        };
        let key = form.next_key();
        if self.last != Some(key) {
            self.pacer.reset();
        } else if !self.pacer.due(now) {
            return None;
        }
        self.pacer.press(now);
        self.last = Some(key);
        self.sent |= key == b"\r";
        Some(key)
    }
}

/// A call the host cancels: the mock's ledger tells when the upstream has it and when it was
/// cancelled; `escape`: cancelled with Escape while it runs in the foreground (directly),
/// else with `TaskStop` once Claude Code moved it to the background (through durable-mcp).
pub struct Cancel<'a> {
    pub ledger: &'a Ledger,
    pub tool: String,
    pub key: String,
    pub escape: bool,
}

impl Cancel<'_> {
    fn seen(&self, event: LedgerEvent) -> bool {
        self.ledger.count_key(&self.tool, event, &self.key) > 0
    }
}

/// Plays one turn to its end (see the module's doc).
pub async fn play(
    pty: &mut Pty,
    standin: &StandIn,
    turn: Turn,
    cancel: Option<Cancel<'_>>,
    run_until: Instant,
) -> Result<Played, String> {
    let mut typist = Typist::new(turn.marker.clone());
    standin.with(|r| r.begin(turn));
    let deadline = (Instant::now() + TURN_TIMEOUT).min(run_until);
    let (mut forms, mut escape) = (FormAnswerer::default(), Pacer::new(Duration::from_secs(2)));
    let mut played = Played::default();
    loop {
        if !pty.running() {
            return Err("Claude Code exited".into());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "no answer reached the model within {} s, or the run's time ran out ({})",
                TURN_TIMEOUT.as_secs(),
                super::describe(&played)
            ));
        }
        let (now, screen) = (Instant::now(), pty.screen());
        let (issued, asked) = standin.with(|r| (r.issued.clone(), r.asked));
        let mut keys = Vec::new();
        match &issued {
            None => keys.extend(typist.next(&screen, asked, now)),
            Some(id) => standin.with(|r| read_outcome(r, id, &mut played)),
        }
        keys.extend(forms.next(&screen, now).map(<[u8]>::to_vec));
        (played.dialogs_answered, played.typed) = (forms.answered, typist.typings);
        played.enters = typist.enters;
        if let Some(c) = cancel.as_ref().filter(|c| c.escape)
            && c.seen(LedgerEvent::Called)
            && !c.seen(LedgerEvent::Cancelled)
            && played.text.is_none()
            && screen.busy()
            && escape.due(now)
        {
            escape.press(now);
            played.interrupted = true;
            keys.push(b"\x1b".to_vec());
        }
        for key in keys {
            pty.type_bytes(&key).map_err(|e| e.to_string())?;
        }
        if finished(&played, cancel.as_ref()) {
            return Ok(played);
        }
        tokio::time::sleep(POLL).await;
    }
}

fn read_outcome(record: &standin::Record, issued: &str, played: &mut Played) {
    if let Some(block) = record.results.get(issued) {
        let text = result_text(block);
        played.is_error = block["is_error"] == true;
        played.background = background_task(&text);
        played.text = Some(text);
    }
    if let Some(task) = &played.background {
        played.notification = record
            .notifications
            .iter()
            .find(|n| &n.task_id == task)
            .cloned();
    }
    if let Some(stop) = &record.stop {
        played.stopped = record.results.get(stop).map(result_text);
    }
}

fn finished(played: &Played, cancel: Option<&Cancel<'_>>) -> bool {
    if let Some(cancel) = cancel {
        let cancelled = cancel.seen(LedgerEvent::Cancelled);
        return match (&played.background, &played.text) {
            (Some(_), _) => played.stopped.is_some() && cancelled,
            (None, Some(_)) => true,
            (None, None) => played.interrupted && cancelled,
        };
    }
    match (&played.background, &played.text) {
        (Some(_), _) => played.notification.is_some(),
        (None, text) => text.is_some(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULE: &str = "──────────";

    fn prompt(input: &str, footer: &str) -> Screen {
        let text = format!("● ok\n{RULE}\n❯ {input}\n{RULE}\n  ⏵⏵ auto mode on{footer}");
        Screen::new(text.lines().map(str::to_owned).collect())
    }

    #[test]
    fn a_pacer_waits_longer_after_each_press() {
        let (t, s) = (Instant::now(), Duration::from_secs(1));
        let mut pacer = Pacer::new(s);
        assert!(pacer.due(t));
        pacer.press(t);
        assert!(!pacer.due(t + s / 2) && pacer.due(t + s));
        pacer.press(t + s);
        assert!(!pacer.due(t + s * 2) && pacer.due(t + s * 3));
        pacer.reset();
        assert!(pacer.due(t));
    }

    #[test]
    fn the_marker_is_typed_into_an_idle_prompt_and_sent_on_its_echo() {
        let (t, s) = (Instant::now(), Duration::from_secs(1));
        let mut typist = Typist::new("hosts turn 0 ev".into());
        // Starting up (no prompt box) or working on a turn: nothing is typed.
        assert_eq!(typist.next(&Screen::default(), 0, t), None);
        assert_eq!(typist.next(&prompt("", " · esc to interrupt"), 0, t), None);
        let typed = typist.next(&prompt("", ""), 0, t).unwrap();
        assert_eq!(typed, b"hosts turn 0 ev");
        // The echo is still arriving: wait; no echo at all for a while: type again.
        assert_eq!(typist.next(&prompt("hosts tu", ""), 0, t + s), None);
        assert_eq!(typist.next(&prompt("", ""), 0, t + s), None);
        assert_eq!(typist.next(&prompt("", ""), 0, t + s * 2), Some(typed));
        // The exact echo: Enter.
        let echoed = prompt("hosts turn 0 ev", "");
        assert_eq!(typist.next(&echoed, 0, t + s * 2), Some(b"\r".to_vec()));
        // The marker still unsent after a while: the Enter was lost; press it again.
        assert_eq!(typist.next(&echoed, 0, t + s * 3), None);
        assert_eq!(typist.next(&echoed, 0, t + s * 4), Some(b"\r".to_vec()));
        // Sent and on its way: nothing more.
        assert_eq!(
            typist.next(&prompt("", " · esc to interrupt"), 0, t + s * 9),
            None
        );
        assert_eq!((typist.typings, typist.enters), (2, 2));
    }

    #[test]
    fn a_garbled_prompt_is_cleared_and_typed_again() {
        let (t, s) = (Instant::now(), Duration::from_secs(1));
        let mut typist = Typist::new("hosts turn 0 ev".into());
        assert_eq!(
            typist.next(&prompt("hoststurn0ev", ""), 0, t),
            Some(CLEAR_LINE.to_vec())
        );
        assert_eq!(typist.next(&prompt("hoststurn0ev", ""), 0, t + s), None);
        assert_eq!(
            typist.next(&prompt("", ""), 0, t + s).as_deref(),
            Some(&b"hosts turn 0 ev"[..])
        );
    }

    #[test]
    fn a_prompt_the_model_got_without_the_tool_listed_is_typed_again() {
        let t = Instant::now();
        let mut typist = Typist::new("m".into());
        typist.next(&prompt("", ""), 0, t);
        assert_eq!(typist.next(&prompt("m", ""), 0, t), Some(b"\r".to_vec()));
        // The stand-in got it (asked 1) and answered text. A drawing that still shows the
        // marker in the prompt is stale: no Enter for it.
        assert_ne!(typist.next(&prompt("m", ""), 1, t), Some(b"\r".to_vec()));
        assert_eq!(typist.next(&prompt("", " · esc to interrupt"), 1, t), None);
        // Once idle again, type it again.
        assert_eq!(typist.next(&prompt("", ""), 1, t), Some(b"m".to_vec()));
        assert_eq!(typist.next(&prompt("m", ""), 1, t), Some(b"\r".to_vec()));
        assert_eq!(typist.next(&prompt("m", ""), 1, t), None);
    }

    #[test]
    fn a_form_is_answered_by_what_it_shows_and_counted_once_gone() {
        let (t, s) = (Instant::now(), Duration::from_secs(1));
        let form = |confirm: &str, accept: &str| {
            let text =
                format!("{RULE}\n  MCP server “m” requests your input\n  {confirm}\n  {accept}");
            Screen::new(text.lines().map(str::to_owned).collect())
        };
        let mut forms = FormAnswerer::default();
        let fresh = form("❯ * confirm: ☐", "  Accept");
        assert_eq!(forms.next(&fresh, t), Some(&b" "[..]));
        // No effect yet: not pressed again until the pacer allows.
        assert_eq!(forms.next(&fresh, t + s / 2), None);
        assert_eq!(forms.next(&fresh, t + s), Some(&b" "[..]));
        assert_eq!(
            forms.next(&form("❯ ✔ confirm: ☒", "  Accept"), t + s),
            Some(&b"\x1b[B"[..])
        );
        assert_eq!(
            forms.next(&form("  ✔ confirm: ☒", "❯ Accept"), t + s),
            Some(&b"\r"[..])
        );
        assert_eq!(forms.answered, 0);
        assert_eq!(forms.next(&prompt("", ""), t + s), None);
        assert_eq!(forms.answered, 1);
        assert_eq!(forms.next(&prompt("", ""), t + s), None);
        assert_eq!(forms.answered, 1);
    }
}
