//! The VM backend's wiring: its options from `[sandbox]` and the command line, what a VM
//! session cannot do (refused before anything starts), and `cordon doctor`'s check.

use cordon_policy::{Backend, Plan, VmAccel};
use cordon_sandbox::probe::{Check, Layer, Support};
use cordon_vm::vmm::Accel;

use crate::cli::{AccelArg, BackendArg, RunArgs};

/// The VM's options when the session runs in one (`--backend` over `[sandbox] backend`), or
/// why this plan cannot.
pub(crate) fn options(
    a: &RunArgs,
    plan: &Plan,
) -> Result<Option<cordon_vm::host::VmOptions>, String> {
    let vm = match a.backend {
        Some(BackendArg::Vm) => true,
        Some(BackendArg::Namespace) => false,
        None => plan.sandbox.backend == Backend::Vm,
    };
    if !vm {
        return Ok(None);
    }
    if let Some(why) = refuse(plan) {
        return Err(why);
    }
    let p = &plan.sandbox.vm;
    let accel = match (a.accel, p.accel) {
        (Some(AccelArg::Tcg), _) | (None, VmAccel::Tcg) => Accel::Tcg,
        (Some(AccelArg::Kvm), _) | (None, VmAccel::Kvm) => Accel::Kvm,
    };
    let cache_dir = cordon_state::cache_dir()
        .unwrap_or_else(|| std::env::temp_dir().join("cordon-cache"))
        .join("vm");
    Ok(Some(cordon_vm::host::VmOptions {
        accel,
        memory_mib: p.memory_mib,
        cpus: p.cpus,
        kernel: p.kernel.clone(),
        cache_dir,
        console: std::env::var_os("CORDON_VM_CONSOLE").is_some_and(|v| v == "1"),
    }))
}

/// The sandbox run: in the namespace sandbox as it is, or, with `vm`, in a VM whose QEMU is
/// that sandbox's command.
pub(crate) fn run(
    unborn: cordon_sandbox::Unborn,
    (plan, cmd): (&Plan, &cordon_sandbox::Command),
    sink: &cordon_net::Emit,
    net: Option<&mut dyn cordon_sandbox::NetAttach>,
    vm: Option<&cordon_vm::host::VmOptions>,
) -> Result<cordon_sandbox::Outcome, cordon_sandbox::SandboxError> {
    let Some(opts) = vm else {
        return unborn.run(plan, cmd, &|ev| sink(ev), net);
    };
    cordon_vm::host::run(unborn, plan, cmd, sink.clone(), net, opts).map_err(|e| {
        cordon_sandbox::SandboxError::Setup {
            stage: "vm".into(),
            message: e.to_string(),
        }
    })
}

/// Why this plan cannot run in a VM, in words that say what to change; `None` when it can.
fn refuse(plan: &Plan) -> Option<String> {
    if plan.network.mode == cordon_policy::NetMode::Host {
        return Some(
            "the VM backend has no host network to share: set [network] mode = \"gateway\" or \"none\", or run with --backend namespace".into(),
        );
    }
    if !plan.publish.is_empty() {
        return Some(
            "[[publish]] is not served into a VM yet: remove it, or run with --backend namespace"
                .into(),
        );
    }
    None
}

/// `cordon doctor`: the VMM, the guest kernel and KVM, and the acceleration a VM session
/// would get.
pub(crate) fn doctor_check() -> Check {
    let mut c = Check {
        layer: Layer::Isolation,
        feature: "microVM backend (--backend vm)",
        support: Support::Ok,
        detail: String::new(),
        cordon: String::new(),
        required: false,
        fix: None,
    };
    // Named, not run: a `qemu-system-x86_64` first on PATH could be one a session planted in a
    // writable directory, and the doctor runs unsandboxed.
    let qemu = cordon_vm::vmm::find_qemu();
    let version = qemu.as_ref().map(|q| q.display().to_string());
    let kernel = cordon_vm::boot::find_kernel(None);
    let kvm = cordon_vm::vmm::kvm_usable();
    c.detail = format!(
        "VMM: {}; guest kernel: {}; KVM: {}",
        version.as_deref().unwrap_or("no qemu-system-x86_64"),
        match &kernel {
            Ok(k) => format!("{} ({})", k.release, k.image.display()),
            Err(_) => "none with its modules".into(),
        },
        match &kvm {
            Ok(()) => "usable".to_string(),
            Err(why) => why.clone(),
        },
    );
    match (&qemu, &kernel, &kvm) {
        (Some(_), Ok(_), Ok(())) => {
            c.cordon = "`--backend vm` runs the agent in a microVM, accel kvm".into();
        }
        (Some(_), Ok(_), Err(_)) => {
            c.support = Support::Partial;
            c.cordon =
                "`--backend vm` is refused without KVM; `--backend vm --accel tcg` emulates (slow)"
                    .into();
            c.fix = Some(
                "make /dev/kvm usable: load kvm_intel or kvm_amd and add yourself to the kvm group"
                    .into(),
            );
        }
        _ => {
            c.support = Support::Missing;
            c.cordon = "`--backend vm` is refused; the namespace backend is unaffected".into();
            c.fix = Some(
                "apt-get install qemu-system-x86 linux-image-amd64 (any distribution kernel with its modules in /lib/modules)".into(),
            );
        }
    }
    c
}
