//! The policy sections, one module each. A module is the one place its keys are named: it
//! declares how the section is written ([`raw_table!`](crate::raw_table)), checks and expands
//! one file's values with their origins ([`Section::convert`]), merges layers
//! ([`Section::merge`]), says what an untrusted file loosens ([`Section::loosen`]), builds its
//! part of the [`Plan`] ([`Section::plan`]) and renders that part back ([`Section::render`]).
//! The list below wires every section into all of these at once, so a section cannot be
//! added without being parsed, checked, merged, loosened, planned and rendered.

use std::collections::{BTreeMap, HashSet};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use serde_spanned::Spanned;

use crate::error::{Diagnostic, PolicyError};
use crate::expand::{ExpandError, Vars, expand, uses_home};
use crate::expiry::Expiry;
use crate::file::ParsedFile;
use crate::load::Loosening;
use crate::pattern::{Bare, HostPattern};
use crate::schema::{Root, Shape, toml_string};

pub mod agent;
pub mod audit;
pub mod credentials;
pub mod dlp;
pub mod dns;
pub mod env;
pub mod exec;
pub mod filesystem;
pub mod http;
pub mod judge;
pub mod limits;
pub mod mcp;
pub mod network;
pub mod publish;
pub mod sandbox;
pub mod ssh;
pub mod state;
pub mod syscalls;
pub mod tls;

