//! `[credentials.NAME]`: secrets the sandbox only ever holds as placeholders; the HTTP layer
//! swaps in the real value for the named hosts only (layer 1b).

use std::path::PathBuf;

use serde_spanned::Spanned;

use crate::PolicyError;
use crate::Programs;
use crate::pattern::HostPattern;
use crate::schema::{Schema, Shape, quote_key, toml_string};
use crate::sections::{Convert, Loosen, Origin, Render, Section, Sections, comment};

/// Where a credential's real value comes from (read on the host only).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CredentialSource {
    /// A host environment variable.
    Env(String),
    /// A file (its contents, trimmed).
    File(PathBuf),
    /// A command's standard output, trimmed (`gh auth token`).
    Command(Vec<String>),
    /// A string field of a JSON file (an agent's login file), named by its dotted path
    /// (`claudeAiOauth.accessToken`). The file is shown inside with the field's value replaced
    /// by the placeholder, the rest as it is; it is masked whenever it cannot be.
    Json {
        /// The file.
        file: PathBuf,
        /// The field's dotted path from the top-level object.
        field: String,
    },
    /// A scalar of a YAML file's block mappings (gh's `~/.config/gh/hosts.yml`), named by the
    /// keys from the top joined with dots (`github.com.oauth_token`: a key may hold dots
    /// itself). Shown inside like a JSON login file.
    Yaml {
        /// The file.
        file: PathBuf,
        /// The keys from the top, joined with dots.
        field: String,
    },
    /// The `_authToken` an npm config file (`~/.npmrc`) keeps for one registry
    /// (`//REGISTRY/…:_authToken=…`). Not written in policy: made for a shown `~/.npmrc` by the
    /// home's view, which shows the file with the token replaced by the placeholder.
    Npmrc {
        /// The file.
        file: PathBuf,
        /// The registry's host (and port, when it names one), as the file writes it.
        registry: String,
    },
}

/// Where the value comes from, as a person would say it (for warnings and the log).
impl std::fmt::Display for CredentialSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CredentialSource::Env(v) => write!(f, "the host's variable ${v}"),
            CredentialSource::File(p) => write!(f, "the file {}", p.display()),
            CredentialSource::Command(argv) => match argv.first() {
                Some(program) => write!(f, "the output of `{program} …`"),
                None => f.write_str("an empty command"),
            },
            CredentialSource::Json { file, field } | CredentialSource::Yaml { file, field } => {
                write!(f, "`{field}` in {}", file.display())
            }
            CredentialSource::Npmrc { file, registry } => {
                write!(f, "the token for {registry} in {}", file.display())
            }
        }
    }
}

impl CredentialSource {
    /// The login file a [`CredentialSource::Json`] reads, which the sandbox only ever sees
    /// masked.
    pub fn login_file(&self) -> Option<&std::path::Path> {
        match self {
            CredentialSource::Json { file, .. }
            | CredentialSource::Yaml { file, .. }
            | CredentialSource::Npmrc { file, .. } => Some(file),
            _ => None,
        }
    }
}

/// Where in a request the real value travels.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CredentialSlot {
    /// A header (lower-case name), its value written as `format` with `{}` for the value
    /// (`Basic …` is base64-encoded after the scheme).
    Header {
        /// The header name, lower-case.
        name: String,
        /// How the value is written.
        format: String,
    },
    /// Several headers, each with its format: the same value travels in each (a client that
    /// sends its key as both `x-api-key` and `authorization: Bearer …`).
    Headers(Vec<HeaderSlot>),
    /// A query parameter.
    Query {
        /// The parameter name.
        name: String,
    },
}

/// One header of [`CredentialSlot::Headers`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HeaderSlot {
    /// The header name, lower-case.
    pub name: String,
    /// How the value is written, `{}` for the value.
    pub format: String,
}

