//! Helpers shared by the integration tests: encode events in a format and
//! decode them back through every decoding path.

#![allow(dead_code)]

use std::io::BufReader;

use agui_codec::{
    ByteStreamDecoder, DecodeError, DecodeOptions, Decoder, Format, PushDecoder, Reader, Writer,
};
use agui_protocol::Event;
use futures::StreamExt;

/// Encodes `events` in `format` (SSE frames numbered when `ids`).
pub fn encode(events: &[Event], format: Format, ids: bool) -> Vec<u8> {
    let mut w = Writer::new(Vec::new(), format);
    for (i, e) in events.iter().enumerate() {
        if ids {
            w.write_event_with_id(e, i as u64).unwrap();
        } else {
            w.write_event(e).unwrap();
        }
    }
    w.finish().unwrap()
}

pub type Outcome = Vec<Result<String, String>>;

fn texts<I: IntoIterator<Item = Result<Event, DecodeError>>>(items: I) -> Outcome {
    items
        .into_iter()
        .map(|r| r.map(|e| e.json().to_owned()).map_err(|e| e.to_string()))
        .collect()
}

/// Splits `bytes` at the given cut points (clamped, sorted).
pub fn chunks<'a>(bytes: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut cuts: Vec<usize> = cuts.iter().map(|&c| c.min(bytes.len())).collect();
    cuts.sort_unstable();
    let mut out = Vec::new();
    let mut last = 0;
    for c in cuts.into_iter().chain(std::iter::once(bytes.len())) {
        out.push(&bytes[last..c]);
        last = c;
    }
    out
}

/// Decodes `bytes` through every path (auto-detected and with the format
/// given; blocking with a tiny buffer; sans-IO pushes at `cuts`; async over
/// a tokio reader with a tiny buffer and over a stream of chunks), asserts
/// that all agree, and returns the outcome.
pub fn decode_every_way(bytes: &[u8], format: Format, cuts: &[usize], buf_cap: usize) -> Outcome {
    let whole = texts(Reader::new(bytes));
    let given = texts(Reader::with_format(bytes, format));
    assert_eq!(given, whole, "format given vs detected");
    let small = texts(Reader::new(BufReader::with_capacity(buf_cap, bytes)));
    assert_eq!(small, whole, "blocking, buffer of {buf_cap} bytes");
    let mut d = Decoder::new(DecodeOptions::format(format));
    let mut pushed = Vec::new();
    for chunk in chunks(bytes, cuts) {
        d.push(chunk);
        while let Some(item) = d.pull() {
            pushed.push(item);
        }
    }
    d.finish();
    while let Some(item) = d.pull() {
        pushed.push(item);
    }
    assert_eq!(texts(pushed), whole, "sans-IO pushes cut at {cuts:?}");
    let async_read = futures::executor::block_on(
        agui_codec::AsyncReader::new(tokio::io::BufReader::with_capacity(buf_cap, bytes))
            .collect::<Vec<_>>(),
    );
    assert_eq!(
        texts(async_read),
        whole,
        "async reader, buffer of {buf_cap} bytes"
    );
    let owned: Vec<Result<bytes::Bytes, std::io::Error>> = chunks(bytes, cuts)
        .into_iter()
        .map(|c| Ok(bytes::Bytes::copy_from_slice(c)))
        .collect();
    let streamed = futures::executor::block_on(
        ByteStreamDecoder::new(futures::stream::iter(owned)).collect::<Vec<_>>(),
    );
    assert_eq!(texts(streamed), whole, "async byte stream cut at {cuts:?}");
    whole
}
