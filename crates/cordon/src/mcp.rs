//! MCP, the binary's part: the HTTP layer set to govern MCP with the session's pins file, and
//! `cordon mcp pins` / `cordon mcp accept` to review and accept a tool that changed since it
//! was pinned (see `cordon_http::mcp`).

use std::path::PathBuf;

use anyhow::{Context, Result, anyhow};

use crate::cli::McpCmd;

/// `$XDG_STATE_HOME/cordon/mcp-pins.json`: on the host, beside the audit logs, where the
/// sandbox cannot write.
pub fn pins_path() -> Option<PathBuf> {
    cordon_events::state_dir().map(|d| d.join("mcp-pins.json"))
}

/// Sets `layer` to govern MCP by `plan`'s `[mcp]`.
pub fn govern(layer: &cordon_http::HttpLayer, plan: &cordon_policy::Plan) -> Result<()> {
    layer
        .govern_mcp(&plan.mcp, pins_path())
        .context("read the MCP pins (move the file away to start pinning afresh)")
}

/// Finds the local MCP servers the agents' configs name (see `mcp_config`), and makes each
/// `stdio:` `[[mcp.rule]]` that denies or asks an exec rule for their spawns, ahead of the
/// rest: the exec layer then tags (`mcp_server`), holds or refuses each spawn.
pub fn stdio(plan: &mut cordon_policy::Plan, emit: &dyn Fn(cordon_events::NewEvent)) {
    use cordon_events::{Action, Layer, NewEvent};
    plan.mcp.stdio = crate::mcp_config::stdio_servers(&plan.home, &plan.project);
    if plan.mcp.stdio.is_empty() {
        return;
    }
    let mut rules = plan.mcp.stdio_exec_rules();
    let governed = rules.len();
    rules.append(&mut plan.exec.rules);
    plan.exec.rules = rules;
    let names: Vec<String> = plan
        .mcp
        .stdio
        .iter()
        .map(|s| format!("{} ({})", s.name, s.exec_pattern()))
        .collect();
    emit(
        NewEvent::new(
            Layer::Mcp,
            Action::Apply,
            format!(
                "local MCP servers the agent may start: {}; {governed} held or refused by [[mcp.rule]]",
                names.join(", ")
            ),
        )
        .detail("servers", plan.mcp.stdio.iter().map(|s| s.name.clone()).collect::<Vec<_>>()),
    );
}

pub fn command(c: McpCmd) -> i32 {
    match run(c) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("cordon: {e:#}");
            1
        }
    }
}

fn run(c: McpCmd) -> Result<i32> {
    use cordon_http::mcp::pins::PinFile;
    let path =
        pins_path().ok_or_else(|| anyhow!("no state directory: set HOME or XDG_STATE_HOME"))?;
    let mut file = PinFile::read(&path)?;
    match c {
        McpCmd::Pins => {
            if file.servers.is_empty() {
                println!("no MCP tools pinned yet ({})", path.display());
            }
            for (server, tools) in &file.servers {
                // Names and descriptions come from the MCP servers: escaped for the terminal.
                let server = one_line(server);
                println!("{server}");
                for (name, pin) in tools {
                    let name = one_line(name);
                    match &pin.changed {
                        None => println!("  {name}  pinned  {}", one_line(&pin.description)),
                        Some(_) => {
                            println!("  {name}  CHANGED (held)");
                            println!("    was: {}", one_line(&pin.description));
                            let now = pin.changed_description.as_deref().unwrap_or("");
                            println!("    now: {}", one_line(now));
                            println!("    to accept: cordon mcp accept {server} {name}");
                        }
                    }
                }
            }
            Ok(0)
        }
        McpCmd::Accept { server, tool } => {
            if !file.accept(&server, &tool) {
                eprintln!(
                    "cordon: {tool} on {server} is not held (see `cordon mcp pins`); nothing to accept"
                );
                return Ok(1);
            }
            file.write(&path)?;
            println!("accepted: {tool} on {server} is pinned as it is now; its calls go again");
            Ok(0)
        }
    }
}

/// `s` on one line, whitespace runs as one space, unsafe characters escaped.
fn one_line(s: &str) -> String {
    cordon_events::terminal::safe(&s.split_whitespace().collect::<Vec<_>>().join(" "))
}