impl HeaderSlot {
    /// As `headers = [...]` writes it: `name`, or `name: format` when the format is not `{}`.
    pub fn written(&self) -> String {
        if self.format == "{}" {
            self.name.clone()
        } else {
            format!("{}: {}", self.name, self.format)
        }
    }
}

/// `[credentials.NAME]`: the sandbox holds a placeholder; the HTTP layer swaps in the real
/// value only in requests to `hosts`, only in its slot.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CredentialPlan {
    /// Its name in events.
    pub name: String,
    /// The sandbox variable that holds the placeholder, if any.
    pub env: Option<String>,
    /// Where the real value comes from.
    pub source: CredentialSource,
    /// The hosts the real value may go to.
    pub hosts: Vec<HostPattern>,
    /// The processes it may go from (`programs`, `run_by`); empty: any. A placeholder in a
    /// request from another process is refused as a leak.
    #[serde(default, skip_serializing_if = "Programs::any")]
    pub programs: Programs,
    /// Where it travels.
    pub slot: CredentialSlot,
    /// Files shown inside as copies with the real value replaced by the placeholder.
    #[serde(default)]
    pub files: Vec<PathBuf>,
    /// Put it in every request to `hosts`, whatever the client sent.
    pub inject: bool,
    /// A login token that its provider renews at a token endpoint: cordon brokers the
    /// exchange and keeps the host's login file current.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh: Option<RefreshPlan>,
    /// Where it came from.
    pub origin: cordon_events::Origin,
}

/// `refresh = { url, token, … }` of a login credential: the provider's OAuth token endpoint,
/// where the agent renews its login (`grant_type=refresh_token`) or first logs in
/// (`authorization_code`). cordon puts the real refresh token in place of its placeholder in
/// the request's body, and takes the answer's new tokens: the real ones are written to the
/// host's login file at once, the agent gets placeholders for them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RefreshPlan {
    /// The endpoint as written (`https://platform.claude.com/v1/oauth/token`).
    pub url: String,
    /// Its host (lower-case).
    pub host: String,
    /// Its port.
    pub port: u16,
    /// Its path.
    pub path: String,
    /// The key of the endpoint's JSON answer that holds this credential's new value
    /// (`access_token`, `refresh_token`, `id_token`).
    pub token: String,
    /// A field of the login file set to when the new token expires, in milliseconds since
    /// the epoch (now + the answer's `expires_in`): Claude's `claudeAiOauth.expiresAt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_ms: Option<String>,
    /// A field of the login file set to the time of the exchange, RFC 3339 (codex's
    /// `last_refresh`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refreshed_at: Option<String>,
}

impl RefreshPlan {
    /// Whether a request to `host:port` for `path` is to this endpoint.
    pub fn is_endpoint(&self, host: &str, port: u16, path: &str) -> bool {
        self.port == port
            && self.host.eq_ignore_ascii_case(host.trim_end_matches('.'))
            && self.path == path
    }
}

raw_table! {
    /// `source` of a `[credentials.NAME]` as written.
    pub(crate) struct RawSource example "source = { env = \"VAR\" }" {
        /// A host environment variable.
        env: String = "env = \"GH_TOKEN\"",
        /// A file: its contents, or with `json`/`yaml` a field of it.
        file: String = "file = \"~/.config/gh/hosts.yml\"",
        /// The dotted path of a string field of the JSON `file`.
        json: String = "json = \"claudeAiOauth.accessToken\"",
        /// The dotted keys of a scalar of the YAML `file`.
        yaml: String = "yaml = \"github.com.oauth_token\"",
        /// A command whose output is the value.
        command: Strings = "command = [\"gh\", \"auth\", \"token\"]",
    }
}

