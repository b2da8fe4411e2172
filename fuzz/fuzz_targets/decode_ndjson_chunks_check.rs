//! The property of the `decode_ndjson_chunks` target: decoding NDJSON held
//! whole in memory into chunks of events that are slices of the buffer
//! (`agui_codec::decode_ndjson_buffer`, the decoder behind
//! `ThreadedReader`'s split files) gives exactly what the push decoder
//! gives: the same events, the same errors at the same positions, in the
//! same order, ending at the same place. Every borrowed event also equals
//! its owned copy, its recorded member table (if any) reads what the walk
//! over its text reads (each plain bit set exactly when the value is a
//! string without escapes), and no chunk is empty.
//!
//! The first input byte switches a 64-byte maximum event size on and off;
//! the rest is the stream.

use agui_codec::{DecodeOptions, NdjsonDecoder, PushDecoder, decode_ndjson_buffer};

pub fn check(data: &[u8]) {
    let Some((&pick, input)) = data.split_first() else {
        return;
    };
    let max = if pick & 1 == 1 { 64 } else { 1 << 20 };
    let options = DecodeOptions::default().with_max_event_size(max);
    let mut reference = NdjsonDecoder::new(&options);
    reference.push(input);
    reference.finish();
    let expected: Vec<Result<String, String>> = std::iter::from_fn(|| reference.pull())
        .map(|r| r.map(|e| e.json().to_owned()).map_err(|e| e.to_string()))
        .collect();
    let mut got = Vec::new();
    for item in decode_ndjson_buffer(input.to_vec(), &options) {
        match item {
            Ok(chunk) => {
                assert!(!chunk.is_empty(), "an empty chunk");
                for event in chunk.iter() {
                    let owned = event.to_event();
                    assert_eq!(owned.json(), event.json());
                    assert_eq!(owned.event_type(), event.event_type());
                    // The member table the scan recorded (if any) reads
                    // what the walk over the text reads.
                    let mut read = Vec::new();
                    let read_all = event.for_each_member(|k, v| read.push((k, v)));
                    let mut walked = Vec::new();
                    let walked_all =
                        agui_protocol::members_of_valid(event.json(), |k, v| walked.push((k, v)));
                    assert_eq!((read_all, read), (walked_all, walked), "{}", event.json());
                    for m in event.members().unwrap_or_default() {
                        let (_, value) = m.of(event.json()).unwrap();
                        let plain = value.starts_with('"') && !value.contains('\\');
                        assert_eq!(m.is_plain(), plain, "plain bit of {value:?}");
                    }
                    got.push(Ok(event.json().to_owned()));
                }
            }
            Err(e) => got.push(Err(e.to_string())),
        }
    }
    assert_eq!(got, expected);
}
