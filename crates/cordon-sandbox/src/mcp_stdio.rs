//! Local (stdio) MCP servers, made visible: an exec event whose command starts a server the
//! agent's MCP config names (`cordon_policy::McpStdio`) is tagged `mcp_server = NAME`, so the
//! log says which server each spawn is. Deciding the spawn is the exec rules' job (a
//! `stdio:` `[[mcp.rule]]` becomes one when the session starts).

use cordon_events::{Layer, NewEvent};
use cordon_policy::McpStdio;

/// `ev` tagged with the server its exec starts, if it is an exec event that starts one.
pub(crate) fn tag(servers: &[McpStdio], ev: NewEvent) -> NewEvent {
    if servers.is_empty() || ev.layer != Layer::Exec {
        return ev;
    }
    let text = |k: &str| ev.detail.get(k).and_then(|v| v.as_str()).unwrap_or("");
    let args: Vec<String> = ev
        .detail
        .get("args")
        .and_then(|v| v.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let found = servers
        .iter()
        .find(|s| s.matches(text("program"), text("resolved"), &args));
    match found {
        Some(s) => {
            let (name, source) = (s.name.clone(), s.source.clone());
            ev.detail("mcp_server", name).detail("mcp_config", source)
        }
        None => ev,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cordon_events::Action;

    #[test]
    fn a_spawn_of_a_configured_server_is_tagged_and_others_are_not() {
        let servers = [McpStdio {
            name: "github".into(),
            source: "/h/.claude.json".into(),
            program: "npx".into(),
            args: vec!["-y".into(), "@x/github".into()],
        }];
        let ev = |args: &[&str]| {
            NewEvent::new(Layer::Exec, Action::Allow, "exec allowed")
                .detail("program", "npx")
                .detail("resolved", "npx-cli.js")
                .detail("args", args.to_vec())
        };
        let t = tag(&servers, ev(&["-y", "@x/github"]));
        assert_eq!(t.detail["mcp_server"], "github");
        assert_eq!(t.detail["mcp_config"], "/h/.claude.json");
        assert!(
            !tag(&servers, ev(&["-y", "@x/other"]))
                .detail
                .contains_key("mcp_server")
        );
    }
}
