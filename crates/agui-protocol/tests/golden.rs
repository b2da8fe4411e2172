//! The golden corpus (`fixtures/golden/*.json`): every fixture survives the
//! envelope and the typed model with an equal JSON value, strict reading
//! accepts it, and together the fixtures cover the whole 1.0 model.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use agui_protocol::model::{
    self, Content, ContentPart, Message, PartSource, PatchOperation, ReadMode, RunOutcome,
    SubagentOutcome, TypedEvent,
};
use agui_protocol::{Event, EventType};
use serde_json::Value;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every golden file: its name, and its elements read as plain JSON values
/// (independently of `Event`) next to the same elements read as envelopes.
fn golden() -> Vec<(String, Vec<Value>, Vec<Event>)> {
    let dir = workspace().join("fixtures/golden");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 5,
        "expected several golden files in {}",
        dir.display()
    );
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            let values: Vec<Value> =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let events: Vec<Event> =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, values, events)
        })
        .collect()
}

#[test]
fn every_fixture_round_trips_through_the_envelope_and_the_typed_model() {
    let mut count = 0;
    for (file, values, events) in golden() {
        assert_eq!(values.len(), events.len());
        for (i, (value, event)) in values.iter().zip(&events).enumerate() {
            let at = format!("{file} #{i}");
            // Envelope: the text is kept, so its value is the same.
            let back: Value = serde_json::from_str(event.json()).unwrap();
            assert_eq!(&back, value, "{at}: envelope");
            // Typed: parse, serialize, compare values.
            let typed = model::parse_event(event).unwrap_or_else(|e| panic!("{at}: {e}"));
            let written = serde_json::to_string(&typed).unwrap();
            let reread: Value = serde_json::from_str(&written).unwrap();
            assert_eq!(&reread, value, "{at}: typed round trip\n wrote {written}");
            // And through a fresh envelope built from the typed value.
            let again = typed.to_event().unwrap();
            assert_eq!(again.event_type(), event.event_type(), "{at}");
            assert!(again.same_value(event), "{at}: to_event");
            // Reading it a second time gives the same typed value.
            assert_eq!(
                model::parse_event(&again).unwrap(),
                typed,
                "{at}: idempotent"
            );
            count += 1;
        }
    }
    assert!(count > 100, "only {count} golden events");
}

#[test]
fn strict_reading_accepts_every_fixture() {
    for (file, _, events) in golden() {
        let checked =
            model::read_all(&events, ReadMode::Strict).unwrap_or_else(|e| panic!("{file}: {e}"));
        for (i, c) in checked.iter().enumerate() {
            assert!(c.diagnostic.is_none(), "{file} #{i}");
            let known = events[i].event_type().is_known();
            assert_eq!(
                matches!(c.event, TypedEvent::Opaque(_)),
                !known,
                "{file} #{i}: known types are typed, unknown ones opaque"
            );
            if known {
                assert_eq!(&c.event.event_type(), events[i].event_type());
            }
        }
    }
}

/// What the corpus exercises, gathered from the typed model.
#[derive(Default)]
struct Coverage {
    types: BTreeSet<String>,
    roles: BTreeSet<&'static str>,
    parts: BTreeSet<&'static str>,
    sources: BTreeSet<&'static str>,
    run_outcomes: BTreeSet<&'static str>,
    subagent_outcomes: BTreeSet<&'static str>,
    ops: BTreeSet<&'static str>,
    unknown_types: usize,
    extra_depths: BTreeSet<usize>,
}

impl Coverage {
    fn content(&mut self, content: &Content) {
        if let Content::Parts(parts) = content {
            for part in parts {
                self.parts.insert(part.tag());
                let source = match part {
                    ContentPart::Text(_) => None,
                    ContentPart::Image(p) => Some(&p.source),
                    ContentPart::Audio(p) => Some(&p.source),
                    ContentPart::Video(p) => Some(&p.source),
                    ContentPart::Document(p) => Some(&p.source),
                };
                if let Some(s) = source {
                    self.sources.insert(s.tag());
                    if !s.extra().is_empty() {
                        self.extra_depths.insert(4);
                    }
                }
            }
        }
    }

