//! `cordon ui` and `cordon run --ui`: start the dashboard (`cordon-ui`) on what this user's
//! sessions leave behind: their logs, brokers and state store.

use std::io::Write;
use std::path::Path;

use anyhow::{Result, anyhow};

fn sources(extra_log: Option<&Path>) -> cordon_ui::Sources {
    cordon_ui::Sources {
        log_dirs: cordon_events::default_log_dir().into_iter().collect(),
        log_files: extra_log.map(Path::to_path_buf).into_iter().collect(),
        approvals: cordon_approval::default_dir(),
        state_root: cordon_state::StateStore::default_root(),
        // "Allow always" on the page writes the user's policy the way `cordon approve
        // --always` does, here in the dashboard's own process.
        policy_writer: Some(std::sync::Arc::new(crate::remember::DashboardWriter)),
    }
}

fn start(extra_log: Option<&Path>) -> Result<cordon_ui::Ui> {
    let exe = std::env::current_exe().ok();
    cordon_ui::Ui::start(sources(extra_log), exe.as_deref()).map_err(|e| anyhow!("{e}"))
}

/// `cordon ui`: the URL on the first line of stdout, then serve until interrupted.
pub fn ui() -> Result<()> {
    let ui = start(None)?;
    let mut out = std::io::stdout();
    writeln!(out, "{}", ui.url())?;
    out.flush()?;
    eprintln!(
        "cordon: dashboard of every running session; open the URL above (it holds the token), \
         Ctrl-C to stop"
    );
    loop {
        std::thread::park();
    }
}

/// `cordon run --ui`: the dashboard for the session's lifetime. Its URL goes to stderr, since
/// stdout is the command's.
pub fn for_run(audit: &Path) -> Result<cordon_ui::Ui> {
    let ui = start(Some(audit))?;
    eprintln!("cordon: dashboard: {}", ui.url());
    Ok(ui)
}
