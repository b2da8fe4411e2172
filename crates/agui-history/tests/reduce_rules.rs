//! One test per rule of the official reducer (protocol reference §3.2 and
//! the §7.2 checklist). Expected values are written from the rules.

use agui_history::reduce::{Conversation, ReduceError, Reducer, RunOutcome, reduce};
use agui_protocol::Event;
use serde_json::{Value, json};

fn events(list: Value) -> Vec<Event> {
    list.as_array()
        .expect("an array of events")
        .iter()
        .map(|e| Event::from_serialize(e).expect("an event"))
        .collect()
}

fn run(list: Value) -> Conversation {
    reduce(&events(list), Conversation::default()).expect("reduces")
}

fn run_from(messages: Value, list: Value) -> Conversation {
    let start = Conversation {
        messages: messages.as_array().cloned().unwrap_or_default(),
        state: json!({}),
    };
    reduce(&events(list), start).expect("reduces")
}

fn reducer(list: Value) -> Reducer {
    let mut r = Reducer::new(Conversation::default());
    for e in events(list) {
        r.apply(&e).expect("applies");
    }
    r
}

fn msgs(c: &Conversation) -> Value {
    Value::Array(c.messages.clone())
}

// ----- text messages -------------------------------------------------------

#[test]
fn text_lifecycle_builds_one_assistant_message() {
    let c = run(json!([
        {"type":"TEXT_MESSAGE_START","messageId":"m1"},
        {"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"Hello"},
        {"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":" world"},
        {"type":"TEXT_MESSAGE_END","messageId":"m1"}
    ]));
    assert_eq!(
        msgs(&c),
        json!([{"id":"m1","role":"assistant","content":"Hello world"}])
    );
    assert_eq!(c.state, json!({}));
}

#[test]
fn several_text_messages_are_appended_in_order() {
    let c = run(json!([
        {"type":"TEXT_MESSAGE_START","messageId":"a","role":"user"},
        {"type":"TEXT_MESSAGE_START","messageId":"b","role":"developer"},
        {"type":"TEXT_MESSAGE_CONTENT","messageId":"b","delta":"2"},
        {"type":"TEXT_MESSAGE_CONTENT","messageId":"a","delta":"1"}
    ]));
    assert_eq!(
        msgs(&c),
        json!([
            {"id":"a","role":"user","content":"1"},
            {"id":"b","role":"developer","content":"2"}
        ])
    );
}

#[test]
fn name_is_set_only_when_present() {
    let c = run(json!([
        {"type":"TEXT_MESSAGE_START","messageId":"a","name":"bot"},
        {"type":"TEXT_MESSAGE_START","messageId":"b"}
    ]));
    assert_eq!(c.messages[0]["name"], json!("bot"));
    assert!(c.messages[1].get("name").is_none());
}

#[test]
fn start_replayed_keeps_role_name_and_attribution() {
    let c = run(json!([
        {"type":"TEXT_MESSAGE_START","messageId":"a","role":"user","name":"x","subagentRunId":"s"},
        {"type":"TEXT_MESSAGE_START","messageId":"a","role":"system","name":"y","metadata":{"k":1}}
    ]));
    assert_eq!(
        msgs(&c),
        json!([{"id":"a","role":"user","content":"","name":"x","subagentRunId":"s","metadata":{"k":1}}])
    );
}

#[test]
fn start_reusing_a_tool_call_parent_makes_no_duplicate() {
    let c = run(json!([
        {"type":"TOOL_CALL_START","toolCallId":"t","toolCallName":"f","parentMessageId":"m"},
        {"type":"TEXT_MESSAGE_START","messageId":"m","name":"ignored"},
        {"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"text"}
    ]));
    assert_eq!(
        msgs(&c),
        json!([{"id":"m","role":"assistant","toolCalls":[
            {"id":"t","type":"function","function":{"name":"f","arguments":""}}
        ],"content":"text"}])
    );
}

#[test]
fn text_events_on_an_activity_id_are_ignored() {
    let c = run(json!([
        {"type":"ACTIVITY_SNAPSHOT","messageId":"a","activityType":"PLAN","content":{"x":1}},
        {"type":"TEXT_MESSAGE_START","messageId":"a","metadata":{"m":1}},
        {"type":"TEXT_MESSAGE_CONTENT","messageId":"a","delta":"x"},
        {"type":"TEXT_MESSAGE_END","messageId":"a","metadata":{"m":2}}
    ]));
    assert_eq!(
        msgs(&c),
        json!([{"id":"a","role":"activity","activityType":"PLAN","content":{"x":1}}])
    );
}

#[test]
fn content_and_end_for_unknown_ids_are_skipped() {
    let c = run(json!([
        {"type":"TEXT_MESSAGE_CONTENT","messageId":"nope","delta":"x"},
        {"type":"TEXT_MESSAGE_END","messageId":"nope"},
        {"type":"TOOL_CALL_ARGS","toolCallId":"nope","delta":"x"},
        {"type":"TOOL_CALL_END","toolCallId":"nope"}
    ]));
    assert_eq!(msgs(&c), json!([]));
}

#[test]
fn content_on_array_content_becomes_a_string() {
    let c = run_from(
        json!([{"id":"u","role":"user","content":[{"type":"text","text":"hi"}]}]),
        json!([{"type":"TEXT_MESSAGE_CONTENT","messageId":"u","delta":"x"}]),
    );
    assert_eq!(c.messages[0]["content"], json!("x"));
}

#[test]
fn message_id_reused_across_runs_appends_to_the_old_message() {
    let c = run(json!([
        {"type":"RUN_STARTED","threadId":"t","runId":"1"},
        {"type":"TEXT_MESSAGE_START","messageId":"m"},
        {"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"a"},
        {"type":"RUN_FINISHED","threadId":"t","runId":"1"},
        {"type":"RUN_STARTED","threadId":"t","runId":"2"},
        {"type":"TEXT_MESSAGE_START","messageId":"m"},
        {"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"b"}
    ]));
    assert_eq!(
        msgs(&c),
        json!([{"id":"m","role":"assistant","content":"ab"}])
    );
}

// ----- tool calls ----------------------------------------------------------

#[test]
fn a_tool_call_without_parent_creates_its_own_assistant_message() {
    let c = run(json!([
        {"type":"TOOL_CALL_START","toolCallId":"t1","toolCallName":"search"},
        {"type":"TOOL_CALL_ARGS","toolCallId":"t1","delta":"{\"q\":"},
        {"type":"TOOL_CALL_ARGS","toolCallId":"t1","delta":"\"x\"}"},
        {"type":"TOOL_CALL_END","toolCallId":"t1"}
    ]));
    assert_eq!(
        msgs(&c),
        json!([{"id":"t1","role":"assistant","toolCalls":[
            {"id":"t1","type":"function","function":{"name":"search","arguments":"{\"q\":\"x\"}"}}
        ]}])
    );
}

#[test]
fn malformed_partial_arguments_are_concatenated_as_text() {
    let c = run(json!([
        {"type":"TOOL_CALL_START","toolCallId":"t","toolCallName":"f"},
        {"type":"TOOL_CALL_ARGS","toolCallId":"t","delta":"{not json"},
        {"type":"TOOL_CALL_ARGS","toolCallId":"t","delta":"]]"}
    ]));
    assert_eq!(
        c.messages[0]["toolCalls"][0]["function"]["arguments"],
        json!("{not json]]")
    );
}

#[test]
fn parent_message_id_attaches_to_an_existing_assistant_message() {
    let c = run(json!([
        {"type":"TEXT_MESSAGE_START","messageId":"a","subagentRunId":"mine"},
        {"type":"TOOL_CALL_START","toolCallId":"t1","toolCallName":"f","parentMessageId":"a","subagentRunId":"other"},
        {"type":"TOOL_CALL_START","toolCallId":"t2","toolCallName":"g","parentMessageId":"a"}
    ]));
    assert_eq!(c.messages.len(), 1);
    assert_eq!(c.messages[0]["subagentRunId"], json!("mine"));
    assert_eq!(c.messages[0]["toolCalls"].as_array().unwrap().len(), 2);
}

#[test]
fn a_parent_of_another_role_gives_a_message_keyed_by_the_tool_call() {
    let c = run(json!([
        {"type":"TEXT_MESSAGE_START","messageId":"u","role":"user"},
        {"type":"TOOL_CALL_START","toolCallId":"t","toolCallName":"f","parentMessageId":"u"}
    ]));
    assert_eq!(c.messages[1]["id"], json!("t"));
    assert_eq!(c.messages[1]["role"], json!("assistant"));
}

#[test]
fn an_unknown_parent_gives_a_message_keyed_by_the_parent() {
    let c = run(json!([
        {"type":"TOOL_CALL_START","toolCallId":"t","toolCallName":"f","parentMessageId":"p","subagentRunId":"s"}
    ]));
    assert_eq!(
        msgs(&c),
        json!([{"id":"p","role":"assistant","toolCalls":[
            {"id":"t","type":"function","function":{"name":"f","arguments":""}}
        ],"subagentRunId":"s"}])
    );
}

#[test]
fn tool_call_start_is_idempotent_and_renames_in_place() {
    let c = run(json!([
        {"type":"TOOL_CALL_START","toolCallId":"t","toolCallName":"f"},
        {"type":"TOOL_CALL_ARGS","toolCallId":"t","delta":"{}"},
        {"type":"TOOL_CALL_START","toolCallId":"t","toolCallName":"g","parentMessageId":"elsewhere"}
    ]));
    assert_eq!(
        msgs(&c),
        json!([{"id":"t","role":"assistant","toolCalls":[
            {"id":"t","type":"function","function":{"name":"g","arguments":"{}"}}
        ]}])
    );
}

#[test]
fn a_result_is_placed_after_its_owner_even_after_trailing_text() {
    let c = run(json!([
        {"type":"TOOL_CALL_START","toolCallId":"t","toolCallName":"f","parentMessageId":"a"},
        {"type":"TEXT_MESSAGE_START","messageId":"later"},
        {"type":"TOOL_CALL_RESULT","messageId":"r","toolCallId":"t","content":"ok"}
    ]));
    let ids: Vec<&Value> = c.messages.iter().map(|m| &m["id"]).collect();
    assert_eq!(ids, [&json!("a"), &json!("r"), &json!("later")]);
    assert_eq!(
        c.messages[1],
        json!({"id":"r","toolCallId":"t","role":"tool","content":"ok"})
    );
}

#[test]
fn parallel_results_keep_their_order_after_the_owner() {
    let c = run(json!([
        {"type":"TOOL_CALL_START","toolCallId":"t1","toolCallName":"f","parentMessageId":"a"},
        {"type":"TOOL_CALL_START","toolCallId":"t2","toolCallName":"f","parentMessageId":"a"},
        {"type":"TEXT_MESSAGE_START","messageId":"later"},
        {"type":"TOOL_CALL_RESULT","messageId":"r2","toolCallId":"t2","content":"2"},
        {"type":"TOOL_CALL_RESULT","messageId":"r1","toolCallId":"t1","content":"1"}
    ]));
    let ids: Vec<&Value> = c.messages.iter().map(|m| &m["id"]).collect();
    assert_eq!(
        ids,
        [&json!("a"), &json!("r2"), &json!("r1"), &json!("later")]
    );
}

#[test]
fn the_owner_is_found_by_a_full_search_when_results_sit_between_calls() {
    let c = run(json!([
        {"type":"TOOL_CALL_START","toolCallId":"t1","toolCallName":"f"},
        {"type":"TOOL_CALL_RESULT","messageId":"r1","toolCallId":"t1","content":"1"},
        {"type":"TOOL_CALL_START","toolCallId":"t2","toolCallName":"f"},
        {"type":"TEXT_MESSAGE_START","messageId":"x"},
        {"type":"TOOL_CALL_RESULT","messageId":"r2","toolCallId":"t2","content":"2"}
    ]));
    let ids: Vec<&Value> = c.messages.iter().map(|m| &m["id"]).collect();
    assert_eq!(
        ids,
        [
            &json!("t1"),
            &json!("r1"),
            &json!("t2"),
            &json!("r2"),
            &json!("x")
        ]
    );
}

#[test]
fn results_are_not_deduplicated_and_orphans_are_appended() {
    let c = run(json!([
        {"type":"TOOL_CALL_START","toolCallId":"t","toolCallName":"f"},
        {"type":"TOOL_CALL_RESULT","messageId":"r","toolCallId":"t","content":"1"},
        {"type":"TOOL_CALL_RESULT","messageId":"r","toolCallId":"t","content":[{"type":"text","text":"2"}]},
        {"type":"TOOL_CALL_RESULT","messageId":"o","toolCallId":"unknown","content":"x"}
    ]));
    assert_eq!(c.messages.len(), 4);
    assert_eq!(c.messages[1]["content"], json!("1"));
    assert_eq!(
        c.messages[2]["content"],
        json!([{"type":"text","text":"2"}])
    );
    assert_eq!(c.messages[3]["id"], json!("o"));
}

#[test]
fn interleaved_text_and_tool_arguments_stay_apart() {
    let c = run(json!([
        {"type":"TEXT_MESSAGE_START","messageId":"m"},
        {"type":"TOOL_CALL_START","toolCallId":"t","toolCallName":"f"},
        {"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"a"},
        {"type":"TOOL_CALL_ARGS","toolCallId":"t","delta":"1"},
        {"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"b"},
        {"type":"TOOL_CALL_ARGS","toolCallId":"t","delta":"2"}
    ]));
    assert_eq!(c.messages[0]["content"], json!("ab"));
    assert_eq!(
        c.messages[1]["toolCalls"][0]["function"]["arguments"],
        json!("12")
    );
}

// ----- state ---------------------------------------------------------------

#[test]
fn state_deltas_apply_in_sequence() {
    let c = run(json!([
        {"type":"STATE_SNAPSHOT","snapshot":{"a":{"b":[1]}}},
        {"type":"STATE_DELTA","delta":[{"op":"add","path":"/a/b/-","value":2}]},
        {"type":"STATE_DELTA","delta":[{"op":"replace","path":"/a/c","value":true},{"op":"add","path":"/a/c","value":false}]}
    ]));
    // The second delta fails on its first operation and is skipped whole.
    assert_eq!(c.state, json!({"a":{"b":[1,2]}}));
}

#[test]
fn a_failing_delta_is_skipped_whole() {
    let c = run(json!([
        {"type":"STATE_DELTA","delta":[{"op":"add","path":"/x","value":1}]},
        {"type":"STATE_DELTA","delta":[{"op":"add","path":"/y","value":2},{"op":"test","path":"/x","value":9}]},
        {"type":"STATE_DELTA","delta":[{"op":"remove","path":"/nope"}]}
    ]));
    assert_eq!(c.state, json!({"x":1}));
}

#[test]
fn state_snapshot_replaces_wholesale_even_with_null() {
    let c = run(json!([
        {"type":"STATE_DELTA","delta":[{"op":"add","path":"/x","value":1}]},
        {"type":"STATE_SNAPSHOT","snapshot":null}
    ]));
    assert_eq!(c.state, Value::Null);
}

// ----- activity ------------------------------------------------------------

#[test]
fn activity_snapshot_then_delta() {
    let c = run(json!([
        {"type":"ACTIVITY_SNAPSHOT","messageId":"a","activityType":"PLAN","content":{"steps":[]},"subagentRunId":"s"},
        {"type":"ACTIVITY_DELTA","messageId":"a","activityType":"PLAN2","patch":[{"op":"add","path":"/steps/-","value":"x"}]}
    ]));
    assert_eq!(
        msgs(&c),
        json!([{"id":"a","role":"activity","activityType":"PLAN2","content":{"steps":["x"]},"subagentRunId":"s"}])
    );
}

#[test]
fn replace_false_keeps_an_existing_activity_and_creates_a_missing_one() {
    let c = run(json!([
        {"type":"ACTIVITY_SNAPSHOT","messageId":"a","activityType":"P","content":{"v":1},"subagentRunId":"s"},
        {"type":"ACTIVITY_SNAPSHOT","messageId":"a","activityType":"Q","content":{"v":2},"replace":false,"metadata":{"m":1}},
        {"type":"ACTIVITY_SNAPSHOT","messageId":"b","activityType":"P","content":{},"replace":false}
    ]));
    assert_eq!(
        msgs(&c),
        json!([
            {"id":"a","role":"activity","activityType":"P","content":{"v":1},"subagentRunId":"s","metadata":{"m":1}},
            {"id":"b","role":"activity","activityType":"P","content":{}}
        ])
    );
}

#[test]
fn a_replacing_snapshot_keeps_metadata_and_reowns_attribution() {
    let c = run(json!([
        {"type":"ACTIVITY_SNAPSHOT","messageId":"a","activityType":"P","content":{"v":1},"subagentRunId":"s","metadata":{"m":1}},
        {"type":"ACTIVITY_SNAPSHOT","messageId":"a","activityType":"Q","content":{"v":2}}
    ]));
    assert_eq!(
        msgs(&c),
        json!([{"id":"a","role":"activity","activityType":"Q","content":{"v":2},"metadata":{"m":1}}])
    );
}

#[test]
fn a_replacing_snapshot_replaces_a_message_of_another_role() {
    let c = run(json!([
        {"type":"TEXT_MESSAGE_START","messageId":"m","metadata":{"old":1}},
        {"type":"TEXT_MESSAGE_START","messageId":"n"},
        {"type":"ACTIVITY_SNAPSHOT","messageId":"m","activityType":"P","content":{},"metadata":{"new":1}},
        {"type":"ACTIVITY_SNAPSHOT","messageId":"n","activityType":"P","content":{},"replace":false,"metadata":{"lost":1}}
    ]));
    assert_eq!(
        msgs(&c),
        json!([
            {"id":"m","role":"activity","activityType":"P","content":{},"metadata":{"new":1}},
            {"id":"n","role":"assistant","content":""}
        ])
    );
}

#[test]
fn activity_delta_metadata_survives_a_failing_patch() {
    let c = run(json!([
        {"type":"ACTIVITY_SNAPSHOT","messageId":"a","activityType":"P","content":{"v":1}},
        {"type":"ACTIVITY_DELTA","messageId":"a","activityType":"Q","patch":[{"op":"remove","path":"/missing"}],"metadata":{"u":1}},
        {"type":"ACTIVITY_DELTA","messageId":"ghost","activityType":"Q","patch":[]},
        {"type":"TEXT_MESSAGE_START","messageId":"t"},
        {"type":"ACTIVITY_DELTA","messageId":"t","activityType":"Q","patch":[],"metadata":{"no":1}}
    ]));
    assert_eq!(
        msgs(&c),
        json!([
            {"id":"a","role":"activity","activityType":"P","content":{"v":1},"metadata":{"u":1}},
            {"id":"t","role":"assistant","content":""}
        ])
    );
}

// ----- messages snapshot ---------------------------------------------------

#[test]
fn snapshot_keeps_local_order_replaces_drops_and_appends() {
    let c = run_from(
        json!([
            {"id":"a","role":"user","content":"1"},
            {"id":"act","role":"activity","activityType":"P","content":{}},
            {"id":"b","role":"assistant","content":"2"},
            {"id":"gone","role":"user","content":"x"}
        ]),
        json!([{"type":"MESSAGES_SNAPSHOT","messages":[
            {"id":"new","role":"user","content":"n","subagentRunId":null},
            {"id":"b","role":"assistant","content":"B"},
            {"id":"a","role":"user","content":"A"}
        ],"metadata":{"not":"merged"}}]),
    );
    assert_eq!(
        msgs(&c),
        json!([
            {"id":"a","role":"user","content":"A"},
            {"id":"act","role":"activity","activityType":"P","content":{}},
            {"id":"b","role":"assistant","content":"B"},
            {"id":"new","role":"user","content":"n"}
        ])
    );
}

#[test]
fn snapshot_reasoning_is_the_whole_truth_for_reasoning() {
    let local = json!([{"id":"r1","role":"reasoning","content":"streamed"}]);
    let kept = run_from(
        local.clone(),
        json!([{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"u","role":"user","content":"x"}]}]),
    );
    assert_eq!(kept.messages.len(), 2);
    let replaced = run_from(
        local,
        json!([{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"r2","role":"reasoning","content":"canonical"}]}]),
    );
    assert_eq!(
        msgs(&replaced),
        json!([{"id":"r2","role":"reasoning","content":"canonical"}])
    );
}

#[test]
fn snapshot_activity_authority() {
    let local = json!([
        {"id":"p","role":"activity","activityType":"PLAN","content":{}},
        {"id":"l","role":"activity","activityType":"LOG","content":{}}
    ]);
    let ids = |c: &Conversation| {
        c.messages
            .iter()
            .map(|m| m["id"].clone())
            .collect::<Vec<_>>()
    };
    let snap = |metadata: Value, messages: Value| {
        run_from(
            local.clone(),
            json!([{"type":"MESSAGES_SNAPSHOT","messages":messages,"metadata":metadata}]),
        )
    };
    // Legacy inference: no activity in the snapshot keeps all local activity.
    assert_eq!(ids(&snap(json!({}), json!([]))), [json!("p"), json!("l")]);
    // ...and an activity in it makes it authoritative for all types.
    let one = json!([{"id":"q","role":"activity","activityType":"X","content":{}}]);
    assert_eq!(ids(&snap(json!({}), one.clone())), [json!("q")]);
    // null: all types, even without activity in the snapshot.
    let all = json!({"@ag-ui/client":{"authoritativeActivityTypes":null}});
    assert_eq!(ids(&snap(all, json!([]))), Vec::<Value>::new());
    // A list: exactly those types.
    let plan = json!({"@ag-ui/client":{"authoritativeActivityTypes":["PLAN"]}});
    assert_eq!(ids(&snap(plan, json!([]))), [json!("l")]);
    // Invalid declarations: no type, even with activity in the snapshot.
    for bad in [
        json!({"@ag-ui/client":{"authoritativeActivityTypes":[1]}}),
        json!({"@ag-ui/client":"x"}),
        json!({"@ag-ui/client":{"authoritativeActivityTypes":"PLAN"}}),
    ] {
        assert_eq!(
            ids(&snap(bad, one.clone())),
            [json!("p"), json!("l"), json!("q")]
        );
    }
}

#[test]
fn a_matching_id_always_takes_the_snapshot_object() {
    let c = run_from(
        json!([{"id":"x","role":"activity","activityType":"P","content":{"old":1},"metadata":{"m":1}}]),
        json!([{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"x","role":"user","content":"u"}],
            "metadata":{"@ag-ui/client":{"authoritativeActivityTypes":[]}}}]),
    );
    assert_eq!(msgs(&c), json!([{"id":"x","role":"user","content":"u"}]));
}

