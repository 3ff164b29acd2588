//! What Claude Code's screen shows, read from the rows a terminal draws (R-CNF-22). The
//! driver acts only on what it sees: it types into a prompt that is drawn, idle and empty,
//! presses Enter only on the echo of what it typed, and answers a form by the state the form
//! shows. Claude Code draws spaces as cursor moves, so only a terminal's rows (not the bytes
//! it printed) tell what a line holds.

/// One look at the screen: its rows as text.
#[derive(Debug, Clone, Default)]
pub struct Screen {
    rows: Vec<String>,
}

/// The elicitation form Claude Code draws when an MCP server asks for input (a `confirm`
/// checkbox, then Accept and Decline).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Form {
    /// The checkbox shows ☒.
    pub ticked: bool,
    /// The form's cursor (`❯`) is on Accept.
    pub on_accept: bool,
}

/// What Claude Code prints above an elicitation form.
const FORM_TITLE: &str = "requests your input";
/// The footer's hint while Claude Code works on a turn (shown while the prompt is empty).
const BUSY: &str = "esc to interrupt";
const PROMPT: char = '❯';
const RULE: char = '─';

impl Screen {
    pub fn new(rows: Vec<String>) -> Self {
        Self { rows }
    }

    /// The text in the prompt box (the rows between the last two rules, the first starting
    /// `❯`), its lines trimmed; `None` while no prompt box is drawn (starting up, or a form in
    /// its place).
    pub fn input(&self) -> Option<String> {
        let (start, end) = self.prompt_box()?;
        let lines: Vec<&str> = self.rows[start..end]
            .iter()
            .enumerate()
            .map(|(k, row)| {
                if k == 0 {
                    &row[PROMPT.len_utf8()..]
                } else {
                    row
                }
            })
            .map(str::trim)
            .collect();
        Some(lines.join("\n").trim().to_owned())
    }

    /// The rows of the prompt box's text: from its `❯` row to its closing rule.
    fn prompt_box(&self) -> Option<(usize, usize)> {
        let rules: Vec<usize> = (0..self.rows.len())
            .filter(|&i| self.rows[i].starts_with(RULE))
            .collect();
        let (&open, &close) = (rules.get(rules.len().checked_sub(2)?)?, rules.last()?);
        self.rows[open + 1]
            .starts_with(PROMPT)
            .then_some((open + 1, close))
    }

    /// Claude Code is working on a turn.
    pub fn busy(&self) -> bool {
        self.rows.iter().any(|r| r.contains(BUSY))
    }

    /// The form on screen, if one is (below the last prompt box, if any).
    pub fn form(&self) -> Option<Form> {
        let start = self.rows.iter().rposition(|r| r.contains(FORM_TITLE))?;
        if self.prompt_box().is_some_and(|(p, _)| p > start) {
            return None;
        }
        let rows = &self.rows[start..];
        Some(Form {
            ticked: rows
                .iter()
                .any(|r| r.contains("confirm:") && r.contains('☒')),
            on_accept: rows
                .iter()
                .any(|r| r.trim_start().starts_with(&format!("{PROMPT} Accept"))),
        })
    }

    /// The last `n` rows that hold anything, for a failure message.
    pub fn tail(&self, n: usize) -> String {
        let rows: Vec<&str> = self
            .rows
            .iter()
            .map(|r| r.trim_end())
            .filter(|r| !r.is_empty())
            .collect();
        rows[rows.len().saturating_sub(n)..].join("\n")
    }
}

impl Form {
    /// The key that moves this form on: Space ticks the box, Down goes to Accept, Enter
    /// sends it.
    pub fn next_key(self) -> &'static [u8] {
        match (self.ticked, self.on_accept) {
            (false, _) => b" ",
            (true, false) => b"\x1b[B",
            (true, true) => b"\r",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn screen(text: &str) -> Screen {
        Screen::new(text.lines().map(str::to_owned).collect())
    }

    const RULE_ROW: &str = "────────────────────────────────────────";

    fn prompt(input: &str, footer: &str) -> Screen {
        screen(&format!(
            " ▐▛███▛█   Claude Code v2.1.328\n❯ hosts turn 0 ev\n● ok\n{RULE_ROW}\n❯ {input}\n{RULE_ROW}\n  ⏵⏵ auto mode on (shift+tab to cycle){footer}"
        ))
    }

    #[test]
    fn the_prompt_box_is_read_not_the_transcript() {
        assert_eq!(prompt("", "").input().as_deref(), Some(""));
        let typed = prompt("hosts turn 1 ev", "");
        assert_eq!(typed.input().as_deref(), Some("hosts turn 1 ev"));
        // An Enter taken as a new line: the prompt holds two lines.
        assert_eq!(
            prompt("hosts turn 1 ev\n  ", "").input().as_deref(),
            Some("hosts turn 1 ev")
        );
        assert_eq!(
            prompt("hosts turn 1 ev\n  more", "").input().as_deref(),
            Some("hosts turn 1 ev\nmore")
        );
        let working = prompt("", " · esc to interrupt");
        assert!(working.busy() && !prompt("", "").busy());
        // Starting up: the banner, no prompt box yet.
        assert_eq!(screen(" ▐▛███▛█   Claude Code v2.1.328\n").input(), None);
    }

    #[test]
    fn a_forms_state_says_which_key_moves_it_on() {
        let asked = |confirm: &str, accept: &str| {
            screen(&format!(
                "❯ hosts turn 2 mockd\n  Calling mockd · 4s…\n{RULE_ROW}\n  MCP server “mockd” requests your input\n  Delete 40 GB?\n  {confirm}\n  {accept}\n  Esc to cancel"
            ))
        };
        let fresh = asked("❯ * confirm: ☐", "  Accept    Decline");
        assert_eq!(fresh.input(), None);
        assert_eq!(fresh.form().unwrap().next_key(), b" ");
        let ticked = asked("❯ ✔ confirm: ☒", "  Accept    Decline");
        assert_eq!(ticked.form().unwrap().next_key(), b"\x1b[B");
        let on_accept = asked("  ✔ confirm: ☒", "❯ Accept    Decline");
        assert_eq!(on_accept.form().unwrap().next_key(), b"\r");
        assert_eq!(prompt("", "").form(), None);
        // A form's title left above a prompt box is not a form on screen.
        let answered = format!(
            "  MCP server “mockd” requests your input\n{}",
            prompt("", "").tail(9)
        );
        assert_eq!(screen(&answered).form(), None);
    }

    #[test]
    fn the_tail_skips_blank_rows() {
        assert_eq!(screen("a\n\n  \nb  \nc").tail(2), "b\nc");
    }
}
