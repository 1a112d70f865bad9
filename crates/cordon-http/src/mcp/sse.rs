//! Server-sent events, read frame by frame as they stream (a frame may arrive split across
//! any number of chunks, or many in one): what MCP's SSE transport and streamable HTTP's
//! `text/event-stream` answers carry. A frame is handed on whole or not at all, so cordon can
//! rewrite one (a filtered `tools/list`) or slip its own between two. Bounded: a frame longer
//! than the limit is an error, never an ever-growing buffer.

/// One event: its type (`message` when unnamed), its data (lines joined by `\n`), and the
/// frame's bytes as they came.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// `event:` (or `message`).
    pub event: String,
    /// `data:` lines, joined.
    pub data: String,
    /// `id:`, if any.
    pub id: Option<String>,
    /// The frame as received, its blank line included.
    pub raw: Vec<u8>,
}

impl Frame {
    /// A frame carrying `data` as event `event` (`id` kept), written out.
    pub fn write(event: &str, id: Option<&str>, data: &str) -> Vec<u8> {
        let mut out = String::new();
        if event != "message" {
            out.push_str(&format!("event: {event}\n"));
        } else {
            out.push_str("event: message\n");
        }
        if let Some(id) = id {
            out.push_str(&format!("id: {id}\n"));
        }
        for line in data.split('\n') {
            out.push_str(&format!("data: {line}\n"));
        }
        out.push('\n');
        out.into_bytes()
    }
}

/// An SSE frame grew past the limit.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("an event-stream frame is longer than {0} bytes")]
pub struct TooLong(pub usize);

/// Splits a stream into frames, as the SSE spec reads lines: each ends with CRLF, LF or CR
/// (a CR then LF is one end, even split across chunks), and a blank line ends the event. Any
/// other reading would let a server hide a frame from cordon that its client still reads.
#[derive(Debug)]
pub struct Parser {
    buf: Vec<u8>,
    max: usize,
    /// Where in `buf` the next byte to look at is.
    scan: usize,
    /// Where in `buf` the current line starts.
    line: usize,
    /// The last byte looked at was a CR ending a line: an LF right after belongs to it.
    after_cr: bool,
}

impl Parser {
    /// A parser refusing frames longer than `max` bytes.
    pub fn new(max: usize) -> Self {
        Self {
            buf: Vec::new(),
            max,
            scan: 0,
            line: 0,
            after_cr: false,
        }
    }

    /// Takes `chunk`; returns the frames it completed.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<Frame>, TooLong> {
        self.buf.extend_from_slice(chunk);
        let mut frames = Vec::new();
        let mut start = 0;
        while self.scan < self.buf.len() {
            let i = self.scan;
            self.scan += 1;
            let b = self.buf[i];
            if std::mem::take(&mut self.after_cr) && b == b'\n' {
                self.line = i + 1;
                continue;
            }
            if b != b'\n' && b != b'\r' {
                continue;
            }
            self.after_cr = b == b'\r';
            let mut end = i + 1;
            // A CRLF ending the frame goes with it: a client holding a CR to see whether an
            // LF follows would otherwise wait for the next frame to dispatch this one.
            if self.after_cr && self.line == i && self.buf.get(end) == Some(&b'\n') {
                self.after_cr = false;
                end += 1;
                self.scan += 1;
            }
            if self.line == i {
                frames.push(parse_frame(&self.buf[start..end]));
                start = end;
            }
            self.line = end;
        }
        self.buf.drain(..start);
        self.scan -= start;
        self.line -= start;
        if self.buf.len() > self.max {
            return Err(TooLong(self.max));
        }
        Ok(frames)
    }

    /// Bytes held for a frame not whole yet.
    pub fn held(&self) -> usize {
        self.buf.len()
    }

    /// What is left at the end of the stream (a last frame without its blank line).
    pub fn rest(&mut self) -> Vec<u8> {
        self.scan = 0;
        self.line = 0;
        std::mem::take(&mut self.buf)
    }
}

