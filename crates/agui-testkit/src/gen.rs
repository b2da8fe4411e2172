//! Seeded generators of realistic AG-UI 1.0 event streams.
//!
//! Every generator is a pure function of its arguments: the same profile and
//! seed always give the same events (ChaCha8, no clocks, no global state).
//!
//! - [`stream`]`(profile, seed)`: a stream the official client pipeline
//!   accepts (enforcement, chunk expansion, `verifyEvents`), shaped by a
//!   [`Profile`]. Every profile produces one or more runs; later runs resend
//!   the history in `RUN_STARTED.input.messages`.
//! - [`invalid_stream`]`(seed)` / [`invalid_stream_with`]: a valid stream with
//!   one mutation meant to break one verification or chunk rule (see
//!   [`Mutation`]).
//! - [`chunk_soup`]`(seed)`: a run of random chunk events and lane-closing
//!   events, mostly invalid, to compare chunk expansion and its errors.
//! - [`realistic`]`(n_events, seed)`: exactly `n_events` events of the
//!   [`Profile::Mixed`] shape with long runs and a bounded history window,
//!   for benchmarks (about 162 bytes per event, linear time).
//!
//! The streams are schema-valid for the official `@ag-ui/core` 1.0.0 schemas,
//! except for the deliberate extras of [`Profile::Unknown`] (unknown top-level
//! fields and unknown event types, which the client drops or strips before
//! verification).

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Map, Value, json};

use agui_protocol::Event;

/// The shape of a generated stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Profile {
    /// One thing at a time: user turn, assistant text, a tool call and its result.
    Sequential,
    /// Several tool calls open at once, ending in another order than they started.
    ParallelTools,
    /// Overlapping text messages with different ids.
    ConcurrentText,
    /// Tool calls streamed inside their still-open parent assistant message.
    ToolInMessage,
    /// `REASONING_ENCRYPTED_VALUE` for messages, reasoning messages and tool calls.
    Encrypted,
    /// `MESSAGES_SNAPSHOT` in the middle of a text stream and of tool-call args.
    SnapshotMidStream,
    /// `RUN_ERROR` with items still open, then later runs resending history.
    ErrorRecovery,
    /// `ACTIVITY_SNAPSHOT` and `ACTIVITY_DELTA`.
    Activity,
    /// Reasoning spans and reasoning messages.
    Reasoning,
    /// `TEXT_MESSAGE_CHUNK`, `TOOL_CALL_CHUNK` and `REASONING_MESSAGE_CHUNK`.
    Chunks,
    /// Subagents (lifecycle and attribution-only), nested, with shared step names.
    Subagents,
    /// Several runs, some branching from an earlier run with `parentRunId`.
    Branching,
    /// The last run is still in flight: no terminal, items left open.
    InFlight,
    /// `STATE_SNAPSHOT` and JSON-patch `STATE_DELTA`s, some of which fail to apply.
    State,
    /// `metadata` on events.
    Metadata,
    /// Unknown top-level fields and unknown event types.
    Unknown,
    /// Everything above, mixed.
    Mixed,
}

impl Profile {
    /// Every profile, in declaration order.
    pub const ALL: &'static [Profile] = &[
        Profile::Sequential,
        Profile::ParallelTools,
        Profile::ConcurrentText,
        Profile::ToolInMessage,
        Profile::Encrypted,
        Profile::SnapshotMidStream,
        Profile::ErrorRecovery,
        Profile::Activity,
        Profile::Reasoning,
        Profile::Chunks,
        Profile::Subagents,
        Profile::Branching,
        Profile::InFlight,
        Profile::State,
        Profile::Metadata,
        Profile::Unknown,
        Profile::Mixed,
    ];

    /// A short lowercase name (for test messages).
    pub fn name(self) -> &'static str {
        match self {
            Profile::Sequential => "sequential",
            Profile::ParallelTools => "parallel-tools",
            Profile::ConcurrentText => "concurrent-text",
            Profile::ToolInMessage => "tool-in-message",
            Profile::Encrypted => "encrypted",
            Profile::SnapshotMidStream => "snapshot-mid-stream",
            Profile::ErrorRecovery => "error-recovery",
            Profile::Activity => "activity",
            Profile::Reasoning => "reasoning",
            Profile::Chunks => "chunks",
            Profile::Subagents => "subagents",
            Profile::Branching => "branching",
            Profile::InFlight => "in-flight",
            Profile::State => "state",
            Profile::Metadata => "metadata",
            Profile::Unknown => "unknown",
            Profile::Mixed => "mixed",
        }
    }

    fn features(self) -> Features {
        let base = Features::default();
        match self {
            Profile::Sequential => base,
            Profile::ParallelTools => Features {
                concurrency: 4,
                parallel_tools: true,
                ..base
            },
            Profile::ConcurrentText => Features {
                concurrency: 3,
                concurrent_text: true,
                ..base
            },
            Profile::ToolInMessage => Features {
                concurrency: 2,
                tool_in_message: true,
                ..base
            },
            Profile::Encrypted => Features {
                encrypted: true,
                reasoning: true,
                ..base
            },
            Profile::SnapshotMidStream => Features {
                concurrency: 2,
                snapshots: true,
                tool_in_message: true,
                ..base
            },
            Profile::ErrorRecovery => Features {
                concurrency: 2,
                run_errors: true,
                runs: (3, 5),
                ..base
            },
            Profile::Activity => Features {
                activity: true,
                ..base
            },
            Profile::Reasoning => Features {
                reasoning: true,
                concurrency: 2,
                ..base
            },
            Profile::Chunks => Features {
                chunks: true,
                reasoning: true,
                ..base
            },
            Profile::Subagents => Features {
                concurrency: 3,
                subagents: true,
                ..base
            },
            Profile::Branching => Features {
                branching: true,
                runs: (3, 6),
                ..base
            },
            Profile::InFlight => Features {
                concurrency: 3,
                in_flight: true,
                concurrent_text: true,
                parallel_tools: true,
                ..base
            },
            Profile::State => Features {
                state: true,
                ..base
            },
            Profile::Metadata => Features {
                metadata: true,
                chunks: true,
                ..base
            },
            Profile::Unknown => Features {
                unknown: true,
                chunks: true,
                ..base
            },
            Profile::Mixed => Features::all(),
        }
    }
}

#[derive(Clone, Copy)]
struct Features {
    runs: (u32, u32),
    turns: (u32, u32),
    concurrency: usize,
    parallel_tools: bool,
    concurrent_text: bool,
    tool_in_message: bool,
    encrypted: bool,
    snapshots: bool,
    run_errors: bool,
    activity: bool,
    reasoning: bool,
    chunks: bool,
    subagents: bool,
    branching: bool,
    in_flight: bool,
    state: bool,
    metadata: bool,
    unknown: bool,
}

impl Default for Features {
    fn default() -> Self {
        Features {
            runs: (1, 3),
            turns: (1, 3),
            concurrency: 1,
            parallel_tools: false,
            concurrent_text: false,
            tool_in_message: false,
            encrypted: false,
            snapshots: false,
            run_errors: false,
            activity: false,
            reasoning: false,
            chunks: false,
            subagents: false,
            branching: false,
            in_flight: false,
            state: false,
            metadata: false,
            unknown: false,
        }
    }
}

impl Features {
    fn all() -> Features {
        Features {
            runs: (2, 5),
            turns: (1, 4),
            concurrency: 3,
            parallel_tools: true,
            concurrent_text: true,
            tool_in_message: true,
            encrypted: true,
            snapshots: true,
            run_errors: true,
            activity: true,
            reasoning: true,
            chunks: true,
            subagents: true,
            branching: true,
            in_flight: true,
            state: true,
            metadata: true,
            unknown: true,
        }
    }
}

/// A valid stream of the given profile. Deterministic per `(profile, seed)`.
pub fn stream(profile: Profile, seed: u64) -> Vec<Event> {
    let mut g = Gen::new(profile.features(), seed ^ profile_salt(profile));
    g.generate(None);
    g.finish()
}

