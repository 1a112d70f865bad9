//! Manifests: what a file tree looked like (kind, mode, size, BLAKE3 of content) and a root hash
//! over it; taking a snapshot (manifest + a copy); comparing two manifests.

use std::collections::BTreeMap;
use std::fs::{self, Metadata};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{StateError, io_err};
use crate::fsops;

/// What a manifest entry is. Nothing is ever followed: a symlink is recorded as a symlink.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (hashed by its target).
    Symlink,
    /// A FIFO, socket or device: recorded, never copied or applied.
    Other,
}

impl NodeKind {
    fn tag(self) -> &'static str {
        match self {
            NodeKind::File => "f",
            NodeKind::Dir => "d",
            NodeKind::Symlink => "l",
            NodeKind::Other => "o",
        }
    }
}

/// One file, directory or symlink in a manifest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// Its kind.
    pub kind: NodeKind,
    /// Permission bits (`mode & 0o7777`).
    pub mode: u32,
    /// Size in bytes (files: content; symlinks: target length; others: 0).
    pub size: u64,
    /// BLAKE3 hex of the content (symlink: of its target); `None` for directories and others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
}

impl Node {
    /// Whether two nodes have the same kind, permission bits and content.
    pub fn same_as(&self, other: &Node) -> bool {
        self.kind == other.kind && self.mode == other.mode && self.hash == other.hash
    }

    /// Whether any execute bit is set on a regular file.
    pub fn is_executable_file(&self) -> bool {
        self.kind == NodeKind::File && self.mode & 0o111 != 0
    }
}

/// A tree's manifest: relative path (empty for the root itself) → [`Node`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "ManifestFile", try_from = "ManifestFile")]
pub struct Manifest {
    /// The entries, sorted by path (component-wise, so a directory's descendants follow it).
    pub entries: BTreeMap<PathBuf, Node>,
}

#[derive(Serialize, Deserialize)]
struct ManifestFile {
    version: u32,
    entries: Vec<FileEntry>,
}

#[derive(Serialize, Deserialize)]
struct FileEntry {
    #[serde(with = "crate::pathser::one")]
    path: PathBuf,
    #[serde(flatten)]
    node: Node,
}

impl From<Manifest> for ManifestFile {
    fn from(m: Manifest) -> Self {
        ManifestFile {
            version: 1,
            entries: m
                .entries
                .into_iter()
                .map(|(path, node)| FileEntry { path, node })
                .collect(),
        }
    }
}

impl TryFrom<ManifestFile> for Manifest {
    type Error = String;
    fn try_from(f: ManifestFile) -> Result<Self, String> {
        if f.version != 1 {
            return Err(format!("unknown manifest version {}", f.version));
        }
        let mut entries = BTreeMap::new();
        for e in f.entries {
            if e.path.is_absolute()
                || e.path
                    .components()
                    .any(|c| !matches!(c, std::path::Component::Normal(_)))
            {
                return Err(format!("bad entry path {:?}", e.path));
            }
            entries.insert(e.path, e.node);
        }
        Ok(Manifest { entries })
    }
}

impl Manifest {
    /// BLAKE3 hex over every entry in order (path, kind, mode, size, hash), each field
    /// length-prefixed so no two manifests share a root hash by accident.
    pub fn root_hash(&self) -> String {
        let mut h = blake3::Hasher::new();
        h.update(b"cordon-manifest-v1\0");
        for (path, node) in &self.entries {
            let mode = format!("{:o}", node.mode);
            let size = node.size.to_string();
            let fields: [&[u8]; 5] = [
                path.as_os_str().as_bytes(),
                node.kind.tag().as_bytes(),
                mode.as_bytes(),
                size.as_bytes(),
                node.hash.as_deref().unwrap_or("").as_bytes(),
            ];
            for f in fields {
                h.update(&(f.len() as u64).to_le_bytes());
                h.update(f);
            }
        }
        h.finalize().to_hex().to_string()
    }

