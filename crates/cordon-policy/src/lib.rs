//! cordon-policy: turns policy files (TOML) into a typed [`Plan`].
//!
//! Runs on the host side only. Its input (the project's `cordon.toml`) may have been written by
//! the agent in an earlier session, so nothing here trusts it: a project file that loosens the
//! user's policy is reported, and only used once the user has trusted that exact content.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod env;
pub mod error;
mod expand;
mod layer;
pub mod load;
pub mod plan;
mod render;
mod schema;
pub mod syscall_table;
pub mod trust;

pub use env::{glob_matches, looks_secret, names_secret, never_passable};
pub use error::{Diagnostic, Location, PolicyError};
pub use load::{DEFAULT_POLICY, LoadOptions, Loaded, Loosening, load};
pub use plan::*;
pub use trust::{TrustStore, sha256_hex, trust_key};
