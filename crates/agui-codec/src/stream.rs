//! Async decoding: `futures_core::Stream` adapters over tokio readers and
//! over streams of byte chunks.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use futures_core::Stream;
use pin_project_lite::pin_project;
use tokio::io::{AsyncBufRead, AsyncRead, BufReader};

use crate::{DecodeError, DecodeOptions, Decoder, Format, PushDecoder, SseDecoder};

pin_project! {
    /// A stream of events (or SSE frames, with an
    /// [`SseDecoder`](crate::SseDecoder)) read from a tokio [`AsyncBufRead`].
    ///
    /// Like [`Reader`](crate::Reader), it yields `Err` for bad input, goes on
    /// after recoverable errors and ends after any other.
    #[derive(Debug)]
    pub struct AsyncReader<R, D = Decoder> {
        #[pin]
        reader: R,
        decoder: D,
        done: bool,
        failed: bool,
    }
}

impl<R: AsyncBufRead> AsyncReader<R> {
    /// Reads events, detecting the format from the first bytes.
    pub fn new(reader: R) -> AsyncReader<R> {
        AsyncReader::with_options(reader, DecodeOptions::default())
    }

    /// Reads events of a known format.
    pub fn with_format(reader: R, format: Format) -> AsyncReader<R> {
        AsyncReader::with_options(reader, DecodeOptions::format(format))
    }

    /// Reads events with these options.
    pub fn with_options(reader: R, options: DecodeOptions) -> AsyncReader<R> {
        AsyncReader::from_decoder(reader, Decoder::new(options))
    }
}

impl<R: AsyncRead> AsyncReader<BufReader<R>> {
    /// Reads events from an unbuffered [`AsyncRead`] (buffered here).
    pub fn from_async_read(reader: R, options: DecodeOptions) -> AsyncReader<BufReader<R>> {
        AsyncReader::with_options(BufReader::with_capacity(1 << 16, reader), options)
    }
}

impl<R: AsyncBufRead> AsyncReader<R, SseDecoder> {
    /// Reads SSE frames (with their `id`, `event` and `retry` fields).
    pub fn sse_frames(reader: R, options: DecodeOptions) -> AsyncReader<R, SseDecoder> {
        AsyncReader::from_decoder(reader, SseDecoder::new(&options))
    }
}

impl<R: AsyncBufRead, D: PushDecoder> AsyncReader<R, D> {
    /// Reads with any push decoder.
    pub fn from_decoder(reader: R, decoder: D) -> AsyncReader<R, D> {
        AsyncReader {
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
}

impl<R: AsyncBufRead, D: PushDecoder> Stream for AsyncReader<R, D> {
    type Item = Result<D::Item, DecodeError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        if *this.failed {
            return Poll::Ready(None);
        }
        loop {
            if let Some(item) = this.decoder.pull() {
                return Poll::Ready(Some(item));
            }
            if *this.done {
                return Poll::Ready(None);
            }
            let n = match ready!(this.reader.as_mut().poll_fill_buf(cx)) {
                Ok([]) => {
                    this.decoder.finish();
                    *this.done = true;
                    continue;
                }
                Ok(bytes) => {
                    this.decoder.push(bytes);
                    bytes.len()
                }
                Err(source) => {
                    *this.failed = true;
                    let at = this.decoder.position();
                    return Poll::Ready(Some(Err(DecodeError::Io { at, source })));
                }
            };
            this.reader.as_mut().consume(n);
        }
    }
}

pin_project! {
    /// A stream of events (or SSE frames) decoded from a stream of byte
    /// chunks, such as reqwest's `Response::bytes_stream()`.
    #[derive(Debug)]
    pub struct ByteStreamDecoder<S, D = Decoder> {
        #[pin]
        stream: S,
        decoder: D,
        done: bool,
        failed: bool,
    }
}

impl<S> ByteStreamDecoder<S> {
    /// Decodes events, detecting the format from the first bytes.
    pub fn new(stream: S) -> ByteStreamDecoder<S> {
        ByteStreamDecoder::with_options(stream, DecodeOptions::default())
    }

    /// Decodes events with these options.
    pub fn with_options(stream: S, options: DecodeOptions) -> ByteStreamDecoder<S> {
        ByteStreamDecoder::from_decoder(stream, Decoder::new(options))
    }
}

impl<S> ByteStreamDecoder<S, SseDecoder> {
    /// Decodes SSE frames (with their `id`, `event` and `retry` fields), for
    /// a consumer that needs more than the events.
    pub fn sse_frames(stream: S, options: DecodeOptions) -> ByteStreamDecoder<S, SseDecoder> {
        ByteStreamDecoder::from_decoder(stream, SseDecoder::new(&options))
    }
}

impl<S, D> ByteStreamDecoder<S, D> {
    /// Decodes with any push decoder.
    pub fn from_decoder(stream: S, decoder: D) -> ByteStreamDecoder<S, D> {
        ByteStreamDecoder {
            stream,
            decoder,
            done: false,
            failed: false,
        }
    }

    /// The decoder (for its position, or SSE's last event id).
    pub fn decoder(&self) -> &D {
        &self.decoder
    }
}

impl<S, B, E, D> Stream for ByteStreamDecoder<S, D>
where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
    D: PushDecoder,
{
    type Item = Result<D::Item, DecodeError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        if *this.failed {
            return Poll::Ready(None);
        }
        loop {
            if let Some(item) = this.decoder.pull() {
                return Poll::Ready(Some(item));
            }
            if *this.done {
                return Poll::Ready(None);
            }
            match ready!(this.stream.as_mut().poll_next(cx)) {
                None => {
                    this.decoder.finish();
                    *this.done = true;
                }
                Some(Ok(chunk)) => this.decoder.push(chunk.as_ref()),
                Some(Err(err)) => {
                    *this.failed = true;
                    let at = this.decoder.position();
                    return Poll::Ready(Some(Err(DecodeError::Upstream {
                        at,
                        source: err.into(),
                    })));
                }
            }
        }
    }
}
