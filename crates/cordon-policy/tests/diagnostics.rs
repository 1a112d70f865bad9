//! Broken policies: each is located (file:line:col) and carries a help line.

use std::fs;

use cordon_policy::load;

mod common;
use common::*;

// ---------------------------------------------------------------------------------------------
// Broken policies: each is located (file:line:col) and carries a help line.

#[test]
fn broken_01_toml_syntax() {
    let (s, line, col) = broken("[filesystem]\nreadable = [\"/\"\n");
    assert_eq!((line, col), (2, 16), "{s}");
    assert!(s.contains("unclosed array"), "{s}");
    assert!(s.contains("invalid TOML"), "{s}");
}

#[test]
fn broken_01b_unclosed_string() {
    let (s, line, _) = broken("[env]\npass = [\"TERM]\n");
    assert_eq!(line, 2, "{s}");
    assert!(s.contains("invalid TOML"), "{s}");
}

#[test]
fn broken_02_unknown_section() {
    let (s, line, col) = broken("[filesystem]\n\n[firewall]\nallow = true\n");
    assert_eq!((line, col), (3, 2), "{s}");
    assert!(s.contains("unknown section `firewall`"), "{s}");
    assert!(
        s.contains("a section exists only where something enforces it"),
        "{s}"
    );
}

#[test]
fn broken_03_unknown_key_with_suggestion() {
    let (s, line, col) = broken("[filesystem]\nreadable = []\nwriteable = [\"/x\"]\n");
    assert_eq!((line, col), (3, 1));
    assert!(
        s.starts_with("error: unknown key `writeable` in [filesystem]\n"),
        "{s}"
    );
    assert!(
        s.contains("\n 3 | writeable = [\"/x\"]\n   | ^^^^^^^^^\n"),
        "{s}"
    );
    assert!(
        s.ends_with(
            "= help: expected one of `readable`, `writable`, `deny`, `read_only`, `landlock`, `home`, `home_show`, `home_tools`; did you mean `writable`?"
        ),
        "{s}"
    );
}

#[test]
fn broken_03b_unknown_key_in_profile_section() {
    let (s, line, col) = broken("[profile.x.limits]\nmemroy = \"1G\"\n");
    assert_eq!((line, col), (2, 1));
    assert!(
        s.contains("unknown key `memroy` in [profile.x.limits]"),
        "{s}"
    );
    assert!(s.contains("did you mean `memory`?"), "{s}");
}

#[test]
fn broken_04_wrong_type() {
    let (s, line, col) = broken("[filesystem]\nwritable = \"/x\"\n");
    assert_eq!((line, col), (2, 12));
    assert!(
        s.contains("`writable` in [filesystem] must be an array of strings, found a string"),
        "{s}"
    );
    assert!(
        s.contains("help: write it as an array: writable = [\"/x\"]"),
        "{s}"
    );
}

#[test]
fn broken_04b_wrong_element_type() {
    let (s, line, col) = broken("[env]\npass = [\"TERM\", 3]\n");
    assert_eq!((line, col), (2, 17));
    assert!(s.contains("must be strings, found an integer"), "{s}");
}

#[test]
fn broken_05_relative_path() {
    let (s, line, col) = broken("[filesystem]\nwritable = [\n  \"/ok\",\n  \"build/out\",\n]\n");
    assert_eq!((line, col), (4, 3));
    assert!(s.contains("relative path \"build/out\" in writable"), "{s}");
    assert!(
        s.contains("paths must be absolute or start with ~, $HOME or ${PROJECT}"),
        "{s}"
    );
}

#[test]
fn broken_06_unknown_variable() {
    let (s, line, col) = broken("[filesystem]\ndeny = [\"${FOO}/x\"]\n");
    assert_eq!((line, col), (2, 10));
    assert!(s.contains("unknown variable `FOO`"), "{s}");
    assert!(
        s.contains("only $HOME (or ${HOME}, ~) and ${PROJECT} expand"),
        "{s}"
    );
    assert!(
        s.contains("|          ^^^^^^\n"),
        "caret under ${{FOO}}: {s}"
    );
}

