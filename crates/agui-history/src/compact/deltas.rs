//! `deltas` mode: merge each stream's pieces without ever changing meaning.
//!
//! # Model
//!
//! Events are kept in their original order in a *held region*. A stream (a
//! text message, a reasoning message or a tool call) owns an **anchor**: a
//! slot placed right after its START (or at its first piece when it has no
//! START). Later CONTENT / ARGS pieces of the stream are merged into the
//! anchor, which amounts to moving them *back* to the anchor, past the events
//! held after it; its END is moved back the same way and closes the anchor.
//! Moving a piece back past an event is only allowed when the two commute for
//! the reducer and the verifier. When an event arrives that does not commute
//! with an open anchor (it touches the same message or tool call, or it may
//! touch every message: `MESSAGES_SNAPSHOT`, run boundaries), the anchor is
//! closed first and the stream's later pieces open a new anchor after it.
//! The held region is released up to the first open anchor.
//!
//! With one stream open at a time and nothing touching it mid-stream this
//! yields exactly the official shape: START, one CONTENT, END, then the events
//! that arrived mid-stream. State events follow the official window rule
//! (see [`super::state`]).

use std::collections::VecDeque;

use foldhash::{HashMap, HashMapExt};

use agui_protocol::{Event, EventCow, EventRef, EventType};
use serde_json::{Map, Value};

use super::CompactError;
use super::fields::{
    Fields, Members, RawMap, canonical_body, merge_raw, push_canonical, push_json_string,
    same_json, string_body,
};
use super::state::StateWindow;

/// Held events beyond which the oldest open anchor is closed early, so that a
/// stream that never ends cannot make memory grow with the log. Closing an
/// anchor early is always safe: the stream's content is only split in two.
const DEFAULT_HELD_LIMIT: usize = 1 << 16;

/// The entity a stream writes to: a message (text and reasoning share ids
/// with every other message) or a tool call.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
enum Key {
    Msg(String),
    Tool(String),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Text,
    Reasoning,
    Tool,
}

impl Kind {
    fn content_type(self) -> &'static str {
        match self {
            Kind::Text => "TEXT_MESSAGE_CONTENT",
            Kind::Reasoning => "REASONING_MESSAGE_CONTENT",
            Kind::Tool => "TOOL_CALL_ARGS",
        }
    }

    fn id_field(self) -> &'static str {
        match self {
            Kind::Text | Kind::Reasoning => "messageId",
            Kind::Tool => "toolCallId",
        }
    }

    fn key(self, id: String) -> Key {
        match self {
            Kind::Text | Kind::Reasoning => Key::Msg(id),
            Kind::Tool => Key::Tool(id),
        }
    }
}

struct Anchor {
    kind: Kind,
    /// The id, decoded.
    id: String,
    /// Concatenated string bodies of the merged deltas, escapes kept.
    delta: String,
    /// Last-write-wins fold of the merged pieces' metadata.
    metadata: Option<RawMap>,
    pieces: usize,
    end: Option<Event>,
    open: bool,
    /// Opened right after the stream's START: the entity exists here.
    started: bool,
    /// For a tool call opened by its START: the ids of the messages that
    /// may hold it (its parent, or a message with its own id). `None`: any.
    holders: Option<Vec<String>>,
}

/// An `ACTIVITY_SNAPSHOT` that replaces its message wholesale, with the
/// `ACTIVITY_DELTA`s on the same message folded into it.
struct ActivityAnchor {
    /// The snapshot as it arrived.
    event: Event,
    open: bool,
    /// The activity message's content and type after the folded deltas.
    content: Value,
    activity_type: Value,
    metadata: Option<Map<String, Value>>,
    folded: usize,
}

/// Released events not drained yet, in output order. An event released
/// the moment it arrives (nothing held before it) is copied into `text`,
/// one buffer reused from drain to drain, instead of becoming an owned
/// [`Event`] of its own: most events of a log pass through this way, and
/// each owned event would cost an allocation, a copy and a free.
#[derive(Default)]
struct Ready {
    text: String,
    items: Vec<ReadyItem>,
}

enum ReadyItem {
    /// `text[start..start + len]`, the text of a checked event of type `ty`.
    Copied {
        start: usize,
        len: usize,
        ty: EventType,
    },
    Owned(Event),
}

impl Ready {
    fn push(&mut self, event: Event) {
        self.items.push(ReadyItem::Owned(event));
    }

    /// Appends `event`: moved when owned, copied into the buffer when
    /// borrowed.
    fn push_cow(&mut self, event: EventCow<'_>) {
        match event {
            EventCow::Owned(event) => self.push(event),
            EventCow::Borrowed(event) => {
                if self.items.is_empty() {
                    self.text.clear();
                }
                let start = self.text.len();
                self.text.push_str(event.json());
                self.items.push(ReadyItem::Copied {
                    start,
                    len: event.len_bytes(),
                    ty: event.event_type().clone(),
                });
            }
        }
    }

    /// The events, owned (a copied one is copied once more, not validated
    /// again).
    fn drain(&mut self) -> impl Iterator<Item = Event> + '_ {
        let text = &self.text;
        self.items.drain(..).map(move |item| match item {
            ReadyItem::Owned(event) => event,
            ReadyItem::Copied { start, len, ty } => {
                EventRef::from_checked(&text[start..start + len], &ty).to_event()
            }
        })
    }

    /// Hands each event to `f`, borrowed, then empties the queue (all of
    /// it, even when `f` fails).
    fn drain_each<E>(&mut self, mut f: impl FnMut(EventRef<'_>) -> Result<(), E>) -> Result<(), E> {
        let mut result = Ok(());
        for item in &self.items {
            let event = match item {
                ReadyItem::Owned(event) => event.as_event_ref(),
                // Text copied from a checked event (`push_cow`), unchanged.
                ReadyItem::Copied { start, len, ty } => {
                    EventRef::from_checked(&self.text[*start..*start + *len], ty)
                }
            };
            result = f(event);
            if result.is_err() {
                break;
            }
        }
        self.items.clear();
        self.text.clear();
        result
    }
}

impl Extend<Event> for Ready {
    fn extend<T: IntoIterator<Item = Event>>(&mut self, events: T) {
        self.items.extend(events.into_iter().map(ReadyItem::Owned));
    }
}

