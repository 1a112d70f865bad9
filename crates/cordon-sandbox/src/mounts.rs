//! Builds the sandbox's filesystem view from a [`Layout`] (sandbox side, run by init).
//!
//! Runs as root of the outer user namespace inside a fresh mount namespace, in the manner of
//! bubblewrap: a private tmpfs becomes the root, the old root is reachable at `/oldroot` while
//! the new one is assembled under `/newroot`, then the old root is detached and we pivot in.

use std::ffi::CString;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::layout::{Layout, MountOp};
use crate::sys::{self, Attrs};

const STAGE: &str = "/tmp";
const NEW: &str = "/newroot";
const OLD: &str = "/oldroot";
const MASK_FILE: &str = "/.cordon-mask";

/// An error while building the view, naming the step and path.
#[derive(Debug)]
pub(crate) struct MountError {
    pub step: String,
    pub source: io::Error,
    /// What the user can do about it, when the step is one of the view's.
    pub fix: Option<String>,
}

impl std::fmt::Display for MountError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.step, self.source)?;
        if let Some(fix) = &self.fix {
            write!(f, ". {fix}")?;
        }
        Ok(())
    }
}

trait Ctx<T> {
    fn ctx(self, step: impl FnOnce() -> String) -> Result<T, MountError>;
}

impl<T> Ctx<T> for io::Result<T> {
    fn ctx(self, step: impl FnOnce() -> String) -> Result<T, MountError> {
        self.map_err(|source| MountError {
            step: step(),
            source,
            fix: None,
        })
    }
}

/// `base` + absolute `p`.
fn under(base: &str, p: &Path) -> PathBuf {
    Path::new(base).join(p.strip_prefix("/").unwrap_or(p))
}

fn cs(s: &str) -> CString {
    CString::new(s).expect("static string without NUL")
}

fn ensure_mountpoint(dst: &Path, dir: bool) -> io::Result<()> {
    if std::fs::symlink_metadata(dst).is_ok() {
        return Ok(());
    }
    if let Some(parent) = dst.parent() {
        std::fs::create_dir_all(parent)?;
    }
    if dir {
        std::fs::create_dir(dst)
    } else {
        std::fs::File::create(dst).map(drop)
    }
}

fn tmpfs(dst: &Path, options: &str, flags: libc::c_ulong) -> io::Result<()> {
    let data = cs(options);
    sys::mount(
        Some(&cs("tmpfs")),
        dst,
        Some(&cs("tmpfs")),
        flags,
        Some(&data),
    )
}

const RO: Attrs = Attrs {
    readonly: true,
    nosuid: true,
    nodev: true,
};

/// How /proc is mounted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProcView {
    /// Kernel knobs (/proc/sys, sysrq-trigger, …) bound read-only over the proc mount, even
    /// for root of the sandbox's user namespace. The kernel then refuses any nested sandbox a
    /// fresh /proc of its own (it would not hide them): it can only bind this one.
    Sealed,
    /// The plain proc mount: a nested sandbox (bwrap `--unshare-pid --proc /proc`) may mount
    /// its own. Only for a sandbox that is not root on the host: the kernel knobs are then
    /// guarded by the kernel's own checks for that uid, as on the host; all the uid may
    /// write are the sysctls of the namespaces cordon made for this sandbox (its IPC and
    /// message-queue limits, its PID namespace's pid_max).
    Plain,
}

/// The part of the view that is the same for every layout, made while init waits for its
/// spec: `/` made private, the staging tmpfs pivoted into (the host's root at `/oldroot`),
/// the mask file, and the empty new root. Nothing of it is reachable from the sandbox until
/// [`build`] pivots into the new root, which only [`build`] fills.
pub(crate) fn stage() -> Result<(), MountError> {
    let root = Path::new("/");
    // Nothing we mount may propagate back to the host.
    sys::mount(None, root, None, libc::MS_REC | libc::MS_PRIVATE, None)
        .ctx(|| "make / private".into())?;
    let stage = Path::new(STAGE);
    tmpfs(stage, "mode=0755", libc::MS_NOSUID | libc::MS_NODEV).ctx(|| "staging tmpfs".into())?;
    for d in ["newroot", "oldroot"] {
        std::fs::create_dir(stage.join(d)).ctx(|| format!("mkdir staging {d}"))?;
    }
    let mask = stage.join(MASK_FILE.trim_start_matches('/'));
    std::fs::File::create(&mask).ctx(|| "create mask file".into())?;
    std::fs::set_permissions(&mask, std::fs::Permissions::from_mode(0o000))
        .ctx(|| "chmod mask file".into())?;
    sys::pivot_root(stage, &stage.join("oldroot")).ctx(|| "pivot into staging".into())?;
    std::env::set_current_dir(root).ctx(|| "chdir /".into())?;
    tmpfs(
        Path::new(NEW),
        "mode=0755",
        libc::MS_NOSUID | libc::MS_NODEV,
    )
    .ctx(|| "new root tmpfs".into())
}

