//! The byte buffer shared by the push decoders.
//!
//! It holds only the bytes not yet consumed: what is left of the last push
//! plus the unfinished event, so its size is bounded by the largest event
//! (and the largest chunk pushed), never by the stream.

/// Unconsumed input plus the stream coordinates of its first byte.
#[derive(Debug, Default)]
pub(crate) struct Buffer {
    data: Vec<u8>,
    start: usize,
    /// Absolute stream offset of `data[start]`.
    offset: u64,
    /// Line number (from 1) of `data[start]`, counting `\n` only.
    line: u64,
    /// No more input will come.
    pub(crate) eof: bool,
}

impl Buffer {
    pub(crate) fn new() -> Buffer {
        Buffer {
            line: 1,
            ..Buffer::default()
        }
    }

    /// Appends input, first dropping the consumed prefix.
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        if self.start == self.data.len() {
            self.data.clear();
            self.start = 0;
        } else if self.start > 0 && (self.start >= self.data.len() / 2 || self.start >= 1 << 16) {
            self.data.copy_within(self.start.., 0);
            self.data.truncate(self.data.len() - self.start);
            self.start = 0;
        }
        self.data.extend_from_slice(bytes);
    }

    /// The unconsumed bytes.
    #[inline]
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.data[self.start..]
    }

    /// Number of unconsumed bytes.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.data.len() - self.start
    }

    /// Marks `n` bytes as consumed, keeping the line count.
    #[inline]
    pub(crate) fn consume(&mut self, n: usize) {
        let consumed = &self.data[self.start..self.start + n];
        self.line += memchr::memchr_iter(b'\n', consumed).count() as u64;
        self.consume_counted(n, 0);
    }

    /// Marks `n` bytes as consumed, which the caller says hold `lines` line ends.
    #[inline]
    pub(crate) fn consume_counted(&mut self, n: usize, lines: u64) {
        debug_assert!(n <= self.len());
        self.start += n;
        self.offset += n as u64;
        self.line += lines;
    }

    /// Absolute offset of the first unconsumed byte.
    #[inline]
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }

    /// Line (from 1) of the first unconsumed byte.
    #[inline]
    pub(crate) fn line(&self) -> u64 {
        self.line
    }

    /// Skips a UTF-8 byte order mark at the current position. Returns false
    /// when there are too few bytes yet to tell.
    pub(crate) fn skip_bom(&mut self) -> bool {
        const BOM: &[u8] = b"\xEF\xBB\xBF";
        let b = self.bytes();
        if b.len() >= 3 || self.eof || !BOM.starts_with(b) {
            if b.starts_with(BOM) {
                self.consume_counted(3, 0);
            }
            true
        } else {
            false
        }
    }

    /// Bytes held, consumed or not (for memory tests).
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.data.capacity()
    }

    /// Drops all bytes (after a fatal error).
    pub(crate) fn clear(&mut self) {
        self.offset += self.len() as u64;
        self.data = Vec::new();
        self.start = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_only_unconsumed_bytes() {
        let mut b = Buffer::new();
        b.push(b"abc\ndef");
        b.consume(4);
        assert_eq!(b.bytes(), b"def");
        assert_eq!(b.offset(), 4);
        assert_eq!(b.line(), 2);
        b.push(b"gh");
        assert_eq!(b.bytes(), b"defgh");
        assert!(b.data.len() <= 5 + 4);
        b.consume(5);
        b.push(b"x");
        assert_eq!(b.data.len(), 1);
    }

    #[test]
    fn bom_needs_three_bytes_or_eof() {
        let mut b = Buffer::new();
        b.push(b"\xEF\xBB");
        assert!(!b.skip_bom());
        b.push(b"\xBF{");
        assert!(b.skip_bom());
        assert_eq!(b.bytes(), b"{");
        assert_eq!(b.offset(), 3);
        let mut c = Buffer::new();
        c.push(b"\xEF");
        c.eof = true;
        assert!(c.skip_bom());
        assert_eq!(c.bytes(), b"\xEF");
    }
}