enum Slot {
    Event(Event),
    Anchor(Box<Anchor>),
    Activity(Box<ActivityAnchor>),
}

impl Slot {
    fn is_open(&self) -> bool {
        match self {
            Slot::Event(_) => false,
            Slot::Anchor(a) => a.open,
            Slot::Activity(a) => a.open,
        }
    }
}

/// Streaming `deltas` compactor: feed events with [`DeltaCompactor::push`],
/// collect released events with [`DeltaCompactor::drain`], and call
/// [`DeltaCompactor::finish`] at the end of the input.
pub struct DeltaCompactor {
    held: VecDeque<Slot>,
    /// Sequence number of `held[0]`.
    base: u64,
    /// Open anchors: entity → sequence number of its slot.
    open: HashMap<Key, u64>,
    ready: Ready,
    state: StateWindow,
    /// A chunk event was seen since the last event that closes every chunk
    /// lane. Chunk expansion makes explicit events close lanes, so nothing is
    /// moved while a lane may be open.
    chunk_lanes: bool,
    /// The run of adjacent chunk events being merged (it sits after `held`).
    chunk_run: Option<ChunkRun>,
    held_limit: usize,
}

impl Default for DeltaCompactor {
    fn default() -> Self {
        Self::new()
    }
}

impl DeltaCompactor {
    /// A compactor with the default bound on held events.
    pub fn new() -> Self {
        Self::with_held_limit(DEFAULT_HELD_LIMIT)
    }

    /// A compactor that closes its oldest open stream early once more than
    /// `limit` events are held behind it (at least 1).
    pub fn with_held_limit(limit: usize) -> Self {
        DeltaCompactor {
            held: VecDeque::new(),
            base: 0,
            open: HashMap::new(),
            ready: Ready::default(),
            state: StateWindow::default(),
            chunk_lanes: false,
            chunk_run: None,
            held_limit: limit.max(1),
        }
    }