/// Overlays mounted by [`prepare`] on the staging root, each with the view step it is for.
#[derive(Debug, Default)]
pub(crate) struct Ahead {
    mounted: Vec<(MountOp, PathBuf)>,
    used: usize,
}

impl Ahead {
    /// How many [`build`] moved into the view.
    pub(crate) fn used(&self) -> usize {
        self.used
    }

    fn take(&mut self, op: &MountOp) -> Option<PathBuf> {
        let i = self.mounted.iter().position(|(o, _)| o == op)?;
        self.used += 1;
        Some(self.mounted.swap_remove(i).1)
    }
}

/// Mount `overlays` (the [`crate::protocol::Prepare`] frame's) on the staging root, after
/// [`stage`] and before the spec: their mounts then run while the host still makes the view.
/// One that fails is left out, so [`build`] mounts it in its place and reports what that
/// meets. What the view does not use stays on the staging root, which [`build`] detaches
/// before anything of the sandbox runs.
pub(crate) fn prepare(overlays: &[MountOp]) -> Ahead {
    let mut ahead = Ahead::default();
    for (n, op) in overlays.iter().enumerate() {
        if !matches!(op, MountOp::Overlay { .. }) {
            continue;
        }
        let at = PathBuf::from(format!("/.cordon-overlay-{n}"));
        let mounted = std::fs::create_dir(&at).and_then(|()| mount_overlay(op, &at));
        if mounted.is_ok() {
            ahead.mounted.push((op.clone(), at));
        }
    }
    ahead
}

/// Build the view on what [`stage`] made and pivot into it. On return, `/` is the sandbox's
/// root. `tmpfs_size`: the cap for the sandbox's own `/tmp` and `/dev/shm` (bytes), so with
/// only rlimits in force (which do not count tmpfs pages) a `[limits] memory` still bounds
/// them.
/// `ahead`: the overlays [`prepare`] mounted; each equal step of the view moves one into place.
pub(crate) fn build(
    layout: &Layout,
    tmpfs_size: Option<u64>,
    proc: ProcView,
    ahead: &mut Ahead,
) -> Result<(), MountError> {
    let root = Path::new("/");
    for op in &layout.mounts {
        apply(op, tmpfs_size, proc, ahead).map_err(|e| MountError {
            step: format!("{op} failed at {}", e.step),
            source: e.source,
            fix: Some(op.fix()),
        })?;
    }

    // Whatever is still the bare tmpfs root becomes read-only too (unless a test turned the
    // mount fence off: debug builds only).
    #[cfg(debug_assertions)]
    let fenced = !layout.mounts_off;
    #[cfg(not(debug_assertions))]
    let fenced = true;
    if fenced {
        sys::mount_setattr(Path::new(NEW), false, RO).ctx(|| "read-only new root".into())?;
    }
    std::env::set_current_dir(NEW).ctx(|| "chdir new root".into())?;
    sys::pivot_root(Path::new("."), Path::new(".")).ctx(|| "pivot into new root".into())?;
    // One lazy unmount takes the staging root and everything still mounted on it: the host's
    // root at /oldroot, and any overlay prepared ahead that the view did not use. Each
    // unmount call that frees mounts waits out an expedited RCU grace period, so one call
    // instead of two (old root, then staging) takes one wait off the command's start.
    sys::umount_detach(Path::new(".")).ctx(|| "detach staging and the old root".into())?;
    std::env::set_current_dir(root).ctx(|| "chdir /".into())?;
    Ok(())
}

