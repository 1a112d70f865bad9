//! cordon-events: the audit event stream. One JSON-lines file per session that every layer
//! writes to, hash-chained so that edits, removed lines and truncation are detected.
//!
//! Runs on the host side only, inside the supervisor: the log lives outside the sandbox's
//! filesystem view and the sandbox never writes to it. Layers running in the sandbox report
//! to the supervisor, which emits the events.
//!
//! # The file
//!
//! One session, one file: `<dir>/<session>.jsonl` (see [`default_log_path`]), created `0600`
//! in directories created `0700`. Each line is one [`Event`], a JSON object with exactly these
//! fields (new information goes in `detail`, never in new top-level fields; a line with an
//! unknown top-level field is malformed):
//!
//! ```json
//! {"time":"2026-11-29T08:30:12.345Z","session":"20261129T083012Z-1a2b3c4d","seq":3,
//!  "layer":"filesystem","action":"deny","reason":"masked by built-in deny","rule":"built-in",
//!  "detail":{"path":"/home/u/.ssh"},"prev":"<64 hex>","hash":"<64 hex>"}
//! ```
//!
//! - `time`: RFC 3339, UTC, milliseconds. Non-decreasing within a file unless the clock jumps.
//! - `session`: the session id ([`new_session_id`]), the same on every line.
//! - `seq`: 0 on the first line, then +1 per line.
//! - `layer`, `action`: see the table below.
//! - `reason`: one human sentence fragment saying why.
//! - `rule`: the policy rule that decided (`built-in`, or `FILE:LINE`), when one did; every
//!   denial names its rule. Absent when none. Readers take it as a [`RuleId`]
//!   ([`Event::rule_id`]), never apart by its words.
//! - `detail`: layer-specific facts (path, host, pid, code, ...). Absent when empty. Secrets
//!   never go here: name a credential, never its value.
//! - `prev`, `hash`: the chain, below.
//!
//! Writes are serialised and each event is one `write(2)` of a whole line to a file opened
//! `O_APPEND`, so a reader sees whole lines, except possibly a partially written last one.
//!
//! # The hash chain
//!
//! ```text
//! hash = lowercase_hex(SHA-256(prev + "\n" + C))
//! ```
//!
//! where `prev` is the previous line's `hash` (64 `0`s, [`GENESIS_PREV`], on the first line) and
//! `C` is the canonical JSON of the event without its `hash` field:
//!
//! - a JSON object of the remaining fields (`rule` left out when absent, `detail` left out when
//!   empty);
//! - object keys sorted by their UTF-8 bytes, at every level (including inside `detail`);
//! - no whitespace between tokens;
//! - strings escaped the way `serde_json` writes them: `\"`, `\\`, `\n`, `\r`, `\t`, `\b`, `\f`,
//!   other control characters as `\u00XX`, everything else (non-ASCII included) literally;
//! - numbers as `serde_json` prints them (floats shortest round-trip, always with `.` or `e`).
//!
//! [`verify`] parses each line and recomputes `C` from the parsed values, so it checks content,
//! not bytes: re-indenting a line, reordering its keys or re-escaping its strings is not
//! reported, while changing, adding or removing any value is. Removing, inserting or reordering
//! lines breaks `prev`/`seq`; cutting the end off loses the final `session`/`stop` event.
//!
//! The chain has no key: it detects accidents, naive edits and truncation, not a writer who
//! recomputes every hash after the edit. That writer would need the user's own access to the
//! file, which the sandbox does not have.
//!
//! # Event types
//!
//! Any layer may also emit `log` (an informational note that decides nothing), `error` (the
//! layer failed; `reason` says how) and `degraded` (the layer is running with less protection
//! than the policy asked for; `reason` says what is missing). The specific meanings:
//!
//! | layer | action | meaning |
//! |---|---|---|
//! | `session` | `start` | First event of every log: the session began. detail: `command`, `cwd`, `project`, `version`. |
//! | `session` | `exit` | The agent's top-level process ended. detail: `code` (exit status) or `signal`. |
//! | `session` | `stop` | Last event of every complete log: the supervisor finished and closed the log. |
//! | `session` | `error` | The supervisor failed; the session ends. |
//! | `session` | `error` | rule `audit.unwritable`: the log could not be written for a while (the disk full); written when it can be again, after the events held meanwhile. detail: `since`, `error`, `held` (events written late), `lost` (past the memory bound), `refused` (connections and requests refused meanwhile, rule `audit.unwritable`: counted here, not one by one), `path`. |
//! | `filesystem` | `apply` | The filesystem view was built. detail: counts of readable/writable/denied paths. |
//! | `filesystem` | `allow` | A path was made visible (read-only or writable). detail: `path`, `mode`. |
//! | `filesystem` | `deny` | A path was masked: no content visible inside the sandbox. detail: `path`. |
//! | `filesystem` | `degraded` | A requested bind or mask could not be set up (e.g. path missing). detail: `path`. |
//! | `process` | `start` | A process started inside the sandbox. detail: `pid`, `command`. |
//! | `process` | `exit` | A process inside the sandbox ended. detail: `pid`, `code` or `signal`. |
//! | `process` | `apply` | Namespaces and the sandbox's init were set up. detail: which namespaces. |
//! | `landlock` | `apply` | The Landlock ruleset is enforced. detail: `enforcement` ([`Enforcement`], `full`), `kernel_abi`, `requested_abi`. |
//! | `landlock` | `degraded` | The kernel lacks (part of) Landlock; enforced partially or not at all (mode `best-effort`). detail: `enforcement` (`partial` or `none`), `kernel_abi` when Landlock exists, `requested_abi`, `error` when the ruleset could not be applied. |
//! | `landlock` | `deny` | The kernel reported a Landlock denial (kernels with Landlock logging). detail: `path` or `port`. |
//! | `env` | `apply` | The sandbox's environment was built. detail: counts passed, set, dropped. |
//! | `env` | `allow` | A host variable was passed through. detail: `var` (never the value). |
//! | `env` | `deny` | A host variable was dropped. detail: `var`. |
//! | `limits` | `apply` | One resource limit is in force. detail: `limit` (`memory`, `pids`, `cpu`, `nofile`), `value`, `via` ([`LimitVia`]: `cgroup2`, `cgroup1`, `rlimit`). |
//! | `limits` | `degraded` | A limit could not be set (e.g. no delegated cgroup, cpu limit without cgroup). detail: `limit`, `value`, `via` (`unenforced`). |
//! | `limits` | `deny` | A limit was hit: a fork refused, a process OOM-killed. detail: `limit`, `pid`. |
//! | `terminal` | `apply` | The agent's pseudo-terminal was set up. |
//! | `terminal` | `deny` | Terminal input injection or another terminal escape was blocked. detail: `what`. |
//! | `network` | `apply` | The network namespace and gateway are up. detail: mode. |
//! | `network`, `http` | `degraded` | detail: `shortfall` ([`Shortfall`]: `host_network`, `proxy_only`, `no_inspection`, `no_judge_key`) says what the layer lacks. |
//! | `network` | `allow` | An outbound connection was allowed. detail: `host`, `ip`, `port`, `proto`, `via` (`tun`; `proxy`, a `CONNECT`; `proxy-http`, a plain request through the proxy); when it closes, `bytes_up`, `bytes_down` (bytes relayed each way) and `duration_ms`. |
//! | `network` | `deny` | An outbound connection was refused. detail: `host`, `ip`, `port`, `proto`, `via`. |
//! | `network` | `ask` | A connection waits for the user's approval (a later `allow`/`deny` settles it). |
//! | `dns` | `allow` | A name lookup was answered. detail: `name`, `type`. |
//! | `dns` | `deny` | A name lookup was refused. detail: `name`, `type`. |
//! | `http` | `apply` | The HTTP layer is up: requests are decided one by one, HTTPS intercepted with cordon's CA. |
//! | `http` | `allow` | An HTTP request through the proxy was forwarded (logged when its answer has been relayed). detail: `method`, `url`, `status`, `latency_ms`, `bytes_up` (the request's head in its HTTP/1.1 form plus the body bytes sent upstream), `bytes_down` (the answer's head likewise plus the body bytes read from the server); `host`, `port`, `path` (normalised, tokens redacted) and `body_len` (declared, `null` when unknown): what `cordon replay` decides it by again. The gateway does not count a connection it hands to the HTTP layer (transparent 80/443 or the proxy's `CONNECT`): these are its bytes. A WebSocket's frames are not counted. |
//! | `http` | `deny` | An HTTP request was blocked (rule, judge or secret scan). detail: `method`, `url`, `host`, `port`, `path`, `body_len`; `approved` when a person decided. |
//! | `http` | any | The final event of a request the LLM judge was asked about carries `judge_call` ([`JudgeCall`]: `verdict`, `latency_ms`), whatever became of the request. |
//! | `http` | `ask` | An HTTP request waits for the user's approval. |
//! | `syscall` | `apply` | The seccomp filter is loaded. detail: counts of denied/notified syscalls. |
//! | `syscall` | `deny` | A system call was refused. detail: `syscall`, `pid`. |
//! | `exec` | `allow` | A program execution was allowed by the exec supervisor (rule absent: no rule matched). detail: `command` (as shown), `program` (the name it was called by), `resolved` (the file it is), `args`, `pid`; `approval` when a person decided. |
//! | `exec` | `deny` | A program execution was refused. detail: as `allow`. |
//! | `exec` | any | An execution that starts a local MCP server the agent's MCP config names also carries `mcp_server` (its name there) and `mcp_config` (the file). |
//! | `exec` | `ask` | An execution waits for the user's approval. |
//! | `credentials` | `allow` | A credential was injected into a request. detail: `name`, `host` (never the secret). |
//! | `credentials` | `deny` | A credential use was refused (wrong host, not allowed by policy). detail: `name`, `host`. |
//! | `credentials` | `ask` | A credential use waits for the user's approval. |
//! | `credentials` | `apply` | The filtering ssh agent is up (rule `ssh.agent`): `SSH_AUTH_SOCK` inside is its socket. |
//! | `credentials` | `allow` | The ssh agent passed a login signature to the user's agent. rule: the network rule that allows the host. detail: `host` (`name:port`). |
//! | `credentials` | `deny` | The ssh agent refused a request (rule `ssh.agent`). detail: `request` (`session-bind`, `sign`, `add identities`, …), `host` (as `known_hosts` names it, or the host key's fingerprint; empty when no host is involved). |
//! | `state` | `apply` | Copy-on-write state was set up (overlay upper dirs) or a snapshot taken. detail: `path`. |
//! | `state` | `allow` | Changes made in the sandbox were accepted into the real files. detail: `path`, counts. |
//! | `state` | `deny` | Changes made in the sandbox were discarded. detail: `path`, counts. |
//! | `state` | `ask` | Changes wait for the user's review. |
//! | `mcp` | `apply` | Local MCP servers the agents' configs name were found. detail: `servers`. |
//! | `mcp` | `allow` | An MCP tool call (`tools/call`) was let through. rule: the `[[mcp.rule]]`, or `default`. detail: `method` (`tools/call`), `server` (`host:port`), `tool`, `id` (JSON-RPC), `arguments` (redacted, at most 1000 characters), `decision` (`allow`, or `ask`/`judge` as settled), `url`; `learn` in a learning run. |
//! | `mcp` | `deny` | An MCP tool call was refused with a JSON-RPC error, never forwarded. detail: as `allow`; rule `mcp.pin` when the tool is held. Without `method`: a tool whose description or input schema changed since it was pinned (a possible rug pull) was held; detail: `server`, `tool`, `description` (what it says now). |
//! | `mcp` | `log` | A `tools/list` answer was filtered. detail: `method` (`tools/list`), `server`, `tools` (shown), `hidden` (by rule), `held` (changed since pinned), `newly_pinned`. |
//! | `mcp` | `error` | An MCP answer too long to check was stopped, or the pins file could not be written. |
//!
//! In a learning run (`cordon run --learn`; `session`/`start` has `learn: true`) what only the
//! lack of a rule refused is let through: its `allow` (or, for a path the home's view hides, its
//! `log`) carries `detail.learn` ([`LEARN`]: `would deny`, `would ask`) and the `rule` that
//! would have refused it.
//!
//! Every `deny` carries `rule`. An `ask` is always followed, for the same request, by an `allow`
//! or `deny` whose `detail.approval` says who decided (`user`, `timeout`).
//!
//! # Human-readable detail keys
//!
//! [`format_human`] shows the first of [`SUBJECT_KEYS`] present in `detail` as the event's
//! subject, so layers should put the main object of an event under one of those keys.

