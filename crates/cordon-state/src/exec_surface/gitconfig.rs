//! Git config as review needs it: which keys a change touches (read by git itself, see
//! [`super::asker`]), which of those make git run a command (or read one from elsewhere), and
//! which keys or values it removes (held: a truncated config loses remotes, branches and
//! identity, and is no change git makes in everyday work).

pub(crate) use super::asker::Keys;

/// `text` read as git config by git itself ([`super::asker::config_keys`]). `None`: git is
/// absent or refuses it; the whole file is then held, since what git makes of it cannot be
/// predicted here.
pub(crate) fn parse(text: &str) -> Option<Keys> {
    super::asker::config_keys(text)
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
pub(crate) fn inert(name: &str) -> bool {
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
    let mut removed = Vec::new();
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
    for (name, values) in &b {
        match a.get(name) {
            None if executes(name, values).is_some() => {
                out.push(format!("git config `{name}` removed"))
            }
            None => removed.push(name.clone()),
            // A multi-valued key (`remote.*.fetch`) that lost values.
            Some(now) if now.len() < values.len() => removed.push(name.clone()),
            Some(_) => {}
        }
    }
    if !removed.is_empty() {
        out.push(format!(
            "git config keys removed: {}",
            short(&removed.join(", "))
        ));
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

    /// Issue #44: a reader that joins `\`-continued lines before it strips comments saw
    /// `user.fsmonitor` (inert) where git sees `core.fsmonitor`. Each of these hides the key
    /// from such a reader; git (and so review) sees it.
    #[test]
    fn a_continued_comment_hides_nothing() {
        if parse("").is_none() {
            return; // no git here: every config change is held (see the held test)
        }
        for evil in [
            "[user]\n\tname = a\n# \\\n[core]\n\tfsmonitor = touch /x\n",
            "[user]\n\tname = x # \\\n[core]\n\tfsmonitor = touch /x\n",
            "[user]\n[core] # \\\n\tfsmonitor = touch /x\n",
            "[user]\n; \\\n[core]\n\tfsmonitor = touch /x\n",
        ] {
            let f = flags("[user]\n\tname = a\n", evil);
            assert!(
                f.iter().any(|x| x.contains("core.fsmonitor")),
                "{evil:?}: {f:?}"
            );
        }
    }

    #[test]
    fn removed_keys_and_sections_are_held() {
        if parse("").is_none() {
            return;
        }
        let before = "[core]\n\tbare = false\n[remote \"origin\"]\n\turl = /x\n\tfetch = a\n\tfetch = b\n[user]\n\tname = A\n";
        assert!(flags(before, before).is_empty());
        // Truncated: remotes and identity gone.
        let f = flags(before, "[core]\n\tbare = false\n");
        assert!(f.iter().any(|x| x.contains("removed")), "{f:?}");
        // One value of a multi-valued key gone.
        let fewer = before.replace("\tfetch = b\n", "");
        assert!(!flags(before, &fewer).is_empty());
        // Changing a value or adding keys is not a removal.
        let changed = before.replace("name = A", "name = B");
        assert!(
            flags(before, &changed).is_empty(),
            "{:?}",
            flags(before, &changed)
        );
    }
}
