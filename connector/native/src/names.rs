//! Tool-name rules (R-NAT-2), checked when a tool service is built: pure functions.

use durable_mcp_contract::listing::LIST_TOOLS;

/// The longest tool name MCP allows.
pub const MAX_NAME_LEN: usize = 128;

/// Why a tool (or operation) name is refused; the text says what to change.
pub fn name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("a tool name must not be empty".into());
    }
    if name == LIST_TOOLS {
        return Some(format!(
            "{LIST_TOOLS:?} is reserved for the generated listing operation; rename the tool"
        ));
    }
    if name.chars().count() > MAX_NAME_LEN {
        return Some(format!(
            "tool name {name:?} is longer than MCP's {MAX_NAME_LEN} characters"
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
    {
        return Some(format!(
            "tool name {name:?} contains {bad:?}; MCP tool names use only ASCII letters, digits, \
             '_', '-' and '.'"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mcp_names_pass() {
        for ok in ["word_count", "slow-report", "a.b", "X9", &"a".repeat(128)] {
            assert_eq!(name_problem(ok), None, "{ok}");
        }
    }

    #[test]
    fn bad_names_are_refused_with_their_reason() {
        assert!(name_problem("").unwrap().contains("empty"));
        assert!(name_problem("list_tools").unwrap().contains("reserved"));
        assert!(name_problem(&"a".repeat(129)).unwrap().contains("128"));
        let spaced = name_problem("word count").unwrap();
        assert!(
            spaced.contains("\"word count\"") && spaced.contains("' '"),
            "{spaced}"
        );
        assert!(name_problem("wörd").unwrap().contains("'ö'"));
        assert!(name_problem("a/b").is_some());
    }
}