    /// Remove `path`'s descendants (not `path` itself).
    pub(crate) fn remove_below(&mut self, path: &Path) {
        let doomed: Vec<PathBuf> = self
            .entries
            .range::<Path, _>((std::ops::Bound::Excluded(path), std::ops::Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(path))
            .map(|(k, _)| k.clone())
            .collect();
        for k in doomed {
            self.entries.remove(&k);
        }
    }

    /// Read a manifest written by [`Manifest::save`].
    pub fn load(path: &Path) -> Result<Manifest, StateError> {
        let bytes = fs::read(path).map_err(io_err("read manifest", path))?;
        serde_json::from_slice(&bytes).map_err(|e| StateError::Corrupt {
            path: path.to_path_buf(),
            msg: e.to_string(),
        })
    }

    /// Write the manifest as JSON, atomically.
    pub fn save(&self, path: &Path) -> Result<(), StateError> {
        fsops::write_json(path, self, true)
    }

    /// [`Manifest::save`] without fsyncs (a session's `begin`: see
    /// `Session::make_durable`).
    pub(crate) fn save_quick(&self, path: &Path) -> Result<(), StateError> {
        fsops::write_json(path, self, false)
    }
}

/// BLAKE3 hex of a regular file's content (opened without following symlinks) and its size.
pub fn hash_file(path: &Path) -> Result<(String, u64), StateError> {
    let mut f = fsops::open_regular(path).map_err(io_err("open", path))?;
    let mut h = blake3::Hasher::new();
    h.update_reader(&mut f).map_err(io_err("read", path))?;
    let size = h.count();
    Ok((h.finalize().to_hex().to_string(), size))
}

/// BLAKE3 hex of a symlink's target.
pub(crate) fn hash_link(path: &Path) -> Result<(String, u64), StateError> {
    let target = fs::read_link(path).map_err(io_err("read symlink", path))?;
    let bytes = target.as_os_str().as_bytes();
    Ok((blake3::hash(bytes).to_hex().to_string(), bytes.len() as u64))
}

pub(crate) fn kind_of(md: &Metadata) -> NodeKind {
    let ft = md.file_type();
    if ft.is_dir() {
        NodeKind::Dir
    } else if ft.is_file() {
        NodeKind::File
    } else if ft.is_symlink() {
        NodeKind::Symlink
    } else {
        NodeKind::Other
    }
}

/// The node at `path` as it is now (hashing its content), with `md` its `lstat`.
pub(crate) fn node_with(path: &Path, md: &Metadata) -> Result<Node, StateError> {
    let kind = kind_of(md);
    let mode = md.permissions().mode() & 0o7777;
    let (hash, size) = match kind {
        NodeKind::File => {
            let (h, s) = hash_file(path)?;
            (Some(h), s)
        }
        NodeKind::Symlink => {
            let (h, s) = hash_link(path)?;
            (Some(h), s)
        }
        NodeKind::Dir | NodeKind::Other => (None, 0),
    };
    Ok(Node {
        kind,
        mode,
        size,
        hash,
    })
}

/// The node at `path` now, or `None` when nothing is there.
pub fn node_of(path: &Path) -> Result<Option<Node>, StateError> {
    match fs::symlink_metadata(path) {
        Ok(md) => node_with(path, &md).map(Some),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err("inspect", path)(e)),
    }
}

/// `base` joined with a manifest-relative path; the empty path is `base` itself (no trailing `/`).
pub(crate) fn join_rel(base: &Path, rel: &Path) -> PathBuf {
    if rel.as_os_str().is_empty() {
        base.to_path_buf()
    } else {
        base.join(rel)
    }
}

/// A git dir's object store is left out of snapshots and scans: it is only ever added to (a
/// content-addressed store git never runs anything from), the sandbox writes it in place
/// rather than through the git dir's copy-on-write layer, and hashing it at every start would
/// cost time in proportion to the repository's history.
fn walk(root: &Path) -> impl Iterator<Item = walkdir::Result<walkdir::DirEntry>> {
    walkdir::WalkDir::new(root)
        .follow_links(false)
        .follow_root_links(false)
        .same_file_system(true)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| {
            !(e.file_type().is_dir() && crate::exec_surface::is_git_objects(e.path()))
        })
}

/// A walk's error as the store reports it: the path it failed at (else `root`) and why.
pub(crate) fn walk_err(root: &Path, e: walkdir::Error) -> StateError {
    let path = e.path().unwrap_or(root).to_path_buf();
    let source = e
        .into_io_error()
        .unwrap_or_else(|| io::Error::other("filesystem loop"));
    StateError::Io {
        what: "walk",
        path,
        source,
    }
}

