//! The policy file schema (serde), and a structural check over the parsed TOML tree that
//! reports unknown keys and wrong types with their exact location before serde sees them.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use serde_spanned::Spanned;
use toml::de::{DeTable, DeValue};

use crate::error::{Diagnostic, backticked, did_you_mean};

/// The sections a file and each of its profiles may have, then `extra` keys.
macro_rules! section_keys {
    ($($extra:literal),*) => {
        &[
            "filesystem", "env", "limits", "syscalls", "exec", "state", "network", "dns",
            "publish", "http", "tls", "judge", "dlp" $(, $extra)*
        ]
    };
}
/// Top-level keys of a policy file.
pub(crate) const ROOT_KEYS: &[&str] = section_keys!("credentials", "profile");
/// Keys of a `[profile.NAME]` table.
pub(crate) const PROFILE_KEYS: &[&str] = section_keys!();
/// Keys of `[filesystem]`.
pub(crate) const FILESYSTEM_KEYS: &[&str] =
    &["readable", "writable", "deny", "read_only", "landlock"];
/// Keys of `[env]`.
pub(crate) const ENV_KEYS: &[&str] = &["pass", "set"];
/// Keys of `[limits]`.
pub(crate) const LIMITS_KEYS: &[&str] = &["memory", "pids", "cpu", "nofile"];
/// Keys of `[syscalls]`.
pub(crate) const SYSCALLS_KEYS: &[&str] = &["allow", "deny", "nested_userns"];
/// Keys of `[exec]`.
pub(crate) const EXEC_KEYS: &[&str] = &["deny", "ask", "allow", "ask_timeout", "rule"];
/// Keys of one `[[exec.rule]]`.
pub(crate) const EXEC_RULE_KEYS: &[&str] = &["pattern", "action"];
/// Keys of `[state]`.
pub(crate) const STATE_KEYS: &[&str] = &["protect", "on_exit", "project_files", "home", "caches"];
/// Keys of `[network]`.
pub(crate) const NETWORK_KEYS: &[&str] = &["mode", "allow_ips", "allow"];
/// Keys of one `[[network.allow]]`.
pub(crate) const NETWORK_ALLOW_KEYS: &[&str] = &["host", "ports"];
/// Values of `[network] mode`.
pub(crate) const NETWORK_MODE_VALUES: &[&str] = &["gateway", "none", "host"];
/// Keys of `[dns]`.
pub(crate) const DNS_KEYS: &[&str] = &["block", "hosts", "upstream"];
/// Keys of `[http]`.
pub(crate) const HTTP_KEYS: &[&str] = &["default", "rule"];
/// Keys of one `[[http.rule]]`.
pub(crate) const HTTP_RULE_KEYS: &[&str] = &[
    "name", "host", "port", "methods", "path", "query", "headers", "max_body", "action", "reason",
];
/// Values of `[http] default`.
pub(crate) const HTTP_DEFAULT_VALUES: &[&str] = &["deny", "ask", "judge"];
/// Values of a rule's `action`.
pub(crate) const HTTP_ACTION_VALUES: &[&str] = &["allow", "deny", "ask", "judge"];
/// Keys of `[judge]`.
pub(crate) const JUDGE_KEYS: &[&str] = &[
    "policy",
    "api",
    "url",
    "model",
    "credential",
    "timeout_ms",
    "on_error",
    "max_body_bytes",
];
/// Values of `[judge] api`.
pub(crate) const JUDGE_API_VALUES: &[&str] = &["anthropic", "openai"];
/// Values of `[judge] on_error`.
pub(crate) const JUDGE_ON_ERROR_VALUES: &[&str] = &["deny", "ask"];
/// Keys of one `[credentials.NAME]`.
pub(crate) const CREDENTIAL_KEYS: &[&str] = &[
    "env", "source", "hosts", "header", "query", "format", "inject", "files",
];
/// Keys of `[dlp]`.
pub(crate) const DLP_KEYS: &[&str] = &["action", "max_body_bytes", "allow"];
/// Keys of one `[[dlp.allow]]`.
pub(crate) const DLP_ALLOW_KEYS: &[&str] = &["kinds", "hosts"];
/// Values of `[dlp] action`.
pub(crate) const DLP_ACTION_VALUES: &[&str] = &["deny", "ask", "log", "off"];
/// Keys of `[tls]`.
pub(crate) const TLS_KEYS: &[&str] = &["passthrough", "upstream_ca"];
/// Keys of one `[[publish]]`.
pub(crate) const PUBLISH_KEYS: &[&str] = &["port", "host_port"];
/// Values of `[state] on_exit`.
pub(crate) const ON_EXIT_VALUES: &[&str] = &["ask", "keep", "discard", "pending"];
/// Values of `[state] project_files`.
pub(crate) const PROJECT_FILES_VALUES: &[&str] = &["readonly", "staged"];
/// Values of `[state] home`.
pub(crate) const HOME_VALUES: &[&str] = &["overlay", "readonly"];

