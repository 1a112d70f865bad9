//! The sandbox's trust bundle as a file on the host: the host's roots followed by the HTTP
//! layer's CA, bound read-only over the distribution's bundle files inside.
//!
//! The file is named by a hash of its inputs and made only when missing, so a start neither
//! reads the host's ~220 KB of roots nor sends a copy of them to init: init binds the file
//! ([`crate::MountOp::File`]). It is kept in a directory no sandbox sees (cordon's data
//! directory, masked in every view); what a sandbox gets is a read-only bind of it.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::net::BUNDLE_PATHS;

/// What separates the host's roots from `extra`; the blank line also ends a host bundle that
/// lacks a final newline.
const SEPARATOR: &str = "\n# cordon's interception CA (its key never enters the sandbox)\n";
/// Every made bundle's name starts so; older ones (other inputs) are removed when one is made.
const PREFIX: &str = "sandbox-bundle-";

/// The host's bundle (the first of [`BUNDLE_PATHS`] that opens) followed by `extra` (PEM), as
/// a file in `dir`. Made when missing or when what is there does not end with `extra` or has
/// the wrong size; otherwise the file already made for the same inputs is returned unread.
///
/// ```no_run
/// let pem = "-----BEGIN CERTIFICATE-----\n...\n-----END CERTIFICATE-----\n";
/// let file = cordon_sandbox::bundle_file(std::path::Path::new("/home/me/.local/share/cordon/ca"), pem)?;
/// assert!(file.starts_with("/home/me/.local/share/cordon/ca"));
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn bundle_file(dir: &Path, extra: &str) -> io::Result<PathBuf> {
    let candidates: Vec<&Path> = BUNDLE_PATHS.iter().map(Path::new).collect();
    bundle_file_from(&candidates, dir, extra)
}

/// The bundle [`bundle_file`] makes, in memory: for when no such file can be made.
pub fn bundle_pem(extra: &str) -> String {
    let mut pem = crate::net::host_bundle().unwrap_or_default();
    pem.push_str(SEPARATOR);
    pem.push_str(extra);
    pem
}

/// [`bundle_file`] with the host bundle looked for at `candidates`.
pub(crate) fn bundle_file_from(
    candidates: &[&Path],
    dir: &Path,
    extra: &str,
) -> io::Result<PathBuf> {
    let host = candidates
        .iter()
        .find_map(|p| File::open(p).ok().map(|f| (*p, f)));
    // The host bundle's identity and times stand for its content: a rewrite (update-ca-
    // certificates renames a new file in; an edit moves ctime) gives another name.
    let mut key = Fnv::default();
    let mut host_len = 0;
    if let Some((path, f)) = &host {
        let m = f.metadata()?;
        host_len = m.len();
        key.write(path.as_os_str().as_encoded_bytes());
        for n in [m.dev(), m.ino(), m.len()] {
            key.write(&n.to_le_bytes());
        }
        for n in [m.mtime(), m.mtime_nsec(), m.ctime(), m.ctime_nsec()] {
            key.write(&n.to_le_bytes());
        }
    }
    key.write(b"\0");
    key.write(extra.as_bytes());
    let name = format!("{PREFIX}{:016x}.pem", key.0);
    let path = dir.join(&name);
    let want = host_len + (SEPARATOR.len() + extra.len()) as u64;
    if made_for(&path, want, extra) {
        return Ok(path);
    }
    let mut content = Vec::with_capacity(want as usize);
    if let Some((_, mut f)) = host {
        f.read_to_end(&mut content)?;
    }
    content.extend_from_slice(SEPARATOR.as_bytes());
    content.extend_from_slice(extra.as_bytes());
    // Written aside and renamed in, so a start beside this one reads a whole file or none.
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let written = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&tmp)
        .and_then(|mut f| f.write_all(&content))
        .and_then(|()| fs::rename(&tmp, &path));
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    prune(dir, &name);
    Ok(path)
}

/// Whether `path` is a bundle of `want` bytes ending with `extra`: a file cut short, or one
/// whose CA is not ours, is made again.
fn made_for(path: &Path, want: u64, extra: &str) -> bool {
    let Ok(f) = File::open(path) else {
        return false;
    };
    if f.metadata().map(|m| m.len()).ok() != Some(want) {
        return false;
    }
    let mut tail = vec![0u8; extra.len()];
    f.read_exact_at(&mut tail, want - extra.len() as u64)
        .is_ok()
        && tail == extra.as_bytes()
}