fn rel_of(root: &Path, path: &Path) -> PathBuf {
    path.strip_prefix(root)
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// The manifest of `path` (a file, symlink or directory tree) without copying anything. Symlinks
/// are not followed and other filesystems mounted below `path` are not entered.
pub fn scan(path: &Path) -> Result<Manifest, StateError> {
    let mut m = Manifest::default();
    for e in walk(path) {
        let e = e.map_err(|e| walk_err(path, e))?;
        let md = e.metadata().map_err(|e| walk_err(path, e))?;
        m.entries
            .insert(rel_of(path, e.path()), node_with(e.path(), &md)?);
    }
    Ok(m)
}

/// Take a snapshot of `path` into `into` (which must not exist yet; its parent must): directories
/// are recreated (0700), regular files hard-linked where possible and copied otherwise (another
/// filesystem, `protected_hardlinks`), symlinks recreated; FIFOs, sockets and devices are only
/// recorded. The manifest describes the copy, hashed after it was made.
///
/// A hard link shares its inode with the original: if the original is later modified in place,
/// so is the snapshot copy. [`crate::StateStore::restore`] re-verifies every hash for that reason.
pub fn snapshot(path: &Path, into: &Path) -> Result<Manifest, StateError> {
    let mut m = Manifest::default();
    for e in walk(path) {
        let e = e.map_err(|e| walk_err(path, e))?;
        let md = e.metadata().map_err(|e| walk_err(path, e))?;
        let rel = rel_of(path, e.path());
        let dst = join_rel(into, &rel);
        let kind = kind_of(&md);
        let mode = md.permissions().mode() & 0o7777;
        let node = match kind {
            NodeKind::Dir => {
                fsops::private_dir(&dst)?;
                Node {
                    kind,
                    mode,
                    size: 0,
                    hash: None,
                }
            }
            NodeKind::File => {
                let hash = if fs::hard_link(e.path(), &dst).is_ok() {
                    hash_file(&dst)?
                } else {
                    let h = fsops::copy_atomic(e.path(), &dst, 0o600, None)?;
                    let size = fs::symlink_metadata(&dst)
                        .map_err(io_err("inspect", &dst))?
                        .len();
                    (h, size)
                };
                Node {
                    kind,
                    mode,
                    size: hash.1,
                    hash: Some(hash.0),
                }
            }
            NodeKind::Symlink => {
                let target = fs::read_link(e.path()).map_err(io_err("read symlink", e.path()))?;
                std::os::unix::fs::symlink(&target, &dst)
                    .map_err(io_err("create symlink", &dst))?;
                let bytes = target.as_os_str().as_bytes();
                Node {
                    kind,
                    mode,
                    size: bytes.len() as u64,
                    hash: Some(blake3::hash(bytes).to_hex().to_string()),
                }
            }
            NodeKind::Other => Node {
                kind,
                mode,
                size: 0,
                hash: None,
            },
        };
        m.entries.insert(rel, node);
    }
    Ok(m)
}

/// How one path differs between two manifests (or between the host and a session's result).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// Present after, absent before.
    Added,
    /// Present before, absent after.
    Removed,
    /// Same kind, different content or permission bits.
    Modified,
    /// A file became a directory, a directory a symlink, and so on.
    TypeChanged,
}

impl ChangeKind {
    /// The one-character sign used in summaries: `+`, `-`, `~`, `!`.
    pub fn sign(self) -> char {
        match self {
            ChangeKind::Added => '+',
            ChangeKind::Removed => '-',
            ChangeKind::Modified => '~',
            ChangeKind::TypeChanged => '!',
        }
    }
}

/// One difference found by [`diff_manifests`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestChange {
    /// The relative path.
    pub path: PathBuf,
    /// What happened to it.
    pub kind: ChangeKind,
}