raw_table! {
    /// `refresh` of a `[credentials.NAME]` as written.
    pub(crate) struct RawRefresh example "refresh = { url = \"https://platform.claude.com/v1/oauth/token\", token = \"access_token\" }" {
        /// The provider's OAuth token endpoint.
        url: String [required] = "url = \"https://platform.claude.com/v1/oauth/token\"",
        /// The key of the endpoint's answer holding this credential's new value.
        token: String [required] = "token = \"access_token\"",
        /// A login-file field set to the new token's expiry, in milliseconds since the epoch.
        expires_ms: String = "expires_ms = \"claudeAiOauth.expiresAt\"",
        /// A login-file field set to the time of the exchange (RFC 3339).
        refreshed_at: String = "refreshed_at = \"last_refresh\"",
    }
}

raw_table! {
    /// One `[credentials.NAME]` as written.
    pub(crate) struct Raw example "source = { env = \"GH_TOKEN\" } and hosts = [\"api.github.com\"]" {
        /// The sandbox variable that holds the placeholder.
        env: String = "env = \"ANTHROPIC_API_KEY\"",
        /// Where the real value comes from (read on the host only).
        source: Table(RawSource) [required] = "source = { file = \"~/.claude/.credentials.json\", json = \"claudeAiOauth.accessToken\" }",
        /// The hosts the real value may go to.
        hosts: Strings [required, loosens] = "hosts = [\"api.anthropic.com\"]",
        /// Only in requests these programs send (as `[[network.allow]]`'s `programs`): a
        /// placeholder from any other process is refused.
        programs: Strings = "programs = [\"claude\"]",
        /// Only in requests of processes one of these started.
        run_by: Strings = "run_by = [\"npm\"]",
        /// The header it travels in.
        header: String = "header = \"authorization\"",
        /// Several headers, each `name` or `name: format`.
        headers: Strings = "headers = [\"x-api-key\", \"authorization: Bearer {}\"]",
        /// The query parameter it travels in.
        query: String = "query = \"key\"",
        /// How the header value is written, `{}` for the value.
        format: String = "format = \"Bearer {}\"",
        /// Put it in every request to `hosts`, whatever the client sent.
        inject: Boolean = "inject = true",
        /// Files shown inside as copies with the real value replaced by the placeholder.
        files: Strings = "files = [\"~/.config/some-tool/auth.json\"]",
        /// Renew a JSON login file's token at the provider's endpoint (brokered by cordon).
        refresh: Table(RawRefresh),
    }
}

/// The credentials of one layer, or merged (a later layer's credential of the same name
/// replaces the earlier one).
#[derive(Debug, Clone, Default)]
pub(crate) struct Credentials(pub Vec<(CredentialPlan, Origin)>);

fn source(
    cx: &Convert<'_>,
    name: &str,
    s: &Spanned<RawSource>,
) -> Result<CredentialSource, PolicyError> {
    let src = s.get_ref();
    let trimmed = |v: &Option<Spanned<String>>| {
        v.as_ref()
            .map(|x| x.get_ref().trim().to_string())
            .filter(|x| !x.is_empty())
    };
    if let Some(j) = &src.json {
        return json_source(cx, name, s, j, false);
    }
    if let Some(y) = &src.yaml {
        return json_source(cx, name, s, y, true);
    }
    Ok(
        match (trimmed(&src.env), &src.file, src.command.is_empty()) {
            (Some(v), None, true) => CredentialSource::Env(v),
            (None, Some(f), true) if src.env.is_none() => {
                let p = cx
                    .paths(std::slice::from_ref(f), "source.file", false)?
                    .pop()
                    .map(|r| r.path)
                    .unwrap_or_default();
                CredentialSource::File(p)
            }
            (None, None, false) if src.env.is_none() && !src.command[0].get_ref().is_empty() => {
                CredentialSource::Command(src.command.iter().map(|c| c.get_ref().clone()).collect())
            }
            _ => {
                return Err(cx.diag(
                    format!("[credentials.{name}] needs exactly one source"),
                    s.span(),
                    "source = { env = \"VAR\" }, { file = \"~/.config/x/key\" } or { command = [\"gh\", \"auth\", \"token\"] }",
                ));
            }
        },
    )
}