/// Bundles made for other inputs are removed (best effort): a sandbox that binds one keeps it
/// open, so a running session loses nothing.
fn prune(dir: &Path, keep: &str) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let n = e.file_name();
        let n = n.to_string_lossy();
        if n.starts_with(PREFIX) && n.ends_with(".pem") && n != keep {
            let _ = fs::remove_file(e.path());
        }
    }
}

/// FNV-1a (64 bit): a name for the inputs, not a check of them ([`made_for`] checks).
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CA: &str = "-----BEGIN CERTIFICATE-----\nOURS\n-----END CERTIFICATE-----\n";

    fn bundles(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn holds_the_host_roots_then_the_ca_and_is_made_once_per_inputs() {
        let t = tempfile::tempdir().unwrap();
        let host = t.path().join("host.crt");
        fs::write(&host, "HOST-ROOTS").unwrap();
        let dir = t.path().join("ca");
        fs::create_dir(&dir).unwrap();
        let missing = t.path().join("missing.crt");
        let from = [missing.as_path(), host.as_path()];
        let a = bundle_file_from(&from, &dir, CA).unwrap();
        let text = fs::read_to_string(&a).unwrap();
        assert!(text.starts_with("HOST-ROOTS\n"), "{text}");
        assert!(text.ends_with(CA), "{text}");
        // Same inputs: the same file, not rewritten (its inode stays).
        let ino = fs::metadata(&a).unwrap().ino();
        let b = bundle_file_from(&from, &dir, CA).unwrap();
        assert_eq!(a, b);
        assert_eq!(fs::metadata(&b).unwrap().ino(), ino);
        // Another CA: another file, and the old one is gone.
        let other = CA.replace("OURS", "NEXT");
        let c = bundle_file_from(&from, &dir, &other).unwrap();
        assert_ne!(a, c);
        assert!(fs::read_to_string(&c).unwrap().ends_with(&other));
        assert_eq!(
            bundles(&dir),
            vec![c.file_name().unwrap().to_string_lossy()]
        );
    }

    #[test]
    fn a_changed_host_bundle_gives_a_new_file() {
        let t = tempfile::tempdir().unwrap();
        let host = t.path().join("host.crt");
        fs::write(&host, "OLD").unwrap();
        let from = [host.as_path()];
        let a = bundle_file_from(&from, t.path(), CA).unwrap();
        // update-ca-certificates writes a new file and renames it in.
        let new = t.path().join("host.new");
        fs::write(&new, "NEW-ROOTS").unwrap();
        fs::rename(&new, &host).unwrap();
        let b = bundle_file_from(&from, t.path(), CA).unwrap();
        assert_ne!(a, b);
        assert!(fs::read_to_string(&b).unwrap().starts_with("NEW-ROOTS\n"));
    }

    #[test]
    fn a_cut_or_altered_file_is_made_again() {
        let t = tempfile::tempdir().unwrap();
        let host = t.path().join("host.crt");
        fs::write(&host, "ROOTS").unwrap();
        let from = [host.as_path()];
        let a = bundle_file_from(&from, t.path(), CA).unwrap();
        let whole = fs::read_to_string(&a).unwrap();
        fs::write(&a, &whole[..whole.len() - 5]).unwrap();
        let b = bundle_file_from(&from, t.path(), CA).unwrap();
        assert_eq!(fs::read_to_string(&b).unwrap(), whole);
        // The same size with another CA at the end: not ours, made again.
        fs::write(&b, whole.replace("OURS", "EVIL")).unwrap();
        let c = bundle_file_from(&from, t.path(), CA).unwrap();
        assert_eq!(fs::read_to_string(&c).unwrap(), whole);
    }

    #[test]
    fn without_a_host_bundle_it_holds_the_ca_alone() {
        let t = tempfile::tempdir().unwrap();
        let missing = t.path().join("none.crt");
        let a = bundle_file_from(&[missing.as_path()], t.path(), CA).unwrap();
        assert_eq!(fs::read_to_string(a).unwrap(), format!("{SEPARATOR}{CA}"));
    }

    #[test]
    fn an_unwritable_directory_is_an_error_not_a_partial_file() {
        let t = tempfile::tempdir().unwrap();
        let gone = t.path().join("no-such-dir");
        assert!(bundle_file_from(&[], &gone, CA).is_err());
        assert!(!gone.exists());
    }
}
