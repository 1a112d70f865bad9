//! The guest's boot files: the kernel (a distribution kernel found on the host), the kernel
//! modules the guest needs (resolved from `modules.dep`), and the initramfs cordon builds
//! itself, whose PID 1 is the cordon executable.
//!
//! The initramfs is written by hand as a "newc" cpio archive so that no external tool (cpio,
//! dracut, initramfs-tools) is needed and the result depends only on its inputs; it is cached
//! by a cheap identity of those inputs because the executable alone is tens of megabytes.

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs;
use std::io::{self, BufWriter, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::VmError;

/// The directory searched for kernel images when none is configured.
const BOOT_DIR: &str = "/boot";
/// The root of the installed module trees, one directory per kernel release.
const MODULES_ROOT: &str = "/lib/modules";

/// Bumped whenever the archive's layout changes, so that a cached archive of an older layout
/// is never reused.
const LAYOUT_VERSION: &str = "cordon-initramfs-1";

/// A guest kernel: its image and the module tree of the same release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kernel {
    /// The bzImage (`vmlinuz-*`) QEMU boots.
    pub image: PathBuf,
    /// The kernel release (`uname -r` inside the guest), e.g. `6.1.0-57-amd64`.
    pub release: String,
    /// The release's module tree, `/lib/modules/RELEASE`.
    pub modules: PathBuf,
}

/// Finds the guest kernel: `configured` (a vmlinuz path from `[sandbox.vm] kernel`) if given,
/// otherwise the newest `/boot/vmlinuz-*` whose modules are installed.
///
/// A configured kernel's release comes from its file name (`vmlinuz-RELEASE`) or else from the
/// version string in its bzImage header; its modules are looked up under
/// `/lib/modules/RELEASE` later, by [`module_closure`].
pub fn find_kernel(configured: Option<&Path>) -> Result<Kernel, VmError> {
    match configured {
        Some(image) => configured_kernel(image, Path::new(MODULES_ROOT)),
        None => newest_kernel(Path::new(BOOT_DIR), Path::new(MODULES_ROOT)),
    }
}

fn configured_kernel(image: &Path, modules_root: &Path) -> Result<Kernel, VmError> {
    if !fs::metadata(image).is_ok_and(|m| m.is_file()) {
        return Err(VmError::KernelMissing {
            path: image.to_owned(),
        });
    }
    let from_name = image
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("vmlinuz-"))
        .filter(|r| !r.is_empty())
        .map(str::to_owned);
    let release = match from_name {
        Some(r) => r,
        None => bzimage_release(image)?,
    };
    Ok(Kernel {
        image: image.to_owned(),
        modules: modules_root.join(&release),
        release,
    })
}

/// The newest `vmlinuz-RELEASE` in `boot` with a readable `modules_root/RELEASE/modules.dep`:
/// a kernel without its modules cannot give the guest virtio or 9p.
fn newest_kernel(boot: &Path, modules_root: &Path) -> Result<Kernel, VmError> {
    let none = || VmError::NoKernel {
        searched: boot.to_owned(),
        modules: modules_root.to_owned(),
    };
    let entries = fs::read_dir(boot).map_err(|_| none())?;
    let mut best: Option<Kernel> = None;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(release) = name.to_str().and_then(|n| n.strip_prefix("vmlinuz-")) else {
            continue;
        };
        if release.is_empty() || !entry.path().is_file() {
            continue;
        }
        let modules = modules_root.join(release);
        if fs::File::open(modules.join("modules.dep")).is_err() {
            continue;
        }
        if best
            .as_ref()
            .is_some_and(|b| compare_releases(&b.release, release) != Ordering::Less)
        {
            continue;
        }
        best = Some(Kernel {
            image: entry.path(),
            release: release.to_owned(),
            modules,
        });
    }
    best.ok_or_else(none)
}