#[test]
fn broken_07_bad_globs() {
    for (glob, why) in [
        ("", "is empty"),
        ("LC_**", "contains `**`"),
        ("LC-ALL", "letters, digits"),
        ("1ABC", "starts with a digit"),
    ] {
        let (s, line, col) = broken(&format!("[env]\npass = [\"TERM\", \"{glob}\"]\n"));
        assert_eq!((line, col), (2, 17), "{s}");
        assert!(s.contains("invalid variable name or glob"), "{s}");
        assert!(s.contains(why), "{glob}: {s}");
    }
}

#[test]
fn broken_08_bad_memory_size() {
    let (s, line, col) = broken("[limits]\npids = 10\nmemory = \"4 gigs\"\n");
    assert_eq!((line, col), (3, 10));
    assert!(s.contains("invalid memory size \"4 gigs\""), "{s}");
    assert!(s.contains("K, M, G or T (1024-based)"), "{s}");
}

#[test]
fn broken_09_writable_and_denied() {
    let (s, line, col) = broken("[filesystem]\nwritable = [\"~/.ssh\"]\n");
    assert_eq!((line, col), (2, 13));
    assert!(s.contains("is both writable and denied (built-in)"), "{s}");
    assert!(s.contains("deny always wins"), "{s}");
}

#[test]
fn broken_09b_writable_inside_denied() {
    let (s, line, col) = broken("[filesystem]\ndeny = [\"/data\"]\nwritable = [\"/data/cache\"]\n");
    assert_eq!((line, col), (3, 13));
    assert!(
        s.contains("writable path /data/cache is inside denied path /data"),
        "{s}"
    );
}

#[test]
fn broken_09c_deny_added_later_over_a_writable() {
    // The user's profile denies a parent of the user's base writable path: the deny is blamed.
    let env = Env::new();
    env.user(
        "[filesystem]\nwritable = [\"/data/cache\"]\n[profile.p.filesystem]\ndeny = [\"/data\"]\n",
    );
    let mut o = env.opts();
    o.profile = Some("p".into());
    let e = load(&o).unwrap_err();
    let d = e.diagnostic().unwrap();
    assert_eq!(
        d.location.as_ref().map(|l| (l.line, l.column)),
        Some((4, 9)),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains("denied path /data contains writable path /data/cache"),
        "{e}"
    );
}

#[test]
fn broken_09d_project_inside_denied() {
    let env = Env::new();
    env.user(&format!(
        "[filesystem]\ndeny = [\"{}\"]\n",
        env.project.parent().unwrap().display()
    ));
    let e = env.load_err();
    let s = e.to_string();
    assert!(s.contains("the project directory"), "{s}");
    assert_eq!(
        e.diagnostic()
            .unwrap()
            .location
            .as_ref()
            .map(|l| (l.line, l.column)),
        Some((2, 9))
    );
}

#[test]
fn broken_10_never_passable_variables() {
    let (s, line, col) = broken("[env]\npass = [\"TERM\", \"LD_PRELOAD\"]\n");
    assert_eq!((line, col), (2, 17));
    assert!(s.contains("`LD_PRELOAD`, which is never passed"), "{s}");
    assert!(s.contains("these are always dropped"), "{s}");

    let (s, line, col) = broken("[env]\npass = [\"LD_*\"]\n");
    assert_eq!((line, col), (2, 9));
    assert!(s.contains("these are always dropped"), "{s}");

    let (s, line, col) = broken("[env]\n[env.set]\nOK = \"1\"\nBASH_ENV = \"/x\"\n");
    assert_eq!((line, col), (4, 1));
    assert!(s.contains("env.set names `BASH_ENV`"), "{s}");
    assert!(s.contains("these are always dropped"), "{s}");
}