#[test]
fn later_events_merge_onto_snapshot_messages() {
    let c = run(json!([
        {"type":"MESSAGES_SNAPSHOT","messages":[{"id":"a","role":"assistant","content":"x","metadata":{"k":1}}]},
        {"type":"TEXT_MESSAGE_CONTENT","messageId":"a","delta":"y","metadata":{"j":2}}
    ]));
    assert_eq!(
        msgs(&c),
        json!([{"id":"a","role":"assistant","content":"xy","metadata":{"k":1,"j":2}}])
    );
}

// ----- reasoning -----------------------------------------------------------

#[test]
fn reasoning_lifecycle_and_replayed_start() {
    let c = run(json!([
        {"type":"REASONING_START","messageId":"span"},
        {"type":"REASONING_MESSAGE_START","messageId":"r","role":"reasoning"},
        {"type":"REASONING_MESSAGE_CONTENT","messageId":"r","delta":"  "},
        {"type":"REASONING_MESSAGE_CONTENT","messageId":"r","delta":"think"},
        {"type":"REASONING_MESSAGE_END","messageId":"r"},
        {"type":"REASONING_MESSAGE_START","messageId":"r","role":"reasoning"},
        {"type":"REASONING_END","messageId":"span"}
    ]));
    assert_eq!(
        msgs(&c),
        json!([{"id":"r","role":"reasoning","content":"  think"}])
    );
}

