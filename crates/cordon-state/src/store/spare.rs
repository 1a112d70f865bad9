//! Spare session directories: the skeleton a session with a copy-on-write home leaves when it
//! wrote nothing there, kept for a later session to start in instead of being removed.
//!
//! Why: such a session makes its directory, `home/`, `home/upper/`, `home/work/` and a
//! `meta.json`, and the home's overlay adds `home/work/work/`. Each takes a block, and a block
//! freed is work for the filesystem: on ext4 mounted with `discard` and no journal, a discard
//! that the `rmdir` or `unlink` waits for. Removing them at the end cost ~0.3 ms of every
//! `cordon run` there (issue #18). A parked skeleton frees one block (the overlay's work
//! directory, which every mount makes anew) and is taken back with two renames.
//!
//! What makes a skeleton safe to hand to another session (each checked when it is parked, and
//! the upper directory again when it is claimed):
//! - it holds exactly what [`crate::StateStore::begin_with_home`] made and nothing else;
//! - the home's upper directory is empty and carries no extended attribute but the overlay's
//!   own `overlay.uuid` (which the sandbox cannot set): nothing of the old session shows through;
//! - the overlay's work directory is empty once its `work/` is removed;
//! - `meta.json` is rewritten in full before the directory takes the new session's name.
//!
//! The pool is `ROOT/.spare/` (not a session id, so listing and pruning pass it by). A parked
//! skeleton is named `<park time in ms>-<old id>`; a claim renames it to `claim-<new id>` (so two
//! starts never take the same one), rewrites it there, and renames it to the session's name
//! without replacing anything. The newest skeleton is never claimed: the overlay of the session
//! that parked it may still be torn down in the kernel after that session's init exited, and a
//! mount must not share its directories with one still alive.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::error::{StateError, io_err};
use crate::fsops;
use crate::meta::{Meta, now_ms};

/// The pool's directory under the store's root.
const POOL: &str = ".spare";
/// At most this many skeletons wait in the pool: about as many as sessions run at once.
const MAX_SPARES: usize = 4;
/// A claim left by a start killed between its two renames is removed after this long.
const STALE_CLAIM_MS: u64 = 60_000;

fn pool(root: &Path) -> PathBuf {
    root.join(POOL)
}

/// Whether `dir` holds nothing but entries named in `allowed`.
fn holds_only(dir: &Path, allowed: &[&str]) -> bool {
    let Ok(rd) = fs::read_dir(dir) else {
        return false;
    };
    rd.into_iter()
        .all(|e| e.is_ok_and(|e| e.file_name().to_str().is_some_and(|n| allowed.contains(&n))))
}

fn is_dir(p: &Path) -> bool {
    fs::symlink_metadata(p).is_ok_and(|m| m.is_dir())
}

/// The home's upper directory as a fresh session needs it: a directory, empty, and with no
/// extended attribute but the overlay's uuid.
fn upper_is_clean(upper: &Path) -> bool {
    is_dir(upper)
        && holds_only(upper, &[])
        && xattr::list(upper).is_ok_and(|mut names| {
            names.all(|n| n == "user.overlay.uuid" || n == "trusted.overlay.uuid")
        })
}

/// The skeleton `dir` (a session's directory) as `begin_with_home` makes it, with the home's
/// layer holding nothing.
fn parkable(dir: &Path) -> bool {
    let home = dir.join("home");
    let work = home.join("work");
    let overlay_work = work.join("work");
    if !(holds_only(dir, &["lock", "meta.json", "home"])
        && fs::symlink_metadata(dir.join("meta.json")).is_ok_and(|m| m.is_file())
        && is_dir(&home)
        && holds_only(&home, &["upper", "work"])
        && upper_is_clean(&home.join("upper"))
        && is_dir(&work)
        && holds_only(&work, &["work"]))
    {
        return false;
    }
    // The overlay's own work directory (mode 000) goes now, so the next mount has none to
    // clear; `rmdir` refuses it unless it is empty.
    match fs::remove_dir(&overlay_work) {
        Ok(()) => true,
        Err(e) => e.kind() == io::ErrorKind::NotFound,
    }
}

