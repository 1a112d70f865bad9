//! `cordon check`: the effective policy, merged, with where each rule comes from and how long
//! a rule that ends has left; what stops `cordon run` from using it, and which credentials
//! resolve here.

use std::time::SystemTime;

use cordon_policy::{CredentialSource, Loaded};

use crate::cli::CheckArgs;
use crate::commands::{EXIT_USAGE, policy_load_options, resolve_policy_project};

pub(crate) fn check(a: CheckArgs) -> i32 {
    let project = match resolve_policy_project(a.policy_args.project.as_deref()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("cordon: {}", crate::output::chain(&e));
            return EXIT_USAGE;
        }
    };
    let opts = policy_load_options(a.file.clone(), &a.policy_args, project);
    let mut l = match cordon_policy::load(&opts) {
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
    // What a session starting now would run with: the rules that have ended are left out.
    let now = SystemTime::now();
    crate::grants::expire(&mut l.plan, now);
    if a.json {
        match serde_json::to_string_pretty(&l.plan) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("cordon: {e}");
                return 1;
            }
        }
    } else {
        print_toml(&l, opts.no_project, now);
    }
    for lo in &l.untrusted_loosening {
        eprintln!(
            "cordon: untrusted: {}: {} (run `cordon trust {}`)",
            lo.file.display(),
            lo.what,
            lo.file.display()
        );
    }
    credentials(&l);
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
fn print_toml(l: &Loaded, no_project: bool, now: SystemTime) {
    let files: Vec<String> = l.sources.iter().map(|p| p.display().to_string()).collect();
    println!(
        "# merged: built-in default{}",
        files.iter().map(|f| format!(" < {f}")).collect::<String>()
    );
    // Read-only entries a session stages instead say so (as `explain` does).
    let mut shown = l.plan.clone();
    if !no_project {
        crate::explain::annotate_read_only(&mut shown);
    }
    let text = shown.to_toml_at(now);
    match no_project {
        true => print!("{}", crate::project::without_project(&text)),
        false => print!("{text}"),
    }
}

/// Which credentials resolve here — never their values.
fn credentials(l: &Loaded) {
    for c in &l.plan.credentials {
        if let CredentialSource::Json { file, field } | CredentialSource::Yaml { file, field } =
            &c.source
        {
            let hosts: Vec<String> = c.hosts.iter().map(ToString::to_string).collect();
            // Where it is renewed, brokered: the host's file is kept current.
            let renewed = c.refresh.as_ref().map_or(String::new(), |r| {
                format!("; renewed at {} (brokered: new tokens to this file)", r.url)
            });
            if cordon_http::credentials::resolves(c) {
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
        } else if cordon_http::credentials::resolves(c) {
            eprintln!("cordon: credential `{}` resolves", c.name);
        } else {
            eprintln!(
                "cordon: warning: credential `{}` does not resolve (from {}): it would be absent in the sandbox",
                c.name, c.source
            );
        }
    }
}