/// Exactly `n_events` events of the [`Profile::Mixed`] shape, for benchmarks.
/// Runs follow each other until the count is reached; the last run is cut
/// where the count ends (so it may be in flight).
pub fn realistic(n_events: usize, seed: u64) -> Vec<Event> {
    let mut f = Features::all();
    // Long runs, as a production thread has: many turns per run.
    f.turns = (20, 60);
    f.runs = (u32::MAX, u32::MAX);
    f.in_flight = false;
    // Snapshots restate the whole conversation; production streams send
    // them rarely, and they would dominate the byte count here. Unknown
    // types are rare in production too.
    f.snapshots = false;
    f.unknown = false;
    let mut g = Gen::new(f, seed);
    g.realistic = true;
    g.generate(Some(n_events));
    let mut out = g.finish();
    out.truncate(n_events);
    out
}

fn profile_salt(p: Profile) -> u64 {
    (Profile::ALL.iter().position(|x| *x == p).unwrap_or(0) as u64 + 1)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

// ---------------------------------------------------------------------------
// The engine
// ---------------------------------------------------------------------------

const WORDS: &[&str] = &[
    "the",
    "weather",
    "in",
    "Paris",
    "is",
    "mild",
    "today",
    "and",
    "I",
    "found",
    "three",
    "results",
    "for",
    "your",
    "query",
    "about",
    "flights",
    "to",
    "Berlin",
    "next",
    "week",
    "let",
    "me",
    "check",
    "that",
    "summary",
    "of",
    "document",
    "shows",
    "revenue",
    "grew",
    "by",
    "twelve",
    "percent",
    "here",
    "are",
    "options",
    "you",
    "can",
    "choose",
    "from",
    "sure",
    "café",
    "naïve",
    "\"quoted\"",
    "line\nbreak",
    "emoji 🚀",
    "tab\tsep",
];
const TOOLS: &[&str] = &[
    "get_weather",
    "search_web",
    "read_file",
    "run_sql",
    "send_email",
    "book_flight",
];
const SUBAGENTS: &[&str] = &["researcher", "coder", "planner", "critic"];
const STEPS: &[&str] = &["plan", "tools", "respond", "retrieve", "reflect"];

/// Who produced an event: `None` is the parent agent.
type Owner = Option<String>;

enum Task {
    Text {
        id: String,
        owner: Owner,
        role: &'static str,
        deltas: u32,
        started: bool,
        /// Tool calls to stream inside this message while it is open.
        inner_tools: u32,
    },
    Tool {
        id: String,
        name: &'static str,
        parent: Option<String>,
        owner: Owner,
        args: Vec<String>,
        next: usize,
        started: bool,
        /// Emit a result after the end.
        result: bool,
    },
    Reasoning {
        span: String,
        msg: String,
        owner: Owner,
        deltas: u32,
        phase: u8,
    },
    Step {
        name: String,
        owner: Owner,
        started: bool,
    },
    Activity {
        id: String,
        owner: Owner,
        kind: &'static str,
        updates: u32,
        started: bool,
    },
    Subagent {
        id: String,
        parent: Option<String>,
        lifecycle: bool,
        inner: Vec<Task>,
        started: bool,
        fails: bool,
    },
    /// One event, emitted as it is.
    Single(Value),
}

struct Gen {
    rng: ChaCha8Rng,
    f: Features,
    out: Vec<Event>,
    thread: String,
    counter: u64,
    ts: u64,
    /// The conversation as the reducer would hold it (approximately).
    history: Vec<Value>,
    /// (runId, history length at its end) for each finished run.
    runs: Vec<(String, usize)>,
    state: Value,
    /// Open steps per owner (to keep (owner, name) unique while open).
    open_steps: Vec<(Owner, String)>,
    realistic: bool,
    /// Finished tool calls (id, owner) that may get encrypted values.
    closed_tools: Vec<(String, Owner)>,
    closed_messages: Vec<(String, Owner)>,
    /// Subagents started with `SUBAGENT_STARTED` in this run.
    lifecycle_subagents: Vec<String>,
}

impl Gen {
    fn new(f: Features, seed: u64) -> Gen {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let thread = format!("thread_{:08x}", rng.r#gen::<u32>());
        let ts = 1_760_000_000_000 + rng.gen_range(0..10_000_000u64);
        Gen {
            rng,
            f,
            out: Vec::new(),
            thread,
            counter: 0,
            ts,
            history: Vec::new(),
            runs: Vec::new(),
            state: json!({}),
            open_steps: Vec::new(),
            realistic: false,
            closed_tools: Vec::new(),
            closed_messages: Vec::new(),
            lifecycle_subagents: Vec::new(),
        }
    }

    fn finish(self) -> Vec<Event> {
        self.out
    }

    fn id(&mut self, prefix: &str) -> String {
        self.counter += 1;
        let salt: u64 = self.rng.r#gen();
        if self.realistic {
            // Production ids are long (provider ids, UUID-like handles).
            format!("{prefix}_{:x}{salt:016x}", self.counter)
        } else {
            format!("{prefix}_{}{:06x}", self.counter, salt & 0xff_ffff)
        }
    }

    fn chance(&mut self, p: f64) -> bool {
        self.rng.gen_bool(p)
    }

    fn words(&mut self, lo: usize, hi: usize) -> String {
        let n = self.rng.gen_range(lo..=hi);
        let mut s = String::new();
        for i in 0..n {
            if i > 0 || self.chance(0.7) {
                s.push(' ');
            }
            let w = *WORDS.choose(&mut self.rng).unwrap_or(&"x");
            s.push_str(w);
        }
        s
    }

    /// Emits one event: adds a timestamp, and per the profile metadata or
    /// unknown fields, then records it.
    fn emit(&mut self, mut v: Value) {
        self.ts += self.rng.gen_range(1..40);
        if let Value::Object(map) = &mut v {
            if self.rng.gen_bool(0.8) {
                map.insert("timestamp".into(), json!(self.ts));
            }
            if self.f.metadata && self.rng.gen_bool(0.3) {
                let meta = self.metadata_value();
                map.insert("metadata".into(), meta);
            }
            if self.f.unknown && self.rng.gen_bool(0.15) {
                map.insert(
                    "x_vendor".into(),
                    json!({"trace": self.counter, "tags": ["a", "b"], "n": null}),
                );
            }
        }
        self.push(v);
        if self.f.unknown && self.rng.gen_bool(0.05) {
            let n = self.counter;
            self.push(json!({"type": "X_VENDOR_HEARTBEAT", "seq": n, "detail": {"ok": true}}));
        }
    }

    fn push(&mut self, v: Value) {
        // The generator only builds objects with a string type; a failure here
        // is a bug in this file, reported loudly in tests.
        let e = Event::from_serialize(&v).expect("generated events are valid envelopes");
        self.out.push(e);
    }

    fn metadata_value(&mut self) -> Value {
        match self.rng.gen_range(0..4) {
            0 => json!({"provider": "openai", "model": "gpt-4o"}),
            1 => json!({"usage": {"inputTokens": self.rng.gen_range(1..500), "outputTokens": 12}}),
            2 => json!({"ag-ui": {"source": "gen"}, "note": null}),
            _ => json!({}),
        }
    }

    fn tag(map: &mut Map<String, Value>, owner: &Owner) {
        if let Some(o) = owner {
            map.insert("subagentRunId".into(), json!(o));
        }
    }

    fn ev(&self, ty: &str, fields: Value, owner: &Owner) -> Value {
        let mut map = Map::new();
        map.insert("type".into(), json!(ty));
        if let Value::Object(f) = fields {
            for (k, v) in f {
                map.insert(k, v);
            }
        }
        Gen::tag(&mut map, owner);
        Value::Object(map)
    }

    fn history_msg(&mut self, mut msg: Value, owner: &Owner) {
        if let (Some(o), Value::Object(m)) = (owner, &mut msg) {
            m.insert("subagentRunId".into(), json!(o));
        }
        self.history.push(msg);
    }

    fn find_msg(&mut self, id: &str) -> Option<&mut Value> {
        self.history
            .iter_mut()
            .rev()
            .find(|m| m["id"].as_str() == Some(id))
    }

    // -- runs ---------------------------------------------------------------

    fn generate(&mut self, target: Option<usize>) {
        let (lo, hi) = self.f.runs;
        let n_runs = if target.is_some() {
            u32::MAX
        } else {
            self.rng.gen_range(lo..=hi)
        };
        let mut r = 0;
        while r < n_runs {
            if let Some(t) = target
                && self.out.len() >= t
            {
                break;
            }
            let last = target.is_none() && r + 1 == n_runs;
            self.run(r, last);
            r += 1;
        }
    }

    fn run(&mut self, index: u32, last: bool) {
        let run_id = self.id("run");
        let mut started = json!({"type": "RUN_STARTED", "threadId": self.thread, "runId": run_id});
        // Branching: start from an earlier run's history.
        if self.f.branching && index > 0 && !self.runs.is_empty() && self.chance(0.5) {
            let k = self.rng.gen_range(0..self.runs.len());
            let (parent, len) = self.runs[k].clone();
            started["parentRunId"] = json!(parent);
            self.history.truncate(len);
        } else if !self.runs.is_empty() && self.chance(0.6) {
            let prev = self.runs[self.runs.len() - 1].0.clone();
            started["parentRunId"] = json!(prev);
        }
        if self.chance(0.3) {
            started["protocolVersion"] = json!("1.0");
        }
        // The user's turn rides in the input (the client appends it to history).
        let user_id = self.id("msg_user");
        let question = self.words(3, 12);
        self.history
            .push(json!({"id": user_id, "role": "user", "content": question.trim()}));
        // Benchmarks resend a window of recent history, not all of it.
        let window = if self.realistic { 4 } else { usize::MAX };
        let resent: Vec<Value> = self
            .history
            .iter()
            .filter(|m| m["role"] != "activity")
            .cloned()
            .collect();
        let skip = resent.len().saturating_sub(window);
        let mut input = json!({
            "threadId": self.thread,
            "runId": run_id,
            "messages": resent[skip..].to_vec(),
            "tools": [],
            "context": [],
        });
        if self.chance(0.5) {
            input["state"] = self.state.clone();
        }
        if let Some(p) = started.get("parentRunId") {
            input["parentRunId"] = p.clone();
        }
        if index > 0 || self.chance(0.7) {
            started["input"] = input;
        }
        self.emit(started);

        let (tlo, thi) = self.f.turns;
        let turns = self.rng.gen_range(tlo..=thi);
        let error_here = self.f.run_errors && !last && self.chance(0.45);
        let in_flight = last && self.f.in_flight;
        let mut tasks = Vec::new();
        for _ in 0..turns {
            self.turn_tasks(&mut tasks, None, 0);
        }
        let cut = if error_here || in_flight {
            Some(self.rng.gen_range(0..=tasks.len().max(1) * 3))
        } else {
            None
        };
        let finished = self.schedule(tasks, cut);
        if finished {
            let mut fin = json!({"type": "RUN_FINISHED", "threadId": self.thread, "runId": run_id});
            match self.rng.gen_range(0..4) {
                0 => fin["outcome"] = json!({"type": "success"}),
                1 => fin["result"] = json!({"answer": self.words(1, 4)}),
                _ => {}
            }
            self.emit(fin);
        } else if error_here {
            let message = format!("upstream model error: {}", self.words(1, 3).trim());
            let mut err = json!({"type": "RUN_ERROR", "message": message});
            if self.chance(0.5) {
                err["code"] = json!("model_error");
            }
            self.emit(err);
        }
        // An interrupted run leaves open steps behind; the next run starts clean.
        self.open_steps.clear();
        self.closed_tools.clear();
        self.closed_messages.clear();
        self.lifecycle_subagents.clear();
        if self.realistic && self.history.len() > 64 {
            // A benchmark thread is long: keep a bounded window of recent
            // history so generation stays linear in the number of events.
            let cut = self.history.len() - 32;
            self.history.drain(..cut);
            self.runs.clear();
        }
        self.runs.push((run_id, self.history.len()));
    }

    /// Plans one assistant turn (as tasks) for `owner`.
    fn turn_tasks(&mut self, tasks: &mut Vec<Task>, owner: Owner, depth: u32) {
        let f = self.f;
        if f.state && self.chance(0.6) {
            let ev = self.state_event(&owner);
            tasks.push(Task::Single(ev));
        }
        if self.chance(0.4) {
            let step = STEPS.choose(&mut self.rng).unwrap_or(&"plan").to_string();
            tasks.push(Task::Step {
                name: step,
                owner: owner.clone(),
                started: false,
            });
        }
        if f.reasoning && self.chance(0.6) {
            let span = self.id("rs");
            let msg = if self.chance(0.5) {
                span.clone()
            } else {
                self.id("rm")
            };
            tasks.push(Task::Reasoning {
                span,
                msg,
                owner: owner.clone(),
                deltas: self.rng.gen_range(1..5),
                phase: 0,
            });
        }
        if f.activity && self.chance(0.6) {
            let id = self.id("act");
            tasks.push(Task::Activity {
                id,
                owner: owner.clone(),
                kind: if self.chance(0.5) { "PLAN" } else { "SEARCH" },
                updates: self.rng.gen_range(0..4),
                started: false,
            });
        }
        let texts = if f.concurrent_text {
            self.rng.gen_range(1..4)
        } else {
            1
        };
        for _ in 0..texts {
            let id = self.id("msg");
            let inner_tools = if f.tool_in_message && self.chance(0.7) {
                self.rng.gen_range(1..3)
            } else {
                0
            };
            let role = if owner.is_none() && self.chance(0.05) {
                "system"
            } else {
                "assistant"
            };
            let deltas = self.rng.gen_range(1..8);
            tasks.push(Task::Text {
                id,
                owner: owner.clone(),
                role,
                deltas,
                started: false,
                inner_tools,
            });
        }
        let tools = if f.parallel_tools {
            self.rng.gen_range(1..5)
        } else if self.chance(0.6) {
            1
        } else {
            0
        };
        for _ in 0..tools {
            let t = self.tool_task(None, owner.clone());
            tasks.push(t);
        }
        if f.subagents && depth < 2 && self.chance(if depth == 0 { 0.8 } else { 0.3 }) {
            let id = self.id("sub");
            let mut inner = Vec::new();
            self.turn_tasks(&mut inner, Some(id.clone()), depth + 1);
            let lifecycle = self.chance(0.8);
            let fails = self.chance(0.15);
            tasks.push(Task::Subagent {
                id,
                parent: owner.clone(),
                lifecycle,
                inner,
                started: false,
                fails,
            });
        }
        if f.unknown && self.chance(0.3) {
            let pct = self.rng.gen_range(0..100);
            let ev = self.ev(
                "CUSTOM",
                json!({"name": "vendor.progress", "value": {"pct": pct}}),
                &owner,
            );
            tasks.push(Task::Single(ev));
        }
        if self.chance(0.2) {
            let ev = self.ev(
                "RAW",
                json!({"event": {"provider_event": "ping", "n": self.counter}, "source": "openai"}),
                &owner,
            );
            tasks.push(Task::Single(ev));
        }
    }

    fn tool_task(&mut self, parent: Option<String>, owner: Owner) -> Task {
        let id = self.id("call");
        let name = *TOOLS.choose(&mut self.rng).unwrap_or(&"search_web");
        let argtext = format!(
            "{{\"query\":\"{}\",\"limit\":{}}}",
            self.words(1, 4).trim().replace(['"', '\n', '\t', '\\'], ""),
            self.rng.gen_range(1..20)
        );
        // Split the JSON text into fragments at char boundaries.
        let chars: Vec<char> = argtext.chars().collect();
        let mut args = Vec::new();
        let mut i = 0;
        while i < chars.len() {
            let (lo, hi) = if self.realistic { (12, 40) } else { (4, 24) };
            let n = self.rng.gen_range(lo..hi).min(chars.len() - i);
            args.push(chars[i..i + n].iter().collect());
            i += n;
        }
        Task::Tool {
            id,
            name,
            parent,
            owner,
            args,
            next: 0,
            started: false,
            result: self.chance(0.8),
        }
    }

    fn state_event(&mut self, owner: &Owner) -> Value {
        if self.chance(0.3) || self.state == json!({}) {
            self.state = json!({
                "counter": self.rng.gen_range(0..100),
                "items": [self.words(1, 2).trim(), self.words(1, 2).trim()],
                "profile": {"name": "ada", "plan": "pro"},
            });
            let snap = self.state.clone();
            self.ev("STATE_SNAPSHOT", json!({"snapshot": snap}), owner)
        } else {
            let n = self.rng.gen_range(0..1000);
            let patch = match self.rng.gen_range(0..6) {
                0 => json!([{"op": "replace", "path": "/counter", "value": n}]),
                1 => json!([{"op": "add", "path": "/items/-", "value": self.words(1, 2).trim()}]),
                2 => json!([{"op": "add", "path": "/profile/seen", "value": true},
                             {"op": "remove", "path": "/profile/seen"}]),
                3 => json!([{"op": "test", "path": "/counter", "value": -1}]), // fails
                4 => json!([{"op": "remove", "path": "/does/not/exist"}]),     // fails
                _ => json!([{"op": "copy", "from": "/profile", "path": "/backup"}]),
            };
            self.ev("STATE_DELTA", json!({"delta": patch}), owner)
        }
    }

    /// Runs the tasks, interleaving up to `concurrency` of them. Returns
    /// false when `cut` stopped it early (the run is then interrupted).
    fn schedule(&mut self, tasks: Vec<Task>, cut: Option<usize>) -> bool {
        let mut pending: std::collections::VecDeque<Task> = tasks.into();
        let mut open: Vec<Task> = Vec::new();
        let mut steps_taken = 0usize;
        loop {
            if let Some(c) = cut
                && steps_taken >= c
            {
                return false;
            }
            steps_taken += 1;
            if open.is_empty() && pending.is_empty() {
                return true;
            }
            let can_open = open.len() < self.f.concurrency && !pending.is_empty();
            if can_open && (open.is_empty() || self.chance(0.4)) {
                if let Some(t) = pending.pop_front() {
                    open.push(t);
                }
                let last = open.len() - 1;
                self.advance_at(&mut open, last);
            } else {
                // Sequential: the newest open task first (a tool call spawned
                // inside a message completes before the message goes on).
                let i = if self.f.concurrency == 1 {
                    open.len() - 1
                } else {
                    self.rng.gen_range(0..open.len())
                };
                self.advance_at(&mut open, i);
            }
            self.maybe_mid_events();
        }
    }

    fn advance_at(&mut self, open: &mut Vec<Task>, i: usize) {
        let mut spawned = Vec::new();
        let done = self.advance(&mut open[i], &mut spawned);
        if done {
            open.remove(i);
        }
        open.extend(spawned);
    }

    /// Snapshots and encrypted values dropped between other events.
    fn maybe_mid_events(&mut self) {
        if self.f.snapshots && self.chance(0.08) {
            let msgs = self.history.clone();
            self.emit(json!({"type": "MESSAGES_SNAPSHOT", "messages": msgs}));
        }
        let p_encrypted = if self.realistic { 0.02 } else { 0.1 };
        if self.f.encrypted && self.chance(p_encrypted) {
            let pick_tool = self.chance(0.5);
            let (subtype, entry) = if pick_tool {
                (
                    "tool-call",
                    self.closed_tools.choose(&mut self.rng).cloned(),
                )
            } else {
                (
                    "message",
                    self.closed_messages.choose(&mut self.rng).cloned(),
                )
            };
            if let Some((id, owner)) = entry {
                let owner = if self.chance(0.5) { owner } else { None };
                let value = format!("enc:{:016x}", self.rng.r#gen::<u64>());
                let ev = self.ev(
                    "REASONING_ENCRYPTED_VALUE",
                    json!({"subtype": subtype, "entityId": id, "encryptedValue": value}),
                    &owner,
                );
                self.emit(ev);
            }
        }
    }

    /// Continuation tag: the owner, or (sometimes) absent, which always agrees.
    fn cont_tag(&mut self, owner: &Owner) -> Owner {
        if owner.is_some() && self.chance(0.25) {
            None
        } else {
            owner.clone()
        }
    }

    /// Advances one task by one event (or one atomic group). Returns true when done.
    fn advance(&mut self, task: &mut Task, spawned: &mut Vec<Task>) -> bool {
        match task {
            Task::Single(v) => {
                let v = std::mem::take(v);
                self.emit(v);
                true
            }
            Task::Step {
                name,
                owner,
                started,
            } => {
                if !*started {
                    // Keep (owner, name) unique while open.
                    let taken = self.open_steps.iter().any(|(o, n)| o == owner && n == name);
                    if taken {
                        return true;
                    }
                    self.open_steps.push((owner.clone(), name.clone()));
                    let ev = self.ev("STEP_STARTED", json!({"stepName": name}), owner);
                    self.emit(ev);
                    *started = true;
                    false
                } else {
                    self.open_steps.retain(|(o, n)| !(o == owner && n == name));
                    let ev = self.ev("STEP_FINISHED", json!({"stepName": name}), owner);
                    self.emit(ev);
                    true
                }
            }
            Task::Text {
                id,
                owner,
                role,
                deltas,
                started,
                inner_tools,
            } => {
                let (id, owner) = (id.clone(), owner.clone());
                if self.f.chunks && !*started && self.chance(0.35) {
                    self.text_chunks(&id, &owner, role, *deltas);
                    return true;
                }
                if !*started {
                    *started = true;
                    let mut fields = json!({"messageId": id});
                    if *role != "assistant" || self.chance(0.5) {
                        fields["role"] = json!(role);
                    }
                    let ev = self.ev("TEXT_MESSAGE_START", fields, &owner);
                    self.emit(ev);
                    self.history_msg(json!({"id": id, "role": role, "content": ""}), &owner);
                    return false;
                }
                if *inner_tools > 0 && self.chance(0.4) {
                    *inner_tools -= 1;
                    let t = self.tool_task(Some(id.clone()), owner.clone());
                    spawned.push(t);
                    return false;
                }
                if *deltas > 0 {
                    *deltas -= 1;
                    let d = if self.realistic {
                        self.words(6, 18)
                    } else {
                        self.words(1, 4)
                    };
                    let tag = self.cont_tag(&owner);
                    let ev = self.ev(
                        "TEXT_MESSAGE_CONTENT",
                        json!({"messageId": id, "delta": d}),
                        &tag,
                    );
                    self.emit(ev);
                    if let Some(m) = self.find_msg(&id) {
                        let c = m["content"].as_str().unwrap_or("").to_owned() + &d;
                        m["content"] = json!(c);
                    }
                    return false;
                }
                let tag = self.cont_tag(&owner);
                let ev = self.ev("TEXT_MESSAGE_END", json!({"messageId": id}), &tag);
                self.emit(ev);
                self.closed_messages.push((id, owner));
                true
            }
            Task::Tool {
                id,
                name,
                parent,
                owner,
                args,
                next,
                started,
                result,
            } => {
                let (id, owner) = (id.clone(), owner.clone());
                if self.f.chunks && !*started && self.chance(0.35) {
                    let args = args.clone();
                    self.tool_chunks(&id, name, parent.clone(), &owner, &args);
                    self.record_tool(&id, name, parent.clone(), &owner, &args.concat());
                    if *result {
                        self.tool_result(&id, &owner);
                    }
                    return true;
                }
                if !*started {
                    *started = true;
                    let mut fields = json!({"toolCallId": id, "toolCallName": *name});
                    if let Some(p) = parent {
                        fields["parentMessageId"] = json!(p);
                    }
                    let tag = if parent.is_some() {
                        self.cont_tag(&owner)
                    } else {
                        owner.clone()
                    };
                    let ev = self.ev("TOOL_CALL_START", fields, &tag);
                    self.emit(ev);
                    self.record_tool(&id, name, parent.clone(), &owner, "");
                    return false;
                }
                if *next < args.len() {
                    let d = args[*next].clone();
                    *next += 1;
                    let tag = self.cont_tag(&owner);
                    let ev = self.ev(
                        "TOOL_CALL_ARGS",
                        json!({"toolCallId": id, "delta": d}),
                        &tag,
                    );
                    self.emit(ev);
                    self.append_tool_args(&id, &d);
                    return false;
                }
                let tag = self.cont_tag(&owner);
                let ev = self.ev("TOOL_CALL_END", json!({"toolCallId": id}), &tag);
                self.emit(ev);
                self.closed_tools.push((id.clone(), owner.clone()));
                if *result {
                    self.tool_result(&id, &owner);
                }
                true
            }
            Task::Reasoning {
                span,
                msg,
                owner,
                deltas,
                phase,
            } => {
                let (span, msg, owner) = (span.clone(), msg.clone(), owner.clone());
                match *phase {
                    0 => {
                        let ev = self.ev("REASONING_START", json!({"messageId": span}), &owner);
                        self.emit(ev);
                        *phase = 1;
                        false
                    }
                    1 => {
                        if self.f.chunks && self.chance(0.4) {
                            self.reasoning_chunks(&msg, &owner, *deltas);
                            *phase = 4;
                            return false;
                        }
                        let ev = self.ev(
                            "REASONING_MESSAGE_START",
                            json!({"messageId": msg, "role": "reasoning"}),
                            &owner,
                        );
                        self.emit(ev);
                        self.history_msg(
                            json!({"id": msg, "role": "reasoning", "content": ""}),
                            &owner,
                        );
                        *phase = 2;
                        false
                    }
                    2 => {
                        if *deltas > 0 {
                            *deltas -= 1;
                            let d = self.words(2, 6);
                            let tag = self.cont_tag(&owner);
                            let ev = self.ev(
                                "REASONING_MESSAGE_CONTENT",
                                json!({"messageId": msg, "delta": d}),
                                &tag,
                            );
                            self.emit(ev);
                        } else {
                            let tag = self.cont_tag(&owner);
                            let ev =
                                self.ev("REASONING_MESSAGE_END", json!({"messageId": msg}), &tag);
                            self.emit(ev);
                            *phase = 3;
                        }
                        false
                    }
                    3 => {
                        if self.f.encrypted && self.chance(0.6) {
                            let value = format!("enc:{:016x}", self.rng.r#gen::<u64>());
                            let tag = self.cont_tag(&owner);
                            let ev = self.ev(
                                "REASONING_ENCRYPTED_VALUE",
                                json!({"subtype": "message", "entityId": msg, "encryptedValue": value}),
                                &tag,
                            );
                            self.emit(ev);
                        }
                        *phase = 4;
                        false
                    }
                    _ => {
                        let tag = self.cont_tag(&owner);
                        let ev = self.ev("REASONING_END", json!({"messageId": span}), &tag);
                        self.emit(ev);
                        true
                    }
                }
            }
            Task::Activity {
                id,
                owner,
                kind,
                updates,
                started,
            } => {
                let (id, owner, kind) = (id.clone(), owner.clone(), *kind);
                if !*started {
                    *started = true;
                    let mut fields = json!({"messageId": id, "activityType": kind,
                        "content": {"steps": [{"title": self.words(1, 3).trim(), "done": false}]}});
                    if self.chance(0.3) {
                        fields["replace"] = json!(true);
                    }
                    let ev = self.ev("ACTIVITY_SNAPSHOT", fields, &owner);
                    self.emit(ev);
                    self.history_msg(
                        json!({"id": id, "role": "activity", "activityType": kind,
                               "content": {"steps": []}}),
                        &owner,
                    );
                    return false;
                }
                if *updates > 0 {
                    *updates -= 1;
                    let tag = self.cont_tag(&owner);
                    if self.chance(0.8) {
                        let ev = self.ev(
                            "ACTIVITY_DELTA",
                            json!({"messageId": id, "activityType": kind,
                                   "patch": [{"op": "replace", "path": "/steps/0/done", "value": true}]}),
                            &tag,
                        );
                        self.emit(ev);
                    } else {
                        let ev = self.ev(
                            "ACTIVITY_SNAPSHOT",
                            json!({"messageId": id, "activityType": kind, "replace": false,
                                   "content": {"steps": []}}),
                            &tag,
                        );
                        self.emit(ev);
                    }
                    return false;
                }
                true
            }
            Task::Subagent {
                id,
                parent,
                lifecycle,
                inner,
                started,
                fails,
            } => {
                let id = id.clone();
                if !*started {
                    *started = true;
                    if *lifecycle {
                        let name = *SUBAGENTS.choose(&mut self.rng).unwrap_or(&"researcher");
                        let mut fields = json!({"subagentRunId": id, "name": name});
                        if let Some(p) = parent
                            && self.lifecycle_subagents.contains(p)
                        {
                            fields["parentSubagentRunId"] = json!(p);
                        }
                        self.lifecycle_subagents.push(id.clone());
                        if self.chance(0.3) {
                            fields["description"] = json!("delegated work");
                        }
                        let ev = self.ev("SUBAGENT_STARTED", fields, &None);
                        self.emit(ev);
                    }
                    // The subagent's own tasks run interleaved with the rest.
                    spawned.append(inner);
                    // The subagent task itself stays open until the end; it
                    // only closes once nothing it spawned is left, which
                    // the scheduler cannot see, so close it after a while.
                    return false;
                }
                // Close only once none of its steps remain open.
                if self
                    .open_steps
                    .iter()
                    .any(|(o, _)| o.as_deref() == Some(id.as_str()))
                {
                    return false;
                }
                if *lifecycle {
                    let ev = if *fails {
                        self.ev(
                            "SUBAGENT_ERROR",
                            json!({"subagentRunId": id, "message": "subagent crashed"}),
                            &None,
                        )
                    } else {
                        let mut f = json!({"subagentRunId": id});
                        if self.chance(0.5) {
                            f["outcome"] = json!({"type": "success"});
                        }
                        self.ev("SUBAGENT_FINISHED", f, &None)
                    };
                    self.emit(ev);
                }
                true
            }
        }
    }

    fn record_tool(
        &mut self,
        id: &str,
        name: &str,
        parent: Option<String>,
        owner: &Owner,
        args: &str,
    ) {
        let call =
            json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}});
        let host = parent.clone().unwrap_or_else(|| id.to_owned());
        if let Some(m) = self.find_msg(&host)
            && m["role"] == "assistant"
        {
            match m.get_mut("toolCalls") {
                Some(Value::Array(a)) => a.push(call),
                _ => m["toolCalls"] = json!([call]),
            }
            return;
        }
        self.history_msg(
            json!({"id": host, "role": "assistant", "toolCalls": [call]}),
            owner,
        );
    }

    fn append_tool_args(&mut self, id: &str, delta: &str) {
        for m in self.history.iter_mut().rev() {
            if let Some(Value::Array(calls)) = m.get_mut("toolCalls") {
                for c in calls.iter_mut() {
                    if c["id"] == id {
                        let a = c["function"]["arguments"].as_str().unwrap_or("").to_owned();
                        c["function"]["arguments"] = json!(a + delta);
                        return;
                    }
                }
            }
        }
    }

    fn tool_result(&mut self, tool: &str, owner: &Owner) {
        let mid = self.id("msg_tool");
        let content = if self.chance(0.8) {
            json!(format!(
                "{{\"ok\":true,\"data\":\"{}\"}}",
                self.words(2, 6).trim().replace(['"', '\\', '\n', '\t'], "")
            ))
        } else {
            json!([{"type": "text", "text": self.words(2, 5).trim()}])
        };
        let mut fields = json!({"messageId": mid, "toolCallId": tool, "content": content});
        if self.chance(0.5) {
            fields["role"] = json!("tool");
        }
        let ev = self.ev("TOOL_CALL_RESULT", fields, owner);
        self.emit(ev);
        self.history_msg(
            json!({"id": mid, "role": "tool", "toolCallId": tool, "content": content}),
            owner,
        );
        self.closed_messages.push((mid, owner.clone()));
    }

    // -- chunks -------------------------------------------------------------

    /// Extra chunk fields for variety: metadata, rawEvent, unknown properties.
    fn chunk_extras(&mut self, fields: &mut Value) {
        if self.chance(0.15) {
            fields["rawEvent"] = json!({"provider": "anthropic", "index": self.counter});
        }
        if self.f.metadata && self.chance(0.3) {
            fields["metadata"] = self.metadata_value();
        }
        if self.f.unknown && self.chance(0.2) {
            fields["x_chunk_note"] = json!("vendor");
        }
    }

    fn text_chunks(&mut self, id: &str, owner: &Owner, role: &str, deltas: u32) {
        let mut content = String::new();
        let n = deltas.max(1);
        for i in 0..n {
            let mut fields = json!({});
            let first = i == 0;
            if first || self.chance(0.3) {
                fields["messageId"] = json!(id);
            }
            // The opener names its role when it is not the default; a
            // continuation sometimes repeats it (with the same value).
            let say_role = if first {
                role != "assistant" || self.chance(0.4)
            } else {
                self.chance(0.1)
            };
            if say_role {
                fields["role"] = json!(role);
            }
            if !(i + 1 == n && n > 1 && self.chance(0.2)) {
                let d = self.words(1, 4);
                content.push_str(&d);
                fields["delta"] = json!(d);
            }
            self.chunk_extras(&mut fields);
            // A continuation in a subagent lane names its lane by tag or id.
            let tag = if first || owner.is_none() || fields.get("messageId").is_none() {
                owner.clone()
            } else {
                self.cont_tag(owner)
            };
            let ev = self.ev("TEXT_MESSAGE_CHUNK", fields, &tag);
            self.emit(ev);
            if self.chance(0.1) {
                let ev = self.ev("RAW", json!({"event": {"between": "chunks"}}), &None);
                self.emit(ev);
            }
        }
        self.history_msg(json!({"id": id, "role": role, "content": content}), owner);
        self.closed_messages.push((id.to_owned(), owner.clone()));
    }

    fn tool_chunks(
        &mut self,
        id: &str,
        name: &str,
        parent: Option<String>,
        owner: &Owner,
        args: &[String],
    ) {
        let n = args.len().max(1);
        for i in 0..n {
            let first = i == 0;
            let mut fields = json!({});
            if first || self.chance(0.3) {
                fields["toolCallId"] = json!(id);
            }
            if first || self.chance(0.1) {
                fields["toolCallName"] = json!(name);
            }
            if let Some(p) = &parent
                && (first || self.chance(0.1))
            {
                fields["parentMessageId"] = json!(p);
            }
            if let Some(d) = args.get(i) {
                fields["delta"] = json!(d);
            }
            self.chunk_extras(&mut fields);
            let tag = if first || owner.is_none() || fields.get("toolCallId").is_none() {
                owner.clone()
            } else {
                self.cont_tag(owner)
            };
            let ev = self.ev("TOOL_CALL_CHUNK", fields, &tag);
            self.emit(ev);
        }
        self.closed_tools.push((id.to_owned(), owner.clone()));
    }

    fn reasoning_chunks(&mut self, id: &str, owner: &Owner, deltas: u32) {
        let mut content = String::new();
        let n = deltas.max(1);
        for i in 0..n {
            let first = i == 0;
            let mut fields = json!({});
            if first || self.chance(0.3) {
                fields["messageId"] = json!(id);
            }
            let d = self.words(2, 5);
            content.push_str(&d);
            fields["delta"] = json!(d);
            self.chunk_extras(&mut fields);
            let tag = if first || owner.is_none() || fields.get("messageId").is_none() {
                owner.clone()
            } else {
                self.cont_tag(owner)
            };
            let ev = self.ev("REASONING_MESSAGE_CHUNK", fields, &tag);
            self.emit(ev);
        }
        self.history_msg(
            json!({"id": id, "role": "reasoning", "content": content}),
            owner,
        );
    }
}

// ---------------------------------------------------------------------------
// Invalid streams
// ---------------------------------------------------------------------------

/// The rule an invalid stream breaks (one mutation of a valid stream).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mutation {
    /// The first `RUN_STARTED` is removed.
    DropRunStarted,
    /// A start event (text, tool call, reasoning span or message, step,
    /// subagent) is removed while its continuations stay.
    DropStart,
    /// A start event is repeated while its item is open.
    DuplicateStart,
    /// An end event is removed from a run that finishes.
    DropEnd,
    /// `RUN_ERROR` is inserted in the middle of a run; the run's events go on.
    EventAfterRunError,
    /// An event is inserted between `RUN_FINISHED` and the next `RUN_STARTED`.
    EventAfterRunFinished,
    /// A second `RUN_STARTED` in the middle of a run.
    NestedRunStarted,
    /// `RUN_FINISHED` right after an item opened.
    RunFinishedWithOpenItem,
    /// A continuation tagged with a subagent that does not own its item.
    BadAttribution,
    /// `subagentRunId: null` on an event.
    NullSubagentRunId,
    /// A subagent id started again after it finished.
    SubagentReuse,
    /// `SUBAGENT_STARTED` naming a parent subagent never started.
    UnknownParentSubagent,
    /// A first chunk without its id (or a tool chunk without its name).
    ChunkMissingId,
    /// A continuation chunk repeating a field with another value.
    ChunkConflict,
    /// `STEP_FINISHED` under another owner than the one that started it.
    StepWrongOwner,
}