/// One section of the policy schema.
pub(crate) trait Section: Default + Clone + std::fmt::Debug {
    /// How it is written, as serde fills it.
    type Raw: Default + for<'de> Deserialize<'de> + std::fmt::Debug;
    /// Its part of the [`Plan`].
    type Plan;
    /// `[name]`, `[[name]]` or `[name.NAME]`.
    const SHAPE: Shape;
    /// Whether a `[profile.NAME]` may have it.
    const IN_PROFILE: bool = true;
    /// One file's values, checked and expanded, with their origins.
    fn convert(raw: Self::Raw, cx: &mut Convert<'_>) -> Result<Self, PolicyError>;
    /// Applies a later layer on top.
    fn merge(&mut self, later: &Self);
    /// What `full` allows that `base` (the trusted layers alone) does not.
    fn loosen(full: &Sections, base: &Sections, out: &mut Loosen<'_>);
    /// Its part of the plan, defaults filled in.
    fn plan(self) -> Self::Plan;
    /// Its part of `cordon check`'s output, in the file schema.
    fn render(plan: &Self::Plan, out: &mut Render);
    /// After the merge: what gives way to other sections' rules (a built-in entry a user's
    /// deny covers), with a note for each.
    fn settle(_merged: &mut Sections, _project: &Path, _notes: &mut Vec<String>) {}
    /// After the merge: contradictions no single file shows (deny wins, so a rule it overrides
    /// cannot be what the user meant).
    fn check(_merged: &Sections, _files: &[ParsedFile]) -> Result<(), PolicyError> {
        Ok(())
    }
}

macro_rules! sections {
    ($($(#[doc = $doc:literal])* $name:ident: $module:ident::$ty:ident => $plan:ty,)*) => {
        /// One file's (or one profile's) sections as written.
        #[derive(Debug, Default, Deserialize)]
        #[serde(default, deny_unknown_fields)]
        pub(crate) struct RawSections {
            $(pub $name: <$module::$ty as Section>::Raw,)*
        }

        /// A whole policy file as written.
        #[derive(Debug, Default, Deserialize)]
        #[serde(default, deny_unknown_fields)]
        pub(crate) struct RawFile {
            $(pub $name: <$module::$ty as Section>::Raw,)*
            pub profile: BTreeMap<Spanned<String>, RawSections>,
        }

        impl RawFile {
            /// The base sections, and the profiles.
            pub(crate) fn split(self) -> (RawSections, BTreeMap<Spanned<String>, RawSections>) {
                (RawSections { $($name: self.$name,)* }, self.profile)
            }
        }

        /// The sections of one layer (or the merge of several), checked, with origins.
        #[derive(Debug, Default, Clone)]
        pub(crate) struct Sections {
            $(pub $name: $module::$ty,)*
            /// Problems worth a warning that do not stop the run.
            pub warnings: Vec<String>,
        }

        /// The top level of a policy file.
        /// What each section of [`ROOT`] is for, from its doc comment, in the same order.
        pub(crate) const SECTION_DOCS: &[&[&str]] = &[$(&[$($doc),*]),*];

        pub(crate) const ROOT: Root = Root {
            sections: &[$((
                stringify!($name),
                <$module::$ty as Section>::SHAPE,
                <$module::$ty as Section>::IN_PROFILE,
            )),*],
        };

        impl Sections {
            pub(crate) fn convert(
                raw: RawSections,
                cx: &mut Convert<'_>,
            ) -> Result<Self, PolicyError> {
                Ok(Sections {
                    $($name: <$module::$ty as Section>::convert(raw.$name, cx)?,)*
                    warnings: std::mem::take(&mut cx.warnings),
                })
            }

            pub(crate) fn merge(&mut self, later: &Self) {
                $(self.$name.merge(&later.$name);)*
            }

            pub(crate) fn settle(&mut self, project: &Path, notes: &mut Vec<String>) {
                $(<$module::$ty as Section>::settle(self, project, notes);)*
            }

            pub(crate) fn check(&self, files: &[ParsedFile]) -> Result<(), PolicyError> {
                $(<$module::$ty as Section>::check(self, files)?;)*
                Ok(())
            }

            pub(crate) fn loosenings(full: &Self, base: &Self, out: &mut Loosen<'_>) {
                $(<$module::$ty as Section>::loosen(full, base, out);)*
            }

            pub(crate) fn into_plan(self, project: PathBuf, home: PathBuf) -> Plan {
                Plan {
                    project,
                    home,
                    learning: false,
                    $($name: <$module::$ty as Section>::plan(self.$name),)*
                }
            }
        }

        /// Everything one `cordon run` enforces: one part per policy section, after merging
        /// and expansion. It holds no `~`, no variables and no relative paths, and every rule
        /// that is enforced, built-in or derived from host paths, is in it — so `cordon check`
        /// prints exactly what runs. Tests build Plans directly.
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        pub struct Plan {
            /// The project directory, absolute and canonical; writable inside the sandbox.
            pub project: PathBuf,
            /// The invoking user's home directory (`$HOME`, else the passwd entry).
            pub home: PathBuf,
            /// A learning run (`cordon run --learn`), set by the command line, never by a
            /// policy file: what a learnable rule would deny is let through and recorded as
            /// such; the walls that protect secrets and the host stay up.
            #[serde(default, skip_serializing_if = "std::ops::Not::not")]
            pub learning: bool,
            $($(#[doc = $doc])* #[serde(default)] pub $name: $plan,)*
        }

        impl Plan {
            /// Every section rendered in the file schema.
            pub(crate) fn render_sections(&self, out: &mut Render) {
                $(<$module::$ty as Section>::render(&self.$name, out);)*
            }
        }
    };
}

sections! {
    /// What the sandbox sees of the host's files: what is readable, writable, masked, and how
    /// much of the home is shown.
    filesystem: filesystem::Filesystem => filesystem::FilesystemPlan,
    /// Which host environment variables the sandboxed command sees, and fixed ones.
    env: env::Env => env::EnvPlan,
    /// Resource limits for the whole sandbox; none is set unless written.
    limits: limits::Limits => limits::LimitsPlan,
    /// What the agent runs in: the namespace sandbox alone, or inside a microVM.
    sandbox: sandbox::Sandbox => sandbox::SandboxPlan,
    /// The syscall filter: built-in denials lifted or extended by name.
    syscalls: syscalls::Syscalls => syscalls::SyscallsPlan,
    /// Rules for the commands the sandbox runs: allowed, denied or asked about, by pattern.
    exec: exec::Exec => exec::ExecPlan,
    /// What the agent may change only through review at exit, and how the home is written.
    state: state::State => state::StatePlan,
    /// How the sandbox reaches the network, and which hosts and ports it may connect to.
    network: network::Network => network::NetworkPlan,
    /// The sandbox's resolver: blocked names, fixed answers, the upstream.
    dns: dns::Dns => dns::DnsPlan,
    /// Sandbox ports published on the host's loopback: a way in.
    publish: publish::PublishList => Vec<publish::Publish>,
    /// Rules for HTTP(S) requests, by host, method, path, query and headers.
    http: http::Http => http::HttpPlan,
    /// Rules for the tools an agent calls on MCP servers (over HTTP, or local ones it starts),
    /// and pinning of each tool's description against a changed one.
    mcp: mcp::Mcp => mcp::McpPlan,
    /// Hosts exempt from HTTPS inspection, and extra CAs for upstream servers.
    tls: tls::Tls => tls::TlsPlan,
    /// The LLM judge asked about requests a rule sends to it; none unless configured.
    judge: judge::Judge => Option<judge::JudgePlan>,
    /// Outbound secret scanning of requests.
    dlp: dlp::Dlp => dlp::DlpPlan,
    /// Credentials the sandbox holds only as placeholders, the real value added at the wire
    /// for the hosts named.
    credentials: credentials::Credentials => Vec<credentials::CredentialPlan>,
    /// The agent a profile is for: what selects it, and what it phones that is denied quietly.
    agent: agent::Agent => agent::AgentPlan,
    /// SSH from inside: the filtering agent, and the files of `~/.ssh` shown.
    ssh: ssh::Ssh => ssh::SshPlan,
    /// Where the session's audit log is copied as it is written: the journal, syslog, an
    /// OpenTelemetry logs endpoint. Its own file stays the record.
    audit: audit::Audit => audit::AuditPlan,
}

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

impl Origin {
    /// The project directory's own rule.
    pub(crate) fn project() -> Self {
        Origin {
            layer: 0,
            label: "project".into(),
            line: 0,
            span: None,
            order: (0, 0, 0),
        }
    }
}

/// A path as one file wrote it, with its origin (the plan's form is [`PathRule`]).
#[derive(Debug, Clone)]
pub(crate) struct PathEntry {
    pub path: PathBuf,
    pub origin: Origin,
}

/// A scalar set in some layer: the last layer that sets it wins.
pub(crate) type Scalar<T> = Option<(T, Origin)>;

/// Overrides `into` with `later` when `later` is set.
pub(crate) fn set_scalar<T: Clone>(into: &mut Scalar<T>, later: &Scalar<T>) {
    if later.is_some() {
        into.clone_from(later);
    }
}

/// The value of a scalar, or its default.
pub(crate) fn value<T: Clone + Default>(s: &Scalar<T>) -> T {
    s.as_ref().map(|(v, _)| v.clone()).unwrap_or_default()
}

/// Appends what `later` adds to `into`; the first origin is kept for duplicates.
pub(crate) fn append_new<T: Clone>(
    into: &mut Vec<(T, Origin)>,
    later: &[(T, Origin)],
    same: impl Fn(&T, &T) -> bool,
) {
    for (v, o) in later {
        if !into.iter().any(|(x, _)| same(x, v)) {
            into.push((v.clone(), o.clone()));
        }
    }
}

/// Appends the paths `later` adds to `into`.
pub(crate) fn append_rules(into: &mut Vec<PathEntry>, later: &[PathEntry]) {
    // A set, not a scan of `into` per rule: the built-in lists are long and `Path` equality
    // walks components. `Path`'s hash agrees with that equality (`a//b` is `a/b`).
    let mut seen: HashSet<PathBuf> = into.iter().map(|x| x.path.clone()).collect();
    for r in later {
        if seen.insert(r.path.clone()) {
            into.push(r.clone());
        }
    }
}

/// Whether `path` is equal to or below one of `rules`.
pub(crate) fn covered(path: &Path, rules: &[&PathEntry]) -> bool {
    rules.iter().any(|r| path.starts_with(&r.path))
}

/// A path rule for the plan, with where it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathRule {
    /// Absolute, lexically normalised path.
    pub path: PathBuf,
    /// Where it came from: `built-in`, `FILE:LINE`, or what cordon derived it from.
    pub origin: cordon_events::Origin,
}

impl PathRule {
    /// A rule for `path` from `origin` (text is read with [`cordon_events::Origin::parse`]:
    /// a description such as `the host's ssh agent` stays whole).
    pub fn new(path: impl Into<PathBuf>, origin: impl Into<cordon_events::Origin>) -> Self {
        Self {
            path: path.into(),
            origin: origin.into(),
        }
    }
}

/// The plan's form of path rules.
pub(crate) fn path_rules(v: Vec<PathEntry>) -> Vec<PathRule> {
    v.into_iter()
        .map(|r| PathRule::new(r.path, r.origin.label))
        .collect()
}

/// What expansion needs to know.
#[derive(Debug, Clone)]
pub(crate) struct Context<'a> {
    pub home: &'a Path,
    pub passwd_home: Option<&'a Path>,
    pub project: &'a Path,
}

/// Converting one file's sections: where values are, and the helpers every section uses to
/// check them with located errors.
pub(crate) struct Convert<'a> {
    pub src: &'a str,
    pub file: Option<&'a Path>,
    pub layer: usize,
    pub ctx: &'a Context<'a>,
    /// 0 for the base sections, 1 for a profile.
    pub phase: u8,
    pub warnings: Vec<String>,
    /// Byte offsets of every `\n` in `src`, ascending ([`newlines`]): an origin's line is a
    /// binary search, not a count from the start of the file for every rule (that count was
    /// two thirds of loading the built-in policy).
    pub newlines: Vec<usize>,
    /// When the file was last written: what a rule's `for` counts from (`None`: not known,
    /// and `for` is refused).
    pub written: Option<SystemTime>,
}

/// The byte offsets of the line breaks in `src`, for [`Convert::newlines`].
pub(crate) fn newlines(src: &str) -> Vec<usize> {
    // Searched, not scanned byte by byte: the built-in policy is ~26 KB read at every start.
    src.match_indices('\n').map(|(i, _)| i).collect()
}

impl Convert<'_> {
    pub(crate) fn origin(&self, span: Range<usize>) -> Origin {
        let start = span.start.min(self.src.len());
        let line = self.newlines.partition_point(|&o| o < start) + 1;
        let label = match self.file {
            Some(f) => format!("{}:{line}", f.display()),
            None => "built-in".to_string(),
        };
        Origin {
            layer: self.layer,
            label,
            line,
            order: (self.phase, self.layer, span.start),
            span: Some(span),
        }
    }

    pub(crate) fn diag(
        &self,
        message: String,
        span: Range<usize>,
        help: impl Into<String>,
    ) -> PolicyError {
        Diagnostic::new(message)
            .in_file(self.file)
            .at(self.src, span)
            .with_help(help)
            .into()
    }

    /// A diagnostic for a table as a whole, when no value can be pointed at.
    pub(crate) fn missing(&self, message: String, help: impl Into<String>) -> PolicyError {
        Diagnostic::new(message)
            .in_file(self.file)
            .with_help(help)
            .into()
    }

    /// A key the schema marks required (the checker has located a missing one already).
    pub(crate) fn required<'v, T>(
        &self,
        v: &'v Option<Spanned<T>>,
        key: &str,
        table: &str,
    ) -> Result<&'v Spanned<T>, PolicyError> {
        v.as_ref().ok_or_else(|| {
            self.missing(
                format!("{table} has no `{key}`"),
                format!("add `{key}` to {table}"),
            )
        })
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

    pub(crate) fn out_of_range(&self, key: &str, span: Range<usize>, help: &str) -> PolicyError {
        let written = self.src.get(span.clone()).unwrap_or("").to_string();
        self.diag(
            format!("`{key}` is out of range: {written}"),
            span,
            format!("`{key}` {help}"),
        )
    }

    pub(crate) fn port(&self, v: &Spanned<i64>, key: &str) -> Result<u16, PolicyError> {
        match u16::try_from(*v.get_ref()) {
            Ok(p) if p > 0 => Ok(p),
            _ => Err(self.out_of_range(key, v.span(), "a port is from 1 to 65535")),
        }
    }

    /// An integer in `range`, else a located error with `help`.
    pub(crate) fn int_in(
        &self,
        v: &Spanned<i64>,
        key: &str,
        range: std::ops::RangeInclusive<i64>,
        help: &str,
    ) -> Result<u64, PolicyError> {
        if range.contains(v.get_ref()) {
            Ok(v.get_ref().unsigned_abs())
        } else {
            Err(self.out_of_range(key, v.span(), help))
        }
    }

    /// A rule's `programs` and `run_by` (see [`crate::program`]), each name checked.
    pub(crate) fn programs(
        &self,
        programs: &[Spanned<String>],
        run_by: &[Spanned<String>],
    ) -> Result<crate::Programs, PolicyError> {
        let names = |list: &[Spanned<String>], key: &str| -> Result<Vec<String>, PolicyError> {
            list.iter()
                .map(|v| {
                    crate::program::check_name(v.get_ref()).map_err(|why| {
                        self.diag(
                            format!("invalid {key} entry {}: {why}", toml_string(v.get_ref())),
                            v.span(),
                            format!(
                                "name a program (\"git\"), an absolute path (\"/usr/bin/git\") or an npm package (\"@anthropic-ai/claude-code\"), e.g. {key} = [\"git\"]"
                            ),
                        )
                    })?;
                    Ok(v.get_ref().clone())
                })
                .collect()
        };
        Ok(crate::Programs {
            programs: names(programs, "programs")?,
            run_by: names(run_by, "run_by")?,
        })
    }

    /// An HTTP-layer host glob (`[[http.rule]] host`, `[tls] passthrough`, credentials' and
    /// `[[dlp.allow]]` hosts).
    pub(crate) fn host_glob(&self, v: &Spanned<String>) -> Result<HostPattern, PolicyError> {
        HostPattern::glob(v.get_ref()).map_err(|_| {
            self.diag(
                format!("invalid host pattern {}", toml_string(v.get_ref())),
                v.span(),
                "a host or glob without scheme, port or path, e.g. \"api.anthropic.com\" or \"*.npmjs.org\"",
            )
        })
    }

    /// A DNS-strict host name or `*.name` (`[[network.allow]] host`, `[dns] block`).
    pub(crate) fn host_name(
        &self,
        v: &Spanned<String>,
        key: &str,
        bare: Bare,
    ) -> Result<HostPattern, PolicyError> {
        HostPattern::name(v.get_ref(), bare).map_err(|e| {
            self.diag(
                format!(
                    "invalid host {} in `{key}`: {}",
                    toml_string(v.get_ref()),
                    e.why()
                ),
                v.span(),
                "e.g. \"github.com\" or \"*.githubusercontent.com\"",
            )
        })
    }

    /// Expands path entries; with `both_homes`, a path under `~` is added for the passwd home
    /// too when it differs from `$HOME`.
    pub(crate) fn paths(
        &self,
        raws: &[Spanned<String>],
        key: &str,
        both_homes: bool,
    ) -> Result<Vec<PathEntry>, PolicyError> {
        let mut out = Vec::new();
        let mut seen = HashSet::new();
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
                let path = match expand(raw.get_ref(), &vars) {
                    Ok(p) => p,
                    // No runtime directory on this host: a list entry names nothing (a single
                    // file, a credential's source, must exist: an error).
                    Err(ExpandError::Unset) if key != "source.file" => continue,
                    Err(e) => return Err(self.expand_error(raw, key, e)),
                };
                if seen.insert(path.clone()) {
                    out.push(PathEntry {
                        path,
                        origin: self.origin(raw.span()),
                    });
                }
            }
        }
        Ok(out)
    }

    /// `home_show` / `home_tools`: [`Convert::paths`] for both homes, each inside the home (a
    /// path elsewhere is shown or hidden by `readable` and `deny`, not by the home's view).
    pub(crate) fn home_paths(
        &self,
        raws: &[Spanned<String>],
        key: &str,
    ) -> Result<Vec<PathEntry>, PolicyError> {
        let homes = [Some(self.ctx.home), self.ctx.passwd_home];
        let mut out = Vec::new();
        for raw in raws {
            let these = self.paths(std::slice::from_ref(raw), key, true)?;
            let outside = these.iter().any(|e| {
                !homes
                    .iter()
                    .flatten()
                    .any(|h| e.path.starts_with(h) && e.path != *h)
            });
            if outside {
                return Err(self.diag(
                    format!(
                        "{key} path {} is not inside the home",
                        toml_string(raw.get_ref())
                    ),
                    raw.span(),
                    "name a path under ~ (e.g. \"~/.config/nvim\"); paths outside the home are shown by `readable` and hidden by `deny`",
                ));
            }
            out.extend(these);
        }
        Ok(out)
    }

    /// `[filesystem] deny`: [`Convert::paths`] with both homes, minus a built-in entry naming
    /// the runtime directory when that would mask the project or the home ([`Self::hides_the_user`]).
    pub(crate) fn deny_paths(
        &mut self,
        raws: &[Spanned<String>],
    ) -> Result<Vec<PathEntry>, PolicyError> {
        let mut kept = Vec::with_capacity(raws.len());
        for raw in raws {
            match self.hides_the_user(raw.get_ref()) {
                Some(warning) => self.warnings.push(warning),
                None => kept.push(raw.clone()),
            }
        }
        self.paths(&kept, "deny", true)
    }

    /// Why the built-in deny `raw`, naming the runtime directory, is dropped: a runtime
    /// directory that is or holds the project or the home (`/`, or `/tmp` holding the project)
    /// is the host's misconfiguration, and masking it would refuse every run (deny wins over the
    /// project) or hide the home. The sockets there then stay visible, as they are to every
    /// process of the user; a warning says so. A file's own entry is kept, so its contradiction
    /// is an error naming its line.
    fn hides_the_user(&self, raw: &str) -> Option<String> {
        if self.file.is_some() || !raw.contains(crate::expand::RUNTIME_DIR) {
            return None;
        }
        let vars = Vars {
            home: self.ctx.home,
            project: self.ctx.project,
        };
        let path = expand(raw, &vars).ok()?;
        let homes = std::iter::once(self.ctx.home).chain(self.ctx.passwd_home);
        let hidden = std::iter::once(self.ctx.project)
            .chain(homes)
            .find(|p| p.starts_with(&path))?;
        Some(format!(
            "$XDG_RUNTIME_DIR ({}) holds {}, so it is not masked and its sockets are visible inside; point XDG_RUNTIME_DIR at a directory of its own",
            path.display(),
            hidden.display()
        ))
    }

    fn expand_error(&self, raw: &Spanned<String>, key: &str, e: ExpandError) -> PolicyError {
        let shown = toml_string(raw.get_ref());
        const ABSOLUTE: &str = "paths must be absolute or start with ~, $HOME or ${PROJECT}";
        match e {
            ExpandError::UnknownVariable { name, at } => self.diag(
                format!("unknown variable `{name}` in {key} path {shown}"),
                self.inner_span(raw, at),
                "only $HOME (or ${HOME}, ~) and ${PROJECT} expand in paths, besides $XDG_CONFIG_HOME, $XDG_DATA_HOME, $XDG_STATE_HOME, $XDG_CACHE_HOME and $XDG_RUNTIME_DIR; write the value out",
            ),
            ExpandError::BadDollar { at } => self.diag(
                format!("stray `$` in {key} path {shown}"),
                self.inner_span(raw, at),
                "only $HOME, ${HOME}, ${PROJECT} and the XDG base directories ($XDG_CONFIG_HOME, ...) expand; a path cannot contain a literal `$`",
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
            ExpandError::Unset => self.diag(
                format!("{key} path {shown} names $XDG_RUNTIME_DIR, which is not set"),
                raw.span(),
                "set XDG_RUNTIME_DIR to an absolute path, or write the path out",
            ),
            ExpandError::Nul => self.diag(
                format!("{key} path {shown} contains a NUL character"),
                raw.span(),
                "paths cannot contain NUL; remove it",
            ),
        }
    }
}