/// `source = { file = "~/.claude/.credentials.json", json = "claudeAiOauth.accessToken" }`.
fn json_source(
    cx: &Convert<'_>,
    name: &str,
    s: &Spanned<RawSource>,
    j: &Spanned<String>,
    yaml: bool,
) -> Result<CredentialSource, PolicyError> {
    let src = s.get_ref();
    let Some(f) = src
        .file
        .as_ref()
        .filter(|_| src.env.is_none() && src.command.is_empty())
        .filter(|_| !(src.json.is_some() && src.yaml.is_some()))
    else {
        if yaml || src.yaml.is_some() {
            return Err(cx.diag(
                format!(
                    "[credentials.{name}]: `yaml` names a field of `file`, and goes with it alone"
                ),
                s.span(),
                "source = { file = \"~/.config/gh/hosts.yml\", yaml = \"github.com.oauth_token\" }",
            ));
        }
        return Err(cx.diag(
            format!("[credentials.{name}]: `json` names a field of `file`, and goes with it alone"),
            s.span(),
            "source = { file = \"~/.claude/.credentials.json\", json = \"claudeAiOauth.accessToken\" }",
        ));
    };
    let field = j.get_ref().trim().to_string();
    if field.is_empty() || field.split('.').any(str::is_empty) {
        return Err(cx.diag(
            format!(
                "invalid JSON field {} in [credentials.{name}]",
                toml_string(j.get_ref())
            ),
            j.span(),
            "a dotted path of object keys from the top, e.g. json = \"tokens.access_token\"",
        ));
    }
    let file = cx
        .paths(std::slice::from_ref(f), "source.file", false)?
        .pop()
        .map(|r| r.path)
        .unwrap_or_default();
    Ok(if yaml {
        CredentialSource::Yaml { file, field }
    } else {
        CredentialSource::Json { file, field }
    })
}

fn slot(
    cx: &Convert<'_>,
    name: &str,
    e: &Raw,
    at: &Spanned<Raw>,
) -> Result<CredentialSlot, PolicyError> {
    if let Some(q) = &e.query {
        if e.header.is_some() || !e.headers.is_empty() {
            return Err(cx.diag(
                format!("[credentials.{name}] has both `header` and `query`"),
                q.span(),
                "a credential travels in one place: keep `header` or `query`",
            ));
        }
        let n = q.get_ref().trim().to_string();
        if n.is_empty()
            || !n
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        {
            return Err(cx.diag(
                format!("invalid query parameter name {}", toml_string(q.get_ref())),
                q.span(),
                "e.g. query = \"key\" (the parameter the API reads the key from)",
            ));
        }
        return Ok(CredentialSlot::Query { name: n });
    }
    if !e.headers.is_empty() {
        return headers(cx, name, e);
    }
    let header = e.header.as_ref().map_or("authorization".to_string(), |h| {
        h.get_ref().trim().to_ascii_lowercase()
    });
    if !header_name_ok(&header) {
        return Err(cx.diag(
            format!("invalid header name for [credentials.{name}]"),
            e.header.as_ref().map_or(at.span(), |h| h.span()),
            "e.g. header = \"x-api-key\" or header = \"authorization\"",
        ));
    }
    let format = e
        .format
        .as_ref()
        .map_or("{}".to_string(), |f| f.get_ref().clone());
    if !format.contains("{}") {
        return Err(cx.diag(
            "a credential's format needs `{}` where the value goes".to_string(),
            e.format.as_ref().map_or(at.span(), |f| f.span()),
            "e.g. format = \"Bearer {}\" or format = \"Basic x-access-token:{}\"",
        ));
    }
    Ok(CredentialSlot::Header {
        name: header,
        format,
    })
}