/// A whole policy file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PolicyFile {
    #[serde(default)]
    pub filesystem: Option<FilesystemSection>,
    #[serde(default)]
    pub env: Option<EnvSection>,
    #[serde(default)]
    pub limits: Option<LimitsSection>,
    #[serde(default)]
    pub syscalls: Option<SyscallsSection>,
    #[serde(default)]
    pub exec: Option<ExecSection>,
    #[serde(default)]
    pub state: Option<StateSection>,
    #[serde(default)]
    pub network: Option<NetworkSection>,
    #[serde(default)]
    pub dns: Option<DnsSection>,
    #[serde(default)]
    pub publish: Vec<Spanned<PublishEntry>>,
    #[serde(default)]
    pub http: Option<HttpSection>,
    #[serde(default)]
    pub tls: Option<TlsSection>,
    #[serde(default)]
    pub judge: Option<JudgeSection>,
    #[serde(default)]
    pub dlp: Option<DlpSection>,
    #[serde(default)]
    pub credentials: BTreeMap<Spanned<String>, Spanned<CredentialEntry>>,
    #[serde(default)]
    pub profile: BTreeMap<Spanned<String>, ProfileSection>,
}

/// One `[credentials.NAME]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CredentialEntry {
    #[serde(default)]
    pub env: Option<Spanned<String>>,
    pub source: Spanned<SourceEntry>,
    pub hosts: Vec<Spanned<String>>,
    #[serde(default)]
    pub header: Option<Spanned<String>>,
    #[serde(default)]
    pub query: Option<Spanned<String>>,
    #[serde(default)]
    pub format: Option<Spanned<String>>,
    #[serde(default)]
    pub inject: Option<Spanned<bool>>,
    #[serde(default)]
    pub files: Vec<Spanned<String>>,
}

/// Where a credential's real value comes from.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SourceEntry {
    #[serde(default)]
    pub env: Option<String>,
    #[serde(default)]
    pub file: Option<String>,
    #[serde(default)]
    pub command: Option<Vec<String>>,
}

/// `[profile.NAME]`: the same sections as the top level, applied when NAME is selected.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProfileSection {
    #[serde(default)]
    pub filesystem: Option<FilesystemSection>,
    #[serde(default)]
    pub env: Option<EnvSection>,
    #[serde(default)]
    pub limits: Option<LimitsSection>,
    #[serde(default)]
    pub syscalls: Option<SyscallsSection>,
    #[serde(default)]
    pub exec: Option<ExecSection>,
    #[serde(default)]
    pub state: Option<StateSection>,
    #[serde(default)]
    pub network: Option<NetworkSection>,
    #[serde(default)]
    pub dns: Option<DnsSection>,
    #[serde(default)]
    pub publish: Vec<Spanned<PublishEntry>>,
    #[serde(default)]
    pub http: Option<HttpSection>,
    #[serde(default)]
    pub tls: Option<TlsSection>,
    #[serde(default)]
    pub judge: Option<JudgeSection>,
    #[serde(default)]
    pub dlp: Option<DlpSection>,
}

/// The sections of a file or of one of its profiles, as written.
#[derive(Debug, Default)]
pub(crate) struct Parts {
    pub filesystem: Option<FilesystemSection>,
    pub env: Option<EnvSection>,
    pub limits: Option<LimitsSection>,
    pub syscalls: Option<SyscallsSection>,
    pub exec: Option<ExecSection>,
    pub state: Option<StateSection>,
    pub network: Option<NetworkSection>,
    pub dns: Option<DnsSection>,
    pub publish: Vec<Spanned<PublishEntry>>,
    pub http: Option<HttpSection>,
    pub tls: Option<TlsSection>,
    pub judge: Option<JudgeSection>,
    pub dlp: Option<DlpSection>,
    pub credentials: BTreeMap<Spanned<String>, Spanned<CredentialEntry>>,
}

impl PolicyFile {
    /// The base sections, and the profiles.
    pub(crate) fn split(self) -> (Parts, BTreeMap<Spanned<String>, ProfileSection>) {
        let parts = Parts {
            filesystem: self.filesystem,
            env: self.env,
            limits: self.limits,
            syscalls: self.syscalls,
            exec: self.exec,
            state: self.state,
            network: self.network,
            dns: self.dns,
            publish: self.publish,
            http: self.http,
            tls: self.tls,
            judge: self.judge,
            dlp: self.dlp,
            credentials: self.credentials,
        };
        (parts, self.profile)
    }
}

impl From<ProfileSection> for Parts {
    fn from(p: ProfileSection) -> Self {
        Parts {
            filesystem: p.filesystem,
            env: p.env,
            limits: p.limits,
            syscalls: p.syscalls,
            exec: p.exec,
            state: p.state,
            network: p.network,
            dns: p.dns,
            publish: p.publish,
            http: p.http,
            tls: p.tls,
            judge: p.judge,
            dlp: p.dlp,
            credentials: BTreeMap::new(),
        }
    }
}