/// Skeletons waiting in the pool, oldest first.
fn parked(pool: &Path) -> Vec<String> {
    let Ok(rd) = fs::read_dir(pool) else {
        return Vec::new();
    };
    let mut names: Vec<String> = rd
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| {
            n.len() > 14 && n.as_bytes()[..13].iter().all(u8::is_ascii_digit) && &n[13..14] == "-"
        })
        .collect();
    names.sort_unstable();
    names
}

/// Move the directory of session `id` (`root/id`) into the pool when it is a clean skeleton
/// and the pool has room. `false` when it was not moved: the caller removes it as before.
pub(crate) fn park(root: &Path, id: &str) -> bool {
    let dir = root.join(id);
    if !parkable(&dir) {
        return false;
    }
    let pool = pool(root);
    if fsops::private_dir_all(&pool).is_err() {
        return false;
    }
    remove_stale_claims(&pool, now_ms());
    if parked(&pool).len() >= MAX_SPARES {
        return false;
    }
    fs::rename(&dir, pool.join(format!("{:013}-{id}", now_ms()))).is_ok()
}

fn remove_stale_claims(pool: &Path, now: u64) {
    let Ok(rd) = fs::read_dir(pool) else { return };
    for e in rd.flatten() {
        if !e
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with("claim-"))
        {
            continue;
        }
        // The claim's rename set its ctime.
        let stale = e.metadata().is_ok_and(|m| {
            let ctime_ms =
                (m.ctime().max(0) as u64) * 1000 + (m.ctime_nsec().max(0) as u64) / 1_000_000;
            now.saturating_sub(ctime_ms) > STALE_CLAIM_MS
        });
        if stale {
            let _ = fsops::remove_tree(&e.path());
        }
    }
}

/// Start session `meta.id` in a parked skeleton: rewrite its `meta.json`, give the home's
/// upper directory `home_mode` and rename it to `root/<id>`. `Ok(false)` when there is none to
/// take (the caller makes the directories); [`StateError::SessionExists`] when the session's
/// name is taken.
pub(super) fn claim(root: &Path, meta: &Meta, home_mode: u32) -> Result<bool, StateError> {
    let pool = pool(root);
    let names = parked(&pool);
    // The newest stays: see the module's doc.
    let Some((_newest, older)) = names.split_last() else {
        return Ok(false);
    };
    let claimed = pool.join(format!("claim-{}", meta.id));
    let mut taken = false;
    for name in older {
        match fs::rename(pool.join(name), &claimed) {
            Ok(()) => {
                taken = true;
                break;
            }
            // Another start took it first.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(_) => break,
        }
    }
    if !taken {
        return Ok(false);
    }
    if fill(&claimed, meta, home_mode).is_err() {
        let _ = fsops::remove_tree(&claimed);
        return Ok(false);
    }
    let dir = root.join(&meta.id);
    match rustix::fs::renameat_with(
        rustix::fs::CWD,
        &claimed,
        rustix::fs::CWD,
        &dir,
        rustix::fs::RenameFlags::NOREPLACE,
    ) {
        Ok(()) => Ok(true),
        Err(e) => {
            let _ = fsops::remove_tree(&claimed);
            if e == rustix::io::Errno::EXIST {
                Err(StateError::SessionExists {
                    id: meta.id.clone(),
                    path: dir,
                })
            } else {
                Err(io_err("rename a spare session directory to", &dir)(
                    io::Error::from(e),
                ))
            }
        }
    }
}