fn header_name_ok(h: &str) -> bool {
    !h.is_empty() && h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// `headers = ["x-api-key", "authorization: Bearer {}"]`: each entry a header name, with its
/// format after a colon when it is not the bare value (as the header reads on the wire).
fn headers(cx: &Convert<'_>, name: &str, e: &Raw) -> Result<CredentialSlot, PolicyError> {
    if let Some(h) = e.header.as_ref() {
        return Err(cx.diag(
            format!("[credentials.{name}] has both `header` and `headers`"),
            h.span(),
            "keep one: headers = [\"x-api-key\", \"authorization: Bearer {}\"] names several",
        ));
    }
    if let Some(f) = e.format.as_ref() {
        return Err(cx.diag(
            format!("[credentials.{name}]: `format` goes with `header`; with `headers` each entry carries its own"),
            f.span(),
            "write the format after the name: headers = [\"x-api-key\", \"authorization: Bearer {}\"]",
        ));
    }
    let mut out: Vec<HeaderSlot> = Vec::new();
    for h in &e.headers {
        let (n, format) = match h.get_ref().split_once(':') {
            Some((n, f)) => (n, f.trim().to_string()),
            None => (h.get_ref().as_str(), "{}".to_string()),
        };
        let n = n.trim().to_ascii_lowercase();
        if !header_name_ok(&n) {
            return Err(cx.diag(
                format!(
                    "invalid header name {} in [credentials.{name}] headers",
                    toml_string(h.get_ref())
                ),
                h.span(),
                "e.g. headers = [\"x-api-key\", \"authorization: Bearer {}\"]",
            ));
        }
        if !format.contains("{}") {
            return Err(cx.diag(
                format!("header {n} of [credentials.{name}] needs `{{}}` where the value goes"),
                h.span(),
                "e.g. \"authorization: Bearer {}\"",
            ));
        }
        if out.iter().any(|x| x.name == n) {
            return Err(cx.diag(
                format!("header {n} is named twice in [credentials.{name}] headers"),
                h.span(),
                "name each header once",
            ));
        }
        out.push(HeaderSlot { name: n, format });
    }
    Ok(CredentialSlot::Headers(out))
}

fn credential(
    cx: &Convert<'_>,
    name: &Spanned<String>,
    entry: &Spanned<Raw>,
) -> Result<CredentialPlan, PolicyError> {
    let e = entry.get_ref();
    let n = name.get_ref();
    let table = format!("[credentials.{}]", quote_key(n));
    let source = source(cx, n, cx.required(&e.source, "source", &table)?)?;
    if e.hosts.is_empty() {
        return Err(cx.diag(
            format!("[credentials.{n}] has no hosts"),
            entry.span(),
            "name where the real value may go, e.g. hosts = [\"api.anthropic.com\"]",
        ));
    }
    let hosts = e
        .hosts
        .iter()
        .map(|h| cx.host_glob(h))
        .collect::<Result<Vec<_>, _>>()?;
    let slot = slot(cx, n, e, entry)?;
    let env = match &e.env {
        Some(v) => {
            let var = v.get_ref().trim().to_string();
            if var.is_empty() || !var.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err(cx.diag(
                    format!("invalid variable name {}", toml_string(v.get_ref())),
                    v.span(),
                    "e.g. env = \"ANTHROPIC_API_KEY\"",
                ));
            }
            Some(var)
        }
        None => None,
    };
    let refresh = match &e.refresh {
        Some(r) => Some(refresh(cx, n, r, &source, &hosts)?),
        None => None,
    };
    Ok(CredentialPlan {
        name: n.clone(),
        env,
        source,
        hosts,
        programs: cx.programs(&e.programs, &e.run_by)?,
        slot,
        files: cx
            .paths(&e.files, "files", false)?
            .into_iter()
            .map(|r| r.path)
            .collect(),
        inject: e.inject.as_ref().is_some_and(|i| *i.get_ref()),
        refresh,
        origin: cx.origin(name.span()).label.into(),
    })
}