/// Every path that differs between `a` (before) and `b` (after), in path order. Sizes of
/// directories are ignored; kind, permission bits and content hash count.
pub fn diff_manifests(a: &Manifest, b: &Manifest) -> Vec<ManifestChange> {
    let mut out = Vec::new();
    let mut ia = a.entries.iter().peekable();
    let mut ib = b.entries.iter().peekable();
    loop {
        let (path, kind) = match (ia.peek(), ib.peek()) {
            (None, None) => break,
            (Some((pa, _)), None) => {
                let p = (*pa).clone();
                ia.next();
                (p, Some(ChangeKind::Removed))
            }
            (None, Some((pb, _))) => {
                let p = (*pb).clone();
                ib.next();
                (p, Some(ChangeKind::Added))
            }
            (Some((pa, na)), Some((pb, nb))) => match pa.cmp(pb) {
                std::cmp::Ordering::Less => {
                    let p = (*pa).clone();
                    ia.next();
                    (p, Some(ChangeKind::Removed))
                }
                std::cmp::Ordering::Greater => {
                    let p = (*pb).clone();
                    ib.next();
                    (p, Some(ChangeKind::Added))
                }
                std::cmp::Ordering::Equal => {
                    let k = if na.kind != nb.kind {
                        Some(ChangeKind::TypeChanged)
                    } else if !na.same_as(nb) {
                        Some(ChangeKind::Modified)
                    } else {
                        None
                    };
                    let p = (*pa).clone();
                    ia.next();
                    ib.next();
                    (p, k)
                }
            },
        };
        if let Some(kind) = kind {
            out.push(ManifestChange { path, kind });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_matches_scan_and_diff_finds_changes() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        fs::create_dir_all(src.join("sub")).unwrap();
        fs::write(src.join("a.txt"), "a").unwrap();
        fs::write(src.join("sub/b.txt"), "b").unwrap();
        std::os::unix::fs::symlink("a.txt", src.join("link")).unwrap();
        let snap = snapshot(&src, &t.path().join("snap")).unwrap();
        let now = scan(&src).unwrap();
        assert_eq!(snap, now);
        assert_eq!(snap.root_hash(), now.root_hash());
        assert_eq!(snap.entries.len(), 5);
        assert_eq!(fs::read(t.path().join("snap/sub/b.txt")).unwrap(), b"b");

        fs::write(src.join("new"), "n").unwrap();
        fs::remove_file(src.join("sub/b.txt")).unwrap();
        fs::remove_file(src.join("link")).unwrap();
        fs::create_dir(src.join("link")).unwrap();
        fs::set_permissions(src.join("a.txt"), fs::Permissions::from_mode(0o755)).unwrap();
        let after = scan(&src).unwrap();
        assert_ne!(snap.root_hash(), after.root_hash());
        let d: Vec<(String, ChangeKind)> = diff_manifests(&snap, &after)
            .into_iter()
            .map(|c| (c.path.display().to_string(), c.kind))
            .collect();
        assert_eq!(
            d,
            vec![
                ("a.txt".into(), ChangeKind::Modified),
                ("link".into(), ChangeKind::TypeChanged),
                ("new".into(), ChangeKind::Added),
                ("sub/b.txt".into(), ChangeKind::Removed),
            ]
        );
    }

    #[test]
    fn manifest_round_trips_json_including_non_utf8_names() {
        use std::os::unix::ffi::OsStringExt;
        let t = tempfile::tempdir().unwrap();
        let name = std::ffi::OsString::from_vec(vec![b'x', 0xff]);
        fs::write(t.path().join(&name), "z").unwrap();
        let m = scan(t.path()).unwrap();
        let out = tempfile::tempdir().unwrap();
        let mp = out.path().join("m.json");
        m.save(&mp).unwrap();
        assert_eq!(Manifest::load(&mp).unwrap(), m);
    }

    #[test]
    fn corrupt_manifest_is_an_error_naming_the_file() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("m.json");
        fs::write(
            &p,
            r#"{"version":1,"entries":[{"path":"../x","kind":"file","mode":0,"size":0}]}"#,
        )
        .unwrap();
        let e = Manifest::load(&p).unwrap_err().to_string();
        assert!(e.contains("m.json"), "{e}");
    }

    #[test]
    fn file_snapshot_is_one_root_entry() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("f");
        fs::write(&f, "hello").unwrap();
        let m = snapshot(&f, &t.path().join("copy")).unwrap();
        assert_eq!(m.entries.len(), 1);
        let n = &m.entries[Path::new("")];
        assert_eq!(n.kind, NodeKind::File);
        assert_eq!(n.size, 5);
        assert_eq!(fs::read(t.path().join("copy")).unwrap(), b"hello");
    }
}