    fn messages(&mut self, messages: &[Message]) {
        for m in messages {
            self.roles.insert(m.role().as_str());
            if !m.extra().is_empty() {
                self.extra_depths.insert(2);
            }
            match m {
                Message::User(u) => self.content(&u.content),
                Message::Tool(t) => self.content(&t.content),
                Message::Assistant(a) => {
                    for call in a.tool_calls.iter().flatten() {
                        if !call.function.extra.is_empty() {
                            self.extra_depths.insert(4);
                        }
                    }
                }
                _ => {}
            }
        }
    }

    fn patch(&mut self, ops: &[PatchOperation]) {
        for op in ops {
            self.ops.insert(op.tag());
        }
    }
}

#[test]
fn the_corpus_covers_the_whole_model() {
    let mut cov = Coverage::default();
    for (_, _, events) in golden() {
        for event in &events {
            let typed = model::parse_event(event).unwrap();
            cov.types.insert(typed.event_type().as_str().to_owned());
            if typed.extra().is_some_and(|x| !x.is_empty()) {
                cov.extra_depths.insert(1);
            }
            match &typed {
                TypedEvent::Opaque(_) => cov.unknown_types += 1,
                TypedEvent::RunStarted(e) => {
                    if let Some(input) = &e.input {
                        cov.messages(&input.messages);
                    }
                }
                TypedEvent::MessagesSnapshot(e) => cov.messages(&e.messages),
                TypedEvent::ToolCallResult(e) => cov.content(&e.content),
                TypedEvent::StateDelta(e) => cov.patch(&e.delta),
                TypedEvent::ActivityDelta(e) => cov.patch(&e.patch),
                TypedEvent::RunFinished(e) => {
                    if let Some(o) = &e.outcome {
                        cov.run_outcomes.insert(o.tag());
                        let extra_in_interrupt = match o {
                            RunOutcome::Interrupt(i) => {
                                i.interrupts.as_slice().iter().any(|x| !x.extra.is_empty())
                            }
                            _ => false,
                        };
                        if extra_in_interrupt {
                            cov.extra_depths.insert(3);
                        }
                    }
                }
                TypedEvent::SubagentFinished(e) => {
                    if let Some(o) = &e.outcome {
                        cov.subagent_outcomes.insert(match o {
                            SubagentOutcome::Success(_) => "success",
                            SubagentOutcome::Suspended(_) => "suspended",
                        });
                    }
                }
                _ => {}
            }
        }
    }
    for t in EventType::KNOWN {
        assert!(cov.types.contains(t.as_str()), "no golden {t}");
    }
    assert_eq!(
        cov.roles.len(),
        model::Role::VALUES.len(),
        "roles: {:?}",
        cov.roles
    );
    assert_eq!(
        cov.parts.len(),
        ContentPart::TAGS.len(),
        "parts: {:?}",
        cov.parts
    );
    assert_eq!(
        cov.sources.len(),
        PartSource::TAGS.len(),
        "sources: {:?}",
        cov.sources
    );
    assert_eq!(cov.run_outcomes.len(), RunOutcome::TAGS.len());
    assert_eq!(
        cov.subagent_outcomes.len(),
        model::SubagentOutcome::TAGS.len()
    );
    assert_eq!(
        cov.ops.len(),
        PatchOperation::TAGS.len(),
        "ops: {:?}",
        cov.ops
    );
    assert!(cov.unknown_types >= 3);
    assert!(
        cov.extra_depths.len() >= 4,
        "unknown keys at depths {:?}",
        cov.extra_depths
    );
}

#[test]
fn nulls_numbers_and_strings_survive_exactly_in_the_typed_model() {
    let text = r#"{"type":"CUSTOM","name":"\ud83c\udf89","value":{"big":12345678901234567890123,"p":1.10,"n":null},"x":null,"timestamp":1.0}"#;
    let event = Event::from_json(text).unwrap();
    let typed = model::parse_event(&event).unwrap();
    let TypedEvent::Custom(custom) = &typed else {
        panic!("not CUSTOM: {typed:?}")
    };
    assert_eq!(custom.name, "🎉");
    assert_eq!(custom.extra.get("x"), Some(&Value::Null));
    assert_eq!(custom.base.timestamp.as_ref().unwrap().as_i64(), 1);
    let written = serde_json::to_string(&typed).unwrap();
    assert!(written.contains("12345678901234567890123"), "{written}");
    assert!(written.contains("1.10"), "{written}");
    assert!(written.contains(r#""timestamp":1.0"#), "{written}");
    assert!(written.contains(r#""x":null"#), "{written}");
}
