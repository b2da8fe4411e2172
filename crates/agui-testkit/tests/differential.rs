//! Differential tests against the official TypeScript SDK (`oracle/`):
//! `verify_events` versus the client pipeline (enforceEvents ->
//! transformChunks -> verifyEvents), and `expand_chunks` versus
//! `transformChunks`. Each test batches all its cases into one Node run.
//!
//! The acceptance bar is 100% agreement: same verdict, same first-error
//! index, same expanded events (equal JSON values) and same error index.

use agui_protocol::Event;
use agui_protocol::chunks::ChunkExpander;
use agui_protocol::verify::verify_events;
use agui_testkit::r#gen::{self as g, Profile};
use agui_testkit::oracle;
use serde_json::Value;

fn to_case(events: &[Event]) -> Value {
    Value::Array(events.iter().map(Event::to_value).collect())
}

/// Streams per Node run: the oracle parses its whole input and builds its
/// whole answer, so one run over every case held gigabytes.
const ORACLE_BATCH: usize = 100;

/// Hands each stream with the oracle's answer to `check`, asking the oracle
/// `ORACLE_BATCH` streams at a time and keeping no answer past its check.
fn with_answers<'s>(
    script: &str,
    streams: &'s [(String, Vec<Event>)],
    mut check: impl FnMut(&'s (String, Vec<Event>), Value),
) {
    for batch in streams.chunks(ORACLE_BATCH) {
        let cases = Value::Array(batch.iter().map(|(_, s)| to_case(s)).collect());
        match oracle::run(script, &cases) {
            Value::Array(answers) => {
                assert_eq!(
                    answers.len(),
                    batch.len(),
                    "{script} answered a batch short"
                );
                for (stream, answer) in batch.iter().zip(answers) {
                    check(stream, answer);
                }
            }
            other => panic!("{script} returned no array: {other}"),
        }
    }
}

/// Runs the verify oracle on `streams` and compares with `verify_events`.
/// Returns (agreeing, valid according to the oracle, per-stage counts).
fn compare_verify(label: &str, streams: &[(String, Vec<Event>)]) -> (usize, usize, Vec<String>) {
    let mut mismatches = Vec::new();
    let mut valid = 0;
    let mut stages = std::collections::BTreeMap::<String, usize>::new();
    with_answers("verify.mjs", streams, |(name, events), r| {
        let ours = verify_events(events);
        let theirs_ok = r["ok"] == true;
        if theirs_ok {
            valid += 1;
        } else {
            *stages
                .entry(r["stage"].as_str().unwrap_or("?").to_owned())
                .or_default() += 1;
        }
        let agree = match (&ours, theirs_ok) {
            (Ok(_), true) => true,
            (Err((i, _)), false) => r["index"].as_u64() == Some(*i as u64),
            _ => false,
        };
        if !agree {
            let ours = match &ours {
                Ok(n) => format!("ok ({n})"),
                Err((i, e)) => format!("error at #{i} ({}): {e}", events[*i].type_name()),
            };
            mismatches.push(format!("{label} {name}: ours {ours}; official {r}"));
        }
    });
    let stages = stages
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    assert!(
        mismatches.is_empty(),
        "{} of {} {label} streams disagree:\n{}",
        mismatches.len(),
        streams.len(),
        mismatches[..mismatches.len().min(12)].join("\n")
    );
    (streams.len(), valid, stages)
}

#[test]
fn verify_agrees_on_valid_streams() {
    let mut streams = Vec::new();
    let mut seed = 0u64;
    while streams.len() < 1_190 {
        for &p in Profile::ALL {
            streams.push((format!("{}#{seed}", p.name()), g::stream(p, seed)));
        }
        seed += 1;
    }
    let (n, valid, _) = compare_verify("valid", &streams);
    eprintln!("verify/valid: {n} streams, all agree; official valid = {valid}");
    assert_eq!(
        valid, n,
        "the generator produced streams the official pipeline rejects"
    );
}

#[test]
fn verify_agrees_on_invalid_streams() {
    let streams: Vec<(String, Vec<Event>)> = (0..1_200u64)
        .map(|s| {
            let (events, m) = g::invalid_stream_with(s);
            (format!("invalid#{s} ({m:?})"), events)
        })
        .collect();
    let (n, valid, stages) = compare_verify("invalid", &streams);
    eprintln!(
        "verify/invalid: {n} streams, all agree; official rejects {} ({}), accepts {valid}",
        n - valid,
        stages.join(", ")
    );
    assert!(
        n - valid >= 1_000,
        "only {} mutated streams are invalid",
        n - valid
    );
}

