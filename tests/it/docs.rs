//! The documentation (README.md and docs/*.md) tells the truth about the code, checked without a
//! Temporal server:
//!
//! - every long flag and environment variable that `--help` prints, for every binary users run
//!   and every subcommand of the conformance runner, is documented;
//! - every key the proxy's config parser accepts is in the complete example of
//!   docs/proxy-config.md, which the real parser accepts, and is described outside it; the keys
//!   are learnt from the parser itself (an unknown key's error lists the known ones), not from a
//!   list that could drift;
//! - every relative link resolves to a file of the repository, and every `#anchor` to a heading;
//! - code blocks are checked by their language: `toml` blocks parse as proxy config (a fragment
//!   laid over a minimal config), `yaml` blocks holding `auth:` parse as inbound auth config,
//!   `json` blocks parse and their `--route` values are routes, and every command line in `sh`,
//!   `yaml` and `json` blocks that runs one of the binaries uses flags that binary has; those
//!   that ask for `--help`, `--version` or `--check`, or `list` scenarios, are run.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    process::Command,
};

use crate::support::workspace_bin;

/// The binaries users run, whose flags the docs must cover.
const BINARIES: [&str; 4] = [
    "durable-mcp-connector",
    "durable-mcp-proxy",
    "durable-mcp-example-agent",
    "durable-mcp-conformance",
];
const CONFORMANCE: &str = "durable-mcp-conformance";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

/// README.md and every docs/*.md, with their text.
fn documents() -> Vec<(PathBuf, String)> {
    let root = root();
    let mut paths = vec![root.join("README.md")];
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.sort();
    paths.extend(pages);
    paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            (p, text)
        })
        .collect()
}

