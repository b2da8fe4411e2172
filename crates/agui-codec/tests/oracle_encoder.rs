//! Differential test: SSE written by the official `@ag-ui/encoder` 1.0.0
//! (`EventEncoder.encodeSSE`, run by `oracle/encoder.mjs`) decodes to exactly
//! the JSON text the encoder put in each frame.

mod common;

use agui_codec::{DecodeOptions, Format, PushDecoder, SseDecoder};
use agui_protocol::Event;
use agui_testkit::r#gen::{self as generate, Profile};
use serde_json::Value;

/// Events the generators make for every profile, plus hand-picked oddities:
/// optional nulls the encoder omits, unknown types and fields, escapes,
/// non-BMP characters, numbers JavaScript rewrites.
fn cases() -> Vec<Vec<Event>> {
    let mut cases: Vec<Vec<Event>> = Profile::ALL
        .iter()
        .flat_map(|&p| (0..3).map(move |seed| generate::stream(p, seed)))
        .collect();
    let odd = [
        r#"{"type":"TEXT_MESSAGE_START","messageId":"m1","role":null,"extra":null}"#,
        r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"line\nbreak \u2028 \ud83d\ude00 \"q\" </script>"}"#,
        r#"{"type":"RUN_FINISHED","threadId":"t","runId":"r","result":null,"outcome":null}"#,
        r#"{"type":"STATE_SNAPSHOT","snapshot":{"n":1.10,"e":1E3,"big":12345678901234567890123,"z":null}}"#,
        r#"{"type":"SOMETHING_NEW","payload":{"deep":[{"x":null}]},"rawEvent":null}"#,
        r#"{"type":"CUSTOM","name":"data: not a frame\n\n","value":"\r\n"}"#,
    ];
    cases.push(odd.iter().map(|t| Event::from_json(t).unwrap()).collect());
    cases
}

#[test]
fn official_sse_frames_decode_to_the_encoded_events() {
    let cases = cases();
    let input = Value::Array(
        cases
            .iter()
            .map(|events| Value::Array(events.iter().map(Event::to_value).collect()))
            .collect(),
    );
    let output = agui_testkit::oracle::run("encoder.mjs", &input);
    let results = output.as_array().expect("an array of results");
    assert_eq!(results.len(), cases.len());
    let mut n_events = 0;
    for (case, result) in cases.iter().zip(results) {
        let frames: Vec<&str> = result["frames"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap())
            .collect();
        let payloads: Vec<String> = result["payloads"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p.as_str().unwrap().to_owned())
            .collect();
        assert_eq!(frames.len(), case.len());
        let stream = frames.concat();
        let bytes = stream.as_bytes();
        // Cut inside frames, at frame ends, and between the two LFs.
        let mut cuts = vec![1, bytes.len() / 3, bytes.len() / 2 + 1];
        let mut end = 0;
        for f in &frames {
            end += f.len();
            cuts.push(end - 1);
        }
        let got = common::decode_every_way(bytes, Format::Sse, &cuts, 5);
        let expected: common::Outcome = payloads.iter().cloned().map(Ok).collect();
        assert_eq!(got, expected);

        // The frame layer sees one data line per frame, no id/event/retry.
        let mut frames_dec = SseDecoder::new(&DecodeOptions::default());
        frames_dec.push(bytes);
        frames_dec.finish();
        let mut k = 0;
        while let Some(frame) = frames_dec.pull() {
            let frame = frame.unwrap();
            assert_eq!((frame.id, frame.event, frame.retry), (None, None, None));
            assert_eq!(frame.data, payloads[k]);
            k += 1;
        }
        assert_eq!(k, payloads.len());
        n_events += k;
    }
    assert!(n_events > 500, "the cases hold {n_events} events");
}
