use std::collections::BTreeSet;
use std::os::fd::AsRawFd;

use super::*;
use crate::fence::FenceStatus;
use crate::protocol::{self, Frame, FromInit, InwardReply};

/// One of each frame init or its publish helper sends.
fn every_frame() -> Vec<Box<dyn Frame>> {
    vec![
        Box::new(FromInit::Pty),
        Box::new(FromInit::Listener),
        Box::new(FromInit::Started {
            pid: 2,
            landlock: FenceStatus::failed("test"),
            limits: Vec::new(),
            overlays_ahead: 0,
        }),
        Box::new(FromInit::NetTun),
        Box::new(FromInit::NetTunFailed { reason: "x".into() }),
        Box::new(FromInit::NetDns),
        Box::new(FromInit::NetProxy),
        Box::new(FromInit::NetDiag),
        Box::new(FromInit::NetReady),
        Box::new(FromInit::Failed {
            stage: "x".into(),
            message: "y".into(),
        }),
        Box::new(InwardReply { error: None }),
        Box::new(InwardReply {
            error: Some("refused".into()),
        }),
    ]
}

#[test]
fn the_descriptors_passed_out_are_exactly_the_frames_that_name_a_crossing() {
    let named: BTreeSet<Crossing> = every_frame().iter().filter_map(|f| f.crossing()).collect();
    let passed: BTreeSet<Crossing> = Crossing::ALL
        .into_iter()
        .filter(|c| c.carrier() == Carrier::Passed)
        .collect();
    assert_eq!(named, passed);
}

#[test]
fn a_descriptor_on_a_frame_that_names_no_crossing_is_refused() {
    let (a, _b) = crate::sys::socketpair().unwrap();
    let (r, _w) = crate::sys::pipe().unwrap();
    let stray = protocol::hand_over(a.as_raw_fd(), &FromInit::NetReady, Some(r.as_raw_fd()));
    assert_eq!(stray.unwrap_err().kind(), std::io::ErrorKind::InvalidInput);
    let refused = InwardReply {
        error: Some("no".into()),
    };
    assert!(protocol::hand_over(a.as_raw_fd(), &refused, Some(r.as_raw_fd())).is_err());
    protocol::hand_over(a.as_raw_fd(), &FromInit::NetProxy, Some(r.as_raw_fd())).unwrap();
    protocol::hand_over(a.as_raw_fd(), &FromInit::NetReady, None).unwrap();
}

// The receiving side keeps a descriptor only from a frame that names a crossing, one at most.
#[test]
fn the_host_side_keeps_only_descriptors_of_a_named_crossing() {
    let (a, b) = crate::sys::socketpair().unwrap();
    let (r, _w) = crate::sys::pipe().unwrap();
    protocol::send(a.as_raw_fd(), &FromInit::NetReady, Some(r.as_raw_fd())).unwrap();
    protocol::send(a.as_raw_fd(), &FromInit::NetDiag, Some(r.as_raw_fd())).unwrap();
    let got = |sock| protocol::recv_handed::<FromInit>(sock).unwrap().unwrap();
    let (stray, fd) = got(b.as_raw_fd());
    assert!(matches!(stray, FromInit::NetReady) && fd.is_none());
    let (diag, fd) = got(b.as_raw_fd());
    assert!(matches!(diag, FromInit::NetDiag) && fd.is_some());
}

#[test]
fn the_inventory_lists_each_crossing_once_with_a_name_of_its_own() {
    let set: BTreeSet<Crossing> = Crossing::ALL.into_iter().collect();
    assert_eq!(set.len(), Crossing::ALL.len());
    let names: BTreeSet<&str> = Crossing::ALL.into_iter().map(Crossing::name).collect();
    assert_eq!(names.len(), Crossing::ALL.len());
    // Only descriptors are held inside, and only those the sandbox inherits or hands out.
    for c in Crossing::ALL {
        if !c.held_inside().is_empty() {
            assert!(
                matches!(c.carrier(), Carrier::Inherited | Carrier::Passed),
                "{c:?}"
            );
        }
    }
}

// The tests each crossing names exist, so the inventory's references cannot go stale.
#[test]
fn every_crossing_names_tests_that_exist() {
    let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for c in Crossing::ALL {
        assert!(!c.shown_by().is_empty(), "{c:?} names no test");
        for at in c.shown_by() {
            let (file, test) = at.split_once("::").expect("file::test");
            let text = std::fs::read_to_string(crates.join(file))
                .unwrap_or_else(|e| panic!("{c:?}: {file}: {e}"));
            let defined = [
                format!("fn {test}("),
                format!("both!({test},"),
                format!("    {test},\n"),
            ];
            assert!(
                defined.iter().any(|d| text.contains(d.as_str())),
                "{c:?}: no test {test} in {file}"
            );
        }
    }
}

// docs/architecture.md's table is written from this list: a row per crossing, by its name.
#[test]
fn the_architecture_docs_list_every_crossing() {
    let doc = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/architecture.md");
    let doc = std::fs::read_to_string(doc).unwrap();
    let rows: Vec<&str> = doc.lines().filter(|l| l.starts_with("| ")).collect();
    for c in Crossing::ALL {
        let row = format!("| {} |", c.name());
        assert!(
            rows.iter().any(|r| r.starts_with(&row)),
            "docs/architecture.md has no row {row}"
        );
    }
}
