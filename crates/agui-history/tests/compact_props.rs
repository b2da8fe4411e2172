//! Property tests of every compaction guarantee, with the real reducer,
//! verifier and lineage:
//!
//! - `deltas` and `snapshot` (also with `--runs N`, checkpoints for the last
//!   N runs only): `reduce(compact(x))` equals `reduce(x)` at the end of
//!   every run (each terminal event) and at the end of the input;
//! - `latest`: `reduce(compact(x))` equals the branch-aware history at the
//!   chosen run;
//! - `compact(compact(x)) == compact(x)` in every mode;
//! - `verify(x)` passing implies `verify(compact(x))` passing, in every mode;
//! - `deltas` output is never longer than its input, in events or bytes.
//!
//! Inputs are the seeded generator profiles, their invalid mutations, and
//! free-form sequences over a tiny id space (so that every overlap, replay,
//! orphan, observer and malformed field occurs), valid or not: the guarantees
//! hold for every input the reducer accepts.

use agui_history::compact::{
    DeltaCompactor, LatestOptions, Mode, SnapshotCompactor, compact, compact_deltas,
    compact_latest_from, compact_snapshot_last, count_runs,
};
use agui_history::lineage::Lineage;
use agui_history::reduce::{Conversation, Reducer};
use agui_protocol::verify::verify_events;
use agui_protocol::{Event, EventRef, Member};
use agui_testkit::{Profile, invalid_stream, stream};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use serde_json::{Value, json};

/// The conversation after each terminal event, then at the end; `None` when
/// the reducer refuses the stream.
fn checkpoints(events: &[Event], start: &Conversation) -> Option<Vec<Conversation>> {
    let mut reducer = Reducer::new(start.clone());
    let mut out = Vec::new();
    for event in events {
        reducer.apply(event).ok()?;
        if event.event_type().is_run_terminal() {
            out.push(reducer.conversation().clone());
        }
    }
    out.push(reducer.into_conversation());
    Some(out)
}

fn values(events: &[Event]) -> Vec<Value> {
    events.iter().map(Event::to_value).collect()
}

fn bytes(events: &[Event]) -> usize {
    events.iter().map(Event::len_bytes).sum()
}

/// The branch-aware history at `run_id` (linear when the lineage is faulty).
fn branch_history(events: &[Event], run_id: &str, start: &Conversation) -> Option<Conversation> {
    let history: Vec<Event> = match Lineage::new(events) {
        Ok(lineage) if lineage.index().get(run_id).is_some() => lineage
            .branch(run_id, None)
            .ok()?
            .events
            .into_iter()
            .map(|(_, e)| e.into_owned())
            .collect(),
        _ => {
            let first = events.iter().rposition(|e| {
                e.event_type() == &agui_protocol::EventType::RunStarted
                    && e.to_value().get("runId").and_then(Value::as_str) == Some(run_id)
            })?;
            let end = (first + 1..events.len())
                .find(|&i| events[i].event_type() == &agui_protocol::EventType::RunStarted)
                .unwrap_or(events.len());
            events[..end].to_vec()
        }
    };
    checkpoints(&history, start).and_then(|mut c| c.pop())
}

