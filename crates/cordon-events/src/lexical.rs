//! Lexical path normalisation, the one meaning every layer uses: what a path names once `.`,
//! `..` and repeated slashes are taken out, without asking the filesystem.
//!
//! - The result is always absolute: a relative path is read as relative to `/` (every caller
//!   holds an absolute path; one that does not gets a path under `/`, never one relative to
//!   the current directory that could point anywhere).
//! - `.` components and repeated or trailing slashes go.
//! - `..` takes away the component before it and never goes above `/` (`/../etc` is `/etc`),
//!   as the kernel resolves `..` at the root.
//! - Symlinks are not followed: `/a/link/..` is `/a` even when `link` points elsewhere. A
//!   caller that needs what the kernel would open resolves links itself (reading each one and
//!   normalising again).
//!
//! Not for URL paths: the HTTP layer's path normalisation also decodes percent-escapes and
//! refuses encoded slashes (`cordon-http`'s `normalize_url_path`).

use std::path::{Component, Path, PathBuf};

/// `p` normalised lexically, as the module documentation says.
pub fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::Normal(s) => out.push(s),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(p: &str) -> PathBuf {
        normalize(Path::new(p))
    }

    #[test]
    fn dots_slashes_and_parents_go() {
        assert_eq!(n("/a/./b/../c//d"), PathBuf::from("/a/c/d"));
        assert_eq!(n("//a//b/./c/"), PathBuf::from("/a/b/c"));
        assert_eq!(n("/../../etc"), PathBuf::from("/etc"));
        assert_eq!(n("/"), PathBuf::from("/"));
        assert_eq!(n("/a/.."), PathBuf::from("/"));
    }

    #[test]
    fn relative_paths_are_read_from_the_root() {
        assert_eq!(n("a/.."), PathBuf::from("/"));
        assert_eq!(n("a/../../b"), PathBuf::from("/b"));
        assert_eq!(n(""), PathBuf::from("/"));
    }
}
