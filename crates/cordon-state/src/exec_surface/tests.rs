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
    assert!(
        !s.stage
            .iter()
            .any(|p| p.starts_with(root.join("node_modules")))
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
