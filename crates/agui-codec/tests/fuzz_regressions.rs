//! Replays every input kept in `fixtures/fuzz-regressions/<target>/` through
//! the check its fuzz target runs.

use std::path::PathBuf;

use agui_codec::{Format, JsonArrayDecoder, NdjsonDecoder, SseEventDecoder};

#[path = "../../../fuzz/fuzz_targets/common.rs"]
mod fuzz_check;

#[path = "../../../fuzz/fuzz_targets/decode_ndjson_chunks_check.rs"]
mod chunks_check;

#[path = "../../../fuzz/fuzz_targets/decode_split_check.rs"]
mod split_check;

fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/fuzz-regressions")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no inputs in {}", dir.display());
    files
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect()
}

#[test]
fn json_regressions() {
    for (path, data) in inputs("decode_json") {
        eprintln!("replaying {}", path.display());
        fuzz_check::check(JsonArrayDecoder::new, Format::Json, &data);
    }
}

#[test]
fn ndjson_regressions() {
    for (path, data) in inputs("decode_ndjson") {
        eprintln!("replaying {}", path.display());
        fuzz_check::check(NdjsonDecoder::new, Format::Ndjson, &data);
    }
}

#[test]
fn sse_regressions() {
    for (path, data) in inputs("decode_sse") {
        eprintln!("replaying {}", path.display());
        fuzz_check::check(SseEventDecoder::new, Format::Sse, &data);
    }
}

#[test]
fn ndjson_chunks_regressions() {
    // The push decoder's inputs too: the chunk decoder must agree on them.
    for target in ["decode_ndjson_chunks", "decode_ndjson"] {
        for (path, data) in inputs(target) {
            eprintln!("replaying {}", path.display());
            chunks_check::check(&data);
        }
    }
}

#[test]
fn sse_split_regressions() {
    // The SSE push decoder's inputs too: the split reader must agree on them.
    for target in ["decode_sse_split", "decode_sse"] {
        for (path, data) in inputs(target) {
            eprintln!("replaying {}", path.display());
            split_check::check(&data, agui_codec::Format::Sse);
        }
    }
}

#[test]
fn json_split_regressions() {
    // The JSON array push decoder's inputs too.
    for target in ["decode_json_split", "decode_json"] {
        for (path, data) in inputs(target) {
            eprintln!("replaying {}", path.display());
            split_check::check(&data, agui_codec::Format::Json);
        }
    }
}
