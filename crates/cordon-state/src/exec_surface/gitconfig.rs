//! Git config, read the way git reads it as far as review needs: which keys a change touches,
//! and which of those make git run a command (or read one from elsewhere).

use std::collections::BTreeMap;

/// `section[.subsection].key` → values, in file order. Section and key names are
/// case-insensitive in git (lowercased here); subsections are not.
pub(crate) type Keys = BTreeMap<String, Vec<String>>;

/// Parse `text` as git config. `None` when a line is not config at all (then the whole file
/// is held: what git makes of it cannot be predicted here).
pub(crate) fn parse(text: &str) -> Option<Keys> {
    let mut out = Keys::new();
    let mut section: Option<String> = None;
    let mut lines = text.lines();
    while let Some(raw) = lines.next() {
        let mut line = raw.to_owned();
        // A trailing backslash continues the value on the next line.
        while line.ends_with('\\') {
            line.pop();
            line.push_str(lines.next().unwrap_or(""));
        }
        let l = line.trim();
        if l.is_empty() || l.starts_with('#') || l.starts_with(';') {
            continue;
        }
        let rest = if let Some(r) = l.strip_prefix('[') {
            let end = r.find(']')?;
            section = Some(section_name(&r[..end])?);
            r[end + 1..].trim()
        } else {
            l
        };
        if rest.is_empty() || rest.starts_with('#') || rest.starts_with(';') {
            continue;
        }
        let sec = section.as_deref()?;
        let (k, v) = match rest.split_once('=') {
            Some((k, v)) => (k.trim(), unquote(v.trim())),
            None => (rest, "true".to_owned()),
        };
        if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            return None;
        }
        out.entry(format!("{sec}.{}", k.to_ascii_lowercase()))
            .or_default()
            .push(v);
    }
    Some(out)
}

/// `core`, `remote "origin"` → `remote.origin`, `branch.main` (old style) → `branch.main`.
fn section_name(inner: &str) -> Option<String> {
    let inner = inner.trim();
    if let Some((s, sub)) = inner.split_once(char::is_whitespace) {
        let sub = sub.trim();
        let sub = sub.strip_prefix('"')?.strip_suffix('"')?;
        let sub = sub.replace("\\\"", "\"").replace("\\\\", "\\");
        return Some(format!("{}.{sub}", s.to_ascii_lowercase()));
    }
    match inner.split_once('.') {
        Some((s, sub)) => Some(format!(
            "{}.{}",
            s.to_ascii_lowercase(),
            sub.to_ascii_lowercase()
        )),
        None => Some(inner.to_ascii_lowercase()),
    }
}

/// A value without its comment and quotes (enough to see what it says, not byte-exact).
fn unquote(v: &str) -> String {
    let mut out = String::new();
    let mut quoted = false;
    let mut chars = v.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => quoted = !quoted,
            '\\' => {
                if let Some(n) = chars.next() {
                    out.push(match n {
                        'n' => '\n',
                        't' => '\t',
                        other => other,
                    });
                }
            }
            '#' | ';' if !quoted => break,
            c => out.push(c),
        }
    }
    out.trim().to_owned()
}

/// Split `sec.sub.key` into (section, key); the subsection is whatever lies between.
fn ends(name: &str) -> (&str, &str) {
    let sec = name.split('.').next().unwrap_or("");
    let key = name.rsplit('.').next().unwrap_or("");
    (sec, key)
}

/// Why a key makes git run something (or read config or code from elsewhere), if it does.
pub(crate) fn executes(name: &str, values: &[String]) -> Option<&'static str> {
    let (sec, key) = ends(name);
    let has_sub = name.matches('.').count() >= 2;
    let bang = values.iter().any(|v| v.trim_start().starts_with('!'));
    Some(match (sec, key) {
        ("core", "fsmonitor") => "runs as a command on every `git status`",
        ("core", "hookspath") => "moves the hooks directory",
        ("core", "sshcommand") => "runs as the ssh command",
        ("core", "pager") | ("pager", _) => "runs as the pager",
        ("core", "editor") | ("sequence", "editor") => "runs as the editor",
        ("core", "askpass") => "runs to ask for passwords",
        ("core", "gitproxy") => "runs as a proxy command",
        ("core", "alternaterefscommand") => "runs as a command",
        ("core", "worktree") => "points git at another work tree",
        ("core", "attributesfile") => "reads attributes (filter and diff drivers) from elsewhere",
        ("include", _) | ("includeif", _) => "includes config from another file",
        ("alias", _) if bang => "a `!` alias runs a shell command",
        ("credential", "helper") => "runs as a credential helper",
        ("diff", "external") => "runs as the diff program",
        (_, "textconv") => "runs to convert files for diff",
        ("diff", "command") if has_sub => "runs as a diff driver",
        ("merge", "driver") if has_sub => "runs as a merge driver",
        ("filter", _) if has_sub => "runs as a clean/smudge filter",
        ("gpg", "program") | ("gpg", "cmd") => "runs as the signing program",
        ("difftool" | "mergetool", "cmd" | "path") => "runs as a tool",
        ("web", "browser") | ("browser" | "man", "cmd" | "path") => "runs as a program",
        ("imap", "tunnel") | ("sendemail", _) => "runs as a program",
        ("uploadpack", "packobjectshook") => "runs as a hook",
        ("remote", "uploadpack" | "receivepack" | "vcs" | "proxy") => {
            "runs a program when fetching or pushing"
        }
        ("submodule", "update") => "a submodule update mode may run a command",
        ("protocol", _) => "allows transports (ext:: runs commands)",
        ("url", _) => "rewrites URLs (may select a transport that runs commands)",
        ("ssh", "variant") => "changes how ssh is run",
        ("http", "proxy" | "sslcainfo" | "cookiefile") => return None,
        ("safe", _) => "changes which repositories git trusts",
        _ => return None,
    })
}