fn parse_frame(raw: &[u8]) -> Frame {
    let text = String::from_utf8_lossy(raw);
    let mut event = String::from("message");
    let mut data: Vec<&str> = Vec::new();
    let mut id = None;
    for line in text.split(['\n', '\r']) {
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => event = value.to_string(),
            "data" => data.push(value),
            "id" => id = Some(value.to_string()),
            _ => {}
        }
    }
    Frame {
        event,
        data: data.join("\n"),
        id,
        raw: raw.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_split_across_chunks_comes_out_once_whole() {
        let stream = b"event: message\r\ndata: {\"a\":\r\n\r\nevent: endpoint\ndata: /m?s=1\n\n";
        for cut in 1..stream.len() {
            let mut p = Parser::new(1024);
            let mut got = p.push(&stream[..cut]).unwrap();
            got.extend(p.push(&stream[cut..]).unwrap());
            assert_eq!(got.len(), 2, "cut at {cut}");
            assert_eq!(got[0].data, "{\"a\":");
            assert_eq!(got[1].event, "endpoint");
            assert_eq!(got[1].data, "/m?s=1");
            let raw: Vec<u8> = got.iter().flat_map(|f| f.raw.clone()).collect();
            assert_eq!(raw, stream, "cut at {cut}");
            assert!(p.rest().is_empty());
        }
    }

    #[test]
    fn byte_by_byte_multi_line_data() {
        let mut p = Parser::new(1024);
        let mut got = Vec::new();
        for b in b"id: 4\ndata: one\ndata: two\n\n: comment\n\n" {
            got.extend(p.push(&[*b]).unwrap());
        }
        assert_eq!(got[0].data, "one\ntwo");
        assert_eq!(got[0].id.as_deref(), Some("4"));
        assert_eq!(got[1].data, "");
    }

    #[test]
    fn a_frame_past_the_limit_is_an_error() {
        let mut p = Parser::new(8);
        assert_eq!(p.push(b"data: 0123456789"), Err(TooLong(8)));
    }

    #[test]
    fn written_frames_parse_back() {
        let w = Frame::write("message", Some("9"), "{\"x\":1}");
        let mut p = Parser::new(1024);
        let f = p.push(&w).unwrap().remove(0);
        assert_eq!(
            (f.event.as_str(), f.data.as_str()),
            ("message", "{\"x\":1}")
        );
        assert_eq!(f.id.as_deref(), Some("9"));
    }

    /// Every way the spec lets a line end, mixed, with every split into two and three chunks:
    /// the same frames, and the same bytes, come out.
    #[test]
    fn every_line_ending_ends_lines_at_every_split() {
        let stream: &[u8] =
            b"data: a\r\rdata: b\n\r\ndata: c\r\n\rdata: d\n\rdata: e\r\n\r\nevent: x\rdata: f\r\n\n";
        let want = ["a", "b", "c", "d", "e", "f"];
        let check = |parts: &[&[u8]]| {
            let mut p = Parser::new(1024);
            let mut got = Vec::new();
            for part in parts {
                got.extend(p.push(part).unwrap());
            }
            let data: Vec<&str> = got.iter().map(|f| f.data.as_str()).collect();
            assert_eq!(data, want, "{parts:?}");
            assert_eq!(got[5].event, "x");
            let mut raw: Vec<u8> = got.iter().flat_map(|f| f.raw.clone()).collect();
            raw.extend(p.rest());
            assert_eq!(raw, stream, "{parts:?}");
            // A frame's CRLF that came with it goes with it (no byte a client waits on).
            if parts.len() == 1 {
                assert!(got[4].raw.ends_with(b"\r\n\r\n"), "{:?}", got[4].raw);
            }
        };
        check(&[stream]);
        for a in 0..=stream.len() {
            check(&[&stream[..a], &stream[a..]]);
            for b in a..=stream.len() {
                check(&[&stream[..a], &stream[a..b], &stream[b..]]);
            }
        }
    }
}
