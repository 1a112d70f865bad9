//! cordon-learn: policy from behaviour. [`Replayer`] re-decides every recorded decision of a
//! session's audit log under another policy, with the functions the layers themselves run
//! (the gateway's [`cordon_net::FlowPolicy`], the HTTP layer's rules, the exec rules, the
//! filesystem view), and reports what would change. [`suggest`] drafts the least policy
//! that would have allowed what a session was refused, or let through while learning.
//!
//! Trust boundary: runs on the host, after the session, reading logs cordon wrote. Every
//! name, path, URL and command line in a log came from inside the sandbox: it is matched,
//! counted and rendered escaped (as TOML strings, without control characters), never run,
//! and a suggestion is policy only once a person has read it and put it in a file.
//!
//! ```
//! use cordon_learn::Replayer;
//! let opts = cordon_policy::LoadOptions::new("/nonexistent", "/nonexistent", "/nonexistent");
//! let plan = cordon_policy::load(&opts).unwrap().plan;
//! let paths = |_: &str| None;
//! let replay = Replayer::new(&plan, &paths).unwrap();
//! let report = replay.finish();
//! assert_eq!(report.decisions, 0);
//! assert!(!report.newly_denied());
//! ```

#![forbid(unsafe_code)]

mod read;
mod record;
mod replay;
mod suggest;

pub use read::{LogError, for_each_event};
pub use record::{Classified, Recorded, Said, Subject, classify};
pub use replay::{Change, LayerCounts, Outcome, PathDecider, Replayer, Report, SCHEMA};
pub use suggest::{Suggester, Suggestion, suggest};

#[cfg(test)]
mod tests;