fn apply(
    op: &MountOp,
    tmpfs_size: Option<u64>,
    proc: ProcView,
    ahead: &mut Ahead,
) -> Result<(), MountError> {
    let dst = under(NEW, op.path());
    let d = dst.clone();
    let at = move || d.display().to_string();
    match op {
        MountOp::Bind { path, writable } => {
            let src = under(OLD, path);
            let is_dir = std::fs::metadata(&src)
                .ctx(|| format!("stat {}", path.display()))?
                .is_dir();
            ensure_mountpoint(&dst, is_dir).ctx(at.clone())?;
            sys::bind(&src, &dst, true).ctx(at.clone())?;
            let attrs = Attrs {
                readonly: !writable,
                nosuid: true,
                nodev: true,
            };
            sys::mount_setattr(&dst, true, attrs).ctx(at)?;
        }
        MountOp::Tmpfs { .. } => {
            ensure_mountpoint(&dst, true).ctx(at.clone())?;
            let opts = match tmpfs_size {
                Some(bytes) => format!("mode=1777,size={bytes}"),
                None => "mode=1777".to_string(),
            };
            tmpfs(&dst, &opts, libc::MS_NOSUID | libc::MS_NODEV).ctx(at)?;
        }
        MountOp::Dev { .. } => build_dev(&dst)?,
        MountOp::Proc { .. } => mount_proc(&dst, proc)?,
        MountOp::Overlay { .. } => {
            ensure_mountpoint(&dst, true).ctx(at.clone())?;
            match ahead.take(op) {
                Some(mounted) => sys::move_mount(&mounted, &dst).ctx(at)?,
                None => mount_overlay(op, &dst).ctx(at)?,
            }
        }
        MountOp::StagedFile { copy, .. } => {
            ensure_mountpoint(&dst, false).ctx(at.clone())?;
            sys::bind(&under(OLD, copy), &dst, false).ctx(at.clone())?;
            sys::mount_setattr(
                &dst,
                false,
                Attrs {
                    readonly: false,
                    nosuid: true,
                    nodev: true,
                },
            )
            .ctx(at)?;
        }
        MountOp::Pin { .. } => {
            sys::bind(&dst, &dst, true).ctx(at)?;
        }
        MountOp::ReadOnly { .. } => {
            sys::bind(&dst, &dst, true).ctx(at.clone())?;
            sys::mount_setattr(&dst, true, RO).ctx(at)?;
        }
        MountOp::MaskDir { shown, .. } if shown.is_empty() => {
            tmpfs(
                &dst,
                "mode=000,size=4k,nr_inodes=2",
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            )
            .ctx(at.clone())?;
            sys::mount_setattr(&dst, false, RO).ctx(at)?;
        }
        MountOp::MaskDir { shown, sealed, .. } => mask_showing(&dst, shown, *sealed)?,
        MountOp::MaskFile { .. } => {
            sys::bind(Path::new(MASK_FILE), &dst, false).ctx(at.clone())?;
            sys::mount_setattr(&dst, false, RO).ctx(at)?;
        }
        MountOp::Content { content, .. } => bind_content(&dst, content)?,
        MountOp::File { host, .. } => {
            sys::bind(&under(OLD, host), &dst, false).ctx(at.clone())?;
            sys::mount_setattr(&dst, false, RO).ctx(at)?;
        }
        MountOp::Socket { host, .. } => {
            // Onto the empty file placed in the mask. Read-only still lets clients connect
            // (only the socket's own write permission is checked).
            sys::bind(&under(OLD, host), &dst, false).ctx(at.clone())?;
            sys::mount_setattr(&dst, false, RO).ctx(at)?;
        }
        MountOp::Program { host, .. } => {
            // Onto the empty file placed in the mask; executable, never writable.
            sys::bind(&under(OLD, host), &dst, false).ctx(at.clone())?;
            sys::mount_setattr(&dst, false, RO).ctx(at)?;
        }
    }
    Ok(())
}

/// A fresh `/proc`, its kernel knobs read-only unless `proc` is [`ProcView::Plain`].
fn mount_proc(dst: &Path, proc: ProcView) -> Result<(), MountError> {
    let at = || dst.display().to_string();
    ensure_mountpoint(dst, true).ctx(at)?;
    let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    // Refused where the runtime masks /proc paths (a container): the error names the option.
    sys::mount(Some(&cs("proc")), dst, Some(&cs("proc")), flags, None)
        .map_err(crate::probe::proc_refused)
        .ctx(at)?;
    if proc == ProcView::Plain {
        return Ok(());
    }
    // Kernel knobs stay read-only even for root of the sandbox's user namespace.
    for sub in [
        "sys",
        "sysrq-trigger",
        "irq",
        "bus",
        "fs",
        "latency_stats",
        "timer_list",
    ] {
        let p = dst.join(sub);
        if std::fs::symlink_metadata(&p).is_ok() {
            sys::bind(&p, &p, true).ctx(|| p.display().to_string())?;
            sys::mount_setattr(&p, true, RO).ctx(|| p.display().to_string())?;
        }
    }
    Ok(())
}

