//! The resolved plan: what every enforcement layer receives. Each section's part is defined
//! with the section (see `sections`); this module gathers them under one name.

pub use crate::expiry::{ExpiredGrant, Expiry, GrantKind, TimeError};
pub use crate::pattern::{Bare, HostPattern, HostPatternError, glob_match};
pub use crate::schema::Choice;
pub use crate::sections::agent::AgentPlan;
pub use crate::sections::audit::{AuditPlan, EXPORT_TARGETS, otlp_endpoint_problem};
pub use crate::sections::credentials::{
    CredentialPlan, CredentialSlot, CredentialSource, HeaderSlot, RefreshPlan,
};
pub use crate::sections::dlp::{DLP_KINDS, DlpAction, DlpAllow, DlpPlan};
pub use crate::sections::dns::{DnsBlock, DnsPlan};
pub use crate::sections::env::EnvPlan;
pub use crate::sections::exec::{ExecAction, ExecPlan, ExecRule, exec_glob};
pub use crate::sections::filesystem::{FilesystemPlan, HomeView, LandlockMode};
pub use crate::sections::http::{HttpAction, HttpPlan, HttpRule};
pub use crate::sections::judge::{JudgeApi, JudgeOnError, JudgePlan};
pub use crate::sections::limits::LimitsPlan;
pub use crate::sections::mcp::{McpAction, McpPlan, McpRule, McpServer, McpStdio};
pub use crate::sections::network::{HostRule, NetMode, NetworkPlan};
pub use crate::sections::publish::Publish;
pub use crate::sections::sandbox::{
    Backend, DEFAULT_VM_CPUS, DEFAULT_VM_MEMORY_MIB, SandboxPlan, VmAccel, VmPlan,
};
pub use crate::sections::ssh::SshPlan;
pub use crate::sections::state::{HomeMode, OnExit, ProjectFiles, StatePlan};
pub use crate::sections::syscalls::{
    BUILTIN_CONDITIONAL_SYSCALLS, BUILTIN_DENIED_SYSCALLS, NamedRule, SyscallsPlan,
};
pub use crate::sections::tls::TlsPlan;
pub use crate::sections::{PathRule, Plan};
