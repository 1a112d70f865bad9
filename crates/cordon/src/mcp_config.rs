//! The local (stdio) MCP servers the agents' own MCP configs name, read on the host when a
//! session starts — before the agent runs, so nothing it writes during the session counts:
//!
//! - Claude Code: `~/.claude.json` (`mcpServers`, and `projects[PROJECT].mcpServers`) and the
//!   project's `.mcp.json` (`mcpServers`);
//! - Codex: `$CODEX_HOME/config.toml`, else `~/.codex/config.toml` (`[mcp_servers.NAME]`);
//! - Gemini CLI: `~/.gemini/settings.json` and the project's `.gemini/settings.json`
//!   (`mcpServers`).
//!
//! Only entries with a `command` are stdio servers (the others have a `url` / `httpUrl`: the
//! HTTP layer governs those). A file that is missing or unreadable names no server.

use std::path::{Path, PathBuf};

use cordon_policy::McpStdio;
use serde_json::Value;

/// Every stdio server the configs of `home` and `project` name, in the order above.
pub fn stdio_servers(home: &Path, project: &Path) -> Vec<McpStdio> {
    let mut out = Vec::new();
    let claude = home.join(".claude.json");
    if let Some(v) = json(&claude) {
        from_map(&mut out, &claude, v.get("mcpServers"));
        let projects = v
            .get("projects")
            .and_then(|p| p.get(project.to_string_lossy().as_ref()));
        from_map(
            &mut out,
            &claude,
            projects.and_then(|p| p.get("mcpServers")),
        );
    }
    let dot_mcp = project.join(".mcp.json");
    if let Some(v) = json(&dot_mcp) {
        from_map(&mut out, &dot_mcp, v.get("mcpServers"));
    }
    let codex = std::env::var_os("CODEX_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| home.join(".codex"))
        .join("config.toml");
    if let Some(v) = std::fs::read_to_string(&codex)
        .ok()
        .and_then(|t| toml::from_str::<toml::Table>(&t).ok())
        .and_then(|t| serde_json::to_value(t).ok())
    {
        from_map(&mut out, &codex, v.get("mcp_servers"));
    }
    for gemini in [
        home.join(".gemini/settings.json"),
        project.join(".gemini/settings.json"),
    ] {
        if let Some(v) = json(&gemini) {
            from_map(&mut out, &gemini, v.get("mcpServers"));
        }
    }
    out
}

fn json(p: &Path) -> Option<Value> {
    serde_json::from_slice(&std::fs::read(p).ok()?).ok()
}

/// The stdio servers of one `name → { command, args }` map.
fn from_map(out: &mut Vec<McpStdio>, source: &Path, map: Option<&Value>) {
    let Some(map) = map.and_then(Value::as_object) else {
        return;
    };
    for (name, s) in map {
        let Some(command) = s.get("command").and_then(Value::as_str) else {
            continue;
        };
        let args = s
            .get("args")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        // The exec layer knows a program by its file name.
        let program = Path::new(command)
            .file_name()
            .map_or(command.to_string(), |f| f.to_string_lossy().into_owned());
        out.push(McpStdio {
            name: name.clone(),
            source: source.display().to_string(),
            program,
            args,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_codex_and_gemini_configs_name_their_stdio_servers() {
        let d = tempfile::tempdir().unwrap();
        let (home, project) = (d.path().join("h"), d.path().join("p"));
        std::fs::create_dir_all(home.join(".codex")).unwrap();
        std::fs::create_dir_all(project.join(".gemini")).unwrap();
        let proj = project.display().to_string();
        std::fs::write(
            home.join(".claude.json"),
            serde_json::json!({
                "mcpServers": {"gh": {"type": "stdio", "command": "/usr/bin/npx", "args": ["-y", "gh"]},
                               "web": {"type": "http", "url": "https://mcp.example.com/mcp"}},
                "projects": {proj: {"mcpServers": {"db": {"command": "uvx", "args": ["db"]}}}},
            })
            .to_string(),
        )
        .unwrap();
        std::fs::write(
            home.join(".codex/config.toml"),
            "[mcp_servers.docs]\ncommand = \"node\"\nargs = [\"docs.js\"]\n",
        )
        .unwrap();
        std::fs::write(
            project.join(".gemini/settings.json"),
            r#"{"mcpServers": {"fs": {"command": "fs-server"}}}"#,
        )
        .unwrap();
        let got: Vec<(String, String, Vec<String>)> = stdio_servers(&home, &project)
            .into_iter()
            .map(|s| (s.name, s.program, s.args))
            .collect();
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            got,
            [
                ("gh".into(), "npx".into(), s(&["-y", "gh"])),
                ("db".into(), "uvx".into(), s(&["db"])),
                ("docs".into(), "node".into(), s(&["docs.js"])),
                ("fs".into(), "fs-server".into(), vec![]),
            ]
        );
    }
}