impl Mutation {
    /// Every mutation.
    pub const ALL: &'static [Mutation] = &[
        Mutation::DropRunStarted,
        Mutation::DropStart,
        Mutation::DuplicateStart,
        Mutation::DropEnd,
        Mutation::EventAfterRunError,
        Mutation::EventAfterRunFinished,
        Mutation::NestedRunStarted,
        Mutation::RunFinishedWithOpenItem,
        Mutation::BadAttribution,
        Mutation::NullSubagentRunId,
        Mutation::SubagentReuse,
        Mutation::UnknownParentSubagent,
        Mutation::ChunkMissingId,
        Mutation::ChunkConflict,
        Mutation::StepWrongOwner,
    ];
}

/// A stream mutated to break one rule (see [`invalid_stream_with`]).
pub fn invalid_stream(seed: u64) -> Vec<Event> {
    invalid_stream_with(seed).0
}

/// A valid stream of a seeded profile with one seeded [`Mutation`] applied,
/// and the mutation. Mutations are placed where they break their rule, but
/// not proven to: a small share of the results is still valid (for example
/// a duplicated start inside a chunk lane that the expansion closes first).
/// The differential tests count what the official client rejects. When the chosen mutation has no place to apply in that
/// stream, the next one in [`Mutation::ALL`] is tried (`DropRunStarted`
/// always applies).
pub fn invalid_stream_with(seed: u64) -> (Vec<Event>, Mutation) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5EED_BAD0_0000_0001);
    let profile = *Profile::ALL.choose(&mut rng).unwrap_or(&Profile::Mixed);
    let base = stream(profile, seed);
    let mut values: Vec<Value> = base.iter().map(Event::to_value).collect();
    let start = rng.gen_range(0..Mutation::ALL.len());
    for k in 0..Mutation::ALL.len() {
        let m = Mutation::ALL[(start + k) % Mutation::ALL.len()];
        if apply_mutation(m, &mut values, &mut rng) {
            let events = values
                .iter()
                .map(|v| Event::from_serialize(v).expect("mutated events are valid envelopes"))
                .collect();
            return (events, m);
        }
    }
    // Unreachable in practice: DropRunStarted applies to every stream.
    values.remove(0);
    let events = values
        .iter()
        .map(|v| Event::from_serialize(v).expect("valid envelopes"))
        .collect();
    (events, Mutation::DropRunStarted)
}