fn last_run_id(events: &[Event]) -> Option<String> {
    events
        .iter()
        .rev()
        .find(|e| e.event_type() == &agui_protocol::EventType::RunStarted)
        .and_then(|e| {
            e.to_value()
                .get("runId")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
}

/// Checks every guarantee of `mode` on `events`.
fn check(events: &[Event], mode: Mode) -> Result<(), TestCaseError> {
    let start = Conversation::default();
    let Some(original) = checkpoints(events, &start) else {
        // Outside the guarantees: the reducer refuses the input.
        return Ok(());
    };
    let once = compact(events.to_vec(), mode, &start, None)
        .map_err(|e| TestCaseError::fail(format!("{mode} failed: {e}")))?;
    let twice = compact(once.clone(), mode, &start, None)
        .map_err(|e| TestCaseError::fail(format!("{mode} again failed: {e}")))?;
    prop_assert_eq!(values(&twice), values(&once), "{} is not idempotent", mode);
    if verify_events(events).is_ok() {
        let verdict = verify_events(&once);
        prop_assert!(
            verdict.is_ok(),
            "{} broke verification: {:?}\n{:?}",
            mode,
            verdict,
            once
        );
    }
    let compacted = checkpoints(&once, &start);
    prop_assert!(
        compacted.is_some(),
        "the reducer refuses the {} output",
        mode
    );
    let compacted = compacted.unwrap_or_default();
    match mode {
        Mode::Deltas | Mode::Snapshot => {
            prop_assert_eq!(
                compacted.len(),
                original.len(),
                "{}: terminal events lost",
                mode
            );
            for (k, (a, b)) in compacted.iter().zip(&original).enumerate() {
                prop_assert_eq!(a, b, "{}: differs at checkpoint {}\n{:?}", mode, k, once);
            }
            if mode == Mode::Deltas {
                prop_assert!(once.len() <= events.len(), "more events");
                prop_assert!(bytes(&once) <= bytes(events), "more bytes");
            }
        }
        Mode::Latest => {
            // The streaming path (reads the log again instead of holding it)
            // gives the same output, for the last run and for a chosen one.
            for branch in [None, Some("r1")] {
                let mut streamed = Vec::new();
                let options = LatestOptions {
                    start: start.clone(),
                    branch: branch.map(str::to_owned),
                };
                let result = compact_latest_from(|| events.iter().cloned(), &options, &mut |e| {
                    streamed.push(e);
                    Ok(())
                });
                let held = compact(events.to_vec(), mode, &start, branch);
                match held {
                    Ok(held) => {
                        prop_assert!(result.is_ok(), "streaming latest failed: {:?}", result);
                        prop_assert_eq!(
                            values(&streamed),
                            values(&held),
                            "streaming latest differs"
                        );
                    }
                    Err(_) => prop_assert!(result.is_err(), "streaming latest did not fail"),
                }
            }
            let expected = match last_run_id(events) {
                Some(run) => branch_history(events, &run, &start),
                None => original.last().cloned(),
            };
            if let Some(expected) = expected {
                prop_assert_eq!(
                    compacted.last(),
                    Some(&expected),
                    "latest differs\n{:?}",
                    once
                );
            }
        }
    }
    Ok(())
}

/// Every guarantee of `snapshot` for `--runs last`: checkpoints for the last
/// `last` runs only, the earlier runs in `deltas` form.
fn check_last_runs(events: &[Event], last: u64) -> Result<(), TestCaseError> {
    let start = Conversation::default();
    let Some(original) = checkpoints(events, &start) else {
        return Ok(());
    };
    let once = compact_snapshot_last(events.to_vec(), &start, last)
        .map_err(|e| TestCaseError::fail(format!("snapshot --runs {last} failed: {e}")))?;
    let twice = compact_snapshot_last(once.clone(), &start, last)
        .map_err(|e| TestCaseError::fail(format!("snapshot --runs {last} again failed: {e}")))?;
    prop_assert_eq!(
        values(&twice),
        values(&once),
        "--runs {} is not idempotent",
        last
    );
    if verify_events(events).is_ok() {
        let verdict = verify_events(&once);
        prop_assert!(
            verdict.is_ok(),
            "--runs {} broke verification: {:?}",
            last,
            verdict
        );
    }
    let compacted = checkpoints(&once, &start);
    prop_assert!(
        compacted.is_some(),
        "the reducer refuses the --runs {} output",
        last
    );
    let compacted = compacted.unwrap_or_default();
    prop_assert_eq!(
        compacted.len(),
        original.len(),
        "--runs {}: terminal events lost",
        last
    );
    for (k, (a, b)) in compacted.iter().zip(&original).enumerate() {
        prop_assert_eq!(
            a,
            b,
            "--runs {}: differs at checkpoint {}\n{:?}",
            last,
            k,
            once
        );
    }
    // Restating every run is plain `snapshot`.
    let all = compact_snapshot_last(events.to_vec(), &start, u64::MAX)
        .map_err(|e| TestCaseError::fail(format!("{e}")))?;
    let plain = compact(events.to_vec(), Mode::Snapshot, &start, None)
        .map_err(|e| TestCaseError::fail(format!("{e}")))?;
    prop_assert_eq!(
        values(&all),
        values(&plain),
        "--runs with every run differs from snapshot"
    );
    Ok(())
}

/// `snapshot` (restating the last `last` runs) checking its checkpoints by
/// the incremental proof gives the same output as checking every one by a
/// full replay.
fn check_proof_matches_replay(events: &[Event], last: u64) -> Result<(), TestCaseError> {
    let start = Conversation::default();
    let total = count_runs(events);
    let run = |compactor: SnapshotCompactor| -> Option<Vec<Event>> {
        let mut compactor = compactor;
        let mut out = Vec::new();
        for event in events {
            compactor.push(event.clone()).ok()?;
            out.extend(compactor.drain());
        }
        compactor.finish().ok()?;
        out.extend(compactor.drain());
        Some(out)
    };
    let proven = run(SnapshotCompactor::last_runs(&start, total, last));
    let replayed = run(SnapshotCompactor::last_runs(&start, total, last).with_full_replay());
    let text = |out: Option<Vec<Event>>| {
        out.map(|events| {
            events
                .iter()
                .map(|e| e.json().to_owned())
                .collect::<Vec<_>>()
        })
    };
    prop_assert_eq!(
        text(proven),
        text(replayed),
        "the proof and the replay disagree (--runs {})",
        last
    );
    Ok(())
}

/// The case count of a property: `default` (the CI count), or
/// `PROPTEST_CASES` when set, to hunt for gaps at a larger count locally.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

// ---------------------------------------------------------------------------
// Free-form sequences over a tiny id space.

const IDS: [&str; 3] = ["a", "b", "c"];

fn id(n: u8) -> Value {
    match n % 5 {
        4 => json!(7),
        k => json!(IDS[(k as usize) % 3]),
    }
}

fn meta(n: u8) -> Option<Value> {
    match n % 6 {
        0 => Some(json!({"k": n})),
        1 => Some(json!({"k": "x", "j": [n]})),
        2 => Some(json!(null)),
        _ => None,
    }
}

fn with_meta(mut event: Value, n: u8) -> Value {
    if let Some(m) = meta(n)
        && let Some(object) = event.as_object_mut()
    {
        object.insert("metadata".into(), m);
    }
    event
}

fn delta(n: u8) -> Value {
    match n % 9 {
        0 => json!(7),
        1 => json!(""),
        2 => json!("\\u00e9\"q"),
        3 => json!("{\"x\":"),
        _ => json!(format!("d{n}")),
    }
}

/// One event from four small numbers.
fn free_event(kind: u8, x: u8, y: u8, z: u8) -> Event {
    let run = format!("r{}", x % 3);
    // Chunks are rare so that most sequences stay ones the reducer accepts.
    let kind = match kind % 64 {
        27 if !x.is_multiple_of(4) => 5,
        28 if !x.is_multiple_of(4) => 12,
        k => k % 32,
    };
    let v = match kind {
        0 => json!({"type": "RUN_STARTED", "threadId": "t", "runId": run,
            "input": {"threadId": "t", "runId": run, "messages": [
                {"id": IDS[(y % 3) as usize], "role": "user", "content": "hi"}],
                "tools": [], "context": [], "state": {}, "forwardedProps": {}}}),
        1 => json!({"type": "RUN_FINISHED", "threadId": "t", "runId": run}),
        2 => json!({"type": "RUN_ERROR", "message": "boom"}),
        3 | 4 => json!({"type": "TEXT_MESSAGE_START", "messageId": id(x), "role": "assistant"}),
        5..=8 => json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": id(x), "delta": delta(y)}),
        9 => json!({"type": "TEXT_MESSAGE_END", "messageId": id(x)}),
        10 => {
            json!({"type": "TOOL_CALL_START", "toolCallId": id(x), "toolCallName": format!("f{y}"),
            "parentMessageId": id(z)})
        }
        11 => json!({"type": "TOOL_CALL_START", "toolCallId": id(x), "toolCallName": "g"}),
        12 | 13 => json!({"type": "TOOL_CALL_ARGS", "toolCallId": id(x), "delta": delta(y)}),
        14 => json!({"type": "TOOL_CALL_END", "toolCallId": id(x)}),
        15 => {
            json!({"type": "TOOL_CALL_RESULT", "messageId": id(y), "toolCallId": id(x), "content": "ok"})
        }
        16 => json!({"type": "STATE_SNAPSHOT", "snapshot": {"n": y}}),
        17 => {
            json!({"type": "STATE_DELTA", "delta": [{"op": "add", "path": format!("/p{}", y % 3), "value": z}]})
        }
        18 => {
            json!({"type": "STATE_DELTA", "delta": [{"op": "replace", "path": "/n", "value": z}]})
        }
        19 => json!({"type": "MESSAGES_SNAPSHOT", "messages": [
            {"id": IDS[(y % 3) as usize], "role": "assistant", "content": "snap"}]}),
        20 => json!({"type": "ACTIVITY_SNAPSHOT", "messageId": id(x), "activityType": "plan",
            "content": {"s": y}}),
        21 => json!({"type": "ACTIVITY_DELTA", "messageId": id(x), "activityType": "plan",
            "patch": [{"op": "replace", "path": "/s", "value": z}]}),
        22 => json!({"type": "REASONING_MESSAGE_START", "messageId": id(x), "role": "reasoning"}),
        23 | 24 => {
            json!({"type": "REASONING_MESSAGE_CONTENT", "messageId": id(x), "delta": delta(y)})
        }
        25 => json!({"type": "REASONING_MESSAGE_END", "messageId": id(x)}),
        26 => {
            json!({"type": "REASONING_ENCRYPTED_VALUE", "subtype": if y.is_multiple_of(2) {"message"} else {"tool-call"},
            "entityId": id(x), "encryptedValue": format!("e{z}")})
        }
        27 => json!({"type": "TEXT_MESSAGE_CHUNK", "messageId": id(x), "delta": delta(y)}),
        28 => {
            json!({"type": "TOOL_CALL_CHUNK", "toolCallId": id(x), "toolCallName": "h", "delta": delta(y)})
        }
        29 => json!({"type": "CUSTOM", "name": "c", "value": y}),
        30 => json!({"type": "STEP_STARTED", "stepName": format!("s{y}")}),
        _ => json!({"type": "X_UNKNOWN", "v": y}),
    };
    let v = with_meta(v, z);
    Event::from_serialize(&v).expect("generated events are objects with a type")
}

fn free_stream() -> impl Strategy<Value = Vec<Event>> {
    prop::collection::vec((any::<u8>(), any::<u8>(), any::<u8>(), any::<u8>()), 0..40).prop_map(
        |raw| {
            let mut events = vec![free_event(0, 0, 0, 0)];
            events.extend(raw.into_iter().map(|(k, x, y, z)| free_event(k, x, y, z)));
            events
        },
    )
}

/// Guards against a vacuous property: most inputs must be ones the reducer
/// accepts, or the guarantees above would be checked on almost nothing.
#[test]
fn most_generated_inputs_are_accepted_by_the_reducer() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = any_stream();
    let mut accepted = 0;
    for _ in 0..400 {
        let events = strategy.new_tree(&mut runner).expect("a value").current();
        if checkpoints(&events, &Conversation::default()).is_some() {
            accepted += 1;
        }
    }
    assert!(
        accepted >= 240,
        "only {accepted} of 400 inputs are accepted by the reducer"
    );
}

fn profile_stream() -> impl Strategy<Value = Vec<Event>> {
    (0..Profile::ALL.len(), any::<u64>()).prop_map(|(p, seed)| stream(Profile::ALL[p], seed))
}

fn invalid() -> impl Strategy<Value = Vec<Event>> {
    any::<u64>().prop_map(invalid_stream)
}

fn any_stream() -> impl Strategy<Value = Vec<Event>> {
    prop_oneof![2 => free_stream(), 2 => profile_stream(), 1 => invalid()]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(3000), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn deltas_keeps_meaning_verification_idempotence_and_size(events in any_stream()) {
        check(&events, Mode::Deltas)?;
    }
}

/// `deltas` over events borrowed as a decoder lends them (each with the
/// member table its scan recorded, or none), fed one at a time and drained
/// every `every` events, gives what it gives over owned events.
fn check_borrowed_input(events: &[Event], every: usize) -> Result<(), TestCaseError> {
    let owned = compact_deltas(events.iter().cloned());
    let mut tables: Vec<Vec<Member>> = Vec::new();
    for event in events {
        let mut members = Vec::new();
        let checked = Event::check_recording(event.json(), &mut members);
        prop_assert!(checked.is_ok(), "an owned event checks again: {event}");
        tables.push(members);
    }
    let mut compactor = DeltaCompactor::new();
    let mut borrowed = Vec::new();
    let mut result = Ok(());
    for (i, (event, members)) in events.iter().zip(&tables).enumerate() {
        let event = EventRef::from_checked_members(event.json(), event.event_type(), members);
        if let Err(err) = compactor.push(event) {
            result = Err(err);
            break;
        }
        if i % every == 0 {
            borrowed.extend(compactor.drain());
        }
    }
    let borrowed = result.and_then(|()| compactor.finish()).map(|()| {
        borrowed
            .into_iter()
            .chain(compactor.drain())
            .collect::<Vec<_>>()
    });
    match (owned, borrowed) {
        (Ok(owned), Ok(borrowed)) => {
            let texts = |events: &[Event]| {
                events
                    .iter()
                    .map(|e| e.json().to_owned())
                    .collect::<Vec<_>>()
            };
            prop_assert_eq!(texts(&owned), texts(&borrowed));
        }
        (Err(_), Err(_)) => {}
        (owned, borrowed) => prop_assert!(false, "owned {owned:?}, borrowed {borrowed:?}"),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(2500), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn deltas_on_free_form_sequences(events in free_stream()) {
        check(&events, Mode::Deltas)?;
    }

    #[test]
    fn deltas_reads_borrowed_events_as_it_reads_owned_ones(
        events in any_stream(),
        every in 1usize..9,
    ) {
        check_borrowed_input(&events, every)?;
    }

    #[test]
    fn snapshot_keeps_meaning_verification_and_idempotence(events in any_stream()) {
        check(&events, Mode::Snapshot)?;
    }

    #[test]
    fn snapshot_of_the_last_runs_keeps_meaning_verification_and_idempotence(
        events in any_stream(),
        last in 0u64..4,
    ) {
        check_last_runs(&events, last)?;
    }

    #[test]
    fn snapshot_proof_gives_the_replay_output(events in any_stream(), last in 0u64..4) {
        check_proof_matches_replay(&events, u64::MAX)?;
        check_proof_matches_replay(&events, last)?;
    }

    #[test]
    fn snapshot_proof_gives_the_replay_output_on_free_form_sequences(events in free_stream()) {
        check_proof_matches_replay(&events, u64::MAX)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(2000), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn latest_restates_the_branch_verification_and_idempotence(events in any_stream()) {
        check(&events, Mode::Latest)?;
    }
}

/// Inputs the properties once failed on (`fixtures/compact/regressions/`),
/// checked in every mode on every run.
#[test]
fn regressions_keep_every_guarantee() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/compact/regressions");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "ndjson"))
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "no regression inputs in {}",
        dir.display()
    );
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let events: Vec<Event> = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| Event::from_json(l).unwrap())
            .collect();
        for mode in [Mode::Deltas, Mode::Snapshot, Mode::Latest] {
            if let Err(e) = check(&events, mode) {
                panic!("{}: {mode}: {e}", file.display());
            }
        }
        for last in 0..3 {
            if let Err(e) = check_last_runs(&events, last) {
                panic!("{}: --runs {last}: {e}", file.display());
            }
        }
    }
}
