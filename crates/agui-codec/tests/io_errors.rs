//! Failures of the underlying source surface as positioned errors and end
//! the stream; interrupted reads are retried.

use std::io::{self, BufReader, Read};

use agui_codec::{ByteStreamDecoder, DecodeError, Position, Reader};
use futures::StreamExt;

/// Yields `data`, then fails with `kind` (forever).
struct Failing {
    data: &'static [u8],
    kind: io::ErrorKind,
    interrupted_first: bool,
}

impl Read for Failing {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.interrupted_first {
            self.interrupted_first = false;
            return Err(io::Error::new(io::ErrorKind::Interrupted, "signal"));
        }
        if self.data.is_empty() {
            return Err(io::Error::new(self.kind, "disk on fire"));
        }
        let n = buf.len().min(self.data.len()).min(7);
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

#[test]
fn a_read_error_is_reported_once_with_its_position() {
    let source = Failing {
        data: b"{\"type\":\"A\"}\n{\"type\":\"B\"}\n{\"ty",
        kind: io::ErrorKind::ConnectionReset,
        interrupted_first: true,
    };
    let mut reader = Reader::new(BufReader::with_capacity(4, source));
    assert_eq!(reader.next().unwrap().unwrap().json(), r#"{"type":"A"}"#);
    assert_eq!(reader.next().unwrap().unwrap().json(), r#"{"type":"B"}"#);
    let err = reader.next().unwrap().unwrap_err();
    assert!(matches!(err, DecodeError::Io { .. }));
    assert_eq!(
        err.position(),
        Some(Position {
            index: 2,
            line: 3,
            byte: 26
        })
    );
    assert_eq!(
        err.to_string(),
        "event 2 (line 3, byte 26): read error: disk on fire"
    );
    assert!(!err.is_recoverable());
    assert!(reader.next().is_none());
}

#[test]
fn an_upstream_stream_error_ends_the_stream() {
    let chunks: Vec<Result<bytes::Bytes, io::Error>> = vec![
        Ok(bytes::Bytes::from_static(
            b"id: 1\ndata: {\"type\":\"A\"}\n\nda",
        )),
        Err(io::Error::other("connection closed")),
        Ok(bytes::Bytes::from_static(b"ta: {\"type\":\"B\"}\n\n")),
    ];
    let items = futures::executor::block_on(
        ByteStreamDecoder::sse_frames(futures::stream::iter(chunks), Default::default())
            .collect::<Vec<_>>(),
    );
    assert_eq!(items.len(), 2);
    let frame = items[0].as_ref().unwrap();
    assert_eq!(
        (frame.id.as_deref(), frame.data.as_str()),
        (Some("1"), r#"{"type":"A"}"#)
    );
    let err = items[1].as_ref().unwrap_err();
    assert_eq!(
        err.to_string(),
        "event 1 (line 4, byte 26): upstream stream error: connection closed"
    );
}

#[test]
fn an_async_read_error_ends_the_stream() {
    struct Broken;
    impl tokio::io::AsyncRead for Broken {
        fn poll_read(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            _: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            std::task::Poll::Ready(Err(io::Error::other("boom")))
        }
    }
    let items = futures::executor::block_on(
        agui_codec::AsyncReader::from_async_read(Broken, Default::default()).collect::<Vec<_>>(),
    );
    assert_eq!(items.len(), 1);
    assert!(matches!(items[0], Err(DecodeError::Io { .. })));
}
