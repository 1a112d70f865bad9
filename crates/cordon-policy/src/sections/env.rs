//! `[env]`: which host variables the sandboxed command sees, and fixed ones (layer 1). The
//! filtering itself is [`crate::env`].

use std::collections::BTreeMap;

use serde_spanned::Spanned;

use crate::PolicyError;
use crate::env::{glob_error, looks_secret, name_error, only_never_passable};
use crate::pattern::glob_match;
use crate::schema::{Schema, Shape, toml_string};
use crate::sections::{Convert, Loosen, Origin, Render, Section, Sections};

/// The environment the sandboxed command sees (layer 1).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EnvPlan {
    /// Variable names passed through from the host when set: an exact name passes even if it
    /// looks like a secret; a glob (`*` matches any run of characters) never passes a name that
    /// [looks like a secret](crate::looks_secret). `LD_*`, `BASH_ENV`, `ENV` and `GCONV_PATH`
    /// never pass. See [`EnvPlan::apply`].
    pub pass: Vec<String>,
    /// Variables set to fixed values (after `pass`, so `set` wins).
    pub set: BTreeMap<String, String>,
}

raw_table! {
    /// `[env]` as written.
    pub(crate) struct Raw example "pass = [\"LC_*\"]" {
        /// Host variables passed in when set: an exact name, or a glob that never passes a
        /// name that looks like a secret.
        pass: Strings = "pass = [\"LC_*\"]",
        /// Variables set to fixed values inside (after `pass`, so these win).
        set: StringTable [loosens] = "set = { EDITOR = \"vi\" }",
    }
}

/// `[env]` of one layer, or merged.
#[derive(Debug, Clone, Default)]
pub(crate) struct Env {
    pub pass: Vec<(String, Origin)>,
    pub set: BTreeMap<String, (String, Origin)>,
}

fn never_passable(cx: &Convert<'_>, name: &str, list: &str, s: &Spanned<String>) -> PolicyError {
    cx.diag(
        format!("env.{list} names `{name}`, which is never passed to the sandbox"),
        s.span(),
        "LD_*, BASH_ENV, ENV and GCONV_PATH change how programs start: these are always dropped; remove the entry",
    )
}

impl Section for Env {
    type Raw = Raw;
    type Plan = EnvPlan;
    const SHAPE: Shape = Shape::Table(&Raw::TABLE);

    fn convert(raw: Raw, cx: &mut Convert<'_>) -> Result<Self, PolicyError> {
        let mut out = Env::default();
        for p in &raw.pass {
            let pat = p.get_ref();
            if let Some(why) = glob_error(pat) {
                return Err(cx.diag(
                    format!(
                        "invalid variable name or glob {} in env.pass: it {why}",
                        toml_string(pat)
                    ),
                    p.span(),
                    "use a variable name, or a glob where `*` matches any run of characters, e.g. \"LC_*\"",
                ));
            }
            if only_never_passable(pat) {
                return Err(never_passable(cx, pat, "pass", p));
            }
            if !out.pass.iter().any(|(x, _)| x == pat) {
                out.pass.push((pat.clone(), cx.origin(p.span())));
            }
        }
        // BTreeMap order is by name; report in file order.
        let mut set: Vec<_> = raw.set.iter().collect();
        set.sort_by_key(|(k, _)| k.span().start);
        for (k, v) in set {
            let name = k.get_ref();
            if let Some(why) = name_error(name) {
                return Err(cx.diag(
                    format!(
                        "invalid variable name {} in env.set: it {why}",
                        toml_string(name)
                    ),
                    k.span(),
                    "variable names are letters, digits and `_`, not starting with a digit",
                ));
            }
            if only_never_passable(name) {
                return Err(never_passable(cx, name, "set", k));
            }
            if v.get_ref().contains('\0') {
                return Err(cx.diag(
                    format!("the value of `{name}` contains a NUL character"),
                    v.span(),
                    "environment values cannot contain NUL; remove it",
                ));
            }
            out.set
                .insert(name.clone(), (v.get_ref().clone(), cx.origin(k.span())));
        }
        Ok(out)
    }

    fn merge(&mut self, later: &Self) {
        crate::sections::append_new(&mut self.pass, &later.pass, |a, b| a == b);
        for (k, v) in &later.set {
            self.set.insert(k.clone(), v.clone());
        }
    }

    fn loosen(full: &Sections, base: &Sections, out: &mut Loosen<'_>) {
        let (f, b) = (&full.env, &base.env);
        for (p, o) in &f.pass {
            let known = b.pass.iter().any(|(x, _)| {
                x == p
                    || (!p.contains('*') && !looks_secret(p) && x.contains('*') && glob_match(x, p))
            });
            if !known {
                let what = if p.contains('*') {
                    format!("passes host variables matching `{p}`")
                } else {
                    format!("passes host variable `{p}`")
                };
                out.add(o, what);
            }
        }
        for (k, (v, o)) in &f.set {
            if b.set.get(k).map(|(x, _)| x) != Some(v) {
                out.add(o, format!("sets environment variable `{k}`"));
            }
        }
    }

    fn plan(self) -> EnvPlan {
        EnvPlan {
            pass: self.pass.into_iter().map(|(p, _)| p).collect(),
            set: self.set.into_iter().map(|(k, (v, _))| (k, v)).collect(),
        }
    }

    fn render(p: &EnvPlan, out: &mut Render) {
        out.header("env");
        if p.pass.is_empty() {
            out.line("pass = []");
        } else {
            out.line("pass = [");
            for v in &p.pass {
                out.line(format!("    {},", toml_string(v)));
            }
            out.line("]");
        }
        out.header("env.set");
        for (k, v) in &p.set {
            out.line(format!(
                "{} = {}",
                crate::schema::quote_key(k),
                toml_string(v)
            ));
        }
    }
}
