//! Events to `{messages, state}`, exactly as the official client.
//!
//! The reference is `@ag-ui/client` 1.0.0: `transformChunks` followed by
//! `defaultApplyEvents` (protocol reference §3), run on the events as they
//! are, without schema enforcement or sequence verification. Every rule of
//! that reducer is reproduced, including what it does with values the schema
//! would have refused (a missing `delta` appends `"undefined"`, a `null`
//! role is kept, ...), because the result must be the same JSON value.
//!
//! Cost is linear in the number of events: messages are found through an
//! id index and tool calls through a tool-call index, never by scanning, and
//! nothing is copied per event. The exceptions are the ones inherent in the
//! result's shape: a `TOOL_CALL_RESULT` inserted before `k` later messages
//! moves those `k` entries, a `MESSAGES_SNAPSHOT` rebuilds the list, and a
//! list holding a malformed message (not an object, or a `toolCalls` that is
//! not an array of tool calls) is searched the way JavaScript searches it.
//!
//! The reducer never mutates its input: events are read through borrowed
//! views and the starting conversation is owned.

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};

use agui_protocol::chunks::ChunkExpander;
use agui_protocol::{Event, EventType};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

mod fields;
mod js;
pub mod patch;

use fields::Fields;
use js::{Key, KeyRef};

/// The reducer's observable result: the message list and the state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Conversation {
    /// The messages, in order, with every field.
    pub messages: Vec<Value>,
    /// The state (any JSON value).
    pub state: Value,
}

impl Default for Conversation {
    /// No messages and the state `{}`, as a fresh agent.
    fn default() -> Self {
        Conversation {
            messages: Vec::new(),
            state: Value::Object(Map::new()),
        }
    }
}

/// How the last run ended, as the official client reports it to
/// `onRunFinishedEvent` (not stored state).
#[derive(Clone, Debug, PartialEq)]
pub enum RunOutcome {
    /// An absent, `success` or unrecognised outcome.
    Success {
        /// The run's `result`, when sent.
        result: Option<Value>,
        /// The producer's non-empty `pendingToolCallIds`, otherwise the tool
        /// calls started since the last `RUN_STARTED` and not answered by a
        /// `TOOL_CALL_RESULT`, in first-seen order.
        pending_tool_call_ids: Vec<Value>,
    },
    /// `interrupt`: the interrupts are in [`Reducer::pending_interrupts`].
    Interrupt,
    /// `cancelled`: no result, nothing to resume.
    Cancelled,
}

/// What aborts the official pipeline (skipped events are not errors).
#[derive(Debug, thiserror::Error)]
pub enum ReduceError {
    /// Chunk expansion refused a chunk (the official `transformChunks` throws).
    #[error("event {index}: chunk expansion failed: {reason}")]
    Chunk {
        /// Index of the input event.
        index: usize,
        /// What the expander reported.
        reason: String,
    },
    /// A chunk event reached the reducer without being expanded.
    #[error("event {index}: {event_type} must be expanded before it is applied")]
    UnexpandedChunk {
        /// Index of the input event.
        index: usize,
        /// The chunk's type.
        event_type: String,
    },
    /// The official reducer throws a JavaScript `TypeError` on this event
    /// (a malformed value it reads without checking).
    #[error("event {index} ({event_type}): the official reducer throws: {reason}")]
    Throws {
        /// Index of the input event.
        index: usize,
        /// The event's type.
        event_type: String,
        /// Which value is malformed.
        reason: String,
    },
    /// A field could not be decoded (e.g. a string with a lone surrogate).
    #[error("event {index} ({event_type}): cannot decode a field: {source}")]
    Field {
        /// Index of the input event.
        index: usize,
        /// The event's type.
        event_type: String,
        /// The decoding error.
        #[source]
        source: serde_json::Error,
    },
}

/// An internal failure, located by [`Reducer::apply`].
enum Fail {
    Chunk(String),
    Throws(String),
    Field(serde_json::Error),
    Unexpanded,
}

impl From<serde_json::Error> for Fail {
    fn from(e: serde_json::Error) -> Self {
        Fail::Field(e)
    }
}

fn throws<T>(reason: impl Into<String>) -> Result<T, Fail> {
    Err(Fail::Throws(reason.into()))
}

/// Message ids (and tool-call ids) to their holders, without allocating on
/// look-up for string ids.
struct IdMap<V> {
    strings: HashMap<Box<str>, V>,
    others: HashMap<Key, V>,
}

impl<V> Default for IdMap<V> {
    fn default() -> Self {
        IdMap {
            strings: HashMap::new(),
            others: HashMap::new(),
        }
    }
}

impl<V: Default> IdMap<V> {
    fn get(&self, key: &KeyRef<'_>) -> Option<&V> {
        match key {
            KeyRef::Str(s) => self.strings.get(s.as_ref()),
            KeyRef::Never => None,
            other => self.others.get(&other.to_owned_key()?),
        }
    }

    fn get_mut(&mut self, key: &KeyRef<'_>) -> Option<&mut V> {
        match key {
            KeyRef::Str(s) => self.strings.get_mut(s.as_ref()),
            KeyRef::Never => None,
            other => self.others.get_mut(&other.to_owned_key()?),
        }
    }

    /// The entry for `key`, created if needed (`None` for unmatchable ids).
    fn entry(&mut self, key: &KeyRef<'_>) -> Option<&mut V> {
        match key {
            KeyRef::Str(s) => {
                if !self.strings.contains_key(s.as_ref()) {
                    self.strings.insert(s.as_ref().into(), V::default());
                }
                self.strings.get_mut(s.as_ref())
            }
            KeyRef::Never => None,
            other => Some(self.others.entry(other.to_owned_key()?).or_default()),
        }
    }

    fn clear(&mut self) {
        self.strings.clear();
        self.others.clear();
    }
}

/// The holders of one id: almost always exactly one, kept without a heap
/// allocation (one per message and per tool call adds up on long threads).
#[derive(Default)]
enum Few<T> {
    #[default]
    Empty,
    One(T),
    Many(Vec<T>),
}

impl<T: Copy> Few<T> {
    fn push(&mut self, x: T) {
        *self = match std::mem::take(self) {
            Few::Empty => Few::One(x),
            Few::One(a) => Few::Many(vec![a, x]),
            Few::Many(mut v) => {
                v.push(x);
                Few::Many(v)
            }
        };
    }

    fn as_slice(&self) -> &[T] {
        match self {
            Few::Empty => &[],
            Few::One(a) => std::slice::from_ref(a),
            Few::Many(v) => v,
        }
    }

    fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        match self {
            Few::Empty => {}
            Few::One(a) => {
                if !keep(a) {
                    *self = Few::Empty;
                }
            }
            Few::Many(v) => v.retain(keep),
        }
    }
}