/// Compares kernel releases as versions: runs of digits compare as numbers, the rest as text,
/// so that `6.1.0-10-amd64` is newer than `6.1.0-9-amd64` (lexically it is older).
fn compare_releases(a: &str, b: &str) -> Ordering {
    fn chunks(s: &str) -> Vec<(bool, &str)> {
        let mut out = Vec::new();
        let mut start = 0;
        let bytes = s.as_bytes();
        for i in 1..=bytes.len() {
            if i == bytes.len() || bytes[i].is_ascii_digit() != bytes[start].is_ascii_digit() {
                out.push((bytes[start].is_ascii_digit(), &s[start..i]));
                start = i;
            }
        }
        out
    }
    let (ca, cb) = (chunks(a), chunks(b));
    for ((da, sa), (db, sb)) in ca.iter().zip(cb.iter()) {
        let ord = if *da && *db {
            let (ta, tb) = (sa.trim_start_matches('0'), sb.trim_start_matches('0'));
            ta.len().cmp(&tb.len()).then_with(|| ta.cmp(tb))
        } else {
            sa.cmp(sb)
        };
        if ord != Ordering::Equal {
            return ord;
        }
    }
    ca.len().cmp(&cb.len())
}

/// The release in a bzImage's header: the kernel version string lives at the u16 at 0x20E
/// plus 0x200 (the boot protocol's `kernel_version` field), e.g. `6.1.0-57-amd64
/// (debian-kernel@lists.debian.org) #1 SMP ...`; its first word is the release.
pub(crate) fn bzimage_release(image: &Path) -> Result<String, VmError> {
    let bad = |reason: &str| VmError::KernelRelease {
        path: image.to_owned(),
        reason: reason.to_owned(),
    };
    let mut file = fs::File::open(image).map_err(VmError::io("read the kernel", image))?;
    let mut head = vec![0u8; 0x10000];
    let n = read_up_to(&mut file, &mut head).map_err(VmError::io("read the kernel", image))?;
    head.truncate(n);
    // "HdrS" marks a boot protocol header; without it 0x20E means nothing.
    if head.get(0x202..0x206) != Some(b"HdrS".as_slice()) {
        return Err(bad("no bzImage header"));
    }
    let field = u16::from_le_bytes([head[0x20E], head[0x20F]]) as usize;
    if field == 0 {
        return Err(bad("the header has no version string"));
    }
    let start = field + 0x200;
    let rest = head
        .get(start..)
        .ok_or_else(|| bad("the version string lies past the header"))?;
    let end = rest
        .iter()
        .position(|&b| b == 0)
        .ok_or_else(|| bad("the version string is not terminated"))?;
    let text =
        std::str::from_utf8(&rest[..end]).map_err(|_| bad("the version string is not text"))?;
    text.split_whitespace()
        .next()
        .map(str::to_owned)
        .ok_or_else(|| bad("the version string is empty"))
}