fn shown(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// A fenced code block: its info string, its text and the line it starts on.
struct Block {
    info: String,
    text: String,
    line: usize,
}

/// The fenced code blocks of a Markdown text, and the text outside them (code lines blanked, so
/// line numbers stay).
fn split_blocks(markdown: &str) -> (Vec<Block>, String) {
    let mut blocks = Vec::new();
    let mut prose = String::new();
    let mut open: Option<Block> = None;
    for (n, line) in markdown.lines().enumerate() {
        let fence = line.trim_start().starts_with("```");
        match (&mut open, fence) {
            (None, true) => {
                open = Some(Block {
                    info: line.trim_start()[3..].trim().to_owned(),
                    text: String::new(),
                    line: n + 1,
                })
            }
            (Some(_), true) => blocks.push(open.take().unwrap()),
            (Some(block), false) => {
                block.text.push_str(line);
                block.text.push('\n');
            }
            (None, false) => prose.push_str(line),
        }
        prose.push('\n');
    }
    assert!(open.is_none(), "a code block is never closed");
    (blocks, prose)
}

/// The language of a block: the first word of its info string (`rust,no_run` is `rust`).
fn language(block: &Block) -> &str {
    block.info.split([' ', ',']).next().unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// Flags

/// `bin args... --help`, which must succeed.
fn help(bin: &str, args: &[&str]) -> String {
    let out = Command::new(workspace_bin(bin).unwrap())
        .args(args)
        .arg("--help")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{bin} {args:?} --help failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The long flags of a clap help text: on option lines (indented at most six spaces, starting
/// with `-`), before the description.
fn long_flags(help: &str) -> BTreeSet<String> {
    let mut flags = BTreeSet::new();
    for line in help.lines() {
        let trimmed = line.trim_start();
        if line.len() - trimmed.len() > 6 || !trimmed.starts_with('-') {
            continue;
        }
        let syntax = trimmed.split("  ").next().unwrap_or_default();
        for token in syntax.split([' ', ',']) {
            if let Some(name) = token.strip_prefix("--") {
                let name: String = name
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                    .collect();
                if !name.is_empty() {
                    flags.insert(format!("--{name}"));
                }
            }
        }
    }
    flags
}

/// The environment variables a help text names as `[env: NAME]`.
fn env_vars(help: &str) -> BTreeSet<String> {
    help.split("[env: ")
        .skip(1)
        .map(|rest| {
            rest.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        })
        .collect()
}

/// The subcommands a help text lists under `Commands:` (without `help`).
fn subcommands(help: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in help.lines() {
        if line.trim_end() == "Commands:" {
            inside = true;
            continue;
        }
        if !inside {
            continue;
        }
        if line.trim().is_empty() || !line.starts_with(' ') {
            break;
        }
        // A command line is indented two spaces; descriptions that wrap are indented more.
        if line.starts_with("  ") && !line.starts_with("   ") {
            let name = line.split_whitespace().next().unwrap_or_default();
            if name != "help" {
                out.push(name.to_owned());
            }
        }
    }
    out
}

/// Every command the docs may run: `bin` or `durable-mcp-conformance SUBCOMMAND`, with its long
/// flags; and every environment variable the help texts name.
fn commands() -> (BTreeMap<String, BTreeSet<String>>, BTreeSet<String>) {
    let mut commands = BTreeMap::new();
    let mut env = BTreeSet::new();
    for bin in BINARIES {
        let text = help(bin, &[]);
        env.extend(env_vars(&text));
        commands.insert(bin.to_owned(), long_flags(&text));
        if bin == CONFORMANCE {
            let subs = subcommands(&text);
            assert!(
                subs.len() >= 4,
                "{bin} --help lists subcommands {subs:?}: has its help format changed?"
            );
            for sub in subs {
                let text = help(bin, &[&sub]);
                env.extend(env_vars(&text));
                commands.insert(format!("{bin} {sub}"), long_flags(&text));
            }
        }
    }
    (commands, env)
}

/// Whether `word` occurs in `text` with no flag or name character right after it.
fn mentions(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(at, _)| {
        !text[at + word.len()..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    })
}

#[test]
fn every_flag_and_environment_variable_of_the_binaries_is_documented() {
    let (commands, env) = commands();
    let all: String = documents().into_iter().map(|(_, text)| text).collect();
    let mut missing = Vec::new();
    for (command, flags) in &commands {
        assert!(
            flags.contains("--help"),
            "no flags read from `{command} --help`: has its help format changed? {flags:?}"
        );
        for flag in flags {
            if !mentions(&all, flag) {
                missing.push(format!("{command}: {flag}"));
            }
        }
    }
    for var in &env {
        if !mentions(&all, var) {
            missing.push(format!("environment variable {var}"));
        }
    }
    assert!(
        missing.is_empty(),
        "documented nowhere in README.md or docs/ (docs/connector-flags.md lists flags):\n  {}",
        missing.join("\n  ")
    );
}

// ---------------------------------------------------------------------------------------------
// Proxy configuration

/// Values for `${NAME}` in documented configs: every variable is set.
fn any_env(name: &str) -> Option<String> {
    Some(format!("value-of-{name}"))
}

fn parse_proxy_config(text: &str) -> Result<(), String> {
    durable_mcp::proxy::config::parse(text, &any_env)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The keys a table accepts, learnt from the parser: `doc` with an unknown key added to the table
/// at `path` fails naming the keys it expected. `None` when the table is a map of the user's own
/// names (it takes any key).
fn keys_the_parser_accepts(doc: &toml::Table, path: &[Step]) -> Option<BTreeSet<String>> {
    const PROBE: &str = "zz_not_a_key";
    let mut probed = doc.clone();
    table_at(&mut probed, path).insert(PROBE.into(), toml::Value::String("x".into()));
    let text = toml::to_string(&probed).unwrap();
    let error = parse_proxy_config(&text).err()?;
    let listed = error.split(&format!("unknown field `{PROBE}`")).nth(1)?;
    let listed = listed.lines().next().unwrap_or_default();
    Some(
        listed
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect(),
    )
}

/// One step from a table to a table inside it: a key, or a key and an index into its array.
#[derive(Clone, Debug)]
enum Step {
    Key(String),
    Item(String, usize),
}

fn table_at<'a>(table: &'a mut toml::Table, path: &[Step]) -> &'a mut toml::Table {
    path.iter().fold(table, |t, step| match step {
        Step::Key(k) => t.get_mut(k).unwrap().as_table_mut().unwrap(),
        Step::Item(k, i) => t.get_mut(k).unwrap().as_array_mut().unwrap()[*i]
            .as_table_mut()
            .unwrap(),
    })
}

/// Every table of a TOML document (tables in arrays included), with its path.
fn tables(table: &toml::Table, path: Vec<Step>, out: &mut Vec<(Vec<Step>, toml::Table)>) {
    out.push((path.clone(), table.clone()));
    for (key, value) in table {
        match value {
            toml::Value::Table(t) => {
                let mut p = path.clone();
                p.push(Step::Key(key.clone()));
                tables(t, p, out);
            }
            toml::Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    if let toml::Value::Table(t) = item {
                        let mut p = path.clone();
                        p.push(Step::Item(key.clone(), i));
                        tables(t, p, out);
                    }
                }
            }
            _ => {}
        }
    }
}

fn describe(path: &[Step]) -> String {
    let parts: Vec<String> = path
        .iter()
        .map(|s| match s {
            Step::Key(k) => k.clone(),
            Step::Item(k, i) => format!("{k}[{i}]"),
        })
        .collect();
    if parts.is_empty() {
        "the top level".into()
    } else {
        parts.join(".")
    }
}

#[test]
fn the_complete_proxy_config_example_has_every_key_the_parser_accepts() {
    let path = root().join("docs/proxy-config.md");
    let page = std::fs::read_to_string(&path).unwrap();
    let (blocks, prose) = split_blocks(&page);
    let example = blocks
        .iter()
        .find(|b| language(b) == "toml" && b.text.contains("[worker]"))
        .expect("docs/proxy-config.md has a complete example (a toml block with [worker])");
    if let Err(e) = parse_proxy_config(&example.text) {
        panic!(
            "the complete example (docs/proxy-config.md line {}) is refused by the parser: {e}",
            example.line
        );
    }
    let doc: toml::Table = toml::from_str(&example.text).unwrap();
    let mut all = Vec::new();
    tables(&doc, Vec::new(), &mut all);
    // Tables that accept the same keys are of one kind (every upstream, every set of Activity
    // options): together, the example's tables of a kind must use every key of it.
    let mut kinds: BTreeMap<BTreeSet<String>, (Vec<String>, BTreeSet<String>)> = BTreeMap::new();
    let mut probed = 0;
    for (at, table) in &all {
        let Some(accepted) = keys_the_parser_accepts(&doc, at) else {
            continue; // a map of the user's own names: headers, env, overrides, ...
        };
        probed += 1;
        let (places, used) = kinds.entry(accepted).or_default();
        places.push(describe(at));
        used.extend(table.keys().cloned());
    }
    let mut missing = Vec::new();
    let mut undescribed = BTreeSet::new();
    for (accepted, (places, used)) in &kinds {
        for key in accepted {
            if !used.contains(key) {
                missing.push(format!("{key} (in a table like {})", places.join(", ")));
            }
            if !prose.contains(&format!("`{key}`")) {
                undescribed.insert(key.clone());
            }
        }
    }
    // worker, temporal, codec, the top level, each upstream, its oauth, activity_options,
    // retry_policy, priority and an override: fewer means the probe stopped working.
    assert!(
        probed >= 10,
        "only {probed} tables of the example told their keys: has the parser's error changed?"
    );
    assert!(
        missing.is_empty(),
        "keys the parser accepts but the complete example in docs/proxy-config.md lacks:\n  {}",
        missing.join("\n  ")
    );
    assert!(
        undescribed.is_empty(),
        "keys not described (as `key`) outside the example in docs/proxy-config.md: {undescribed:?}"
    );
}

/// A TOML block that is not a whole config is laid over a minimal one: top-level tables replace
/// the base's, an `upstream` table is merged into the base's one HTTP upstream.
fn over_minimal_config(fragment: &toml::Table) -> String {
    let mut base: toml::Table = toml::from_str(
        r#"
        [worker]
        task_queue = "docs"
        [[upstream]]
        service = "docs"
        transport = "http"
        url = "https://mcp.example.com/mcp"
        "#,
    )
    .unwrap();
    for (key, value) in fragment {
        match (key.as_str(), value) {
            ("upstream", toml::Value::Table(t)) => {
                let upstream = base["upstream"].as_array_mut().unwrap()[0]
                    .as_table_mut()
                    .unwrap();
                for (k, v) in t {
                    upstream.insert(k.clone(), v.clone());
                }
            }
            _ => {
                base.insert(key.clone(), value.clone());
            }
        }
    }
    toml::to_string(&base).unwrap()
}

// ---------------------------------------------------------------------------------------------
// Links

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown file's headings (outside code blocks), duplicates numbered.
fn anchors(markdown: &str) -> BTreeSet<String> {
    let (_, prose) = split_blocks(markdown);
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for line in prose.lines() {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(&line[hashes..]);
        let n = seen.entry(base.clone()).or_default();
        out.insert(match *n {
            0 => base.clone(),
            k => format!("{base}-{k}"),
        });
        *n += 1;
    }
    out
}

/// The targets of the inline links `[text](target)` of a text.
fn link_targets(prose: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in prose.lines().enumerate() {
        for (at, _) in line.match_indices("](") {
            let rest = &line[at + 2..];
            if let Some(end) = rest.find(')') {
                out.push((n + 1, rest[..end].trim().to_owned()));
            }
        }
    }
    out
}

#[test]
fn every_relative_link_resolves_to_a_file_and_heading_of_the_repository() {
    let root = root().canonicalize().unwrap();
    let mut broken = Vec::new();
    let mut checked = 0;
    for (path, text) in documents() {
        let (_, prose) = split_blocks(&text);
        for (line, target) in link_targets(&prose) {
            if target.starts_with("http://")
                || target.starts_with("https://")
                || target.starts_with("mailto:")
            {
                continue;
            }
            checked += 1;
            let place = format!("{}:{line}: ({target})", shown(&path));
            let (file, anchor) = match target.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (target.as_str(), None),
            };
            let resolved = if file.is_empty() {
                path.clone()
            } else {
                path.parent().unwrap().join(file)
            };
            let Ok(resolved) = resolved.canonicalize() else {
                broken.push(format!("{place}: no such file"));
                continue;
            };
            if !resolved.starts_with(&root) {
                broken.push(format!("{place}: outside the repository"));
                continue;
            }
            if let Some(anchor) = anchor
                && resolved.extension().is_some_and(|e| e == "md")
            {
                let target_text = std::fs::read_to_string(&resolved).unwrap();
                if !anchors(&target_text).contains(anchor) {
                    broken.push(format!("{place}: no heading with anchor #{anchor}"));
                }
            }
        }
    }
    assert!(checked >= 20, "only {checked} relative links found");
    assert!(
        broken.is_empty(),
        "broken links:\n  {}",
        broken.join("\n  ")
    );
}