/// A diagnostic located at `origin`, when it was written in a file.
pub(crate) fn diag_at(message: String, origin: &Origin, layers: &[ParsedFile]) -> Diagnostic {
    let d = Diagnostic::new(message);
    match (&origin.span, layers.get(origin.layer)) {
        (Some(span), Some(l)) if l.file.is_some() => {
            d.in_file(l.file.as_deref()).at(&l.src, span.clone())
        }
        _ => d,
    }
}

pub(crate) fn protects_project(r: &PathEntry, project: &Path, layers: &[ParsedFile]) -> Diagnostic {
    let (rp, pp) = (r.path.display(), project.display());
    let msg = if r.path == project {
        format!("protected path {rp} is the project directory")
    } else {
        format!("protected path {rp} contains the project directory {pp}")
    };
    let help =
        "the project itself cannot be staged (it is always writable); protect narrower paths";
    diag_at(msg, &r.origin, layers).with_help(help)
}

pub(crate) fn contradiction(
    key: &str,
    r: &PathEntry,
    d: &PathEntry,
    layers: &[ParsedFile],
) -> Diagnostic {
    let kind = if key == "protect" { "protected" } else { key };
    let (rp, dp) = (r.path.display(), d.path.display());
    let r_builtin = r.origin.span.is_none() || layers[r.origin.layer].file.is_none();
    let d_builtin = d.origin.span.is_none() || layers[d.origin.layer].file.is_none();
    if r.origin.span.is_none() {
        // The project directory itself.
        let msg = format!(
            "the project directory {rp} is inside denied path {dp} ({})",
            d.origin.label
        );
        let help = if d_builtin {
            format!("run cordon in a project outside {dp}")
        } else {
            "the project directory is always writable; deny a narrower path".to_string()
        };
        return diag_at(msg, &d.origin, layers).with_help(help);
    }
    let blame_rule = !r_builtin && (d_builtin || r.origin.order >= d.origin.order);
    if blame_rule {
        let msg = if r.path == d.path {
            format!("{rp} is both {kind} and denied ({})", d.origin.label)
        } else {
            format!(
                "{kind} path {rp} is inside denied path {dp} ({})",
                d.origin.label
            )
        };
        diag_at(msg, &r.origin, layers).with_help(format!(
            "deny always wins; remove it from `{key}`, or deny narrower paths"
        ))
    } else {
        let msg = format!(
            "denied path {dp} contains {kind} path {rp} ({})",
            r.origin.label
        );
        diag_at(msg, &d.origin, layers).with_help(format!(
            "deny always wins; remove one of the two (the {kind} entry would have no effect)"
        ))
    }
}