fn ty(v: &Value) -> &str {
    v["type"].as_str().unwrap_or("")
}

fn is_known(t: &str) -> bool {
    agui_protocol::EventType::from_wire(t).is_known()
}

/// The key naming the item an explicit start/continuation/end event is about.
fn item_key(v: &Value) -> Option<(&'static str, String)> {
    let t = ty(v);
    let id = |k: &str| v[k].as_str().map(str::to_owned);
    match t {
        "TEXT_MESSAGE_START" | "TEXT_MESSAGE_CONTENT" | "TEXT_MESSAGE_END" => {
            Some(("text", id("messageId")?))
        }
        "TOOL_CALL_START" | "TOOL_CALL_ARGS" | "TOOL_CALL_END" => Some(("tool", id("toolCallId")?)),
        "REASONING_START" | "REASONING_END" => Some(("span", id("messageId")?)),
        "REASONING_MESSAGE_START" | "REASONING_MESSAGE_CONTENT" | "REASONING_MESSAGE_END" => {
            Some(("rmsg", id("messageId")?))
        }
        "STEP_STARTED" | "STEP_FINISHED" => Some((
            "step",
            format!(
                "{}\u{0}{}",
                v["subagentRunId"].as_str().unwrap_or("\u{1}"),
                id("stepName")?
            ),
        )),
        "SUBAGENT_STARTED" | "SUBAGENT_FINISHED" | "SUBAGENT_ERROR" => {
            Some(("sub", id("subagentRunId")?))
        }
        _ => None,
    }
}

