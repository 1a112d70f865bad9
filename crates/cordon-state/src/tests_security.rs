//! Regression tests for the security review: path escapes in restore/accept, the running
//! lock, set-id bits, terminal escapes, symlink targets, settings flags, writes through
//! symlinks in restore, restore plan / backup / force.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::*;

struct Fx {
    _tmp: tempfile::TempDir,
    home: PathBuf,
    claude: PathBuf,
    store: StateStore,
}

fn fx() -> Fx {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let claude = home.join(".claude");
    fs::create_dir_all(claude.join("sub")).unwrap();
    fs::write(claude.join("keep.txt"), "keep\n").unwrap();
    fs::write(claude.join("sub/x.txt"), "x\n").unwrap();
    fs::write(claude.join("sub/z.txt"), "z\n").unwrap();
    fs::set_permissions(claude.join("sub"), fs::Permissions::from_mode(0o755)).unwrap();
    let claude = fs::canonicalize(&claude).unwrap();
    let home = fs::canonicalize(&home).unwrap();
    let store = StateStore::new(tmp.path().join("state"));
    Fx {
        _tmp: tmp,
        home,
        claude,
        store,
    }
}

/// A session that added `new.txt` and changed `keep.txt`, accepted.
fn accepted(f: &Fx, id: &str) -> Session {
    let s = f.store.begin(id, std::slice::from_ref(&f.claude)).unwrap();
    fs::write(s.entries[0].upper.join("new.txt"), "new\n").unwrap();
    fs::write(s.entries[0].upper.join("keep.txt"), "agent\n").unwrap();
    let r = s.accept(&[]).unwrap();
    assert!(r.accepted, "{:?}", r.conflicts);
    s
}