/// Where a tool-call search looks, mirroring the three searches of the
/// official reducer.
#[derive(Clone, Copy, PartialEq, Eq)]
enum TcSearch {
    /// `messages.find(m => m.toolCalls?.some(tc => tc.id === id))`.
    Any,
    /// `m.role === "assistant" && m.toolCalls?.some(...)`.
    Assistant,
    /// `m.role === "assistant" && m.toolCalls` then `.find(...)`.
    AssistantTruthy,
}

/// Reduces events one at a time.
pub struct Reducer {
    conv: Conversation,
    /// False when the official reducer's own `state` is `undefined` (a
    /// `STATE_SNAPSHOT` without `snapshot`): the visible state is then the
    /// last one it emitted, which is `conv.state`.
    state_defined: bool,
    /// Position → handle, and handle → position.
    handles: Vec<u32>,
    pos: Vec<u32>,
    /// Handle → object identity. Two positions share one when the official
    /// reducer holds the same object twice (a snapshot replacing two local
    /// messages with one id); a change to one then shows in both.
    obj: Vec<u32>,
    next_obj: u32,
    aliased: bool,
    ids: IdMap<Few<u32>>,
    tool_calls: IdMap<Few<(u32, u32)>>,
    /// Messages JavaScript would search differently (see the module docs).
    irregular: usize,
    /// The run's tool-call ids in first-seen order (`None` key: an object
    /// id, never equal to another).
    run_tool_calls: Vec<(Option<Key>, Value)>,
    run_tool_call_keys: HashSet<Key>,
    answered: HashSet<Key>,
    pending_interrupts: Vec<Value>,
    outcome: Option<RunOutcome>,
    chunks: ChunkStage,
    applied: usize,
    /// Every message below this index is unchanged since construction or
    /// the last [`Reducer::reset_change_mark`] (see
    /// [`Reducer::messages_changed_from`]).
    changed_from: usize,
}

/// The chunk-expansion stage in front of the reducer (the official
/// `transformChunks`): the one place events are expanded.
#[derive(Default)]
struct ChunkStage {
    expander: ChunkExpander,
    /// The events synthesized for the current input event (reused).
    buffer: Vec<Event>,
}

impl ChunkStage {
    /// Expands one input event into `self.buffer`; returns whether the event
    /// itself follows the buffered ones.
    fn push(&mut self, event: &Event) -> Result<bool, Fail> {
        self.buffer.clear();
        // Fast path: nothing open and not a chunk, so the event passes as it is.
        if !self.expander.has_open() && !is_chunk(event.event_type()) {
            return Ok(true);
        }
        self.expander
            .push_into(event, &mut self.buffer)
            .map_err(|e| Fail::Chunk(e.to_string()))
    }
}

fn is_chunk(ty: &EventType) -> bool {
    matches!(
        ty,
        EventType::TextMessageChunk | EventType::ToolCallChunk | EventType::ReasoningMessageChunk
    )
}

/// Reduces `events` from `start` to the final conversation.
pub fn reduce<'a>(
    events: impl IntoIterator<Item = &'a Event>,
    start: Conversation,
) -> Result<Conversation, ReduceError> {
    let mut reducer = Reducer::new(start);
    for event in events {
        reducer.apply(event)?;
    }
    Ok(reducer.into_conversation())
}

fn role(message: &Value) -> Option<&Value> {
    js::prop(message, "role")
}

fn is_role(message: &Value, name: &str) -> bool {
    js::is_str(role(message), name)
}

/// A message JavaScript would search differently from the index.
fn is_irregular(message: &Value) -> bool {
    let Value::Object(map) = message else {
        return true;
    };
    match map.get("toolCalls") {
        None | Some(Value::Null) => false,
        Some(Value::Array(calls)) => calls.iter().any(|tc| {
            !matches!(tc, Value::Object(m) if matches!(m.get("function"), Some(Value::Object(_))))
        }),
        Some(_) => true,
    }
}

/// `target.metadata = mergeMetadata(target.metadata, clone(metadata))`.
///
/// The merged object is `{...existing, ...incoming}`; when both are objects
/// it is built in place (the same keys in the same order: existing keys keep
/// their position and take the incoming value, new keys come last).
fn merge_metadata_into(target: &mut Value, metadata: Value) -> Result<(), Fail> {
    match target {
        Value::Object(map) => {
            match (map.get_mut("metadata"), metadata) {
                (Some(Value::Object(existing)), Value::Object(incoming)) => {
                    for (k, v) in incoming {
                        existing.insert(k, v);
                    }
                }
                (None | Some(Value::Null), Value::Object(incoming)) => {
                    map.insert("metadata".into(), Value::Object(incoming));
                }
                (existing, incoming) => {
                    let merged = js::merge_metadata(existing.as_deref(), &incoming);
                    map.insert("metadata".into(), merged);
                }
            }
            Ok(())
        }
        // A property set on an array does not show in JSON.
        Value::Array(_) => Ok(()),
        // `!target` returns early for a falsy primitive; a truthy one
        // throws in strict mode.
        other if !js::truthy(Some(other)) => Ok(()),
        _ => throws("cannot create property 'metadata' on a primitive message"),
    }
}

/// `target[name] = value` (`None` = `undefined`, which JSON drops).
fn set_prop(target: &mut Value, name: &str, value: Option<Value>) -> Result<(), Fail> {
    match target {
        Value::Object(map) => {
            match value {
                Some(v) => {
                    map.insert(name.into(), v);
                }
                None => {
                    map.shift_remove(name);
                }
            }
            Ok(())
        }
        Value::Array(_) => Ok(()),
        _ => throws(format!("cannot create property '{name}' on a primitive")),
    }
}

impl Reducer {
    /// A reducer starting from `start` (the agent's messages and the run
    /// input's state).
    pub fn new(start: Conversation) -> Reducer {
        let mut reducer = Reducer {
            conv: start,
            state_defined: true,
            handles: Vec::new(),
            pos: Vec::new(),
            obj: Vec::new(),
            next_obj: 0,
            aliased: false,
            ids: IdMap::default(),
            tool_calls: IdMap::default(),
            irregular: 0,
            run_tool_calls: Vec::new(),
            run_tool_call_keys: HashSet::new(),
            answered: HashSet::new(),
            pending_interrupts: Vec::new(),
            outcome: None,
            chunks: ChunkStage::default(),
            applied: 0,
            changed_from: 0,
        };
        let objs: Vec<u32> = (0..reducer.conv.messages.len())
            .map(|_| reducer.fresh_obj())
            .collect();
        reducer.rebuild(objs);
        reducer.changed_from = reducer.conv.messages.len();
        reducer
    }

    /// The lowest message index inserted, replaced, removed or changed in
    /// place since construction or the last [`Self::reset_change_mark`]:
    /// the messages below it are exactly as they were then (a list that only
    /// grew reports its old length). A caller that kept the earlier list can
    /// rebuild the current one from its first `messages_changed_from()`
    /// messages and `conversation().messages[messages_changed_from()..]`.
    /// The state is not tracked.
    pub fn messages_changed_from(&self) -> usize {
        self.changed_from.min(self.conv.messages.len())
    }