/// Collects what untrusted layers loosen, each attributed to the file (and line) that wrote it.
pub(crate) struct Loosen<'a> {
    /// Per layer: its file when it is untrusted.
    pub untrusted: &'a [Option<PathBuf>],
    pub out: Vec<Loosening>,
}

impl Loosen<'_> {
    pub(crate) fn add(&mut self, o: &Origin, what: String) {
        let fallback = || self.untrusted.iter().flatten().next().cloned();
        let file = self
            .untrusted
            .get(o.layer)
            .cloned()
            .flatten()
            .or_else(fallback)
            .unwrap_or_default();
        let what = if o.line > 0 {
            format!("{what} (line {})", o.line)
        } else {
            what
        };
        self.out.push(Loosening { file, what });
    }
}

/// `cordon check`'s output being written.
#[derive(Debug, Default)]
pub(crate) struct Render {
    pub out: String,
    /// The time a rule's end is told against (`# 2 h left`), if any.
    pub now: Option<SystemTime>,
}

impl Render {
    /// One line.
    pub(crate) fn line(&mut self, text: impl AsRef<str>) {
        self.out.push_str(text.as_ref());
        self.out.push('\n');
    }

    /// A `[name]` header after a blank line.
    pub(crate) fn header(&mut self, name: &str) {
        self.line(format!("\n[{name}]"));
    }

