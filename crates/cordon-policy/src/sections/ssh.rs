//! `[ssh]`: git and ssh over SSH from inside (layer 1b). The sandbox gets cordon's filtering
//! agent instead of the user's (it signs only logins to hosts the network plan allows, whose
//! host keys are in the user's `known_hosts`), and sees chosen files of the masked `~/.ssh`.

use crate::PolicyError;
use crate::schema::{Schema, Shape};
use crate::sections::{
    Convert, Loosen, PathEntry, PathRule, Render, Scalar, Section, Sections, append_rules,
    path_rules, set_scalar,
};

/// SSH from inside the sandbox.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SshPlan {
    /// Whether `SSH_AUTH_SOCK` inside points at cordon's filtering agent (when the host has
    /// an agent). It fails closed: it signs nothing for a host the policy does not allow.
    pub agent: bool,
    /// Files shown read-only (a copy taken at start) even inside a denied directory:
    /// `~/.ssh/known_hosts` and `~/.ssh/config`, never private keys.
    pub show: Vec<PathRule>,
}

raw_table! {
    /// `[ssh]` as written.
    pub(crate) struct Raw example "agent = false" {
        /// Point `SSH_AUTH_SOCK` inside at cordon's filtering agent, which signs only for
        /// allowed hosts.
        agent: Boolean = "agent = false",
        /// Files shown read-only even inside a denied directory (never private keys).
        show: Strings = "show = [\"~/.ssh/known_hosts\"]",
    }
}

/// `[ssh]` of one layer, or merged.
#[derive(Debug, Clone, Default)]
pub(crate) struct Ssh {
    pub agent: Scalar<bool>,
    pub show: Vec<PathEntry>,
}

impl Section for Ssh {
    type Raw = Raw;
    type Plan = SshPlan;
    const SHAPE: Shape = Shape::Table(&Raw::TABLE);

    fn convert(raw: Raw, cx: &mut Convert<'_>) -> Result<Self, PolicyError> {
        // Paths are literal: `id_*` would show a file of that name, never the keys.
        if let Some(p) = raw
            .show
            .iter()
            .find(|p| p.get_ref().contains(['*', '?', '[']))
        {
            return Err(cx.diag(
                format!(
                    "show path {} has a glob, but paths are literal",
                    crate::schema::toml_string(p.get_ref())
                ),
                p.span(),
                "list each file instead, e.g. show = [\"~/.ssh/known_hosts\"]",
            ));
        }
        Ok(Ssh {
            agent: raw.agent.map(|a| (*a.get_ref(), cx.origin(a.span()))),
            show: cx.paths(&raw.show, "show", false)?,
        })
    }

    fn merge(&mut self, later: &Self) {
        set_scalar(&mut self.agent, &later.agent);
        append_rules(&mut self.show, &later.show);
    }

    fn loosen(full: &Sections, base: &Sections, out: &mut Loosen<'_>) {
        let (f, b) = (&full.ssh, &base.ssh);
        if let Some((true, o)) = &f.agent
            && !matches!(b.agent, Some((true, _)))
        {
            out.add(o, "turns on the filtering SSH agent".into());
        }
        for r in &f.show {
            if !b.show.iter().any(|x| x.path == r.path) {
                out.add(
                    &r.origin,
                    format!("shows {} inside the sandbox", r.path.display()),
                );
            }
        }
    }

    fn plan(self) -> SshPlan {
        SshPlan {
            agent: self.agent.is_some_and(|(a, _)| a),
            show: path_rules(self.show),
        }
    }

    fn render(ssh: &SshPlan, out: &mut Render) {
        out.header("ssh");
        out.line(format!("agent = {}", ssh.agent));
        out.rules("show", &ssh.show);
    }
}
