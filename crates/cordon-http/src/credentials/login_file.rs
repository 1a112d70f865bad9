//! Writing an agent's login file on the host when its tokens rotate: refresh tokens are
//! single-use at most providers, so the file must hold the new ones before the agent is told
//! anything, and must never be left half-written or with the old (now dead) token.
//!
//! Only the named fields' values change, in place: every other byte — other keys, their
//! order, the file's layout — stays as it was (a field that is missing is added to its
//! object). The new text is checked to parse and to hold each value, then written to a
//! temporary file beside the original (same mode and owner), flushed to disk, and renamed
//! over it; the directory is flushed too. A symlinked login file is written through its link.
//!
//! Host side only: the sandbox never sees these values.

use std::path::{Path, PathBuf};

/// Why a login file could not be updated (it is left as it was).
#[derive(Debug, thiserror::Error)]
pub enum LoginFileError {
    /// Reading, writing or renaming failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not JSON, or a field's way down passes something other than an object.
    #[error("{}: {why}", path.display())]
    Shape {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
}

/// Sets each `(dotted field, value)` of the JSON login file `path` (made 0600 when it does
/// not exist yet), atomically; see the module docs.
pub fn write_json_fields(
    path: &Path,
    updates: &[(String, serde_json::Value)],
) -> Result<(), LoginFileError> {
    let io = |source| LoginFileError::Io {
        path: path.to_path_buf(),
        source,
    };
    let shape = |why: String| LoginFileError::Shape {
        path: path.to_path_buf(),
        why,
    };
    // Through a symlink to the file it names, so the link stays.
    let target = match std::fs::canonicalize(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => path.to_path_buf(),
        Err(e) => return Err(io(e)),
    };
    let (mut text, meta) = match std::fs::read_to_string(&target) {
        Ok(t) => (t, Some(std::fs::metadata(&target).map_err(io)?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => ("{}\n".to_string(), None),
        Err(e) => return Err(io(e)),
    };
    for (field, value) in updates {
        text = set_field(&text, field, value).map_err(shape)?;
    }
    let doc: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| shape(format!("the updated file would not be JSON ({e})")))?;
    for (field, value) in updates {
        if field.split('.').try_fold(&doc, |v, k| v.get(k)) != Some(value) {
            return Err(shape(format!("{field} would not hold its new value")));
        }
    }
    cordon_policy::remember::write_atomically(&target, text.as_bytes(), meta.as_ref()).map_err(io)
}

/// `text` (a JSON object) with the value at dotted `field` replaced by `value` — or added to
/// the deepest object of its way that exists — every other byte kept.
pub(crate) fn set_field(
    text: &str,
    field: &str,
    value: &serde_json::Value,
) -> Result<String, String> {
    let b = text.as_bytes();
    let new = serde_json::to_string(value).map_err(|e| e.to_string())?;
    let keys: Vec<&str> = field.split('.').collect();
    let mut obj = ws(b, 0);
    if b.get(obj) != Some(&b'{') {
        return Err("it is not a JSON object".into());
    }
    for (depth, key) in keys.iter().enumerate() {
        match member(b, obj, key)? {
            Member::Found(start, end) if depth + 1 == keys.len() => {
                return Ok(format!("{}{new}{}", &text[..start], &text[end..]));
            }
            Member::Found(start, _) if b[start] == b'{' => obj = start,
            Member::Found(..) => {
                return Err(format!("{} is not an object", keys[..=depth].join(".")));
            }
            Member::Missing { close, empty } => {
                let mut inner = new;
                for k in keys[depth + 1..].iter().rev() {
                    inner = format!("{{{}:{inner}}}", quoted(k));
                }
                let comma = if empty { "" } else { "," };
                return Ok(format!(
                    "{}{comma}{}:{inner}{}",
                    &text[..close],
                    quoted(key),
                    &text[close..]
                ));
            }
        }
    }
    Err("an empty field".into())
}

fn quoted(k: &str) -> String {
    serde_json::Value::String(k.to_string()).to_string()
}

/// A key of one object: where its value lies, or where a new member would go.
enum Member {
    Found(usize, usize),
    /// The object's closing brace, and whether it has no members.
    Missing {
        close: usize,
        empty: bool,
    },
}

/// Looks for `key` among the members of the object opening at `open`.
fn member(b: &[u8], open: usize, key: &str) -> Result<Member, String> {
    let bad = || "it is not well-formed JSON".to_string();
    let mut i = ws(b, open + 1);
    let mut found = None;
    let mut empty = true;
    loop {
        match b.get(i) {
            Some(b'}') => {
                return Ok(found.unwrap_or(Member::Missing { close: i, empty }));
            }
            Some(b'"') => {}
            _ => return Err(bad()),
        }
        empty = false;
        let kend = string_end(b, i).ok_or_else(bad)?;
        let name: String = serde_json::from_slice(&b[i..kend]).map_err(|_| bad())?;
        i = ws(b, kend);
        if b.get(i) != Some(&b':') {
            return Err(bad());
        }
        let vstart = ws(b, i + 1);
        let vend = value_end(b, vstart).ok_or_else(bad)?;
        // A repeated key: the last one is what parsers read.
        if name == key {
            found = Some(Member::Found(vstart, vend));
        }
        i = ws(b, vend);
        match b.get(i) {
            Some(b',') => i = ws(b, i + 1),
            Some(b'}') => {}
            _ => return Err(bad()),
        }
    }
}

fn ws(b: &[u8], mut i: usize) -> usize {
    while b.get(i).is_some_and(|c| c.is_ascii_whitespace()) {
        i += 1;
    }
    i
}

/// The index after the string opening at `i`.
fn string_end(b: &[u8], mut i: usize) -> Option<usize> {
    i += 1;
    loop {
        match b.get(i)? {
            b'"' => return Some(i + 1),
            b'\\' => i += 2,
            _ => i += 1,
        }
    }
}

/// The index after the value starting at `i`.
fn value_end(b: &[u8], i: usize) -> Option<usize> {
    match b.get(i)? {
        b'"' => string_end(b, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match b.get(j)? {
                    b'"' => {
                        j = string_end(b, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
        }
        _ => {
            let mut j = i;
            while b
                .get(j)
                .is_some_and(|c| !c.is_ascii_whitespace() && !b",}]".contains(c))
            {
                j += 1;
            }
            (j > i).then_some(j)
        }
    }
}

#[cfg(test)]
#[path = "login_file_tests.rs"]
mod tests;