    /// Starts a new change window: every current message counts as unchanged.
    pub fn reset_change_mark(&mut self) {
        self.changed_from = self.conv.messages.len();
    }

    /// Records that the message at position `p` (and so everything after it,
    /// for the watermark) changes.
    fn touch(&mut self, p: usize) {
        self.changed_from = self.changed_from.min(p);
    }

    /// Applies one event (chunk expansion included).
    ///
    /// Events the official reducer skips (unknown targets, failing patches,
    /// unknown types) change nothing and are not errors.
    pub fn apply(&mut self, event: &Event) -> Result<(), ReduceError> {
        let index = self.applied;
        self.applied += 1;
        // Ends the official stage computes when the stream completes are
        // discarded, so nothing is needed at the end.
        let result = match self.chunks.push(event) {
            Ok(itself) => {
                // The synthesized events, then the event itself; the buffer
                // is lent out while they are applied.
                let buffer = std::mem::take(&mut self.chunks.buffer);
                let applied = buffer
                    .iter()
                    .try_for_each(|e| self.apply_expanded(e))
                    .and_then(|()| {
                        if itself {
                            self.apply_expanded(event)
                        } else {
                            Ok(())
                        }
                    });
                self.chunks.buffer = buffer;
                applied
            }
            Err(f) => Err(f),
        };
        result.map_err(|f| {
            let event_type = event.type_name().to_owned();
            match f {
                Fail::Chunk(reason) => ReduceError::Chunk { index, reason },
                Fail::Throws(reason) => ReduceError::Throws {
                    index,
                    event_type,
                    reason,
                },
                Fail::Field(source) => ReduceError::Field {
                    index,
                    event_type,
                    source,
                },
                Fail::Unexpanded => ReduceError::UnexpandedChunk { index, event_type },
            }
        })
    }

    /// The conversation so far.
    pub fn conversation(&self) -> &Conversation {
        &self.conv
    }

    /// The final conversation.
    pub fn into_conversation(self) -> Conversation {
        self.conv
    }

    /// `agent.pendingInterrupts`: the interrupts of the last `RUN_FINISHED`
    /// with an `interrupt` outcome (`subagentRunId: null` removed), `[]`
    /// after any other `RUN_FINISHED`.
    pub fn pending_interrupts(&self) -> &[Value] {
        &self.pending_interrupts
    }

    /// How the last `RUN_FINISHED` ended the run (`None` before any).
    pub fn last_outcome(&self) -> Option<&RunOutcome> {
        self.outcome.as_ref()
    }

    fn fresh_obj(&mut self) -> u32 {
        self.next_obj += 1;
        self.next_obj
    }

    // ----- indexes -------------------------------------------------------

    /// Rebuilds every index for the current message list; `objs[i]` is the
    /// object identity of message `i`.
    fn rebuild(&mut self, objs: Vec<u32>) {
        self.handles.clear();
        self.pos.clear();
        self.obj.clear();
        self.ids.clear();
        self.tool_calls.clear();
        self.irregular = 0;
        let mut seen = HashSet::new();
        self.aliased = false;
        for (i, o) in objs.into_iter().enumerate() {
            if !seen.insert(o) {
                self.aliased = true;
            }
            let h = i as u32;
            self.handles.push(h);
            self.pos.push(i as u32);
            self.obj.push(o);
            self.index_message(h);
        }
    }