    /// Takes the events released so far, in output order.
    pub fn drain(&mut self) -> impl Iterator<Item = Event> + '_ {
        self.ready.drain()
    }

    /// [`DeltaCompactor::drain`] without owned events: hands each released
    /// event to `f`, borrowed, in output order, then forgets them all (also
    /// those after an event `f` failed on). Writers use this: an event that
    /// passed straight through is then never allocated on its own.
    pub fn drain_each<E>(&mut self, f: impl FnMut(EventRef<'_>) -> Result<(), E>) -> Result<(), E> {
        self.ready.drain_each(f)
    }

    /// Events held right now: behind open anchors, in the state window and
    /// in an unfinished chunk run. This is the compactor's memory, in events;
    /// it depends on what is open at once, never on the log's length.
    pub fn held(&self) -> usize {
        self.held.len() + self.state.len() + usize::from(self.chunk_run.is_some())
    }

    /// Feeds one event: owned, or borrowed from a buffer the caller reuses
    /// (the compactor reads it in place, and copies it only if it holds it
    /// back; the deltas it merges are never copied whole).
    pub fn push<'e>(&mut self, event: impl Into<EventCow<'e>>) -> Result<(), CompactError> {
        let event = event.into();
        if let Some(run) = self.chunk_run.as_mut() {
            if run.absorb(event.as_ref()) {
                return Ok(());
            }
            self.flush_chunk_run()?;
        }
        let ty = event.event_type().clone();
        match ty {
            EventType::RunStarted | EventType::RunFinished | EventType::RunError => {
                self.close_all();
                self.release()?;
                self.state.flush(&mut self.ready)?;
                self.ready.push_cow(event);
                self.chunk_lanes = false;
                return Ok(());
            }
            // Chunk expansion closes the event's chunk lane at every state
            // event, so while a lane may be open a state event is a lane
            // boundary and stays exactly where it is.
            EventType::StateSnapshot | EventType::StateDelta if self.chunk_lanes => {
                self.barrier(event);
            }
            EventType::StateSnapshot | EventType::StateDelta => {
                self.state.push(event.into_event());
                return Ok(());
            }
            EventType::MessagesSnapshot => {
                self.barrier(event);
                self.chunk_lanes = false;
            }
            EventType::TextMessageChunk
            | EventType::ToolCallChunk
            | EventType::ReasoningMessageChunk => {
                if !self.chunk_lanes {
                    // The state window must not move past the first chunk: a
                    // state event closes the chunk lanes where it stands.
                    self.close_all();
                    self.release()?;
                    self.state.flush(&mut self.ready)?;
                    self.chunk_lanes = true;
                }
                self.close_all();
                match ChunkRun::start(event) {
                    Ok(run) => self.chunk_run = Some(run),
                    Err(event) => self.place(event),
                }
            }
            _ if self.chunk_lanes => self.barrier(event),
            EventType::TextMessageStart => self.start(event, Kind::Text),
            EventType::ReasoningMessageStart => self.start(event, Kind::Reasoning),
            EventType::ToolCallStart => self.tool_start(event),
            EventType::TextMessageContent => self.piece(event, Kind::Text),
            EventType::ReasoningMessageContent => self.piece(event, Kind::Reasoning),
            EventType::ToolCallArgs => self.piece(event, Kind::Tool),
            EventType::TextMessageEnd => self.end(event, Kind::Text),
            EventType::ReasoningMessageEnd => self.end(event, Kind::Reasoning),
            EventType::ToolCallEnd => self.end(event, Kind::Tool),
            EventType::ToolCallResult => self.touches_message(event),
            EventType::ActivityDelta => self.activity_delta(event),
            EventType::ActivitySnapshot => self.activity_snapshot(event),
            // No effect on messages (or only on fields that commute with
            // appends: REASONING_ENCRYPTED_VALUE sets `encryptedValue` on an
            // entity that already exists and merges no metadata).
            _ => self.place(event),
        }
        self.release()?;
        if self.held.len() > self.held_limit {
            self.close_oldest();
            self.release()?;
        }
        Ok(())
    }

    /// Ends the input: every held event is released (streams still open stay
    /// open: no END is made up), then the state window.
    pub fn finish(&mut self) -> Result<(), CompactError> {
        self.flush_chunk_run()?;
        self.close_all();
        self.release()?;
        self.state.flush(&mut self.ready)
    }

    fn flush_chunk_run(&mut self) -> Result<(), CompactError> {
        if let Some(run) = self.chunk_run.take() {
            let event = run.into_event()?;
            self.place(event.into());
        }
        Ok(())
    }

    fn place(&mut self, event: EventCow<'_>) {
        if self.held.is_empty() {
            // Nothing held before it: `release` would move it out at once.
            self.base += 1;
            self.ready.push_cow(event);
            return;
        }
        self.held.push_back(Slot::Event(event.into_event()));
    }

    fn barrier(&mut self, event: EventCow<'_>) {
        self.close_all();
        self.place(event);
    }

    fn start(&mut self, event: EventCow<'_>, kind: Kind) {
        let id = match Fields::read(event.as_ref(), [kind.id_field()]).and_then(|f| f.string(0)) {
            Some(Ok(id)) => id.into_owned(),
            _ => return self.barrier(event),
        };
        let key = kind.key(id.clone());
        self.close(&key);
        self.place(event);
        self.open_anchor(kind, key, id, true);
    }

    fn tool_start(&mut self, event: EventCow<'_>) {
        let fields = match Fields::read(event.as_ref(), ["toolCallId", "parentMessageId"]) {
            Some(f) => f,
            None => return self.barrier(event),
        };
        let id = match fields.string(0) {
            Some(Ok(id)) => id.into_owned(),
            _ => return self.barrier(event),
        };
        let parent = match fields.string(1) {
            None => None,
            Some(Ok(p)) => Some(p.into_owned()),
            Some(Err(())) => return self.barrier(event),
        };
        // The call may create a message with its own id or its parent's id:
        // a stream on such a message whose START has not been seen must not
        // have later pieces moved before that creation.
        self.close_unstarted(&Key::Msg(id.clone()));
        let mut holders = vec![id.clone()];
        if let Some(parent) = parent {
            self.close_unstarted(&Key::Msg(parent.clone()));
            holders.push(parent);
        }
        let key = Key::Tool(id.clone());
        self.close(&key);
        self.place(event);
        let seq = self.open_anchor(Kind::Tool, key, id, true);
        if let Some(anchor) = self.anchor_mut(seq) {
            anchor.holders = Some(holders);
        }
    }

    /// An `ACTIVITY_SNAPSHOT` can replace any message with an activity
    /// message, taking the tool calls it holds away with it.
    fn activity_snapshot(&mut self, event: EventCow<'_>) {
        let Some(Ok(id)) = Fields::read(event.as_ref(), ["messageId"]).and_then(|f| f.string(0))
        else {
            return self.barrier(event);
        };
        let id = id.into_owned();
        let holding: Vec<Key> = self
            .open
            .iter()
            .filter(|(key, _)| matches!(key, Key::Tool(_)))
            .filter_map(|(key, &seq)| {
                let index = usize::try_from(seq.checked_sub(self.base)?).ok()?;
                match self.held.get(index)? {
                    Slot::Anchor(a) => match &a.holders {
                        Some(holders) if !holders.contains(&id) => None,
                        _ => Some(key.clone()),
                    },
                    Slot::Event(_) | Slot::Activity(_) => None,
                }
            })
            .collect();
        for key in holding {
            self.close(&key);
        }
        let key = Key::Msg(id);
        self.close(&key);
        match ActivityAnchor::start(event) {
            Ok(anchor) => {
                let seq = self.base + self.held.len() as u64;
                self.held.push_back(Slot::Activity(Box::new(anchor)));
                self.open.insert(key, seq);
            }
            Err(event) => self.place(event),
        }
    }

    /// An `ACTIVITY_DELTA` on a message whose replacing snapshot is still
    /// open is folded into it; any other one is kept in place.
    fn activity_delta(&mut self, event: EventCow<'_>) {
        let Some(Ok(id)) = Fields::read(event.as_ref(), ["messageId"]).and_then(|f| f.string(0))
        else {
            return self.barrier(event);
        };
        let key = Key::Msg(id.into_owned());
        if let Some(seq) = self.open.get(&key).copied()
            && let Some(index) = seq
                .checked_sub(self.base)
                .and_then(|i| usize::try_from(i).ok())
            && let Some(Slot::Activity(anchor)) = self.held.get_mut(index)
            && anchor.fold(event.as_ref())
        {
            return;
        }
        self.close(&key);
        self.place(event);
    }

    fn touches_message(&mut self, event: EventCow<'_>) {
        match Fields::read(event.as_ref(), ["messageId"]).and_then(|f| f.string(0)) {
            Some(Ok(id)) => {
                self.close(&Key::Msg(id.into_owned()));
                self.place(event);
            }
            _ => self.barrier(event),
        }
    }

    fn piece(&mut self, event: EventCow<'_>, kind: Kind) {
        let fields = match Fields::read(event.as_ref(), [kind.id_field(), "delta", "metadata"]) {
            Some(f) => f,
            None => return self.barrier(event),
        };
        let id = match fields.string(0) {
            Some(Ok(id)) => id.into_owned(),
            _ => return self.barrier(event),
        };
        let key = kind.key(id.clone());
        // Only a string delta and an object (or absent) metadata merge the
        // way the reducer applies them; anything else is kept as it is.
        let body = fields.raw(1).and_then(string_body);
        let metadata = match fields.raw(2) {
            None => Some(None),
            Some(raw) => RawMap::parse(raw).map(Some),
        };
        let (Some(body), Some(metadata)) = (body, metadata) else {
            self.close(&key);
            self.place(event);
            return;
        };
        let seq = match self.open.get(&key).copied() {
            Some(seq) if self.anchor_mut(seq).is_some_and(|a| a.kind == kind) => seq,
            _ => {
                self.close(&key);
                self.open_anchor(kind, key, id, false)
            }
        };
        if let Some(anchor) = self.anchor_mut(seq) {
            anchor.delta.push_str(body);
            if let Some(incoming) = metadata {
                merge_raw(&mut anchor.metadata, incoming);
            }
            anchor.pieces += 1;
        }
    }

    fn end(&mut self, event: EventCow<'_>, kind: Kind) {
        let id = match Fields::read(event.as_ref(), [kind.id_field()]).and_then(|f| f.string(0)) {
            Some(Ok(id)) => id.into_owned(),
            _ => return self.barrier(event),
        };
        let key = kind.key(id);
        if let Some(seq) = self.open.get(&key).copied() {
            if let Some(anchor) = self.anchor_mut(seq)
                && anchor.kind == kind
            {
                anchor.end = Some(event.into_event());
                anchor.open = false;
                self.open.remove(&key);
                return;
            }
            self.close(&key);
        }
        self.place(event);
    }

    fn open_anchor(&mut self, kind: Kind, key: Key, id: String, started: bool) -> u64 {
        let seq = self.base + self.held.len() as u64;
        self.held.push_back(Slot::Anchor(Box::new(Anchor {
            kind,
            id,
            delta: String::new(),
            metadata: None,
            pieces: 0,
            end: None,
            open: true,
            started,
            holders: None,
        })));
        self.open.insert(key, seq);
        seq
    }

    fn anchor_mut(&mut self, seq: u64) -> Option<&mut Anchor> {
        let index = usize::try_from(seq.checked_sub(self.base)?).ok()?;
        match self.held.get_mut(index)? {
            Slot::Anchor(anchor) => Some(anchor),
            Slot::Event(_) | Slot::Activity(_) => None,
        }
    }

    fn close(&mut self, key: &Key) {
        if let Some(seq) = self.open.remove(key) {
            self.close_slot(seq);
        }
    }

    fn close_slot(&mut self, seq: u64) {
        let Some(index) = seq
            .checked_sub(self.base)
            .and_then(|i| usize::try_from(i).ok())
        else {
            return;
        };
        match self.held.get_mut(index) {
            Some(Slot::Anchor(a)) => a.open = false,
            Some(Slot::Activity(a)) => a.open = false,
            _ => {}
        }
    }

    fn close_unstarted(&mut self, key: &Key) {
        if let Some(seq) = self.open.get(key).copied()
            && self.anchor_mut(seq).is_some_and(|a| !a.started)
        {
            self.close(key);
        }
    }

    fn close_all(&mut self) {
        let seqs: Vec<u64> = self.open.drain().map(|(_, seq)| seq).collect();
        for seq in seqs {
            self.close_slot(seq);
        }
    }

    fn close_oldest(&mut self) {
        let base = self.base;
        let oldest = self
            .held
            .iter()
            .position(Slot::is_open)
            .map(|i| base + i as u64);
        if let Some(seq) = oldest {
            self.open.retain(|_, s| *s != seq);
            self.close_slot(seq);
        }
    }

    /// Moves the held prefix that no open anchor can still grow into the
    /// output.
    fn release(&mut self) -> Result<(), CompactError> {
        while let Some(front) = self.held.front() {
            if front.is_open() {
                break;
            }
            let slot = self
                .held
                .pop_front()
                .ok_or(CompactError::Internal("empty held"))?;
            self.base += 1;
            match slot {
                Slot::Event(e) => self.ready.push(e),
                Slot::Anchor(a) => {
                    let a = *a;
                    if a.pieces > 0 {
                        self.ready.push(synthesize(&a)?);
                    }
                    if let Some(end) = a.end {
                        self.ready.push(end);
                    }
                }
                Slot::Activity(a) => self.ready.push(a.into_event()?),
            }
        }
        Ok(())
    }
}

