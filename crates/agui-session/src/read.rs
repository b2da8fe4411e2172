//! Reading and checking a document in one streaming pass: NDJSON (one record
//! a line) or a JSON array of the same records, told apart by the first
//! byte. Memory is bounded by the largest record plus the run index (a few
//! ids per run), whatever the number of events.

use std::collections::{HashMap, HashSet};
use std::io::BufRead;

use agui_protocol::{Event, EventType};
use agui_store::{RunStatus, Timestamp};
use serde::Deserialize;
use serde::de::{DeserializeSeed, SeqAccess, Visitor};
use serde_json::value::RawValue;

use crate::error::{Damage, SessionError};
use crate::record::{
    ChannelRec, Checksum, EndRec, EventRec, EventsMode, Header, KindOnly, READABLE_FORMATS, RunRec,
};

/// A checked record, handed to the caller of [`read`].
#[derive(Debug)]
pub enum Item<'a> {
    /// The header (record 1).
    Header(&'a Header),
    /// A run record.
    Run(&'a RunRec),
    /// An event.
    Event {
        /// Its sequence number.
        seq: u64,
        /// Its receive time.
        received_at: Timestamp,
        /// The event.
        event: Event,
        /// The run it belongs to (index into the runs), `None` before the
        /// first run.
        run: Option<usize>,
    },
    /// A channel.
    Channel(agui_store::Channel),
}

/// What a valid document holds.
#[derive(Debug, Clone)]
pub struct Summary {
    /// The format read.
    pub format: String,
    /// The exported thread's id.
    pub thread_id: String,
    /// The participants.
    pub participants: Vec<String>,
    /// The runs, in log order.
    pub runs: Vec<RunRec>,
    /// Number of events.
    pub events: u64,
    /// The agents that have a channel.
    pub channels: Vec<String>,
    /// The content's SHA-256 (hex).
    pub sha256: String,
}

#[derive(PartialEq, Eq, PartialOrd, Ord, Clone, Copy, Debug)]
enum Stage {
    Header,
    Runs,
    Events,
    Channels,
    Done,
}

/// The checks, record by record.
struct Checker {
    stage: Stage,
    record: u64,
    sum: Checksum,
    header: Option<Header>,
    participants: HashSet<String>,
    runs: Vec<RunRec>,
    run_pos: HashMap<String, usize>,
    next_seq: u64,
    /// The receive time of the event before (they never go backwards).
    last_received: i64,
    next_run: usize,
    current_run: Option<usize>,
    channels: Vec<String>,
    end: Option<String>,
}

/// The latest receive time a document may hold: the end of year 9999, the
/// last time RFC 3339 (and so every listing of the store) can show, in
/// microseconds since the Unix epoch.
const LATEST_RECEIVED: i64 = 253_402_300_799_999_999;

fn bad(d: Damage, record: u64, problem: impl Into<String>) -> SessionError {
    SessionError::damaged(d, record, problem)
}

fn parse<'a, T: Deserialize<'a>>(
    text: &'a str,
    record: u64,
    what: &str,
) -> Result<T, SessionError> {
    serde_json::from_str(text).map_err(|e| {
        bad(
            Damage::Schema,
            record,
            format!("not a valid {what} record: {e}"),
        )
    })
}

#[derive(Deserialize)]
struct StartedView<'a> {
    #[serde(rename = "runId", borrow)]
    run_id: Option<std::borrow::Cow<'a, str>>,
    #[serde(rename = "parentRunId", borrow, default)]
    parent_run_id: Option<std::borrow::Cow<'a, str>>,
}

impl Checker {
    fn new() -> Checker {
        Checker {
            stage: Stage::Header,
            record: 0,
            sum: Checksum::default(),
            header: None,
            participants: HashSet::new(),
            runs: Vec::new(),
            run_pos: HashMap::new(),
            next_seq: 1,
            last_received: 0,
            next_run: 0,
            current_run: None,
            channels: Vec::new(),
            end: None,
        }
    }