fn is_start(t: &str) -> bool {
    matches!(
        t,
        "TEXT_MESSAGE_START"
            | "TOOL_CALL_START"
            | "REASONING_START"
            | "REASONING_MESSAGE_START"
            | "STEP_STARTED"
            | "SUBAGENT_STARTED"
    )
}

fn is_end(t: &str) -> bool {
    matches!(
        t,
        "TEXT_MESSAGE_END"
            | "TOOL_CALL_END"
            | "REASONING_END"
            | "REASONING_MESSAGE_END"
            | "STEP_FINISHED"
            | "SUBAGENT_FINISHED"
            | "SUBAGENT_ERROR"
    )
}

/// Index of the run terminal after `i` (or None when the run is in flight).
fn run_end_after(values: &[Value], i: usize) -> Option<usize> {
    values[i + 1..]
        .iter()
        .position(|v| matches!(ty(v), "RUN_FINISHED" | "RUN_ERROR" | "RUN_STARTED"))
        .map(|p| p + i + 1)
        .filter(|&j| ty(&values[j]) != "RUN_STARTED")
}

fn pick<T: Copy>(rng: &mut ChaCha8Rng, xs: &[T]) -> Option<T> {
    xs.choose(rng).copied()
}

/// The stream has no chunk events (chunk lanes make some mutations moot:
/// the expansion closes items on its own).
fn has_chunks(values: &[Value]) -> bool {
    values.iter().any(|v| ty(v).ends_with("_CHUNK"))
}

