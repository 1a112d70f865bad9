//! `CORDON_TEST_LAYER_OFF=<layer>[,<layer>]`: run a session with a layer left out, so a test
//! can show that the other layer stops an attack on its own (the escape battery,
//! `tests/escape_fs.rs`). Debug builds only: `main.rs` declares this module under
//! `#[cfg(debug_assertions)]`, so a release binary neither reads the variable nor has the
//! switches. A session with a layer off says so on stderr (`cordon: TEST-ONLY: …`) and in the
//! audit log, however quiet it was asked to be.

use cordon_events::{Action, Layer, NewEvent};
use cordon_sandbox::test_off::{Off, turn_off};

/// The variable, read only here.
pub(crate) const VAR: &str = "CORDON_TEST_LAYER_OFF";

/// What leaving a layer out does: to the plan, or through a switch of the layer's own crate.
type TurnOff = fn(&mut cordon_policy::Plan);

/// Each layer that can be left out, by its name in [`VAR`]. A new layer is one line here.
const LAYERS: &[(&str, TurnOff)] = &[
    ("mounts", |_| turn_off(Off::Mounts)),
    ("landlock", |_| turn_off(Off::Landlock)),
];

/// Turns off what [`VAR`] names, before the plan is enforced. An unknown name is an error
/// naming the variable and the names it takes (the session must not run on a guess).
pub(crate) fn apply(plan: &mut cordon_policy::Plan, emit: &dyn Fn(NewEvent)) -> Result<(), String> {
    let Some(value) = std::env::var_os(VAR) else {
        return Ok(());
    };
    let value = value.to_string_lossy();
    for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let Some((_, off)) = LAYERS.iter().find(|(n, _)| *n == name) else {
            let known: Vec<&str> = LAYERS.iter().map(|(n, _)| *n).collect();
            return Err(format!(
                "{VAR} names an unknown layer {name:?}; it takes a comma-separated list of: {}",
                known.join(", ")
            ));
        };
        off(plan);
        eprintln!(
            "cordon: TEST-ONLY: layer {name} is off ({VAR}); this session is not fenced as its policy says"
        );
        emit(
            NewEvent::new(
                Layer::Session,
                Action::Degraded,
                format!("TEST-ONLY: layer {name} is off ({VAR})"),
            )
            .detail("layer_off", name),
        );
    }
    Ok(())
}
