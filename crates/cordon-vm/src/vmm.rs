//! The VMM: finding QEMU, telling whether KVM can be used, and the QEMU command line of the
//! guest machine.
//!
//! The machine is QEMU's `microvm` (no PCI, no firmware option ROMs, virtio over MMIO): it
//! boots a kernel directly in well under a second with KVM and has the smallest device model
//! QEMU offers, which matters because the device model is the attack surface a guest sees.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The guest's MAC address: locally administered (0x02), then "cord" in ASCII and 02, so it
/// is recognisable in the gateway's logs.
const GUEST_MAC: &str = "02:63:6f:72:64:02";
/// The largest MTU the guest's virtio-net is told to use: the stream netdev carries frames
/// over a Unix socket, where large frames cost nothing and save per-packet work. 65520 fits
/// `host_mtu`'s u16 and leaves room for the Ethernet header below 64 KiB.
const GUEST_MTU: u16 = 65520;

/// How the guest's CPUs are run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accel {
    /// Hardware virtualisation through `/dev/kvm`.
    Kvm,
    /// QEMU's emulator (Tiny Code Generator): no KVM needed, many times slower.
    Tcg,
}

impl Accel {
    /// The accelerator's name as QEMU's `-accel` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }
}

/// Whether KVM can be used by this process: `/dev/kvm` opens read-write. The error says why
/// not and what to do.
pub fn kvm_usable() -> Result<(), String> {
    let path = "/dev/kvm";
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
    {
        Ok(_) => hardware_virtualisation(),
        Err(e) => Err(match e.kind() {
            io::ErrorKind::NotFound => format!(
                "{path} does not exist: the CPU has no hardware virtualisation enabled (check the firmware settings, or enable nested virtualisation for a VM) or the kvm module is not loaded (modprobe kvm_intel or kvm_amd)"
            ),
            io::ErrorKind::PermissionDenied => format!(
                "{path} is not accessible to this user: add yourself to the kvm group (sudo usermod -aG kvm $USER, then log in again)"
            ),
            _ if e.raw_os_error() == Some(libc::ENXIO)
                || e.raw_os_error() == Some(libc::ENODEV) =>
            {
                format!(
                    "{path} exists but KVM is not available: load the kvm module for this CPU (modprobe kvm_intel or kvm_amd)"
                )
            }
            _ => format!("cannot open {path}: {e}"),
        }),
    }
}

/// Whether the CPU says it has hardware virtualisation (`vmx` or `svm` among its flags). A
/// nested guest can have `/dev/kvm` without it, and a KVM guest there never boots: refused
/// up front instead of hanging.
fn hardware_virtualisation() -> Result<(), String> {
    let Ok(cpuinfo) = std::fs::read_to_string("/proc/cpuinfo") else {
        return Ok(());
    };
    let flagged = cpuinfo
        .lines()
        .filter(|l| l.starts_with("flags"))
        .any(|l| l.split_whitespace().any(|f| f == "vmx" || f == "svm"));
    match flagged {
        true => Ok(()),
        false => Err(
            "/dev/kvm opens, but the CPU offers no hardware virtualisation (no vmx or svm flag in /proc/cpuinfo: a VM without nested virtualisation)"
                .into(),
        ),
    }
}

/// The QEMU executable for x86-64 guests: `qemu-system-x86_64` on `PATH`, then
/// `/usr/bin/qemu-system-x86_64`, then `/usr/libexec/qemu-kvm` (where RHEL-like systems put it).
pub fn find_qemu() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                // A relative entry names whatever directory cordon runs from.
                .filter(|d| d.is_absolute())
                .map(|d| d.join("qemu-system-x86_64"))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    on_path
        .into_iter()
        .chain([
            PathBuf::from("/usr/bin/qemu-system-x86_64"),
            PathBuf::from("/usr/libexec/qemu-kvm"),
        ])
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The guest machine: what QEMU is told to run.
#[derive(Debug, Clone)]
pub struct Machine {
    /// KVM or the emulator.
    pub accel: Accel,
    /// Guest memory in MiB.
    pub memory_mib: u32,
    /// Guest CPUs.
    pub cpus: u32,
    /// The kernel image (bzImage).
    pub kernel: PathBuf,
    /// The initramfs (see [`crate::boot::initramfs`]).
    pub initrd: PathBuf,
    /// The Unix stream socket of the guest's Ethernet link; QEMU connects to it (the gateway
    /// listens), so the guest has no network but the gateway's.
    pub net: PathBuf,
    /// The Unix socket of the control port; QEMU connects to it (cordon listens).
    pub control: PathBuf,
    /// Where the guest's serial console (kernel messages) is written; `None` discards it.
    pub console: Option<PathBuf>,
    /// More kernel command line, after cordon's own parameters.
    pub append: String,
}

