//! Test-only: leave one filesystem layer out, so the escape battery
//! (`crates/cordon/tests/escape_fs.rs`) can show that each of two layers stops an attack on its
//! own. Debug builds only — `lib.rs` declares this module under `#[cfg(debug_assertions)]`, so
//! in a release build nothing can turn a layer off. The binary sets it from
//! `CORDON_TEST_LAYER_OFF` (`crates/cordon/src/layer_off.rs`), says so on stderr and in the
//! audit log.
//!
//! Host side. It edits the [`Layout`] after it was built from the plan and before init gets
//! it, so the layer left on has exactly the rules it would have had: the Landlock rules are
//! computed with the masks in place, the mounts with Landlock's rules in place.

use std::sync::Mutex;

use cordon_events::{Action, Layer, NewEvent};

use crate::layout::{LandlockRules, Layout, MountOp};

/// A layer a debug build can be told to leave out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Off {
    /// The mount fence: every mask without cordon's own files in it (a masked directory that
    /// shows a copy or holds `/run/cordon/…` stays, its files need it), every read-only
    /// carve-out, and the read-only binds, which become writable. The sandbox's own
    /// filesystems (`/proc`, `/dev`, `/tmp`) and the copy-on-write overlays (state, home)
    /// stay: they are the state layer, not a fence.
    Mounts,
    /// Landlock's filesystem rules: the ruleset grants everything beneath `/`. Its socket and
    /// signal scoping stays.
    Landlock,
}

static OFF: Mutex<Vec<Off>> = Mutex::new(Vec::new());

/// Leave `layer` out of every sandbox this process starts from now on.
pub fn turn_off(layer: Off) {
    let mut off = OFF.lock().unwrap_or_else(|e| e.into_inner());
    if !off.contains(&layer) {
        off.push(layer);
    }
}

/// Whether `layer` was turned off (for a layer whose switch acts elsewhere, host side).
pub fn is_off(layer: Off) -> bool {
    OFF.lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(&layer)
}

/// Edit `layout` for the layers turned off; one `degraded` event each, saying what went.
pub(crate) fn apply(layout: &mut Layout, emit: &dyn Fn(NewEvent)) {
    if is_off(Off::Mounts) {
        let (mut masks, mut carve_outs, mut binds) = (0, 0, 0);
        layout.mounts.retain_mut(|m| match m {
            MountOp::MaskFile { .. } => {
                masks += 1;
                false
            }
            MountOp::MaskDir { shown, .. } if shown.is_empty() => {
                masks += 1;
                false
            }
            MountOp::ReadOnly { .. } => {
                carve_outs += 1;
                false
            }
            MountOp::Bind { writable, .. } if !*writable => {
                *writable = true;
                binds += 1;
                true
            }
            _ => true,
        });
        layout.mounts_off = true;
        emit(
            NewEvent::new(
                Layer::Filesystem,
                Action::Degraded,
                "TEST-ONLY: the mount fence is off (CORDON_TEST_LAYER_OFF=mounts)",
            )
            .detail("masks_dropped", masks)
            .detail("read_only_dropped", carve_outs)
            .detail("binds_made_writable", binds),
        );
    }
    if is_off(Off::Landlock) {
        layout.landlock = LandlockRules {
            read: Vec::new(),
            read_files: Vec::new(),
            list_only: Vec::new(),
            write: vec!["/".into()],
        };
        emit(NewEvent::new(
            Layer::Landlock,
            Action::Degraded,
            "TEST-ONLY: Landlock's filesystem rules are off (CORDON_TEST_LAYER_OFF=landlock): \
             everything beneath / is granted",
        ));
    }
}
