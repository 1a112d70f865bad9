//! Server-sent events framing (the `text/event-stream` format of the HTML standard).

/// One message: `event: NAME`, one `data:` line per line of `data`, a blank line. A newline
/// (`\n`, `\r\n` or `\r`) in `data` starts a new `data:` line, so text from a session can never
/// end the message early or forge a field; `name` is ours and must be one plain word.
pub fn frame(name: &str, data: &str) -> String {
    debug_assert!(name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'));
    let mut out = String::with_capacity(data.len() + name.len() + 16);
    out.push_str("event: ");
    out.push_str(name);
    out.push('\n');
    for line in data.split(['\n', '\r']) {
        out.push_str("data: ");
        out.push_str(line);
        out.push('\n');
    }
    out.push('\n');
    out
}

/// A comment line: keeps idle connections (and proxies) from timing out.
pub const KEEPALIVE: &str = ": keep-alive\n\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line() {
        assert_eq!(
            frame("event", "{\"a\":1}"),
            "event: event\ndata: {\"a\":1}\n\n"
        );
    }

    #[test]
    fn newlines_cannot_end_the_message_or_add_fields() {
        let f = frame("event", "x\n\nevent: approvals\r\ndata: forged\rid: 9");
        // Every line is ours or a data line; the only blank line is the final one.
        let lines: Vec<&str> = f.split('\n').collect();
        assert_eq!(lines[0], "event: event");
        let body = &lines[1..lines.len() - 2];
        assert!(body.iter().all(|l| l.starts_with("data: ")), "{f:?}");
        assert_eq!(f.matches("\n\n").count(), 1, "{f:?}");
        assert!(f.ends_with("\n\n"));
        assert!(!f.contains('\r'));
    }

    #[test]
    fn empty_data_is_one_empty_data_line() {
        assert_eq!(frame("ping", ""), "event: ping\ndata: \n\n");
    }
}
