//! Property tests of branch history.
//!
//! 1. A branch's history never contains a message generated only on runs
//!    off that branch, however sloppily later runs resend history.
//! 2. For a log without forks, the conversation at its last run is the
//!    reduction of the whole log.

use std::collections::{BTreeSet, HashMap};

use agui_history::lineage::{Lineage, RunIndex};
use agui_history::reduce::{Conversation, reduce};
use agui_protocol::Event;
use agui_testkit::{Profile, stream};
use proptest::prelude::*;
use serde_json::{Value, json};

fn empty() -> Conversation {
    Conversation {
        messages: Vec::new(),
        state: json!({}),
    }
}

fn ev(v: Value) -> Event {
    Event::from_serialize(&v).unwrap()
}

/// One run of a generated log.
#[derive(Debug, Clone)]
struct RunSpec {
    /// `Some(k)`: `parentRunId` names run `k % runs so far`; `None`: implicit.
    parent: Option<usize>,
    /// Which earlier messages (of any branch) the input resends.
    resend: u64,
    /// Whether the run answers with a tool call and result as well.
    tool: bool,
    /// `Some(mask)`: the run ends with a MESSAGES_SNAPSHOT restating these
    /// earlier messages plus its own.
    snapshot: Option<u64>,
    /// 0 finished, 1 error, 2 no terminal.
    end: u8,
}

fn run_spec() -> impl Strategy<Value = RunSpec> {
    (
        proptest::option::weighted(0.6, 0usize..16),
        any::<u64>(),
        any::<bool>(),
        proptest::option::weighted(0.3, any::<u64>()),
        0u8..3,
    )
        .prop_map(|(parent, resend, tool, snapshot, end)| RunSpec {
            parent,
            resend,
            tool,
            snapshot,
            end,
        })
}