    fn index_message(&mut self, h: u32) {
        let message = &self.conv.messages[self.pos[h as usize] as usize];
        if is_irregular(message) {
            self.irregular += 1;
        }
        let id_key = js::key_of(js::prop(message, "id"));
        let mut tcs: Vec<(KeyRef<'_>, u32)> = Vec::new();
        if let Some(Value::Array(calls)) = js::prop(message, "toolCalls") {
            for (j, tc) in calls.iter().enumerate() {
                tcs.push((js::key_of(js::prop(tc, "id")), j as u32));
            }
        }
        if let Some(list) = self.ids.entry(&id_key) {
            list.push(h);
        }
        for (k, j) in tcs {
            if let Some(list) = self.tool_calls.entry(&k) {
                list.push((h, j));
            }
        }
    }

    /// Removes what [`Self::index_message`] recorded for the tool calls and
    /// regularity of message `h` (its id never changes in place).
    fn unindex_tool_calls(&mut self, h: u32) {
        let message = &self.conv.messages[self.pos[h as usize] as usize];
        if is_irregular(message) {
            self.irregular -= 1;
        }
        if let Some(Value::Array(calls)) = js::prop(message, "toolCalls") {
            let keys: Vec<KeyRef<'_>> = calls
                .iter()
                .map(|tc| js::key_of(js::prop(tc, "id")))
                .collect();
            for k in keys {
                if let Some(list) = self.tool_calls.get_mut(&k) {
                    list.retain(|(hh, _)| *hh != h);
                }
            }
        }
    }

    fn index_tool_calls_only(&mut self, h: u32) {
        let message = &self.conv.messages[self.pos[h as usize] as usize];
        if is_irregular(message) {
            self.irregular += 1;
        }
        let mut tcs: Vec<(KeyRef<'_>, u32)> = Vec::new();
        if let Some(Value::Array(calls)) = js::prop(message, "toolCalls") {
            for (j, tc) in calls.iter().enumerate() {
                tcs.push((js::key_of(js::prop(tc, "id")), j as u32));
            }
        }
        for (k, j) in tcs {
            if let Some(list) = self.tool_calls.entry(&k) {
                list.push((h, j));
            }
        }
    }

    /// Replaces the object at position `p` with `value`, as a new object.
    fn replace_at(&mut self, p: usize, value: Value) {
        let h = self.handles[p];
        self.unindex_tool_calls(h);
        self.touch(p);
        self.conv.messages[p] = value;
        let o = self.fresh_obj();
        self.obj[h as usize] = o;
        self.index_tool_calls_only(h);
    }

    /// After an in-place change of the object at position `p`, shows the
    /// change at every position holding the same object.
    fn propagate(&mut self, p: usize) {
        if !self.aliased {
            return;
        }
        let h = self.handles[p];
        let o = self.obj[h as usize];
        let others: Vec<usize> = (0..self.handles.len())
            .filter(|&q| q != p && self.obj[self.handles[q] as usize] == o)
            .collect();
        for q in others {
            let hq = self.handles[q];
            self.unindex_tool_calls(hq);
            self.touch(q);
            self.conv.messages[q] = self.conv.messages[p].clone();
            self.index_tool_calls_only(hq);
        }
    }

    /// Appends a new object.
    fn push_message(&mut self, value: Value) -> usize {
        let p = self.conv.messages.len();
        self.insert_message(p, value);
        p
    }

    /// Inserts a new object at position `p`, shifting the later ones.
    fn insert_message(&mut self, p: usize, value: Value) {
        let h = self.pos.len() as u32;
        self.touch(p);
        self.conv.messages.insert(p, value);
        self.handles.insert(p, h);
        self.pos.push(p as u32);
        let o = self.fresh_obj();
        self.obj.push(o);
        for q in p + 1..self.handles.len() {
            self.pos[self.handles[q] as usize] = q as u32;
        }
        self.index_message(h);
    }

    // ----- searches ------------------------------------------------------

    /// `messages.findIndex(m => m.id === key)`.
    fn find_message(&self, key: &KeyRef<'_>) -> Result<Option<usize>, Fail> {
        if self.irregular > 0 {
            for (p, m) in self.conv.messages.iter().enumerate() {
                if m.is_null() {
                    return throws("a message is null (reading 'id')");
                }
                if *key != KeyRef::Never && js::key_of(js::prop(m, "id")) == *key {
                    return Ok(Some(p));
                }
            }
            return Ok(None);
        }
        Ok(self.ids.get(key).and_then(|hs| {
            hs.as_slice()
                .iter()
                .map(|&h| self.pos[h as usize] as usize)
                .min()
        }))
    }

    /// The first message (in list order) holding a tool call with this id,
    /// and the index of the first such tool call in it.
    fn find_tool_call(
        &self,
        key: &KeyRef<'_>,
        search: TcSearch,
    ) -> Result<Option<(usize, usize)>, Fail> {
        if self.irregular > 0 {
            return self.scan_tool_call(key, search);
        }
        let Some(hits) = self.tool_calls.get(key) else {
            return Ok(None);
        };
        let mut best: Option<(usize, usize)> = None;
        for &(h, j) in hits.as_slice() {
            let p = self.pos[h as usize] as usize;
            if search != TcSearch::Any && !is_role(&self.conv.messages[p], "assistant") {
                continue;
            }
            let cand = (p, j as usize);
            if best.is_none_or(|b| cand < b) {
                best = Some(cand);
            }
        }
        Ok(best)
    }

    /// The same search, the way JavaScript runs it (for malformed lists).
    fn scan_tool_call(
        &self,
        key: &KeyRef<'_>,
        search: TcSearch,
    ) -> Result<Option<(usize, usize)>, Fail> {
        for (p, m) in self.conv.messages.iter().enumerate() {
            if m.is_null() {
                return throws("a message is null");
            }
            if search != TcSearch::Any && !is_role(m, "assistant") {
                continue;
            }
            let calls = js::prop(m, "toolCalls");
            if search == TcSearch::AssistantTruthy && !js::truthy(calls) {
                continue;
            }
            match calls {
                None | Some(Value::Null) => continue,
                Some(Value::Array(calls)) => {
                    for (j, tc) in calls.iter().enumerate() {
                        if tc.is_null() {
                            return throws("a tool call is null (reading 'id')");
                        }
                        if *key != KeyRef::Never && js::key_of(js::prop(tc, "id")) == *key {
                            return Ok(Some((p, j)));
                        }
                    }
                }
                Some(_) => return throws("toolCalls is not an array"),
            }
        }
        Ok(None)
    }

    fn tool_call_mut(&mut self, p: usize, j: usize) -> Option<&mut Value> {
        self.touch(p);
        self.conv.messages[p]
            .as_object_mut()?
            .get_mut("toolCalls")?
            .as_array_mut()?
            .get_mut(j)
    }

    // ----- events --------------------------------------------------------

    fn apply_expanded(&mut self, event: &Event) -> Result<(), Fail> {
        use EventType as T;
        match event.event_type() {
            T::TextMessageStart => self.message_start(event, false),
            T::ReasoningMessageStart => self.message_start(event, true),
            T::TextMessageContent | T::ReasoningMessageContent => self.message_content(event),
            T::TextMessageEnd | T::ReasoningMessageEnd => self.message_end(event),
            T::ToolCallStart => self.tool_call_start(event),
            T::ToolCallArgs => self.tool_call_args(event),
            T::ToolCallEnd => self.tool_call_end(event),
            T::ToolCallResult => self.tool_call_result(event),
            T::StateSnapshot => self.state_snapshot(event),
            T::StateDelta => self.state_delta(event),
            T::MessagesSnapshot => self.messages_snapshot(event),
            T::ActivitySnapshot => self.activity_snapshot(event),
            T::ActivityDelta => self.activity_delta(event),
            T::RunStarted => self.run_started(event),
            T::RunFinished => self.run_finished(event),
            T::ReasoningEncryptedValue => self.encrypted_value(event),
            T::TextMessageChunk | T::ToolCallChunk | T::ReasoningMessageChunk => {
                Err(Fail::Unexpanded)
            }
            // RUN_ERROR, STEP_*, RAW, CUSTOM, REASONING_START/END,
            // SUBAGENT_* and unknown types change nothing.
            _ => Ok(()),
        }
    }

    /// Merges the event's metadata (if any) into message `p`.
    fn merge_into_message(&mut self, p: usize, f: &Fields<'_>) -> Result<(), Fail> {
        if let Some(md) = f.value("metadata")? {
            self.touch(p);
            merge_metadata_into(&mut self.conv.messages[p], md)?;
            self.propagate(p);
        }
        Ok(())
    }

    fn message_start(&mut self, event: &Event, reasoning: bool) -> Result<(), Fail> {
        let f = Fields::parse(event.json())?;
        let key = f.key("messageId")?;
        let existing = self.find_message(&key)?;
        if let Some(p) = existing {
            if is_role(&self.conv.messages[p], "activity") {
                return Ok(());
            }
            return self.merge_into_message(p, &f);
        }
        let mut m = Map::new();
        if let Some(id) = f.value("messageId")? {
            m.insert("id".into(), id);
        }
        let role = if reasoning {
            Value::String("reasoning".into())
        } else {
            f.value("role")?
                .unwrap_or_else(|| Value::String("assistant".into()))
        };
        m.insert("role".into(), role);
        m.insert("content".into(), Value::String(String::new()));
        match f.value("name")? {
            Some(name) if !reasoning => {
                m.insert("name".into(), name);
            }
            _ => {}
        }
        if f.is_set("subagentRunId") {
            m.insert(
                "subagentRunId".into(),
                f.value("subagentRunId")?.unwrap_or(Value::Null),
            );
        }
        let p = self.push_message(Value::Object(m));
        self.merge_into_message(p, &f)
    }

    fn message_content(&mut self, event: &Event) -> Result<(), Fail> {
        let f = Fields::parse(event.json())?;
        let key = f.key("messageId")?;
        let Some(p) = self.find_message(&key)? else {
            return Ok(());
        };
        if is_role(&self.conv.messages[p], "activity") {
            return Ok(());
        }
        let delta_str = f.str("delta")?;
        self.touch(p);
        let target = &mut self.conv.messages[p];
        match target {
            Value::Object(map) => {
                if !matches!(map.get("content"), Some(Value::String(_))) {
                    map.insert("content".into(), Value::String(String::new()));
                }
                if let Some(Value::String(s)) = map.get_mut("content") {
                    match &delta_str {
                        Some(d) => s.push_str(d),
                        None => {
                            let delta = f.value("delta")?;
                            js::to_js_string(delta.as_ref(), s);
                        }
                    }
                }
            }
            Value::Array(_) => {}
            _ => return throws("cannot set 'content' on a primitive message"),
        }
        self.propagate(p);
        self.merge_into_message(p, &f)
    }

    fn message_end(&mut self, event: &Event) -> Result<(), Fail> {
        let f = Fields::parse(event.json())?;
        let key = f.key("messageId")?;
        let Some(p) = self.find_message(&key)? else {
            return Ok(());
        };
        if is_role(&self.conv.messages[p], "activity") {
            return Ok(());
        }
        self.merge_into_message(p, &f)
    }

    /// `if (!runToolCallIds.includes(id)) runToolCallIds.push(id)`.
    fn tally_tool_call(&mut self, key: &KeyRef<'_>, id: Option<Value>) {
        // `undefined` prints as `null` in a JSON array.
        let id = id.unwrap_or(Value::Null);
        match key.to_owned_key() {
            Some(k) => {
                if self.run_tool_call_keys.insert(k.clone()) {
                    self.run_tool_calls.push((Some(k), id));
                }
            }
            None => self.run_tool_calls.push((None, id)),
        }
    }

    fn tool_call_start(&mut self, event: &Event) -> Result<(), Fail> {
        let f = Fields::parse(event.json())?;
        let tc_key = f.key("toolCallId")?;
        let tc_id = f.value("toolCallId")?;
        let name = f.value("toolCallName")?;
        self.tally_tool_call(&tc_key, tc_id.clone());
        let metadata = f.value("metadata")?;

        if let Some((p, j)) = self.find_tool_call(&tc_key, TcSearch::Any)? {
            let Some(tc) = self.tool_call_mut(p, j) else {
                return throws("the tool call is not an object");
            };
            let Some(Value::Object(function)) = js::prop(tc, "function") else {
                return throws("the tool call has no function object");
            };
            let renamed = !js::strict_eq(function.get("name"), name.as_ref());
            match tc.as_object_mut().and_then(|m| m.get_mut("function")) {
                Some(Value::Object(function)) if renamed => match name {
                    Some(n) => {
                        function.insert("name".into(), n);
                    }
                    None => {
                        function.shift_remove("name");
                    }
                },
                _ => {}
            }
            if let Some(md) = metadata {
                merge_metadata_into(tc, md)?;
            }
            self.propagate(p);
            return Ok(());
        }

        let parent = f.value("parentMessageId")?;
        let mut owner: Option<usize> = None;
        let mut new_id: Option<Value> = tc_id.clone();
        if js::truthy(parent.as_ref()) {
            let parent_key = js::key_of(parent.as_ref());
            let existing = self.find_message(&parent_key)?;
            match existing {
                Some(p) if is_role(&self.conv.messages[p], "assistant") => owner = Some(p),
                Some(_) => {}
                None => new_id = parent.clone(),
            }
        }
        let p = match owner {
            Some(p) => p,
            None => {
                let id_key = js::key_of(new_id.as_ref());
                let pre_existing = self.find_message(&id_key)?.is_some();
                let mut m = Map::new();
                if let Some(id) = new_id {
                    m.insert("id".into(), id);
                }
                m.insert("role".into(), Value::String("assistant".into()));
                m.insert("toolCalls".into(), Value::Array(Vec::new()));
                if !pre_existing && f.is_set("subagentRunId") {
                    m.insert(
                        "subagentRunId".into(),
                        f.value("subagentRunId")?.unwrap_or(Value::Null),
                    );
                }
                self.push_message(Value::Object(m))
            }
        };

        let mut tc = Map::new();
        if let Some(id) = tc_id {
            tc.insert("id".into(), id);
        }
        tc.insert("type".into(), Value::String("function".into()));
        let mut function = Map::new();
        if let Some(n) = name {
            function.insert("name".into(), n);
        }
        function.insert("arguments".into(), Value::String(String::new()));
        tc.insert("function".into(), Value::Object(function));
        let mut tc = Value::Object(tc);
        if let Some(md) = metadata {
            merge_metadata_into(&mut tc, md)?;
        }
        self.touch(p);
        let target = &mut self.conv.messages[p];
        let Value::Object(map) = target else {
            return throws("the owner message is not an object");
        };
        let calls = map.entry("toolCalls").or_insert(Value::Null);
        if calls.is_null() {
            *calls = Value::Array(Vec::new());
        }
        let Value::Array(calls) = calls else {
            return throws("toolCalls.push is not a function");
        };
        let j = calls.len() as u32;
        calls.push(tc);
        let h = self.handles[p];
        if let Some(list) = self.tool_calls.entry(&tc_key) {
            list.push((h, j));
        }
        self.propagate(p);
        Ok(())
    }

    fn tool_call_args(&mut self, event: &Event) -> Result<(), Fail> {
        let f = Fields::parse(event.json())?;
        let key = f.key("toolCallId")?;
        let Some((p, j)) = self.find_tool_call(&key, TcSearch::Any)? else {
            return Ok(());
        };
        let delta_str = f.str("delta")?;
        let delta = if delta_str.is_none() {
            f.value("delta")?
        } else {
            None
        };
        let Some(tc) = self.tool_call_mut(p, j) else {
            return throws("the tool call is not an object");
        };
        let Some(Value::Object(function)) = tc.as_object_mut().and_then(|m| m.get_mut("function"))
        else {
            return throws("the tool call has no function object");
        };
        match (function.get_mut("arguments"), &delta_str) {
            (Some(Value::String(s)), Some(d)) => s.push_str(d),
            (current, _) => {
                let current = current.map(|v| v.clone());
                let d = match &delta_str {
                    Some(d) => Some(Value::String(d.to_string())),
                    None => delta,
                };
                let sum = js::js_add(current.as_ref(), d.as_ref());
                function.insert("arguments".into(), sum);
            }
        }
        let metadata = f.value("metadata")?;
        if let (Some(md), Some(tc)) = (metadata, self.tool_call_mut(p, j)) {
            merge_metadata_into(tc, md)?;
        }
        self.propagate(p);
        Ok(())
    }

    fn tool_call_end(&mut self, event: &Event) -> Result<(), Fail> {
        let f = Fields::parse(event.json())?;
        let key = f.key("toolCallId")?;
        let Some((p, j)) = self.find_tool_call(&key, TcSearch::Any)? else {
            return Ok(());
        };
        if let Some(md) = f.value("metadata")? {
            let Some(tc) = self.tool_call_mut(p, j) else {
                return throws("the tool call is not an object");
            };
            merge_metadata_into(tc, md)?;
            self.propagate(p);
        }
        Ok(())
    }

    fn tool_call_result(&mut self, event: &Event) -> Result<(), Fail> {
        let f = Fields::parse(event.json())?;
        let tc_key = f.key("toolCallId")?;
        if let Some(k) = tc_key.to_owned_key() {
            self.answered.insert(k);
        }
        let mut m = Map::new();
        if let Some(id) = f.value("messageId")? {
            m.insert("id".into(), id);
        }
        if let Some(tc) = f.value("toolCallId")? {
            m.insert("toolCallId".into(), tc);
        }
        let role = f.value("role")?;
        let role = if js::truthy(role.as_ref()) {
            role.unwrap_or(Value::Null)
        } else {
            Value::String("tool".into())
        };
        m.insert("role".into(), role);
        if let Some(content) = f.value("content")? {
            m.insert("content".into(), content);
        }
        if f.is_set("subagentRunId") {
            m.insert(
                "subagentRunId".into(),
                f.value("subagentRunId")?.unwrap_or(Value::Null),
            );
        }
        let mut message = Value::Object(m);
        if let Some(md) = f.value("metadata")? {
            merge_metadata_into(&mut message, md)?;
        }
        match self.find_tool_call(&tc_key, TcSearch::Assistant)? {
            None => {
                self.push_message(message);
            }
            Some((owner, _)) => {
                let mut at = owner + 1;
                while at < self.conv.messages.len() {
                    let next = &self.conv.messages[at];
                    if next.is_null() {
                        return throws("a message is null (reading 'role')");
                    }
                    if !is_role(next, "tool") {
                        break;
                    }
                    at += 1;
                }
                self.insert_message(at, message);
            }
        }
        Ok(())
    }

    fn state_snapshot(&mut self, event: &Event) -> Result<(), Fail> {
        let f = Fields::parse(event.json())?;
        match f.value("snapshot")? {
            Some(v) => {
                self.conv.state = v;
                self.state_defined = true;
            }
            // `state = undefined` is not emitted: the visible state stays.
            None => self.state_defined = false,
        }
        Ok(())
    }

    fn state_delta(&mut self, event: &Event) -> Result<(), Fail> {
        let f = Fields::parse(event.json())?;
        let delta = f.value("delta")?.unwrap_or(Value::Null);
        if !self.state_defined || replaces_root_from_elsewhere(&delta) {
            // The result may be `undefined`, which leaves the visible state
            // as it was: work on a copy.
            let doc = self.state_defined.then_some(&self.conv.state);
            return match patch::apply_patch_js(doc, &delta) {
                Ok(Some(v)) => {
                    self.conv.state = v;
                    self.state_defined = true;
                    Ok(())
                }
                Ok(None) => {
                    self.state_defined = false;
                    Ok(())
                }
                Err(patch::PatchError::Unrepresentable { reason, .. }) => {
                    throws(format!("the patched state cannot be cloned: {reason}"))
                }
                // The official reducer warns and keeps the state.
                Err(_) => Ok(()),
            };
        }
        // In place: a failing patch is rolled back, so nothing is copied.
        let mut doc = Some(std::mem::take(&mut self.conv.state));
        let result = patch::apply_patch_in_place(&mut doc, &delta);
        self.conv.state = doc.unwrap_or(Value::Null);
        match result {
            Err(patch::PatchError::Unrepresentable { reason, .. }) => {
                throws(format!("the patched state cannot be cloned: {reason}"))
            }
            _ => Ok(()),
        }
    }

    fn messages_snapshot(&mut self, event: &Event) -> Result<(), Fail> {
        let f = Fields::parse(event.json())?;
        let Some(Value::Array(raw)) = f.value("messages")? else {
            return throws("messages.map is not a function");
        };
        let mut snapshot = Vec::with_capacity(raw.len());
        for m in raw {
            match m {
                Value::Null => return throws("a snapshot message is null"),
                Value::Object(mut map) => {
                    if matches!(map.get("subagentRunId"), Some(Value::Null)) {
                        map.shift_remove("subagentRunId");
                    }
                    snapshot.push(Value::Object(map));
                }
                other => snapshot.push(other),
            }
        }
        let metadata = f.value("metadata")?;
        let authority = authoritative_activity_types(metadata.as_ref());
        let has_activity = snapshot.iter().any(|m| is_role(m, "activity"));
        let has_reasoning = snapshot.iter().any(|m| is_role(m, "reasoning"));

        // Snapshot id → index of its last message with that id.
        let mut by_id: IdMap<usize> = IdMap::default();
        for (i, m) in snapshot.iter().enumerate() {
            let k = js::key_of(js::prop(m, "id"));
            if let Some(slot) = by_id.entry(&k) {
                *slot = i;
            }
        }
        let snapshot_objs: Vec<u32> = (0..snapshot.len()).map(|_| self.fresh_obj()).collect();

        let preserved = |m: &Value| -> bool {
            (is_role(m, "activity")
                && match &authority {
                    Authority::Types(types) => !matches!(
                        js::prop(m, "activityType"),
                        Some(Value::String(t)) if types.iter().any(|x| x == t)
                    ),
                    Authority::All => false,
                    Authority::Inferred => !has_activity,
                })
                || (is_role(m, "reasoning") && !has_reasoning)
        };

        if self.conv.messages.iter().any(Value::is_null) {
            return throws("a message is null (reading 'id')");
        }
        let old = std::mem::take(&mut self.conv.messages);
        let old_objs: Vec<u32> = self.handles.iter().map(|&h| self.obj[h as usize]).collect();
        let mut messages = Vec::with_capacity(old.len() + snapshot.len());
        let mut objs = Vec::with_capacity(old.len() + snapshot.len());
        let mut kept_ids: IdMap<()> = IdMap::default();
        // The length of the common prefix of the old and the new list.
        let mut same = 0;
        let mut diverged = false;
        for (at, (m, o)) in old.into_iter().zip(old_objs).enumerate() {
            let k = js::key_of(js::prop(&m, "id"));
            if let Some(&i) = by_id.get(&k) {
                kept_ids.entry(&k);
                if !diverged && messages.len() == at && same_text(&snapshot[i], &m) {
                    same = at + 1;
                } else {
                    diverged = true;
                }
                messages.push(snapshot[i].clone());
                objs.push(snapshot_objs[i]);
            } else if preserved(&m) {
                kept_ids.entry(&k);
                if !diverged && messages.len() == at {
                    same = at + 1;
                } else {
                    diverged = true;
                }
                messages.push(m);
                objs.push(o);
            } else {
                diverged = true;
            }
        }
        self.touch(same);
        for (i, m) in snapshot.into_iter().enumerate() {
            let k = js::key_of(js::prop(&m, "id"));
            if kept_ids.get(&k).is_none() {
                messages.push(m);
                objs.push(snapshot_objs[i]);
            }
        }
        self.conv.messages = messages;
        self.rebuild(objs);
        Ok(())
    }

    fn activity_snapshot(&mut self, event: &Event) -> Result<(), Fail> {
        let f = Fields::parse(event.json())?;
        let key = f.key("messageId")?;
        let existing = self.find_message(&key)?;
        let replace = match f.value("replace")? {
            None | Some(Value::Null) => true,
            Some(v) => js::truthy(Some(&v)),
        };
        let activity_type = f.value("activityType")?;
        let content = f.value("content")?;
        let sub = if f.is_set("subagentRunId") {
            f.value("subagentRunId")?
        } else {
            None
        };
        let fresh = || {
            let mut m = Map::new();
            if let Ok(Some(id)) = f.value("messageId") {
                m.insert("id".into(), id);
            }
            m.insert("role".into(), Value::String("activity".into()));
            if let Some(t) = &activity_type {
                m.insert("activityType".into(), t.clone());
            }
            if let Some(c) = &content {
                m.insert("content".into(), c.clone());
            }
            if let Some(s) = &sub {
                m.insert("subagentRunId".into(), s.clone());
            }
            Value::Object(m)
        };
        match existing {
            None => {
                let p = self.push_message(fresh());
                self.merge_into_message(p, &f)
            }
            Some(p) if is_role(&self.conv.messages[p], "activity") => {
                if replace {
                    let mut m = self.conv.messages[p].clone();
                    set_prop(&mut m, "activityType", activity_type.clone())?;
                    set_prop(&mut m, "content", content.clone())?;
                    set_prop(&mut m, "subagentRunId", sub.clone())?;
                    self.replace_at(p, m);
                }
                self.merge_into_message(p, &f)
            }
            Some(p) => {
                if replace {
                    self.replace_at(p, fresh());
                    self.merge_into_message(p, &f)
                } else {
                    Ok(())
                }
            }
        }
    }

    fn activity_delta(&mut self, event: &Event) -> Result<(), Fail> {
        let f = Fields::parse(event.json())?;
        let key = f.key("messageId")?;
        let Some(p) = self.find_message(&key)? else {
            return Ok(());
        };
        if !is_role(&self.conv.messages[p], "activity") {
            return Ok(());
        }
        // Metadata first: it stays even when the patch fails.
        self.merge_into_message(p, &f)?;
        let patch_value = match f.value("patch")? {
            None | Some(Value::Null) => Value::Array(Vec::new()),
            Some(v) => v,
        };
        let activity_type = f.value("activityType")?;
        if self.aliased {
            // Another position may hold this object: build a new one.
            let base = match js::prop(&self.conv.messages[p], "content") {
                None | Some(Value::Null) => Value::Object(Map::new()),
                Some(c) => c.clone(),
            };
            let Ok(new_content) = patch::apply_patch_js(Some(&base), &patch_value) else {
                // Warned and skipped (an unclonable result throws inside
                // the same try block).
                return Ok(());
            };
            let mut m = self.conv.messages[p].clone();
            set_prop(&mut m, "content", new_content)?;
            set_prop(&mut m, "activityType", activity_type)?;
            self.replace_at(p, m);
            return Ok(());
        }
        // In place (the message is an object: its role was read). The
        // content is taken out (absent or null patches `{}`).
        self.touch(p);
        let Value::Object(map) = &mut self.conv.messages[p] else {
            return Ok(());
        };
        let taken = map.get_mut("content").map(std::mem::take);
        let restore = matches!(taken, Some(ref v) if !v.is_null());
        let mut doc = Some(match taken {
            Some(v) if !v.is_null() => v,
            _ => Value::Object(Map::new()),
        });
        match patch::apply_patch_in_place(&mut doc, &patch_value) {
            Ok(()) => {
                let mut m = Value::Object(std::mem::take(map));
                set_prop(&mut m, "content", doc)?;
                set_prop(&mut m, "activityType", activity_type)?;
                self.conv.messages[p] = m;
                let h = self.handles[p] as usize;
                self.obj[h] = self.fresh_obj();
            }
            Err(_) => {
                // Rolled back: put the content back as it was.
                match doc {
                    Some(v) if restore => {
                        map.insert("content".into(), v);
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    fn run_started(&mut self, event: &Event) -> Result<(), Fail> {
        self.run_tool_calls.clear();
        self.run_tool_call_keys.clear();
        self.answered.clear();
        let f = Fields::parse(event.json())?;
        let input = f.value("input")?;
        let messages = match &input {
            Some(Value::Object(map)) => map.get("messages"),
            _ => None,
        };
        if !js::truthy(messages) {
            return Ok(());
        }
        let items: Vec<Value> = match messages {
            Some(Value::Array(items)) => items.clone(),
            Some(Value::String(s)) => s.chars().map(|c| Value::String(c.to_string())).collect(),
            _ => return throws("input.messages is not iterable"),
        };
        for m in items {
            let m = match m {
                Value::Null => return throws("an input message is null"),
                Value::Object(mut map) => {
                    if matches!(map.get("subagentRunId"), Some(Value::Null)) {
                        map.shift_remove("subagentRunId");
                    }
                    Value::Object(map)
                }
                other => other,
            };
            let k = js::key_of(js::prop(&m, "id"));
            if self.find_message(&k)?.is_none() {
                self.push_message(m);
            }
        }
        Ok(())
    }

    fn run_finished(&mut self, event: &Event) -> Result<(), Fail> {
        let f = Fields::parse(event.json())?;
        let outcome = f.value("outcome")?;
        let outcome_type = outcome.as_ref().and_then(|o| js::prop(o, "type"));
        if js::is_str(outcome_type, "interrupt") {
            let Some(Value::Array(list)) = outcome.as_ref().and_then(|o| js::prop(o, "interrupts"))
            else {
                return throws("outcome.interrupts.map is not a function");
            };
            let mut pending = Vec::with_capacity(list.len());
            for i in list {
                match i {
                    Value::Null => return throws("an interrupt is null"),
                    Value::Object(map) if matches!(map.get("subagentRunId"), Some(Value::Null)) => {
                        let mut map = map.clone();
                        map.shift_remove("subagentRunId");
                        pending.push(Value::Object(map));
                    }
                    other => pending.push(other.clone()),
                }
            }
            self.pending_interrupts = pending;
            self.outcome = Some(RunOutcome::Interrupt);
            return Ok(());
        }
        if js::is_str(outcome_type, "cancelled") {
            self.pending_interrupts.clear();
            self.outcome = Some(RunOutcome::Cancelled);
            return Ok(());
        }
        let named = if js::is_str(outcome_type, "success") {
            outcome
                .as_ref()
                .and_then(|o| js::prop(o, "pendingToolCallIds"))
        } else {
            None
        };
        let named: Option<Vec<Value>> = match named {
            None => None,
            Some(Value::Null) => {
                return throws("cannot read properties of null (reading 'length')");
            }
            Some(Value::Array(ids)) if !ids.is_empty() => Some(ids.clone()),
            Some(Value::String(s)) if !s.is_empty() => {
                Some(s.chars().map(|c| Value::String(c.to_string())).collect())
            }
            Some(Value::Object(map)) if map.get("length").is_some_and(length_positive) => {
                return throws("pendingToolCallIds is not iterable");
            }
            Some(_) => None,
        };
        let pending = named.unwrap_or_else(|| {
            self.run_tool_calls
                .iter()
                .filter(|(k, _)| k.as_ref().is_none_or(|k| !self.answered.contains(k)))
                .map(|(_, id)| id.clone())
                .collect()
        });
        self.pending_interrupts.clear();
        self.outcome = Some(RunOutcome::Success {
            result: f.value("result")?,
            pending_tool_call_ids: pending,
        });
        Ok(())
    }

    fn encrypted_value(&mut self, event: &Event) -> Result<(), Fail> {
        let f = Fields::parse(event.json())?;
        let key = f.key("entityId")?;
        let value = f.value("encryptedValue")?;
        if js::is_str(f.value("subtype")?.as_ref(), "tool-call") {
            if let Some((p, j)) = self.find_tool_call(&key, TcSearch::AssistantTruthy)? {
                let Some(tc) = self.tool_call_mut(p, j) else {
                    return throws("the tool call is not an object");
                };
                set_prop(tc, "encryptedValue", value)?;
                self.propagate(p);
            }
            return Ok(());
        }
        if let Some(p) = self.find_message(&key)? {
            self.touch(p);
            let m = &mut self.conv.messages[p];
            if !is_role(m, "activity") && js::truthy(Some(m)) {
                set_prop(m, "encryptedValue", value)?;
                self.propagate(p);
            }
        }
        Ok(())
    }
}

/// True when a patch has a root `move`/`copy`, whose result may be
/// `undefined` (a missing `from`).
fn replaces_root_from_elsewhere(patch: &Value) -> bool {
    let Value::Array(ops) = patch else {
        return false;
    };
    ops.iter().any(|op| {
        js::is_str(js::prop(op, "path"), "")
            && (js::is_str(js::prop(op, "op"), "move") || js::is_str(js::prop(op, "op"), "copy"))
    })
}

fn length_positive(length: &Value) -> bool {
    match length {
        Value::Number(n) => js::number_f64(n) > 0.0,
        Value::String(s) => s.trim().parse::<f64>().is_ok_and(|x| x > 0.0),
        Value::Bool(b) => *b,
        _ => false,
    }
}

/// The `"@ag-ui/client".authoritativeActivityTypes` declaration of a
/// `MESSAGES_SNAPSHOT`.
enum Authority {
    /// Absent: the snapshot owns every type when it carries an activity.
    Inferred,
    /// `null`: the snapshot owns every type.
    All,
    /// The listed types (an invalid declaration lists none).
    Types(Vec<String>),
}

fn authoritative_activity_types(metadata: Option<&Value>) -> Authority {
    const KEY: &str = "@ag-ui/client";
    let Some(Value::Object(md)) = metadata else {
        return Authority::Inferred;
    };
    let Some(value) = md.get(KEY) else {
        return Authority::Inferred;
    };
    let Value::Object(value) = value else {
        return Authority::Types(Vec::new());
    };
    match value.get("authoritativeActivityTypes") {
        None => Authority::Inferred,
        Some(Value::Null) => Authority::All,
        Some(Value::Array(items)) => {
            let types: Option<Vec<String>> = items
                .iter()
                .map(|t| t.as_str().map(str::to_owned))
                .collect();
            Authority::Types(types.unwrap_or_default())
        }
        Some(_) => Authority::Types(Vec::new()),
    }
}

/// True when `a` and `b` serialize to the same text: equal, with object keys
/// in the same order (`Value`'s `==` ignores key order). The change mark
/// must see a message a snapshot restates with its keys in another order:
/// its text changes even though its value does not.
fn same_text(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y.iter())
                    .all(|((ka, va), (kb, vb))| ka == kb && same_text(va, vb))
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same_text(p, q))
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod change_mark_tests {
    use super::*;
    use agui_testkit::r#gen::{Profile, stream};

    fn ev(text: &str) -> Event {
        Event::from_json(text).expect("a valid event")
    }

    /// The watermark's promise on every generated profile: at every event,
    /// the messages below it are those at the last reset, to the text (key
    /// order included), and the mark
    /// never exceeds the old length.
    #[test]
    fn messages_below_the_mark_are_unchanged() {
        for &profile in Profile::ALL {
            for seed in 0..20 {
                let events = stream(profile, seed);
                let mut r = Reducer::new(Conversation::default());
                let mut saved = r.conversation().messages.clone();
                for (i, e) in events.iter().enumerate() {
                    if r.apply(e).is_err() {
                        break;
                    }
                    let mark = r.messages_changed_from();
                    let now = &r.conversation().messages;
                    assert!(mark <= saved.len() && mark <= now.len());
                    // As text: a checkpoint keeps the texts below the
                    // mark, so key order counts (`Value`'s `==` ignores it).
                    let text = |m: &[Value]| serde_json::to_string(m).unwrap();
                    assert_eq!(
                        text(&now[..mark]),
                        text(&saved[..mark]),
                        "{} seed {seed} event {i}",
                        profile.name()
                    );
                    if (i + seed as usize).is_multiple_of(3) {
                        r.reset_change_mark();
                        saved = r.conversation().messages.clone();
                        assert_eq!(r.messages_changed_from(), saved.len());
                    }
                }
            }
        }
    }

    #[test]
    fn appends_leave_the_prefix_and_changes_lower_the_mark() {
        let mut r = Reducer::new(Conversation::default());
        for e in [
            r#"{"type":"TEXT_MESSAGE_START","messageId":"a","role":"user"}"#,
            r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"a","delta":"hi"}"#,
            r#"{"type":"TEXT_MESSAGE_START","messageId":"b"}"#,
        ] {
            r.apply(&ev(e)).unwrap();
        }
        assert_eq!(r.messages_changed_from(), 0);
        r.reset_change_mark();
        assert_eq!(r.messages_changed_from(), 2);
        r.apply(&ev(r#"{"type":"TEXT_MESSAGE_START","messageId":"c"}"#))
            .unwrap();
        assert_eq!(r.messages_changed_from(), 2);
        r.apply(&ev(
            r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"b","delta":"x"}"#,
        ))
        .unwrap();
        assert_eq!(r.messages_changed_from(), 1);
        // A snapshot equal on its first message keeps it.
        r.reset_change_mark();
        r.apply(&ev(r#"{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"a","role":"user","content":"hi"},{"id":"z","role":"user","content":"new"}]}"#))
            .unwrap();
        assert_eq!(r.conversation().messages.len(), 2);
        assert_eq!(r.messages_changed_from(), 1);
        // One that changes the first message moves the mark to 0.
        r.reset_change_mark();
        r.apply(&ev(r#"{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"a","role":"user","content":"other"}]}"#))
            .unwrap();
        assert_eq!(r.messages_changed_from(), 0);
        // A fresh reducer over given messages starts with all of them unchanged.
        let start = r.conversation().clone();
        let r2 = Reducer::new(start);
        assert_eq!(r2.messages_changed_from(), 1);
    }
}
