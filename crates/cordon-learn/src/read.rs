//! Reading logs one line at a time: a replay of a million events holds one in memory.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use cordon_events::Event;

/// A log that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{}:{line}: not an audit event ({source}); is it a cordon log? `cordon log --verify --file {}` checks one",
        path.display(),
        path.display()
    )]
    Parse {
        path: PathBuf,
        line: u64,
        source: serde_json::Error,
    },
}

/// Calls `f` with each event of the log at `path`, in order; returns how many there were.
/// Blank lines are skipped; a last line cut short (a session still writing) ends the read.
pub fn for_each_event(path: &Path, mut f: impl FnMut(&Event)) -> Result<u64, LogError> {
    let read = |source| LogError::Read {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read)?;
    let mut reader = std::io::BufReader::with_capacity(1 << 16, file);
    let mut line = String::new();
    let (mut n, mut count) = (0u64, 0u64);
    loop {
        line.clear();
        if reader.read_line(&mut line).map_err(read)? == 0 {
            return Ok(count);
        }
        n += 1;
        let text = line.trim_end_matches(['\n', '\r']);
        if text.trim().is_empty() {
            continue;
        }
        let complete = line.ends_with('\n');
        match serde_json::from_str::<Event>(text) {
            Ok(e) => {
                count += 1;
                f(&e);
            }
            Err(_) if !complete => return Ok(count),
            Err(source) => {
                return Err(LogError::Parse {
                    path: path.to_owned(),
                    line: n,
                    source,
                });
            }
        }
    }
}