// ---------------------------------------------------------------------------------------------
// Code blocks

/// Splits a command line into words as a POSIX shell would (quotes, backslashes), without
/// expanding anything; a word starting with `#` outside quotes ends the line.
fn words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    word.push(c);
                }
            }
            '"' => {
                in_word = true;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => word.extend(chars.next()),
                        c => word.push(c),
                    }
                }
            }
            '\\' => {
                in_word = true;
                word.extend(chars.next());
            }
            '#' if !in_word => break,
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// The logical lines of a block: a line ending in `\`, or followed by one that starts with
/// `--` (a YAML folded command), continues on the next.
fn logical_lines(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut continues = false;
    for line in text.lines() {
        let trimmed = line.trim();
        let joined = continues || (trimmed.starts_with("--") && !out.is_empty());
        let content = trimmed.strip_suffix('\\').unwrap_or(trimmed).to_owned();
        if joined {
            let last = out.last_mut().unwrap();
            last.push(' ');
            last.push_str(&content);
        } else {
            out.push(content);
        }
        continues = trimmed.ends_with('\\');
    }
    out
}

/// One run of a binary found in a command line: which command (a key of [`commands`]) and its
/// arguments.
struct Invocation {
    command: String,
    args: Vec<String>,
}

/// The runs of the binaries in one command line: the binary by name or path,
/// `cargo run ... --bin NAME -- ARGS` (or `-p durable-mcp-conformance -- ARGS`), and the `just`
/// recipes that run the conformance runner.
fn invocations(line: &str) -> Vec<Invocation> {
    let words = words(line);
    let mut out = Vec::new();
    let end_of_command = |w: &str| matches!(w, "&&" | "||" | "|" | ";" | "&");
    let mut i = 0;
    while i < words.len() {
        let word = words[i].as_str();
        let base = word.rsplit('/').next().unwrap_or(word);
        let (binary, args_from, subcommand) = if BINARIES.contains(&base) {
            (Some(base.to_owned()), i + 1, None)
        } else if word == "cargo" && words.get(i + 1).is_some_and(|w| w == "run") {
            let rest = &words[i + 2..];
            let stop = rest.iter().position(|w| w == "--").unwrap_or(rest.len());
            let named = rest[..stop]
                .windows(2)
                .find(|w| w[0] == "--bin")
                .map(|w| w[1].clone())
                .or_else(|| {
                    rest[..stop]
                        .windows(2)
                        .any(|w| w[0] == "-p" && w[1] == CONFORMANCE)
                        .then(|| CONFORMANCE.to_owned())
                });
            (named, i + 2 + stop + 1, None)
        } else if word == "just" {
            let sub = match words.get(i + 1).map(String::as_str) {
                Some("load") => Some("load"),
                Some("chaos") => Some("chaos"),
                Some("conformance") => Some("run"),
                Some("temporal") => Some("temporal"),
                _ => None,
            };
            (
                sub.map(|_| CONFORMANCE.to_owned()),
                i + 2,
                sub.map(str::to_owned),
            )
        } else {
            (None, i + 1, None)
        };
        let Some(binary) = binary else {
            i += 1;
            continue;
        };
        let mut args: Vec<String> = words
            .get(args_from..)
            .unwrap_or_default()
            .iter()
            .take_while(|w| !end_of_command(w))
            .cloned()
            .collect();
        i = args_from + args.len();
        let command = if binary == CONFORMANCE {
            let sub = match subcommand {
                Some(sub) => sub,
                None => match args.iter().position(|a| !a.starts_with('-')) {
                    Some(at) => args.remove(at),
                    None => {
                        out.push(Invocation {
                            command: binary,
                            args,
                        });
                        continue;
                    }
                },
            };
            format!("{binary} {sub}")
        } else {
            binary
        };
        out.push(Invocation { command, args });
    }
    out
}