/// `refresh = { url = "https://…/oauth/token", token = "refresh_token" }`.
fn refresh(
    cx: &Convert<'_>,
    name: &str,
    r: &Spanned<RawRefresh>,
    source: &CredentialSource,
    hosts: &[HostPattern],
) -> Result<RefreshPlan, PolicyError> {
    let raw = r.get_ref();
    if !matches!(source, CredentialSource::Json { .. }) {
        return Err(cx.diag(
            format!("[credentials.{name}]: `refresh` renews a token of a JSON login file, and `source` names none"),
            r.span(),
            "source = { file = \"~/.claude/.credentials.json\", json = \"claudeAiOauth.refreshToken\" }",
        ));
    }
    let url = raw.url.as_ref().map(|u| u.get_ref().trim()).unwrap_or("");
    let at = raw.url.as_ref().map_or(r.span(), |u| u.span());
    let Some((host, port, path)) = https_url(url) else {
        return Err(cx.diag(
            format!("invalid token endpoint {} in [credentials.{name}] refresh", toml_string(url)),
            at,
            "an https URL with a path and no query, e.g. url = \"https://auth.openai.com/oauth/token\"",
        ));
    };
    let token = raw.token.as_ref().map(|t| t.get_ref().trim()).unwrap_or("");
    if token.is_empty()
        || !token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        return Err(cx.diag(
            format!(
                "invalid answer key {} in [credentials.{name}] refresh",
                toml_string(token)
            ),
            raw.token.as_ref().map_or(r.span(), |t| t.span()),
            "the key of the token endpoint's JSON answer, e.g. token = \"access_token\"",
        ));
    }
    // The real refresh token goes to the endpoint in the request's body: the endpoint must
    // be one of the places it may go.
    if token == "refresh_token" && !hosts.iter().any(|h| h.matches(&host)) {
        return Err(cx.diag(
            format!("[credentials.{name}]: its refresh token would go to {host}, which is not one of its hosts"),
            at,
            format!("add {} to hosts, or name another endpoint", toml_string(&host)),
        ));
    }
    let field = |f: &Option<Spanned<String>>, key: &str| -> Result<Option<String>, PolicyError> {
        let Some(f) = f else { return Ok(None) };
        let v = f.get_ref().trim();
        if v.is_empty() || v.split('.').any(str::is_empty) {
            return Err(cx.diag(
                format!(
                    "invalid field {} for `{key}` in [credentials.{name}] refresh",
                    toml_string(v)
                ),
                f.span(),
                "a dotted path of object keys from the top, e.g. \"claudeAiOauth.expiresAt\"",
            ));
        }
        Ok(Some(v.to_string()))
    };
    Ok(RefreshPlan {
        url: url.to_string(),
        host,
        port,
        path,
        token: token.to_string(),
        expires_ms: field(&raw.expires_ms, "expires_ms")?,
        refreshed_at: field(&raw.refreshed_at, "refreshed_at")?,
    })
}

/// (host, port, path) of `https://host[:port]/path`; `None` for anything else (another
/// scheme, no path, a query or fragment, user info).
fn https_url(url: &str) -> Option<(String, u16, String)> {
    let rest = url.strip_prefix("https://")?;
    let (authority, path) = rest.split_at(rest.find('/')?);
    if path.contains(['?', '#']) || authority.contains('@') || authority.is_empty() {
        return None;
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) => (h, p.parse::<u16>().ok().filter(|p| *p != 0)?),
        None => (authority, 443),
    };
    let ok = |b: u8| b.is_ascii_alphanumeric() || b"-.".contains(&b);
    (!host.is_empty() && host.bytes().all(ok))
        .then(|| (host.to_ascii_lowercase(), port, path.to_string()))
}

impl Section for Credentials {
    type Raw = std::collections::BTreeMap<Spanned<String>, Spanned<Raw>>;
    type Plan = Vec<CredentialPlan>;
    const SHAPE: Shape = Shape::Map(&Raw::TABLE);
    // A profile may name its agent's key variables: where a profile's credential may go is
    // checked like any other (an untrusted file's is a loosening).