#![forbid(unsafe_code)]

mod chain;
mod details;
mod event;
pub mod export;
mod follow;
mod human;
pub mod lexical;
mod paths;
mod read;
mod sink;
mod status;
pub mod terminal;
mod verdict;

pub use chain::{GENESIS_PREV, hash_event};
pub use details::{Learned, SHORTFALL, Shortfall};
pub use event::{Action, Event, EventError, JUDGE_CALL, JudgeCall, LEARN, Layer, NewEvent};
pub use follow::Follower;
pub use human::{SUBJECT_KEYS, format_human};
pub use paths::{
    data_dir, default_log_dir, default_log_path, is_valid_session_id, new_session_id,
    session_started_ms, state_dir,
};
pub use read::{SessionSummary, VerifyProblem, VerifyReport, list_sessions, read_log, verify};
pub use sink::{AUDIT_UNWRITABLE, AuditHealth, AuditLog, MAX_HELD};
pub use status::{Enforcement, LimitVia};
pub use verdict::{Builtin, Denial, Origin, RuleId, Step, Verdict};

/// Where a layer that runs on threads of its own (the gateway, the HTTP layer) sends its
/// events: one type for all of them, so the binary hands every layer the same sink.
pub type Emit = std::sync::Arc<dyn Fn(NewEvent) + Send + Sync>;