impl Machine {
    /// QEMU's command line, `qemu` first.
    ///
    /// `-nodefaults -no-user-config` keep QEMU from adding devices or reading configuration
    /// the guest was not meant to have; `-no-reboot` with `panic=-1` turns a guest panic or
    /// init's exit into QEMU's exit. The root share is the whole of `/` as QEMU sees it, which
    /// is the namespace sandbox's view QEMU runs in; `multidevs=remap` keeps inode numbers
    /// unique across the view's several filesystems.
    pub fn argv(&self, qemu: &Path) -> Vec<OsString> {
        let accel = match self.accel {
            Accel::Kvm => "kvm",
            // Multi-threaded TCG runs one host thread per guest CPU; only worth it with several.
            Accel::Tcg if self.cpus > 1 => "tcg,thread=multi",
            Accel::Tcg => "tcg",
        };
        let cpu = match self.accel {
            Accel::Kvm => "host",
            Accel::Tcg => "max",
        };
        let mut append = "console=ttyS0 quiet panic=-1".to_owned();
        // Under TCG the guest's TSC is the host's, but the kernel calibrates it against the
        // emulated PIT, which fails when the host is busy (the vCPU thread is descheduled in
        // the calibration window); microvm has no HPET or ACPI PM timer to fall back on, so
        // the boot then hangs for good. Telling the kernel the frequency skips calibration.
        // It comes before the caller's part so that the caller can override it.
        if let (Accel::Tcg, Some(khz)) = (self.accel, host_tsc_khz()) {
            append.push_str(&format!(" tsc_early_khz={khz}"));
        }
        if !self.append.is_empty() {
            append.push(' ');
            append.push_str(&self.append);
        }
        // "file:" takes the rest of the argument as the path, commas included.
        let serial = match &self.console {
            Some(path) => concat(&[OsStr::new("file:"), path.as_os_str()]),
            None => "null".into(),
        };
        let net = concat(&[
            OsStr::new("stream,id=n0,server=off,addr.type=unix,addr.path="),
            &opt_escape(self.net.as_os_str()),
        ]);
        let control = concat(&[
            OsStr::new("socket,id=ctl,path="),
            &opt_escape(self.control.as_os_str()),
        ]);
        let nic = format!("virtio-net-device,netdev=n0,mac={GUEST_MAC},host_mtu={GUEST_MTU}");
        let memory = self.memory_mib.to_string();
        let cpus = self.cpus.to_string();
        // -kernel, -initrd and -append take their argument verbatim (no option parsing).
        let args: [&OsStr; 41] = [
            qemu.as_os_str(),
            "-M".as_ref(),
            "microvm,x-option-roms=off,isa-serial=on,rtc=on".as_ref(),
            "-accel".as_ref(),
            accel.as_ref(),
            "-cpu".as_ref(),
            cpu.as_ref(),
            "-m".as_ref(),
            memory.as_ref(),
            "-smp".as_ref(),
            cpus.as_ref(),
            "-nodefaults".as_ref(),
            "-no-user-config".as_ref(),
            "-nographic".as_ref(),
            "-no-reboot".as_ref(),
            "-kernel".as_ref(),
            self.kernel.as_os_str(),
            "-initrd".as_ref(),
            self.initrd.as_os_str(),
            "-append".as_ref(),
            append.as_ref(),
            "-serial".as_ref(),
            &serial,
            "-fsdev".as_ref(),
            "local,id=root,path=/,security_model=none,multidevs=remap".as_ref(),
            "-device".as_ref(),
            "virtio-9p-device,fsdev=root,mount_tag=cordonroot".as_ref(),
            "-netdev".as_ref(),
            &net,
            "-device".as_ref(),
            nic.as_ref(),
            "-chardev".as_ref(),
            &control,
            "-device".as_ref(),
            "virtio-serial-device".as_ref(),
            "-device".as_ref(),
            "virtserialport,chardev=ctl,name=cordon.control".as_ref(),
            "-object".as_ref(),
            "rng-random,filename=/dev/urandom,id=rng0".as_ref(),
            "-device".as_ref(),
            "virtio-rng-device,rng=rng0".as_ref(),
        ];
        args.iter().map(|a| a.to_os_string()).collect()
    }
}

