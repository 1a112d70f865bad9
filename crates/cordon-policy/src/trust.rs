//! The trust store: which project policy files the user has approved, by exact content.
//!
//! A JSON map from a policy file's path to the SHA-256 (hex) of its content. A file is trusted
//! only while its content hashes to the stored value, so any edit (by the agent or anyone
//! else) needs a fresh `cordon trust`.
//!
//! The key is the file's path with its directory canonicalised but its final component kept:
//! a `cordon.toml` that is a symlink is trusted as the link the loader reads, not as its target.

use std::collections::BTreeMap;
use std::fs;
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::PolicyError;

/// The trust store file (e.g. `$XDG_DATA_HOME/cordon/trusted.json`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustStore {
    path: PathBuf,
}

/// SHA-256 of `content`, lower-case hex.
pub fn sha256_hex(content: &[u8]) -> String {
    Sha256::digest(content)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The key a policy file is stored under: its directory canonicalised, its name kept.
pub fn trust_key(file: &Path) -> Result<PathBuf, PolicyError> {
    let name = file.file_name().ok_or_else(|| {
        PolicyError::io(
            "trust",
            file,
            std::io::Error::new(ErrorKind::InvalidInput, "not a file name"),
        )
    })?;
    let parent = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dir = fs::canonicalize(parent).map_err(|e| PolicyError::io("resolve", parent, e))?;
    Ok(dir.join(name))
}

impl TrustStore {
    /// A trust store kept at `path` (created on the first [`trust`](Self::trust)).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        TrustStore { path: path.into() }
    }

    /// Where the store lives.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Trusts `file` with its current content; returns the content's SHA-256 (hex).
    pub fn trust(&self, file: &Path) -> Result<String, PolicyError> {
        let key = trust_key(file)?;
        let content = fs::read(&key).map_err(|e| PolicyError::io("read", &key, e))?;
        let hash = sha256_hex(&content);
        let mut map = self.read()?;
        map.insert(key_string(&self.path, &key)?, hash.clone());
        self.write(&map)?;
        Ok(hash)
    }

    /// Whether `file` is trusted with its current content.
    pub fn is_trusted(&self, file: &Path) -> Result<bool, PolicyError> {
        let key = trust_key(file)?;
        let content = fs::read(&key).map_err(|e| PolicyError::io("read", &key, e))?;
        self.is_trusted_content(&key, &content)
    }

    /// Whether the file stored under `key` (see [`trust_key`]) is trusted with exactly
    /// `content`. The loader uses this with the bytes it parsed, so the file cannot change
    /// between the check and the use.
    pub fn is_trusted_content(&self, key: &Path, content: &[u8]) -> Result<bool, PolicyError> {
        let Some(k) = key.to_str() else {
            return Ok(false);
        };
        Ok(self
            .read()?
            .get(k)
            .is_some_and(|h| *h == sha256_hex(content)))
    }

    /// Forgets `file`; returns whether it was trusted (with any content). Works for a file
    /// that no longer exists as long as its directory does.
    pub fn revoke(&self, file: &Path) -> Result<bool, PolicyError> {
        let key = trust_key(file)?;
        let mut map = self.read()?;
        let removed = map.remove(&key_string(&self.path, &key)?).is_some();
        if removed {
            self.write(&map)?;
        }
        Ok(removed)
    }

    fn read(&self) -> Result<BTreeMap<String, String>, PolicyError> {
        let text = match fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(BTreeMap::new()),
            Err(e) => return Err(PolicyError::io("read", &self.path, e)),
        };
        if text.trim().is_empty() {
            return Ok(BTreeMap::new());
        }
        serde_json::from_str(&text).map_err(|e| PolicyError::TrustStore {
            path: self.path.clone(),
            message: e.to_string(),
        })
    }

    /// Writes the map atomically: a 0600 temporary file in the same directory, then rename.
    fn write(&self, map: &BTreeMap<String, String>) -> Result<(), PolicyError> {
        let dir = match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|e| PolicyError::io("create", &dir, e))?;
        let mut json = serde_json::to_string_pretty(map).map_err(|e| PolicyError::TrustStore {
            path: self.path.clone(),
            message: e.to_string(),
        })?;
        json.push('\n');
        let name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned());
        let tmp = dir.join(format!(
            ".{}.{}.{}.tmp",
            name.unwrap_or_else(|| "trusted.json".into()),
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        let result = (|| {
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(json.as_bytes())?;
            f.sync_all()?;
            fs::rename(&tmp, &self.path)
        })();
        if let Err(e) = result {
            let _ = fs::remove_file(&tmp);
            return Err(PolicyError::io("write", &self.path, e));
        }
        Ok(())
    }
}