#[test]
fn reasoning_events_on_an_activity_id_are_ignored() {
    let c = run(json!([
        {"type":"ACTIVITY_SNAPSHOT","messageId":"a","activityType":"P","content":{}},
        {"type":"REASONING_MESSAGE_START","messageId":"a","role":"reasoning"},
        {"type":"REASONING_MESSAGE_CONTENT","messageId":"a","delta":"x"},
        {"type":"REASONING_MESSAGE_END","messageId":"a","metadata":{"m":1}}
    ]));
    assert_eq!(
        msgs(&c),
        json!([{"id":"a","role":"activity","activityType":"P","content":{}}])
    );
}

#[test]
fn encrypted_values_land_on_tool_calls_and_messages_only() {
    let c = run(json!([
        {"type":"TEXT_MESSAGE_START","messageId":"u","role":"user"},
        {"type":"REASONING_MESSAGE_START","messageId":"r","role":"reasoning"},
        {"type":"TOOL_CALL_START","toolCallId":"t","toolCallName":"f"},
        {"type":"ACTIVITY_SNAPSHOT","messageId":"a","activityType":"P","content":{}},
        {"type":"REASONING_ENCRYPTED_VALUE","subtype":"tool-call","entityId":"t","encryptedValue":"e1","metadata":{"no":1}},
        {"type":"REASONING_ENCRYPTED_VALUE","subtype":"message","entityId":"r","encryptedValue":"e2"},
        {"type":"REASONING_ENCRYPTED_VALUE","subtype":"message","entityId":"u","encryptedValue":"e3"},
        {"type":"REASONING_ENCRYPTED_VALUE","subtype":"message","entityId":"a","encryptedValue":"e4"},
        {"type":"REASONING_ENCRYPTED_VALUE","subtype":"tool-call","entityId":"u","encryptedValue":"e5"},
        {"type":"REASONING_ENCRYPTED_VALUE","subtype":"message","entityId":"ghost","encryptedValue":"e6"}
    ]));
    assert_eq!(
        msgs(&c),
        json!([
            {"id":"u","role":"user","content":"","encryptedValue":"e3"},
            {"id":"r","role":"reasoning","content":"","encryptedValue":"e2"},
            {"id":"t","role":"assistant","toolCalls":[
                {"id":"t","type":"function","function":{"name":"f","arguments":""},"encryptedValue":"e1"}
            ]},
            {"id":"a","role":"activity","activityType":"P","content":{}}
        ])
    );
}