    /// An `[[name]]` header after a blank line, with the entry's origin.
    pub(crate) fn entry(&mut self, name: &str, origin: &cordon_events::Origin) {
        self.line(format!("\n[[{name}]] # {}", comment(&origin.to_string())));
    }

    /// `key = "value"`.
    pub(crate) fn string(&mut self, key: &str, value: &str) {
        self.line(format!("{key} = {}", toml_string(value)));
    }

    /// `key = ["a", "b"]` on one line.
    pub(crate) fn strings<S: AsRef<str>>(&mut self, key: &str, values: &[S]) {
        let v: Vec<String> = values.iter().map(|x| toml_string(x.as_ref())).collect();
        self.line(format!("{key} = [{}]", v.join(", ")));
    }

    /// `key = [` one per line with its origin `]`.
    pub(crate) fn with_origins<'x>(
        &mut self,
        key: &str,
        items: impl ExactSizeIterator<Item = (String, &'x cordon_events::Origin)>,
    ) {
        if items.len() == 0 {
            self.line(format!("{key} = []"));
            return;
        }
        self.line(format!("{key} = ["));
        for (v, origin) in items {
            self.line(format!(
                "    {}, # {}",
                toml_string(&v),
                comment(&origin.to_string())
            ));
        }
        self.line("]");
    }