/// `[filesystem]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FilesystemSection {
    #[serde(default)]
    pub readable: Vec<Spanned<String>>,
    #[serde(default)]
    pub writable: Vec<Spanned<String>>,
    #[serde(default)]
    pub deny: Vec<Spanned<String>>,
    #[serde(default)]
    pub read_only: Vec<Spanned<String>>,
    #[serde(default)]
    pub landlock: Option<Spanned<String>>,
}

/// `[env]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EnvSection {
    #[serde(default)]
    pub pass: Vec<Spanned<String>>,
    #[serde(default)]
    pub set: BTreeMap<Spanned<String>, Spanned<String>>,
}

/// `[limits]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LimitsSection {
    #[serde(default)]
    pub memory: Option<Spanned<Size>>,
    #[serde(default)]
    pub pids: Option<Spanned<i64>>,
    #[serde(default)]
    pub cpu: Option<Spanned<f64>>,
    #[serde(default)]
    pub nofile: Option<Spanned<i64>>,
}

/// `[syscalls]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SyscallsSection {
    #[serde(default)]
    pub allow: Vec<Spanned<String>>,
    #[serde(default)]
    pub deny: Vec<Spanned<String>>,
    #[serde(default)]
    pub nested_userns: Option<Spanned<bool>>,
}

/// `[exec]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExecSection {
    #[serde(default)]
    pub deny: Vec<Spanned<String>>,
    #[serde(default)]
    pub ask: Vec<Spanned<String>>,
    #[serde(default)]
    pub allow: Vec<Spanned<String>>,
    #[serde(default)]
    pub ask_timeout: Option<Spanned<i64>>,
    #[serde(default)]
    pub rule: Vec<Spanned<ExecRuleEntry>>,
}

/// `[state]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StateSection {
    #[serde(default)]
    pub protect: Vec<Spanned<String>>,
    #[serde(default)]
    pub on_exit: Option<Spanned<String>>,
    #[serde(default)]
    pub project_files: Option<Spanned<String>>,
    #[serde(default)]
    pub home: Option<Spanned<String>>,
    #[serde(default)]
    pub caches: Vec<Spanned<String>>,
}

/// `[network]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NetworkSection {
    #[serde(default)]
    pub mode: Option<Spanned<String>>,
    #[serde(default)]
    pub allow_ips: Vec<Spanned<String>>,
    #[serde(default)]
    pub allow: Vec<Spanned<NetworkAllowEntry>>,
}

/// One `[[network.allow]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NetworkAllowEntry {
    pub host: Spanned<String>,
    pub ports: Spanned<Vec<Spanned<i64>>>,
}

/// `[dns]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DnsSection {
    #[serde(default)]
    pub block: Vec<Spanned<String>>,
    #[serde(default)]
    pub hosts: BTreeMap<Spanned<String>, Spanned<String>>,
    #[serde(default)]
    pub upstream: Option<Spanned<String>>,
}

/// `[http]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HttpSection {
    #[serde(default)]
    pub default: Option<Spanned<String>>,
    #[serde(default)]
    pub rule: Vec<Spanned<HttpRuleEntry>>,
}

/// One `[[http.rule]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HttpRuleEntry {
    #[serde(default)]
    pub name: Option<Spanned<String>>,
    pub host: Spanned<String>,
    #[serde(default)]
    pub port: Option<Spanned<i64>>,
    #[serde(default)]
    pub methods: Vec<Spanned<String>>,
    #[serde(default)]
    pub path: Option<Spanned<String>>,
    #[serde(default)]
    pub query: Option<Spanned<String>>,
    #[serde(default)]
    pub headers: BTreeMap<Spanned<String>, Spanned<String>>,
    #[serde(default)]
    pub max_body: Option<Spanned<i64>>,
    pub action: Spanned<String>,
    #[serde(default)]
    pub reason: Option<Spanned<String>>,
}

/// `[judge]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct JudgeSection {
    #[serde(default)]
    pub policy: Option<Spanned<String>>,
    #[serde(default)]
    pub api: Option<Spanned<String>>,
    #[serde(default)]
    pub url: Option<Spanned<String>>,
    #[serde(default)]
    pub model: Option<Spanned<String>>,
    #[serde(default)]
    pub credential: Option<Spanned<String>>,
    #[serde(default)]
    pub timeout_ms: Option<Spanned<i64>>,
    #[serde(default)]
    pub on_error: Option<Spanned<String>>,
    #[serde(default)]
    pub max_body_bytes: Option<Spanned<i64>>,
}

/// `[dlp]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DlpSection {
    #[serde(default)]
    pub action: Option<Spanned<String>>,
    #[serde(default)]
    pub max_body_bytes: Option<Spanned<i64>>,
    #[serde(default)]
    pub allow: Vec<Spanned<DlpAllowEntry>>,
}

/// One `[[dlp.allow]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DlpAllowEntry {
    pub kinds: Vec<Spanned<String>>,
    pub hosts: Vec<Spanned<String>>,
}

