//! `cordon run --learn`: said loudly at start and at exit. The layers do the learning (each
//! lets through what only the lack of a rule refused, and logs it with
//! [`cordon_events::LEARN`]); this gathers those events for the exit summary.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use cordon_events::{Action, Event, LEARN, Layer};

use crate::summary::say;

/// How many entries of each group the exit summary names.
const SHOWN: usize = 8;

#[derive(Default)]
struct Groups {
    /// `host:port` → requests or connections let through.
    hosts: BTreeMap<String, u64>,
    /// Command line → times run.
    execs: BTreeMap<String, u64>,
    /// Home paths looked for and hidden.
    paths: BTreeSet<String>,
}

/// What a learning run let through, grouped; silent when the run is not one.
pub struct Learned {
    on: bool,
    groups: Mutex<Groups>,
}

impl Learned {
    /// Says at once that this is a learning run, when it is.
    pub fn new(on: bool) -> Self {
        if on {
            say(
                "LEARNING RUN: what your policy would deny for lack of a rule (hosts, HTTP \
                 requests, [exec] deny and ask) is let through and logged as \"would deny\"; \
                 secrets stay hidden, credentials stay placeholders, state is reviewed at exit; \
                 the blocklist, raw IPs, syscalls, the judge and secret scanning still refuse",
            );
        }
        Learned {
            on,
            groups: Mutex::new(Groups::default()),
        }
    }

    /// Takes one emitted event.
    pub fn observe(&self, e: &Event) {
        // What was let through (refused after all, or failed upstream, it was not).
        let through = e.action == Action::Allow || e.layer == Layer::Filesystem;
        if !self.on || !through || !e.detail.contains_key(LEARN) {
            return;
        }
        let mut g = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        let text = |k: &str| e.detail_str(k).map(cordon_events::terminal::safe);
        match e.layer {
            Layer::Network | Layer::Http => {
                let host = text("host").unwrap_or_else(|| "?".into());
                let port = e.detail.get("port").and_then(|v| v.as_u64()).unwrap_or(0);
                *g.hosts.entry(format!("{host}:{port}")).or_default() += 1;
            }
            Layer::Exec => {
                let line = text("command").unwrap_or_default();
                *g.execs.entry(line).or_default() += 1;
            }
            Layer::Filesystem => {
                if let Some(p) = text("path") {
                    g.paths.insert(p);
                }
            }
            _ => {}
        }
    }

    /// The exit summary: what was let through that the policy would deny, grouped, and the
    /// command that turns it into policy.
    pub fn finish(&self, session: &str) {
        if !self.on {
            return;
        }
        let g = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        if g.hosts.is_empty() && g.execs.is_empty() && g.paths.is_empty() {
            say("LEARNING RUN ended: nothing your policy would deny was needed");
            return;
        }
        say("LEARNING RUN ended: let through what your policy would deny:");
        let counted = |m: &BTreeMap<String, u64>| -> Vec<String> {
            m.iter().map(|(k, n)| format!("{k} ({n}×)")).collect()
        };
        group("hosts", &counted(&g.hosts));
        group("commands", &counted(&g.execs));
        let paths: Vec<String> = g.paths.iter().cloned().collect();
        group("home paths looked for (hidden in this run)", &paths);
        say(&format!(
            "`cordon policy suggest {session}` writes the least policy that allows them, for review"
        ));
    }
}

fn group(what: &str, items: &[String]) {
    if items.is_empty() {
        return;
    }
    let mut line = items
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > SHOWN {
        line.push_str(&format!(", and {} more (in the log)", items.len() - SHOWN));
    }
    say(&format!("  {what}: {line}"));
}