/// A masked directory holding only the masked copies `shown` (read-only), unlistable when
/// `sealed`.
fn mask_showing(dst: &Path, shown: &[(PathBuf, String)], sealed: bool) -> Result<(), MountError> {
    let at = || dst.display().to_string();
    // Only the masked copies, read-only; nothing else of the directory. In a home with
    // a view the directory may not be there to mask: the copies need a place still.
    ensure_mountpoint(dst, true).ctx(at)?;
    tmpfs(
        dst,
        "mode=0555,size=1m,nr_inodes=256",
        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
    )
    .ctx(at)?;
    for (rel, content) in shown {
        let file = dst.join(rel);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent).ctx(at)?;
        }
        std::fs::write(&file, content).ctx(at)?;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o444)).ctx(at)?;
    }
    if sealed {
        std::fs::set_permissions(dst, std::fs::Permissions::from_mode(0o111)).ctx(at)?;
    }
    sys::mount_setattr(dst, false, RO).ctx(at)?;
    Ok(())
}

/// A read-only file holding `content`, bound at `dst`.
fn bind_content(dst: &Path, content: &str) -> Result<(), MountError> {
    let at = || dst.display().to_string();
    // The file lives in the staging tmpfs (our root right now); the bind keeps it
    // alive after staging is detached.
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let src = PathBuf::from(format!("/.cordon-content-{n}"));
    std::fs::write(&src, content).ctx(at)?;
    std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o444)).ctx(at)?;
    ensure_mountpoint(dst, false).ctx(at)?;
    sys::bind(&src, dst, false).ctx(at)?;
    sys::mount_setattr(dst, false, RO).ctx(at)?;
    Ok(())
}

/// Mount the overlay `op` describes at `at`: its `lower` layers (top first), or the host's
/// directory at its path when it names none, with `upper` and `work` as the session's layer.
fn mount_overlay(op: &MountOp, at: &Path) -> io::Result<()> {
    let MountOp::Overlay {
        path,
        upper,
        work,
        lower,
    } = op
    else {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    };
    let lower: &[PathBuf] = if lower.is_empty() {
        std::slice::from_ref(path)
    } else {
        lower
    };
    let opts = overlay_options(lower, upper, work)?;
    let o = cs("overlay");
    sys::mount(
        Some(&o),
        at,
        Some(&o),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&opts),
    )
}

/// Options for an unprivileged overlay (`userxattr`: its bookkeeping lives in `user.*` xattrs,
/// which is what a user namespace may write). overlayfs splits options on `,` and lower dirs
/// on `:`, so paths holding those are refused rather than misparsed.
pub(crate) fn overlay_options(lower: &[PathBuf], upper: &Path, work: &Path) -> io::Result<CString> {
    overlay_options_at(OLD, lower, upper, work)
}

/// [`overlay_options`] with the layers' paths as seen below `base` (`/` when probing from the
/// host's own view).
pub(crate) fn overlay_options_at(
    base: &str,
    lower: &[PathBuf],
    upper: &Path,
    work: &Path,
) -> io::Result<CString> {
    let text_of = |p: &Path| -> io::Result<String> {
        let full = under(base, p);
        let text = full
            .to_str()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "non-UTF-8 path"))?;
        if text.contains([',', ':', '\\']) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("cannot overlay {text}: it contains , : or \\"),
            ));
        }
        Ok(text.to_owned())
    };
    let lowers = lower
        .iter()
        .map(|p| text_of(p))
        .collect::<io::Result<Vec<_>>>()?;
    let parts = [
        format!("lowerdir={}", lowers.join(":")),
        format!("upperdir={}", text_of(upper)?),
        format!("workdir={}", text_of(work)?),
        "userxattr".into(),
    ];
    CString::new(parts.join(","))
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))
}