/// Patch operations whose result is never larger than the operation itself,
/// so a folded snapshot is never longer than the events it replaces (`copy`
/// can double a document with a few bytes).
fn small_ops(patch: &Value) -> bool {
    patch.as_array().is_some_and(|ops| {
        ops.iter().all(|op| {
            matches!(
                op.get("op").and_then(Value::as_str),
                Some("add" | "remove" | "replace" | "move" | "test")
            )
        })
    })
}

/// An anchoring snapshot's content, `activityType` and metadata.
type ActivityParts = (Value, Value, Option<Map<String, Value>>);

impl ActivityAnchor {
    /// An anchor for a snapshot that sets its message's whole content
    /// (`replace` absent, null or true; `content` present and not null), so
    /// that the content every later delta patches is known here.
    /// `Err` gives back an event that cannot anchor.
    fn start(event: EventCow<'_>) -> Result<ActivityAnchor, EventCow<'_>> {
        let Some((content, activity_type, metadata)) = Self::parts(event.as_ref()) else {
            return Err(event);
        };
        Ok(ActivityAnchor {
            event: event.into_event(),
            open: true,
            content,
            activity_type,
            metadata,
            folded: 0,
        })
    }

    /// The content, type and metadata of a snapshot that can anchor.
    fn parts(event: EventRef<'_>) -> Option<ActivityParts> {
        let f = Fields::read(event, ["replace", "content", "activityType", "metadata"])?;
        if !matches!(f.raw(0), None | Some("null" | "true")) {
            return None;
        }
        let content: Value = serde_json::from_str(f.raw(1)?).ok()?;
        if content.is_null() {
            return None;
        }
        let activity_type = match f.raw(2) {
            Some(raw) if raw.starts_with('"') => serde_json::from_str(raw).ok()?,
            _ => return None,
        };
        let metadata = match f.raw(3) {
            None => None,
            Some(raw) => Some(serde_json::from_str::<Map<String, Value>>(raw).ok()?),
        };
        Some((content, activity_type, metadata))
    }

    /// Applies an `ACTIVITY_DELTA` as the reducer does (metadata first, then
    /// the patch, atomically; on success the delta's `activityType`), or
    /// returns false when it cannot be folded exactly.
    fn fold(&mut self, event: EventRef<'_>) -> bool {
        let Some(f) = Fields::read(event, ["activityType", "patch", "metadata"]) else {
            return false;
        };
        let activity_type: Value = match f.raw(0) {
            Some(raw) if raw.starts_with('"') => match serde_json::from_str(raw) {
                Ok(v) => v,
                Err(_) => return false,
            },
            _ => return false,
        };
        let Some(Ok(patch_value)) = f.raw(1).map(serde_json::from_str::<Value>) else {
            return false;
        };
        if !small_ops(&patch_value) {
            return false;
        }
        let metadata = match f.raw(2) {
            None => None,
            Some(raw) => match serde_json::from_str::<Map<String, Value>>(raw) {
                Ok(m) => Some(m),
                Err(_) => return false,
            },
        };
        if let Some(m) = metadata {
            merge_metadata(&mut self.metadata, m);
        }
        if let Ok(next) = crate::reduce::patch::apply_patch(&self.content, &patch_value) {
            self.content = next;
            self.activity_type = activity_type;
        }
        self.folded += 1;
        true
    }

    /// The snapshot with the folded content, type and metadata (the snapshot
    /// itself when nothing was folded).
    fn into_event(self) -> Result<Event, CompactError> {
        if self.folded == 0 {
            return Ok(self.event);
        }
        let mut value = self.event.to_value();
        let Some(object) = value.as_object_mut() else {
            return Err(CompactError::Internal("an activity snapshot is an object"));
        };
        object.insert("activityType".into(), self.activity_type);
        object.insert("content".into(), self.content);
        if let Some(metadata) = self.metadata {
            object.insert("metadata".into(), Value::Object(metadata));
        }
        Event::from_serialize(&value).map_err(CompactError::Synthesized)
    }
}

/// A run of adjacent chunk events of one kind on one item, merged into the
/// first: what chunk expansion makes of the run is one START (if the first
/// opens the item) and the CONTENT / ARGS pieces, which the merged chunk
/// yields concatenated, with the metadata folded.
struct ChunkRun {
    first: Event,
    /// The first chunk's members: each key and where its value lies in
    /// `first`'s text (read once; merging compares raw values).
    fields: ChunkFields,
    /// Concatenated string bodies (escapes kept); `None` while no chunk of
    /// the run had a `delta`.
    delta: Option<String>,
    metadata: Option<RawMap>,
    merged: usize,
}

/// A chunk's members: each key and where its value lies in the text.
type ChunkFields = Vec<(String, std::ops::Range<usize>)>;

fn chunk_id_field(ty: &EventType) -> Option<&'static str> {
    match ty {
        EventType::TextMessageChunk | EventType::ReasoningMessageChunk => Some("messageId"),
        EventType::ToolCallChunk => Some("toolCallId"),
        _ => None,
    }
}

