//! The policy loader `cordon check` and `cordon run` call, on an arbitrary project policy
//! file (any bytes: not UTF-8, not TOML, TOML of any shape): it returns a plan or a typed
//! error whose message renders, and never panics. (`load_reusing_built_in` is `load` with
//! the built-in layer parsed once per process, not once per input.)
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use cordon_policy::LoadOptions;
use cordon_policy::load::load_reusing_built_in as load;
use libfuzzer_sys::fuzz_target;

struct Dirs {
    project: PathBuf,
    home: PathBuf,
    file: PathBuf,
    trust: PathBuf,
}

/// A project and a home of this process's own (the file is rewritten for each input).
fn dirs() -> &'static Dirs {
    static DIRS: OnceLock<Dirs> = OnceLock::new();
    DIRS.get_or_init(|| {
        let root = std::env::temp_dir().join(format!("cordon-fuzz-policy-{}", std::process::id()));
        let project = root.join("project");
        let home = root.join("home");
        std::fs::create_dir_all(&project).expect("project dir");
        std::fs::create_dir_all(&home).expect("home dir");
        // Canonical, as the caller passes it.
        let project = project.canonicalize().expect("canonical project");
        let home = home.canonicalize().expect("canonical home");
        Dirs {
            file: project.join("cordon.toml"),
            trust: home.join("trusted.json"),
            project,
            home,
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let d = dirs();
    std::fs::write(&d.file, data).expect("write the policy file");
    let mut opts = LoadOptions::new(&d.project, &d.home, &d.trust);
    opts.policy_file = Some(d.file.clone());
    // The first byte picks how the profile is chosen, so profiles and detection are reached.
    match data.first().map(|b| b % 4) {
        Some(1) => opts.profile = Some("claude".into()),
        Some(2) => opts.command = vec!["codex".into(), "exec".into()],
        Some(3) => opts.profile = Some(cordon_policy::NO_PROFILE.into()),
        _ => {}
    }
    match load(&opts) {
        Ok(loaded) => {
            // What `cordon check` prints.
            let _ = loaded.plan.to_toml();
            serde_json::to_string(&loaded.plan).expect("the plan serialises (check --json)");
            for l in &loaded.untrusted_loosening {
                let _ = l.to_string();
            }
        }
        Err(e) => {
            // The error's message (with its source line and caret) must render.
            let text = e.to_string();
            assert!(!text.is_empty(), "an error without words");
        }
    }
});