    fn convert(raw: Self::Raw, cx: &mut Convert<'_>) -> Result<Self, PolicyError> {
        let mut out = Vec::new();
        for (name, entry) in &raw {
            out.push((credential(cx, name, entry)?, cx.origin(name.span())));
        }
        Ok(Credentials(out))
    }

    fn merge(&mut self, later: &Self) {
        for (c, o) in &later.0 {
            self.0.retain(|(x, _)| x.name != c.name);
            self.0.push((c.clone(), o.clone()));
        }
    }

    fn loosen(full: &Sections, base: &Sections, out: &mut Loosen<'_>) {
        // A credential sends a real secret somewhere: who defines where is loosening.
        for (c, o) in &full.credentials.0 {
            if !base.credentials.0.iter().any(|(b, _)| b == c) {
                let hosts: Vec<String> = c.hosts.iter().map(ToString::to_string).collect();
                out.add(o, format!("sends credential `{}` to {hosts:?}", c.name));
            }
        }
    }

    fn plan(self) -> Vec<CredentialPlan> {
        self.0.into_iter().map(|(c, _)| c).collect()
    }

    fn render(list: &Vec<CredentialPlan>, out: &mut Render) {
        for c in list {
            out.line(format!(
                "\n[credentials.{}] # {}",
                quote_key(&c.name),
                comment(&c.origin.to_string())
            ));
            if let Some(e) = &c.env {
                out.string("env", e);
            }
            let source = match &c.source {
                CredentialSource::Env(v) => format!("{{ env = {} }}", toml_string(v)),
                CredentialSource::File(p) => {
                    format!("{{ file = {} }}", toml_string(&p.display().to_string()))
                }
                CredentialSource::Command(argv) => {
                    let a: Vec<String> = argv.iter().map(|x| toml_string(x)).collect();
                    format!("{{ command = [{}] }}", a.join(", "))
                }
                CredentialSource::Json { file, field } => format!(
                    "{{ file = {}, json = {} }}",
                    toml_string(&file.display().to_string()),
                    toml_string(field)
                ),
                CredentialSource::Yaml { file, field } => format!(
                    "{{ file = {}, yaml = {} }}",
                    toml_string(&file.display().to_string()),
                    toml_string(field)
                ),
                CredentialSource::Npmrc { file, registry } => format!(
                    "{{ file = {} }} # the _authToken for {registry}",
                    toml_string(&file.display().to_string()),
                ),
            };
            out.line(format!("source = {source}"));
            let h: Vec<String> = c.hosts.iter().map(ToString::to_string).collect();
            out.strings("hosts", &h);
            out.programs(&c.programs);
            match &c.slot {
                CredentialSlot::Query { name } => out.string("query", name),
                CredentialSlot::Header { name, format } => {
                    out.string("header", name);
                    out.string("format", format);
                }
                CredentialSlot::Headers(list) => {
                    let h: Vec<String> = list.iter().map(HeaderSlot::written).collect();
                    out.strings("headers", &h);
                }
            }
            if !c.files.is_empty() {
                let f: Vec<String> = c.files.iter().map(|p| p.display().to_string()).collect();
                out.strings("files", &f);
            }
            out.line(format!("inject = {}", c.inject));
            if let Some(r) = &c.refresh {
                let mut parts = vec![
                    format!("url = {}", toml_string(&r.url)),
                    format!("token = {}", toml_string(&r.token)),
                ];
                if let Some(f) = &r.expires_ms {
                    parts.push(format!("expires_ms = {}", toml_string(f)));
                }
                if let Some(f) = &r.refreshed_at {
                    parts.push(format!("refreshed_at = {}", toml_string(f)));
                }
                out.line(format!("refresh = {{ {} }}", parts.join(", ")));
            }
        }
    }
}