/// A chunk's `delta` body and `metadata`, each `None` when absent.
type ChunkParts<'a> = (Option<std::borrow::Cow<'a, str>>, Option<RawMap>);

/// A chunk's `delta` body (absent: `Some(None)`) and `metadata`, when both
/// merge the way expansion and the reducer apply them.
///
/// The body is written as the JSON library writes the decoded string: a
/// body whose escapes are all the library's own already is (valid JSON
/// text holds no raw `"` or control character), any other is decoded and
/// written again.
fn chunk_parts<'a>(fields: &Members<'a>) -> Option<ChunkParts<'a>> {
    let delta = match fields.get("delta") {
        None => None,
        Some(raw) if raw.starts_with('"') => {
            let body = string_body(raw)?;
            if !canonical_body(body.as_bytes()) {
                let decoded: String = serde_json::from_str(raw).ok()?;
                let written = serde_json::to_string(&decoded).ok()?;
                Some(std::borrow::Cow::Owned(string_body(&written)?.to_owned()))
            } else {
                Some(std::borrow::Cow::Borrowed(body))
            }
        }
        Some(_) => return None,
    };
    let metadata = match fields.get("metadata") {
        None => None,
        Some(raw) => Some(RawMap::parse(raw)?),
    };
    Some((delta, metadata))
}