fn apply_mutation(m: Mutation, values: &mut Vec<Value>, rng: &mut ChaCha8Rng) -> bool {
    let n = values.len();
    match m {
        Mutation::DropRunStarted => {
            // Invalid when what follows is a known event other than RUN_ERROR.
            let next = values[1..].iter().find(|v| is_known(ty(v)));
            if next.is_some_and(|v| ty(v) != "RUN_ERROR") {
                values.remove(0);
                true
            } else {
                false
            }
        }
        Mutation::DropStart => {
            let cands: Vec<usize> = (0..n)
                .filter(|&i| is_start(ty(&values[i])) && ty(&values[i]) != "SUBAGENT_STARTED")
                .filter(|&i| {
                    let key = item_key(&values[i]);
                    values[i + 1..]
                        .iter()
                        .take_while(|v| ty(v) != "RUN_STARTED")
                        .any(|v| item_key(v) == key)
                })
                .collect();
            let cands: Vec<usize> = if has_chunks(values) {
                cands
                    .into_iter()
                    .filter(|&i| {
                        !ty(&values[i]).starts_with("TEXT")
                            && !ty(&values[i]).starts_with("TOOL")
                            && ty(&values[i]) != "REASONING_MESSAGE_START"
                    })
                    .collect()
            } else {
                cands
            };
            match pick(rng, &cands) {
                Some(i) => {
                    values.remove(i);
                    true
                }
                None => false,
            }
        }
        Mutation::DuplicateStart => {
            let cands: Vec<usize> = (0..n).filter(|&i| is_start(ty(&values[i]))).collect();
            match pick(rng, &cands) {
                Some(i) => {
                    let copy = values[i].clone();
                    values.insert(i + 1, copy);
                    true
                }
                None => false,
            }
        }
        Mutation::DropEnd => {
            let cands: Vec<usize> = (0..n)
                .filter(|&i| is_end(ty(&values[i])) && !ty(&values[i]).starts_with("SUBAGENT"))
                .filter(|&i| {
                    run_end_after(values, i).is_some_and(|j| ty(&values[j]) == "RUN_FINISHED")
                })
                .filter(|&i| {
                    !has_chunks(values)
                        || ty(&values[i]) == "STEP_FINISHED"
                        || ty(&values[i]) == "REASONING_END"
                })
                .collect();
            match pick(rng, &cands) {
                Some(i) => {
                    values.remove(i);
                    true
                }
                None => false,
            }
        }
        Mutation::EventAfterRunError => {
            let cands: Vec<usize> = (1..n)
                .filter(|&i| {
                    let t = ty(&values[i]);
                    is_known(t) && !matches!(t, "RUN_STARTED" | "RUN_ERROR")
                })
                .collect();
            match pick(rng, &cands) {
                Some(i) => {
                    values.insert(i, json!({"type": "RUN_ERROR", "message": "injected"}));
                    true
                }
                None => false,
            }
        }
        Mutation::EventAfterRunFinished => {
            let cands: Vec<usize> = (0..n)
                .filter(|&i| ty(&values[i]) == "RUN_FINISHED")
                .collect();
            match pick(rng, &cands) {
                Some(i) => {
                    values.insert(
                        i + 1,
                        json!({"type": "STATE_SNAPSHOT", "snapshot": {"between": "runs"}}),
                    );
                    true
                }
                None => false,
            }
        }
        Mutation::NestedRunStarted => {
            let cands: Vec<usize> = (1..n)
                .filter(|&i| !matches!(ty(&values[i - 1]), "RUN_FINISHED" | "RUN_ERROR"))
                .filter(|&i| ty(&values[i]) != "RUN_STARTED")
                .collect();
            match pick(rng, &cands) {
                Some(i) => {
                    let mut again = values[0].clone();
                    if let Value::Object(map) = &mut again {
                        map.remove("input");
                        map.insert("runId".into(), json!("run_nested"));
                    }
                    values.insert(i, again);
                    true
                }
                None => false,
            }
        }
        Mutation::RunFinishedWithOpenItem => {
            let cands: Vec<usize> = (0..n).filter(|&i| is_start(ty(&values[i]))).collect();
            match pick(rng, &cands) {
                Some(i) => {
                    let fin = json!({"type": "RUN_FINISHED", "threadId": "t", "runId": "r"});
                    values.insert(i + 1, fin);
                    true
                }
                None => false,
            }
        }
        Mutation::BadAttribution => {
            let cands: Vec<usize> = (0..n)
                .filter(|&i| {
                    matches!(
                        ty(&values[i]),
                        "TEXT_MESSAGE_CONTENT"
                            | "TEXT_MESSAGE_END"
                            | "TOOL_CALL_ARGS"
                            | "TOOL_CALL_END"
                            | "REASONING_MESSAGE_CONTENT"
                            | "REASONING_MESSAGE_END"
                            | "REASONING_END"
                    )
                })
                .collect();
            match pick(rng, &cands) {
                Some(i) => {
                    values[i]["subagentRunId"] = json!("intruder");
                    true
                }
                None => false,
            }
        }
        Mutation::NullSubagentRunId => {
            // Not on the four run-level types: their schemas have no such
            // field, so the official client strips it before verification.
            let cands: Vec<usize> = (0..n)
                .filter(|&i| {
                    let t = ty(&values[i]);
                    is_known(t)
                        && !matches!(
                            t,
                            "RUN_STARTED" | "RUN_FINISHED" | "RUN_ERROR" | "MESSAGES_SNAPSHOT"
                        )
                })
                .collect();
            match pick(rng, &cands) {
                Some(i) => {
                    values[i]["subagentRunId"] = Value::Null;
                    true
                }
                None => false,
            }
        }
        Mutation::SubagentReuse => {
            let cands: Vec<usize> = (0..n)
                .filter(|&i| matches!(ty(&values[i]), "SUBAGENT_FINISHED" | "SUBAGENT_ERROR"))
                .collect();
            match pick(rng, &cands) {
                Some(i) => {
                    let id = values[i]["subagentRunId"].clone();
                    values.insert(
                        i + 1,
                        json!({"type": "SUBAGENT_STARTED", "subagentRunId": id, "name": "again"}),
                    );
                    true
                }
                None => false,
            }
        }
        Mutation::UnknownParentSubagent => {
            let cands: Vec<usize> = (1..n)
                .filter(|&i| !matches!(ty(&values[i - 1]), "RUN_FINISHED" | "RUN_ERROR"))
                .collect();
            match pick(rng, &cands) {
                Some(i) => {
                    values.insert(
                        i,
                        json!({"type": "SUBAGENT_STARTED", "subagentRunId": "sub_orphan",
                               "name": "orphan", "parentSubagentRunId": "ghost"}),
                    );
                    true
                }
                None => false,
            }
        }
        Mutation::ChunkMissingId => {
            let cands: Vec<usize> = (0..n)
                .filter(|&i| ty(&values[i]) == "RUN_STARTED")
                .collect();
            match pick(rng, &cands) {
                Some(i) => {
                    let chunk = match rng.gen_range(0..4) {
                        0 => json!({"type": "TEXT_MESSAGE_CHUNK", "delta": "orphan"}),
                        1 => json!({"type": "TOOL_CALL_CHUNK", "delta": "{}"}),
                        2 => {
                            json!({"type": "TOOL_CALL_CHUNK", "toolCallId": "call_x", "delta": "{}"})
                        }
                        _ => json!({"type": "REASONING_MESSAGE_CHUNK", "delta": "hmm"}),
                    };
                    values.insert(i + 1, chunk);
                    true
                }
                None => false,
            }
        }
        Mutation::ChunkConflict => {
            let cands: Vec<usize> = (0..n)
                .filter(|&i| ty(&values[i]) == "RUN_STARTED")
                .collect();
            match pick(rng, &cands) {
                Some(i) => {
                    let (a, b) = if rng.gen_bool(0.5) {
                        (
                            json!({"type": "TEXT_MESSAGE_CHUNK", "messageId": "m_conflict", "role": "assistant", "delta": "a"}),
                            json!({"type": "TEXT_MESSAGE_CHUNK", "role": "user", "delta": "b"}),
                        )
                    } else {
                        (
                            json!({"type": "TOOL_CALL_CHUNK", "toolCallId": "c_conflict", "toolCallName": "a", "delta": "{"}),
                            json!({"type": "TOOL_CALL_CHUNK", "toolCallName": "b", "delta": "}"}),
                        )
                    };
                    values.insert(i + 1, a);
                    values.insert(i + 2, b);
                    true
                }
                None => false,
            }
        }
        Mutation::StepWrongOwner => {
            let cands: Vec<usize> = (0..n)
                .filter(|&i| ty(&values[i]) == "STEP_FINISHED")
                .collect();
            match pick(rng, &cands) {
                Some(i) => {
                    let v = &mut values[i];
                    if v.get("subagentRunId").is_some() {
                        if let Value::Object(map) = v {
                            map.remove("subagentRunId");
                        }
                    } else {
                        v["subagentRunId"] = json!("intruder");
                    }
                    true
                }
                None => false,
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Chunk soup
// ---------------------------------------------------------------------------

/// A run whose body is a random mix of chunk events (all three kinds, ids
/// from a small pool, present or absent; tags absent, `null` or one of two
/// subagents; repeated fields that agree or conflict; `metadata`,
/// `rawEvent`, unknown properties) and events that close lanes or not. It is
/// schema-valid for the official client apart from unknown properties and
/// unknown types (which its enforcement strips or drops), and usually breaks
/// some verification or chunk rule: it exists to compare chunk expansion
/// (and its errors) with the official one.
pub fn chunk_soup(seed: u64) -> Vec<Event> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xC4A2_5009_0000_0000);
    let mut out = vec![json!({"type": "RUN_STARTED", "threadId": "t", "runId": "r1"})];
    let n = rng.gen_range(3..30);
    let ids = ["a", "b", "c", ""];
    let tags: [Option<&str>; 4] = [None, None, Some("s1"), Some("s2")];
    for _ in 0..n {
        let tag = if rng.gen_bool(0.03) {
            Some(Value::Null)
        } else {
            tags.choose(&mut rng).copied().flatten().map(|t| json!(t))
        };
        let id = if rng.gen_bool(0.6) {
            Some(*ids.choose(&mut rng).unwrap_or(&"a"))
        } else {
            None
        };
        let mut ev = match rng.gen_range(0..12) {
            0..=2 => {
                let mut e = json!({"type": "TEXT_MESSAGE_CHUNK"});
                if let Some(id) = id {
                    e["messageId"] = json!(format!("m{id}"));
                }
                if rng.gen_bool(0.3) {
                    e["role"] = json!(
                        *["assistant", "user", "system", "developer"]
                            .choose(&mut rng)
                            .unwrap_or(&"assistant")
                    );
                }
                if rng.gen_bool(0.15) {
                    e["name"] = json!(if rng.gen_bool(0.5) { "n1" } else { "n2" });
                }
                e
            }
            3..=5 => {
                let mut e = json!({"type": "TOOL_CALL_CHUNK"});
                if let Some(id) = id {
                    e["toolCallId"] = json!(format!("c{id}"));
                }
                if rng.gen_bool(0.6) {
                    e["toolCallName"] = json!(if rng.gen_bool(0.8) { "search" } else { "other" });
                }
                if rng.gen_bool(0.2) {
                    e["parentMessageId"] = json!(if rng.gen_bool(0.7) { "ma" } else { "mb" });
                }
                e
            }
            6..=7 => {
                let mut e = json!({"type": "REASONING_MESSAGE_CHUNK"});
                if let Some(id) = id {
                    e["messageId"] = json!(format!("r{id}"));
                }
                e
            }
            8 => {
                let closers = [
                    json!({"type": "TEXT_MESSAGE_START", "messageId": "mx"}),
                    json!({"type": "CUSTOM", "name": "c", "value": 1}),
                    json!({"type": "STATE_DELTA", "delta": []}),
                    json!({"type": "STEP_STARTED", "stepName": "s"}),
                    json!({"type": "TOOL_CALL_RESULT", "messageId": "tr", "toolCallId": "ca", "content": "ok"}),
                ];
                closers.choose(&mut rng).cloned().unwrap_or_default()
            }
            9 => {
                let passers = [
                    json!({"type": "RAW", "event": {"x": 1}}),
                    json!({"type": "ACTIVITY_SNAPSHOT", "messageId": "act", "activityType": "PLAN", "content": {}}),
                    json!({"type": "X_UNKNOWN_TYPE", "payload": 1}),
                    json!({"type": "SUBAGENT_STARTED", "subagentRunId": "s1", "name": "sub"}),
                ];
                passers.choose(&mut rng).cloned().unwrap_or_default()
            }
            10 => {
                let sub = if rng.gen_bool(0.5) { "s1" } else { "s2" };
                if rng.gen_bool(0.7) {
                    json!({"type": "SUBAGENT_FINISHED", "subagentRunId": sub})
                } else {
                    json!({"type": "SUBAGENT_ERROR", "subagentRunId": sub, "message": "x"})
                }
            }
            _ => {
                if rng.gen_bool(0.5) {
                    json!({"type": "MESSAGES_SNAPSHOT", "messages": []})
                } else {
                    json!({"type": "RUN_FINISHED", "threadId": "t", "runId": "r1"})
                }
            }
        };
        let is_chunk = ty(&ev).ends_with("_CHUNK");
        let lifecycle = ty(&ev).starts_with("SUBAGENT");
        let run_level = matches!(ty(&ev), "RUN_FINISHED" | "MESSAGES_SNAPSHOT");
        if is_chunk {
            if rng.gen_bool(0.75) {
                ev["delta"] = json!(["x", "", "yz"].choose(&mut rng).copied().unwrap_or("x"));
            }
            if rng.gen_bool(0.2) {
                ev["metadata"] = json!({"k": rng.gen_range(0..3)});
            }
            if rng.gen_bool(0.15) {
                ev["rawEvent"] = json!({"p": 1});
            }
            if rng.gen_bool(0.15) {
                ev["x_extra"] = json!("u");
            }
            if rng.gen_bool(0.2) {
                ev["timestamp"] = json!(1000 + out.len());
            }
        }
        if !lifecycle
            && !run_level
            && ty(&ev) != "X_UNKNOWN_TYPE"
            && let Some(t) = tag
        {
            ev["subagentRunId"] = t;
        }
        out.push(ev);
        if ty(out.last().unwrap_or(&Value::Null)) == "RUN_FINISHED" {
            out.push(
                json!({"type": "RUN_STARTED", "threadId": "t", "runId": format!("r{}", out.len())}),
            );
        }
    }
    out.iter()
        .map(|v| Event::from_serialize(v).expect("soup events are valid envelopes"))
        .collect()
}
