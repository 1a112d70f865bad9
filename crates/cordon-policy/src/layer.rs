//! One parsed, validated and expanded policy file (a layer of the merge).

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_spanned::Spanned;
use toml::de::DeTable;

use crate::env::{glob_error, name_error, only_never_passable};
use crate::error::backticked;
use crate::error::{Diagnostic, PolicyError, did_you_mean};
use crate::expand::{ExpandError, Vars, expand, uses_home};
use crate::plan::{
    BUILTIN_CONDITIONAL_SYSCALLS, BUILTIN_DENIED_SYSCALLS, DlpAction, DlpAllow, ExecAction,
    HomeMode, HttpAction, HttpRule, LandlockMode, NetMode, OnExit, ProjectFiles, SyscallsPlan,
};
use crate::schema::{
    Checker, DLP_ACTION_VALUES, DlpSection, DnsSection, EnvSection, ExecSection, FilesystemSection,
    HOME_VALUES, HTTP_ACTION_VALUES, HTTP_DEFAULT_VALUES, HttpSection, JUDGE_API_VALUES,
    JUDGE_ON_ERROR_VALUES, JudgeSection, LimitsSection, NETWORK_MODE_VALUES, NetworkSection,
    ON_EXIT_VALUES, PROJECT_FILES_VALUES, Parts, PolicyFile, PublishEntry, Size, StateSection,
    SyscallsSection, TlsSection, quoted_choices, toml_string,
};
use crate::syscall_table;

/// Where a rule or value came from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Origin {
    /// Index of the layer in the merge (0 is the built-in policy).
    pub layer: usize,
    /// `built-in`, `project` or `FILE:LINE`.
    pub label: String,
    /// 1-based line in the layer's source (0 when there is none).
    pub line: usize,
    /// Byte span in the layer's source, if the value was written in a file.
    pub span: Option<Range<usize>>,
    /// Merge order: (base section = 0 / profile = 1, layer, offset).
    pub order: (u8, usize, usize),
}

/// A path rule with its origin.
#[derive(Debug, Clone)]
pub(crate) struct Rule {
    pub path: PathBuf,
    pub origin: Origin,
}

/// The sections of a file (or of one of its profiles), expanded and validated.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sections {
    pub readable: Vec<Rule>,
    pub writable: Vec<Rule>,
    pub deny: Vec<Rule>,
    pub read_only: Vec<Rule>,
    pub landlock: Option<(LandlockMode, Origin)>,
    pub pass: Vec<(String, Origin)>,
    pub set: Vec<(String, String, Origin)>,
    pub memory: Option<(u64, Origin)>,
    pub pids: Option<(u64, Origin)>,
    pub cpu: Option<(f64, Origin)>,
    pub nofile: Option<(u64, Origin)>,
    /// `[syscalls] allow`: built-in denials to lift.
    pub sys_allow: Vec<(String, Origin)>,
    /// `[syscalls] deny`.
    pub sys_deny: Vec<(String, Origin)>,
    pub nested_userns: Option<(bool, Origin)>,
    /// Exec rules in this file's order: `[[exec.rule]]`, then `deny`, `ask`, `allow`.
    pub exec_rules: Vec<(String, ExecAction, Origin)>,
    pub ask_timeout: Option<(u64, Origin)>,
    /// `[state] protect`.
    pub protect: Vec<Rule>,
    pub on_exit: Option<(OnExit, Origin)>,
    pub project_files: Option<(ProjectFiles, Origin)>,
    /// `[state] home`.
    pub home: Option<(HomeMode, Origin)>,
    /// `[state] caches`.
    pub caches: Vec<Rule>,
    /// `[network] mode`.
    pub net_mode: Option<(NetMode, Origin)>,
    /// `[network] allow_ips`, normalised to `ADDR/LEN`.
    pub allow_ips: Vec<(String, Origin)>,
    /// `[[network.allow]]`: host pattern (lower-case) and ports.
    pub net_allow: Vec<(String, Vec<u16>, Origin)>,
    /// `[dns] block`, lower-case.
    pub dns_block: Vec<(String, Origin)>,
    /// `[dns] hosts`, lower-case names.
    pub dns_hosts: Vec<(String, std::net::IpAddr, Origin)>,
    /// `[dns] upstream`.
    pub dns_upstream: Option<(std::net::SocketAddr, Origin)>,
    /// `[[publish]]`: sandbox port, host port.
    pub publish: Vec<(u16, u16, Origin)>,
    /// `[http] default`.
    pub http_default: Option<(HttpAction, Origin)>,
    /// `[[http.rule]]`, in file order.
    pub http_rules: Vec<(HttpRule, Origin)>,
    /// `[tls] passthrough`, lower-case host globs.
    pub tls_passthrough: Vec<(String, Origin)>,
    /// `[tls] upstream_ca`.
    pub upstream_ca: Vec<Rule>,
    /// `[judge]`.
    pub judge: Option<(crate::plan::JudgePlan, Origin)>,
    /// `[credentials.NAME]`.
    pub credentials: Vec<(crate::plan::CredentialPlan, Origin)>,
    /// `[dlp] action`.
    pub dlp_action: Option<(DlpAction, Origin)>,
    /// `[dlp] max_body_bytes`.
    pub dlp_max_body: Option<(u64, Origin)>,
    /// `[[dlp.allow]]`.
    pub dlp_allow: Vec<(DlpAllow, Origin)>,
    /// Problems worth a warning that do not stop the run.
    pub warnings: Vec<String>,
}

/// One policy file.
#[derive(Debug, Clone)]
pub(crate) struct Layer {
    /// `None` for the built-in policy.
    pub file: Option<PathBuf>,
    pub src: String,
    pub base: Sections,
    pub profiles: BTreeMap<String, Sections>,
    /// Inside the project and not trusted: what it loosens is reported.
    pub untrusted: bool,
}

/// What expansion needs to know.
#[derive(Debug, Clone)]
pub(crate) struct Context<'a> {
    pub home: &'a Path,
    pub passwd_home: Option<&'a Path>,
    pub project: &'a Path,
}

/// Limits on limits.
const MIN_MEMORY: u64 = 1 << 20;
const MAX_PIDS: i64 = 1 << 22;
const MAX_NOFILE: i64 = 1 << 30;
const MIN_CPU: f64 = 0.01;
const MAX_CPU: f64 = 65536.0;
const MAX_ASK_TIMEOUT: i64 = 3600;

/// Parses a memory size: bytes, or a number with a K/M/G/T suffix (1024-based), optionally
/// followed by `B` or `iB` (`"4G"`, `"512MiB"`, `"1t"`).
pub(crate) fn parse_size(text: &str) -> Result<u64, &'static str> {
    let t = text.trim();
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return Err("does not start with a number");
    }
    let (num, unit) = t.split_at(digits);
    let shift = match unit.to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err("has an unknown unit"),
    };
    let n: u64 = num.parse().map_err(|_| "is too large")?;
    n.checked_mul(1u64 << shift).ok_or("is too large")
}

/// `ADDR` or `ADDR/LEN` as a canonical `ADDR/LEN` string.
pub(crate) fn parse_cidr(text: &str) -> Result<String, &'static str> {
    let t = text.trim();
    let (addr, len) = match t.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (t, None),
    };
    let ip: std::net::IpAddr = addr.parse().map_err(|_| "not an IP address")?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let len = match len {
        Some(l) => l
            .parse::<u8>()
            .map_err(|_| "the prefix length is not a number")?,
        None => max,
    };
    if len > max {
        return Err("the prefix length is too long for the address");
    }
    Ok(format!("{ip}/{len}"))
}