/// A minimal `/dev`: the harmless character devices bound from the host, a private devpts
/// (so the sandbox's ptys are its own), and the usual symlinks. No disks, no kvm, no mem.
fn build_dev(dst: &Path) -> Result<(), MountError> {
    let at = || dst.display().to_string();
    ensure_mountpoint(dst, true).ctx(at)?;
    tmpfs(dst, "mode=0755", libc::MS_NOSUID | libc::MS_NOEXEC).ctx(at)?;
    for node in crate::layout::DEV_NODES {
        let target = dst.join(node);
        std::fs::File::create(&target).ctx(|| target.display().to_string())?;
        sys::bind(&Path::new(OLD).join("dev").join(node), &target, false)
            .ctx(|| target.display().to_string())?;
    }
    for dir in ["pts", "shm"] {
        std::fs::create_dir(dst.join(dir)).ctx(|| format!("mkdir /dev/{dir}"))?;
    }
    let pts = dst.join("pts");
    sys::mount(
        Some(&cs("devpts")),
        &pts,
        Some(&cs("devpts")),
        libc::MS_NOSUID | libc::MS_NOEXEC,
        Some(&cs("newinstance,ptmxmode=0666,mode=620")),
    )
    .ctx(|| "devpts".into())?;
    for (link, to) in [
        ("ptmx", "pts/ptmx"),
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        std::os::unix::fs::symlink(to, dst.join(link)).ctx(|| format!("symlink /dev/{link}"))?;
    }
    sys::mount_setattr(
        dst,
        false,
        Attrs {
            readonly: true,
            nosuid: true,
            nodev: false,
        },
    )
    .ctx(|| "read-only /dev".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overlay(path: &str, upper: &str) -> MountOp {
        MountOp::Overlay {
            path: path.into(),
            upper: upper.into(),
            work: format!("{upper}-work").into(),
            lower: Vec::new(),
        }
    }

    // A view step takes the overlay mounted ahead for it only when the two are the same
    // overlay in every part; each is taken once, and what the view never asks for stays aside.
    #[test]
    fn a_step_takes_only_its_own_overlay_once() {
        let home = overlay("/home/u", "/s/home");
        let npm = overlay("/home/u/.npm", "/s/npm");
        let mut ahead = Ahead {
            mounted: vec![
                (home.clone(), PathBuf::from("/.cordon-overlay-0")),
                (npm.clone(), PathBuf::from("/.cordon-overlay-1")),
            ],
            used: 0,
        };
        // Same path, another layer: not the one mounted ahead.
        assert_eq!(ahead.take(&overlay("/home/u", "/s/other")), None);
        // The same layer over other lower layers: not it either.
        let mut with_lower = home.clone();
        if let MountOp::Overlay { lower, .. } = &mut with_lower {
            lower.push("/elsewhere".into());
        }
        assert_eq!(ahead.take(&with_lower), None);
        assert_eq!(ahead.take(&home), Some(PathBuf::from("/.cordon-overlay-0")));
        assert_eq!(ahead.take(&home), None, "taken twice");
        assert_eq!(ahead.used(), 1);
        assert_eq!(
            ahead.mounted,
            vec![(npm, PathBuf::from("/.cordon-overlay-1"))]
        );
    }

    // The staged paths' overlays sent ahead are the view's own steps for them, so each is
    // taken; a staged file is no overlay.
    #[test]
    fn the_overlays_sent_ahead_are_the_views_own() {
        let t = tempfile::tempdir().unwrap();
        let home = t.path().join("home");
        let dir = home.join("proj/.git/hooks");
        let file = home.join(".bashrc");
        for d in [&dir, &t.path().join("s")] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(&file, "").unwrap();
        let s = t.path().join("s");
        let staged = vec![
            crate::Staged::Home {
                path: home.clone(),
                upper: s.join("hu"),
                work: s.join("hw"),
                view: None,
            },
            crate::Staged::Dir {
                path: dir.join("./"),
                upper: s.join("du"),
                work: s.join("dw"),
            },
            crate::Staged::File {
                path: file,
                copy: s.join("f"),
            },
        ];
        let sent: Vec<MountOp> = staged.iter().filter_map(crate::Staged::overlay).collect();
        assert_eq!(sent.len(), 2);
        let layout = crate::prepare_with_state(&cordon_policy::FilesystemPlan::default(), &staged);
        let mut ahead = Ahead {
            mounted: sent.into_iter().map(|o| (o, PathBuf::new())).collect(),
            used: 0,
        };
        for op in &layout.mounts {
            let _ = ahead.take(op);
        }
        assert_eq!(ahead.used(), 2, "{:?}", layout.mounts);
    }
}