impl ChunkRun {
    /// `Err` gives back an event that cannot start a run.
    fn start(event: EventCow<'_>) -> Result<ChunkRun, EventCow<'_>> {
        let Some((fields, delta, metadata)) = Self::parts(event.as_ref()) else {
            return Err(event);
        };
        let delta = delta.map(std::borrow::Cow::into_owned);
        Ok(ChunkRun {
            first: event.into_event(),
            fields,
            delta,
            metadata,
            merged: 0,
        })
    }

    /// A chunk's members (each key and where its value lies in the text),
    /// `delta` body and metadata, when it can start a run.
    fn parts(
        event: EventRef<'_>,
    ) -> Option<(
        ChunkFields,
        Option<std::borrow::Cow<'_, str>>,
        Option<RawMap>,
    )> {
        chunk_id_field(event.event_type())?;
        let json = event.json();
        let members = Members::read(event)?;
        let (delta, metadata) = chunk_parts(&members)?;
        // The raw values are slices of `json`: their offsets locate them.
        let base = json.as_ptr() as usize;
        let fields = members
            .iter()
            .map(|(key, value)| {
                let at = value.as_ptr() as usize - base;
                (key.to_owned(), at..at + value.len())
            })
            .collect();
        Some((fields, delta, metadata))
    }

    /// The first chunk's raw value of `key` (its last occurrence).
    fn first_field(&self, key: &str) -> Option<&str> {
        let (_, range) = self.fields.iter().rev().find(|(k, _)| k == key)?;
        self.first.json().get(range.clone())
    }

    /// Merges `event` into the run when expansion makes it a plain
    /// continuation of the run's item in the same lane: the same type, no id
    /// or the run's own id, the same `subagentRunId`, and every other field
    /// but `delta`, `metadata` and `timestamp` repeating the first chunk's.
    fn absorb(&mut self, event: EventRef<'_>) -> bool {
        if event.event_type() != self.first.event_type() {
            return false;
        }
        let Some(fields) = Members::read(event) else {
            return false;
        };
        let Some((delta, metadata)) = chunk_parts(&fields) else {
            return false;
        };
        let agrees = fields.iter().all(|(k, _)| match k {
            "type" | "delta" | "metadata" | "timestamp" => true,
            _ => match (self.first_field(k), fields.get(k)) {
                (Some(first), Some(value)) => same_json(first, value),
                _ => false,
            },
        });
        let same_lane = match (
            self.first_field("subagentRunId"),
            fields.get("subagentRunId"),
        ) {
            (None, None) => true,
            (Some(first), Some(value)) => same_json(first, value),
            _ => false,
        };
        if !agrees || !same_lane {
            return false;
        }
        if let Some(body) = delta {
            self.delta.get_or_insert_with(String::new).push_str(&body);
        }
        if let Some(m) = metadata {
            merge_raw(&mut self.metadata, m);
        }
        self.merged += 1;
        true
    }

    /// The first chunk with the merged `delta` and `metadata`, written as
    /// the JSON library writes the first chunk parsed as an object (a key
    /// once, where it first appears, with its last value; values in their
    /// canonical form), without parsing what is already canonical.
    fn into_event(self) -> Result<Event, CompactError> {
        if self.merged == 0 {
            return Ok(self.first);
        }
        let json = self.first.json();
        let mut text =
            String::with_capacity(json.len() + self.delta.as_ref().map_or(0, String::len) + 16);
        text.push('{');
        let mut first = true;
        let push_key = |text: &mut String, first: &mut bool, key: &str| {
            if !*first {
                text.push(',');
            }
            *first = false;
            push_json_string(text, key).map_err(CompactError::Json)?;
            text.push(':');
            Ok::<(), CompactError>(())
        };
        let delta = self.delta.as_deref();
        let metadata = self.metadata.as_ref();
        let mut has_delta = false;
        let mut has_metadata = false;
        for (i, (key, _)) in self.fields.iter().enumerate() {
            if self.fields[..i].iter().any(|(k, _)| k == key) {
                continue;
            }
            let raw = self
                .first_field(key)
                .ok_or(CompactError::Internal("a chunk member lies in its text"))?;
            push_key(&mut text, &mut first, key)?;
            match key.as_str() {
                "delta" => {
                    has_delta = true;
                    text.push('"');
                    text.push_str(delta.unwrap_or_default());
                    text.push('"');
                }
                "metadata" if metadata.is_some() => {
                    has_metadata = true;
                    if let Some(metadata) = metadata {
                        metadata.write(&mut text).map_err(CompactError::Json)?;
                    }
                }
                "metadata" => {
                    has_metadata = true;
                    push_canonical(&mut text, raw).map_err(CompactError::Json)?;
                }
                _ => push_canonical(&mut text, raw).map_err(CompactError::Json)?,
            }
        }
        if !has_delta && let Some(delta) = delta {
            push_key(&mut text, &mut first, "delta")?;
            text.push('"');
            text.push_str(delta);
            text.push('"');
        }
        if !has_metadata && let Some(metadata) = metadata {
            push_key(&mut text, &mut first, "metadata")?;
            metadata.write(&mut text).map_err(CompactError::Json)?;
        }
        text.push('}');
        // Keys and values of the validated first chunk, each written in
        // its canonical form, the chunks' escaped bodies concatenated and
        // their metadata merged as raw members: nothing to validate again.
        Ok(Event::from_assembled(text, self.first.event_type().clone()))
    }
}

/// The one CONTENT / ARGS event standing for an anchor's pieces, shaped as the
/// official `compactEvents` shapes it: `type`, id, `delta`, `metadata`.
fn synthesize(anchor: &Anchor) -> Result<Event, CompactError> {
    let id = serde_json::to_string(&anchor.id).map_err(CompactError::Json)?;
    let mut text = String::with_capacity(anchor.delta.len() + id.len() + 64);
    text.push_str("{\"type\":\"");
    text.push_str(anchor.kind.content_type());
    text.push_str("\",\"");
    text.push_str(anchor.kind.id_field());
    text.push_str("\":");
    text.push_str(&id);
    text.push_str(",\"delta\":\"");
    text.push_str(&anchor.delta);
    text.push('"');
    if let Some(metadata) = &anchor.metadata {
        text.push_str(",\"metadata\":");
        metadata.write(&mut text).map_err(CompactError::Json)?;
    }
    text.push('}');
    // A fixed shape over the validated pieces' id, escaped bodies and raw
    // metadata: nothing to validate again.
    let ty = match anchor.kind {
        Kind::Text => EventType::TextMessageContent,
        Kind::Reasoning => EventType::ReasoningMessageContent,
        Kind::Tool => EventType::ToolCallArgs,
    };
    Ok(Event::from_assembled(text, ty))
}

/// `mergeMetadata`: shallow, last write wins, a new key goes last.
pub(crate) fn merge_metadata(
    target: &mut Option<Map<String, Value>>,
    incoming: Map<String, Value>,
) {
    match target {
        None => *target = Some(incoming),
        Some(existing) => {
            for (k, v) in incoming {
                existing.insert(k, v);
            }
        }
    }
}

/// Compacts a whole sequence in `deltas` mode.
pub fn compact_deltas<I>(events: I) -> Result<Vec<Event>, CompactError>
where
    I: IntoIterator<Item = Event>,
{
    let mut compactor = DeltaCompactor::new();
    let mut out = Vec::new();
    for event in events {
        compactor.push(event)?;
        out.extend(compactor.drain());
    }
    compactor.finish()?;
    out.extend(compactor.drain());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(lines: &[&str]) -> Vec<Event> {
        lines
            .iter()
            .map(|l| Event::from_json(l).expect("test events are JSON objects"))
            .collect()
    }

    fn texts(events: &[Event]) -> Vec<String> {
        events.iter().map(|e| e.json().to_owned()).collect()
    }

    /// A merged chunk run is written as the first chunk parsed and written
    /// again by the JSON library: values that differ only in spelling still
    /// merge, escapes and spacing take their canonical form, a repeated key
    /// appears once (where it first stood, with its last value), an
    /// exponent gets its sign, and an escaped key reads as the key it spells.
    #[test]
    fn merged_chunk_runs_are_written_in_canonical_form() {
        let out = compact_deltas(events(&[
            r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"m","role":"assistant","delta":"a\u00e9","rawEvent":{ "b" : [1, 2.50] },"name":"x\/y","name":"z","n":-0.0e1}"#,
            r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"m","delta":"b\n","rawEvent":{"b":[1,2.50]},"metadata":{"k":1}}"#,
            r#"{"type":"TEXT_MESSAGE_CHUNK","message\u0049d":"m","delta":"c"}"#,
            r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"m2","delta":"d"}"#,
        ]))
        .unwrap();
        assert_eq!(
            texts(&out),
            [
                r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"m","role":"assistant","delta":"aéb\nc","rawEvent":{"b":[1,2.50]},"name":"z","n":-0.0e+1,"metadata":{"k":1}}"#,
                r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"m2","delta":"d"}"#,
            ]
        );
    }

    /// Every spelling of a value in a merged chunk comes out as the JSON
    /// library writes the parsed value (the way merged chunks were written
    /// before they were assembled from raw members).
    #[test]
    fn merged_chunk_values_match_the_parsed_and_written_value() {
        let spellings = [
            "1",
            "-0",
            "1.50",
            "1e5",
            "1E5",
            "1e-5",
            "-2.5E+3",
            "0.0e0",
            "true",
            "null",
            r#""plain""#,
            r#""\u00e9\/\"""#,
            r#""\ud83d\ude00""#,
            r#""tab\there""#,
            "[ 1 , 2 ]",
            r#"{"b":1,"a":2}"#,
            r#"{ "a" : 1, "a" : 2 }"#,
            r#"[{"x":[]} ,{}]"#,
        ];
        for raw in spellings {
            let first =
                format!(r#"{{"type":"TOOL_CALL_CHUNK","toolCallId":"t","v":{raw},"delta":"a"}}"#);
            let out = compact_deltas(events(&[
                &first,
                r#"{"type":"TOOL_CALL_CHUNK","toolCallId":"t","delta":"b"}"#,
            ]))
            .unwrap();
            let value: Value = serde_json::from_str(raw).unwrap();
            let expected = format!(
                r#"{{"type":"TOOL_CALL_CHUNK","toolCallId":"t","v":{},"delta":"ab"}}"#,
                serde_json::to_string(&value).unwrap()
            );
            assert_eq!(texts(&out), [expected], "{raw}");
        }
    }

    #[test]
    fn one_stream_takes_the_official_shape() {
        let out = compact_deltas(events(&[
            r#"{"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant","timestamp":1}"#,
            r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"a\"","metadata":{"k":1,"j":2}}"#,
            r#"{"type":"CUSTOM","name":"c","value":1}"#,
            r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"\u00e9","metadata":{"k":3}}"#,
            r#"{"type":"TEXT_MESSAGE_END","messageId":"m"}"#,
        ]))
        .unwrap();
        assert_eq!(
            texts(&out),
            [
                r#"{"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant","timestamp":1}"#,
                r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"a\"\u00e9","metadata":{"k":3,"j":2}}"#,
                r#"{"type":"TEXT_MESSAGE_END","messageId":"m"}"#,
                r#"{"type":"CUSTOM","name":"c","value":1}"#,
            ]
        );
    }

    #[test]
    fn parallel_tool_calls_keep_their_start_order() {
        let out = compact_deltas(events(&[
            r#"{"type":"TOOL_CALL_START","toolCallId":"a","toolCallName":"f"}"#,
            r#"{"type":"TOOL_CALL_START","toolCallId":"b","toolCallName":"g"}"#,
            r#"{"type":"TOOL_CALL_ARGS","toolCallId":"b","delta":"1"}"#,
            r#"{"type":"TOOL_CALL_ARGS","toolCallId":"a","delta":"2"}"#,
            r#"{"type":"TOOL_CALL_END","toolCallId":"b"}"#,
            r#"{"type":"TOOL_CALL_END","toolCallId":"a"}"#,
        ]))
        .unwrap();
        let ids: Vec<String> = out
            .iter()
            .map(|e| format!("{}:{}", e.type_name(), e.to_value()["toolCallId"]))
            .collect();
        assert_eq!(
            ids,
            [
                r#"TOOL_CALL_START:"a""#,
                r#"TOOL_CALL_ARGS:"a""#,
                r#"TOOL_CALL_END:"a""#,
                r#"TOOL_CALL_START:"b""#,
                r#"TOOL_CALL_ARGS:"b""#,
                r#"TOOL_CALL_END:"b""#,
            ]
        );
    }

    #[test]
    fn an_observer_splits_the_stream_and_a_run_error_flushes_it_in_place() {
        let out = compact_deltas(events(&[
            r#"{"type":"RUN_STARTED","threadId":"t","runId":"r"}"#,
            r#"{"type":"TEXT_MESSAGE_START","messageId":"m"}"#,
            r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"a"}"#,
            r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"b"}"#,
            r#"{"type":"MESSAGES_SNAPSHOT","messages":[]}"#,
            r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"c"}"#,
            r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"d"}"#,
            r#"{"type":"RUN_ERROR","message":"x"}"#,
        ]))
        .unwrap();
        let deltas: Vec<String> = out
            .iter()
            .map(|e| match e.to_value().get("delta") {
                Some(d) => format!("{}={}", e.type_name(), d),
                None => e.type_name().to_owned(),
            })
            .collect();
        assert_eq!(
            deltas,
            [
                "RUN_STARTED",
                "TEXT_MESSAGE_START",
                r#"TEXT_MESSAGE_CONTENT="ab""#,
                "MESSAGES_SNAPSHOT",
                r#"TEXT_MESSAGE_CONTENT="cd""#,
                "RUN_ERROR",
            ]
        );
    }

    #[test]
    fn pieces_the_reducer_reads_differently_stay_as_they_are() {
        let input = events(&[
            r#"{"type":"TEXT_MESSAGE_START","messageId":"m"}"#,
            r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"a"}"#,
            r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m"}"#,
            r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":5}"#,
            r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"b","metadata":null}"#,
            r#"{"type":"TEXT_MESSAGE_CONTENT","messageId":7,"delta":"c"}"#,
        ]);
        let out = compact_deltas(input.clone()).unwrap();
        assert_eq!(texts(&out[2..]), texts(&input[2..]));
    }

    #[test]
    fn the_held_limit_splits_a_stream_that_never_ends() {
        let mut compactor = DeltaCompactor::with_held_limit(4);
        let mut out = Vec::new();
        let mut input = vec![r#"{"type":"TEXT_MESSAGE_START","messageId":"m"}"#.to_owned()];
        for i in 0..10 {
            input.push(format!(
                r#"{{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"{i}"}}"#
            ));
            input.push(format!(r#"{{"type":"CUSTOM","name":"c","value":{i}}}"#));
        }
        for line in &input {
            compactor.push(Event::from_json(line).unwrap()).unwrap();
            out.extend(compactor.drain());
        }
        // Released before the end: memory does not grow with the stream.
        assert!(out.len() >= 8, "{out:?}");
        compactor.finish().unwrap();
        out.extend(compactor.drain());
        let text: String = out
            .iter()
            .filter_map(|e| {
                e.to_value()
                    .get("delta")
                    .and_then(|d| d.as_str().map(str::to_owned))
            })
            .collect();
        assert_eq!(text, "0123456789");
        assert!(out.len() < input.len());
    }

    #[test]
    fn state_windows_fold_from_the_last_snapshot_before_run_boundaries() {
        let out = compact_deltas(events(&[
            r#"{"type":"RUN_STARTED","threadId":"t","runId":"r"}"#,
            r#"{"type":"STATE_DELTA","delta":[{"op":"add","path":"/x","value":1}],"metadata":{"a":1}}"#,
            r#"{"type":"STATE_SNAPSHOT","snapshot":{"y":1}}"#,
            r#"{"type":"CUSTOM","name":"c"}"#,
            r#"{"type":"STATE_DELTA","delta":[{"op":"remove","path":"/nope"}]}"#,
            r#"{"type":"STATE_DELTA","delta":[{"op":"add","path":"/z","value":2}],"metadata":{"b":2}}"#,
            r#"{"type":"RUN_FINISHED","threadId":"t","runId":"r"}"#,
            r#"{"type":"STATE_DELTA","delta":[{"op":"add","path":"/w","value":3}]}"#,
        ]))
        .unwrap();
        assert_eq!(
            texts(&out),
            [
                r#"{"type":"RUN_STARTED","threadId":"t","runId":"r"}"#,
                r#"{"type":"CUSTOM","name":"c"}"#,
                r#"{"type":"STATE_SNAPSHOT","snapshot":{"y":1,"z":2},"metadata":{"a":1,"b":2}}"#,
                r#"{"type":"RUN_FINISHED","threadId":"t","runId":"r"}"#,
                r#"{"type":"STATE_DELTA","delta":[{"op":"add","path":"/w","value":3}]}"#,
            ]
        );
    }
    #[test]
    fn adjacent_chunks_of_one_item_merge_into_the_first() {
        let out = compact_deltas(events(&[
            r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"m","role":"assistant","delta":"a","metadata":{"k":1}}"#,
            r#"{"type":"TEXT_MESSAGE_CHUNK","delta":"b\n","timestamp":3}"#,
            r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"m","delta":"c","metadata":{"j":2,"k":3}}"#,
            r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"n","delta":"x"}"#,
            r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"n","delta":"y","subagentRunId":"s"}"#,
            r#"{"type":"CUSTOM","name":"c"}"#,
            r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"n","delta":"z"}"#,
        ]))
        .unwrap();
        assert_eq!(
            texts(&out),
            [
                r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"m","role":"assistant","delta":"ab\nc","metadata":{"k":3,"j":2}}"#,
                r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"n","delta":"x"}"#,
                r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"n","delta":"y","subagentRunId":"s"}"#,
                r#"{"type":"CUSTOM","name":"c"}"#,
                r#"{"type":"TEXT_MESSAGE_CHUNK","messageId":"n","delta":"z"}"#,
            ]
        );
    }

    #[test]
    fn a_continuation_naming_another_tool_or_id_is_not_merged() {
        let input = events(&[
            r#"{"type":"TOOL_CALL_CHUNK","toolCallId":"t","toolCallName":"f","delta":"{"}"#,
            r#"{"type":"TOOL_CALL_CHUNK","toolCallId":"t","toolCallName":"g","delta":"1"}"#,
            r#"{"type":"TOOL_CALL_CHUNK","toolCallId":"u","delta":"2"}"#,
            r#"{"type":"TOOL_CALL_CHUNK","delta":7}"#,
        ]);
        let out = compact_deltas(input.clone()).unwrap();
        assert_eq!(texts(&out), texts(&input));
    }

    #[test]
    fn activity_deltas_fold_into_their_replacing_snapshot() {
        let out = compact_deltas(events(&[
            r#"{"type":"ACTIVITY_SNAPSHOT","messageId":"a","activityType":"plan","content":{"s":0},"timestamp":1}"#,
            r#"{"type":"CUSTOM","name":"c"}"#,
            r#"{"type":"ACTIVITY_DELTA","messageId":"a","activityType":"plan2","patch":[{"op":"replace","path":"/s","value":1}],"metadata":{"k":1}}"#,
            r#"{"type":"ACTIVITY_DELTA","messageId":"a","activityType":"plan3","patch":[{"op":"remove","path":"/nope"}],"metadata":{"j":2}}"#,
            r#"{"type":"ACTIVITY_DELTA","messageId":"a","activityType":"plan","patch":[{"op":"copy","from":"/s","path":"/t"}]}"#,
            r#"{"type":"ACTIVITY_DELTA","messageId":"a","activityType":"plan","patch":[{"op":"add","path":"/u","value":2}]}"#,
            r#"{"type":"ACTIVITY_SNAPSHOT","messageId":"b","activityType":"plan","content":{},"replace":false}"#,
            r#"{"type":"ACTIVITY_DELTA","messageId":"b","activityType":"plan","patch":[{"op":"add","path":"/u","value":2}]}"#,
        ]))
        .unwrap();
        assert_eq!(
            texts(&out),
            [
                r#"{"type":"ACTIVITY_SNAPSHOT","messageId":"a","activityType":"plan2","content":{"s":1},"timestamp":1,"metadata":{"k":1,"j":2}}"#,
                r#"{"type":"CUSTOM","name":"c"}"#,
                r#"{"type":"ACTIVITY_DELTA","messageId":"a","activityType":"plan","patch":[{"op":"copy","from":"/s","path":"/t"}]}"#,
                r#"{"type":"ACTIVITY_DELTA","messageId":"a","activityType":"plan","patch":[{"op":"add","path":"/u","value":2}]}"#,
                r#"{"type":"ACTIVITY_SNAPSHOT","messageId":"b","activityType":"plan","content":{},"replace":false}"#,
                r#"{"type":"ACTIVITY_DELTA","messageId":"b","activityType":"plan","patch":[{"op":"add","path":"/u","value":2}]}"#,
            ]
        );
    }
}
