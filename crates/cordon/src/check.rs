//! `cordon check`: the effective policy, merged, with where each rule comes from and how long
//! a rule that ends has left; what stops `cordon run` from using it, and which credentials
//! resolve here.

use std::time::SystemTime;

use cordon_policy::{CredentialSource, Loaded, Plan};

use crate::cli::CheckArgs;
use crate::commands::{EXIT_USAGE, policy_load_options, resolve_policy_project};
use crate::session_plan::SessionPlan;

pub(crate) fn check(a: CheckArgs) -> i32 {
    let project = match resolve_policy_project(a.policy_args.project.as_deref()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("cordon: {}", crate::output::chain(&e));
            return EXIT_USAGE;
        }
    };
    let opts = policy_load_options(a.file.clone(), &a.policy_args, project);
    let l = match cordon_policy::load(&opts) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("{e}");
            return EXIT_USAGE;
        }
    };
    for w in &l.warnings {
        eprintln!("cordon: warning: {w}");
    }
    if l.plan.syscalls.nested_userns {
        let by = l
            .profile
            .as_ref()
            .map(|p| format!(" (profile `{}` in use)", p.name))
            .unwrap_or_default();
        eprintln!("cordon: warning{by}: {}", cordon_sandbox::NESTED_COST);
    }
    // What a session starting now would run with: its session plan, made by the same steps
    // (the rules that have ended left out, the host's part resolved), with each credential's
    // variable shown as the placeholder it holds inside. The home view's secret files and the
    // placeholders' values are only known once a session prepares them.
    let now = SystemTime::now();
    let resolved = crate::session_plan::resolve(&l, false, now, &|_| {});
    crate::grants::say(&resolved.expired, now);
    // Resolved once: a credential from a command runs it.
    let resolves: Vec<bool> = resolved
        .plan
        .credentials
        .iter()
        .map(cordon_http::credentials::resolves)
        .collect();
    let env = placeholder_variables(&resolved.plan, &resolves);
    let session = SessionPlan::preview(resolved.plan, env, &[]);
    if a.json {
        match serde_json::to_string_pretty(session.plan()) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("cordon: {e}");
                return 1;
            }
        }
    } else {
        print_toml(&l, session.plan(), opts.no_project, now);
    }
    for lo in &l.untrusted_loosening {
        eprintln!(
            "cordon: untrusted: {}: {} (run `cordon trust {}`)",
            lo.file.display(),
            lo.what,
            lo.file.display()
        );
    }
    credentials(session.plan(), &resolves);
    // A policy `run` refuses (exit 125) is not a pass.
    if l.untrusted_loosening.is_empty() {
        0
    } else {
        eprintln!("cordon: `cordon run` refuses this policy until you trust the project policy");
        1
    }
}

/// The plan in the file schema, with the files merged and the time left of each rule that
/// ends.
fn print_toml(l: &Loaded, plan: &Plan, no_project: bool, now: SystemTime) {
    let files: Vec<String> = l.sources.iter().map(|p| p.display().to_string()).collect();
    println!(
        "# merged: built-in default{}",
        files.iter().map(|f| format!(" < {f}")).collect::<String>()
    );
    // Read-only entries a session stages instead say so (as `explain` does).
    let mut shown = plan.clone();
    if !no_project {
        crate::explain::annotate_read_only(&mut shown);
    }
    let text = shown.to_toml_at(now);
    match no_project {
        true => print!("{}", crate::project::without_project(&text)),
        false => print!("{text}"),
    }
}

/// Each credential's variable as the sandbox has it: its placeholder, where it resolves.
fn placeholder_variables(plan: &Plan, resolves: &[bool]) -> Vec<(String, String)> {
    plan.credentials
        .iter()
        .zip(resolves)
        .filter(|(_, r)| **r)
        .filter_map(|(c, _)| {
            let var = c.env.clone()?;
            Some((var, format!("<placeholder of credential {}>", c.name)))
        })
        .collect()
}

/// Which credentials resolve here — never their values.
fn credentials(plan: &Plan, resolves: &[bool]) {
    for (c, resolves) in plan.credentials.iter().zip(resolves) {
        if let CredentialSource::Json { file, field } | CredentialSource::Yaml { file, field } =
            &c.source
        {
            let hosts: Vec<String> = c.hosts.iter().map(ToString::to_string).collect();
            // Where it is renewed, brokered: the host's file is kept current.
            let renewed = c.refresh.as_ref().map_or(String::new(), |r| {
                format!("; renewed at {} (brokered: new tokens to this file)", r.url)
            });
            if *resolves {
                eprintln!(
                    "cordon: login `{}` found in {} ({field}): the sandbox sees a placeholder; the real token goes only to {}{renewed}",
                    c.name,
                    file.display(),
                    hosts.join(", ")
                );
            } else {
                eprintln!(
                    "cordon: login `{}`: none in {} ({field}){renewed}",
                    c.name,
                    file.display()
                );
            }
        } else if *resolves {
            eprintln!("cordon: credential `{}` resolves", c.name);
        } else {
            eprintln!(
                "cordon: warning: credential `{}` does not resolve (from {}): it would be absent in the sandbox",
                c.name, c.source
            );
        }
    }
}