fn mode(p: &Path) -> u32 {
    fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

#[test]
fn dotdot_paths_are_refused_by_restore_and_accept() {
    let f = fx();
    let docs = f.home.join("Documents");
    fs::create_dir(&docs).unwrap();
    fs::write(docs.join("precious"), "mine\n").unwrap();
    accepted(&f, "s1");
    let evil = f.claude.join("../Documents");
    let spec = format!("s1:{}", evil.display());
    assert!(matches!(
        f.store.restore(&spec, None, true),
        Err(StateError::UnsafePath { .. })
    ));
    assert!(matches!(
        f.store.restore("s1", Some(&evil), true),
        Err(StateError::UnsafePath { .. })
    ));
    assert!(f.store.restore_plan(&spec, None).is_err());
    assert_eq!(fs::read(docs.join("precious")).unwrap(), b"mine\n");
    let s2 = f
        .store
        .begin("s2", std::slice::from_ref(&f.claude))
        .unwrap();
    fs::write(s2.entries[0].upper.join("a.txt"), "a\n").unwrap();
    assert!(s2.accept(&[evil]).is_err());
    assert!(!f.claude.join("a.txt").exists());
}

#[test]
fn running_lock_blocks_accept_discard_restore() {
    let f = fx();
    accepted(&f, "done");
    let s = f
        .store
        .begin("run", std::slice::from_ref(&f.claude))
        .unwrap();
    fs::write(s.entries[0].upper.join("a.txt"), "a\n").unwrap();
    assert!(!s.is_running());
    let guard = s.hold_running().unwrap();
    assert!(s.is_running());
    assert!(matches!(s.hold_running(), Err(StateError::Running { .. })));
    let e = s.accept(&[]).unwrap_err();
    assert!(matches!(e, StateError::Running { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        "session run is still running; wait for it to end"
    );
    assert!(matches!(s.discard(), Err(StateError::Running { .. })));
    assert!(matches!(
        f.store.restore("run", None, true),
        Err(StateError::Running { .. })
    ));
    assert!(matches!(
        f.store.restore_plan("run", None),
        Err(StateError::Running { .. })
    ));
    assert!(!f.claude.join("a.txt").exists());
    // Another session is not affected.
    assert!(!f.store.open("done").unwrap().is_running());
    drop(guard);
    assert!(!s.is_running());
    assert!(s.accept(&[]).unwrap().accepted);
}

#[test]
fn setid_bits_are_flagged_shown_and_stripped() {
    let f = fx();
    let s = f.store.begin("s", std::slice::from_ref(&f.claude)).unwrap();
    let up = s.entries[0].upper.join("su");
    fs::write(&up, "#!/bin/sh\n").unwrap();
    fs::set_permissions(&up, fs::Permissions::from_mode(0o4755)).unwrap();
    if mode(&up) & 0o4000 == 0 {
        crate::tests::skip("the filesystem does not keep setuid bits for us");
        return;
    }
    let ch = s.changes().unwrap();
    assert!(
        ch[0]
            .flags
            .iter()
            .any(|x| x == "SETUID/SETGID bit (stripped on accept)"),
        "{:?}",
        ch[0].flags
    );
    let sum = s.summary().unwrap();
    assert!(sum.contains("+ su (mode 4755)"), "{sum}");
    assert!(s.accept(&[]).unwrap().accepted);
    assert_eq!(mode(&f.claude.join("su")), 0o755);
}

#[test]
fn summary_escapes_control_and_bidi_characters() {
    let f = fx();
    let s = f.store.begin("s", std::slice::from_ref(&f.claude)).unwrap();
    let up = &s.entries[0].upper;
    fs::write(up.join("evil\u{1b}[2J\n  + fake.txt"), "hi\n").unwrap();
    fs::write(
        up.join("keep.txt"),
        "keep\n\u{1b}]0;title\u{7}x\u{202e}y\u{9b}z\rw\n",
    )
    .unwrap();
    std::os::unix::fs::symlink("a\u{1b}b\u{2066}", up.join("ln")).unwrap();
    let sum = s.summary().unwrap();
    for bad in ['\u{1b}', '\u{7}', '\u{202e}', '\u{9b}', '\r', '\u{2066}'] {
        assert!(!sum.contains(bad), "{bad:?} in {sum}");
    }
    assert!(
        !sum.lines().any(|l| l.starts_with("  + fake")),
        "a name faked a line: {sum}"
    );
    assert!(
        sum.contains("+ \"evil\\u{1b}[2J\\u{a}  + fake.txt\""),
        "{sum}"
    );
    assert!(sum.contains("x\\u{202e}y\\u{9b}z\\u{d}w"), "{sum}");
    assert!(sum.contains("+ ln -> \"a\\u{1b}b\\u{2066}\""), "{sum}");
}

#[test]
fn symlink_targets_are_shown_and_escapes_flagged() {
    let f = fx();
    let s = f.store.begin("s", std::slice::from_ref(&f.claude)).unwrap();
    let up = &s.entries[0].upper;
    std::os::unix::fs::symlink("/var/tmp/victim", up.join("evil")).unwrap();
    fs::create_dir(up.join("sub")).unwrap();
    std::os::unix::fs::symlink("../x.txt", up.join("sub/up")).unwrap();
    std::os::unix::fs::symlink("../../.bashrc", up.join("sub/out")).unwrap();
    std::os::unix::fs::symlink("keep.txt", up.join("fine")).unwrap();
    let sum = s.summary().unwrap();
    const OUT: &str = "symlink pointing outside the protected path";
    assert!(
        sum.contains(&format!("+ evil -> /var/tmp/victim  FLAGGED: {OUT}")),
        "{sum}"
    );
    assert!(
        sum.contains(&format!("+ sub/out -> ../../.bashrc  FLAGGED: {OUT}")),
        "{sum}"
    );
    assert!(sum.contains("+ sub/up -> ../x.txt\n"), "{sum}");
    assert!(sum.contains("+ fine -> keep.txt\n"), "{sum}");
}

#[test]
fn agent_settings_and_command_files_are_flagged() {
    let f = fx();
    fs::write(f.claude.join("settings.json"), "{\"theme\":\"dark\"}\n").unwrap();
    let s = f.store.begin("s", std::slice::from_ref(&f.claude)).unwrap();
    let up = &s.entries[0].upper;
    fs::write(
        up.join("settings.json"),
        r#"{"theme":"dark","hooks":{"PreToolUse":[]},"statusLine":{"command":"x"},"apiKeyHelper":"y","env":{"A":"1"},"enableAllProjectMcpServers":true}"#,
    )
    .unwrap();
    fs::create_dir(up.join("commands")).unwrap();
    fs::write(up.join("commands/deploy.md"), "do it\n").unwrap();
    fs::create_dir(up.join("agents")).unwrap();
    fs::write(up.join("agents/helper.md"), "you are\n").unwrap();
    let ch = s.changes().unwrap();
    let flags_of = |rel: &str| {
        ch.iter()
            .find(|c| c.rel == Path::new(rel))
            .unwrap()
            .flags
            .clone()
    };
    let fl = flags_of("settings.json");
    for key in [
        "hooks",
        "statusLine",
        "apiKeyHelper",
        "env",
        "enableAllProjectMcpServers",
    ] {
        assert!(
            fl.iter()
                .any(|x| x.starts_with(&format!("settings key `{key}` added"))),
            "{key}: {fl:?}"
        );
    }
    for rel in ["commands/deploy.md", "agents/helper.md"] {
        assert!(
            flags_of(rel)
                .iter()
                .any(|x| x.starts_with("agent command or subagent definition")),
            "{rel}"
        );
    }
}

#[test]
fn restore_never_writes_or_chmods_through_a_symlinked_directory() {
    let f = fx();
    let s = accepted(&f, "s1");
    let outside = f.home.join("outside");
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("x.txt"), "other\n").unwrap();
    fs::set_permissions(&outside, fs::Permissions::from_mode(0o700)).unwrap();
    // The host's sub/ is swapped for a symlink, and the snapshot copy of sub/x.txt no longer
    // matches its manifest (so it is refused, which used to keep its ancestor as is).
    fs::rename(f.claude.join("sub"), f.home.join("old-sub")).unwrap();
    std::os::unix::fs::symlink(&outside, f.claude.join("sub")).unwrap();
    let snap_x = s.entries[0].snapshot.join("sub/x.txt");
    fs::remove_file(&snap_x).unwrap();
    fs::write(&snap_x, "tampered\n").unwrap();
    let r = f.store.restore("s1", None, false).unwrap();
    assert!(!outside.join("z.txt").exists(), "{r:?}");
    assert_eq!(fs::read(outside.join("x.txt")).unwrap(), b"other\n");
    assert_eq!(mode(&outside), 0o700);
    assert!(fs::symlink_metadata(f.claude.join("sub")).unwrap().is_dir());
    assert_eq!(fs::read(f.claude.join("sub/z.txt")).unwrap(), b"z\n");
    assert!(
        r.refused
            .iter()
            .any(|c| c.path == f.claude.join("sub/x.txt"))
    );
}

#[test]
fn restore_plan_backup_and_force() {
    let f = fx();
    let s = accepted(&f, "s1");
    let plan = f.store.restore_plan("s1", None).unwrap();
    assert_eq!(plan.removed, vec![f.claude.join("new.txt")]);
    assert_eq!(plan.restored, vec![f.claude.join("keep.txt")]);
    assert!(plan.backup.is_none());
    // Nothing touched.
    assert_eq!(fs::read(f.claude.join("new.txt")).unwrap(), b"new\n");
    assert_eq!(fs::read(f.claude.join("keep.txt")).unwrap(), b"agent\n");

    let r = f.store.restore("s1", None, false).unwrap();
    assert_eq!(r.removed, plan.removed);
    assert_eq!(r.restored, plan.restored);
    let backup = r.backup.clone().unwrap();
    assert!(backup.starts_with(&s.dir), "{}", backup.display());
    assert!(
        backup
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("restore-backup-")
    );
    let in_backup = |p: &Path| backup.join(p.strip_prefix("/").unwrap());
    assert_eq!(
        fs::read(in_backup(&f.claude.join("new.txt"))).unwrap(),
        b"new\n"
    );
    assert_eq!(
        fs::read(in_backup(&f.claude.join("keep.txt"))).unwrap(),
        b"agent\n"
    );
    assert!(!f.claude.join("new.txt").exists());
    assert_eq!(fs::read(f.claude.join("keep.txt")).unwrap(), b"keep\n");

    // A session never accepted: nothing of its own to undo.
    let p = f.store.begin("p", std::slice::from_ref(&f.claude)).unwrap();
    fs::write(f.claude.join("mine.txt"), "user edit\n").unwrap();
    assert!(matches!(
        f.store.restore("p", None, false),
        Err(StateError::WrongStatus { .. })
    ));
    assert!(f.claude.join("mine.txt").exists());
    let r = f.store.restore("p", None, true).unwrap();
    assert_eq!(r.removed, vec![f.claude.join("mine.txt")]);
    drop(p);
}