/// The host's TSC frequency in kHz, measured once per process against the monotonic clock
/// over 20 ms (about 0.01% accurate, which is what the guest's clock will be).
fn host_tsc_khz() -> Option<u64> {
    static KHZ: OnceLock<Option<u64>> = OnceLock::new();
    *KHZ.get_or_init(|| {
        let (t0, c0) = (Instant::now(), crate::sys::rdtsc()?);
        std::thread::sleep(Duration::from_millis(20));
        let (c1, t1) = (crate::sys::rdtsc()?, Instant::now());
        let nanos = t1.duration_since(t0).as_nanos();
        let khz = u128::from(c1.checked_sub(c0)?) * 1_000_000 / nanos.max(1);
        // A TSC that does not tick at a plausible rate (100 MHz to 10 GHz) is not one to
        // hand the guest.
        u64::try_from(khz)
            .ok()
            .filter(|k| (100_000..10_000_000).contains(k))
    })
}

fn concat(parts: &[&OsStr]) -> OsString {
    let mut v = Vec::new();
    for p in parts {
        v.extend_from_slice(p.as_bytes());
    }
    OsString::from_vec(v)
}

/// A value inside a QEMU `key=value,...` option: a comma is written twice, or it would end
/// the value (a socket directory with a comma in its name would otherwise inject options).
fn opt_escape(s: &OsStr) -> OsString {
    let mut v = Vec::new();
    for &b in s.as_bytes() {
        v.push(b);
        if b == b',' {
            v.push(b',');
        }
    }
    OsString::from_vec(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::boot;
    use std::os::unix::net::UnixListener;
    use std::process::{Command, Stdio};

    fn machine(accel: Accel, cpus: u32) -> Machine {
        Machine {
            accel,
            memory_mib: 512,
            cpus,
            kernel: "/k".into(),
            initrd: "/i".into(),
            net: "/run/a,b/net".into(),
            control: "/run/ctl".into(),
            console: Some("/tmp/console,log".into()),
            append: "rdinit=/cordon".into(),
        }
    }

    #[test]
    fn argv_is_the_documented_command_line() {
        let argv: Vec<String> = machine(Accel::Kvm, 2)
            .argv(Path::new("/usr/bin/qemu"))
            .into_iter()
            .map(|s| s.into_string().unwrap())
            .collect();
        let expected = "/usr/bin/qemu -M microvm,x-option-roms=off,isa-serial=on,rtc=on -accel kvm -cpu host -m 512 -smp 2 \
            -nodefaults -no-user-config -nographic -no-reboot -kernel /k -initrd /i \
            -append console=ttyS0|quiet|panic=-1|rdinit=/cordon -serial file:/tmp/console,log \
            -fsdev local,id=root,path=/,security_model=none,multidevs=remap -device virtio-9p-device,fsdev=root,mount_tag=cordonroot \
            -netdev stream,id=n0,server=off,addr.type=unix,addr.path=/run/a,,b/net \
            -device virtio-net-device,netdev=n0,mac=02:63:6f:72:64:02,host_mtu=65520 \
            -chardev socket,id=ctl,path=/run/ctl -device virtio-serial-device -device virtserialport,chardev=ctl,name=cordon.control \
            -object rng-random,filename=/dev/urandom,id=rng0 -device virtio-rng-device,rng=rng0";
        let expected: Vec<String> = expected
            .split_whitespace()
            .map(|s| s.replace('|', " "))
            .collect();
        assert_eq!(argv, expected);

        let tcg: Vec<OsString> = machine(Accel::Tcg, 2).argv(Path::new("q"));
        assert!(
            tcg.windows(2)
                .any(|w| w[0] == "-accel" && w[1] == "tcg,thread=multi")
        );
        assert!(tcg.windows(2).any(|w| w[0] == "-cpu" && w[1] == "max"));
        #[cfg(target_arch = "x86_64")]
        assert!(
            tcg.windows(2).any(|w| w[0] == "-append"
                && w[1].to_string_lossy().contains(" tsc_early_khz=")
                && w[1].to_string_lossy().ends_with(" rdinit=/cordon")),
            "{tcg:?}"
        );
        let one = Machine {
            console: None,
            ..machine(Accel::Tcg, 1)
        }
        .argv(Path::new("q"));
        assert!(one.windows(2).any(|w| w[0] == "-accel" && w[1] == "tcg"));
        assert!(one.windows(2).any(|w| w[0] == "-serial" && w[1] == "null"));
        assert_eq!(Accel::Kvm.as_str(), "kvm");
    }

    #[test]
    fn kvm_usable_answers() {
        // Either answer is fine here; a refusal must say what to do.
        if let Err(why) = kvm_usable() {
            assert!(why.contains("/dev/kvm"), "{why}");
        }
    }

    /// Boots the real kernel with an initramfs whose init is this test binary, under TCG so
    /// that it runs without KVM. The binary runs in the guest as PID 1 with `--list` (kernel
    /// arguments after `--` go to init), so the console shows this test's name only if the
    /// kernel unpacked the archive and the executable, its interpreter and its libraries all
    /// work in the guest. Init then exits, the kernel panics and QEMU exits (`-no-reboot`).
    #[test]
    fn boots_the_initramfs_under_tcg() {
        let Some(qemu) = find_qemu() else {
            eprintln!("skipped: qemu-system-x86_64 not found");
            return;
        };
        let Ok(kernel) = boot::find_kernel(None) else {
            eprintln!("skipped: no kernel with modules in /boot");
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let exe = std::env::current_exe().unwrap();
        let started = Instant::now();
        let initrd = boot::initramfs(&kernel, &exe, &dir.path().join("cache")).unwrap();
        let built = started.elapsed();
        // The second call finds the first's archive.
        assert_eq!(
            boot::initramfs(&kernel, &exe, &dir.path().join("cache")).unwrap(),
            initrd
        );
        let size = std::fs::metadata(&initrd).unwrap().len();

        // QEMU connects to both sockets at start; listeners that never accept are enough.
        let net = dir.path().join("net.sock");
        let control = dir.path().join("control.sock");
        let _net = UnixListener::bind(&net).unwrap();
        let _control = UnixListener::bind(&control).unwrap();
        let console = dir.path().join("console.log");
        let m = Machine {
            accel: Accel::Tcg,
            memory_mib: 512,
            cpus: 1,
            kernel: kernel.image.clone(),
            initrd,
            net,
            control,
            console: Some(console.clone()),
            append: std::env::var("CORDON_VM_TEST_APPEND").unwrap_or_default()
                + "rdinit=/cordon -- --list",
        };
        let argv = m.argv(&qemu);
        let stderr = std::fs::File::create(dir.path().join("qemu.stderr")).unwrap();
        let booted = Instant::now();
        let mut child = Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let marker = "vmm::tests::boots_the_initramfs_under_tcg: test";
        let deadline = booted + Duration::from_secs(120);
        let mut seen_at = None;
        let mut exited = None;
        while Instant::now() < deadline {
            let log = std::fs::read_to_string(&console).unwrap_or_default();
            if seen_at.is_none() && log.contains(marker) {
                seen_at = Some(booted.elapsed());
            }
            if let Some(status) = child.try_wait().unwrap() {
                exited = Some((status, booted.elapsed()));
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if exited.is_none() {
            let _ = child.kill();
        }
        // Reaped in every case (a no-op when it already exited).
        let _ = child.wait();
        let log = std::fs::read_to_string(&console).unwrap_or_default();
        if seen_at.is_none() && log.contains(marker) {
            seen_at = Some(booted.elapsed());
        }
        let qemu_err = std::fs::read_to_string(dir.path().join("qemu.stderr")).unwrap_or_default();
        eprintln!(
            "initramfs: {size} bytes built in {built:?}; init's output after {seen_at:?}; qemu exited {exited:?}\nqemu stderr: {qemu_err}"
        );
        assert!(
            seen_at.is_some(),
            "the guest never ran the test binary as init; console:\n{log}\nqemu stderr:\n{qemu_err}"
        );
        assert!(
            exited.is_some(),
            "QEMU did not exit after init did (panic=-1 with -no-reboot)"
        );
    }
}
