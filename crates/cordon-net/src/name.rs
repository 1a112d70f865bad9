//! Domain-name normalisation shared by the DNS responder, the blocklist and host-side lookups.
//!
//! One canonical form everywhere: ASCII lower case, no trailing dot, labels of letters, digits,
//! `-` and `_` only. Anything else is refused rather than guessed at: DNS packets come from the
//! sandbox and are attacker-controlled.

use thiserror::Error;

/// Longest name accepted, in presentation form without the trailing dot (RFC 1035: 255 octets on
/// the wire, i.e. 253 characters of text).
pub const MAX_NAME_LEN: usize = 253;
/// Longest label (RFC 1035).
pub const MAX_LABEL_LEN: usize = 63;
/// Most labels accepted in one name. The wire format allows 127; real names use a handful, so
/// anything deeper is treated as garbage.
pub const MAX_LABELS: usize = 64;

/// Why a name was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum NameError {
    /// The name is empty or the root (`.`).
    #[error("empty name")]
    Empty,
    /// Longer than [`MAX_NAME_LEN`] characters.
    #[error("name longer than {MAX_NAME_LEN} characters")]
    TooLong,
    /// More than [`MAX_LABELS`] labels.
    #[error("more than {MAX_LABELS} labels")]
    TooManyLabels,
    /// An empty label (`a..b`, leading dot).
    #[error("empty label")]
    EmptyLabel,
    /// A label longer than [`MAX_LABEL_LEN`].
    #[error("label longer than {MAX_LABEL_LEN} characters")]
    LabelTooLong,
    /// A byte outside `[A-Za-z0-9_-]` (non-ASCII names must be given in punycode, `xn--…`).
    #[error("character outside letters, digits, '-' and '_'")]
    BadCharacter,
}

/// Normalises a textual name: strips one trailing dot, lower-cases ASCII, and checks the limits
/// and character set.
pub fn normalize(name: &str) -> Result<String, NameError> {
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    from_labels(name.split('.').map(str::as_bytes))
}

/// Normalises a name given as raw labels (as decoded from the wire).
pub fn from_labels<'a>(labels: impl Iterator<Item = &'a [u8]>) -> Result<String, NameError> {
    let mut out = String::new();
    let mut count = 0usize;
    for label in labels {
        count += 1;
        if count > MAX_LABELS {
            return Err(NameError::TooManyLabels);
        }
        if label.is_empty() {
            return Err(NameError::EmptyLabel);
        }
        if label.len() > MAX_LABEL_LEN {
            return Err(NameError::LabelTooLong);
        }
        if !out.is_empty() {
            out.push('.');
        }
        for &b in label {
            if !(b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
                return Err(NameError::BadCharacter);
            }
            out.push(char::from(b.to_ascii_lowercase()));
        }
        if out.len() > MAX_NAME_LEN {
            return Err(NameError::TooLong);
        }
    }
    if count == 0 {
        return Err(NameError::Empty);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_and_trailing_dot() {
        assert_eq!(normalize("WWW.Example.COM.").unwrap(), "www.example.com");
        assert_eq!(normalize("_dmarc.x-y.test").unwrap(), "_dmarc.x-y.test");
    }

    #[test]
    fn rejects_garbage() {
        assert_eq!(normalize(""), Err(NameError::Empty));
        assert_eq!(normalize("."), Err(NameError::Empty));
        assert_eq!(normalize("a..b"), Err(NameError::EmptyLabel));
        assert_eq!(normalize(".a"), Err(NameError::EmptyLabel));
        assert_eq!(normalize("a b.c"), Err(NameError::BadCharacter));
        assert_eq!(normalize("bücher.de"), Err(NameError::BadCharacter));
        assert_eq!(normalize(&"a".repeat(64)), Err(NameError::LabelTooLong));
        let long = vec!["abcdefghi"; 26].join(".");
        assert_eq!(normalize(&long), Err(NameError::TooLong));
        let deep = vec!["a"; 65].join(".");
        assert_eq!(normalize(&deep), Err(NameError::TooManyLabels));
        assert!(normalize(&vec!["a"; 64].join(".")).is_ok());
    }
}
