//! `[exec]`: supervised exec rules, decided by the supervisor on seccomp notifications
//! (layer 4).

use serde_spanned::Spanned;

use crate::PolicyError;
use crate::expiry::{Expiry, outlasts};
use crate::pattern::glob_match;
use crate::schema::{Schema, Shape, toml_string};
use crate::sections::{Convert, Loosen, Origin, Render, Scalar, Section, Sections, set_scalar};

crate::choice! {
    /// What to do with an exec that a rule matches.
    pub enum ExecAction {
        /// Let it run.
        Allow = "allow",
        /// Fail it with EPERM and tell the terminal.
        Deny = "deny",
        /// Hold it until a person answers through `cordon approve` (or the timeout denies it).
        Ask = "ask",
    }
}

/// One exec rule: a glob over the command line `PROGRAM ARG1 ARG2 …`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ExecRule {
    /// Glob over `PROGRAM ARGS…`, where PROGRAM is the basename of the executed file and
    /// arguments are joined by single spaces; `*` matches any run of characters (spaces too),
    /// `?` one character. A trailing ` *` also matches the bare program (`git push *` matches
    /// `git push`).
    pub pattern: String,
    /// The action when it matches.
    pub action: ExecAction,
    /// `built-in`, or `FILE:LINE`.
    pub origin: cordon_events::Origin,
    /// When it ends (`until`, `for`); `None`: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<Expiry>,
}

/// Supervised exec rules (layer 4). The first matching rule decides; none matching allows.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ExecPlan {
    /// Ordered rules.
    pub rules: Vec<ExecRule>,
    /// Seconds an `ask` waits for a person before it is denied.
    pub ask_timeout_secs: u64,
}

const DEFAULT_ASK_TIMEOUT: u64 = 60;
const MAX_ASK_TIMEOUT: i64 = 3600;

impl Default for ExecPlan {
    fn default() -> Self {
        ExecPlan {
            rules: Vec::new(),
            ask_timeout_secs: DEFAULT_ASK_TIMEOUT,
        }
    }
}

impl ExecPlan {
    /// The first rule matching the command line `program args…`, if any.
    pub fn decide(&self, program: &str, args: &[String]) -> Option<&ExecRule> {
        let mut line = program.to_string();
        for a in args {
            line.push(' ');
            line.push_str(a);
        }
        self.rules.iter().find(|r| exec_glob(&r.pattern, &line))
    }

    /// The rule deciding an exec: the first rule (in plan order) matching the program by the
    /// name it was called by or by the file it really is (`resolved`, symlinks followed),
    /// with the same arguments. `None`: no rule, so it runs. The exec supervisor, `cordon
    /// explain` and `cordon replay` all decide with this.
    pub fn decide_exec(&self, program: &str, resolved: &str, args: &[String]) -> Option<&ExecRule> {
        let by_name = self.decide(program, args);
        let by_file = self.decide(resolved, args);
        let position = |r: &ExecRule| self.rules.iter().position(|x| std::ptr::eq(x, r));
        match (by_name, by_file) {
            (Some(a), Some(b)) => Some(if position(a) <= position(b) { a } else { b }),
            (a, b) => a.or(b),
        }
    }
}

impl ExecRule {
    /// How events and refusals name the rule: `ORIGIN (ACTION "PATTERN")`.
    pub fn label(&self) -> String {
        format!("{} ({} \"{}\")", self.origin, self.action, self.pattern)
    }
}

/// Glob match for exec rules ([`glob_match`]); a pattern ending in ` *` also matches the text
/// without that tail.
pub fn exec_glob(pattern: &str, text: &str) -> bool {
    glob_match(pattern, text)
        || pattern
            .strip_suffix(" *")
            .is_some_and(|head| glob_match(head, text))
}

raw_table! {
    /// One `[[exec.rule]]` as written.
    pub(crate) struct RawRule example "pattern = \"git push *\" and action = \"ask\"" {
        /// A glob over `PROGRAM ARGS…` (`*` any run of characters, `?` one); a trailing ` *`
        /// also matches the bare program.
        pattern: String [required] = "pattern = \"git push *\"",
        /// What a matching exec gets: `allow`, `deny` (it fails with EPERM), or `ask` a person;
        /// the first matching rule decides.
        action: Choice(ExecAction) [required] = "action = \"ask\"",
        /// When the rule ends, in RFC 3339 (`Z` or an offset; seconds optional). A session
        /// that starts after it runs without the rule; one that started before keeps it until
        /// it exits. Not with `for`.
        until: String = "until = \"2026-12-31T18:00Z\"",
        /// How long the rule lasts (`90m`, `2h`, `1d`), counted from this file's modification
        /// time: editing the file (or touching it) starts it again. Instead of `until`, not
        /// with it.
        r#for: String [shorthand] = "for = \"2h\"",
    }
}