    /// `until = "…"` for a rule that ends, with the time left when there is a clock.
    /// A rule's `programs` and `run_by`, when it has them.
    pub(crate) fn programs(&mut self, who: &crate::Programs) {
        if !who.programs.is_empty() {
            self.strings("programs", &who.programs);
        }
        if !who.run_by.is_empty() {
            self.strings("run_by", &who.run_by);
        }
    }

    pub(crate) fn until(&mut self, expires: Option<Expiry>) {
        let Some(e) = expires else { return };
        match self.now {
            Some(now) => self.line(format!("until = \"{e}\" # {}", e.left(now))),
            None => self.line(format!("until = \"{e}\"")),
        }
    }

    /// A list of path rules, each with its origin.
    pub(crate) fn rules(&mut self, key: &str, rules: &[PathRule]) {
        self.with_origins(
            key,
            rules
                .iter()
                .map(|r| (r.path.to_string_lossy().into_owned(), &r.origin)),
        );
    }
}

/// A TOML comment holding `text` on one line, whatever it contains (unsafe characters as
/// `\u{…}`, see [`cordon_events::terminal`]).
pub(crate) fn comment(text: &str) -> String {
    cordon_events::terminal::safe(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::Table;

    /// Every key of `table` appears in at least one of `values` (tables as rendered), and so
    /// on down into its sub-tables.
    fn all_keys_rendered(at: &str, table: &Table, values: &[&toml::Table]) {
        for f in table.fields.iter().filter(|f| !f.shorthand) {
            let found: Vec<&toml::Value> = values.iter().filter_map(|t| t.get(f.key)).collect();
            assert!(!found.is_empty(), "`{}` of [{at}] is never rendered", f.key);
            let sub: Vec<&toml::Table> = match f.shape {
                Shape::Table(_) => found.iter().filter_map(|v| v.as_table()).collect(),
                Shape::Tables(_) => found
                    .iter()
                    .filter_map(|v| v.as_array())
                    .flatten()
                    .filter_map(|v| v.as_table())
                    .collect(),
                _ => continue,
            };
            if let Shape::Table(t) | Shape::Tables(t) = f.shape {
                all_keys_rendered(&format!("{at}.{}", f.key), t, &sub);
            }
        }
    }

    fn without_origins(v: serde_json::Value) -> serde_json::Value {
        match v {
            serde_json::Value::Object(m) => m
                .into_iter()
                .filter(|(k, _)| k != "origin")
                .map(|(k, v)| (k, without_origins(v)))
                .collect(),
            serde_json::Value::Array(a) => a.into_iter().map(without_origins).collect(),
            other => other,
        }
    }

    /// The wiring test: a section that is declared but not rendered, rendered but not parsed,
    /// or parsed into something else than it renders, fails here. (A section added to the
    /// list without a value in `full_plan` does not compile.)
    #[test]
    fn every_key_is_rendered_and_parses_back_to_the_same_plan() {
        let mut plan = crate::render::tests::full_plan();
        plan.credentials.sort_by(|a, b| a.name.cmp(&b.name));
        let text = plan.to_toml();
        let doc: toml::Table = toml::from_str(&text).unwrap();
        for (name, shape, _) in ROOT.sections {
            let v = doc
                .get(*name)
                .unwrap_or_else(|| panic!("[{name}] is not rendered:\n{text}"));
            match shape {
                Shape::Table(t) => all_keys_rendered(name, t, &[v.as_table().unwrap()]),
                Shape::Tables(t) => {
                    let items: Vec<&toml::Table> = v
                        .as_array()
                        .unwrap()
                        .iter()
                        .filter_map(|x| x.as_table())
                        .collect();
                    all_keys_rendered(name, t, &items);
                }
                Shape::Map(t) => {
                    let items: Vec<&toml::Table> = v
                        .as_table()
                        .unwrap()
                        .values()
                        .filter_map(|x| x.as_table())
                        .collect();
                    all_keys_rendered(name, t, &items);
                }
                _ => unreachable!("a section is a table, an array of tables or a map"),
            }
        }
        let ctx = Context {
            home: Path::new("/home/u"),
            passwd_home: None,
            project: Path::new("/work/p"),
        };
        let layer = crate::file::parse_file(&text, Some(Path::new("/rendered.toml")), 1, &ctx)
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        let mut merged = Sections::default();
        merged.merge(&layer.base);
        let back = merged.into_plan(plan.project.clone(), plan.home.clone());
        assert_eq!(
            without_origins(serde_json::to_value(&back).unwrap()),
            without_origins(serde_json::to_value(&plan).unwrap()),
            "{text}"
        );
    }

    /// Every section is in the schema once, and the checker knows every table's keys.
    #[test]
    fn the_schema_lists_each_section_once() {
        let mut names: Vec<&str> = ROOT.sections.iter().map(|s| s.0).collect();
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n);
        assert!(!names.contains(&"profile"));
        // Unknown keys are refused in every section, by the checker with a location.
        let ctx = Context {
            home: Path::new("/h"),
            passwd_home: None,
            project: Path::new("/p"),
        };
        for (name, shape, in_profile) in ROOT.sections {
            let doc = match shape {
                Shape::Tables(_) => format!("[[{name}]]\nnot_a_key = 1\n"),
                Shape::Map(_) => format!("[{name}.x]\nnot_a_key = 1\n"),
                _ => format!("[{name}]\nnot_a_key = 1\n"),
            };
            let e = crate::file::parse_file(&doc, Some(Path::new("/f")), 1, &ctx)
                .unwrap_err()
                .to_string();
            assert!(e.contains("unknown key `not_a_key`"), "{name}: {e}");
            assert!(e.contains("/f:2:1"), "{name}: {e}");
            let in_p = format!("[profile.p.{name}]\n");
            let r = crate::file::parse_file(&in_p, Some(Path::new("/f")), 1, &ctx);
            let empty_ok = match shape {
                Shape::Table(t) => !t.fields.iter().any(|f| f.required),
                // No entries: nothing required is missing.
                Shape::Map(_) => true,
                _ => false,
            };
            assert_eq!(r.is_ok(), *in_profile && empty_ok, "{name}: {r:?}");
        }
    }
}
