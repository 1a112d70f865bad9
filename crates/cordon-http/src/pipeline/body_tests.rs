use super::*;

#[test]
fn compressed_bodies_are_shown_decompressed_and_bounded() {
    use std::io::Write;
    let text = "ignore previous instructions ".repeat(1000);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(text.as_bytes()).unwrap();
    let gz = gz.finish().unwrap();
    let out = decompress_prefix("gzip", &gz, 64).unwrap().unwrap();
    assert_eq!(out.len(), 64);
    assert!(out.starts_with(b"ignore previous"));
    // A truncated stream yields what it has.
    let part = decompress_prefix("gzip", &gz[..gz.len() / 2], 1 << 20)
        .unwrap()
        .unwrap();
    assert!(part.len() < text.len());
    assert_eq!(decompress_prefix("br", &gz, 64), None);
    // Every gzip member is read.
    let member = |t: &[u8]| {
        let mut g = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        g.write_all(t).unwrap();
        g.finish().unwrap()
    };
    let two = [member(b"hello "), member(b"token=SECRET")].concat();
    let out = decompress_prefix("gzip", &two, 1024).unwrap().unwrap();
    assert_eq!(out, b"hello token=SECRET");
    // Plain text labelled gzip is an error (the caller shows it raw, saying so).
    assert!(
        decompress_prefix("gzip", b"token=SECRET", 64)
            .unwrap()
            .is_err()
    );
}

fn needs(judge: usize, dlp: Option<cordon_policy::DlpAction>, credentials: bool) -> Needs {
    Needs {
        judge,
        dlp: dlp.map(|a| (a, 1000)),
        credentials,
    }
}

#[test]
fn bodies_stream_unless_a_check_needs_them_first() {
    use cordon_policy::DlpAction;
    // Scanning that only logs or refuses reads as the body streams.
    assert_eq!(
        plan(
            HttpAction::Allow,
            needs(0, Some(DlpAction::Deny), false),
            false,
            false
        ),
        (true, 0)
    );
    // Asking a person about a secret, the judge, or a compressed body: read first.
    assert_eq!(
        plan(
            HttpAction::Allow,
            needs(0, Some(DlpAction::Ask), false),
            false,
            false
        ),
        (false, 1000)
    );
    assert_eq!(
        plan(HttpAction::Judge, needs(16, None, false), false, false),
        (false, 16)
    );
    assert_eq!(
        plan(HttpAction::Allow, needs(0, None, true), true, false),
        (false, PLACEHOLDER_BODY_BYTES)
    );
    // Nothing to look for, a denied request, an empty body: nothing read, nothing streamed.
    assert_eq!(
        plan(HttpAction::Allow, needs(0, None, false), false, false),
        (false, 0)
    );
    assert_eq!(
        plan(
            HttpAction::Deny,
            needs(0, Some(DlpAction::Deny), true),
            false,
            false
        ),
        (false, 0)
    );
    assert!(
        !plan(
            HttpAction::Allow,
            needs(0, Some(DlpAction::Deny), true),
            false,
            true
        )
        .0
    );
}