raw_table! {
    /// `[exec]` as written.
    pub(crate) struct Raw example "ask = [\"git push *\"]" {
        /// Patterns whose execs fail (shorthand for `[[exec.rule]]` entries).
        deny: Strings [shorthand] = "deny = [\"docker *\"]",
        /// Patterns whose execs wait for a person's answer (`cordon approve`).
        ask: Strings [shorthand] = "ask = [\"git push *\"]",
        /// Patterns allowed before later rules could refuse them.
        allow: Strings [shorthand, loosens] = "allow = [\"git push --dry-run *\"]",
        /// Seconds an `ask` waits for an answer before it is denied.
        ask_timeout: Integer = "ask_timeout = 120",
        /// Exec rules in full, in order.
        rule: Tables(RawRule),
    }
}

/// `[exec]` of one layer, or merged.
#[derive(Debug, Clone, Default)]
pub(crate) struct Exec {
    /// In this file's order: `[[exec.rule]]`, then `deny`, `ask`, `allow`; merged, earlier
    /// layers first, so the first match is the most trusted rule. The same pattern and action
    /// with another end is another rule: one that never ends outlives one that does.
    pub rules: Vec<(String, ExecAction, Option<Expiry>, Origin)>,
    pub ask_timeout: Scalar<u64>,
}

/// A `[` that starts a word reads as a character class, which exec patterns do not have
/// (only `*` and `?`): closed, it would match only itself; unclosed, nothing a shell passes.
/// A lone `[` (the `test` program, `[ -f x ]`) is a word of its own and fine.
fn bracket_problem(pat: &str) -> Option<&'static str> {
    for (i, _) in pat.match_indices('[') {
        let rest = &pat[i + 1..];
        if rest.is_empty() || rest.starts_with(char::is_whitespace) {
            continue;
        }
        let word = rest.split(char::is_whitespace).next().unwrap_or("");
        return Some(if word.contains(']') {
            "has a character class `[...]`, but exec patterns only know `*` and `?`: it would match the brackets literally"
        } else {
            "has an unclosed `[`, so it cannot match what it seems to"
        });
    }
    None
}

fn pattern(
    cx: &Convert<'_>,
    p: &Spanned<String>,
    key: &str,
    (action, ends): (ExecAction, Option<Expiry>),
    out: &mut Exec,
) -> Result<(), PolicyError> {
    let pat = p.get_ref();
    const HELP: &str = "a pattern is a command line `PROGRAM ARGS…` where `*` matches any run of characters and `?` one, e.g. \"git push *\"";
    let why = if pat.trim().is_empty() {
        Some("empty exec pattern".to_string())
    } else if pat.contains('\0') {
        Some(format!(
            "exec pattern {} contains a NUL character",
            toml_string(pat)
        ))
    } else if let Some(why) = bracket_problem(pat) {
        Some(format!("exec pattern {} {why}", toml_string(pat)))
    } else if pat.trim() != pat {
        Some(format!(
            "exec pattern {} starts or ends with whitespace, so it would never match",
            toml_string(pat)
        ))
    } else {
        None
    };
    if let Some(message) = why {
        let where_ = if key == "rule" {
            "[[exec.rule]]".to_string()
        } else {
            format!("exec.{key}")
        };
        return Err(cx.diag(format!("{message} in {where_}"), p.span(), HELP));
    }
    if !out
        .rules
        .iter()
        .any(|(x, a, e, _)| x == pat && *a == action && *e == ends)
    {
        out.rules
            .push((pat.clone(), action, ends, cx.origin(p.span())));
    }
    Ok(())
}

impl Section for Exec {
    type Raw = Raw;
    type Plan = ExecPlan;
    const SHAPE: Shape = Shape::Table(&Raw::TABLE);

