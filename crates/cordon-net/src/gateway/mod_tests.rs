//! The gateway's own tests (the cap on flows).

use super::*;

/// Flows turned away at the cap make at most one event a second, which counts the rest;
/// what no event counted yet is reported when the gateway goes.
#[test]
fn flows_turned_away_at_the_cap_are_counted_not_logged_one_by_one() {
    let opts = cordon_policy::LoadOptions::new("/nonexistent", "/nonexistent", "/nonexistent");
    let plan = cordon_policy::load(&opts).unwrap().plan;
    let seen = Arc::new(Mutex::new(Vec::<NewEvent>::new()));
    let s = seen.clone();
    let emit: Emit = Arc::new(move |ev: NewEvent| s.lock().unwrap().push(ev));
    let wiring = Wiring {
        emit,
        redact: Arc::new(|t: &str| t.to_string()),
        audit: None,
        execs: None,
        link: false,
    };
    let gw = Gateway::new(&plan, wiring).unwrap();
    let turned_away = |seen: &[NewEvent]| -> Vec<u64> {
        seen.iter()
            .filter(|e| e.rule.as_deref() == Some("network.max-flows"))
            .map(|e| e.detail["turned_away"].as_u64().unwrap())
            .collect()
    };
    for _ in 0..50 {
        gw.shared.turned_away_at_cap();
    }
    assert_eq!(turned_away(&seen.lock().unwrap()), [1], "the first at once");
    // A second on: the next one counts the 49 held back.
    gw.shared.at_cap.lock().unwrap().0 = Some(Instant::now() - Duration::from_secs(2));
    gw.shared.turned_away_at_cap();
    gw.shared.turned_away_at_cap();
    assert_eq!(turned_away(&seen.lock().unwrap()), [1, 50]);
    drop(gw);
    let seen = seen.lock().unwrap();
    assert_eq!(turned_away(&seen), [1, 50, 1], "the last one, at the end");
    assert!(seen.iter().all(|e| e.action == Action::Deny));
}
