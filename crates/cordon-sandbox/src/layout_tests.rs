//! The layout's unit tests: what `prepare_with_state` makes of plans on real host paths.

#[test]
fn canon_resolves_as_canonicalize_does() {
    use std::os::unix::fs::symlink;
    let t = host_dir();
    let b = t.path();
    std::fs::create_dir_all(b.join("real/sub")).unwrap();
    std::fs::write(b.join("real/file"), "x").unwrap();
    symlink(b.join("real"), b.join("dirlink")).unwrap();
    symlink("file", b.join("real/filelink")).unwrap();
    symlink("../real/sub", b.join("real/sub/up")).unwrap();
    symlink(b.join("nowhere"), b.join("dangling")).unwrap();
    let mut canon = super::Canon::default();
    for rel in [
        "real",
        "real/sub",
        "real/file",
        "dirlink",
        "dirlink/file",
        "dirlink/sub",
        "real/filelink",
        "dirlink/filelink",
        "real/sub/up",
        "dangling",
        "missing",
        "missing/deeper",
        "real/file/under-a-file",
        "dirlink/missing",
    ] {
        let p = b.join(rel);
        // Twice: the second answer comes from what the first remembered.
        for _ in 0..2 {
            assert_eq!(canon.get(&p), std::fs::canonicalize(&p).ok(), "{rel}");
        }
    }
    for p in ["/", "/etc", "relative/path", "/etc/../etc/passwd", "/./etc"] {
        let p = std::path::Path::new(p);
        assert_eq!(
            canon.get(p),
            std::fs::canonicalize(p).ok(),
            "{}",
            p.display()
        );
    }
}

use super::*;
use cordon_policy::LandlockMode;

#[test]
fn what_no_bind_shows_and_the_own_dev_need_no_mask() {
    let t = host_dir();
    let base = t.path().canonicalize().unwrap();
    let (shown, hidden) = (base.join("shown"), base.join("hidden"));
    std::fs::create_dir_all(&shown).unwrap();
    std::fs::create_dir_all(&hidden).unwrap();
    std::fs::write(hidden.join("key"), "x").unwrap();
    let l = prepare(&plan(
        &[&shown],
        &[],
        &[
            &hidden.join("key"),
            Path::new("/dev/kmsg"),
            Path::new("/dev/tty"),
        ],
        &[&hidden],
    ));
    // The host's /dev/tty is bound into the own /dev: its mask stays.
    let masked: Vec<&Path> = l.masks().map(|(p, _)| p).collect();
    assert_eq!(masked, [Path::new("/dev/tty")], "{:#?}", l.mounts);
    let why: Vec<(&Path, &UnseenWhy)> = l
        .unseen
        .iter()
        .map(|u| (u.path.as_path(), &u.why))
        .collect();
    assert!(
        why.contains(&(hidden.join("key").as_path(), &UnseenWhy::Outside)),
        "{why:?}"
    );
    assert!(
        why.contains(&(Path::new("/dev/kmsg"), &UnseenWhy::OwnFs("/dev".into())))
            || !Path::new("/dev/kmsg").exists(),
        "{why:?}"
    );
    assert!(
        !l.mounts.iter().any(|m| m.path() == hidden),
        "{:#?}",
        l.mounts
    );
}

/// A directory of the host's that the sandbox sees: not under `/tmp`, which is its own.
fn host_dir() -> tempfile::TempDir {
    tempfile::tempdir_in("/var/tmp").unwrap()
}

fn plan(readable: &[&Path], writable: &[&Path], deny: &[&Path], ro: &[&Path]) -> FilesystemPlan {
    let rules = |v: &[&Path]| v.iter().map(|p| PathRule::new(*p, "test")).collect();
    FilesystemPlan {
        readable: rules(readable),
        writable: rules(writable),
        deny: rules(deny),
        read_only: rules(ro),
        landlock: LandlockMode::Required,
        ..Default::default()
    }
}

