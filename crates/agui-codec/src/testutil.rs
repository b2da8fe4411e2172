//! Helpers for the unit tests.

use crate::{DecodeError, PushDecoder};

/// Pushes `input` in the given chunk sizes (the rest in one piece), then
/// collects everything (items and errors as their messages).
pub(crate) fn run_chunked<D: PushDecoder>(
    mut decoder: D,
    input: &[u8],
    sizes: &[usize],
) -> Vec<Result<D::Item, String>> {
    let mut out = Vec::new();
    let mut rest = input;
    let drain = |d: &mut D, out: &mut Vec<Result<D::Item, String>>| {
        while let Some(item) = d.pull() {
            out.push(item.map_err(|e: DecodeError| e.to_string()));
        }
    };
    for &size in sizes {
        let n = size.min(rest.len());
        decoder.push(&rest[..n]);
        rest = &rest[n..];
        drain(&mut decoder, &mut out);
    }
    decoder.push(rest);
    drain(&mut decoder, &mut out);
    decoder.finish();
    drain(&mut decoder, &mut out);
    out
}

/// Checks that every two-way split and the byte-at-a-time split decode as the
/// whole input does; returns the whole-input result.
pub(crate) fn check_splits<D, F>(make: F, input: &[u8]) -> Vec<Result<D::Item, String>>
where
    D: PushDecoder,
    D::Item: PartialEq + std::fmt::Debug,
    F: Fn() -> D,
{
    let whole = run_chunked(make(), input, &[]);
    for i in 0..=input.len() {
        let split = run_chunked(make(), input, &[i]);
        assert_eq!(
            split,
            whole,
            "split at byte {i} of {:?}",
            String::from_utf8_lossy(input)
        );
    }
    let ones = vec![1; input.len()];
    assert_eq!(run_chunked(make(), input, &ones), whole, "byte at a time");
    whole
}

/// An event decoder whose items are the events' JSON text (comparable).
pub(crate) struct Texts<D>(pub(crate) D);

impl<D: PushDecoder<Item = agui_protocol::Event>> PushDecoder for Texts<D> {
    type Item = String;
    fn push(&mut self, bytes: &[u8]) {
        self.0.push(bytes);
    }
    fn finish(&mut self) {
        self.0.finish();
    }
    fn pull(&mut self) -> Option<Result<String, DecodeError>> {
        self.0.pull().map(|r| r.map(|e| e.json().to_owned()))
    }
    fn position(&self) -> crate::Position {
        self.0.position()
    }
}
