//! Times cordon-state's snapshot, session start and change review on a directory tree, for
//! `bench/state.sh`. Prints one `name seconds [key=value…]` line per measurement on stdout.
//!
//! ```text
//! state_bench scan SRC                  # manifest only (BLAKE3 of every file, nothing written)
//! state_bench snapshot SRC INTO         # snapshot(): manifest + hard-linked copy; leaves INTO
//! state_bench begin SRC STORE ID        # StateStore::begin on SRC; leaves the session in STORE
//! state_bench diff STORE ID             # write 10 changed + 5 new files into the session's
//!                                       # upper dir (as overlayfs copy-up would), time changes()
//! state_bench all SRC SCRATCH           # all four in turn; SCRATCH must not exist, is removed
//! ```
//!
//! The separate subcommands let the caller measure the disk each step leaves behind.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use cordon_state::{ChangeKind, EntryKind, Manifest, NodeKind, StateStore};

const CHANGED: usize = 10;
const ADDED: usize = 5;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn usage() -> ExitCode {
    eprintln!(
        "usage: state_bench scan SRC | snapshot SRC INTO | begin SRC STORE ID | diff STORE ID | all SRC SCRATCH"
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let arg = |i: usize| args.get(i).map(PathBuf::as_path);
    let cmd = arg(0).and_then(Path::to_str).unwrap_or("");
    let res = match (cmd, args.len()) {
        ("scan", 2) => scan(&args[1]),
        ("snapshot", 3) => snapshot(&args[1], &args[2]),
        ("begin", 4) => begin(&args[1], &args[2], id_of(&args[3])),
        ("diff", 3) => diff(&args[1], id_of(&args[2])),
        ("all", 3) => all(&args[1], &args[2]),
        _ => return usage(),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("state_bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn id_of(p: &Path) -> &str {
    p.to_str().unwrap_or("")
}

fn report(name: &str, secs: f64, extra: &str) -> Res<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{name} {secs:.6}{extra}")?;
    out.flush()?;
    Ok(())
}

fn scan(src: &Path) -> Res<()> {
    let t = Instant::now();
    let m = cordon_state::scan(src)?;
    let s = t.elapsed().as_secs_f64();
    let files = m
        .entries
        .values()
        .filter(|n| n.kind == NodeKind::File)
        .count();
    let bytes: u64 = m.entries.values().map(|n| n.size).sum();
    report("scan", s, &format!(" files={files} bytes={bytes}"))
}

fn snapshot(src: &Path, into: &Path) -> Res<()> {
    let t = Instant::now();
    let m = cordon_state::snapshot(src, into)?;
    let s = t.elapsed().as_secs_f64();
    report("snapshot", s, &format!(" entries={}", m.entries.len()))
}

fn begin(src: &Path, store: &Path, id: &str) -> Res<()> {
    let store = StateStore::new(store);
    let t = Instant::now();
    let session = store.begin(id, &[src.to_path_buf()])?;
    let s = t.elapsed().as_secs_f64();
    if session.entries.len() != 1 || session.entries[0].kind != EntryKind::Dir {
        return Err(format!("{}: expected one protected directory", src.display()).into());
    }
    report("begin", s, "")
}

/// Write `CHANGED` modified copies of existing files and `ADDED` new files into the session's
/// upper dir, the way overlayfs leaves them after a copy-up (parent dirs recreated with the lower
/// dirs' modes), then time `Session::changes()` and check it found exactly those.
fn diff(store: &Path, id: &str) -> Res<()> {
    let store = StateStore::new(store);
    let session = store.open(id)?;
    let entry = session.entries.first().ok_or("session protects nothing")?;
    let before = Manifest::load(&entry.manifest)?;
    let files: Vec<&PathBuf> = before
        .entries
        .iter()
        .filter(|(_, n)| n.kind == NodeKind::File)
        .map(|(p, _)| p)
        .collect();
    if files.len() < CHANGED {
        return Err(format!("need at least {CHANGED} files, found {}", files.len()).into());
    }
    let step = files.len() / CHANGED;
    let copy_up_dirs = |rel: &Path| -> Res<()> {
        let mut acc = PathBuf::new();
        for c in rel.parent().into_iter().flat_map(Path::components) {
            acc.push(c);
            let up = entry.upper.join(&acc);
            if !up.exists() {
                fs::create_dir(&up)?;
                let mode = fs::metadata(entry.host.join(&acc))?.permissions().mode();
                fs::set_permissions(&up, fs::Permissions::from_mode(mode & 0o7777))?;
            }
        }
        Ok(())
    };
    for i in 0..CHANGED {
        let rel = files[i * step];
        copy_up_dirs(rel)?;
        let dst = entry.upper.join(rel);
        fs::copy(entry.host.join(rel), &dst)?;
        fs::OpenOptions::new()
            .append(true)
            .open(&dst)?
            .write_all(b"changed by state_bench\n")?;
    }
    for i in 0..ADDED {
        let rel = files[i * step].with_file_name(format!("state-bench-new-{i}.txt"));
        copy_up_dirs(&rel)?;
        fs::write(
            entry.upper.join(&rel),
            format!("new file {i}\nwritten by state_bench\n"),
        )?;
    }

    let t = Instant::now();
    let changes = session.changes()?;
    let s = t.elapsed().as_secs_f64();
    let changed = changes
        .iter()
        .filter(|c| c.kind == ChangeKind::Modified)
        .count();
    let added = changes
        .iter()
        .filter(|c| c.kind == ChangeKind::Added)
        .count();
    if changed != CHANGED || added != ADDED || changes.len() != CHANGED + ADDED {
        return Err(format!(
            "changes() found {} changes ({changed} changed, {added} added), expected {CHANGED} changed + {ADDED} added",
            changes.len()
        )
        .into());
    }
    report(
        "changes",
        s,
        &format!(
            " changed={changed} added={added} entries={}",
            before.entries.len()
        ),
    )
}

fn all(src: &Path, scratch: &Path) -> Res<()> {
    fs::create_dir(scratch)?;
    let run = || -> Res<()> {
        scan(src)?;
        snapshot(src, &scratch.join("snapshot"))?;
        begin(src, &scratch.join("store"), "state-bench")?;
        diff(&scratch.join("store"), "state-bench")
    };
    let res = run();
    fs::remove_dir_all(scratch)?;
    res
}