#[test]
fn broken_11_limits_out_of_range() {
    for (text, (line, col), key) in [
        ("[limits]\npids = 0\n", (2, 8), "pids"),
        ("[limits]\ncpu = -1\n", (2, 7), "cpu"),
        ("[limits]\nmemory = 0\n", (2, 10), "memory"),
        ("[limits]\nmemory = \"0G\"\n", (2, 10), "memory"),
        ("[limits]\nnofile = -5\n", (2, 10), "nofile"),
        ("[limits]\npids = 99999999999\n", (2, 8), "pids"),
    ] {
        let (s, l, c) = broken(text);
        assert_eq!((l, c), (line, col), "{s}");
        assert!(s.contains(&format!("`{key}` is out of range")), "{s}");
        assert!(s.contains("for no limit"), "{s}");
    }
}

#[test]
fn broken_12_bad_landlock_value() {
    let (s, line, col) = broken("[filesystem]\nlandlock = \"maybe\"\n");
    assert_eq!((line, col), (2, 12));
    assert!(s.contains("invalid value \"maybe\" for `landlock`"), "{s}");
    assert!(
        s.contains("expected \"required\" or \"best-effort\""),
        "{s}"
    );

    let (s, _, _) = broken("[filesystem]\nlandlock = \"best_effort\"\n");
    assert!(s.contains("did you mean \"best-effort\"?"), "{s}");

    let (s, line, col) = broken("[filesystem]\nlandlock = true\n");
    assert_eq!((line, col), (2, 12));
    assert!(s.contains("must be a string, found a boolean"), "{s}");
}

#[test]
fn broken_13_profile_table_shapes() {
    let (s, line, col) = broken("[profile]\nclaude = 1\n");
    assert_eq!((line, col), (2, 10));
    assert!(s.contains("must be a table, found an integer"), "{s}");

    let (s, line, col) = broken("[profile.x]\nwritable = [\"/x\"]\n");
    assert_eq!((line, col), (2, 1));
    assert!(s.contains("unknown key `writable` in [profile.x]"), "{s}");
}

#[test]
fn broken_14_unknown_syscall_with_suggestion() {
    let (s, line, col) = broken("[syscalls]\ndeny = [\"chroot\", \"mout\"]\n");
    assert_eq!((line, col), (2, 19), "{s}");
    assert!(
        s.starts_with("error: unknown syscall \"mout\" in syscalls.deny\n"),
        "{s}"
    );
    assert!(s.contains("did you mean `mount`?"), "{s}");
    assert!(s.contains("without prefixes"), "{s}");

    let (s, _, _) = broken("[syscalls]\nallow = [\"__NR_ptrace\"]\n");
    assert!(s.contains("did you mean `ptrace`?"), "{s}");
}

#[test]
fn broken_15_bad_exec_action() {
    let (s, line, col) = broken(
        "[exec]\nask_timeout = 5\n\n[[exec.rule]]\npattern = \"npm publish *\"\naction = \"prompt\"\n",
    );
    assert_eq!((line, col), (6, 10), "{s}");
    assert!(
        s.contains("invalid value \"prompt\" for `action` in [[exec.rule]]"),
        "{s}"
    );
    assert!(s.contains("expected \"allow\", \"deny\" or \"ask\""), "{s}");

    let (s, _, _) = broken("[[exec.rule]]\npattern = \"x\"\naction = \"alow\"\n");
    assert!(s.contains("did you mean \"allow\"?"), "{s}");
}

#[test]
fn broken_16_allow_of_a_syscall_not_denied() {
    let (s, line, col) = broken("[syscalls]\nallow = [\"ptrace\", \"chroot\"]\n");
    assert_eq!((line, col), (2, 20), "{s}");
    assert!(
        s.contains("syscall `chroot` is not denied by default, so there is nothing to allow"),
        "{s}"
    );
    assert!(s.contains("denied by default: `kexec_load`"), "{s}");
    assert!(s.contains("`ptrace`"), "{s}");

    let (s, _, _) = broken("[syscalls]\nallow = [\"clone\"]\n");
    assert!(s.contains("nested_userns = true"), "{s}");
}