/// Keys a change may touch without review: identity, remotes' addresses, branches' upstreams,
/// and settings that only change how git stores or shows what it already has.
fn inert(name: &str) -> bool {
    let (sec, key) = ends(name);
    let has_sub = name.matches('.').count() >= 2;
    match sec {
        "user" | "author" | "committer" | "branch" | "init" | "pull" | "push" | "fetch"
        | "color" | "log" | "status" | "advice" | "column" | "index" | "feature" | "rerere"
        | "tag" | "maintenance" | "help" => true,
        // A `!` alias is caught by `executes` first; the others name git subcommands.
        "alias" => true,
        "remote" => {
            has_sub
                && matches!(
                    key,
                    "url"
                        | "pushurl"
                        | "fetch"
                        | "push"
                        | "mirror"
                        | "tagopt"
                        | "prune"
                        | "skipdefaultupdate"
                        | "skipfetchall"
                        | "promisor"
                        | "partialclonefilter"
                )
        }
        "submodule" => matches!(
            key,
            "url"
                | "active"
                | "branch"
                | "fetchrecursesubmodules"
                | "ignore"
                | "shallow"
                | "path"
                | "recurse"
        ),
        "core" => matches!(
            key,
            "repositoryformatversion"
                | "filemode"
                | "bare"
                | "logallrefupdates"
                | "ignorecase"
                | "precomposeunicode"
                | "symlinks"
                | "autocrlf"
                | "eol"
                | "quotepath"
                | "compression"
                | "safecrlf"
                | "checkstat"
                | "trustctime"
                | "abbrev"
                | "commentchar"
                | "commentstring"
                | "sparsecheckout"
                | "untrackedcache"
                | "splitindex"
                | "preloadindex"
        ),
        "extensions" => matches!(key, "objectformat" | "worktreeconfig" | "refstorage"),
        "commit" => matches!(key, "gpgsign" | "verbose" | "cleanup" | "status"),
        "rebase" => matches!(key, "autosquash" | "autostash" | "updaterefs" | "stat"),
        "merge" => !has_sub,
        "diff" => !has_sub && key != "external",
        "gc" => matches!(key, "auto" | "autodetach" | "autopacklimit"),
        "lfs" => key == "repositoryformatversion",
        _ => false,
    }
}

/// What a reviewer must see about a change from `before` to `after` (both config text). Empty:
/// the change touches only inert keys and may be applied without asking.
pub(crate) fn flags(before: &str, after: &str) -> Vec<String> {
    let (Some(b), Some(a)) = (parse(before), parse(after)) else {
        return vec!["git config that cannot be parsed: held for review".to_owned()];
    };
    let mut out = Vec::new();
    let mut unknown = Vec::new();
    for (name, values) in &a {
        if b.get(name) == Some(values) {
            continue;
        }
        if let Some(why) = executes(name, values) {
            let v = values.last().map(String::as_str).unwrap_or("");
            out.push(format!("git config `{name} = {}`: {why}", short(v)));
        } else if !inert(name) {
            unknown.push(name.clone());
        }
    }
    for name in b.keys().filter(|k| !a.contains_key(*k)) {
        if executes(name, &b[name]).is_some() {
            out.push(format!("git config `{name}` removed"));
        }
    }
    if !unknown.is_empty() {
        out.push(format!(
            "git config keys not known to be inert: {}",
            short(&unknown.join(", "))
        ));
    }
    out
}

fn short(s: &str) -> String {
    if s.chars().count() > 60 {
        format!("{}...", s.chars().take(57).collect::<String>())
    } else {
        s.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executing_keys_are_flagged_and_identity_is_not() {
        let before = "[core]\n\trepositoryformatversion = 0\n\tbare = false\n";
        let plain = format!(
            "{before}[user]\n\tname = A\n[remote \"origin\"]\n\turl = /x\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n[branch \"main\"]\n\tremote = origin\n\tmerge = refs/heads/main\n[submodule \"sub\"]\n\turl = /u\n\tactive = true\n"
        );
        assert!(
            flags(before, &plain).is_empty(),
            "{:?}",
            flags(before, &plain)
        );
        for evil in [
            "[core]\n\tfsmonitor = touch /x\n",
            "[core]\n\thooksPath = /tmp\n",
            "[Core]\n\tSSHCommand = x\n",
            "[alias]\n\tst = !sh -c x\n",
            "[diff \"x\"]\n\ttextconv = x\n",
            "[filter \"lfs\"]\n\tsmudge = x\n",
            "[merge \"m\"]\n\tdriver = x\n",
            "[include]\n\tpath = ../evil\n",
            "[includeIf \"gitdir:/\"]\n\tpath = x\n",
            "[credential]\n\thelper = x\n",
            "[core]\n\tpager = x\n",
            "[frobnicate]\n\tx = 1\n",
            "[core\n",
        ] {
            assert!(
                !flags(before, &format!("{before}{evil}")).is_empty(),
                "{evil}"
            );
        }
        // A plain alias is inert; `!` makes it a command.
        assert!(flags("", "[alias]\n\tco = checkout\n").is_empty());
    }

    #[test]
    fn old_style_and_continued_lines_parse() {
        let k = parse("[branch.Main]\n\tremote = o # c\n[core]\n\tfsmonitor = a \\\nb\n").unwrap();
        assert_eq!(k["branch.main.remote"], ["o"]);
        assert_eq!(k["core.fsmonitor"], ["a b"]);
    }
}
