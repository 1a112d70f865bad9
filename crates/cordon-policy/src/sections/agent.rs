//! `[agent]` (in a `[profile.NAME]`): which commands select the profile on their own
//! (auto-detection, matched by [`crate::detect`]; outside a profile they select nothing), and
//! which hosts the agent phones besides
//! its API — telemetry, update checks — whose denials are expected: still denied and in the
//! audit log, but not announced on the terminal one by one (the exit line counts them).

use serde_spanned::Spanned;

use crate::PolicyError;
use crate::pattern::HostPattern;
use crate::schema::{Schema, Shape, toml_string};
use crate::sections::{Convert, Loosen, Origin, Render, Section, Sections, append_new};

/// The selected profile's agent: how it is recognised, and what it phones that is denied
/// quietly.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AgentPlan {
    /// Program names (the command's file name) that select this profile.
    pub commands: Vec<String>,
    /// Package names (npm, PyPI) whose runners (`npx`, `uvx`, `node …/cli.js`, …) select it.
    pub packages: Vec<String>,
    /// Hosts whose denials are not announced on the terminal (logged all the same).
    pub quiet: Vec<HostPattern>,
}

impl AgentPlan {
    /// Whether a denial of `host` is one of the expected, quiet ones.
    pub fn is_quiet(&self, host: &str) -> bool {
        self.quiet.iter().any(|p| p.matches(host))
    }
}

raw_table! {
    /// `[profile.NAME.agent]` as written.
    pub(crate) struct Raw example "commands = [\"claude\"]" {
        /// Program names that select the profile.
        commands: Strings = "commands = [\"claude\"]",
        /// Package names (npm, PyPI) whose runners (`npx`, `uvx`, …) select it.
        packages: Strings = "packages = [\"@anthropic-ai/claude-code\"]",
        /// Hosts whose denials are logged but not announced on the terminal.
        quiet: Strings = "quiet = [\"statsig.anthropic.com\"]",
    }
}

/// `[agent]` of one layer's profile, or merged.
#[derive(Debug, Clone, Default)]
pub(crate) struct Agent {
    pub commands: Vec<(String, Origin)>,
    pub packages: Vec<(String, Origin)>,
    pub quiet: Vec<(HostPattern, Origin)>,
}

impl Agent {
    /// The plan's form, for detection before any merge.
    pub(crate) fn to_plan(&self) -> AgentPlan {
        self.clone().plan()
    }
}

/// A command or package name: printable, no spaces, no path (a name is matched, not a file).
fn name(cx: &Convert<'_>, v: &Spanned<String>, key: &str) -> Result<String, PolicyError> {
    let n = v.get_ref().trim();
    let bad = n.is_empty()
        || n.chars().any(|c| c.is_whitespace() || c.is_control())
        || (key == "commands" && n.contains('/'));
    if bad {
        return Err(cx.diag(
            format!("invalid name {} in `{key}`", toml_string(v.get_ref())),
            v.span(),
            match key {
                "commands" => "a program's file name, e.g. commands = [\"claude\"]",
                _ => {
                    "a package name as its registry spells it, e.g. packages = [\"@openai/codex\"]"
                }
            },
        ));
    }
    Ok(n.to_string())
}

impl Section for Agent {
    type Raw = Raw;
    type Plan = AgentPlan;
    const SHAPE: Shape = Shape::Table(&Raw::TABLE);

    fn convert(raw: Raw, cx: &mut Convert<'_>) -> Result<Self, PolicyError> {
        let mut out = Agent::default();
        for v in &raw.commands {
            out.commands
                .push((name(cx, v, "commands")?, cx.origin(v.span())));
        }
        for v in &raw.packages {
            out.packages
                .push((name(cx, v, "packages")?, cx.origin(v.span())));
        }
        for v in &raw.quiet {
            out.quiet.push((cx.host_glob(v)?, cx.origin(v.span())));
        }
        Ok(out)
    }

    fn merge(&mut self, later: &Self) {
        append_new(&mut self.commands, &later.commands, |a, b| a == b);
        append_new(&mut self.packages, &later.packages, |a, b| a == b);
        append_new(&mut self.quiet, &later.quiet, |a, b| a == b);
    }

    // Nothing here lets anything more through: a quiet host is still denied and logged.
    fn loosen(_full: &Sections, _base: &Sections, _out: &mut Loosen<'_>) {}

    fn plan(self) -> AgentPlan {
        AgentPlan {
            commands: self.commands.into_iter().map(|(c, _)| c).collect(),
            packages: self.packages.into_iter().map(|(p, _)| p).collect(),
            quiet: self.quiet.into_iter().map(|(q, _)| q).collect(),
        }
    }

    fn render(a: &AgentPlan, out: &mut Render) {
        if a.commands.is_empty() && a.packages.is_empty() && a.quiet.is_empty() {
            return;
        }
        out.header("agent");
        // Outside a profile (as `cordon check` prints the merged policy) these select
        // nothing: they say which agent the profile was for.
        out.strings("commands", &a.commands);
        out.strings("packages", &a.packages);
        out.line("# Denied and logged, not announced one by one: telemetry, update checks.");
        let q: Vec<String> = a.quiet.iter().map(ToString::to_string).collect();
        out.strings("quiet", &q);
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::sections::{Context, Sections};

    /// What `cordon check` prints for the section loads back to the same plan, and a profile's
    /// agent is what detection reads.
    #[test]
    fn renders_and_loads_back() {
        let plan = crate::render::tests::full_plan();
        let text = plan.to_toml();
        assert!(text.contains("[agent]"), "{text}");
        let ctx = Context {
            home: Path::new("/home/u"),
            passwd_home: None,
            project: Path::new("/work/p"),
        };
        let layer = crate::file::parse_file(&text, Some(Path::new("/r.toml")), 1, &ctx)
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        let mut merged = Sections::default();
        merged.merge(&layer.base);
        assert_eq!(merged.agent.to_plan(), plan.agent);
        let src = "[profile.x.agent]\ncommands = [\"x\"]\nquiet = [\"*.t.test\"]\n";
        let l = crate::file::parse_file(src, Some(Path::new("/p.toml")), 1, &ctx).unwrap();
        let a = l.profiles["x"].agent.to_plan();
        assert_eq!(a.commands, ["x"]);
        assert!(a.is_quiet("a.t.test") && !a.is_quiet("t.test.evil"));
        for bad in [
            "commands = [\"a/b\"]",
            "packages = [\"a b\"]",
            "quiet = [\"http://x\"]",
        ] {
            let e = crate::file::parse_file(&format!("[agent]\n{bad}\n"), None, 1, &ctx)
                .unwrap_err()
                .to_string();
            assert!(e.contains("e.g."), "{bad}: {e}");
        }
    }
}
