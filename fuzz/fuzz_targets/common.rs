//! The property every decoder target checks.
//!
//! The first input byte picks a split point; the rest is the stream. The
//! stream is decoded whole, split in two at that point, and byte by byte
//! (for short inputs): all three must agree, item for item (errors compared
//! by message). Every decoded event is then re-encoded in the same format and
//! decoded again, and must come back as the same text.

use agui_codec::{DecodeOptions, Format, PushDecoder, Writer};
use agui_protocol::Event;

fn run<D: PushDecoder<Item = Event>>(
    mut d: D,
    input: &[u8],
    cuts: &[usize],
) -> Vec<Result<String, String>> {
    let mut out = Vec::new();
    let mut last = 0;
    for &cut in cuts.iter().chain(std::iter::once(&input.len())) {
        let cut = cut.clamp(last, input.len());
        d.push(&input[last..cut]);
        last = cut;
        while let Some(item) = d.pull() {
            out.push(item.map(|e| e.json().to_owned()).map_err(|e| e.to_string()));
        }
    }
    d.finish();
    while let Some(item) = d.pull() {
        out.push(item.map(|e| e.json().to_owned()).map_err(|e| e.to_string()));
    }
    out
}

pub fn check<D, F>(make: F, format: Format, data: &[u8])
where
    D: PushDecoder<Item = Event>,
    F: Fn(&DecodeOptions) -> D,
{
    let Some((&pick, input)) = data.split_first() else {
        return;
    };
    // A small maximum sometimes, so the size checks are exercised too.
    let max = if pick & 1 == 1 { 64 } else { 1 << 20 };
    let opts = DecodeOptions::format(format).with_max_event_size(max);
    let whole = run(make(&opts), input, &[]);
    let split_at = (pick as usize * input.len()) / 255;
    assert_eq!(
        run(make(&opts), input, &[split_at]),
        whole,
        "split at {split_at}"
    );
    if input.len() <= 256 {
        let every: Vec<usize> = (1..input.len()).collect();
        assert_eq!(run(make(&opts), input, &every), whole, "byte by byte");
    }
    let events: Vec<Event> = whole
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .map(|t| Event::from_json(t).expect("decoded text is an event"))
        .collect();
    let mut w = Writer::new(Vec::new(), format);
    for e in &events {
        w.write_event(e).expect("writing to memory");
    }
    let encoded = w.finish().expect("writing to memory");
    let again = run(make(&DecodeOptions::format(format)), &encoded, &[]);
    let texts: Vec<Result<String, String>> =
        events.iter().map(|e| Ok(e.json().to_owned())).collect();
    assert_eq!(again, texts, "re-encoded stream decodes to the same events");
}