/// Builds the log, and for each run the ids its own stream generated.
fn build(specs: &[RunSpec]) -> (Vec<Event>, Vec<BTreeSet<String>>) {
    let mut events = Vec::new();
    let mut generated: Vec<BTreeSet<String>> = Vec::new();
    // Every message seen so far, in order, as the sloppy client keeps them.
    let mut seen: Vec<Value> = Vec::new();
    for (k, spec) in specs.iter().enumerate() {
        let run_id = format!("r{k}");
        let mut started = json!({"type": "RUN_STARTED", "threadId": "t", "runId": run_id});
        if let (Some(p), true) = (spec.parent, k > 0) {
            started["parentRunId"] = json!(format!("r{}", p % k));
        }
        let mut input: Vec<Value> = seen
            .iter()
            .enumerate()
            .filter(|(i, _)| spec.resend >> (i % 64) & 1 == 1)
            .map(|(_, m)| m.clone())
            .collect();
        let user =
            json!({"id": format!("u{k}"), "role": "user", "content": format!("question {k}")});
        input.push(user.clone());
        started["input"] = json!({"threadId": "t", "runId": run_id, "messages": input});
        events.push(ev(started));
        seen.push(user);

        let mut mine = BTreeSet::new();
        let answer = format!("a{k}");
        events.push(ev(
            json!({"type": "TEXT_MESSAGE_START", "messageId": answer, "role": "assistant"}),
        ));
        events.push(ev(json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": answer, "delta": format!("answer {k}")})));
        events.push(ev(json!({"type": "TEXT_MESSAGE_END", "messageId": answer})));
        seen.push(json!({"id": answer, "role": "assistant", "content": format!("answer {k}")}));
        mine.insert(answer);
        if spec.tool {
            let call = format!("c{k}");
            let result = format!("t{k}");
            events.push(ev(
                json!({"type": "TOOL_CALL_START", "toolCallId": call, "toolCallName": "lookup"}),
            ));
            events.push(ev(json!({"type": "TOOL_CALL_END", "toolCallId": call})));
            events.push(ev(json!({"type": "TOOL_CALL_RESULT", "messageId": result, "toolCallId": call, "content": "42"})));
            seen.push(json!({"id": call, "role": "assistant", "toolCalls": [{"id": call, "type": "function", "function": {"name": "lookup", "arguments": ""}}]}));
            seen.push(json!({"id": result, "role": "tool", "toolCallId": call, "content": "42"}));
            mine.insert(call);
            mine.insert(result);
        }
        if let Some(mask) = spec.snapshot {
            let restated: Vec<Value> = seen
                .iter()
                .enumerate()
                .filter(|(i, m)| {
                    mask >> (i % 64) & 1 == 1 || mine.contains(m["id"].as_str().unwrap_or(""))
                })
                .map(|(_, m)| m.clone())
                .collect();
            events.push(ev(
                json!({"type": "MESSAGES_SNAPSHOT", "messages": restated}),
            ));
        }
        match spec.end {
            0 => events.push(ev(
                json!({"type": "RUN_FINISHED", "threadId": "t", "runId": run_id}),
            )),
            1 => events.push(ev(json!({"type": "RUN_ERROR", "message": "boom"}))),
            _ => {}
        }
        generated.push(mine);
    }
    (events, generated)
}

fn message_ids(c: &Conversation) -> BTreeSet<String> {
    c.messages
        .iter()
        .filter_map(|m| m["id"].as_str().map(str::to_owned))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn branch_history_never_holds_messages_generated_only_off_the_branch(
        specs in proptest::collection::vec(run_spec(), 1..10)
    ) {
        let (events, generated) = build(&specs);
        let lineage = Lineage::new(&events).unwrap();
        let position: HashMap<&str, usize> = lineage
            .index()
            .runs()
            .iter()
            .enumerate()
            .map(|(i, r)| (r.run_id.as_str(), i))
            .collect();
        for run in lineage.index().runs() {
            let path: BTreeSet<usize> = lineage
                .index()
                .branch_path(&run.run_id)
                .unwrap()
                .iter()
                .map(|r| position[r.run_id.as_str()])
                .collect();
            let on_path: BTreeSet<&String> = path.iter().flat_map(|&p| &generated[p]).collect();
            let off_path: BTreeSet<&String> = (0..generated.len())
                .filter(|p| !path.contains(p))
                .flat_map(|p| &generated[p])
                .filter(|id| !on_path.contains(id))
                .collect();
            let history = lineage.conversation_at(&run.run_id, None, empty()).unwrap();
            let ids = message_ids(&history);
            let leaked: Vec<&&String> = off_path.iter().filter(|id| ids.contains(id.as_str())).collect();
            prop_assert!(leaked.is_empty(), "run {} leaked {:?}", run.run_id, leaked);
            // What the branch itself generated is there (a snapshot on the
            // branch may have dropped older messages, but never its own).
            let own = &generated[position[run.run_id.as_str()]];
            for id in own {
                prop_assert!(ids.contains(id), "run {} lost its own {}", run.run_id, id);
            }
            // Replaying the branch's events gives the same conversation.
            let replay: Vec<Event> = lineage
                .branch(&run.run_id, None)
                .unwrap()
                .events
                .into_iter()
                .map(|(_, e)| e.into_owned())
                .collect();
            prop_assert_eq!(reduce(&replay, empty()).unwrap(), history);
        }
    }

    #[test]
    fn without_forks_the_last_run_sees_the_whole_log(
        specs in proptest::collection::vec(run_spec(), 1..10)
    ) {
        // Implicit parents only: a straight line.
        let specs: Vec<RunSpec> = specs.into_iter().map(|s| RunSpec { parent: None, ..s }).collect();
        let (events, _) = build(&specs);
        let lineage = Lineage::new(&events).unwrap();
        let last = &lineage.index().runs().last().unwrap().run_id;
        prop_assert_eq!(
            lineage.conversation_at(last, None, empty()).unwrap(),
            reduce(&events, empty()).unwrap()
        );
    }
}

/// The seeded generators of the testkit: every single-leaf log reduces to
/// the same conversation at its leaf, and every branch of a forked log can be
/// replayed. Where the reducer refuses the whole log (it may refuse some
/// event kinds), the branch replay must refuse it too.
#[test]
fn testkit_streams_agree_with_the_whole_log_when_they_do_not_fork() {
    let mut compared = 0;
    let mut forked = 0;
    for &profile in Profile::ALL {
        for seed in 0..12 {
            let events = stream(profile, seed);
            let what = format!("{} seed {seed}", profile.name());
            let index = RunIndex::build(&events).unwrap_or_else(|e| panic!("{what}: {e}"));
            let lineage = Lineage::with_index(&events, index).unwrap();
            let leaves = lineage.index().leaves();
            let whole = reduce(&events, empty());
            if leaves.len() == 1 && lineage.index().threads().len() == 1 {
                let at = lineage.conversation_at(&leaves[0].run_id, None, empty());
                match (at, whole) {
                    (Ok(at), Ok(whole)) => {
                        assert_eq!(at, whole, "{what}");
                        compared += 1;
                    }
                    (Err(_), Err(_)) => {}
                    (at, whole) => panic!("{what}: at the leaf {at:?}, whole log {whole:?}"),
                }
            } else {
                forked += 1;
                for leaf in &leaves {
                    let at = lineage.conversation_at(&leaf.run_id, None, empty());
                    assert!(at.is_ok() || whole.is_err(), "{what}: {at:?}");
                }
            }
        }
    }
    assert!(
        compared >= 100 && forked > 0,
        "compared {compared}, forked {forked}"
    );
}
