//! The encodings the HTTP layer reads and writes, from the kept crates (`base64`, as cordon-ssh
//! uses it, and `percent-encoding`): base64 for Basic credentials and the secret scanner,
//! percent-encoding for query and form values. What is cordon's own is only which leniency
//! each reader has, so a placeholder or secret is found whatever spelling the sandbox chose.

use base64::Engine as _;
use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC};

/// Decodes any base64 a server might accept: `=` already removed, URL-safe characters already
/// mapped to standard ones, and bits after the last whole byte ignored.
const LENIENT: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(DecodePaddingMode::RequireNone),
);

/// `v` in standard base64, with `=` padding when `pad`.
pub(crate) fn b64_encode(v: &[u8], pad: bool) -> String {
    match pad {
        true => base64::engine::general_purpose::STANDARD.encode(v),
        false => base64::engine::general_purpose::STANDARD_NO_PAD.encode(v),
    }
}

/// Decodes standard or URL-safe base64 (even mixed), padded or not, `=` anywhere ignored;
/// `None` on any other character. A last lone character (not whole base64) still gives the
/// byte its six bits start, as a byte-at-a-time decoder would: the Basic credentials that
/// are searched for a placeholder are read as leniently as any server might.
pub(crate) fn b64_decode(s: &str) -> Option<Vec<u8>> {
    let mut text: Vec<u8> = s
        .trim()
        .bytes()
        .filter(|b| *b != b'=')
        .map(|b| match b {
            b'-' => b'+',
            b'_' => b'/',
            b => b,
        })
        .collect();
    let lone = match text.len() % 4 {
        1 => text.pop(),
        _ => None,
    };
    let mut out = LENIENT.decode(&text).ok()?;
    if let Some(c) = lone {
        let six = alphabet::STANDARD.as_str().bytes().position(|a| a == c)?;
        out.push((six as u8) << 2);
    }
    Some(out)
}

/// Everything but RFC 3986's unreserved characters (`A-Z a-z 0-9 - _ . ~`).
const RESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// `v` percent-encoded for a query or form value: unreserved characters kept, every other byte
/// as `%XX` (uppercase hex).
pub(crate) fn percent_encode(v: &[u8]) -> String {
    percent_encoding::percent_encode(v, RESERVED).to_string()
}

/// A query or form value decoded: `+` is a space, `%XX` a byte, an invalid escape kept as it
/// is.
pub(crate) fn form_decode(v: &[u8]) -> Vec<u8> {
    // `+` first: a `%2B` decodes to a `+` that stays one.
    let spaced: Vec<u8> = v
        .iter()
        .map(|b| if *b == b'+' { b' ' } else { *b })
        .collect();
    percent_encoding::percent_decode(&spaced).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips() {
        for (raw, padded) in [
            (&b""[..], ""),
            (b"M", "TQ=="),
            (b"Ma", "TWE="),
            (b"Man", "TWFu"),
            (b"x-access-token:abc", "eC1hY2Nlc3MtdG9rZW46YWJj"),
        ] {
            assert_eq!(b64_encode(raw, true), padded);
            assert_eq!(b64_encode(raw, false), padded.trim_end_matches('='));
            assert_eq!(b64_decode(padded).as_deref(), Some(raw));
        }
        assert_eq!(b64_decode("not base64!"), None);
    }

    /// What the hand-written decoder these replace accepted, it still does, to the same bytes.
    #[test]
    fn base64_decoding_is_as_lenient_as_before() {
        // URL-safe and mixed alphabets, `=` anywhere, padding missing, spaces around.
        assert_eq!(b64_decode("-_-_").unwrap(), b64_decode("+/+/").unwrap());
        assert_eq!(b64_decode("+_-/").unwrap(), vec![0xfb, 0xff, 0xbf]);
        assert_eq!(b64_decode(" T=W=E ").as_deref(), Some(&b"Ma"[..]));
        assert_eq!(b64_decode("TWF").as_deref(), Some(&b"Ma"[..]));
        // Bits past the last byte ignored; a lone last character gives its six bits' byte.
        assert_eq!(b64_decode("TR").as_deref(), Some(&b"M"[..]));
        assert_eq!(b64_decode("TWFuT").as_deref(), Some(&b"ManL"[..]));
        assert_eq!(b64_decode("T").as_deref(), Some(&[0x4c][..]));
        assert_eq!(b64_decode("TW!u"), None);
    }

    #[test]
    fn percent_encoding_keeps_unreserved_only() {
        assert_eq!(percent_encode(b"aZ09-_.~"), "aZ09-_.~");
        assert_eq!(percent_encode("a b/+é%".as_bytes()), "a%20b%2F%2B%C3%A9%25");
    }

    #[test]
    fn form_decoding_reads_plus_as_space_and_keeps_bad_escapes() {
        assert_eq!(form_decode(b"a+b%2B%41"), b"a b+A");
        assert_eq!(form_decode(b"100%"), b"100%");
        assert_eq!(form_decode(b"%zz%4"), b"%zz%4");
        assert_eq!(form_decode(b"%e2%80%ae"), "\u{202e}".as_bytes());
    }
}
