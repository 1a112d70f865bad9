//! `[sandbox]`: what the agent runs in — the namespace sandbox on the host, or that same
//! sandbox inside a microVM (`[sandbox.vm]`: QEMU's `microvm` machine).

use std::path::PathBuf;

use crate::PolicyError;
use crate::schema::{Schema, Shape, toml_string};
use crate::sections::{Convert, Loosen, Render, Scalar, Section, Sections, set_scalar, value};

crate::choice! {
    /// What the agent runs in.
    #[derive(Default)]
    pub enum Backend {
        /// The namespace sandbox on the host's kernel.
        #[default]
        Namespace = "namespace",
        /// A microVM (QEMU `microvm`) with the namespace sandbox inside it: a kernel of its
        /// own between the agent and the host's.
        Vm = "vm",
    }
}

crate::choice! {
    /// How the microVM's CPU is provided.
    #[derive(Default)]
    pub enum VmAccel {
        /// Hardware virtualisation through `/dev/kvm`.
        #[default]
        Kvm = "kvm",
        /// QEMU's software emulation (TCG): slow, for hosts without KVM.
        Tcg = "tcg",
    }
}

/// The microVM's memory when none is written, in MiB.
pub const DEFAULT_VM_MEMORY_MIB: u32 = 2048;
/// The microVM's CPUs when none is written.
pub const DEFAULT_VM_CPUS: u32 = 2;
const MEMORY_MIB: std::ops::RangeInclusive<i64> = 256..=65536;
const CPUS: std::ops::RangeInclusive<i64> = 1..=64;

/// What the agent runs in.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct SandboxPlan {
    /// The namespace sandbox alone (default), or inside a microVM.
    pub backend: Backend,
    /// The microVM, used when `backend` is [`Backend::Vm`].
    pub vm: VmPlan,
}

/// The microVM of the `vm` backend.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct VmPlan {
    /// KVM (default) or software emulation.
    pub accel: VmAccel,
    /// Guest memory in MiB, 256 to 65536 (default [`DEFAULT_VM_MEMORY_MIB`]).
    pub memory_mib: u32,
    /// Guest CPUs, 1 to 64 (default [`DEFAULT_VM_CPUS`]).
    pub cpus: u32,
    /// The guest kernel, absolute; `None`: the newest kernel installed on the host with its
    /// modules.
    pub kernel: Option<PathBuf>,
}

impl Default for VmPlan {
    fn default() -> Self {
        VmPlan {
            accel: VmAccel::default(),
            memory_mib: DEFAULT_VM_MEMORY_MIB,
            cpus: DEFAULT_VM_CPUS,
            kernel: None,
        }
    }
}

raw_table! {
    /// `[sandbox.vm]` as written.
    pub(crate) struct RawVm example "memory = 4096" {
        /// How the guest's CPU is provided: `kvm` (default), hardware virtualisation
        /// (`/dev/kvm`); `tcg`, QEMU's software emulation, slow, for hosts without KVM.
        accel: Choice(VmAccel) = "accel = \"tcg\"",
        /// Guest memory in MiB, from 256 to 65536 (default 2048).
        memory: Integer = "memory = 4096",
        /// Guest CPUs, from 1 to 64 (default 2).
        cpus: Integer = "cpus = 4",
        /// The guest kernel (default: the newest one installed with its modules). It enforces
        /// the sandbox's layers inside the guest, so a project file that picks it loosens.
        kernel: String [loosens] = "kernel = \"/boot/vmlinuz-6.1.0-57-amd64\"",
    }
}

raw_table! {
    /// `[sandbox]` as written.
    pub(crate) struct Raw example "backend = \"vm\"" {
        /// What the agent runs in: `namespace` (default), the namespace sandbox on the host's
        /// kernel;
        /// `vm`, a microVM (QEMU `microvm`) with the namespace sandbox inside it. A project
        /// file that goes back to `namespace` from `vm` loosens.
        backend: Choice(Backend) = "backend = \"vm\"",
        /// The microVM of `backend = "vm"`.
        vm: Table(RawVm),
    }
}