/// Parses, checks and expands one policy file.
pub(crate) fn parse_layer(
    src: &str,
    file: Option<&Path>,
    layer: usize,
    ctx: &Context<'_>,
) -> Result<Layer, PolicyError> {
    let table = DeTable::parse(src).map_err(|e| toml_error(&e, src, file))?;
    Checker { src, file }.check(table.get_ref())?;
    let parsed = PolicyFile::deserialize(toml::de::Deserializer::from(table))
        .map_err(|e| toml_error(&e, src, file))?;
    let conv = Converter {
        src,
        file,
        layer,
        ctx,
    };
    let (parts, profile) = parsed.split();
    let base = conv.sections(0, parts)?;
    let mut profiles = BTreeMap::new();
    for (name, p) in profile {
        let s = conv.sections(1, p.into())?;
        profiles.insert(name.into_inner(), s);
    }
    Ok(Layer {
        file: file.map(Path::to_path_buf),
        src: src.to_string(),
        base,
        profiles,
        untrusted: false,
    })
}

fn toml_error(e: &toml::de::Error, src: &str, file: Option<&Path>) -> PolicyError {
    let message = e.message().trim().replace('\n', "; ");
    let mut d = Diagnostic::new(format!("invalid TOML: {message}"))
        .in_file(file)
        .with_help("fix the TOML syntax (https://toml.io); strings need quotes, arrays brackets");
    if let Some(span) = e.span() {
        d = d.at(src, span);
    }
    d.into()
}

struct Converter<'a> {
    src: &'a str,
    file: Option<&'a Path>,
    layer: usize,
    ctx: &'a Context<'a>,
}

