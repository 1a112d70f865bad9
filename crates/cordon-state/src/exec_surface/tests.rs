use std::os::unix::fs::symlink;

use super::*;

fn tree() -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().canonicalize().unwrap().join("proj");
    fs::create_dir_all(root.join(".git/hooks")).unwrap();
    fs::write(root.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    fs::create_dir_all(root.join(".git/objects")).unwrap();
    (t, root)
}

#[test]
fn follows_git_indirections_and_symlinks_into_writable_roots() {
    let (_t, root) = tree();
    // hooks -> ../decoy-hooks; .vscode -> decoy; a nested repo; a commondir to ../shared.
    fs::rename(root.join(".git/hooks"), root.join("decoy-hooks")).unwrap();
    symlink("../decoy-hooks", root.join(".git/hooks")).unwrap();
    fs::create_dir_all(root.join("decoy")).unwrap();
    symlink("decoy", root.join(".vscode")).unwrap();
    fs::create_dir_all(root.join("vendor/lib/.git")).unwrap();
    fs::create_dir_all(root.join("shared")).unwrap();
    fs::write(root.join(".git/commondir"), "../shared\n").unwrap();
    fs::create_dir_all(root.join("node_modules/x/.git")).unwrap();
    let s = discover(std::slice::from_ref(&root), None, &[]);
    for p in [".git", "decoy-hooks", "decoy", "vendor/lib/.git", "shared"] {
        assert!(
            s.stage.contains(&root.join(p)),
            "{p} not staged: {:?}",
            s.stage
        );
    }
    // Under an ignored directory too: the host's git enters it through a gitlink (#44).
    assert!(
        s.stage.contains(&root.join("node_modules/x/.git")),
        "{:?}",
        s.stage
    );
    for p in [".mcp.json", ".envrc", ".claude", ".cargo/config.toml"] {
        assert!(s.watch.contains(&root.join(p)), "{p} not watched");
    }
    assert!(s.links.iter().any(|(l, _)| *l == root.join(".vscode")));
}