/// Checks an invocation's flags; runs it when it only asks for help, a version, a config check
/// or the scenario list. Problems go to `problems`.
fn check_invocation(
    place: &str,
    run: &Invocation,
    commands: &BTreeMap<String, BTreeSet<String>>,
    problems: &mut Vec<String>,
) {
    let Some(flags) = commands.get(&run.command) else {
        problems.push(format!("{place}: `{}` is not a command", run.command));
        return;
    };
    for arg in &run.args {
        if let Some(flag) = arg.strip_prefix("--").filter(|f| !f.is_empty()) {
            let name = format!("--{}", flag.split('=').next().unwrap());
            if !flags.contains(&name) {
                problems.push(format!("{place}: `{}` has no flag {name}", run.command));
            }
        }
    }
    let harmless = run
        .args
        .iter()
        .any(|a| matches!(a.as_str(), "--help" | "--version" | "--check"))
        || run.command == format!("{CONFORMANCE} list");
    if !harmless {
        return;
    }
    let mut parts = run.command.split(' ');
    let bin = parts.next().unwrap();
    let out = Command::new(workspace_bin(bin).unwrap())
        .args(parts)
        .args(&run.args)
        .current_dir(root())
        .output()
        .unwrap();
    if !out.status.success() {
        problems.push(format!(
            "{place}: `{} {}` failed: {}",
            run.command,
            run.args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
}

#[test]
fn code_blocks_parse_and_commands_use_real_flags() {
    let (commands, _) = commands();
    let mut problems = Vec::new();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for (path, text) in documents() {
        let (blocks, _) = split_blocks(&text);
        for block in &blocks {
            let place = format!("{}:{}", shown(&path), block.line);
            let lang = language(block);
            *counts
                .entry(match lang {
                    "toml" | "yaml" | "json" | "sh" => lang.to_owned(),
                    _ => "other".to_owned(),
                })
                .or_default() += 1;
            let mut command_lines = Vec::new();
            match lang {
                "toml" => match toml::from_str::<toml::Table>(&block.text) {
                    Err(e) => problems.push(format!("{place}: not TOML: {e}")),
                    Ok(table) => {
                        let config = match table.contains_key("worker") {
                            true => block.text.clone(),
                            false => over_minimal_config(&table),
                        };
                        if let Err(e) = parse_proxy_config(&config) {
                            problems.push(format!("{place}: not a proxy config: {e}"));
                        }
                    }
                },
                "yaml" => {
                    if block.text.starts_with("auth:")
                        && let Err(e) = durable_mcp::connector::auth::AuthConfig::parse(&block.text)
                    {
                        problems.push(format!("{place}: not an auth config: {e}"));
                    }
                    command_lines.extend(logical_lines(&block.text));
                }
                "json" => match serde_json::from_str::<serde_json::Value>(&block.text) {
                    Err(e) => problems.push(format!("{place}: not JSON: {e}")),
                    Ok(json) => {
                        let servers = json["mcpServers"].as_object().cloned().unwrap_or_default();
                        for (name, server) in servers {
                            let args: Vec<String> = server["args"]
                                .as_array()
                                .into_iter()
                                .flatten()
                                .filter_map(|a| a.as_str().map(str::to_owned))
                                .collect();
                            for pair in args.windows(2).filter(|w| w[0] == "--route") {
                                if let Err(e) = durable_mcp::connector::route::parse_route(&pair[1])
                                {
                                    problems.push(format!("{place}: {name}: bad route: {e}"));
                                }
                            }
                            let command = server["command"].as_str().unwrap_or_default();
                            let base = command.rsplit('/').next().unwrap_or_default();
                            if BINARIES.contains(&base) {
                                let run = Invocation {
                                    command: base.to_owned(),
                                    args,
                                };
                                check_invocation(&place, &run, &commands, &mut problems);
                            }
                        }
                    }
                },
                "sh" => command_lines.extend(logical_lines(&block.text)),
                _ => {}
            }
            for line in command_lines {
                for run in invocations(&line) {
                    check_invocation(&place, &run, &commands, &mut problems);
                }
            }
        }
    }
    for lang in ["toml", "yaml", "json", "sh"] {
        assert!(
            counts.get(lang).is_some_and(|n| *n > 0),
            "no {lang} blocks found in the docs: {counts:?}"
        );
    }
    assert!(
        problems.is_empty(),
        "code blocks that do not hold:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn command_lines_are_read_like_a_shell_reads_them() {
    assert_eq!(
        words(r#"a 'b c' "d \"e\"" f\ g # comment"#),
        ["a", "b c", "d \"e\"", "f g"]
    );
    let runs = invocations(
        "CODEC_AUTH=x target/debug/durable-mcp-proxy --config p.toml && just load --short",
    );
    let seen: Vec<(&str, Vec<&str>)> = runs
        .iter()
        .map(|r| {
            (
                r.command.as_str(),
                r.args.iter().map(String::as_str).collect(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("durable-mcp-proxy", vec!["--config", "p.toml"]),
            ("durable-mcp-conformance load", vec!["--short"]),
        ]
    );
    let runs = invocations("cargo run -p durable-mcp-conformance -- codec-server --addr a &");
    assert_eq!(runs[0].command, "durable-mcp-conformance codec-server");
    assert_eq!(runs[0].args, ["--addr", "a"]);
    assert_eq!(
        logical_lines("x \\\n  --a\ny\n  --b\n"),
        ["x  --a", "y --b"]
    );
    assert_eq!(
        slug("`[upstream.oauth]` (optional)"),
        "upstreamoauth-optional"
    );
    assert_eq!(
        long_flags("  -c, --config <FILE>  Text --not-this\n      --check\n          --nor-this"),
        BTreeSet::from(["--config".to_owned(), "--check".to_owned()])
    );
}