impl Converter<'_> {
    fn origin(&self, phase: u8, span: Range<usize>) -> Origin {
        let line = self.src[..span.start.min(self.src.len())]
            .matches('\n')
            .count()
            + 1;
        let label = match self.file {
            Some(f) => format!("{}:{line}", f.display()),
            None => "built-in".to_string(),
        };
        Origin {
            layer: self.layer,
            label,
            line,
            order: (phase, self.layer, span.start),
            span: Some(span),
        }
    }

    fn diag(&self, message: String, span: Range<usize>, help: impl Into<String>) -> PolicyError {
        Diagnostic::new(message)
            .in_file(self.file)
            .at(self.src, span)
            .with_help(help)
            .into()
    }

    /// Maps a byte range inside a string's value to its place in the source, when the literal
    /// has no escapes (so offsets line up); otherwise the whole literal.
    fn inner_span(&self, s: &Spanned<String>, at: Range<usize>) -> Range<usize> {
        let span = s.span();
        let lit = self.src.get(span.clone()).unwrap_or("");
        if lit.len() == s.get_ref().len() + 2 && &lit[1..lit.len() - 1] == s.get_ref().as_str() {
            span.start + 1 + at.start..span.start + 1 + at.end
        } else {
            span
        }
    }

    fn sections(&self, phase: u8, parts: Parts) -> Result<Sections, PolicyError> {
        let mut out = Sections::default();
        self.fs_env_limits(phase, parts.filesystem, parts.env, parts.limits, &mut out)?;
        if let Some(sys) = parts.syscalls {
            self.syscalls(phase, sys, &mut out)?;
        }
        if let Some(exec) = parts.exec {
            self.exec(phase, exec, &mut out)?;
        }
        if let Some(state) = parts.state {
            self.state(phase, state, &mut out)?;
        }
        if let Some(net) = parts.network {
            self.network(phase, net, &mut out)?;
        }
        if let Some(dns) = parts.dns {
            self.dns(phase, dns, &mut out)?;
        }
        self.publish(phase, &parts.publish, &mut out)?;
        if let Some(http) = parts.http {
            self.http(phase, http, &mut out)?;
        }
        if let Some(tls) = parts.tls {
            self.tls(phase, tls, &mut out)?;
        }
        if let Some(judge) = parts.judge {
            self.judge(phase, judge, &mut out)?;
        }
        if let Some(dlp) = parts.dlp {
            self.dlp(phase, dlp, &mut out)?;
        }
        for (name, entry) in &parts.credentials {
            let c = self.credential(phase, name, entry)?;
            out.credentials.push(c);
        }
        Ok(out)
    }

    fn credential(
        &self,
        phase: u8,
        name: &Spanned<String>,
        entry: &Spanned<crate::schema::CredentialEntry>,
    ) -> Result<(crate::plan::CredentialPlan, Origin), PolicyError> {
        let e = entry.get_ref();
        let origin = self.origin(phase, name.span());
        let src = e.source.get_ref();
        let source = match (&src.env, &src.file, &src.command) {
            (Some(v), None, None) if !v.trim().is_empty() => {
                crate::plan::CredentialSource::Env(v.trim().to_string())
            }
            (None, Some(f), None) => {
                let located = Spanned::new(e.source.span(), f.clone());
                let p = self
                    .paths(phase, std::slice::from_ref(&located), "source.file", false)?
                    .pop()
                    .map(|r| r.path)
                    .unwrap_or_default();
                crate::plan::CredentialSource::File(p)
            }
            (None, None, Some(cmd)) if !cmd.is_empty() && !cmd[0].is_empty() => {
                crate::plan::CredentialSource::Command(cmd.clone())
            }
            _ => {
                return Err(self.diag(
                    format!("[credentials.{}] needs exactly one source", name.get_ref()),
                    e.source.span(),
                    "source = { env = \"VAR\" }, { file = \"~/.config/x/key\" } or { command = [\"gh\", \"auth\", \"token\"] }",
                ));
            }
        };
        if e.hosts.is_empty() {
            return Err(self.diag(
                format!("[credentials.{}] has no hosts", name.get_ref()),
                entry.span(),
                "name where the real value may go, e.g. hosts = [\"api.anthropic.com\"]",
            ));
        }
        let mut hosts = Vec::new();
        for h in &e.hosts {
            hosts.push(self.host_glob(h)?);
        }
        let query = match (&e.query, &e.header) {
            (Some(q), Some(_)) => {
                return Err(self.diag(
                    format!(
                        "[credentials.{}] has both `header` and `query`",
                        name.get_ref()
                    ),
                    q.span(),
                    "a credential travels in one place: keep `header` or `query`",
                ));
            }
            (Some(q), None) => {
                let n = q.get_ref().trim().to_string();
                if n.is_empty()
                    || !n
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
                {
                    return Err(self.diag(
                        format!("invalid query parameter name {}", toml_string(q.get_ref())),
                        q.span(),
                        "e.g. query = \"key\" (the parameter the API reads the key from)",
                    ));
                }
                Some(n)
            }
            (None, _) => None,
        };
        let header = match (&query, &e.header) {
            (Some(_), _) => String::new(),
            (None, h) => h.as_ref().map_or("authorization".to_string(), |h| {
                h.get_ref().trim().to_ascii_lowercase()
            }),
        };
        let files = self
            .paths(phase, &e.files, "files", false)?
            .into_iter()
            .map(|r| r.path)
            .collect();
        if query.is_none()
            && (header.is_empty()
                || !header
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-'))
        {
            return Err(self.diag(
                format!("invalid header name for [credentials.{}]", name.get_ref()),
                e.header.as_ref().map_or(entry.span(), |h| h.span()),
                "e.g. header = \"x-api-key\" or header = \"authorization\"",
            ));
        }
        let format = e
            .format
            .as_ref()
            .map_or("{}".to_string(), |f| f.get_ref().clone());
        if !format.contains("{}") {
            return Err(self.diag(
                "a credential's format needs `{}` where the value goes".to_string(),
                e.format.as_ref().map_or(entry.span(), |f| f.span()),
                "e.g. format = \"Bearer {}\" or format = \"Basic x-access-token:{}\"",
            ));
        }
        let env = match &e.env {
            Some(v) => {
                let n = v.get_ref().trim().to_string();
                if n.is_empty() || !n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                    return Err(self.diag(
                        format!("invalid variable name {}", toml_string(v.get_ref())),
                        v.span(),
                        "e.g. env = \"ANTHROPIC_API_KEY\"",
                    ));
                }
                Some(n)
            }
            None => None,
        };
        Ok((
            crate::plan::CredentialPlan {
                name: name.get_ref().clone(),
                env,
                source,
                hosts,
                header,
                query,
                files,
                format,
                inject: e.inject.as_ref().is_some_and(|i| *i.get_ref()),
                origin: origin.label.clone(),
            },
            origin,
        ))
    }

    fn dlp(&self, phase: u8, d: DlpSection, out: &mut Sections) -> Result<(), PolicyError> {
        if let Some(v) = &d.action {
            let a = match self.choice(v, "action", DLP_ACTION_VALUES)? {
                "deny" => DlpAction::Deny,
                "ask" => DlpAction::Ask,
                "log" => DlpAction::Log,
                _ => DlpAction::Off,
            };
            out.dlp_action = Some((a, self.origin(phase, v.span())));
        }
        if let Some(t) = &d.max_body_bytes {
            if !(0..=16 << 20).contains(t.get_ref()) {
                return Err(self.out_of_range(
                    "max_body_bytes",
                    t.span(),
                    "from 0 to 16777216, e.g. max_body_bytes = 65536",
                ));
            }
            out.dlp_max_body = Some((t.get_ref().unsigned_abs(), self.origin(phase, t.span())));
        }
        for a in &d.allow {
            let e = a.get_ref();
            let origin = self.origin(phase, a.span());
            if e.kinds.is_empty() || e.hosts.is_empty() {
                return Err(self.diag(
                    "a [[dlp.allow]] entry needs at least one kind and one host".to_string(),
                    a.span(),
                    "e.g. kinds = [\"jwt\"] and hosts = [\"auth.example.com\"]",
                ));
            }
            let mut kinds = Vec::new();
            for k in &e.kinds {
                // `known:NAME` keeps its case: it names a variable or a credential.
                let raw = k.get_ref().trim();
                let kind = match raw.split_once(':') {
                    Some((p, n)) if p.eq_ignore_ascii_case("known") => format!("known:{n}"),
                    _ => raw.to_ascii_lowercase(),
                };
                let known = kind == "*"
                    || kind.strip_prefix("known:").is_some_and(|n| !n.is_empty())
                    || crate::plan::DLP_KINDS.contains(&kind.as_str());
                if !known {
                    let mut help = format!(
                        "expected \"*\", \"known:NAME\" or one of {}",
                        quoted_choices(crate::plan::DLP_KINDS)
                    );
                    if let Some(s) = did_you_mean(&kind, crate::plan::DLP_KINDS) {
                        help.push_str(&format!("; did you mean \"{s}\"?"));
                    }
                    return Err(self.diag(
                        format!("unknown secret kind {}", toml_string(k.get_ref())),
                        k.span(),
                        help,
                    ));
                }
                kinds.push(kind);
            }
            let mut hosts = Vec::new();
            for h in &e.hosts {
                hosts.push(self.host_glob(h)?);
            }
            out.dlp_allow.push((
                DlpAllow {
                    kinds,
                    hosts,
                    origin: origin.label.clone(),
                },
                origin,
            ));
        }
        Ok(())
    }

    fn judge(&self, phase: u8, j: JudgeSection, out: &mut Sections) -> Result<(), PolicyError> {
        let at = j
            .url
            .as_ref()
            .or(j.policy.as_ref())
            .or(j.model.as_ref())
            .map_or(0..0, |s| s.span());
        let origin = self.origin(phase, at);
        let need = |v: &Option<Spanned<String>>, key: &str, example: &str| {
            v.as_ref()
                .map(|s| s.get_ref().trim().to_string())
                .filter(|s| !s.is_empty())
                .ok_or_else(|| {
                    PolicyError::from(
                        crate::error::Diagnostic::new(format!("[judge] has no `{key}`"))
                            .in_file(self.file)
                            .with_help(format!("e.g. {key} = {example}")),
                    )
                })
        };
        let policy = need(
            &j.policy,
            "policy",
            "\"Reading package registries is fine; uploads are not.\"",
        )?;
        let url = need(&j.url, "url", "\"https://api.anthropic.com\"")?;
        let model = need(&j.model, "model", "\"claude-haiku-4-5\"")?;
        if let Some(u) = &j.url
            && !(u.get_ref().starts_with("https://") || u.get_ref().starts_with("http://"))
        {
            return Err(self.diag(
                format!("invalid judge url {}", toml_string(u.get_ref())),
                u.span(),
                "an http:// or https:// URL, e.g. \"https://api.anthropic.com\"",
            ));
        }
        let api = match &j.api {
            Some(a) => self.choice(a, "api", JUDGE_API_VALUES)?.to_string(),
            None => "anthropic".to_string(),
        };
        let on_error = match &j.on_error {
            Some(a) => self
                .choice(a, "on_error", JUDGE_ON_ERROR_VALUES)?
                .to_string(),
            None => "deny".to_string(),
        };
        let timeout_ms = match &j.timeout_ms {
            Some(t) if (100..=120_000).contains(t.get_ref()) => t.get_ref().unsigned_abs(),
            Some(t) => {
                return Err(self.out_of_range(
                    "timeout_ms",
                    t.span(),
                    "from 100 to 120000, e.g. timeout_ms = 8000",
                ));
            }
            None => 8000,
        };
        let max_body_bytes = match &j.max_body_bytes {
            Some(t) if (0..=1 << 20).contains(t.get_ref()) => t.get_ref().unsigned_abs(),
            Some(t) => {
                return Err(self.out_of_range(
                    "max_body_bytes",
                    t.span(),
                    "from 0 to 1048576, e.g. max_body_bytes = 16384",
                ));
            }
            None => 16 << 10,
        };
        let credential = j
            .credential
            .as_ref()
            .map(|c| c.get_ref().trim().to_string());
        out.judge = Some((
            crate::plan::JudgePlan {
                policy,
                api,
                url,
                model,
                credential,
                timeout_ms,
                on_error,
                max_body_bytes,
                origin: origin.label.clone(),
            },
            origin,
        ));
        Ok(())
    }

    fn http_action(
        &self,
        v: &Spanned<String>,
        key: &str,
        values: &[&str],
    ) -> Result<HttpAction, PolicyError> {
        Ok(match self.choice(v, key, values)? {
            "allow" => HttpAction::Allow,
            "ask" => HttpAction::Ask,
            "judge" => HttpAction::Judge,
            _ => HttpAction::Deny,
        })
    }

    fn http(&self, phase: u8, http: HttpSection, out: &mut Sections) -> Result<(), PolicyError> {
        if let Some(d) = &http.default {
            let a = self.http_action(d, "default", HTTP_DEFAULT_VALUES)?;
            out.http_default = Some((a, self.origin(phase, d.span())));
        }
        for entry in &http.rule {
            let r = entry.get_ref();
            let origin = self.origin(phase, entry.span());
            let host = self.host_glob(&r.host)?;
            let port = match &r.port {
                Some(p) => Some(self.port(p, "port")?),
                None => None,
            };
            let mut methods = Vec::new();
            for m in &r.methods {
                let up = m.get_ref().trim().to_ascii_uppercase();
                if up.is_empty() || !up.bytes().all(|b| b.is_ascii_alphabetic() || b == b'-') {
                    return Err(self.diag(
                        format!(
                            "invalid method {} in [[http.rule]]",
                            toml_string(m.get_ref())
                        ),
                        m.span(),
                        "e.g. methods = [\"GET\", \"HEAD\"]",
                    ));
                }
                methods.push(up);
            }
            let max_body = match &r.max_body {
                Some(v) if *v.get_ref() >= 0 => Some(v.get_ref().unsigned_abs()),
                Some(v) => {
                    return Err(self.out_of_range(
                        "max_body",
                        v.span(),
                        "a size in bytes, e.g. max_body = 1048576",
                    ));
                }
                None => None,
            };
            let action = self.http_action(&r.action, "action", HTTP_ACTION_VALUES)?;
            let name = match &r.name {
                Some(n) if !n.get_ref().trim().is_empty() => n.get_ref().trim().to_string(),
                _ => format!("http.rule {}", origin.label),
            };
            out.http_rules.push((
                HttpRule {
                    name,
                    host,
                    port,
                    methods,
                    path: r.path.as_ref().map(|p| p.get_ref().clone()),
                    query: r.query.as_ref().map(|q| q.get_ref().clone()),
                    headers: r
                        .headers
                        .iter()
                        .map(|(k, v)| (k.get_ref().to_ascii_lowercase(), v.get_ref().clone()))
                        .collect(),
                    max_body,
                    action,
                    reason: r.reason.as_ref().map(|x| x.get_ref().clone()),
                    origin: origin.label.clone(),
                },
                origin,
            ));
        }
        Ok(())
    }

    fn tls(&self, phase: u8, tls: TlsSection, out: &mut Sections) -> Result<(), PolicyError> {
        for p in &tls.passthrough {
            let g = self.host_glob(p)?;
            out.tls_passthrough.push((g, self.origin(phase, p.span())));
        }
        if let Some(cas) = tls.upstream_ca {
            let span = cas.span();
            let located: Vec<Spanned<String>> = cas
                .into_inner()
                .0
                .into_iter()
                .map(|c| Spanned::new(span.clone(), c))
                .collect();
            out.upstream_ca = self.paths(phase, &located, "upstream_ca", false)?;
        }
        Ok(())
    }

    /// An HTTP host glob: lower-case, no trailing dot, no spaces or slashes.
    fn host_glob(&self, v: &Spanned<String>) -> Result<String, PolicyError> {
        let g = v
            .get_ref()
            .trim()
            .trim_end_matches('.')
            .to_ascii_lowercase();
        if g.is_empty()
            || g.bytes()
                .any(|b| b.is_ascii_whitespace() || b == b'/' || b == b':')
        {
            return Err(self.diag(
                format!("invalid host pattern {}", toml_string(v.get_ref())),
                v.span(),
                "a host or glob without scheme, port or path, e.g. \"api.anthropic.com\" or \"*.npmjs.org\"",
            ));
        }
        Ok(g)
    }

    fn network(
        &self,
        phase: u8,
        net: NetworkSection,
        out: &mut Sections,
    ) -> Result<(), PolicyError> {
        if let Some(v) = net.mode {
            let mode = match self.choice(&v, "mode", NETWORK_MODE_VALUES)? {
                "gateway" => NetMode::Gateway,
                "none" => NetMode::None,
                _ => NetMode::Host,
            };
            out.net_mode = Some((mode, self.origin(phase, v.span())));
        }
        for c in &net.allow_ips {
            let cidr = parse_cidr(c.get_ref()).map_err(|why| {
                self.diag(
                    format!(
                        "invalid address range {} in allow_ips: {why}",
                        toml_string(c.get_ref())
                    ),
                    c.span(),
                    "write an address or a CIDR range, e.g. \"10.1.2.0/24\" or \"192.0.2.7\"",
                )
            })?;
            out.allow_ips.push((cidr, self.origin(phase, c.span())));
        }
        for rule in &net.allow {
            let r = rule.get_ref();
            let host = self.host_pattern(&r.host, "host", true)?;
            let mut ports = Vec::new();
            if r.ports.get_ref().is_empty() {
                return Err(self.diag(
                    "empty `ports` in [[network.allow]]".to_string(),
                    r.ports.span(),
                    "name the ports this host may be reached on, e.g. ports = [443]",
                ));
            }
            for p in r.ports.get_ref() {
                ports.push(self.port(p, "ports")?);
            }
            out.net_allow
                .push((host, ports, self.origin(phase, rule.span())));
        }
        Ok(())
    }

    fn dns(&self, phase: u8, dns: DnsSection, out: &mut Sections) -> Result<(), PolicyError> {
        for b in &dns.block {
            let pat = self.host_pattern(b, "block", true)?;
            out.dns_block.push((pat, self.origin(phase, b.span())));
        }
        for (name, addr) in &dns.hosts {
            let host = self.host_pattern(name, "hosts", false)?;
            let ip: std::net::IpAddr = addr.get_ref().trim().parse().map_err(|_| {
                self.diag(
                    format!(
                        "invalid address {} for {} in [dns] hosts",
                        toml_string(addr.get_ref()),
                        toml_string(name.get_ref())
                    ),
                    addr.span(),
                    "write an IPv4 or IPv6 address, e.g. \"127.0.0.1\"",
                )
            })?;
            if ip.is_unspecified() || ip.is_multicast() {
                return Err(self.diag(
                    format!(
                        "address {ip} for {} cannot be connected to",
                        toml_string(name.get_ref())
                    ),
                    addr.span(),
                    "use a unicast address, e.g. \"127.0.0.1\"",
                ));
            }
            out.dns_hosts
                .push((host, ip, self.origin(phase, name.span())));
        }
        if let Some(u) = dns.upstream {
            let text = u.get_ref().trim();
            let addr =
                text.parse::<std::net::SocketAddr>()
                    .ok()
                    .or_else(|| {
                        text.parse::<std::net::IpAddr>()
                            .ok()
                            .map(|ip| std::net::SocketAddr::new(ip, 53))
                    })
                    .ok_or_else(|| {
                        self.diag(
                        format!("invalid resolver address {} in [dns] upstream", toml_string(text)),
                        u.span(),
                        "write ADDRESS or ADDRESS:PORT, e.g. \"127.0.0.1:53\" or \"[::1]:5353\"",
                    )
                    })?;
            out.dns_upstream = Some((addr, self.origin(phase, u.span())));
        }
        Ok(())
    }

    fn publish(
        &self,
        phase: u8,
        list: &[Spanned<PublishEntry>],
        out: &mut Sections,
    ) -> Result<(), PolicyError> {
        for e in list {
            let p = e.get_ref();
            let port = self.port(&p.port, "port")?;
            let host_port = match &p.host_port {
                Some(h) => self.port(h, "host_port")?,
                None => port,
            };
            if let Some((_, _, o)) = out.publish.iter().find(|(_, h, _)| *h == host_port) {
                return Err(self.diag(
                    format!(
                        "host port {host_port} is published twice (first at {})",
                        o.label
                    ),
                    e.span(),
                    "each [[publish]] needs its own host_port",
                ));
            }
            out.publish
                .push((port, host_port, self.origin(phase, e.span())));
        }
        Ok(())
    }

    fn port(&self, v: &Spanned<i64>, key: &str) -> Result<u16, PolicyError> {
        match u16::try_from(*v.get_ref()) {
            Ok(p) if p > 0 => Ok(p),
            _ => Err(self.out_of_range(key, v.span(), "a port is from 1 to 65535")),
        }
    }

    /// A host name, or (with `wild`) `*.name`: lower-cased, without a trailing dot.
    fn host_pattern(
        &self,
        v: &Spanned<String>,
        key: &str,
        wild: bool,
    ) -> Result<String, PolicyError> {
        let raw = v
            .get_ref()
            .trim()
            .trim_end_matches('.')
            .to_ascii_lowercase();
        let (star, name) = match raw.strip_prefix("*.") {
            Some(rest) if wild => (true, rest),
            _ => (false, raw.as_str()),
        };
        let why = if name.parse::<std::net::IpAddr>().is_ok() {
            Some("it is an IP address; names only here (raw addresses go in [network] allow_ips)")
        } else if name.is_empty() || name.len() > 253 {
            Some("a host name has 1 to 253 characters")
        } else if name.split('.').any(|l| l.is_empty() || l.len() > 63) {
            Some("each dot-separated label has 1 to 63 characters")
        } else if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        {
            Some(if wild {
                "only letters, digits, `-`, `_` and dots; a wildcard may only be a leading `*.`"
            } else {
                "only letters, digits, `-`, `_` and dots"
            })
        } else {
            None
        };
        if let Some(why) = why {
            return Err(self.diag(
                format!(
                    "invalid host {} in `{key}`: {why}",
                    toml_string(v.get_ref())
                ),
                v.span(),
                if wild {
                    "e.g. \"github.com\" or \"*.githubusercontent.com\""
                } else {
                    "e.g. \"api.example.test\""
                },
            ));
        }
        Ok(if star {
            format!("*.{name}")
        } else {
            name.to_string()
        })
    }

    fn state(&self, phase: u8, state: StateSection, out: &mut Sections) -> Result<(), PolicyError> {
        out.protect = self.paths(phase, &state.protect, "protect", false)?;
        if let Some(v) = state.on_exit {
            let value = match self.choice(&v, "on_exit", ON_EXIT_VALUES)? {
                "ask" => OnExit::Ask,
                "keep" => OnExit::Keep,
                "discard" => OnExit::Discard,
                _ => OnExit::Pending,
            };
            out.on_exit = Some((value, self.origin(phase, v.span())));
        }
        if let Some(v) = state.project_files {
            let value = match self.choice(&v, "project_files", PROJECT_FILES_VALUES)? {
                "readonly" => ProjectFiles::Readonly,
                _ => ProjectFiles::Staged,
            };
            out.project_files = Some((value, self.origin(phase, v.span())));
        }
        if let Some(v) = state.home {
            let value = match self.choice(&v, "home", HOME_VALUES)? {
                "overlay" => HomeMode::Overlay,
                _ => HomeMode::Readonly,
            };
            out.home = Some((value, self.origin(phase, v.span())));
        }
        out.caches = self.paths(phase, &state.caches, "caches", false)?;
        Ok(())
    }

    /// `v` if it is one of `values`; otherwise a located error listing them.
    fn choice<'v>(
        &self,
        v: &'v Spanned<String>,
        key: &str,
        values: &[&str],
    ) -> Result<&'v str, PolicyError> {
        let got = v.get_ref().as_str();
        if values.contains(&got) {
            return Ok(got);
        }
        let mut help = format!("expected {}", quoted_choices(values));
        let folded = got.trim().to_ascii_lowercase().replace(['-', '_'], "");
        let suggestion = values
            .iter()
            .find(|x| **x == folded)
            .copied()
            .or_else(|| did_you_mean(&folded, values));
        if let Some(s) = suggestion {
            help.push_str(&format!("; did you mean \"{s}\"?"));
        }
        Err(self.diag(
            format!("invalid value {} for `{key}`", toml_string(got)),
            v.span(),
            help,
        ))
    }

    fn fs_env_limits(
        &self,
        phase: u8,
        fs: Option<FilesystemSection>,
        env: Option<EnvSection>,
        limits: Option<LimitsSection>,
        out: &mut Sections,
    ) -> Result<(), PolicyError> {
        if let Some(fs) = fs {
            out.readable = self.paths(phase, &fs.readable, "readable", false)?;
            out.writable = self.paths(phase, &fs.writable, "writable", false)?;
            out.deny = self.paths(phase, &fs.deny, "deny", true)?;
            out.read_only = self.paths(phase, &fs.read_only, "read_only", false)?;
            if let Some(l) = fs.landlock {
                let mode = match l.get_ref().as_str() {
                    "required" => LandlockMode::Required,
                    "best-effort" => LandlockMode::BestEffort,
                    other => {
                        let mut help = "expected \"required\" or \"best-effort\"".to_string();
                        if let Some(s) = did_you_mean(other, &["required", "best-effort"]) {
                            help.push_str(&format!("; did you mean \"{s}\"?"));
                        }
                        return Err(self.diag(
                            format!("invalid value {} for `landlock`", toml_string(other)),
                            l.span(),
                            help,
                        ));
                    }
                };
                out.landlock = Some((mode, self.origin(phase, l.span())));
            }
        }
        if let Some(env) = env {
            for p in &env.pass {
                let pat = p.get_ref();
                if let Some(why) = glob_error(pat) {
                    return Err(self.diag(
                        format!("invalid variable name or glob {} in env.pass: it {why}", toml_string(pat)),
                        p.span(),
                        "use a variable name, or a glob where `*` matches any run of characters, e.g. \"LC_*\"",
                    ));
                }
                if only_never_passable(pat) {
                    return Err(self.never_passable(pat, "pass", p.span()));
                }
                out.pass.push((pat.clone(), self.origin(phase, p.span())));
            }
            // BTreeMap order is by name; report in file order.
            let mut set: Vec<_> = env.set.iter().collect();
            set.sort_by_key(|(k, _)| k.span().start);
            for (k, v) in set {
                let name = k.get_ref();
                if let Some(why) = name_error(name) {
                    return Err(self.diag(
                        format!(
                            "invalid variable name {} in env.set: it {why}",
                            toml_string(name)
                        ),
                        k.span(),
                        "variable names are letters, digits and `_`, not starting with a digit",
                    ));
                }
                if only_never_passable(name) {
                    return Err(self.never_passable(name, "set", k.span()));
                }
                if v.get_ref().contains('\0') {
                    return Err(self.diag(
                        format!("the value of `{name}` contains a NUL character"),
                        v.span(),
                        "environment values cannot contain NUL; remove it",
                    ));
                }
                out.set.push((
                    name.clone(),
                    v.get_ref().clone(),
                    self.origin(phase, k.span()),
                ));
            }
        }
        if let Some(l) = limits {
            if let Some(m) = l.memory {
                let bytes = match m.get_ref() {
                    Size::Bytes(n) => u64::try_from(*n).unwrap_or(0),
                    Size::Text(t) => parse_size(t).map_err(|why| {
                        self.diag(
                            format!("invalid memory size {}: it {why}", toml_string(t)),
                            m.span(),
                            "write bytes, or a number with K, M, G or T (1024-based), e.g. memory = \"4G\"",
                        )
                    })?,
                };
                if bytes < MIN_MEMORY {
                    return Err(self.out_of_range(
                        "memory",
                        m.span(),
                        "must be at least 1M (1048576 bytes); leave `memory` out for no limit",
                    ));
                }
                out.memory = Some((bytes, self.origin(phase, m.span())));
            }
            if let Some(p) = l.pids {
                out.pids = Some((
                    self.int_limit("pids", &p, MAX_PIDS)?,
                    self.origin(phase, p.span()),
                ));
            }
            if let Some(n) = l.nofile {
                out.nofile = Some((
                    self.int_limit("nofile", &n, MAX_NOFILE)?,
                    self.origin(phase, n.span()),
                ));
            }
            if let Some(c) = l.cpu {
                let v = *c.get_ref();
                if !(MIN_CPU..=MAX_CPU).contains(&v) {
                    return Err(self.out_of_range(
                        "cpu",
                        c.span(),
                        &format!("must be a number of cores from {MIN_CPU} to {MAX_CPU}, e.g. cpu = 1.5; leave `cpu` out for no limit"),
                    ));
                }
                out.cpu = Some((v, self.origin(phase, c.span())));
            }
        }
        Ok(())
    }

    fn syscalls(
        &self,
        phase: u8,
        sys: SyscallsSection,
        out: &mut Sections,
    ) -> Result<(), PolicyError> {
        for a in &sys.allow {
            let name = a.get_ref();
            self.syscall_name(a, "allow", &mut out.warnings)?;
            if SyscallsPlan::lifted_by(name).is_empty() {
                let (message, help) = match BUILTIN_CONDITIONAL_SYSCALLS
                    .iter()
                    .find(|(n, _)| n == name)
                {
                    Some((_, why)) => (
                        format!("syscall `{name}` is not denied by default as a whole"),
                        format!("the built-in filter denies it {why}"),
                    ),
                    None => (
                        format!(
                            "syscall `{name}` is not denied by default, so there is nothing to allow"
                        ),
                        format!(
                            "`allow` only lifts built-in denials; denied by default: {}",
                            backticked(BUILTIN_DENIED_SYSCALLS)
                        ),
                    ),
                };
                return Err(self.diag(message, a.span(), help));
            }
            if !out.sys_allow.iter().any(|(n, _)| n == name) {
                out.sys_allow
                    .push((name.clone(), self.origin(phase, a.span())));
            }
        }
        for d in &sys.deny {
            let name = d.get_ref();
            self.syscall_name(d, "deny", &mut out.warnings)?;
            if name == "execve" || name == "execveat" {
                return Err(self.diag(
                    format!("denying `{name}` would stop every program from starting"),
                    d.span(),
                    "to control which programs run, use [exec] rules, e.g. deny = [\"curl *\"]",
                ));
            }
            if !out.sys_deny.iter().any(|(n, _)| n == name) {
                out.sys_deny
                    .push((name.clone(), self.origin(phase, d.span())));
            }
        }
        if let Some(n) = sys.nested_userns {
            out.nested_userns = Some((*n.get_ref(), self.origin(phase, n.span())));
        }
        Ok(())
    }

    /// Checks a syscall name against the tables: unknown is an error (with a suggestion from
    /// the running architecture's table); a name of the other architecture only is a warning.
    fn syscall_name(
        &self,
        s: &Spanned<String>,
        key: &str,
        warnings: &mut Vec<String>,
    ) -> Result<(), PolicyError> {
        let name = s.get_ref().as_str();
        if syscall_table::nr(name).is_some() {
            return Ok(());
        }
        let line = self.origin(0, s.span()).label;
        let arch = syscall_table::NATIVE_ARCH;
        if syscall_table::foreign().iter().any(|(n, _)| *n == name)
            || BUILTIN_DENIED_SYSCALLS.contains(&name)
        {
            warnings.push(format!(
                "{line}: syscall `{name}` (syscalls.{key}) does not exist on {arch}; the rule has no effect here"
            ));
            return Ok(());
        }
        let bare = name
            .trim()
            .trim_start_matches("SYS_")
            .trim_start_matches("__NR_")
            .to_ascii_lowercase();
        let names: Vec<&str> = syscall_table::native().iter().map(|(n, _)| *n).collect();
        let mut help = format!(
            "syscall names are as in `man 2 syscalls`, without prefixes (the {arch} table has {} names)",
            names.len()
        );
        if bare != name && syscall_table::nr(&bare).is_some() {
            help.push_str(&format!("; did you mean `{bare}`?"));
        } else if let Some(sug) = did_you_mean(&bare, &names) {
            help.push_str(&format!("; did you mean `{sug}`?"));
        }
        Err(self.diag(
            format!("unknown syscall {} in syscalls.{key}", toml_string(name)),
            s.span(),
            help,
        ))
    }

    fn exec(&self, phase: u8, exec: ExecSection, out: &mut Sections) -> Result<(), PolicyError> {
        for r in &exec.rule {
            let r = r.get_ref();
            let action = match r.action.get_ref().as_str() {
                "allow" => ExecAction::Allow,
                "deny" => ExecAction::Deny,
                "ask" => ExecAction::Ask,
                other => {
                    let mut help = "expected \"allow\", \"deny\" or \"ask\"".to_string();
                    if let Some(s) =
                        did_you_mean(&other.to_ascii_lowercase(), &["allow", "deny", "ask"])
                    {
                        help.push_str(&format!("; did you mean \"{s}\"?"));
                    }
                    return Err(self.diag(
                        format!("invalid exec rule action {}", toml_string(other)),
                        r.action.span(),
                        help,
                    ));
                }
            };
            self.exec_pattern(phase, &r.pattern, "rule", action, out)?;
        }
        for (list, key, action) in [
            (&exec.deny, "deny", ExecAction::Deny),
            (&exec.ask, "ask", ExecAction::Ask),
            (&exec.allow, "allow", ExecAction::Allow),
        ] {
            for p in list {
                self.exec_pattern(phase, p, key, action, out)?;
            }
        }
        if let Some(t) = exec.ask_timeout {
            let v = *t.get_ref();
            if !(1..=MAX_ASK_TIMEOUT).contains(&v) {
                return Err(self.out_of_range(
                    "ask_timeout",
                    t.span(),
                    &format!("must be from 1 to {MAX_ASK_TIMEOUT} seconds, e.g. ask_timeout = 60"),
                ));
            }
            out.ask_timeout = Some((v.unsigned_abs(), self.origin(phase, t.span())));
        }
        Ok(())
    }

    fn exec_pattern(
        &self,
        phase: u8,
        p: &Spanned<String>,
        key: &str,
        action: ExecAction,
        out: &mut Sections,
    ) -> Result<(), PolicyError> {
        let pat = p.get_ref();
        const HELP: &str = "a pattern is a command line `PROGRAM ARGS…` where `*` matches any run of characters and `?` one, e.g. \"git push *\"";
        let why = if pat.trim().is_empty() {
            Some("empty exec pattern".to_string())
        } else if pat.contains('\0') {
            Some(format!(
                "exec pattern {} contains a NUL character",
                toml_string(pat)
            ))
        } else if pat.trim() != pat {
            Some(format!(
                "exec pattern {} starts or ends with whitespace, so it would never match",
                toml_string(pat)
            ))
        } else {
            None
        };
        if let Some(message) = why {
            let where_ = if key == "rule" {
                "[[exec.rule]]".to_string()
            } else {
                format!("exec.{key}")
            };
            return Err(self.diag(format!("{message} in {where_}"), p.span(), HELP));
        }
        if !out
            .exec_rules
            .iter()
            .any(|(x, a, _)| x == pat && *a == action)
        {
            out.exec_rules
                .push((pat.clone(), action, self.origin(phase, p.span())));
        }
        Ok(())
    }

    fn int_limit(&self, key: &str, v: &Spanned<i64>, max: i64) -> Result<u64, PolicyError> {
        let n = *v.get_ref();
        if !(1..=max).contains(&n) {
            return Err(self.out_of_range(
                key,
                v.span(),
                &format!("must be from 1 to {max}; leave `{key}` out for no limit"),
            ));
        }
        Ok(n.unsigned_abs())
    }

    fn out_of_range(&self, key: &str, span: Range<usize>, help: &str) -> PolicyError {
        let written = self.src.get(span.clone()).unwrap_or("").to_string();
        self.diag(
            format!("`{key}` is out of range: {written}"),
            span,
            format!("`{key}` {help}"),
        )
    }

    fn never_passable(&self, name: &str, list: &str, span: Range<usize>) -> PolicyError {
        self.diag(
            format!("env.{list} names `{name}`, which is never passed to the sandbox"),
            span,
            "LD_*, BASH_ENV, ENV and GCONV_PATH change how programs start: these are always dropped; remove the entry",
        )
    }

    fn paths(
        &self,
        phase: u8,
        raws: &[Spanned<String>],
        key: &str,
        both_homes: bool,
    ) -> Result<Vec<Rule>, PolicyError> {
        let mut out = Vec::new();
        for raw in raws {
            let mut homes = vec![self.ctx.home];
            if both_homes && uses_home(raw.get_ref()) {
                homes.extend(self.ctx.passwd_home.filter(|h| *h != self.ctx.home));
            }
            for home in homes {
                let vars = Vars {
                    home,
                    project: self.ctx.project,
                };
                let path =
                    expand(raw.get_ref(), &vars).map_err(|e| self.expand_error(raw, key, e))?;
                if !out.iter().any(|r: &Rule| r.path == path) {
                    out.push(Rule {
                        path,
                        origin: self.origin(phase, raw.span()),
                    });
                }
            }
        }
        Ok(out)
    }

    fn expand_error(&self, raw: &Spanned<String>, key: &str, e: ExpandError) -> PolicyError {
        let shown = toml_string(raw.get_ref());
        const ABSOLUTE: &str = "paths must be absolute or start with ~, $HOME or ${PROJECT}";
        match e {
            ExpandError::UnknownVariable { name, at } => self.diag(
                format!("unknown variable `{name}` in {key} path {shown}"),
                self.inner_span(raw, at),
                "only $HOME (or ${HOME}, ~) and ${PROJECT} expand in paths; write the value out",
            ),
            ExpandError::BadDollar { at } => self.diag(
                format!("stray `$` in {key} path {shown}"),
                self.inner_span(raw, at),
                "only $HOME, ${HOME} and ${PROJECT} expand; a path cannot contain a literal `$`",
            ),
            ExpandError::TildeUser => self.diag(
                format!("`~user` is not supported in {key} path {shown}"),
                raw.span(),
                format!("write the other user's home in full; {ABSOLUTE}"),
            ),
            ExpandError::Relative => self.diag(
                format!("relative path {shown} in {key}"),
                raw.span(),
                format!(
                    "{ABSOLUTE}, e.g. \"${{PROJECT}}/{}\"",
                    raw.get_ref().trim_start_matches("./")
                ),
            ),
            ExpandError::Empty => self.diag(
                format!("empty path in {key}"),
                raw.span(),
                format!("remove it; {ABSOLUTE}"),
            ),
            ExpandError::Nul => self.diag(
                format!("{key} path {shown} contains a NUL character"),
                raw.span(),
                "paths cannot contain NUL; remove it",
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4G"), Ok(4 << 30));
        assert_eq!(parse_size("4g"), Ok(4 << 30));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("1K"), Ok(1024));
        assert_eq!(parse_size("2T"), Ok(2 << 40));
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert_eq!(parse_size(" 1G "), Ok(1 << 30));
        assert!(parse_size("4 gigs").is_err());
        assert!(parse_size("G").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("-1G").is_err());
        assert!(parse_size("1.5G").is_err());
        assert!(parse_size("99999999999999999999").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    fn ctx() -> (PathBuf, PathBuf, PathBuf) {
        ("/home/u".into(), "/home/v".into(), "/work/p".into())
    }

    #[test]
    fn deny_under_home_uses_both_homes_other_lists_do_not() {
        let (h, ph, p) = ctx();
        let c = Context {
            home: &h,
            passwd_home: Some(&ph),
            project: &p,
        };
        let src = "[filesystem]\ndeny = [\"~/.ssh\", \"/etc/x\"]\nwritable = [\"~/.cache\"]\n";
        let l = parse_layer(src, Some(Path::new("/f.toml")), 1, &c).unwrap();
        let deny: Vec<_> = l.base.deny.iter().map(|r| r.path.clone()).collect();
        assert_eq!(
            deny,
            [
                PathBuf::from("/home/u/.ssh"),
                "/home/v/.ssh".into(),
                "/etc/x".into()
            ]
        );
        assert_eq!(l.base.deny[1].origin.label, "/f.toml:2");
        assert_eq!(l.base.writable.len(), 1);
        assert_eq!(l.base.writable[0].origin.label, "/f.toml:3");
    }

    #[test]
    fn same_home_is_not_doubled() {
        let (h, _, p) = ctx();
        let c = Context {
            home: &h,
            passwd_home: Some(&h),
            project: &p,
        };
        let l = parse_layer("[filesystem]\ndeny = [\"~/.ssh\"]", None, 0, &c).unwrap();
        assert_eq!(l.base.deny.len(), 1);
        assert_eq!(l.base.deny[0].origin.label, "built-in");
    }

    #[test]
    fn variable_caret_points_at_the_variable() {
        let (h, _, p) = ctx();
        let c = Context {
            home: &h,
            passwd_home: None,
            project: &p,
        };
        let src = "[filesystem]\nreadable = [\"/a/${FOO}/b\"]\n";
        let err = parse_layer(src, Some(Path::new("/f")), 1, &c).unwrap_err();
        let loc = err.diagnostic().unwrap().location.clone().unwrap();
        assert_eq!((loc.line, loc.column, loc.width), (2, 17, 6));
    }

    #[test]
    fn escaped_string_falls_back_to_the_whole_literal() {
        let (h, _, p) = ctx();
        let c = Context {
            home: &h,
            passwd_home: None,
            project: &p,
        };
        let src = "[filesystem]\nreadable = [\"/a\\u0041/${FOO}\"]\n";
        let err = parse_layer(src, Some(Path::new("/f")), 1, &c).unwrap_err();
        let loc = err.diagnostic().unwrap().location.clone().unwrap();
        assert_eq!((loc.line, loc.column), (2, 13));
        assert!(err.to_string().contains("unknown variable `FOO`"));
    }

    fn layer(src: &str) -> Result<Layer, PolicyError> {
        let (h, _, p) = ctx();
        let c = Context {
            home: &h,
            passwd_home: None,
            project: &p,
        };
        parse_layer(src, Some(Path::new("/f")), 1, &c)
    }

    #[test]
    fn exec_rules_in_file_order_then_deny_ask_allow() {
        let src = "[exec]\nallow = [\"a *\"]\nask = [\"b *\"]\ndeny = [\"c *\", \"c *\"]\nask_timeout = 9\n\
                   [[exec.rule]]\npattern = \"r1\"\naction = \"allow\"\n\
                   [[exec.rule]]\naction = \"deny\"\npattern = \"*\"\n";
        let l = layer(src).unwrap();
        let got: Vec<(&str, ExecAction, &str)> = l
            .base
            .exec_rules
            .iter()
            .map(|(p, a, o)| (p.as_str(), *a, o.label.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("r1", ExecAction::Allow, "/f:7"),
                ("*", ExecAction::Deny, "/f:11"),
                ("c *", ExecAction::Deny, "/f:4"),
                ("b *", ExecAction::Ask, "/f:3"),
                ("a *", ExecAction::Allow, "/f:2"),
            ]
        );
        assert_eq!(l.base.ask_timeout.as_ref().map(|t| t.0), Some(9));
    }

    #[test]
    fn syscall_names() {
        let l = layer("[syscalls]\nallow = [\"ptrace\", \"ptrace\"]\ndeny = [\"chroot\"]\nnested_userns = true\n")
            .unwrap();
        assert_eq!(l.base.sys_allow.len(), 1);
        assert_eq!(l.base.sys_deny[0].0, "chroot");
        assert_eq!(l.base.sys_deny[0].1.label, "/f:3");
        assert_eq!(l.base.nested_userns.as_ref().map(|n| n.0), Some(true));
        assert!(l.base.warnings.is_empty());

        // A name of the other architecture only (aarch64's are a subset of x86_64's), or a
        // built-in denial newer than the tables: a warning, not an error.
        let other = if cfg!(target_arch = "aarch64") {
            "open"
        } else {
            "open_tree_attr"
        };
        let l = layer(&format!("[syscalls]\ndeny = [\"{other}\"]\n")).unwrap();
        let w = &l.base.warnings;
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with(&format!(
                "/f:2: syscall `{other}` (syscalls.deny) does not exist on"
            )),
            "{w:?}"
        );
        assert_eq!(l.base.sys_deny[0].0, other);
        // iopl is x86-only and denied by default: allowing it is valid on both.
        let l = layer("[syscalls]\nallow = [\"iopl\"]\n").unwrap();
        assert_eq!(l.base.sys_allow[0].0, "iopl");

        for (src, msg) in [
            (
                "[syscalls]\ndeny = [\"SYS_chroot\"]\n",
                "did you mean `chroot`?",
            ),
            ("[syscalls]\ndeny = [\"\"]\n", "unknown syscall \"\""),
            ("[syscalls]\ndeny = [\"execve\"]\n", "use [exec] rules"),
            (
                "[syscalls]\nallow = [\"unshare\"]\n",
                "nested_userns = true",
            ),
            ("[syscalls]\nallow = [\"ioctl\"]\n", "TIOCSTI"),
            (
                "[syscalls]\nallow = [\"read\"]\n",
                "denied by default: `kexec_load`",
            ),
            ("[syscalls]\nnested_userns = \"yes\"\n", "must be a boolean"),
            (
                "[exec]\ndeny = [\"  \"]\n",
                "empty exec pattern in exec.deny",
            ),
            (
                "[exec]\nask = [\" git\"]\n",
                "starts or ends with whitespace",
            ),
            ("[exec]\nask_timeout = 0\n", "from 1 to 3600 seconds"),
            (
                "[exec]\nask_timeout = 3601\n",
                "`ask_timeout` is out of range",
            ),
            (
                "[[exec.rule]]\npattern = \"x\"\n",
                "[[exec.rule]] has no `action`",
            ),
            (
                "[[exec.rule]]\naction = \"ask\"\n",
                "[[exec.rule]] has no `pattern`",
            ),
            (
                "[[exec.rule]]\npattern = \"x\"\naction = \"Deny\"\n",
                "did you mean \"deny\"?",
            ),
            (
                "[[exec.rule]]\npattern = \"x\"\naction = \"ask\"\nwhy = 1\n",
                "unknown key `why` in [[exec.rule]]",
            ),
            (
                "[profile.p.exec]\nrule = [1]\n",
                "elements of `rule` in [profile.p.exec] must be tables",
            ),
            (
                "[profile.p.exec]\nrule = [{ pattern = \"x\", action = 1 }]\n",
                "`action` in [[profile.p.exec.rule]] must be a string",
            ),
            ("[exec]\nrule = \"x\"\n", "must be an array of tables"),
        ] {
            let e = layer(src).unwrap_err().to_string();
            assert!(e.contains(msg), "{src:?}: {e}");
            assert!(e.contains("help:"), "{src:?}: {e}");
        }
    }

    #[test]
    fn state_section() {
        let l = layer(
            "[state]\nprotect = [\"~/.claude\", \"${PROJECT}/../notes\", \"~/.claude\"]\n\
             on_exit = \"discard\"\nproject_files = \"staged\"\n\
             [profile.x.state]\nprotect = [\"$HOME/.x\"]\non_exit = \"keep\"\n",
        )
        .unwrap();
        let paths: Vec<_> = l.base.protect.iter().map(|r| r.path.clone()).collect();
        assert_eq!(
            paths,
            [PathBuf::from("/home/u/.claude"), "/work/notes".into()]
        );
        assert_eq!(l.base.protect[1].origin.label, "/f:2");
        let (v, o) = l.base.on_exit.as_ref().unwrap();
        assert_eq!((*v, o.label.as_str()), (OnExit::Discard, "/f:3"));
        assert_eq!(
            l.base.project_files.as_ref().map(|p| p.0),
            Some(ProjectFiles::Staged)
        );
        let x = &l.profiles["x"];
        assert_eq!(x.protect[0].path, Path::new("/home/u/.x"));
        assert_eq!(x.on_exit.as_ref().map(|v| v.0), Some(OnExit::Keep));
        assert!(x.project_files.is_none());

        for (src, msg) in [
            (
                "[state]\non_exit = \"never\"\n",
                "invalid value \"never\" for `on_exit`",
            ),
            ("[state]\non_exit = \"Keep\"\n", "did you mean \"keep\"?"),
            (
                "[state]\non_exit = \"pendng\"\n",
                "did you mean \"pending\"?",
            ),
            (
                "[state]\nproject_files = \"read-only\"\n",
                "did you mean \"readonly\"?",
            ),
            (
                "[state]\nproject_files = \"x\"\n",
                "expected \"readonly\" or \"staged\"",
            ),
            (
                "[state]\non_exit = true\n",
                "expected \"ask\", \"keep\", \"discard\" or \"pending\"",
            ),
            ("[state]\nprotect = \"~/.x\"\n", "write it as an array"),
            (
                "[state]\nprotect = [\"x\"]\n",
                "relative path \"x\" in protect",
            ),
            (
                "[state]\nprotect = [\"${X}/y\"]\n",
                "unknown variable `X` in protect path",
            ),
            ("[state]\nprotected = [\"/x\"]\n", "did you mean `protect`?"),
            (
                "[profile.p.state]\non_exit = 1\n",
                "`on_exit` in [profile.p.state] must be a string",
            ),
            ("[stat]\n", "did you mean `state`?"),
            ("[profile.p.stat]\n", "did you mean `state`?"),
        ] {
            let e = layer(src).unwrap_err().to_string();
            assert!(e.contains(msg), "{src:?}: {e}");
            assert!(e.contains("help:"), "{src:?}: {e}");
        }
    }

    #[test]
    fn profiles_are_parsed() {
        let (h, _, p) = ctx();
        let c = Context {
            home: &h,
            passwd_home: None,
            project: &p,
        };
        let src = "[profile.x.env]\npass = [\"A\"]\n[profile.x.limits]\npids = 5\n";
        let l = parse_layer(src, None, 0, &c).unwrap();
        let x = &l.profiles["x"];
        assert_eq!(x.pass[0].0, "A");
        assert_eq!(x.pids.as_ref().unwrap().0, 5);
        assert_eq!(x.pids.as_ref().unwrap().1.order.0, 1);
    }
}
