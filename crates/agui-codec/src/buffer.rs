//! The byte buffer shared by the push decoders.
//!
//! It holds only the bytes not yet consumed: what is left of the last push
//! plus the unfinished event, so its size is bounded by the largest event
//! (and the largest chunk pushed), never by the stream.

/// Unconsumed input plus the stream coordinates of its first byte.
///
/// `data[start..end]` is the unconsumed input. `data[end..]` holds stale
/// bytes of earlier input, kept so that [`Buffer::fill`] reads into memory
/// that needs neither zeroing nor a copy.
#[derive(Debug, Default)]
pub(crate) struct Buffer {
    data: Vec<u8>,
    start: usize,
    end: usize,
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
        let room = self.room(bytes.len());
        room.copy_from_slice(bytes);
        self.end += bytes.len();
    }

    /// Appends what `read` puts at the start of the `max` bytes it is
    /// lent (it returns how many), first dropping the consumed prefix: the
    /// input is read straight into the buffer, not copied from another.
    pub(crate) fn fill<E>(
        &mut self,
        max: usize,
        read: impl FnOnce(&mut [u8]) -> Result<usize, E>,
    ) -> Result<usize, E> {
        let n = read(self.room(max))?.min(max);
        self.end += n;
        Ok(n)
    }

    /// The `n` bytes after the unconsumed ones, once the consumed prefix is
    /// dropped (when nothing is left, or when it is at least half the data
    /// or 64 KiB); grown with zeros only past the largest size so far.
    fn room(&mut self, n: usize) -> &mut [u8] {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.start > 0 && (self.start >= self.end / 2 || self.start >= 1 << 16) {
            self.data.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let need = self.end + n;
        if self.data.len() < need {
            self.data.resize(need, 0);
        }
        &mut self.data[self.end..need]
    }

    /// The unconsumed bytes.
    #[inline]
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.data[self.start..self.end]
    }

    /// Number of unconsumed bytes.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.end - self.start
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
        self.end = 0;
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
        assert!(b.end <= 5 + 4);
        b.consume(5);
        b.push(b"x");
        assert_eq!(b.end, 1);
        assert_eq!(b.bytes(), b"x");
    }

    /// Reading into the buffer gives what pushing the same bytes gives,
    /// whatever was consumed and however much the reader returns.
    #[test]
    fn fill_is_push_without_the_copy() {
        let input: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
        for (step, eat) in [(1, 0), (7, 3), (64, 64), (300, 1), (4096, 2000)] {
            let (mut pushed, mut filled) = (Buffer::new(), Buffer::new());
            let mut at = 0;
            while at < input.len() {
                let piece = &input[at..(at + step).min(input.len())];
                pushed.push(piece);
                // Lent more room than it uses, as a read near the end is.
                let n = filled
                    .fill::<()>(step + 5, |room| {
                        room[..piece.len()].copy_from_slice(piece);
                        Ok(piece.len())
                    })
                    .unwrap();
                assert_eq!(n, piece.len());
                at += piece.len();
                assert_eq!(pushed.bytes(), filled.bytes());
                let eat = eat.min(pushed.len());
                pushed.consume(eat);
                filled.consume(eat);
                assert_eq!(pushed.bytes(), filled.bytes());
                assert_eq!(
                    (pushed.offset(), pushed.line()),
                    (filled.offset(), filled.line())
                );
            }
        }
        // A failed read appends nothing.
        let mut b = Buffer::new();
        b.push(b"ab");
        assert_eq!(b.fill(10, |_| Err("no")), Err("no"));
        assert_eq!(b.bytes(), b"ab");
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