#[test]
fn a_bare_repository_in_a_subdirectory_is_a_git_dir_too() {
    let (_t, root) = tree();
    // What git's discovery accepts: HEAD, objects/ and refs/ (or a commondir).
    let bare = root.join("sub/evil");
    fs::create_dir_all(bare.join("objects")).unwrap();
    fs::create_dir_all(bare.join("refs/heads")).unwrap();
    fs::write(bare.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    let linked = root.join("other");
    fs::create_dir_all(&linked).unwrap();
    fs::write(linked.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    fs::write(linked.join("commondir"), "../sub/evil\n").unwrap();
    // A HEAD alone is not a git dir.
    fs::create_dir_all(root.join("docs")).unwrap();
    fs::write(root.join("docs/HEAD"), "not git").unwrap();
    let found = find_dotgits(&root);
    assert!(found.contains(&bare), "{found:?}");
    assert!(found.contains(&linked), "{found:?}");
    assert!(!found.contains(&root.join("docs")), "{found:?}");
    let s = discover(std::slice::from_ref(&root), None, &[]);
    assert!(s.stage.contains(&bare), "{:?}", s.stage);
}

#[test]
fn a_gitfile_is_staged_with_the_git_dir_it_names() {
    let (_t, root) = tree();
    let wt = root.join("wt");
    fs::create_dir_all(root.join(".git/worktrees/wt")).unwrap();
    fs::create_dir_all(&wt).unwrap();
    fs::write(
        wt.join(".git"),
        format!("gitdir: {}\n", root.join(".git/worktrees/wt").display()),
    )
    .unwrap();
    let s = discover(std::slice::from_ref(&wt), None, &[]);
    assert!(s.stage.contains(&wt.join(".git")), "{:?}", s.stage);
    // The git dir itself is outside the writable root: read-only there, not staged.
    assert!(!s.stage.iter().any(|p| p.starts_with(root.join(".git"))));
}

#[test]
fn git_paths_are_classified_by_what_git_does_with_them() {
    assert!(inert_in_gitdir(Path::new("objects/ab/cdef")));
    assert!(inert_in_gitdir(Path::new("refs/heads/main")));
    assert!(inert_in_gitdir(Path::new("index")));
    assert!(inert_in_gitdir(Path::new("modules/sub/logs/HEAD")));
    assert!(!inert_in_gitdir(Path::new("objects/info/alternates")));
    assert!(!inert_in_gitdir(Path::new("frobnicate")));
}

/// Issue #44: a repository under an ignored directory or deep in the tree is found like any
/// other (`git init node_modules/left-pad`, then a gitlink to it).
#[test]
fn nested_repositories_are_found_at_any_depth_and_under_ignored_dirs() {
    let (_t, root) = tree();
    let deep = root.join("a/b/c/d/e/f/g/h/i/repo/.git");
    for d in [
        "node_modules/left-pad/.git",
        "target/debug/x/.git",
        ".venv/lib/y/.git",
    ] {
        fs::create_dir_all(root.join(d)).unwrap();
    }
    fs::create_dir_all(&deep).unwrap();
    let found = find_dotgits(&root);
    for d in [
        "node_modules/left-pad/.git",
        "target/debug/x/.git",
        ".venv/lib/y/.git",
    ] {
        assert!(found.contains(&root.join(d)), "{d}: {found:?}");
    }
    assert!(found.contains(&deep), "{found:?}");
}

/// The classification of object-store and `info/exclude` paths (issue #44).
#[test]
fn object_info_and_exclude_are_not_inert() {
    assert!(under_objects_info(Path::new("objects/info/alternates")));
    assert!(under_objects_info(Path::new(
        "modules/sub/objects/info/commit-graph"
    )));
    assert!(!under_objects_info(Path::new("objects/ab/info")));
    assert!(under_objects(Path::new("objects/pack/x.pack")));
}

fn git(dir: &Path, args: &[&str]) {
    let o = std::process::Command::new("git")
        .args(["-c", "user.email=a@b", "-c", "user.name=a"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", "/nonexistent")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// An empty repository `r` in a fresh temporary directory; `None` (a visible skip) without git.
fn new_repo() -> Option<(tempfile::TempDir, std::path::PathBuf)> {
    if std::process::Command::new("git")
        .arg("--version")
        .output()
        .is_err()
    {
        crate::tests::skip("no git");
        return None;
    }
    let t = tempfile::tempdir().unwrap();
    let r = t.path().join("r");
    fs::create_dir_all(&r).unwrap();
    git(&r, &["init", "-q"]);
    Some((t, r))
}

/// An index that hides a file from `git status` (skip-worktree, assume-unchanged) is flagged;
/// one that only adds entries or a gitlink is not.
#[test]
fn index_flags_that_hide_work_are_flagged() {
    let Some((t, r)) = new_repo() else {
        return;
    };
    fs::write(r.join("Makefile"), "all:\n").unwrap();
    fs::write(r.join("b"), "b\n").unwrap();
    git(&r, &["add", "Makefile", "b"]);
    let before = t.path().join("index.before");
    fs::copy(r.join(".git/index"), &before).unwrap();
    let subject_flags = |after: &Path| {
        let node = crate::manifest::node_of(after).unwrap().unwrap();
        let host = r.join(".git/index");
        crate::flags::flags(&Subject {
            host_path: &host,
            rel: Path::new("index"),
            kind: crate::manifest::ChangeKind::Modified,
            before: Some(&node),
            after: Some(&node),
            before_text: None,
            after_text: None,
            before_file: Some(&before),
            after_file: Some(after),
            link_target: None,
        })
    };
    // Adding a file and a gitlink: nothing hidden.
    git(&r, &["init", "-q", "node_modules/left-pad"]);
    git(
        &r.join("node_modules/left-pad"),
        &["commit", "-q", "--allow-empty", "-m", "x"],
    );
    git(&r, &["add", "node_modules/left-pad"]);
    let f = subject_flags(&r.join(".git/index"));
    assert!(f.is_empty(), "{f:?}");
    for how in ["--skip-worktree", "--assume-unchanged"] {
        git(&r, &["update-index", how, "Makefile"]);
        let f = subject_flags(&r.join(".git/index"));
        assert!(f.iter().any(|x| x.contains("Makefile")), "{how}: {f:?}");
        git(
            &r,
            &["update-index", &how.replace("--", "--no-"), "Makefile"],
        );
    }
    // Not an index git can read: held.
    let junk = t.path().join("junk");
    fs::write(&junk, "DIRCjunk").unwrap();
    assert!(!subject_flags(&junk).is_empty());
}

/// A FIFO where a gitfile or a tool config is read (made by the session) is refused, not
/// waited on: settling and review must end.
#[test]
fn a_fifo_is_not_read() {
    let (_t, root) = tree();
    let fifo = root.join("sub/.git");
    fs::create_dir_all(fifo.parent().unwrap()).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success());
    if !made {
        crate::tests::skip("no mkfifo");
        return;
    }
    assert_eq!(read_regular(&fifo), None);
    assert_eq!(gitfile_target(&fifo), None);
    fs::write(root.join("plain"), "x").unwrap();
    assert_eq!(read_regular(&root.join("plain")).as_deref(), Some("x"));
}

/// A new pack is applied unasked only when git verifies it (each object's name recomputed
/// from its content); one git cannot verify is flagged and held.
#[test]
fn a_new_pack_is_flagged_unless_git_verifies_it() {
    let Some((t, r)) = new_repo() else {
        return;
    };
    fs::write(r.join("a"), "a\n").unwrap();
    git(&r, &["add", "a"]);
    git(&r, &["commit", "-qm", "a"]);
    git(&r, &["repack", "-qad"]);
    let pack_dir = r.join(".git/objects/pack");
    let pack = fs::read_dir(&pack_dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "pack"))
        .unwrap();
    // The session's layer: a copy of the pack and its index elsewhere.
    let layer = t.path().join("layer");
    fs::create_dir_all(&layer).unwrap();
    let copy = layer.join(pack.file_name().unwrap());
    fs::copy(&pack, &copy).unwrap();
    fs::copy(pack.with_extension("idx"), copy.with_extension("idx")).unwrap();
    let rel = Path::new("objects/pack").join(pack.file_name().unwrap());
    let host = r.join(".git").join(&rel);
    let flags_of = |after: &Path| {
        let node = crate::manifest::node_of(after).unwrap().unwrap();
        crate::flags::flags(&Subject {
            host_path: &host,
            rel: &rel,
            kind: crate::manifest::ChangeKind::Added,
            before: None,
            after: Some(&node),
            before_text: None,
            after_text: None,
            before_file: None,
            after_file: Some(after),
            link_target: None,
        })
    };
    assert!(flags_of(&copy).is_empty(), "{:?}", flags_of(&copy));
    // The same pack with a byte of its data changed (another name, so nothing is cached).
    let bad = layer.join("pack-bad.pack");
    let mut bytes = fs::read(&copy).unwrap();
    bytes[40] ^= 0x55;
    fs::write(&bad, bytes).unwrap();
    fs::copy(copy.with_extension("idx"), bad.with_extension("idx")).unwrap();
    let f = flags_of(&bad);
    assert!(f.iter().any(|x| x.contains("cannot verify")), "{f:?}");
}

#[test]
fn only_the_directories_git_removes_itself_go_unasked() {
    for (rel, yes) in [
        ("refs/heads/feature", true),
        ("logs/refs/heads/feature", true),
        ("refs/remotes/origin/team", true),
        ("rebase-merge", true),
        ("refs", false),
        ("refs/heads", false),
        ("logs", false),
        ("logs/refs", false),
        ("logs/refs/heads", false),
        ("modules/sub/refs/heads", false),
        ("modules/sub", false),
        ("objects/ab", false),
        ("hooks", false),
    ] {
        assert_eq!(super::removable_dir(Path::new(rel)), yes, "{rel}");
    }
}