#[test]
fn tool_call_encrypted_values_only_match_assistant_messages() {
    let c = run_from(
        json!([{"id":"u","role":"user","content":"x","toolCalls":[
            {"id":"t","type":"function","function":{"name":"f","arguments":""}}
        ]}]),
        json!([{"type":"REASONING_ENCRYPTED_VALUE","subtype":"tool-call","entityId":"t","encryptedValue":"e"}]),
    );
    assert!(
        c.messages[0]["toolCalls"][0]
            .get("encryptedValue")
            .is_none()
    );
}

// ----- chunks --------------------------------------------------------------

#[test]
fn chunks_are_expanded_before_they_are_applied() {
    let c = run(json!([
        {"type":"TEXT_MESSAGE_CHUNK","messageId":"m","delta":"Hel"},
        {"type":"TEXT_MESSAGE_CHUNK","delta":"lo"},
        {"type":"TOOL_CALL_CHUNK","toolCallId":"t","toolCallName":"f","parentMessageId":"m","delta":"{}"},
        {"type":"RUN_FINISHED","threadId":"t","runId":"r"}
    ]));
    assert_eq!(
        msgs(&c),
        json!([{"id":"m","role":"assistant","content":"Hello","toolCalls":[
            {"id":"t","type":"function","function":{"name":"f","arguments":"{}"}}
        ]}])
    );
}