fn read_up_to(file: &mut fs::File, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// The kernel modules the guest loads, by name: the virtio transports (MMIO for `microvm`,
/// PCI in case a machine with PCI is used), the network card, the console/control port, the
/// 9p root share, the entropy device QEMU attaches, and tun for the sandbox's network inside
/// the guest. Their dependencies (virtio, virtio_ring, 9pnet, netfs, fscache, failover, ...)
/// are added by [`module_closure`].
pub const GUEST_MODULES: &[&str] = &[
    "virtio_mmio",
    "virtio_pci",
    "virtio_net",
    "virtio_console",
    "9pnet_virtio",
    "9p",
    "virtio_rng",
    "tun",
];

/// The module files (paths relative to the module tree, as in `modules.dep`) to load for
/// `wanted`, dependencies first, each once. A wanted module built into the kernel (listed in
/// `modules.builtin`) needs no file and is skipped; one that is neither is an error.
pub fn module_closure(kernel: &Kernel, wanted: &[&str]) -> Result<Vec<PathBuf>, VmError> {
    let dep_path = kernel.modules.join("modules.dep");
    let builtin_path = kernel.modules.join("modules.builtin");
    let dep_text =
        fs::read_to_string(&dep_path).map_err(VmError::io("read the module list", &dep_path))?;
    // A kernel may ship without modules.builtin; then nothing counts as built in.
    let builtin_text = match fs::read_to_string(&builtin_path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
        Err(e) => {
            return Err(VmError::io("read the built-in module list", &builtin_path)(
                e,
            ));
        }
    };
    let deps = parse_modules_dep(&dep_text);
    let by_name: HashMap<String, &str> =
        deps.keys().map(|path| (module_name(path), *path)).collect();
    let builtin: HashSet<String> = builtin_text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(module_name)
        .collect();

    let mut order = Vec::new();
    let mut seen = HashSet::new();
    for name in wanted {
        let key = normalize(name);
        match by_name.get(&key) {
            Some(path) => visit(path, &deps, &mut seen, &mut order),
            None if builtin.contains(&key) => {}
            None => {
                return Err(VmError::Module {
                    name: (*name).to_owned(),
                    dep: dep_path,
                    builtin: builtin_path,
                });
            }
        }
    }
    Ok(order.into_iter().map(PathBuf::from).collect())
}

/// `modules.dep`: one line per module, `path.ko: dep1.ko dep2.ko`.
fn parse_modules_dep(text: &str) -> HashMap<&str, Vec<&str>> {
    text.lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(path, deps)| (path.trim(), deps.split_whitespace().collect()))
        .filter(|(path, _)| !path.is_empty())
        .collect()
}

/// Depth-first, dependencies before their user: the order `insmod` needs (it resolves no
/// dependencies itself, unlike modprobe).
fn visit<'a>(
    path: &'a str,
    deps: &HashMap<&'a str, Vec<&'a str>>,
    seen: &mut HashSet<&'a str>,
    order: &mut Vec<&'a str>,
) {
    if !seen.insert(path) {
        return;
    }
    for dep in deps.get(path).map(Vec::as_slice).unwrap_or_default() {
        visit(dep, deps, seen, order);
    }
    order.push(path);
}

/// A module's name from its path: the file stem before `.ko` (also `.ko.xz` etc.), with `-`
/// and `_` equivalent as the kernel treats them.
fn module_name(path: &str) -> String {
    let file = path.rsplit('/').next().unwrap_or(path);
    let stem = file.find(".ko").map_or(file, |i| &file[..i]);
    normalize(stem)
}

fn normalize(name: &str) -> String {
    name.replace('-', "_")
}