/// `[sandbox]` of one layer, or merged.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sandbox {
    pub backend: Scalar<Backend>,
    pub accel: Scalar<VmAccel>,
    pub memory_mib: Scalar<u32>,
    pub cpus: Scalar<u32>,
    pub kernel: Scalar<PathBuf>,
}

fn count(
    cx: &Convert<'_>,
    v: &serde_spanned::Spanned<i64>,
    key: &str,
    range: std::ops::RangeInclusive<i64>,
    help: &str,
) -> Result<(u32, crate::sections::Origin), PolicyError> {
    let n = cx.int_in(v, key, range, help)?;
    // In range, so it fits.
    Ok((u32::try_from(n).unwrap_or(u32::MAX), cx.origin(v.span())))
}

impl Section for Sandbox {
    type Raw = Raw;
    type Plan = SandboxPlan;
    const SHAPE: Shape = Shape::Table(&Raw::TABLE);

    fn convert(raw: Raw, cx: &mut Convert<'_>) -> Result<Self, PolicyError> {
        let mut out = Sandbox {
            backend: raw.backend.map(|b| (*b.get_ref(), cx.origin(b.span()))),
            ..Sandbox::default()
        };
        let Some(vm) = raw.vm else {
            return Ok(out);
        };
        let vm = vm.into_inner();
        out.accel = vm.accel.map(|a| (*a.get_ref(), cx.origin(a.span())));
        if let Some(m) = &vm.memory {
            out.memory_mib = Some(count(
                cx,
                m,
                "memory",
                MEMORY_MIB,
                "of [sandbox.vm] is in MiB, from 256 to 65536, e.g. memory = 4096",
            )?);
        }
        if let Some(c) = &vm.cpus {
            out.cpus = Some(count(
                cx,
                c,
                "cpus",
                CPUS,
                "of [sandbox.vm] is from 1 to 64, e.g. cpus = 2",
            )?);
        }
        if let Some(k) = &vm.kernel {
            let shown = toml_string(k.get_ref());
            let path = cx
                .paths(std::slice::from_ref(k), "kernel", false)?
                .into_iter()
                .next()
                .map(|e| e.path)
                .filter(|p| p.is_absolute())
                .ok_or_else(|| {
                    cx.diag(
                        format!("kernel path {shown} names nothing on this host"),
                        k.span(),
                        "write the kernel's absolute path, e.g. kernel = \"/boot/vmlinuz-6.1.0-57-amd64\", or leave `kernel` out for the newest installed",
                    )
                })?;
            out.kernel = Some((path, cx.origin(k.span())));
        }
        Ok(out)
    }

    fn merge(&mut self, later: &Self) {
        set_scalar(&mut self.backend, &later.backend);
        set_scalar(&mut self.accel, &later.accel);
        set_scalar(&mut self.memory_mib, &later.memory_mib);
        set_scalar(&mut self.cpus, &later.cpus);
        set_scalar(&mut self.kernel, &later.kernel);
    }

    fn loosen(full: &Sections, base: &Sections, out: &mut Loosen<'_>) {
        let (f, b) = (&full.sandbox, &base.sandbox);
        // The VM is a wall around the namespace sandbox: leaving it out is a loosening. Its
        // size and accelerator are not (a slow or small VM confines no less).
        if value(&b.backend) == Backend::Vm
            && let Some((Backend::Namespace, o)) = &f.backend
        {
            out.add(
                o,
                "runs the sandbox without its microVM (backend = \"namespace\" instead of \"vm\")"
                    .into(),
            );
        }
        // The guest kernel enforces the sandbox's layers inside the VM.
        if let Some((k, o)) = &f.kernel
            && b.kernel.as_ref().is_none_or(|(x, _)| x != k)
        {
            out.add(o, format!("boots the microVM with kernel {}", k.display()));
        }
    }

    fn plan(self) -> SandboxPlan {
        let defaults = VmPlan::default();
        SandboxPlan {
            backend: value(&self.backend),
            vm: VmPlan {
                accel: value(&self.accel),
                memory_mib: self.memory_mib.map_or(defaults.memory_mib, |x| x.0),
                cpus: self.cpus.map_or(defaults.cpus, |x| x.0),
                kernel: self.kernel.map(|x| x.0),
            },
        }
    }