#[test]
fn what_the_private_tmp_covers_needs_no_mask() {
    let t = tempfile::tempdir_in("/tmp").unwrap();
    let base = t.path().canonicalize().unwrap();
    let (agent, proj) = (base.join("ssh-x/agent.1"), base.join("proj"));
    std::fs::create_dir_all(agent.parent().unwrap()).unwrap();
    std::fs::create_dir_all(&proj).unwrap();
    std::fs::write(&agent, "").unwrap();
    std::fs::write(proj.join("secret"), "x").unwrap();
    std::fs::write(base.join("ro"), "x").unwrap();
    let l = prepare(&plan(
        &[Path::new("/")],
        &[&proj],
        &[&agent, &proj.join("secret")],
        &[&base.join("ro")],
    ));
    let masked: Vec<&Path> = l.masks().map(|(p, _)| p).collect();
    assert_eq!(masked, [proj.join("secret")], "{:#?}", l.mounts);
    assert_eq!(
        l.unseen,
        [Unseen {
            path: agent,
            rule: "test".into(),
            why: UnseenWhy::OwnFs("/tmp".into()),
        }]
    );
    assert!(
        !l.mounts.iter().any(|m| m.path() == base.join("ro")),
        "{:#?}",
        l.mounts
    );
}

#[test]
fn normalize_folds_dots() {
    assert_eq!(
        normalize(Path::new("/a/./b/../c//d")),
        PathBuf::from("/a/c/d")
    );
    assert_eq!(normalize(Path::new("/../x")), PathBuf::from("/x"));
}

#[test]
fn orders_parents_first_and_masks_last() {
    let t = host_dir();
    let home = t.path().canonicalize().unwrap();
    let proj = home.join("proj");
    std::fs::create_dir_all(proj.join(".git/hooks")).unwrap();
    std::fs::write(proj.join(".git/config"), "").unwrap();
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".netrc"), "x").unwrap();
    let l = prepare(&plan(
        &[Path::new("/")],
        &[&proj],
        &[
            &home.join(".ssh"),
            &home.join(".netrc"),
            &home.join(".ssh/id_rsa"),
            &home.join(".aws"),
        ],
        &[
            &proj.join(".git/hooks"),
            &proj.join(".git/config"),
            &proj.join(".envrc"),
        ],
    ));
    let pos = |f: &dyn Fn(&MountOp) -> bool| l.mounts.iter().position(f).unwrap();
    let root =
        pos(&|m| matches!(m, MountOp::Bind { path, writable: false } if path == Path::new("/")));
    let tmp = pos(&|m| matches!(m, MountOp::Tmpfs { path } if path == Path::new("/tmp")));
    let pb = pos(&|m| matches!(m, MountOp::Bind { path, writable: true } if *path == proj));
    let pin = pos(&|m| matches!(m, MountOp::Pin { path } if *path == proj.join(".git")));
    let hooks =
        pos(&|m| matches!(m, MountOp::ReadOnly { path } if *path == proj.join(".git/hooks")));
    let ssh = pos(&|m| matches!(m, MountOp::MaskDir { path, .. } if *path == home.join(".ssh")));
    let netrc =
        pos(&|m| matches!(m, MountOp::MaskFile { path, .. } if *path == home.join(".netrc")));
    assert!(root < tmp && tmp < pb && pb < pin && pin < hooks && hooks < ssh && hooks < netrc);
    // Nested and missing denies produce no mount of their own; missing read-only is skipped.
    assert!(
        !l.mounts
            .iter()
            .any(|m| m.path() == home.join(".ssh/id_rsa"))
    );
    assert!(!l.mounts.iter().any(|m| m.path() == home.join(".aws")));
    assert!(!l.mounts.iter().any(|m| m.path() == proj.join(".envrc")));
}