/// `[tls]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TlsSection {
    #[serde(default)]
    pub passthrough: Vec<Spanned<String>>,
    #[serde(default)]
    pub upstream_ca: Option<Spanned<OneOrMany>>,
}

/// A string or an array of strings (located as a whole).
#[derive(Debug)]
pub(crate) struct OneOrMany(pub Vec<String>);

impl<'de> Deserialize<'de> for OneOrMany {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = OneOrMany;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or an array of strings")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<OneOrMany, E> {
                Ok(OneOrMany(vec![v.to_string()]))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<OneOrMany, A::Error> {
                let mut out = Vec::new();
                while let Some(s) = seq.next_element::<String>()? {
                    out.push(s);
                }
                Ok(OneOrMany(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// One `[[publish]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PublishEntry {
    pub port: Spanned<i64>,
    #[serde(default)]
    pub host_port: Option<Spanned<i64>>,
}

/// One `[[exec.rule]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExecRuleEntry {
    pub pattern: Spanned<String>,
    pub action: Spanned<String>,
}

/// A memory size as written: an integer of bytes or a string such as `"4G"`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Size {
    Bytes(i64),
    Text(String),
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Size;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an integer of bytes or a string such as \"4G\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Size, E> {
                Ok(Size::Bytes(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Size, E> {
                Ok(Size::Bytes(i64::try_from(v).unwrap_or(i64::MAX)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Size, E> {
                Ok(Size::Text(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// What a value must be, for type errors.
#[derive(Clone, Copy)]
enum Expect {
    StringArray,
    String,
    StringTable,
    Size,
    Integer,
    Number,
    Boolean,
    ExecRules,
    /// An array of tables with the given keys (all required unless listed as optional).
    Tables {
        what: &'static str,
        keys: &'static [&'static str],
        required: &'static [&'static str],
        example: &'static str,
    },
    IntegerArray,
}

impl Expect {
    fn describe(self) -> &'static str {
        match self {
            Expect::StringArray => "an array of strings",
            Expect::String => "a string",
            Expect::StringTable => "a table of strings",
            Expect::Size => "an integer of bytes or a string such as \"4G\"",
            Expect::Integer => "an integer",
            Expect::Number => "a number",
            Expect::Boolean => "a boolean",
            Expect::ExecRules | Expect::Tables { .. } => "an array of tables",
            Expect::IntegerArray => "an array of integers",
        }
    }
}

fn a_type(v: &DeValue<'_>) -> &'static str {
    match v {
        DeValue::String(_) => "a string",
        DeValue::Integer(_) => "an integer",
        DeValue::Float(_) => "a float",
        DeValue::Boolean(_) => "a boolean",
        DeValue::Datetime(_) => "a date-time",
        DeValue::Array(_) => "an array",
        DeValue::Table(_) => "a table",
    }
}

/// Walks the parsed tree of one policy file and reports the first unknown key or wrong type,
/// in file order.
pub(crate) struct Checker<'a> {
    pub src: &'a str,
    pub file: Option<&'a Path>,
}

type Entry<'t, 'i> = (
    &'t Spanned<toml::de::DeString<'i>>,
    &'t Spanned<DeValue<'i>>,
);

fn sorted<'t, 'i>(t: &'t DeTable<'i>) -> Vec<Entry<'t, 'i>> {
    let mut v: Vec<_> = t.iter().collect();
    v.sort_by_key(|(k, _)| k.span().start);
    v
}

impl Checker<'_> {
    fn diag(&self, message: String, span: std::ops::Range<usize>, help: String) -> Diagnostic {
        Diagnostic::new(message)
            .in_file(self.file)
            .at(self.src, span)
            .with_help(help)
    }

    pub(crate) fn check(&self, root: &DeTable<'_>) -> Result<(), Diagnostic> {
        for (k, v) in sorted(root) {
            let key: &str = k.get_ref();
            match key {
                "filesystem" | "env" | "limits" | "syscalls" | "exec" | "state" | "network"
                | "dns" | "http" | "tls" | "judge" | "dlp" => {
                    let t = self.table(key, v, "the top level")?;
                    self.section(key, t, &format!("[{key}]"))?;
                }
                "publish" => self.value(key, v, "the top level", PUBLISH)?,
                "credentials" => {
                    let t = self.table(key, v, "the top level")?;
                    for (name, cv) in sorted(t) {
                        let name: &str = name.get_ref();
                        let header = format!("[credentials.{}]", quote_key(name));
                        let ct = self.table(&header, cv, "[credentials]")?;
                        for (k, v) in sorted(ct) {
                            let ck: &str = k.get_ref();
                            if !CREDENTIAL_KEYS.contains(&ck) {
                                return Err(self.unknown(ck, k.span(), &header, CREDENTIAL_KEYS));
                            }
                            match ck {
                                "source" => {
                                    self.table(ck, v, &header)?;
                                }
                                "hosts" | "files" => {
                                    self.value(ck, v, &header, Expect::StringArray)?
                                }
                                "inject" => self.value(ck, v, &header, Expect::Boolean)?,
                                _ => self.value(ck, v, &header, Expect::String)?,
                            }
                        }
                    }
                }
                "profile" => {
                    let t = self.table(key, v, "the top level")?;
                    for (name, pv) in sorted(t) {
                        let name: &str = name.get_ref();
                        let header = format!("[profile.{}]", quote_key(name));
                        let pt = self.table(&header, pv, "[profile]")?;
                        for (sk, sv) in sorted(pt) {
                            let skey: &str = sk.get_ref();
                            if !PROFILE_KEYS.contains(&skey) {
                                return Err(self.unknown(skey, sk.span(), &header, PROFILE_KEYS));
                            }
                            if skey == "publish" {
                                self.value(skey, sv, &header, PUBLISH)?;
                                continue;
                            }
                            let st = self.table(skey, sv, &header)?;
                            let sub = format!("[profile.{}.{skey}]", quote_key(name));
                            self.section(skey, st, &sub)?;
                        }
                    }
                }
                other => {
                    let mut help = format!(
                        "cordon has only the sections {}; a section exists only where something enforces it",
                        "[filesystem], [env], [limits], [syscalls], [exec], [state], [network], [dns], [[publish]], [http], [tls], [judge], [dlp], [credentials.NAME] and [profile.NAME]"
                    );
                    if let Some(s) = did_you_mean(other, ROOT_KEYS) {
                        help.push_str(&format!("; did you mean `{s}`?"));
                    }
                    return Err(self.diag(format!("unknown section `{other}`"), k.span(), help));
                }
            }
        }
        Ok(())
    }

    fn unknown(
        &self,
        key: &str,
        span: std::ops::Range<usize>,
        section: &str,
        expected: &[&str],
    ) -> Diagnostic {
        let mut help = format!("expected one of {}", backticked(expected));
        if let Some(s) = did_you_mean(key, expected) {
            help.push_str(&format!("; did you mean `{s}`?"));
        }
        self.diag(format!("unknown key `{key}` in {section}"), span, help)
    }

    fn table<'t, 'i>(
        &self,
        key: &str,
        v: &'t Spanned<DeValue<'i>>,
        within: &str,
    ) -> Result<&'t DeTable<'i>, Diagnostic> {
        match v.get_ref() {
            DeValue::Table(t) => Ok(t),
            other => Err(self.diag(
                format!(
                    "`{key}` in {within} must be a table, found {}",
                    a_type(other)
                ),
                v.span(),
                format!(
                    "write it as a section header: [{}]",
                    key.trim_matches(['[', ']'])
                ),
            )),
        }
    }

    fn section(&self, name: &str, t: &DeTable<'_>, header: &str) -> Result<(), Diagnostic> {
        let keys = match name {
            "filesystem" => FILESYSTEM_KEYS,
            "env" => ENV_KEYS,
            "syscalls" => SYSCALLS_KEYS,
            "exec" => EXEC_KEYS,
            "state" => STATE_KEYS,
            "network" => NETWORK_KEYS,
            "dns" => DNS_KEYS,
            "http" => HTTP_KEYS,
            "tls" => TLS_KEYS,
            "judge" => JUDGE_KEYS,
            "dlp" => DLP_KEYS,
            _ => LIMITS_KEYS,
        };
        for (k, v) in sorted(t) {
            let key: &str = k.get_ref();
            if !keys.contains(&key) {
                return Err(self.unknown(key, k.span(), header, keys));
            }
            let expect = match (name, key) {
                ("filesystem", "landlock") => Expect::String,
                ("filesystem", _) | ("env", "pass") => Expect::StringArray,
                ("env", _) => Expect::StringTable,
                ("syscalls", "nested_userns") => Expect::Boolean,
                ("syscalls", _) => Expect::StringArray,
                ("exec", "ask_timeout") => Expect::Integer,
                ("exec", "rule") => Expect::ExecRules,
                ("exec", _) => Expect::StringArray,
                ("state", "protect" | "caches") => Expect::StringArray,
                ("state", _) => Expect::String,
                ("network", "mode") | ("dns", "upstream") => Expect::String,
                ("network", "allow_ips") | ("dns", "block") => Expect::StringArray,
                ("network", _) => NETWORK_ALLOW,
                ("dns", _) => Expect::StringTable,
                ("http", "default") => Expect::String,
                ("http", _) => HTTP_RULE,
                ("tls", "upstream_ca") if matches!(v.get_ref(), DeValue::String(_)) => {
                    Expect::String
                }
                ("tls", _) => Expect::StringArray,
                ("judge", "timeout_ms" | "max_body_bytes") => Expect::Integer,
                ("judge", _) => Expect::String,
                ("dlp", "action") => Expect::String,
                ("dlp", "allow") => DLP_ALLOW,
                (_, "memory") => Expect::Size,
                (_, "cpu") => Expect::Number,
                _ => Expect::Integer,
            };
            self.value(key, v, header, expect)?;
        }
        Ok(())
    }

    fn value(
        &self,
        key: &str,
        v: &Spanned<DeValue<'_>>,
        header: &str,
        expect: Expect,
    ) -> Result<(), Diagnostic> {
        let ok = match (expect, v.get_ref()) {
            (Expect::String, DeValue::String(_)) => true,
            (Expect::Integer, DeValue::Integer(_)) => true,
            (Expect::Number, DeValue::Integer(_) | DeValue::Float(_)) => true,
            (Expect::Boolean, DeValue::Boolean(_)) => true,
            (Expect::ExecRules, DeValue::Array(items)) => {
                let rule_header = format!("[{}.rule]]", header.trim_end_matches(']'));
                for item in items.iter() {
                    let DeValue::Table(t) = item.get_ref() else {
                        return Err(self.diag(
                            format!(
                                "elements of `rule` in {header} must be tables, found {}",
                                a_type(item.get_ref())
                            ),
                            item.span(),
                            "write each rule as a [[exec.rule]] section with `pattern` and `action`"
                                .to_string(),
                        ));
                    };
                    let mut seen = Vec::new();
                    for (k, v) in sorted(t) {
                        let rk: &str = k.get_ref();
                        if !EXEC_RULE_KEYS.contains(&rk) {
                            return Err(self.unknown(rk, k.span(), &rule_header, EXEC_RULE_KEYS));
                        }
                        self.value(rk, v, &rule_header, Expect::String)?;
                        seen.push(rk);
                    }
                    for needed in EXEC_RULE_KEYS {
                        if !seen.contains(needed) {
                            return Err(self.diag(
                                format!("{rule_header} has no `{needed}`"),
                                item.span(),
                                "each rule needs both, e.g. pattern = \"git push *\" and action = \"ask\""
                                    .to_string(),
                            ));
                        }
                    }
                }
                true
            }
            (
                Expect::Tables {
                    what,
                    keys,
                    required,
                    example,
                },
                DeValue::Array(items),
            ) => {
                let item_header = format!("[[{what}]]");
                for item in items.iter() {
                    let DeValue::Table(t) = item.get_ref() else {
                        return Err(self.diag(
                            format!(
                                "elements of `{key}` in {header} must be tables, found {}",
                                a_type(item.get_ref())
                            ),
                            item.span(),
                            format!("write each as a {item_header} section, e.g. {example}"),
                        ));
                    };
                    let mut seen = Vec::new();
                    for (k, v) in sorted(t) {
                        let ik: &str = k.get_ref();
                        if !keys.contains(&ik) {
                            return Err(self.unknown(ik, k.span(), &item_header, keys));
                        }
                        let e = match ik {
                            "ports" => Expect::IntegerArray,
                            "port" | "host_port" | "max_body" => Expect::Integer,
                            "methods" | "kinds" | "hosts" => Expect::StringArray,
                            "headers" => Expect::StringTable,
                            _ => Expect::String,
                        };
                        self.value(ik, v, &item_header, e)?;
                        seen.push(ik);
                    }
                    for needed in required {
                        if !seen.contains(needed) {
                            return Err(self.diag(
                                format!("{item_header} has no `{needed}`"),
                                item.span(),
                                format!("e.g. {example}"),
                            ));
                        }
                    }
                }
                true
            }
            (Expect::IntegerArray, DeValue::Array(items)) => {
                for item in items.iter() {
                    if !matches!(item.get_ref(), DeValue::Integer(_)) {
                        return Err(self.diag(
                            format!(
                                "elements of `{key}` in {header} must be integers, found {}",
                                a_type(item.get_ref())
                            ),
                            item.span(),
                            "write port numbers without quotes, e.g. ports = [443]".to_string(),
                        ));
                    }
                }
                true
            }
            (Expect::Size, DeValue::Integer(_) | DeValue::String(_)) => true,
            (Expect::StringArray, DeValue::Array(items)) => {
                for item in items.iter() {
                    if !matches!(item.get_ref(), DeValue::String(_)) {
                        return Err(self.diag(
                            format!(
                                "elements of `{key}` in {header} must be strings, found {}",
                                a_type(item.get_ref())
                            ),
                            item.span(),
                            "quote it: \"...\"".to_string(),
                        ));
                    }
                }
                true
            }
            (Expect::StringTable, DeValue::Table(t)) => {
                for (k, item) in sorted(t) {
                    if !matches!(item.get_ref(), DeValue::String(_)) {
                        let k: &str = k.get_ref();
                        return Err(self.diag(
                            format!(
                                "`{k}` in {header} `{key}` must be a string, found {}",
                                a_type(item.get_ref())
                            ),
                            item.span(),
                            "quote the value: environment variables are strings".to_string(),
                        ));
                    }
                }
                true
            }
            _ => false,
        };
        if ok {
            return Ok(());
        }
        let help = match (expect, v.get_ref()) {
            (Expect::StringArray, DeValue::String(s)) => {
                format!("write it as an array: {key} = [{}]", toml_string(s))
            }
            (Expect::StringArray, _) => format!("write it as an array: {key} = [\"...\"]"),
            (Expect::StringTable, _) => {
                format!("write it as a table: {key} = {{ NAME = \"value\" }}")
            }
            (Expect::String, _) if key == "landlock" => {
                "expected \"required\" or \"best-effort\"".to_string()
            }
            (Expect::String, _) if key == "action" && header.contains("http") => {
                format!("expected {}", quoted_choices(HTTP_ACTION_VALUES))
            }
            (Expect::String, _) if key == "action" => {
                "expected \"allow\", \"deny\" or \"ask\"".to_string()
            }
            (Expect::String, _) if key == "on_exit" => {
                format!("expected {}", quoted_choices(ON_EXIT_VALUES))
            }
            (Expect::String, _) if key == "project_files" => {
                format!("expected {}", quoted_choices(PROJECT_FILES_VALUES))
            }
            (Expect::String, _) if key == "pattern" => "e.g. pattern = \"git push *\"".to_string(),
            (Expect::String, _) if key == "mode" => {
                format!("expected {}", quoted_choices(NETWORK_MODE_VALUES))
            }
            (Expect::String, _) if key == "upstream" => {
                "e.g. upstream = \"127.0.0.1:53\"".to_string()
            }
            (Expect::String, _) if key == "host" => {
                "e.g. host = \"github.com\" or host = \"*.example.com\"".to_string()
            }
            (Expect::Tables { what, example, .. }, _) => {
                format!("write each as a [[{what}]] section, e.g. {example}")
            }
            (Expect::IntegerArray, _) => format!("write it as an array: {key} = [443]"),
            (Expect::Boolean, _) => format!("write true or false, without quotes: {key} = false"),
            (Expect::ExecRules, _) => {
                "write each rule as a [[exec.rule]] section with `pattern` and `action`".to_string()
            }
            (Expect::Size, _) => "e.g. memory = \"4G\" or memory = 4294967296".to_string(),
            (Expect::Integer, DeValue::String(s)) => format!("remove the quotes: {key} = {s}"),
            (Expect::Integer, _) => format!("e.g. {key} = 1024"),
            (Expect::Number, _) => format!("e.g. {key} = 1.5"),
            _ => format!("`{key}` must be {}", expect.describe()),
        };
        Err(self.diag(
            format!(
                "`{key}` in {header} must be {}, found {}",
                expect.describe(),
                a_type(v.get_ref())
            ),
            v.span(),
            help,
        ))
    }
}

const NETWORK_ALLOW: Expect = Expect::Tables {
    what: "network.allow",
    keys: NETWORK_ALLOW_KEYS,
    required: NETWORK_ALLOW_KEYS,
    example: "host = \"github.com\" and ports = [22]",
};

const HTTP_RULE: Expect = Expect::Tables {
    what: "http.rule",
    keys: HTTP_RULE_KEYS,
    required: &["host", "action"],
    example: "host = \"api.anthropic.com\" and action = \"allow\"",
};

const DLP_ALLOW: Expect = Expect::Tables {
    what: "dlp.allow",
    keys: DLP_ALLOW_KEYS,
    required: DLP_ALLOW_KEYS,
    example: "kinds = [\"jwt\"] and hosts = [\"auth.example.com\"]",
};

const PUBLISH: Expect = Expect::Tables {
    what: "publish",
    keys: PUBLISH_KEYS,
    required: &["port"],
    example: "port = 3000",
};

/// A TOML basic string literal for `s`.
pub(crate) fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// `"a", "b" or "c"`.
pub(crate) fn quoted_choices(values: &[&str]) -> String {
    let q: Vec<String> = values.iter().map(|v| format!("\"{v}\"")).collect();
    match q.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// `name` as a TOML key: bare when possible, quoted otherwise.
pub(crate) fn quote_key(name: &str) -> String {
    if !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        name.to_string()
    } else {
        toml_string(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_keys_doc() -> String {
        let mut doc = String::from("[filesystem]\n");
        for k in FILESYSTEM_KEYS {
            doc.push_str(if *k == "landlock" {
                "landlock = \"required\"\n"
            } else {
                "__K__ = [\"/x\"]\n"
            });
            doc = doc.replace("__K__", k);
        }
        doc.push_str("[env]\npass = [\"A\"]\nset = { B = \"c\" }\n");
        doc.push_str("[limits]\nmemory = \"1G\"\npids = 10\ncpu = 1\nnofile = 64\n");
        doc.push_str(
            "[syscalls]\nallow = [\"ptrace\"]\ndeny = [\"chroot\"]\nnested_userns = true\n",
        );
        doc.push_str(
            "[exec]\ndeny = [\"a\"]\nask = [\"b\"]\nallow = [\"c\"]\nask_timeout = 5\n\
             [[exec.rule]]\npattern = \"d\"\naction = \"ask\"\n",
        );
        doc.push_str(
            "[state]\nprotect = [\"/z\"]\non_exit = \"ask\"\nproject_files = \"staged\"\nhome = \"readonly\"\ncaches = [\"/c\"]\n",
        );
        doc.push_str(
            "[profile.p.filesystem]\nwritable = [\"/y\"]\n[profile.p.env]\n[profile.p.limits]\n\
             [profile.p.syscalls]\n[profile.p.exec]\n[profile.p.state]\nprotect = [\"/w\"]\n",
        );
        doc
    }

    /// The key lists used for diagnostics and the serde schema agree.
    #[test]
    fn key_lists_match_the_serde_schema() {
        let doc = all_keys_doc();
        let table = DeTable::parse(&doc).unwrap();
        Checker {
            src: &doc,
            file: None,
        }
        .check(table.get_ref())
        .unwrap();
        let parsed: PolicyFile = toml::from_str(&doc).unwrap();
        let fs = parsed.filesystem.unwrap();
        assert_eq!(fs.readable.len(), 1);
        assert_eq!(fs.deny[0].get_ref(), "/x");
        assert_eq!(
            parsed.limits.unwrap().memory.unwrap().into_inner(),
            Size::Text("1G".into())
        );
        assert_eq!(parsed.profile.len(), 1);
        let sys = parsed.syscalls.unwrap();
        assert_eq!(sys.allow[0].get_ref(), "ptrace");
        assert_eq!(sys.nested_userns.map(|b| *b.get_ref()), Some(true));
        let exec = parsed.exec.unwrap();
        assert_eq!(exec.rule[0].get_ref().action.get_ref(), "ask");
        assert_eq!(exec.ask_timeout.map(|t| *t.get_ref()), Some(5));
        assert!(doc.contains("[[exec.rule]]\npattern = \"d\"\naction = "));
        let state = parsed.state.unwrap();
        assert_eq!(state.protect[0].get_ref(), "/z");
        assert_eq!(
            state.on_exit.map(|v| v.into_inner()).as_deref(),
            Some("ask")
        );
        assert_eq!(
            state.project_files.map(|v| v.into_inner()).as_deref(),
            Some("staged")
        );
        assert_eq!(
            state.home.map(|v| v.into_inner()).as_deref(),
            Some("readonly")
        );
        assert_eq!(state.caches[0].get_ref(), "/c");
        let p = parsed.profile.into_values().next().unwrap();
        assert_eq!(p.state.unwrap().protect[0].get_ref(), "/w");
        for k in EXEC_KEYS
            .iter()
            .chain(SYSCALLS_KEYS)
            .chain(STATE_KEYS)
            .filter(|k| **k != "rule")
        {
            assert!(
                doc.contains(&format!("\n{k} = ")),
                "{k} not in the test document"
            );
        }
        assert!(
            toml::from_str::<PolicyFile>(
                "[[exec.rule]]\npattern = \"x\"\naction = \"ask\"\nwhy = 1\n"
            )
            .is_err()
        );
        for (section, keys) in [
            ("filesystem", FILESYSTEM_KEYS),
            ("env", ENV_KEYS),
            ("limits", LIMITS_KEYS),
            ("syscalls", SYSCALLS_KEYS),
            ("exec", EXEC_KEYS),
            ("state", STATE_KEYS),
        ] {
            let bad = format!("[{section}]\nnot_a_key = 1\n");
            assert!(
                toml::from_str::<PolicyFile>(&bad).is_err(),
                "serde accepts {section}"
            );
            assert!(!keys.is_empty());
        }
        assert!(toml::from_str::<PolicyFile>("x = 1").is_err());
        assert!(toml::from_str::<PolicyFile>("[profile.p]\nx = 1").is_err());
    }

    #[test]
    fn integer_cpu_and_memory_deserialize() {
        let p: PolicyFile = toml::from_str("[limits]\ncpu = 2\nmemory = 1024").unwrap();
        let l = p.limits.unwrap();
        assert_eq!(*l.cpu.unwrap().get_ref(), 2.0);
        assert_eq!(l.memory.unwrap().into_inner(), Size::Bytes(1024));
    }

    #[test]
    fn quoting() {
        assert_eq!(quote_key("claude"), "claude");
        assert_eq!(quote_key("a b"), "\"a b\"");
        for s in ["a\"b\\", "it's", "x\ny", "plain"] {
            let doc = format!("k = {}", toml_string(s));
            let t: toml::Table = toml::from_str(&doc).unwrap();
            assert_eq!(t["k"].as_str(), Some(s));
        }
        assert_eq!(toml_string("maybe"), "\"maybe\"");
        assert_eq!(quoted_choices(&["a"]), "\"a\"");
        assert_eq!(quoted_choices(&["a", "b", "c"]), "\"a\", \"b\" or \"c\"");
    }
}
