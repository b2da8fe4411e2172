//! The property of the `decode_sse_split` and `decode_json_split` targets:
//! a file of SSE (or a JSON array) read by `ThreadedReader`, cut into chunks
//! at frame ends (where elements seem to start) and decoded on two threads
//! (and on one, with a helping caller), gives exactly what the one-thread
//! `Reader` gives on the same file: the same events, the same errors at the
//! same positions, in the same order, ending at the same place, handed
//! over as owned events or as chunks.
//!
//! The first input byte picks the nominal chunk size (1 to 64 bytes, so
//! nearly every frame lands on a boundary) and switches a 64-byte maximum
//! event size on and off; the rest is the file.

use std::io::Write;

use agui_codec::{DecodeOptions, Format, Reader, Split, ThreadedReader};

fn outcome(
    items: impl Iterator<Item = Result<agui_protocol::Event, agui_codec::DecodeError>>,
) -> Vec<Result<String, String>> {
    items
        .map(|item| item.map(|e| e.json().to_owned()).map_err(|e| e.to_string()))
        .collect()
}

pub fn check(data: &[u8], format: Format) {
    let Some((&pick, input)) = data.split_first() else {
        return;
    };
    let max = if pick & 0x80 != 0 { 64 } else { 1 << 20 };
    let chunk = u64::from(pick & 0x3f) + 1;
    let options = DecodeOptions::format(format).with_max_event_size(max);
    let path = std::env::temp_dir().join(format!(
        "agui-fuzz-{}-split-{}-{:?}",
        format.name(),
        std::process::id(),
        std::thread::current().id()
    ));
    {
        let mut f = std::fs::File::create(&path).expect("a temporary file");
        f.write_all(input).expect("write the input");
    }
    let expected = outcome(Reader::with_options(input, options));
    for caller_helps in [false, true] {
        let split = Split {
            threshold: 0,
            chunk,
            threads: if caller_helps { 1 } else { 2 },
            caller_helps,
        };
        let got = outcome(ThreadedReader::open_with(&path, options, split).expect("open"));
        assert_eq!(got, expected, "owned events, chunk {chunk}");
        let mut reader = ThreadedReader::open_chunked(&path, options, split).expect("open");
        let mut got = Vec::new();
        while let Some(item) = reader.next_chunk() {
            match item {
                Ok(c) => {
                    assert!(!c.is_empty(), "an empty chunk");
                    got.extend(c.iter().map(|e| Ok(e.json().to_owned())));
                }
                Err(e) => got.push(Err(e.to_string())),
            }
        }
        assert_eq!(got, expected, "chunks, chunk {chunk}");
    }
    let _ = std::fs::remove_file(&path);
}
