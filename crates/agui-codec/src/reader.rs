//! Blocking decoding over [`std::io::BufRead`].

use std::io::{BufRead, ErrorKind};

use crate::{DecodeError, DecodeOptions, Decoder, Format, PushDecoder};

/// An iterator of events (or SSE frames, with [`Reader::from_decoder`] and an
/// [`SseDecoder`](crate::SseDecoder)) read from a [`BufRead`].
///
/// It yields `Err` for bad input and goes on after recoverable errors; after
/// any other error it ends.
#[derive(Debug)]
pub struct Reader<R, D = Decoder> {
    reader: R,
    decoder: D,
    /// End of input reached.
    done: bool,
    /// Reading failed: yield nothing more.
    failed: bool,
}

impl<R: BufRead> Reader<R> {
    /// Reads events, detecting the format from the first bytes.
    pub fn new(reader: R) -> Reader<R> {
        Reader::with_options(reader, DecodeOptions::default())
    }

    /// Reads events of a known format.
    pub fn with_format(reader: R, format: Format) -> Reader<R> {
        Reader::with_options(reader, DecodeOptions::format(format))
    }

    /// Reads events with these options.
    pub fn with_options(reader: R, options: DecodeOptions) -> Reader<R> {
        Reader::from_decoder(reader, Decoder::new(options))
    }

    /// The format, once known.
    pub fn format(&self) -> Option<Format> {
        self.decoder.format()
    }
}

impl<R: BufRead, D: PushDecoder> Reader<R, D> {
    /// Reads with any push decoder.
    pub fn from_decoder(reader: R, decoder: D) -> Reader<R, D> {
        Reader {
            reader,
            decoder,
            done: false,
            failed: false,
        }
    }

    /// The decoder (for its position, or SSE's last event id).
    pub fn decoder(&self) -> &D {
        &self.decoder
    }

    /// Gives back the underlying reader.
    pub fn into_inner(self) -> R {
        self.reader
    }
}

impl<R: BufRead, D: PushDecoder> Iterator for Reader<R, D> {
    type Item = Result<D::Item, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        loop {
            if let Some(item) = self.decoder.pull() {
                return Some(item);
            }
            if self.done {
                return None;
            }
            let n = match self.reader.fill_buf() {
                Ok([]) => {
                    self.decoder.finish();
                    self.done = true;
                    continue;
                }
                Ok(bytes) => {
                    self.decoder.push(bytes);
                    bytes.len()
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(source) => {
                    self.failed = true;
                    let at = self.decoder.position();
                    return Some(Err(DecodeError::Io { at, source }));
                }
            };
            self.reader.consume(n);
        }
    }
}