    fn render(s: &SandboxPlan, out: &mut Render) {
        out.header("sandbox");
        out.string("backend", &s.backend.to_string());
        out.header("sandbox.vm");
        if s.backend != Backend::Vm {
            out.line("# used with backend = \"vm\" only");
        }
        out.string("accel", &s.vm.accel.to_string());
        out.line(format!("memory = {}", s.vm.memory_mib));
        out.line(format!("cpus = {}", s.vm.cpus));
        match &s.vm.kernel {
            Some(k) => out.string("kernel", &k.to_string_lossy()),
            None => out.line("# kernel: the newest installed with its modules"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::file::{ParsedFile, parse_file};
    use crate::sections::Context;

    fn parse(layer: usize, text: &str) -> Result<ParsedFile, String> {
        let ctx = Context {
            home: Path::new("/home/u"),
            passwd_home: None,
            project: Path::new("/work/p"),
        };
        parse_file(text, Some(Path::new("/f.toml")), layer, &ctx).map_err(|e| e.to_string())
    }

    fn merged(layers: &[&str]) -> Sections {
        let mut m = Sections::default();
        for (i, t) in layers.iter().enumerate() {
            m.merge(&parse(i + 1, t).unwrap_or_else(|e| panic!("{e}")).base);
        }
        m
    }

    fn plan_of(layers: &[&str]) -> SandboxPlan {
        merged(layers).sandbox.plan()
    }

    #[test]
    fn defaults() {
        let p = plan_of(&[""]);
        assert_eq!(p, SandboxPlan::default());
        assert_eq!(p.backend, Backend::Namespace);
        assert_eq!(p.vm.accel, VmAccel::Kvm);
        assert_eq!(p.vm.memory_mib, 2048);
        assert_eq!(p.vm.cpus, 2);
        assert_eq!(p.vm.kernel, None);
        assert_eq!(plan_of(&["[sandbox]\n[sandbox.vm]\n"]), p);
        // A plan without the section (an older one, or JSON from a test) gets the defaults.
        let d: SandboxPlan = serde_json::from_str("{}").unwrap();
        assert_eq!(d, p);
        let d: SandboxPlan = serde_json::from_str(r#"{"vm":{"cpus":3}}"#).unwrap();
        assert_eq!((d.vm.cpus, d.vm.memory_mib), (3, 2048));
    }

    #[test]
    fn every_key_parses() {
        let p = plan_of(&["[sandbox]\nbackend = \"vm\"\n\
             [sandbox.vm]\naccel = \"tcg\"\nmemory = 4096\ncpus = 8\n\
             kernel = \"/boot/vmlinuz-6.1.0-57-amd64\"\n"]);
        assert_eq!(
            p,
            SandboxPlan {
                backend: Backend::Vm,
                vm: VmPlan {
                    accel: VmAccel::Tcg,
                    memory_mib: 4096,
                    cpus: 8,
                    kernel: Some("/boot/vmlinuz-6.1.0-57-amd64".into()),
                },
            }
        );
        // Inline, and at the ends of the ranges.
        let p = plan_of(&["[sandbox]\nvm = { memory = 256, cpus = 64 }\n"]);
        assert_eq!((p.vm.memory_mib, p.vm.cpus), (256, 64));
        let p = plan_of(&["[sandbox.vm]\nmemory = 65536\ncpus = 1\n"]);
        assert_eq!((p.vm.memory_mib, p.vm.cpus), (65536, 1));
        assert_eq!(p.backend, Backend::Namespace);
        // Serialized in lower case, as written.
        let j = serde_json::to_value(&p).unwrap();
        assert_eq!(j["backend"], "namespace");
        assert_eq!(j["vm"]["accel"], "kvm");
    }

    #[test]
    fn the_kernel_is_expanded_and_absolute() {
        let k = |v: &str| {
            plan_of(&[&format!("[sandbox.vm]\nkernel = \"{v}\"\n")])
                .vm
                .kernel
        };
        assert_eq!(k("~/vm/bzImage"), Some("/home/u/vm/bzImage".into()));
        assert_eq!(k("$HOME/vm/bzImage"), Some("/home/u/vm/bzImage".into()));
        assert_eq!(k("${PROJECT}/k/../bzImage"), Some("/work/p/bzImage".into()));
        let e = parse(1, "[sandbox.vm]\nkernel = \"vmlinuz\"\n").unwrap_err();
        assert!(e.contains("relative path \"vmlinuz\" in kernel"), "{e}");
        assert!(e.contains("/f.toml:2:10"), "{e}");
        let e = parse(1, "[sandbox.vm]\nkernel = \"$KERNEL\"\n").unwrap_err();
        assert!(e.contains("unknown variable `KERNEL`"), "{e}");
        let e = parse(1, "[sandbox.vm]\nkernel = \"\"\n").unwrap_err();
        assert!(e.contains("empty path in kernel"), "{e}");
    }

    #[test]
    fn bad_values_are_located_errors() {
        let e = parse(1, "[sandbox]\nbackend = \"docker\"\n").unwrap_err();
        assert!(
            e.contains("invalid value \"docker\" for `backend` in [sandbox]"),
            "{e}"
        );
        assert!(e.contains("\"namespace\" or \"vm\""), "{e}");
        assert!(e.contains("/f.toml:2:11"), "{e}");
        let e = parse(1, "[sandbox.vm]\naccel = \"hvf\"\n").unwrap_err();
        assert!(
            e.contains("invalid value \"hvf\" for `accel` in [sandbox.vm]"),
            "{e}"
        );
        assert!(e.contains("\"kvm\" or \"tcg\""), "{e}");
        assert!(e.contains("/f.toml:2:9"), "{e}");
        // Did you mean, as for every choice.
        let e = parse(1, "[sandbox]\nbackend = \"VM\"\n").unwrap_err();
        assert!(e.contains("did you mean \"vm\""), "{e}");
        for (text, key, col) in [
            ("memory = 128", "memory", 10),
            ("memory = 65537", "memory", 10),
            ("memory = -1", "memory", 10),
            ("cpus = 0", "cpus", 8),
            ("cpus = 65", "cpus", 8),
        ] {
            let e = parse(1, &format!("[sandbox.vm]\n{text}\n")).unwrap_err();
            let written = text.split(" = ").nth(1).unwrap();
            assert!(
                e.contains(&format!("`{key}` is out of range: {written}")),
                "{e}"
            );
            assert!(e.contains(&format!("/f.toml:2:{col}")), "{e}");
        }
        let e = parse(1, "[sandbox.vm]\nmemory = 1\n").unwrap_err();
        assert!(e.contains("from 256 to 65536"), "{e}");
        let e = parse(1, "[sandbox.vm]\ncpus = 100\n").unwrap_err();
        assert!(e.contains("from 1 to 64"), "{e}");
        // Wrong types and unknown keys, from the schema.
        let e = parse(1, "[sandbox.vm]\nmemory = \"4G\"\n").unwrap_err();
        assert!(
            e.contains("`memory` in [sandbox.vm] must be an integer"),
            "{e}"
        );
        let e = parse(1, "[sandbox.vm]\nmem = 4096\n").unwrap_err();
        assert!(e.contains("unknown key `mem` in [sandbox.vm]"), "{e}");
        let e = parse(1, "[sandbox]\nvm = \"yes\"\n").unwrap_err();
        assert!(e.contains("must be a table"), "{e}");
    }

    #[test]
    fn later_layers_override_key_by_key() {
        let p = plan_of(&[
            "[sandbox]\nbackend = \"vm\"\n[sandbox.vm]\nmemory = 4096\ncpus = 4\nkernel = \"/boot/a\"\n",
            "[sandbox.vm]\ncpus = 8\naccel = \"tcg\"\n",
            "[sandbox]\nbackend = \"namespace\"\n[sandbox.vm]\nkernel = \"/boot/b\"\n",
        ]);
        assert_eq!(p.backend, Backend::Namespace);
        assert_eq!(p.vm.accel, VmAccel::Tcg);
        assert_eq!(p.vm.memory_mib, 4096);
        assert_eq!(p.vm.cpus, 8);
        assert_eq!(p.vm.kernel, Some("/boot/b".into()));
        // A profile is a later layer too.
        let l = parse(
            1,
            "[sandbox]\nbackend = \"vm\"\n[profile.p.sandbox.vm]\nmemory = 512\n",
        )
        .unwrap();
        let mut m = Sections::default();
        m.merge(&l.base);
        m.merge(&l.profiles["p"]);
        let p = m.sandbox.plan();
        assert_eq!((p.backend, p.vm.memory_mib), (Backend::Vm, 512));
    }

    /// What `untrusted` loosens on top of `trusted` (layer 1 trusted, layer 2 untrusted).
    fn loosened(trusted: &str, untrusted: &str) -> Vec<String> {
        let base = merged(&[trusted]);
        let mut full = base.clone();
        full.merge(&parse(2, untrusted).unwrap().base);
        let files = [None, None, Some(PathBuf::from("/work/p/cordon.toml"))];
        let mut out = Loosen {
            untrusted: &files,
            out: Vec::new(),
        };
        Sections::loosenings(&full, &base, &mut out);
        out.out
            .into_iter()
            .inspect(|l| assert_eq!(l.file, Path::new("/work/p/cordon.toml")))
            .map(|l| l.what)
            .collect()
    }

    #[test]
    fn leaving_the_vm_and_picking_the_kernel_loosen() {
        let vm = "[sandbox]\nbackend = \"vm\"\n";
        let w = loosened(vm, "[sandbox]\nbackend = \"namespace\"\n");
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("without its microVM"), "{w:?}");
        assert!(w[0].ends_with("(line 2)"), "{w:?}");
        let w = loosened(vm, "[sandbox.vm]\nkernel = \"/boot/evil\"\n");
        assert_eq!(w, ["boots the microVM with kernel /boot/evil (line 2)"]);
        // Both at once.
        let w = loosened(
            vm,
            "[sandbox]\nbackend = \"namespace\"\n[sandbox.vm]\nkernel = \"/boot/evil\"\n",
        );
        assert_eq!(w.len(), 2, "{w:?}");
        // Setting a kernel loosens even when the user's policy has no VM, and a different one
        // from the user's; the user's own kernel again does not.
        assert_eq!(
            loosened("", "[sandbox.vm]\nkernel = \"/boot/k\"\n").len(),
            1
        );
        let mine = "[sandbox.vm]\nkernel = \"/boot/mine\"\n";
        assert_eq!(
            loosened(mine, "[sandbox.vm]\nkernel = \"/boot/k\"\n").len(),
            1
        );
        assert!(loosened(mine, mine).is_empty());
        // Not loosenings: the VM turned on, namespace again where it already was, the size
        // and the accelerator.
        for tighter in [
            "[sandbox]\nbackend = \"vm\"\n",
            "[sandbox.vm]\naccel = \"tcg\"\nmemory = 256\ncpus = 1\n",
            "[sandbox.vm]\nmemory = 65536\ncpus = 64\n",
        ] {
            assert!(loosened(vm, tighter).is_empty(), "{tighter}");
            assert!(loosened("", tighter).is_empty(), "{tighter}");
        }
        assert!(loosened("", "[sandbox]\nbackend = \"namespace\"\n").is_empty());
    }

    #[test]
    fn renders_and_loads_back() {
        let round_trip = |p: &SandboxPlan| {
            let mut r = Render::default();
            <Sandbox as Section>::render(p, &mut r);
            let back = plan_of(&[&r.out]);
            assert_eq!(&back, p, "{}", r.out);
            r.out
        };
        let text = round_trip(&SandboxPlan::default());
        assert!(
            text.contains("[sandbox]\nbackend = \"namespace\"\n"),
            "{text}"
        );
        assert!(text.contains("# used with backend = \"vm\" only"), "{text}");
        assert!(text.contains("# kernel: the newest installed"), "{text}");
        let text = round_trip(&SandboxPlan {
            backend: Backend::Vm,
            vm: VmPlan {
                accel: VmAccel::Tcg,
                memory_mib: 512,
                cpus: 3,
                kernel: Some("/boot/vmlinuz \"x\"".into()),
            },
        });
        assert!(text.contains("[sandbox.vm]\naccel = \"tcg\"\nmemory = 512\ncpus = 3\n"));
        // And within the whole plan, as `cordon check` prints it.
        let plan = crate::render::tests::full_plan();
        let text = plan.to_toml();
        assert!(text.contains("\n[sandbox]\nbackend = \"vm\"\n"), "{text}");
    }
}