fn key_string(store: &Path, key: &Path) -> Result<String, PolicyError> {
    key.to_str()
        .map(str::to_string)
        .ok_or_else(|| PolicyError::TrustStore {
            path: store.to_path_buf(),
            message: format!("cannot record {}: the path is not UTF-8", key.display()),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let policy = dir.path().join("cordon.toml");
        fs::write(&policy, "[env]\npass = [\"X\"]\n").unwrap();
        let store = TrustStore::new(dir.path().join("data/cordon/trusted.json"));
        assert!(
            !store.is_trusted(&policy).unwrap(),
            "missing store = nothing trusted"
        );
        let hash = store.trust(&policy).unwrap();
        assert_eq!(hash, sha256_hex(b"[env]\npass = [\"X\"]\n"));
        assert_eq!(hash.len(), 64);
        assert!(store.is_trusted(&policy).unwrap());
        let mode = fs::metadata(store.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // The stored key is canonical.
        let text = fs::read_to_string(store.path()).unwrap();
        let map: BTreeMap<String, String> = serde_json::from_str(&text).unwrap();
        let key = fs::canonicalize(&policy).unwrap();
        assert_eq!(map.get(key.to_str().unwrap()), Some(&hash));
        // Edited: no longer trusted.
        fs::write(&policy, "[env]\npass = [\"Y\"]\n").unwrap();
        assert!(!store.is_trusted(&policy).unwrap());
        // Revoke.
        assert!(store.revoke(&policy).unwrap());
        assert!(!store.revoke(&policy).unwrap());
        let map: BTreeMap<String, String> =
            serde_json::from_str(&fs::read_to_string(store.path()).unwrap()).unwrap();
        assert!(map.is_empty());
        // No temporary files left behind.
        let left: Vec<_> = fs::read_dir(store.path().parent().unwrap())
            .unwrap()
            .collect();
        assert_eq!(left.len(), 1);
    }

    #[test]
    fn same_file_by_another_path_is_the_same_key() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("a")).unwrap();
        let policy = dir.path().join("a/cordon.toml");
        fs::write(&policy, "").unwrap();
        let store = TrustStore::new(dir.path().join("t.json"));
        store
            .trust(&dir.path().join("a/../a/./cordon.toml"))
            .unwrap();
        assert!(store.is_trusted(&policy).unwrap());
    }

    #[test]
    fn corrupt_store_is_an_error_not_an_empty_store() {
        let dir = tempfile::tempdir().unwrap();
        let policy = dir.path().join("cordon.toml");
        fs::write(&policy, "").unwrap();
        let store = TrustStore::new(dir.path().join("t.json"));
        fs::write(store.path(), "{not json").unwrap();
        let err = store.trust(&policy).unwrap_err();
        assert!(matches!(err, PolicyError::TrustStore { .. }), "{err}");
        assert!(err.to_string().contains("corrupt"));
        // Untouched.
        assert_eq!(fs::read_to_string(store.path()).unwrap(), "{not json");
    }

    #[test]
    fn missing_policy_is_an_io_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = TrustStore::new(dir.path().join("t.json"));
        let err = store.trust(&dir.path().join("nope.toml")).unwrap_err();
        assert!(err.to_string().contains("nope.toml"), "{err}");
    }

    #[test]
    fn symlink_is_keyed_by_the_link() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere.toml");
        fs::write(&target, "").unwrap();
        let link = dir.path().join("cordon.toml");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let store = TrustStore::new(dir.path().join("t.json"));
        store.trust(&target).unwrap();
        assert!(
            !store.is_trusted(&link).unwrap(),
            "trusting the target does not trust the link"
        );
    }
}