#[test]
fn masked_copies_replace_what_they_cover_and_only_that() {
    let t = host_dir();
    let home = t.path().canonicalize().unwrap();
    std::fs::create_dir_all(home.join(".config/gh")).unwrap();
    std::fs::write(home.join(".config/gh/hosts.yml"), "token: real").unwrap();
    std::fs::write(home.join(".config/gh/config.yml"), "x").unwrap();
    std::fs::write(home.join(".netrc"), "password real").unwrap();
    std::fs::write(home.join("open.key"), "real").unwrap();
    let mut l = prepare(&plan(
        &[Path::new("/")],
        &[],
        &[&home.join(".config/gh"), &home.join(".netrc")],
        &[],
    ));
    for (f, c) in [
        (".config/gh/hosts.yml", "token: ph"),
        (".netrc", "password ph"),
        ("open.key", "ph"),
    ] {
        assert_eq!(l.show_copy(&home.join(f), c).unwrap(), home.join(f));
        assert!(l.landlock.grants_read(&home.join(f)), "{f}");
    }
    let gh = l
        .mounts
        .iter()
        .find_map(|m| match m {
            MountOp::MaskDir { path, shown, .. } if *path == home.join(".config/gh") => {
                Some(shown.clone())
            }
            _ => None,
        })
        .unwrap();
    assert_eq!(gh, [(PathBuf::from("hosts.yml"), "token: ph".to_string())]);
    let content = |p: PathBuf| {
        l.mounts
            .iter()
            .any(|m| matches!(m, MountOp::Content { path, .. } if *path == p))
    };
    assert!(
        content(home.join(".netrc")),
        "the masked file becomes the copy"
    );
    assert!(
        content(home.join("open.key")),
        "an unmasked file is covered"
    );
    assert!(!l.masks().any(|(p, _)| p == home.join(".netrc")));
    assert!(l.show_copy(&home.join("missing"), "x").is_err());
    assert!(
        l.show_copy(&home.join(".config"), "x").is_err(),
        "not a file"
    );
}

#[test]
fn a_socket_is_bound_onto_a_file_placed_in_its_mask_after_the_mask() {
    let t = host_dir();
    let run = t.path().canonicalize().unwrap().join("run");
    std::fs::create_dir_all(&run).unwrap();
    let mut l = prepare(&plan(&[Path::new("/")], &[], &[&run], &[]));
    let at = run.join("cordon/ssh-agent.sock");
    l.place_socket(&at, Path::new("/host/agent.sock")).unwrap();
    let mask = l
        .mounts
        .iter()
        .position(|m| matches!(m, MountOp::MaskDir { shown, .. } if shown.iter().any(|(p, c)| p == Path::new("cordon/ssh-agent.sock") && c.is_empty())))
        .expect("an empty mount point in the mask");
    let sock = l
        .mounts
        .iter()
        .position(|m| matches!(m, MountOp::Socket { path, host } if *path == at && host == Path::new("/host/agent.sock")))
        .unwrap();
    assert!(mask < sock);
    assert!(
        l.place_socket(Path::new("/usr/x.sock"), Path::new("/h"))
            .is_err()
    );
}

#[test]
fn holes_answer_as_starts_with_does() {
    let denied: Vec<PathBuf> = ["/etc/shadow", "/home/u/.ssh", "/home/u/.config/gh", "/run"]
        .iter()
        .map(PathBuf::from)
        .collect();
    let holes = Holes::new(denied.iter().map(PathBuf::as_path));
    let probes = [
        "/",
        "/etc",
        "/etc/shadow",
        "/etc/shadow-",
        "/etc/shadow/x",
        "/home",
        "/home/u",
        "/home/u/.ssh",
        "/home/u/.sshd",
        "/home/u/.ssh/id",
        "/home/u/.config",
        "/home/u/.config/gh/hosts.yml",
        "/home/u/.config/ghx",
        "/run",
        "/running",
        "/usr",
        "/home/u/./.ssh",
        "/home//u/.config",
    ];
    for p in probes.map(Path::new) {
        assert_eq!(
            holes.covers(p),
            denied.iter().any(|e| within(p, e)),
            "covers {}",
            p.display()
        );
        assert_eq!(
            holes.holds(p),
            denied.iter().any(|e| within(e, p)),
            "holds {}",
            p.display()
        );
    }
}

#[test]
fn symlinked_deny_masks_the_target() {
    let t = host_dir();
    let base = t.path().canonicalize().unwrap();
    std::fs::create_dir_all(base.join("real-ssh")).unwrap();
    std::os::unix::fs::symlink(base.join("real-ssh"), base.join(".ssh")).unwrap();
    let l = prepare(&plan(&[Path::new("/")], &[], &[&base.join(".ssh")], &[]));
    assert!(l.masks().any(|(p, _)| p == base.join("real-ssh")));
}