/// Builds the initramfs for `kernel` whose init is `exe`, or reuses the one in `cache_dir`
/// built from the same inputs, and returns its path.
///
/// Contents: `/cordon` (the executable), its ELF interpreter and the shared libraries this
/// process has mapped (each at its own path), the guest modules under
/// `/lib/modules/RELEASE/`, `/modules` (their archive paths in load order), `/dev/console`
/// and the empty mount points `/dev`, `/proc`, `/sys`, `/newroot`, `/tmp`.
///
/// The libraries come from `/proc/self/maps`, so `exe` is meant to be the running executable
/// (`std::env::current_exe()`): a different binary with other libraries would lack them.
pub fn initramfs(kernel: &Kernel, exe: &Path, cache_dir: &Path) -> Result<PathBuf, VmError> {
    let interp = elf_interpreter(exe)?;
    let libs = mapped_libraries()?;
    let modules = module_closure(kernel, GUEST_MODULES)?;

    let mut files: Vec<(String, PathBuf, u32)> = Vec::new();
    files.push(("cordon".to_owned(), exe.to_owned(), 0o755));
    if let Some(interp) = &interp {
        files.push((archive_name(interp), interp.clone(), 0o755));
    }
    for lib in &libs {
        files.push((archive_name(lib), lib.clone(), 0o755));
    }
    let module_dir = format!("lib/modules/{}", kernel.release);
    let mut module_list = String::new();
    for rel in &modules {
        let name = format!("{module_dir}/{}", rel.display());
        module_list.push('/');
        module_list.push_str(&name);
        module_list.push('\n');
        files.push((name, kernel.modules.join(rel), 0o644));
    }
    // One file at one path: the interpreter is also mapped, so it would appear twice.
    let mut unique = HashSet::new();
    files.retain(|(name, _, _)| unique.insert(name.clone()));

    let key = cache_key(kernel, &files)?;
    let target = cache_dir.join(format!("initramfs-{key}.cpio"));
    if target.is_file() {
        return Ok(target);
    }
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(cache_dir)
        .map_err(VmError::io("create the cache directory", cache_dir))?;

    // Every directory of every member, plus the mount points and the library directories the
    // dynamic loader searches (so that a library can be added at its usual path later).
    // A BTreeSet sorts each directory before the ones inside it.
    let mut all_dirs: BTreeSet<String> = BTreeSet::new();
    let base = [
        "dev",
        "proc",
        "sys",
        "newroot",
        "tmp",
        "lib64",
        "lib/x86_64-linux-gnu",
        "usr/lib/x86_64-linux-gnu",
    ];
    let members = files
        .iter()
        .map(|(name, _, _)| Path::new(name.as_str()).parent().unwrap_or(Path::new("")));
    for dir in base.iter().map(Path::new).chain(members) {
        for a in dir.ancestors().filter(|a| !a.as_os_str().is_empty()) {
            all_dirs.insert(a.to_string_lossy().into_owned());
        }
    }

    let tmp = cache_dir.join(format!(".initramfs-{key}.{}.tmp", std::process::id()));
    let result = (|| -> Result<(), VmError> {
        let file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(VmError::io("create", &tmp))?;
        let write_err = VmError::io("write", &tmp);
        let mut cpio = CpioWriter::new(BufWriter::new(file));
        let res = (|| -> io::Result<()> {
            // BTreeSet order puts every directory before the ones inside it.
            for d in &all_dirs {
                cpio.dir(d, 0o755)?;
            }
            // The kernel opens /dev/console for init's stdin/stdout/stderr before init runs;
            // without the node init has no output at all (devtmpfs is not mounted yet).
            cpio.char_device("dev/console", 0o600, 5, 1)?;
            cpio.file_bytes("modules", 0o644, module_list.as_bytes())?;
            for (name, source, mode) in &files {
                let mut src = fs::File::open(source)?;
                let len = src.metadata()?.len();
                cpio.file_from(name, *mode, len, &mut src)?;
            }
            let out = cpio.finish()?;
            out.into_inner().map_err(|e| e.into_error())?.sync_all()
        })();
        res.map_err(write_err)?;
        fs::rename(&tmp, &target).map_err(VmError::io("rename into place", &target))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map(|()| target)
}

/// A path as an archive member name: relative, as the kernel's own initramfs lists are.
fn archive_name(path: &Path) -> String {
    path.to_string_lossy().trim_start_matches('/').to_owned()
}

/// The cache key: a sha256 over the identity of each input file (device, inode, size, mtime
/// in nanoseconds, not its bytes: hashing a 90 MB executable on every start would cost more
/// than the boot), the kernel release and the member list. The executable is `files`' first
/// member, identified like the others.
fn cache_key(kernel: &Kernel, files: &[(String, PathBuf, u32)]) -> Result<String, VmError> {
    let mut h = Sha256::new();
    h.update(LAYOUT_VERSION.as_bytes());
    h.update(b"\0");
    h.update(kernel.release.as_bytes());
    h.update(b"\0");
    for (name, source, mode) in files {
        let m = fs::metadata(source).map_err(VmError::io("read", source))?;
        h.update(format!(
            "{name}\0{}\0{mode:o}\0{}:{}:{}:{}.{}\n",
            source.display(),
            m.dev(),
            m.ino(),
            m.size(),
            m.mtime(),
            m.mtime_nsec()
        ));
    }
    let digest = h.finalize();
    Ok(digest
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>()[..32]
        .to_owned())
}

/// The shared libraries this process has mapped from files, from `/proc/self/maps`: the ones
/// the dynamic loader found for the executable, so exactly the ones the guest needs (assuming
/// nothing was `dlopen`ed that the guest must not have).
fn mapped_libraries() -> Result<Vec<PathBuf>, VmError> {
    let maps_path = Path::new("/proc/self/maps");
    let maps = fs::read_to_string(maps_path).map_err(VmError::io("read", maps_path))?;
    let mut libs = BTreeSet::new();
    for line in maps.lines() {
        // address perms offset dev inode path; the path may contain spaces, so split 5 times.
        let Some(path) = line.splitn(6, ' ').nth(5).map(str::trim) else {
            continue;
        };
        if !path.starts_with('/') || path.ends_with(" (deleted)") {
            continue;
        }
        let file = path.rsplit('/').next().unwrap_or(path);
        if file.ends_with(".so") || file.contains(".so.") {
            libs.insert(PathBuf::from(path));
        }
    }
    Ok(libs.into_iter().collect())
}

/// The program interpreter (`PT_INTERP`, e.g. `/lib64/ld-linux-x86-64.so.2`) of an ELF64
/// little-endian executable, or `None` for a static one.
pub(crate) fn elf_interpreter(exe: &Path) -> Result<Option<PathBuf>, VmError> {
    let bad = |reason: &str| VmError::Executable {
        path: exe.to_owned(),
        reason: reason.to_owned(),
    };
    let mut file = fs::File::open(exe).map_err(VmError::io("read", exe))?;
    let mut head = vec![0u8; 64 * 1024];
    let n = read_up_to(&mut file, &mut head).map_err(VmError::io("read", exe))?;
    head.truncate(n);
    if head.len() < 64 || &head[..4] != b"\x7fELF" {
        return Err(bad("not an ELF file"));
    }
    if head[4] != 2 || head[5] != 1 {
        return Err(bad("not a 64-bit little-endian ELF file"));
    }
    let u16_at = |o: usize| u16::from_le_bytes([head[o], head[o + 1]]) as usize;
    let u64_at = |b: &[u8], o: usize| -> Option<u64> {
        Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?))
    };
    let phoff = u64_at(&head, 0x20).ok_or_else(|| bad("truncated header"))? as usize;
    let (phentsize, phnum) = (u16_at(0x36), u16_at(0x38));
    if phentsize < 56 {
        return Err(bad("program header entries too small"));
    }
    for i in 0..phnum {
        let ph = head
            .get(phoff + i * phentsize..phoff + (i + 1) * phentsize)
            .ok_or_else(|| bad("program headers past the first 64 KiB"))?;
        const PT_INTERP: u32 = 3;
        if u32::from_le_bytes([ph[0], ph[1], ph[2], ph[3]]) != PT_INTERP {
            continue;
        }
        let off = u64_at(ph, 8).ok_or_else(|| bad("truncated program header"))? as usize;
        let size = u64_at(ph, 32).ok_or_else(|| bad("truncated program header"))? as usize;
        let raw = match head.get(off..off + size) {
            Some(r) => r.to_vec(),
            None => {
                use std::io::{Seek, SeekFrom};
                let mut r = vec![0u8; size.min(4096)];
                file.seek(SeekFrom::Start(off as u64))
                    .map_err(VmError::io("read", exe))?;
                file.read_exact(&mut r).map_err(VmError::io("read", exe))?;
                r
            }
        };
        let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
        let text = std::str::from_utf8(&raw[..end])
            .map_err(|_| bad("the interpreter path is not text"))?;
        if !text.starts_with('/') {
            return Err(bad("the interpreter path is not absolute"));
        }
        return Ok(Some(PathBuf::from(text)));
    }
    Ok(None)
}