    fn convert(raw: Raw, cx: &mut Convert<'_>) -> Result<Self, PolicyError> {
        let mut out = Exec::default();
        for r in &raw.rule {
            let r = r.get_ref();
            let action = *cx.required(&r.action, "action", "[[exec.rule]]")?.get_ref();
            let p = cx.required(&r.pattern, "pattern", "[[exec.rule]]")?;
            let ends = cx.ends(&r.until, &r.r#for, "[[exec.rule]]")?;
            pattern(cx, p, "rule", (action, ends), &mut out)?;
        }
        for (list, key, action) in [
            (&raw.deny, "deny", ExecAction::Deny),
            (&raw.ask, "ask", ExecAction::Ask),
            (&raw.allow, "allow", ExecAction::Allow),
        ] {
            for p in list {
                pattern(cx, p, key, (action, None), &mut out)?;
            }
        }
        if let Some(t) = raw.ask_timeout {
            let secs = cx.int_in(
                &t,
                "ask_timeout",
                1..=MAX_ASK_TIMEOUT,
                &format!("must be from 1 to {MAX_ASK_TIMEOUT} seconds, e.g. ask_timeout = 60"),
            )?;
            out.ask_timeout = Some((secs, cx.origin(t.span())));
        }
        Ok(out)
    }

    fn merge(&mut self, later: &Self) {
        for (p, a, e, o) in &later.rules {
            if !self
                .rules
                .iter()
                .any(|(x, b, f, _)| x == p && b == a && f == e)
            {
                self.rules.push((p.clone(), *a, *e, o.clone()));
            }
        }
        set_scalar(&mut self.ask_timeout, &later.ask_timeout);
    }

    fn loosen(full: &Sections, base: &Sections, out: &mut Loosen<'_>) {
        for (p, a, e, o) in &full.exec.rules {
            let known = base
                .exec
                .rules
                .iter()
                .any(|(b, ba, be, _)| b == p && *ba == ExecAction::Allow && outlasts(*e, *be));
            if *a == ExecAction::Allow && !known {
                out.add(o, format!("adds exec allow rule `{p}`"));
            }
        }
    }

    fn plan(self) -> ExecPlan {
        ExecPlan {
            rules: self
                .rules
                .into_iter()
                .map(|(pattern, action, expires, o)| ExecRule {
                    pattern,
                    action,
                    origin: o.label.into(),
                    expires,
                })
                .collect(),
            ask_timeout_secs: self.ask_timeout.map_or(DEFAULT_ASK_TIMEOUT, |t| t.0),
        }
    }

    fn render(exec: &ExecPlan, out: &mut Render) {
        out.header("exec");
        out.line(format!("ask_timeout = {}", exec.ask_timeout_secs));
        out.line("# Rules in order; the first match decides, none matching allows.");
        for r in &exec.rules {
            out.entry("exec.rule", &r.origin);
            out.string("pattern", &r.pattern);
            out.string("action", &r.action.to_string());
            out.until(r.expires);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_rules_first_match_wins() {
        let r = |p: &str, action| ExecRule {
            pattern: p.into(),
            action,
            origin: "t".into(),
            expires: None,
        };
        let plan = ExecPlan {
            rules: vec![
                r("git push --dry-run *", ExecAction::Allow),
                r("git push *", ExecAction::Ask),
                r("sudo *", ExecAction::Deny),
            ],
            ask_timeout_secs: 60,
        };
        let args = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        let decide = |p: &str, a: &str| plan.decide(p, &args(a)).map(|r| r.action);
        assert_eq!(decide("git", "push origin main"), Some(ExecAction::Ask));
        assert_eq!(decide("git", "push --dry-run x"), Some(ExecAction::Allow));
        assert_eq!(
            plan.decide("git", &["push".into()]).map(|r| r.action),
            Some(ExecAction::Ask)
        );
        assert_eq!(decide("sudo", "-i"), Some(ExecAction::Deny));
        assert_eq!(decide("git", "status"), None);
        assert!(exec_glob("*", ""));
        assert!(exec_glob("*make", "cmake"));
        assert!(!exec_glob("su *", "sudo x"));
    }

    #[test]
    fn brackets_that_read_as_a_class_are_refused_and_the_test_program_is_not() {
        assert!(bracket_problem("rm [abc").unwrap().contains("unclosed"));
        assert!(
            bracket_problem("rm [abc]*")
                .unwrap()
                .contains("character class")
        );
        assert_eq!(bracket_problem("[ -f x ]"), None);
        assert_eq!(bracket_problem("test * [ *"), None);
        assert_eq!(bracket_problem("git push *"), None);
    }
}