    fn record(
        &mut self,
        text: &str,
        f: &mut dyn FnMut(Item<'_>) -> Result<(), SessionError>,
    ) -> Result<(), SessionError> {
        self.record += 1;
        let n = self.record;
        if self.stage == Stage::Done {
            return Err(bad(Damage::Order, n, "a record after the end record"));
        }
        let kind: KindOnly = serde_json::from_str(text).map_err(|e| {
            if serde_json::from_str::<&RawValue>(text).is_err() {
                bad(Damage::NotJson, n, format!("not JSON: {e}"))
            } else {
                bad(
                    Damage::Schema,
                    n,
                    format!("a record must be a JSON object with a string `kind`: {e}"),
                )
            }
        })?;
        let kind = kind
            .kind
            .ok_or_else(|| bad(Damage::Schema, n, "the record has no `kind`"))?;
        match kind.as_ref() {
            "header" => self.header(text, f),
            "run" => self.run(text, f),
            "event" => self.event(text, f),
            "channel" => self.channel(text, f),
            "end" => self.end(text),
            other => Err(bad(
                Damage::UnknownKind,
                n,
                format!(
                    "unknown record kind {other:?} (this agui reads {})",
                    READABLE_FORMATS.join(", ")
                ),
            )),
        }
    }

    fn enter(&mut self, stage: Stage, what: &str) -> Result<(), SessionError> {
        let n = self.record;
        if self.stage == Stage::Header && stage != Stage::Header {
            return Err(bad(
                Damage::Order,
                n,
                format!("the first record must be the header, not a {what} record"),
            ));
        }
        if stage < self.stage {
            return Err(bad(
                Damage::Order,
                n,
                format!("a {what} record out of order (header, runs, events, channels, end)"),
            ));
        }
        if stage > Stage::Runs && self.stage <= Stage::Runs {
            self.check_lineage()?;
        }
        if stage > Stage::Events && self.stage <= Stage::Events {
            self.check_events_done()?;
        }
        self.stage = stage;
        Ok(())
    }

    fn header(
        &mut self,
        text: &str,
        f: &mut dyn FnMut(Item<'_>) -> Result<(), SessionError>,
    ) -> Result<(), SessionError> {
        let n = self.record;
        if self.stage != Stage::Header {
            return Err(bad(Damage::Order, n, "a second header"));
        }
        // The version first: a later format may change anything else.
        #[derive(Deserialize)]
        struct Format {
            format: Option<String>,
        }
        let format: Format = parse(text, n, "header")?;
        let format = format
            .format
            .ok_or_else(|| bad(Damage::Schema, n, "the header has no `format`"))?;
        if !READABLE_FORMATS.contains(&format.as_str()) {
            return Err(bad(
                Damage::UnknownVersion,
                n,
                format!(
                    "unknown format {format:?}: this agui reads {} (a newer agui may read it)",
                    READABLE_FORMATS.join(", ")
                ),
            ));
        }
        let h: Header = parse(text, n, "header")?;
        agui_store::check_id("thread", &h.thread_id)
            .map_err(|e| bad(Damage::Schema, n, e.to_string()))?;
        if h.events != EventsMode::Lossless {
            return Err(bad(Damage::Schema, n, "unknown events mode"));
        }
        for p in &h.participants {
            agui_store::check_id("agent", p).map_err(|e| bad(Damage::Schema, n, e.to_string()))?;
            if !self.participants.insert(p.clone()) {
                return Err(bad(
                    Damage::Schema,
                    n,
                    format!("participant {p:?} is listed twice"),
                ));
            }
        }
        self.sum.record(text);
        self.stage = Stage::Runs;
        f(Item::Header(&h))?;
        self.header = Some(h);
        Ok(())
    }

    fn run(
        &mut self,
        text: &str,
        f: &mut dyn FnMut(Item<'_>) -> Result<(), SessionError>,
    ) -> Result<(), SessionError> {
        self.enter(Stage::Runs, "run")?;
        let n = self.record;
        let r: RunRec = parse(text, n, "run")?;
        agui_store::check_id("run", &r.run_id)
            .map_err(|e| bad(Damage::Schema, n, e.to_string()))?;
        if RunStatus::parse(&r.status).is_none() {
            return Err(bad(
                Damage::Schema,
                n,
                format!("run {:?}: unknown status {:?}", r.run_id, r.status),
            ));
        }
        if let Some(a) = &r.agent
            && !self.participants.contains(a)
        {
            return Err(bad(
                Damage::Schema,
                n,
                format!("run {:?}: agent {a:?} is not a participant", r.run_id),
            ));
        }
        if r.first_seq == 0 || r.last_seq < r.first_seq {
            return Err(bad(
                Damage::Sequence,
                n,
                format!("run {:?}: firstSeq..lastSeq is not a range", r.run_id),
            ));
        }
        if let Some(prev) = self.runs.last()
            && r.first_seq != prev.last_seq + 1
        {
            return Err(bad(
                Damage::Sequence,
                n,
                format!(
                    "run {:?} starts at seq {} but the run before it ends at {}",
                    r.run_id, r.first_seq, prev.last_seq
                ),
            ));
        }
        if self
            .run_pos
            .insert(r.run_id.clone(), self.runs.len())
            .is_some()
        {
            return Err(bad(
                Damage::Schema,
                n,
                format!("run {:?} is listed twice", r.run_id),
            ));
        }
        self.sum.record(text);
        f(Item::Run(&r))?;
        self.runs.push(r);
        Ok(())
    }

    /// Every parent is a run of the document that starts earlier: no
    /// unknown parent, no cycle.
    fn check_lineage(&self) -> Result<(), SessionError> {
        let n = self.record;
        for r in &self.runs {
            let Some(p) = &r.parent_run_id else { continue };
            let Some(&pi) = self.run_pos.get(p) else {
                return Err(bad(
                    Damage::Lineage,
                    n,
                    format!(
                        "run {:?} names parent {p:?}, which is not a run of this thread",
                        r.run_id
                    ),
                ));
            };
            if self.runs[pi].first_seq >= r.first_seq {
                // Follow the parents: a cycle is named as one.
                let mut seen = vec![r.run_id.as_str()];
                let mut cur = pi;
                loop {
                    let run = &self.runs[cur];
                    if seen.contains(&run.run_id.as_str()) {
                        return Err(bad(
                            Damage::Lineage,
                            n,
                            format!(
                                "the run lineage has a cycle: {} → {}",
                                seen.join(" → "),
                                run.run_id
                            ),
                        ));
                    }
                    seen.push(&run.run_id);
                    match run.parent_run_id.as_ref().and_then(|p| self.run_pos.get(p)) {
                        Some(&next) => cur = next,
                        None => break,
                    }
                }
                return Err(bad(
                    Damage::Lineage,
                    n,
                    format!(
                        "run {:?} names parent {p:?}, which starts after it",
                        r.run_id
                    ),
                ));
            }
        }
        Ok(())
    }

    fn event(
        &mut self,
        text: &str,
        f: &mut dyn FnMut(Item<'_>) -> Result<(), SessionError>,
    ) -> Result<(), SessionError> {
        self.enter(Stage::Events, "event")?;
        let n = self.record;
        let rec: EventRec = parse(text, n, "event")?;
        if rec.seq != self.next_seq {
            return Err(bad(
                Damage::Sequence,
                n,
                format!("event seq {} where seq {} was due", rec.seq, self.next_seq),
            ));
        }
        // A store keeps a thread's receive times in order and within what a
        // time can be written as; an import must restore them exactly.
        if !(0..=LATEST_RECEIVED).contains(&rec.received_at) {
            return Err(bad(
                Damage::Sequence,
                n,
                format!(
                    "event seq {}: receivedAt {} is outside 1970-01-01 to 9999-12-31 (microseconds since the Unix epoch)",
                    rec.seq, rec.received_at
                ),
            ));
        }
        if rec.received_at < self.last_received {
            return Err(bad(
                Damage::Sequence,
                n,
                format!(
                    "event seq {}: receivedAt {} is earlier than the event before it ({}); receive times never go backwards",
                    rec.seq, rec.received_at, self.last_received
                ),
            ));
        }
        self.last_received = rec.received_at;
        let event = Event::from_json(rec.event.get()).map_err(|e| {
            bad(
                Damage::Schema,
                n,
                format!("event seq {}: not an AG-UI event: {e}", rec.seq),
            )
        })?;
        let starts = self
            .runs
            .get(self.next_run)
            .is_some_and(|r| r.first_seq == rec.seq);
        if *event.event_type() == EventType::RunStarted {
            let view: StartedView = event.view().map_err(|e| {
                bad(
                    Damage::Schema,
                    n,
                    format!("event seq {}: RUN_STARTED unreadable: {e}", rec.seq),
                )
            })?;
            let id = view.run_id.unwrap_or_default();
            let Some(run) = self.runs.get(self.next_run).filter(|_| starts) else {
                return Err(bad(
                    Damage::Sequence,
                    n,
                    format!(
                        "event seq {} starts run {id:?}, which has no run record here",
                        rec.seq
                    ),
                ));
            };
            if run.run_id != id {
                return Err(bad(
                    Damage::Sequence,
                    n,
                    format!(
                        "event seq {} starts run {id:?} but the run record at this seq is {:?}",
                        rec.seq, run.run_id
                    ),
                ));
            }
            let implied = match view.parent_run_id {
                Some(p) => Some(p.into_owned()),
                None => self.current_run.map(|i| self.runs[i].run_id.clone()),
            };
            if implied != run.parent_run_id {
                return Err(bad(
                    Damage::Lineage,
                    n,
                    format!(
                        "run {:?}: its record names parent {:?} but its events imply {:?}",
                        run.run_id, run.parent_run_id, implied
                    ),
                ));
            }
            if run.started_at != rec.received_at {
                return Err(bad(
                    Damage::Sequence,
                    n,
                    format!(
                        "run {:?}: startedAt differs from its RUN_STARTED's receivedAt",
                        run.run_id
                    ),
                ));
            }
            self.current_run = Some(self.next_run);
            self.next_run += 1;
        } else if starts {
            let run = &self.runs[self.next_run];
            return Err(bad(
                Damage::Sequence,
                n,
                format!(
                    "run {:?} starts at seq {} but that event is not a RUN_STARTED",
                    run.run_id, rec.seq
                ),
            ));
        }
        self.next_seq += 1;
        self.sum.record(text);
        f(Item::Event {
            seq: rec.seq,
            received_at: Timestamp(rec.received_at),
            event,
            run: self.current_run,
        })
    }

    fn check_events_done(&self) -> Result<(), SessionError> {
        let n = self.record;
        if let Some(r) = self.runs.get(self.next_run) {
            return Err(bad(
                Damage::Sequence,
                n,
                format!(
                    "run {:?} has a run record but its events are missing",
                    r.run_id
                ),
            ));
        }
        if let Some(last) = self.runs.last()
            && last.last_seq + 1 != self.next_seq
        {
            return Err(bad(
                Damage::Sequence,
                n,
                format!(
                    "the last run {:?} ends at seq {} but the events end at seq {}",
                    last.run_id,
                    last.last_seq,
                    self.next_seq - 1
                ),
            ));
        }
        Ok(())
    }

    fn channel(
        &mut self,
        text: &str,
        f: &mut dyn FnMut(Item<'_>) -> Result<(), SessionError>,
    ) -> Result<(), SessionError> {
        self.enter(Stage::Channels, "channel")?;
        let n = self.record;
        let rec: ChannelRec = parse(text, n, "channel")?;
        if !self.participants.contains(&rec.agent) {
            return Err(bad(
                Damage::Schema,
                n,
                format!(
                    "channel of agent {:?}, which is not a participant",
                    rec.agent
                ),
            ));
        }
        if self.channels.contains(&rec.agent) {
            return Err(bad(
                Damage::Schema,
                n,
                format!("agent {:?} has two channels", rec.agent),
            ));
        }
        let ch = agui_store::Channel {
            agent: rec.agent.clone(),
            state: rec.state.get().to_owned(),
            updated_at: Timestamp(rec.updated_at),
        };
        ch.check()
            .map_err(|e| bad(Damage::Schema, n, e.to_string()))?;
        self.channels.push(rec.agent);
        self.sum.record(text);
        f(Item::Channel(ch))
    }

    fn end(&mut self, text: &str) -> Result<(), SessionError> {
        self.enter(Stage::Done, "end")?;
        let n = self.record;
        let end: EndRec = parse(text, n, "end")?;
        if end.records != self.sum.records() {
            return Err(bad(
                Damage::Checksum,
                n,
                format!(
                    "the end record counts {} records before it, the document has {}",
                    end.records,
                    self.sum.records()
                ),
            ));
        }
        let got = self.sum.hex();
        if !end.sha256.eq_ignore_ascii_case(&got) {
            return Err(bad(
                Damage::Checksum,
                n,
                "the content does not match its SHA-256: the document was damaged or changed",
            ));
        }
        self.end = Some(got);
        Ok(())
    }

    fn finish(self, format: &str) -> Result<Summary, SessionError> {
        let Some(sha256) = self.end else {
            let problem = match self.record {
                0 => unreachable_empty(),
                1 if self.header.is_some() => {
                    "the document holds only a header: its runs, events and end record are missing"
                        .to_owned()
                }
                n => format!(
                    "the document ends after record {n} without its end record (cut short?)"
                ),
            };
            return Err(bad(Damage::Truncated, self.record, problem));
        };
        let header = self.header.expect("an ended document has a header");
        Ok(Summary {
            format: format.to_owned(),
            thread_id: header.thread_id,
            participants: header.participants,
            runs: self.runs,
            events: self.next_seq - 1,
            channels: self.channels,
            sha256,
        })
    }
}

fn unreachable_empty() -> String {
    "the document is empty".to_owned()
}

/// Reads and checks a whole document, calling `f` with every record once it
/// passed its checks. The checksum is verified at the end: a caller that
/// writes as it reads must undo its writes on error (or validate first).
pub fn read<R: BufRead>(
    mut input: R,
    mut f: impl FnMut(Item<'_>) -> Result<(), SessionError>,
) -> Result<Summary, SessionError> {
    let first = loop {
        let buf = input.fill_buf().map_err(SessionError::Io)?;
        if buf.is_empty() {
            return Err(bad(
                Damage::Empty,
                0,
                "the document is empty (no header, no records)",
            ));
        }
        match buf.iter().position(|b| !b.is_ascii_whitespace()) {
            Some(i) => {
                let b = buf[i];
                input.consume(i);
                break b;
            }
            None => {
                let len = buf.len();
                input.consume(len);
            }
        }
    };
    let mut checker = Checker::new();
    match first {
        b'[' => read_array(input, &mut checker, &mut f)?,
        _ => read_lines(input, &mut checker, &mut f)?,
    }
    checker.finish(crate::record::FORMAT)
}

fn read_lines<R: BufRead>(
    mut input: R,
    checker: &mut Checker,
    f: &mut dyn FnMut(Item<'_>) -> Result<(), SessionError>,
) -> Result<(), SessionError> {
    let mut line = Vec::new();
    loop {
        line.clear();
        if input
            .read_until(b'\n', &mut line)
            .map_err(SessionError::Io)?
            == 0
        {
            return Ok(());
        }
        let text = std::str::from_utf8(&line).map_err(|_| {
            bad(
                Damage::NotJson,
                checker.record + 1,
                "the record is not UTF-8",
            )
        })?;
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        checker.record(text, f)?;
    }
}

struct Elements<'c, 'f> {
    checker: &'c mut Checker,
    f: &'c mut (dyn FnMut(Item<'_>) -> Result<(), SessionError> + 'f),
    error: Option<SessionError>,
}

impl<'de> Visitor<'de> for &mut Elements<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON array of session records")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(raw) = seq.next_element::<Box<RawValue>>()? {
            if let Err(e) = self.checker.record(raw.get(), self.f) {
                self.error = Some(e);
                return Err(serde::de::Error::custom("stopped"));
            }
        }
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for &mut Elements<'_, '_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

fn read_array<R: BufRead>(
    input: R,
    checker: &mut Checker,
    f: &mut dyn FnMut(Item<'_>) -> Result<(), SessionError>,
) -> Result<(), SessionError> {
    let mut de = serde_json::Deserializer::from_reader(input);
    let mut el = Elements {
        checker,
        f,
        error: None,
    };
    let result = (&mut el).deserialize(&mut de).and_then(|()| de.end());
    if let Some(e) = el.error {
        return Err(e);
    }
    result.map_err(|e| {
        if e.is_eof() {
            bad(
                Damage::Truncated,
                el.checker.record,
                format!(
                    "the JSON array is cut short after record {}",
                    el.checker.record
                ),
            )
        } else {
            bad(
                Damage::NotJson,
                el.checker.record + 1,
                format!("not JSON: {e}"),
            )
        }
    })
}