/// A writer of "newc" cpio archives (the format the kernel unpacks as an initramfs): each
/// member is a 110-byte ASCII header, the NUL-terminated name padded to 4 bytes, and the data
/// padded to 4 bytes; a `TRAILER!!!` member ends the archive.
pub(crate) struct CpioWriter<W: Write> {
    out: W,
    next_ino: u32,
}

impl<W: Write> CpioWriter<W> {
    pub(crate) fn new(out: W) -> Self {
        CpioWriter { out, next_ino: 1 }
    }

    /// Writes a member's header and name. Times are 0 so the archive depends only on its
    /// contents; owners are root, as the guest's init runs as root.
    fn header(
        &mut self,
        name: &str,
        mode: u32,
        nlink: u32,
        size: u64,
        rdev: (u32, u32),
    ) -> io::Result<()> {
        let size32 = u32::try_from(size).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{name} is over 4 GiB, too big for cpio"),
            )
        })?;
        let ino = self.next_ino;
        self.next_ino += 1;
        let namesize = name.len() + 1;
        let fields = [
            ino,
            mode,
            0,
            0,
            nlink,
            0,
            size32,
            0,
            0,
            rdev.0,
            rdev.1,
            namesize as u32,
            0,
        ];
        let mut header = String::with_capacity(110);
        header.push_str("070701");
        for f in fields {
            header.push_str(&format!("{f:08X}"));
        }
        self.out.write_all(header.as_bytes())?;
        self.out.write_all(name.as_bytes())?;
        self.out.write_all(b"\0")?;
        self.pad(110 + namesize as u64)
    }

    fn pad(&mut self, len: u64) -> io::Result<()> {
        let n = (4 - (len % 4) as usize) % 4;
        self.out.write_all(&[0u8; 3][..n])
    }

    /// A directory.
    pub(crate) fn dir(&mut self, name: &str, perm: u32) -> io::Result<()> {
        self.header(name, 0o040000 | perm, 2, 0, (0, 0))
    }

    /// A character device node.
    pub(crate) fn char_device(
        &mut self,
        name: &str,
        perm: u32,
        major: u32,
        minor: u32,
    ) -> io::Result<()> {
        self.header(name, 0o020000 | perm, 1, 0, (major, minor))
    }

    /// A regular file with the given bytes.
    pub(crate) fn file_bytes(&mut self, name: &str, perm: u32, data: &[u8]) -> io::Result<()> {
        self.file_from(name, perm, data.len() as u64, &mut &data[..])
    }

    /// A regular file of `len` bytes read from `src` (streamed: the executable is large).
    pub(crate) fn file_from(
        &mut self,
        name: &str,
        perm: u32,
        len: u64,
        src: &mut impl Read,
    ) -> io::Result<()> {
        self.header(name, 0o100000 | perm, 1, len, (0, 0))?;
        let copied = io::copy(&mut src.take(len), &mut self.out)?;
        if copied != len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{name} shrank while being archived"),
            ));
        }
        self.pad(len)
    }

    /// Writes the trailer and returns the output.
    pub(crate) fn finish(mut self) -> io::Result<W> {
        self.header("TRAILER!!!", 0, 1, 0, (0, 0))?;
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A member as read back: name, mode, (rdev major, minor), data.
    type Member = (String, u32, (u32, u32), Vec<u8>);

    /// Parses a newc archive back, checking the padding rules.
    fn parse_cpio(mut b: &[u8]) -> Vec<Member> {
        let total = b.len();
        let mut out = Vec::new();
        loop {
            assert_eq!((total - b.len()) % 4, 0, "member not 4-byte aligned");
            assert_eq!(&b[..6], b"070701");
            let field = |i: usize| {
                u32::from_str_radix(std::str::from_utf8(&b[6 + i * 8..14 + i * 8]).unwrap(), 16)
                    .unwrap()
            };
            let (mode, size, rmaj, rmin, namesize) = (
                field(1),
                field(6) as usize,
                field(9),
                field(10),
                field(11) as usize,
            );
            assert_eq!((field(2), field(3)), (0, 0), "uid/gid");
            let name = std::str::from_utf8(&b[110..110 + namesize - 1])
                .unwrap()
                .to_owned();
            assert_eq!(b[110 + namesize - 1], 0);
            let data_start = (110 + namesize).div_ceil(4) * 4;
            let data = b[data_start..data_start + size].to_vec();
            b = &b[(data_start + size).div_ceil(4) * 4..];
            if name == "TRAILER!!!" {
                assert!(b.is_empty(), "bytes after the trailer");
                return out;
            }
            out.push((name, mode, (rmaj, rmin), data));
        }
    }

    #[test]
    fn cpio_round_trip() {
        let mut w = CpioWriter::new(Vec::new());
        w.dir("dev", 0o755).unwrap();
        w.char_device("dev/console", 0o600, 5, 1).unwrap();
        w.file_bytes("a", 0o644, b"").unwrap();
        w.file_bytes("bb", 0o755, b"hello").unwrap();
        w.file_bytes("ccc/d", 0o644, &[7u8; 1001]).unwrap();
        let bytes = w.finish().unwrap();
        let members = parse_cpio(&bytes);
        let summary: Vec<_> = members
            .iter()
            .map(|(n, m, r, d)| (n.as_str(), *m, *r, d.len()))
            .collect();
        assert_eq!(
            summary,
            vec![
                ("dev", 0o40755, (0, 0), 0),
                ("dev/console", 0o20600, (5, 1), 0),
                ("a", 0o100644, (0, 0), 0),
                ("bb", 0o100755, (0, 0), 5),
                ("ccc/d", 0o100644, (0, 0), 1001),
            ]
        );
        assert_eq!(members[3].3, b"hello");

        // The system's cpio, when installed, reads it too.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.cpio");
        fs::write(&path, &bytes).unwrap();
        let listed = std::process::Command::new("cpio")
            .arg("-it")
            .stdin(fs::File::open(&path).unwrap())
            .output();
        match listed {
            Ok(o) if o.status.success() => {
                let names = String::from_utf8(o.stdout).unwrap();
                assert_eq!(
                    names.lines().collect::<Vec<_>>(),
                    ["dev", "dev/console", "a", "bb", "ccc/d"]
                );
            }
            Ok(o) => panic!("cpio -it failed: {}", String::from_utf8_lossy(&o.stderr)),
            Err(e) => {
                eprintln!("cpio not run ({e}); the archive was checked by the test's own reader")
            }
        }
    }

    fn fake_kernel(dep: &str, builtin: Option<&str>) -> (tempfile::TempDir, Kernel) {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("modules.dep"), dep).unwrap();
        if let Some(b) = builtin {
            fs::write(dir.path().join("modules.builtin"), b).unwrap();
        }
        let kernel = Kernel {
            image: dir.path().join("vmlinuz-9.9"),
            release: "9.9".into(),
            modules: dir.path().to_owned(),
        };
        (dir, kernel)
    }

    #[test]
    fn module_closure_orders_dependencies_first() {
        let dep = "\
kernel/fs/9p/9p.ko: kernel/net/9p/9pnet.ko kernel/fs/fscache/fscache.ko kernel/fs/netfs/netfs.ko
kernel/fs/fscache/fscache.ko: kernel/fs/netfs/netfs.ko
kernel/fs/netfs/netfs.ko:
kernel/net/9p/9pnet.ko:
kernel/net/9p/9pnet_virtio.ko: kernel/net/9p/9pnet.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/virtio/virtio.ko: kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/virtio/virtio_ring.ko:
kernel/drivers/char/hw_random/virtio-rng.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
";
        let (_d, k) = fake_kernel(dep, Some("kernel/drivers/net/tun.ko\n"));
        let got = module_closure(&k, &["9p", "9pnet_virtio", "virtio_rng", "tun"]).unwrap();
        let got: Vec<String> = got
            .iter()
            .map(|p| p.to_string_lossy().rsplit('/').next().unwrap().to_owned())
            .collect();
        assert_eq!(
            got,
            [
                "9pnet.ko",
                "netfs.ko",
                "fscache.ko",
                "9p.ko",
                "virtio_ring.ko",
                "virtio.ko",
                "9pnet_virtio.ko",
                "virtio-rng.ko"
            ]
        );

        let err = module_closure(&k, &["nosuch"]).unwrap_err();
        assert!(err.to_string().contains("nosuch"), "{err}");
        // Without modules.builtin, a module that is not loadable is an error, not skipped.
        let (_d, k) = fake_kernel(dep, None);
        assert!(module_closure(&k, &["tun"]).is_err());
    }

    #[test]
    fn releases_compare_as_versions() {
        assert_eq!(
            compare_releases("6.1.0-10-amd64", "6.1.0-9-amd64"),
            Ordering::Greater
        );
        assert_eq!(
            compare_releases("6.10.0-1-amd64", "6.9.0-1-amd64"),
            Ordering::Greater
        );
        assert_eq!(
            compare_releases("6.1.0-9-amd64", "6.1.0-9-amd64"),
            Ordering::Equal
        );
        assert_eq!(compare_releases("5.10.0", "5.10.0-1"), Ordering::Less);
    }

    #[test]
    fn newest_kernel_needs_its_modules() {
        let boot = tempfile::tempdir().unwrap();
        let mods = tempfile::tempdir().unwrap();
        for r in ["6.1.0-9-amd64", "6.1.0-10-amd64", "6.1.0-11-amd64"] {
            fs::write(boot.path().join(format!("vmlinuz-{r}")), b"x").unwrap();
        }
        for r in ["6.1.0-9-amd64", "6.1.0-10-amd64"] {
            fs::create_dir(mods.path().join(r)).unwrap();
            fs::write(mods.path().join(r).join("modules.dep"), b"").unwrap();
        }
        let k = newest_kernel(boot.path(), mods.path()).unwrap();
        assert_eq!(k.release, "6.1.0-10-amd64");
        assert_eq!(k.modules, mods.path().join("6.1.0-10-amd64"));

        let empty = tempfile::tempdir().unwrap();
        let err = newest_kernel(empty.path(), mods.path())
            .unwrap_err()
            .to_string();
        assert!(err.contains("apt-get install linux-image-amd64"), "{err}");
    }

    #[test]
    fn bzimage_version_of_the_installed_kernel() {
        let Ok(k) = find_kernel(None) else {
            eprintln!("skipped: no kernel with modules in /boot");
            return;
        };
        assert_eq!(bzimage_release(&k.image).unwrap(), k.release);
        // A copy not named vmlinuz-RELEASE gets its release from the header.
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join("bzImage");
        fs::copy(&k.image, &copy).unwrap();
        assert_eq!(find_kernel(Some(&copy)).unwrap().release, k.release);
        assert!(bzimage_release(&std::env::current_exe().unwrap()).is_err());
    }

    #[test]
    fn elf_interpreter_of_this_test() {
        let exe = std::env::current_exe().unwrap();
        let interp = elf_interpreter(&exe)
            .unwrap()
            .expect("the test binary is dynamically linked");
        assert!(
            interp.to_string_lossy().contains("ld-linux"),
            "{}",
            interp.display()
        );
        assert!(elf_interpreter(Path::new("/proc/self/maps")).is_err());
    }
}