#[test]
fn broken_17_bad_exec_patterns_and_timeout() {
    let (s, line, col) = broken("[exec]\ndeny = [\"sudo *\", \"\"]\n");
    assert_eq!((line, col), (2, 19), "{s}");
    assert!(s.contains("empty exec pattern in exec.deny"), "{s}");

    let (s, line, col) = broken("[[exec.rule]]\npattern = \" \"\naction = \"deny\"\n");
    assert_eq!((line, col), (2, 11), "{s}");
    assert!(s.contains("empty exec pattern in [[exec.rule]]"), "{s}");

    let (s, line, col) = broken("[exec]\nask_timeout = 0\n");
    assert_eq!((line, col), (2, 15), "{s}");
    assert!(s.contains("`ask_timeout` is out of range: 0"), "{s}");

    let (s, line, col) = broken("[profile.x.exec]\nask_timout = 5\n");
    assert_eq!((line, col), (2, 1), "{s}");
    assert!(s.contains("did you mean `ask_timeout`?"), "{s}");

    // A pattern need not start with a program name.
    let env = Env::new();
    env.user("[exec]\nask = [\"* --force *\"]\n");
    assert_eq!(env.load().plan.exec.rules[4].pattern, "* --force *");
}

#[test]
fn broken_18_bad_on_exit_value() {
    let (s, line, col) = broken("[state]\nprotect = []\non_exit = \"save\"\n");
    assert_eq!((line, col), (3, 11), "{s}");
    assert!(
        s.starts_with("error: invalid value \"save\" for `on_exit` in [state]\n"),
        "{s}"
    );
    assert!(
        s.contains("expected \"ask\", \"keep\", \"discard\" or \"pending\""),
        "{s}"
    );

    let (s, _, _) = broken("[profile.p.state]\non_exit = \"dicsard\"\n");
    assert!(s.contains("did you mean \"discard\"?"), "{s}");

    let (s, line, col) = broken("[state]\nproject_files = \"writable\"\n");
    assert_eq!((line, col), (2, 17), "{s}");
    assert!(s.contains("expected \"readonly\" or \"staged\""), "{s}");

    let (s, line, col) = broken("[state]\nprotect = [\"~/.a\", \"rel\"]\n");
    assert_eq!((line, col), (2, 20), "{s}");
    assert!(s.contains("relative path \"rel\" in protect"), "{s}");

    let (s, _, _) = broken("[state]\nkeep = true\n");
    assert!(
        s.contains("expected one of `protect`, `on_exit`, `project_files`"),
        "{s}"
    );
}

#[test]
fn broken_19_protected_inside_denied() {
    let (s, line, col) = broken("[state]\nprotect = [\"~/.ssh/config\"]\n");
    assert_eq!((line, col), (2, 12), "{s}");
    assert!(
        s.contains("protected path ") && s.contains(".ssh/config is inside denied path"),
        "{s}"
    );
    assert!(s.contains("(built-in)"), "{s}");
    assert!(s.contains("remove it from `protect`"), "{s}");

    let (s, line, col) =
        broken("[filesystem]\ndeny = [\"/data\"]\n[state]\nprotect = [\"/data\"]\n");
    assert_eq!((line, col), (4, 12), "{s}");
    assert!(s.contains("/data is both protected and denied"), "{s}");

    // The deny written later is blamed.
    let env = Env::new();
    env.user("[state]\nprotect = [\"/data/x\"]\n[profile.p.filesystem]\ndeny = [\"/data\"]\n");
    let mut o = env.opts();
    o.profile = Some("p".into());
    let e = load(&o).unwrap_err();
    assert!(
        e.to_string()
            .contains("denied path /data contains protected path /data/x"),
        "{e}"
    );
}

#[test]
fn broken_20_protected_path_contains_the_project() {
    let env = Env::new();
    env.user(&format!(
        "[state]\nprotect = [\"~/.x\", \"{}\"]\n",
        env.project.parent().unwrap().display()
    ));
    let e = env.load_err();
    let s = e.to_string();
    assert!(s.contains("contains the project directory"), "{s}");
    assert!(s.contains("the project itself cannot be staged"), "{s}");
    let loc = e.diagnostic().unwrap().location.clone().unwrap();
    assert_eq!((loc.line, loc.column), (2, 20), "{s}");

    let env = Env::new();
    env.user("[state]\nprotect = [\"${PROJECT}\"]\n");
    let s = env.load_err().to_string();
    assert!(s.contains("is the project directory"), "{s}");
    assert!(s.contains("the project itself cannot be staged"), "{s}");
}