#[test]
fn verify_agrees_on_chunk_soups() {
    let streams: Vec<(String, Vec<Event>)> = (0..1_500u64)
        .map(|s| (format!("soup#{s}"), g::chunk_soup(s)))
        .collect();
    let (n, valid, stages) = compare_verify("soup", &streams);
    eprintln!(
        "verify/soup: {n} streams, all agree; official accepts {valid}, rejects {} ({})",
        n - valid,
        stages.join(", ")
    );
}

/// Our expansion: events, the input index each came from, and the error.
fn expand(events: &[Event]) -> (Vec<Value>, Vec<usize>, Option<(usize, String)>) {
    let mut x = ChunkExpander::new();
    let mut out = Vec::new();
    let mut from = Vec::new();
    for (i, e) in events.iter().enumerate() {
        match x.push(e) {
            Ok(evs) => {
                for ev in evs {
                    out.push(ev.to_value());
                    from.push(i);
                }
            }
            Err(err) => return (out, from, Some((i, err.to_string()))),
        }
    }
    (out, from, None)
}

#[test]
fn chunk_expansion_agrees_with_transform_chunks() {
    let mut streams: Vec<(String, Vec<Event>)> = Vec::new();
    let mut seed = 0u64;
    let profiles = [
        Profile::Chunks,
        Profile::Metadata,
        Profile::Unknown,
        Profile::Mixed,
    ];
    while streams.len() < 1_000 {
        for p in profiles {
            let s = g::stream(p, seed);
            if s.iter().any(|e| e.type_name().ends_with("_CHUNK")) {
                streams.push((format!("{}#{seed}", p.name()), s));
            }
        }
        seed += 1;
    }
    for s in 0..1_500u64 {
        streams.push((format!("soup#{s}"), g::chunk_soup(s)));
    }
    for s in 0..400u64 {
        let (events, m) = g::invalid_stream_with(s);
        streams.push((format!("invalid#{s} ({m:?})"), events));
    }
    let mut mismatches = Vec::new();
    let (mut errors, mut same_text, mut synthesized) = (0, 0usize, 0usize);
    with_answers("chunks.mjs", &streams, |(name, events), r| {
        let (ours, from, err) = expand(events);
        let theirs: Vec<Value> = r["events"].as_array().cloned().unwrap_or_default();
        let theirs_from: Vec<usize> = r["from"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_u64())
                    .map(|x| x as usize)
                    .collect()
            })
            .unwrap_or_default();
        let their_err = (r["ok"] != true).then(|| r["index"].as_u64().unwrap_or(u64::MAX) as usize);
        if their_err.is_some() {
            errors += 1;
        }
        let mut problem = None;
        if err.as_ref().map(|e| e.0) != their_err {
            problem = Some(format!(
                "error: ours {err:?}, official {:?} {}",
                their_err, r["message"]
            ));
        } else if ours.len() != theirs.len() || from != theirs_from {
            problem = Some(format!(
                "{} events from {from:?}, official {} from {theirs_from:?}",
                ours.len(),
                theirs.len()
            ));
        } else if let Some(k) = (0..ours.len()).find(|&k| ours[k] != theirs[k]) {
            problem = Some(format!(
                "event {k}: ours {}, official {}",
                ours[k], theirs[k]
            ));
        }
        for (a, b) in ours.iter().zip(&theirs) {
            if serde_json::to_string(a).ok() == serde_json::to_string(b).ok() {
                same_text += 1;
            }
        }
        synthesized += ours.len();
        if let Some(p) = problem {
            mismatches.push(format!("{name}: {p}"));
        }
    });
    eprintln!(
        "chunks: {} streams, {} with an official error, {synthesized} output events, {same_text} byte-identical (key order included)",
        streams.len(),
        errors
    );
    assert!(
        mismatches.is_empty(),
        "{} of {} streams disagree:\n{}",
        mismatches.len(),
        streams.len(),
        mismatches[..mismatches.len().min(12)].join("\n")
    );
    assert!(errors >= 100, "only {errors} error cases were exercised");
}
