//! The SSH wire encoding the agent protocol is written in (RFC 4251 §5): `uint32` lengths,
//! `string`s, `mpint`s, and agent messages framed as `uint32 length || byte type || body`.

/// A message, or a part of one, that ends before what its lengths promise.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed agent message: {0}")]
pub struct WireError(pub &'static str);

/// Reads fields off the front of a byte string.
#[derive(Debug, Clone)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], WireError> {
        if self.buf.len() < n {
            return Err(WireError(what));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1, "truncated byte")?[0])
    }

    pub(crate) fn u32(&mut self) -> Result<u32, WireError> {
        let b = self.take(4, "truncated uint32")?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn bool(&mut self) -> Result<bool, WireError> {
        Ok(self.u8()? != 0)
    }

    pub(crate) fn string(&mut self) -> Result<&'a [u8], WireError> {
        let n = self.u32()? as usize;
        self.take(n, "string longer than its message")
    }

    /// An `mpint` as unsigned big-endian bytes without leading zeros (keys and signatures
    /// only hold non-negative ones).
    pub(crate) fn mpint(&mut self) -> Result<&'a [u8], WireError> {
        let s = self.string()?;
        if s.first().is_some_and(|b| b & 0x80 != 0) {
            return Err(WireError("negative mpint"));
        }
        let zeros = s.iter().take_while(|b| **b == 0).count();
        Ok(&s[zeros..])
    }

    /// The rest, which must be nothing: trailing bytes mean the message is not what it says.
    pub(crate) fn end(&self) -> Result<(), WireError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(WireError("trailing bytes"))
        }
    }
}

/// Appends an SSH `string`.
#[cfg(test)]
pub(crate) fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u32).to_be_bytes());
    out.extend_from_slice(s);
}

/// Appends an SSH `mpint` of the unsigned big-endian `n`.
#[cfg(test)]
pub(crate) fn put_mpint(out: &mut Vec<u8>, n: &[u8]) {
    let n = &n[n.iter().take_while(|b| **b == 0).count()..];
    if n.first().is_some_and(|b| b & 0x80 != 0) {
        let mut v = vec![0];
        v.extend_from_slice(n);
        put_string(out, &v);
    } else {
        put_string(out, n);
    }
}

/// One framed agent message: its type byte and body.
pub(crate) fn frame(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + body.len());
    out.extend_from_slice(&((body.len() + 1) as u32).to_be_bytes());
    out.push(kind);
    out.extend_from_slice(body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_it_wrote_and_refuses_short_input() {
        let mut b = Vec::new();
        put_string(&mut b, b"hello");
        put_mpint(&mut b, &[0, 0, 0x80, 1]);
        b.push(1);
        let mut r = Reader::new(&b);
        assert_eq!(r.string().unwrap(), b"hello");
        assert_eq!(r.mpint().unwrap(), &[0x80, 1]);
        assert!(r.bool().unwrap());
        r.end().unwrap();
        assert!(r.u8().is_err());
        let mut short = Reader::new(&[0, 0, 0, 9, 1]);
        assert!(short.string().is_err());
        assert!(Reader::new(&[0, 0, 0, 1, 0x80]).mpint().is_err());
        assert_eq!(frame(5, &[]), [0, 0, 0, 1, 5]);
    }
}