#[test]
fn a_malformed_chunk_aborts_with_its_index() {
    let evs = events(json!([
        {"type":"RUN_STARTED","threadId":"t","runId":"r"},
        {"type":"TEXT_MESSAGE_CHUNK","delta":"no id"}
    ]));
    match reduce(&evs, Conversation::default()) {
        Err(ReduceError::Chunk { index, .. }) => assert_eq!(index, 1),
        other => panic!("expected a chunk error, got {other:?}"),
    }
}

// ----- metadata ------------------------------------------------------------

#[test]
fn metadata_merges_key_by_key_last_write_wins() {
    let c = run(json!([
        {"type":"TEXT_MESSAGE_START","messageId":"m","metadata":{"a":1,"list":[1],"ag-ui":{"x":1}}},
        {"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"x","metadata":{}},
        {"type":"TEXT_MESSAGE_END","messageId":"m","metadata":{"list":[2],"ag-ui":{"y":2},"n":null}}
    ]));
    assert_eq!(
        c.messages[0]["metadata"],
        json!({"a":1,"list":[2],"ag-ui":{"y":2},"n":null})
    );
    let none = run(json!([{"type":"TEXT_MESSAGE_START","messageId":"m"}]));
    assert!(none.messages[0].get("metadata").is_none());
}

#[test]
fn tool_events_merge_into_the_tool_call_and_results_into_the_tool_message() {
    let c = run(json!([
        {"type":"TOOL_CALL_START","toolCallId":"t","toolCallName":"f","metadata":{"s":1}},
        {"type":"TOOL_CALL_ARGS","toolCallId":"t","delta":"","metadata":{"a":1}},
        {"type":"TOOL_CALL_END","toolCallId":"t","metadata":{"e":1}},
        {"type":"TOOL_CALL_RESULT","messageId":"r","toolCallId":"t","content":"ok","metadata":{"r":1}}
    ]));
    assert!(c.messages[0].get("metadata").is_none());
    assert_eq!(
        c.messages[0]["toolCalls"][0]["metadata"],
        json!({"s":1,"a":1,"e":1})
    );
    assert_eq!(c.messages[1]["metadata"], json!({"r":1}));
}

#[test]
fn run_step_state_and_special_event_metadata_stays_on_the_event() {
    let c = run(json!([
        {"type":"RUN_STARTED","threadId":"t","runId":"r","metadata":{"x":1}},
        {"type":"TEXT_MESSAGE_START","messageId":"m"},
        {"type":"STEP_STARTED","stepName":"s","metadata":{"x":1}},
        {"type":"STATE_SNAPSHOT","snapshot":{},"metadata":{"x":1}},
        {"type":"CUSTOM","name":"c","value":1,"metadata":{"x":1}},
        {"type":"REASONING_START","messageId":"m","metadata":{"x":1}},
        {"type":"STEP_FINISHED","stepName":"s","metadata":{"x":1}},
        {"type":"RUN_FINISHED","threadId":"t","runId":"r","metadata":{"x":1}}
    ]));
    assert_eq!(
        msgs(&c),
        json!([{"id":"m","role":"assistant","content":""}])
    );
}

// ----- runs ----------------------------------------------------------------

#[test]
fn run_started_input_messages_are_added_when_absent() {
    let c = run_from(
        json!([{"id":"m0","role":"user","content":"mine"}]),
        json!([
            {"type":"RUN_STARTED","threadId":"t","runId":"r","input":{"threadId":"t","runId":"r","messages":[
                {"id":"m0","role":"user","content":"theirs"},
                {"id":"m1","role":"user","content":"a","subagentRunId":null},
                {"id":"m1","role":"user","content":"dup"}
            ]}},
            {"type":"TEXT_MESSAGE_START","messageId":"m2"},
            {"type":"RUN_STARTED","threadId":"t","runId":"r2"},
            {"type":"RUN_STARTED","threadId":"t","runId":"r3","input":{"threadId":"t","runId":"r3"}}
        ]),
    );
    assert_eq!(
        msgs(&c),
        json!([
            {"id":"m0","role":"user","content":"mine"},
            {"id":"m1","role":"user","content":"a"},
            {"id":"m2","role":"assistant","content":""}
        ])
    );
}

#[test]
fn interrupt_outcome_sets_pending_interrupts() {
    let r = reducer(json!([
        {"type":"RUN_STARTED","threadId":"t","runId":"r"},
        {"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":{"type":"interrupt","interrupts":[
            {"id":"i1","reason":"approve","subagentRunId":null},{"id":"i2","subagentRunId":"s"}
        ]}}
    ]));
    assert_eq!(
        r.pending_interrupts(),
        [
            json!({"id":"i1","reason":"approve"}),
            json!({"id":"i2","subagentRunId":"s"})
        ]
    );
    assert_eq!(r.last_outcome(), Some(&RunOutcome::Interrupt));
}

#[test]
fn cancelled_clears_interrupts_and_has_no_result() {
    let r = reducer(json!([
        {"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":{"type":"interrupt","interrupts":[{"id":"i"}]}},
        {"type":"RUN_STARTED","threadId":"t","runId":"r2"},
        {"type":"RUN_FINISHED","threadId":"t","runId":"r2","outcome":{"type":"cancelled"},"result":"x"}
    ]));
    assert!(r.pending_interrupts().is_empty());
    assert_eq!(r.last_outcome(), Some(&RunOutcome::Cancelled));
}

#[test]
fn pending_tool_calls_are_derived_from_the_run_unless_named() {
    let r = reducer(json!([
        {"type":"TOOL_CALL_START","toolCallId":"before","toolCallName":"f"},
        {"type":"RUN_STARTED","threadId":"t","runId":"r"},
        {"type":"TOOL_CALL_START","toolCallId":"a","toolCallName":"f"},
        {"type":"TOOL_CALL_START","toolCallId":"b","toolCallName":"f"},
        {"type":"TOOL_CALL_RESULT","messageId":"ra","toolCallId":"a","content":"ok"},
        {"type":"RUN_FINISHED","threadId":"t","runId":"r","result":{"done":true}}
    ]));
    assert_eq!(
        r.last_outcome(),
        Some(&RunOutcome::Success {
            result: Some(json!({"done":true})),
            pending_tool_call_ids: vec![json!("b")],
        })
    );
    let named = reducer(json!([
        {"type":"TOOL_CALL_START","toolCallId":"a","toolCallName":"f"},
        {"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":{"type":"success","pendingToolCallIds":["z"]}}
    ]));
    assert_eq!(
        named.last_outcome(),
        Some(&RunOutcome::Success {
            result: None,
            pending_tool_call_ids: vec![json!("z")],
        })
    );
}

// ----- attribution ---------------------------------------------------------

#[test]
fn subagent_attribution_is_copied_onto_created_messages_only() {
    let c = run(json!([
        {"type":"TEXT_MESSAGE_START","messageId":"m","subagentRunId":"s1"},
        {"type":"REASONING_MESSAGE_START","messageId":"r","role":"reasoning","subagentRunId":"s2"},
        {"type":"TOOL_CALL_START","toolCallId":"t","toolCallName":"f","subagentRunId":"s3"},
        {"type":"TOOL_CALL_START","toolCallId":"t2","toolCallName":"f","parentMessageId":"m","subagentRunId":"s9"},
        {"type":"TOOL_CALL_RESULT","messageId":"tr","toolCallId":"t","content":"ok","subagentRunId":"s4"},
        {"type":"ACTIVITY_SNAPSHOT","messageId":"a","activityType":"P","content":{},"subagentRunId":"s5"}
    ]));
    let tags: Vec<Value> = c
        .messages
        .iter()
        .map(|m| m["subagentRunId"].clone())
        .collect();
    assert_eq!(
        tags,
        [
            json!("s1"),
            json!("s2"),
            json!("s3"),
            json!("s4"),
            json!("s5")
        ]
    );
}

// ----- the reducer itself --------------------------------------------------

#[test]
fn unknown_event_types_change_nothing() {
    let c = run(json!([
        {"type":"META","metaType":"x","payload":{}},
        {"type":"RAW","event":{}},
        {"type":"SUBAGENT_STARTED","subagentRunId":"s","name":"n"}
    ]));
    assert_eq!(c, Conversation::default());
}

#[test]
fn incremental_and_batch_agree_and_inputs_are_untouched() {
    let list = json!([
        {"type":"RUN_STARTED","threadId":"t","runId":"r","input":{"threadId":"t","runId":"r","messages":[{"id":"u","role":"user","content":"q"}]}},
        {"type":"TEXT_MESSAGE_START","messageId":"m"},
        {"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"a"},
        {"type":"STATE_DELTA","delta":[{"op":"add","path":"/k","value":{"v":1}}]},
        {"type":"STATE_DELTA","delta":[{"op":"add","path":"/k/w","value":2}]}
    ]);
    let evs = events(list.clone());
    let before: Vec<String> = evs.iter().map(|e| e.json().to_owned()).collect();
    let batch = reduce(&evs, Conversation::default()).unwrap();
    let mut r = Reducer::new(Conversation::default());
    for e in &evs {
        r.apply(e).unwrap();
    }
    assert_eq!(r.conversation(), &batch);
    assert_eq!(batch.state, json!({"k":{"v":1,"w":2}}));
    let after: Vec<String> = evs.iter().map(|e| e.json().to_owned()).collect();
    assert_eq!(before, after);
}

#[test]
fn conversation_serializes_as_messages_and_state() {
    let c = Conversation::default();
    assert_eq!(
        serde_json::to_value(&c).unwrap(),
        json!({"messages":[],"state":{}})
    );
    let back: Conversation =
        serde_json::from_value(json!({"messages":[{"id":"x"}],"state":1})).unwrap();
    assert_eq!(back.messages, vec![json!({"id":"x"})]);
}