#[test]
fn broken_not_utf8() {
    let env = Env::new();
    fs::create_dir_all(env.user_config.parent().unwrap()).unwrap();
    fs::write(&env.user_config, b"[env]\npass = [\"\xff\"]\n").unwrap();
    let e = env.load_err();
    let d = e.diagnostic().unwrap();
    assert!(d.message.contains("not valid UTF-8"));
    assert_eq!(
        d.location.as_ref().map(|l| (l.line, l.column)),
        Some((2, 10))
    );
}

#[test]
fn broken_project_file_is_located_in_the_project_file() {
    let env = Env::new();
    env.project("[limits]\ncpu = \"lots\"\n");
    let e = env.load_err();
    let d = e.diagnostic().unwrap();
    assert_eq!(d.file.as_deref(), Some(env.project_file().as_path()));
    assert_eq!(
        d.location.as_ref().map(|l| (l.line, l.column)),
        Some((2, 7))
    );
    assert!(
        e.to_string().contains("must be a number, found a string"),
        "{e}"
    );
}

#[test]
fn no_panic_on_odd_inputs() {
    for text in [
        "",
        "\n\n\n",
        "[[filesystem]]\nreadable = []\n",
        "filesystem = 3",
        "[env]\nset = 3",
        "[env]\nset = { A = 1 }",
        "[env.set]\n\"\" = \"x\"",
        "[env.set]\n\"A=B\" = \"x\"",
        "[filesystem]\nreadable = [\"\"]",
        "[filesystem]\nreadable = [\"/a\\u0000b\"]",
        "[filesystem]\nreadable = [\"~root\"]",
        "[filesystem]\nreadable = [\"/x$\"]",
        "[limits]\ncpu = nan",
        "[limits]\ncpu = inf",
        "[limits]\nmemory = 99999999999999999999",
        "[limits]\nmemory = \"99999999999999T\"",
        "[limits]\nmemory = 1.5",
        "[profile.\"\"]\n",
        "[profile.\"a b\".env]\npass = [\"X\"]",
        "a.b.c = 1",
        "\u{feff}[filesystem]\n",
        "[filesystem]\r\nreadable = [1]\r\n",
        "[syscalls]\nallow = [\"\u{0}\"]",
        "[syscalls]\ndeny = [\"ПТРАСЕ\"]",
        "[syscalls]\nnested_userns = 1",
        "[exec]\nask_timeout = 99999999999999999999",
        "[exec]\nask_timeout = -1",
        "[exec]\nrule = []",
        "[exec]\nrule = [{}]",
        "[exec.rule]\npattern = \"x\"",
        "[[exec.rule]]\npattern = [\"x\"]\naction = \"ask\"",
        "[[exec.rule]]\npattern = \"\u{0}\"\naction = \"ask\"",
        "[[exec]]\n",
        "[[syscalls]]\n",
        "exec = []",
    ] {
        let env = Env::new();
        env.user(text);
        match load(&env.opts()) {
            Ok(_) => {}
            Err(e) => {
                let s = e.to_string();
                assert!(s.starts_with("error: "), "{s}");
                assert!(s.contains("help:"), "{text:?}: {s}");
            }
        }
    }
}

#[test]
fn broken_http_rule_named_like_cordons_own() {
    for name in ["dlp", "dlp:uploads", "default", "builtin:x", "a → judge"] {
        let (s, line, _) = broken(&format!(
            "[[http.rule]]\nhost = \"api.example.com\"\nname = \"{name}\"\naction = \"allow\"\n"
        ));
        assert_eq!(line, 3, "{s}");
        assert!(s.contains("reads as one of cordon's own rules"), "{s}");
        assert!(s.contains("choose another name"), "{s}");
    }
}
