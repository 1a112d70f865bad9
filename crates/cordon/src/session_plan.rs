//! One session's plan, whole: the policy as loaded with everything the session resolves on
//! the host folded in, and the sandbox's view (what is staged, shown, placed, and the sockets
//! it is handed). It is made in two steps only — [`resolve`] (the policy: no live resource,
//! so `cordon check` and `cordon explain` call it too) and [`SessionPlan::assemble`] (at
//! the start's join, with what the gateway, the credentials and the state layer resolved) —
//! and then only read: the sandbox, the state layer and the summary take what they need from
//! it, and `check` renders the same value, so what it prints is what runs.

use std::path::PathBuf;
use std::time::SystemTime;

use cordon_events::NewEvent;
use cordon_policy::{ExpiredGrant, Loaded, PathRule, Plan};
use cordon_sandbox::{PlacedSocket, Staged};

/// Why a path is denied when the host's ssh agent socket is masked (see [`resolve`]).
const HOST_AGENT: &str = "the host's ssh agent (SSH_AUTH_SOCK)";
/// Why a file of the home's view is denied (see [`Parts::masked`]).
const VIEW_SECRET: &str = "the home's view: holds a secret";

/// The policy half of a session's plan: `loaded`'s plan with the rules that have ended left
/// out and the host's part resolved into it.
pub(crate) struct Resolved {
    pub plan: Plan,
    /// The rules taken out because they ended (`run`, `check` and `explain` say them with
    /// `grants::say`; `run` logs them).
    pub expired: Vec<ExpiredGrant>,
}

/// The policy a session starting at `now` enforces. Everything here reads the host but
/// starts nothing, so `run`, `check` and `explain` share it:
/// - the rules that have ended are left out (`until`, `for`);
/// - the registry tokens of the home's shown `.npmrc` files become credentials (their
///   placeholders inside);
/// - the local MCP servers of the agents' configs become exec rules ahead of the rest (their
///   spawns tagged, held or refused by `[[mcp.rule]]`);
/// - the host's ssh agent socket is denied wherever it lives: in a path the sandbox sees
///   (`~/.1password/agent.sock`, a directory under `/var/tmp`) a client could talk to the
///   real agent past the filter.
pub(crate) fn resolve(
    loaded: &Loaded,
    learning: bool,
    now: SystemTime,
    emit: &dyn Fn(NewEvent),
) -> Resolved {
    let mut plan = loaded.plan.clone();
    plan.learning = learning;
    let expired = plan.expire(now);
    crate::home::add_home_credentials(&mut plan);
    crate::mcp::stdio(&mut plan, emit);
    if let Some(sock) = crate::ssh::host_agent().filter(|p| p.is_absolute()) {
        plan.filesystem.deny.push(PathRule::new(sock, HOST_AGENT));
    }
    Resolved { plan, expired }
}

/// What the start resolved beside the policy, for [`SessionPlan::assemble`].
#[derive(Default)]
pub(crate) struct Parts {
    /// Variables set inside to a credential's placeholder (never its value).
    pub env: Vec<(String, String)>,
    /// Files of the agent's state shown in the home that hold a secret: denied.
    pub masked: Vec<PathBuf>,
    /// What the sandbox mounts copy-on-write: the home, the caches, the protected paths.
    pub staged: Vec<Staged>,
    /// Host files shown with other content: masked copies of credential files, `[ssh] show`.
    pub shown: Vec<(PathBuf, String)>,
    /// Sockets of host-side services placed inside (the filtering ssh agent).
    pub sockets: Vec<PlacedSocket>,
    /// Whether the HTTP layer intercepts (cordon's CA could be had).
    pub http_layer: bool,
}

/// One session's plan, whole. Built by [`SessionPlan::assemble`], then only read, or handed to
/// the run whole ([`SessionPlan::into_run`]).
pub(crate) struct SessionPlan {
    plan: Plan,
    staged: Vec<Staged>,
    shown: Vec<(PathBuf, String)>,
    placed: Vec<(PathBuf, String)>,
    sockets: Vec<PlacedSocket>,
}

impl SessionPlan {
    /// The plan the session runs: `resolved` with the credentials' placeholders set and the
    /// home view's secret files denied, and the view the sandbox is given, including the
    /// session's own policy placed for `cordon explain` inside (made from this same plan).
    pub(crate) fn assemble(resolved: Plan, parts: Parts, session: &str) -> Self {
        let mut session_plan = Self::preview(resolved, parts.env, &parts.masked);
        session_plan.placed =
            crate::explain::placed_files(&session_plan.plan, session, parts.http_layer);
        session_plan.staged = parts.staged;
        session_plan.shown = parts.shown;
        session_plan.sockets = parts.sockets;
        session_plan
    }

    /// The plan alone, as `cordon check` shows it: no view, nothing placed.
    pub(crate) fn preview(mut plan: Plan, env: Vec<(String, String)>, masked: &[PathBuf]) -> Self {
        plan.env.set.extend(env);
        plan.filesystem
            .deny
            .extend(masked.iter().map(|p| PathRule::new(p, VIEW_SECRET)));
        SessionPlan {
            plan,
            staged: Vec::new(),
            shown: Vec::new(),
            placed: Vec::new(),
            sockets: Vec::new(),
        }
    }

    /// The policy every layer enforces.
    pub(crate) fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The plan every layer enforces and the sandbox's command: `base` (what to run, where,
    /// how) with this plan's view, moved into it rather than copied.
    pub(crate) fn into_run(self, base: cordon_sandbox::Command) -> (Plan, cordon_sandbox::Command) {
        let cmd = cordon_sandbox::Command {
            staged: self.staged,
            shown: self.shown,
            placed: self.placed,
            sockets: self.sockets,
            ..base
        };
        (self.plan, cmd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assembly_sets_placeholders_and_denies_the_views_secrets() {
        let parts = Parts {
            env: vec![("API_KEY".into(), "cordon-placeholder".into())],
            masked: vec![PathBuf::from("/home/u/.agent/auth.json")],
            http_layer: true,
            ..Parts::default()
        };
        let plan: Plan =
            serde_json::from_str(r#"{"project":"/p","home":"/home/u"}"#).expect("a bare plan");
        let s = SessionPlan::assemble(plan, parts, "s1");
        assert_eq!(
            s.plan().env.set.get("API_KEY").map(String::as_str),
            Some("cordon-placeholder")
        );
        assert!(
            s.plan()
                .filesystem
                .deny
                .iter()
                .any(|r| r.path == std::path::Path::new("/home/u/.agent/auth.json"))
        );
        // The policy placed inside is this plan, placeholder included.
        let json = &s
            .placed
            .iter()
            .find(|(p, _)| p == std::path::Path::new(cordon_sandbox::explain::POLICY_JSON))
            .expect("the policy is placed")
            .1;
        assert!(json.contains("cordon-placeholder"), "{json}");
        assert!(json.contains("auth.json"), "{json}");
    }
}
