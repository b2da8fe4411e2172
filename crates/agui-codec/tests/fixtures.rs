//! Data-driven SSE cases: every `fixtures/sse/<case>.sse` decodes (whole and
//! split at every byte) to the events in `<case>.ndjson`, as exact text.

mod common;

use std::path::PathBuf;

use agui_codec::{Format, PushDecoder, SseEventDecoder};

fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/sse")
}

#[test]
fn sse_fixtures_decode_to_their_events() {
    let mut n_cases = 0;
    let mut entries: Vec<_> = std::fs::read_dir(fixtures_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "sse"))
        .collect();
    entries.sort();
    for path in entries {
        let input = std::fs::read(&path).unwrap();
        let expected_text = std::fs::read_to_string(path.with_extension("ndjson")).unwrap();
        let expected: common::Outcome = expected_text.lines().map(|l| Ok(l.to_owned())).collect();
        let got = common::decode_every_way(&input, Format::Sse, &[7, 19, 40], 3);
        assert_eq!(got, expected, "{}", path.display());
        for at in 0..=input.len() {
            let mut d = SseEventDecoder::new(&Default::default());
            let mut out = Vec::new();
            for part in [&input[..at], &input[at..]] {
                d.push(part);
                while let Some(e) = d.pull() {
                    out.push(Ok(e.unwrap().json().to_owned()));
                }
            }
            d.finish();
            while let Some(e) = d.pull() {
                out.push(Ok(e.unwrap().json().to_owned()));
            }
            assert_eq!(out, expected, "{} split at {at}", path.display());
        }
        n_cases += 1;
    }
    assert!(n_cases >= 3, "found {n_cases} SSE fixtures");
}