#[test]
fn landlock_carves_holes_for_denied_paths() {
    let t = host_dir();
    let base = t.path().canonicalize().unwrap();
    for d in ["a", "secret", "b/c", "b/d"] {
        std::fs::create_dir_all(base.join(d)).unwrap();
    }
    std::os::unix::fs::symlink(base.join("secret"), base.join("sneaky")).unwrap();
    std::os::unix::fs::symlink(base.join("a"), base.join("fine")).unwrap();
    std::fs::write(base.join("b/file"), "f").unwrap();
    std::fs::write(base.join("secret/key"), "k").unwrap();
    let l = prepare(&plan(
        &[&base],
        &[],
        &[&base.join("secret"), &base.join("b/d")],
        &[],
    ));
    let r = &l.landlock;
    assert!(r.list_only.contains(&base) && r.list_only.contains(&base.join("b")));
    assert!(r.read.contains(&base.join("a")) && r.read.contains(&base.join("b/c")));
    assert!(r.read.contains(&base.join("fine")));
    // A file the listing found gets a file's rule; a link's target kind is not known.
    assert_eq!(r.read_files, vec![base.join("b/file")]);
    assert!(
        !r.read
            .iter()
            .chain(&r.read_files)
            .any(|p| p.starts_with(base.join("secret")) || p.starts_with(base.join("b/d")))
    );
    assert!(
        !r.read.contains(&base.join("sneaky")),
        "a symlink into a hole is not granted"
    );
}

#[test]
fn a_staged_git_dir_keeps_its_objects_in_its_layer_and_drops_read_only_inside() {
    let t = host_dir();
    let proj = t.path().canonicalize().unwrap().join("proj");
    for d in [".git/objects", ".git/hooks", ".git/modules/sub/objects"] {
        std::fs::create_dir_all(proj.join(d)).unwrap();
    }
    std::fs::write(proj.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(proj.join(".git/modules/sub/HEAD"), "x\n").unwrap();
    std::fs::write(proj.join(".git/config"), "").unwrap();
    let staged = [Staged::Dir {
        path: proj.join(".git"),
        upper: t.path().join("u"),
        work: t.path().join("w"),
    }];
    let l = prepare_with_state(
        &plan(
            &[Path::new("/")],
            &[&proj],
            &[],
            &[&proj.join(".git/hooks"), &proj.join(".git/config")],
        ),
        &staged,
    );
    let pos = |want: &Path| l.mounts.iter().position(|m| m.path() == want);
    let overlay = pos(&proj.join(".git")).unwrap();
    assert!(
        matches!(l.mounts[overlay], MountOp::Overlay { .. }),
        "{:?}",
        l.mounts
    );
    // Object stores are not bound in place (deletions would reach the host at once):
    // they are the overlay's, like the rest of the git dir.
    for o in [".git/objects", ".git/modules/sub/objects"] {
        assert!(pos(&proj.join(o)).is_none(), "{o} bound: {:?}", l.mounts);
    }
    assert!(
        !l.mounts
            .iter()
            .any(|m| matches!(m, MountOp::ReadOnly { .. })),
        "read-only inside a staged git dir would break git's renames: {:?}",
        l.mounts
    );
}

#[test]
fn a_symlinked_read_only_path_protects_its_target_inside_the_project() {
    let t = host_dir();
    let proj = t.path().canonicalize().unwrap().join("proj");
    std::fs::create_dir_all(proj.join("decoy")).unwrap();
    std::os::unix::fs::symlink("decoy", proj.join(".vscode")).unwrap();
    let l = prepare(&plan(
        &[Path::new("/")],
        &[&proj],
        &[],
        &[&proj.join(".vscode")],
    ));
    assert!(
        l.mounts
            .iter()
            .any(|m| matches!(m, MountOp::ReadOnly { path } if *path == proj.join("decoy"))),
        "{:?}",
        l.mounts
    );
}

#[test]
fn writable_inside_deny_is_dropped() {
    let t = host_dir();
    let base = t.path().canonicalize().unwrap();
    std::fs::create_dir_all(base.join("d/w")).unwrap();
    let l = prepare(&plan(
        &[Path::new("/")],
        &[&base.join("d/w")],
        &[&base.join("d")],
        &[],
    ));
    assert!(
        !l.mounts
            .iter()
            .any(|m| matches!(m, MountOp::Bind { writable: true, .. }))
    );
    assert!(l.skipped.iter().any(|s| s.contains("deny wins")));
}
