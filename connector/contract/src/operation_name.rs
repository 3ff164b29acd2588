//! The Nexus operation name of a tool (R-NXC-5).
//!
//! Temporal routes a Nexus operation by putting its name into a URL path, so a `/` in a tool's
//! name (`files/read`, allowed by MCP's first tool-name draft and written by real upstreams)
//! splits it and the call ends in a `NOT_FOUND` handler error. Every byte outside MCP's
//! tool-name characters (`A-Z a-z 0-9 _ - .`), and `~` itself, is written as `~` and two
//! upper-case hex digits of its UTF-8 byte; a name made only of dots (`.`, `..`, which a path
//! would collapse) has its dots written so too, and a tool named like the reserved listing
//! operation (`list_tools`) has its `_` written so (`list~5Ftools`), so that calling it does not
//! list the tools. The other reserved operations (R-NXC-8) start with `~~`, which no name written
//! here holds. Every other name MCP recommends maps to itself, so
//! existing operations and Workflow histories are unchanged. The connector, the in-Workflow
//! client and native services encode; the proxy decodes.

use super::listing::LIST_TOOLS;

/// The escape byte: unreserved in URLs, so it travels through a path untouched.
const ESCAPE: u8 = b'~';

/// The Nexus operation name for the MCP tool `tool`.
pub fn operation_for_tool(tool: &str) -> String {
    let only_dots = !tool.is_empty() && tool.bytes().all(|b| b == b'.');
    // The listing's own operation is not the tool of that name: its `_` is escaped.
    let reserved = tool == LIST_TOOLS;
    let mut out = String::with_capacity(tool.len());
    for b in tool.bytes() {
        let plain =
            b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.') || (b == b'_' && !reserved);
        if plain && !only_dots {
            out.push(b as char);
        } else {
            out.push_str(&format!("~{b:02X}"));
        }
    }
    out
}

/// The MCP tool name an operation name stands for, or `None` when it is not one
/// [`operation_for_tool`] writes (a stray `~`, bad hex, bytes that are not UTF-8, or an escape
/// where none is needed: each tool has exactly one operation name).
pub fn tool_for_operation(operation: &str) -> Option<String> {
    let bytes = operation.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == ESCAPE {
            let hex = operation.get(i + 1..i + 3)?;
            if hex.bytes().any(|h| h.is_ascii_lowercase()) {
                return None;
            }
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    let tool = String::from_utf8(out).ok()?;
    (operation_for_tool(&tool) == operation).then_some(tool)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_mcp_recommends_are_their_own_operation() {
        for name in [
            "echo",
            "getUser",
            "DATA_EXPORT_v2",
            "admin.tools.list",
            "a-b",
            "list_tools_v2",
        ] {
            assert_eq!(operation_for_tool(name), name);
            assert_eq!(tool_for_operation(name).as_deref(), Some(name));
        }
    }

    #[test]
    fn other_bytes_are_escaped_reversibly() {
        for (tool, op) in [
            ("files/read", "files~2Fread"),
            ("a b", "a~20b"),
            ("a~b", "a~7Eb"),
            ("%2F", "~252F"),
            ("é", "~C3~A9"),
            ("..", "~2E~2E"),
            // The tool of that name is not the reserved listing operation.
            ("list_tools", "list~5Ftools"),
            // Tools named like a feature operation's name without its `~~` keep their names.
            ("read_resource", "read_resource"),
            ("upstream_capabilities", "upstream_capabilities"),
            (".", "~2E"),
            ("", ""),
        ] {
            assert_eq!(operation_for_tool(tool), op, "{tool:?}");
            assert_eq!(tool_for_operation(op).as_deref(), Some(tool), "{op:?}");
        }
    }

    #[test]
    fn names_no_tool_encodes_to_are_refused() {
        for op in [
            "a~",
            "a~2",
            "a~zz",
            "a~2f",
            "~41",
            "~FF",
            "a/b",
            "a.~2E",
            "list_tools",
            "~~get_prompt",
            "~~complete_argument",
        ] {
            assert_eq!(tool_for_operation(op), None, "{op:?}");
        }
    }
}
