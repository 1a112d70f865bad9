//! cordon-policy: turns policy files (TOML) into a typed [`Plan`].
//!
//! Runs on the host side only. Its input (the project's `cordon.toml`) may have been written by
//! the agent in an earlier session, so nothing here trusts it: a project file that loosens the
//! user's policy is reported, and only used once the user has trusted that exact content.
//!
//! Layout: `sections` holds one module per policy section — the only place its keys are
//! named (schema, checks, merge, loosening, plan part, rendering); `schema` is the language
//! sections are declared in and the located structural check; [`pattern`] is the one pattern
//! language every layer matches with; [`load`](mod@load) reads, merges and derives the rules that come
//! from the host, so the [`Plan`] is the whole truth.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod detect;
pub mod env;
pub mod error;
mod expand;
pub mod expiry;
pub mod explain;
mod file;
pub mod load;
pub mod login_hint;
pub mod pattern;
pub mod plan;
pub mod program;
mod reference;
pub mod remember;
mod render;
#[macro_use]
mod schema;
mod sections;
pub mod syscall_table;
mod template;
pub mod trust;

pub use env::{looks_secret, names_secret, never_passable};
pub use error::{Diagnostic, Location, PolicyError};
pub use load::{
    DEFAULT_POLICY, LoadOptions, Loaded, Loosening, NO_PROFILE, ProfileChoice, built_in_dlp_allow,
    built_in_dns_block, load,
};
pub use plan::*;
pub use program::{ExecSeen, Owner, Process, Programs};
pub use reference::{REGENERATE, reference};
pub use template::template;
pub use trust::{TrustStore, sha256_hex, trust_key};