/// Make the claimed skeleton `dir` the new session's: its metadata written over the old (in
/// place: the old file's block is reused, and no one reads the pool), the upper directory
/// checked again and given the home's mode.
fn fill(dir: &Path, meta: &Meta, home_mode: u32) -> Result<(), StateError> {
    let upper = dir.join("home").join("upper");
    if !upper_is_clean(&upper) {
        return Err(StateError::Corrupt {
            path: upper,
            msg: "a spare session's upper directory is not empty".into(),
        });
    }
    let path = dir.join("meta.json");
    let bytes = serde_json::to_vec_pretty(meta).map_err(|e| StateError::Corrupt {
        path: path.clone(),
        msg: format!("cannot serialise: {e}"),
    })?;
    let mut f = fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&path)
        .map_err(io_err("open", &path))?;
    if !f.metadata().map_err(io_err("inspect", &path))?.is_file() {
        return Err(StateError::Corrupt {
            path,
            msg: "not a regular file".into(),
        });
    }
    f.write_all(&bytes).map_err(io_err("write", &path))?;
    f.set_len(bytes.len() as u64)
        .map_err(io_err("truncate", &path))?;
    let mode = home_mode & 0o7777;
    let now = fs::symlink_metadata(&upper).map_err(io_err("inspect", &upper))?;
    if now.mode() & 0o7777 != mode {
        fs::set_permissions(&upper, fs::Permissions::from_mode(mode))
            .map_err(io_err("set mode of", &upper))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{HomeSpec, Session, StateStore};

    struct Fixture {
        _t: tempfile::TempDir,
        store: StateStore,
        spec: HomeSpec,
    }

    fn fixture() -> Fixture {
        let t = tempfile::tempdir().unwrap();
        let home = t.path().join("home");
        fs::create_dir_all(&home).unwrap();
        fs::set_permissions(&home, fs::Permissions::from_mode(0o751)).unwrap();
        let store = StateStore::new(t.path().join("state"));
        let spec = HomeSpec {
            path: home,
            skip: Vec::new(),
        };
        Fixture { _t: t, store, spec }
    }

    impl Fixture {
        fn begin(&self, id: &str) -> Session {
            self.store
                .begin_with_home(id, &[], Some(&self.spec))
                .unwrap()
        }

        /// A session as its sandbox leaves it: the overlay made its `work/work` (mode 000) and
        /// its uuid on the upper directory.
        fn ran(&self, id: &str) -> Session {
            let s = self.begin(id);
            let work = s.dir.join("home/work/work");
            fs::create_dir(&work).unwrap();
            fs::set_permissions(&work, fs::Permissions::from_mode(0o000)).unwrap();
            xattr::set(s.dir.join("home/upper"), "user.overlay.uuid", b"0123").unwrap();
            s
        }

        fn pool(&self) -> Vec<String> {
            parked(&pool(self.store.root()))
        }
    }

    #[test]
    fn a_session_that_left_nothing_is_parked_and_a_later_one_starts_in_it() {
        let f = fixture();
        f.ran("s1").forget().unwrap();
        f.ran("s2").forget().unwrap();
        let pool = f.pool();
        assert_eq!(pool.len(), 2, "{pool:?}");
        assert!(pool[0].ends_with("-s1") && pool[1].ends_with("-s2"));
        assert!(!f.store.root().join("s1").exists());

        // The oldest is taken; the newest stays.
        let s3 = f.begin("s3");
        assert_eq!(f.pool(), vec![pool[1].clone()]);
        assert_eq!(s3.dir, f.store.root().join("s3"));
        let meta = s3.meta().unwrap();
        assert_eq!(meta.id, "s3");
        assert!(meta.prepared && meta.entries.is_empty());
        let json: serde_json::Value =
            serde_json::from_slice(&fs::read(s3.dir.join("meta.json")).unwrap()).unwrap();
        assert_eq!(
            json["id"], "s3",
            "the old metadata is gone, not appended to"
        );
        let home = s3.home.as_ref().unwrap();
        assert_eq!(home.host, f.spec.path);
        assert!(holds_only(&home.upper, &[]));
        assert_eq!(
            fs::metadata(&home.upper).unwrap().mode() & 0o7777,
            0o751,
            "the merged home's root takes the host home's mode"
        );
        assert!(holds_only(&home.work, &[]), "no work/work left to clear");
        let ids: Vec<String> = f.store.list().unwrap().into_iter().map(|i| i.id).collect();
        assert_eq!(ids, vec!["s3".to_owned()], "the pool is not a session");
        assert!(s3.home_writes().unwrap().is_empty());
    }

    #[test]
    fn a_session_that_left_anything_is_removed_not_parked() {
        type Leave = fn(&Session);
        let cases: [(&str, Leave); 5] = [
            ("a file in the home", |s| {
                fs::write(s.dir.join("home/upper/.bashrc"), "x").unwrap()
            }),
            ("an attribute on the home", |s| {
                xattr::set(s.dir.join("home/upper"), "user.note", b"x").unwrap()
            }),
            ("a file in the overlay's work", |s| {
                let w = s.dir.join("home/work/work");
                fs::set_permissions(&w, fs::Permissions::from_mode(0o700)).unwrap();
                fs::write(w.join("#1"), "").unwrap();
            }),
            ("a file beside the layer", |s| {
                fs::write(s.dir.join("home/other"), "").unwrap()
            }),
            ("a symlink for meta.json", |s| {
                fs::remove_file(s.dir.join("meta.json")).unwrap();
                std::os::unix::fs::symlink("/etc/passwd", s.dir.join("meta.json")).unwrap();
            }),
        ];
        for (what, leave) in cases {
            let f = fixture();
            let s = f.ran("s1");
            leave(&s);
            // forget reads meta.json first: the symlink case is refused there or removed.
            let _ = s.forget().or_else(|_| s.discard());
            if what == "a symlink for meta.json" {
                // Left as it was; opened up so the test's directory can go.
                let w = s.dir.join("home/work/work");
                let _ = fs::set_permissions(&w, fs::Permissions::from_mode(0o700));
            } else {
                assert!(!s.dir.exists(), "{what}: removed");
            }
            assert!(f.pool().is_empty(), "{what}: not parked");
        }
    }

    #[test]
    fn a_spare_changed_in_the_pool_is_dropped_and_the_session_starts_fresh() {
        let f = fixture();
        f.ran("s1").forget().unwrap();
        f.ran("s2").forget().unwrap();
        let oldest = pool(f.store.root()).join(&f.pool()[0]);
        fs::write(oldest.join("home/upper/planted"), "x").unwrap();
        let s3 = f.begin("s3");
        assert!(holds_only(&s3.home.as_ref().unwrap().upper, &[]));
        assert!(!oldest.exists(), "the changed spare is removed");
        assert_eq!(f.pool().len(), 1, "the newest still waits");
    }

    #[test]
    fn the_pool_holds_at_most_four() {
        let f = fixture();
        // Six at once: none finds a spare, and each leaves one.
        let running: Vec<Session> = (0..6).map(|i| f.ran(&format!("s{i}"))).collect();
        for s in &running {
            s.forget().unwrap();
        }
        assert_eq!(f.pool().len(), MAX_SPARES);
        assert!(
            !f.store.root().join("s5").exists(),
            "removed when the pool is full"
        );
    }

    #[test]
    fn a_claim_never_replaces_a_session() {
        let f = fixture();
        f.ran("s1").forget().unwrap();
        f.ran("s2").forget().unwrap();
        fs::create_dir(f.store.root().join("s3")).unwrap();
        let err = f
            .store
            .begin_with_home("s3", &[], Some(&f.spec))
            .unwrap_err();
        assert!(matches!(err, StateError::SessionExists { .. }), "{err}");
        assert!(holds_only(&f.store.root().join("s3"), &[]));
    }

    #[test]
    fn a_claim_left_by_a_killed_start_goes_after_a_minute() {
        let f = fixture();
        f.ran("s1").forget().unwrap();
        let pool = pool(f.store.root());
        let left = pool.join("claim-s9");
        fs::create_dir_all(left.join("home")).unwrap();
        remove_stale_claims(&pool, now_ms());
        assert!(left.exists(), "a claim under way is left alone");
        remove_stale_claims(&pool, now_ms() + STALE_CLAIM_MS + 1000);
        assert!(!left.exists());
        assert_eq!(f.pool().len(), 1, "parked skeletons are not claims");
    }
}
