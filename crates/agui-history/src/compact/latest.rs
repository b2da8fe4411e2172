//! `latest` mode: one run envelope that restores a thread at one run.
//!
//! The output is the chosen run's `RUN_STARTED` (with its lineage: an implicit
//! parent becomes an explicit `parentRunId`; `input.messages` keeps only
//! messages neither the starting point nor the restated conversation holds),
//! one `MESSAGES_SNAPSHOT` and one `STATE_SNAPSHOT` of the conversation at the
//! end of that run **along its own branch** (the branch-aware history of
//! [`crate::lineage`]), and the run's terminal event when it has one. A run in
//! flight at the end of the input is restated as it stands, without a
//! terminal. The envelope is checked with the reducer; when no single
//! `MESSAGES_SNAPSHOT` can restate the conversation (see
//! [`super::snapshot`]), the branch's events are emitted in `deltas` form.
//! A log whose lineage has faults (a parent not in the log, a run id used
//! twice, ...) is read as one linear history.
//!
//! Memory: [`compact_latest`] holds the whole log. [`compact_latest_from`]
//! reads a log it can read again (a file) in two passes, three when the
//! envelope falls back to `deltas` form, and holds only the run index (one
//! small node per run), the provenance of restated message ids, and the
//! conversation being rebuilt: never the events. A log whose lineage has
//! faults is read once more into memory and compacted by [`compact_latest`].

use agui_protocol::{Event, EventType};
use serde::Deserialize;
use serde_json::Value;

use super::envelope::{held_ids, normalize_run_started, replay, restate_target};
use super::{CompactError, DeltaCompactor, compact_deltas};
use crate::lineage::{Lineage, Owner, Provenance, RunIndex, without_foreign};
use crate::reduce::{Conversation, Reducer};

/// What `latest` restates.
#[derive(Debug, Clone, Default)]
pub struct LatestOptions {
    /// The messages and state the consumer holds before the log.
    pub start: Conversation,
    /// The run to restate (`runId`); `None` for the last run of the log.
    pub branch: Option<String>,
}

#[derive(Deserialize)]
struct RunIds {
    #[serde(rename = "runId", default)]
    run_id: Option<Value>,
}

fn run_id_of(event: &Event) -> Option<String> {
    match event.view::<RunIds>().ok()?.run_id? {
        Value::String(s) => Some(s),
        _ => None,
    }
}

/// Where the chosen run lies in the log.
struct Chosen {
    run_id: String,
    first: usize,
    terminal: Option<usize>,
    /// One past the run's segment (the next `RUN_STARTED`, or the end).
    end: usize,
}

fn choose(events: &[Event], branch: Option<&str>) -> Result<Option<Chosen>, CompactError> {
    let starts: Vec<(usize, Option<String>)> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| e.event_type() == &EventType::RunStarted)
        .map(|(i, e)| (i, run_id_of(e)))
        .collect();
    let pick = match branch {
        Some(wanted) => starts
            .iter()
            .rposition(|(_, id)| id.as_deref() == Some(wanted))
            .ok_or_else(|| CompactError::UnknownRun(wanted.to_owned()))?,
        None => match starts.len() {
            0 => return Ok(None),
            n => n - 1,
        },
    };
    let (first, run_id) = starts[pick].clone();
    let end = starts.get(pick + 1).map_or(events.len(), |(i, _)| *i);
    let terminal = (first + 1..end).find(|&i| events[i].event_type().is_run_terminal());
    Ok(Some(Chosen {
        run_id: run_id.unwrap_or_default(),
        first,
        terminal,
        end,
    }))
}

/// Compacts a whole log in `latest` mode.
pub fn compact_latest<I>(events: I, options: &LatestOptions) -> Result<Vec<Event>, CompactError>
where
    I: IntoIterator<Item = Event>,
{
    let events: Vec<Event> = events.into_iter().collect();
    let Some(chosen) = choose(&events, options.branch.as_deref())? else {
        // No run to restate: nothing is lost by keeping the log's meaning.
        return compact_deltas(events);
    };
    // The branch's history, and the chosen run's resolved parent.
    let lineage = Lineage::new(&events).ok();
    // The chosen run's `RUN_STARTED` as the branch reads it: without the
    // messages it restates from other branches, which the branch's
    // conversation does not hold either.
    let mut started = events[chosen.first].clone();
    let (history, parent): (Vec<Event>, Option<String>) = match &lineage {
        Some(lineage) if lineage.index().get(&chosen.run_id).is_some() => {
            let branch = lineage
                .branch(&chosen.run_id, None)
                .map_err(|e| CompactError::Lineage(e.to_string()))?;
            let parent = lineage
                .index()
                .get(&chosen.run_id)
                .and_then(|node| node.parent_run_id.clone());
            let mut history = Vec::with_capacity(branch.events.len());
            for (i, event) in branch.events {
                let event = event.into_owned();
                if i == chosen.first {
                    started = event.clone();
                }
                history.push(event);
            }
            (history, parent)
        }
        _ => (events[..chosen.end].to_vec(), None),
    };
    let target = reduce_all(&options.start, &history)?;

    if let Some(parent) = parent {
        started = with_parent(&started, &parent)?;
    }
    let start = &options.start;
    let held = held_ids(&[&start.messages, &target.messages]);
    let normalized = normalize_run_started(&started, |id| {
        id.as_str().is_some_and(|id| held.contains(id))
    })?;
    let tail: Vec<Event> = chosen
        .terminal
        .map(|i| events[i].clone())
        .into_iter()
        .collect();
    let restated = match replay(start, std::slice::from_ref(&normalized)) {
        Some(local) => restate_target(&local, target, &[normalized], &tail)?,
        None => None,
    };
    match restated {
        Some(envelope) => Ok(envelope),
        None => compact_deltas(history),
    }
}

/// Adds `parentRunId` to a `RUN_STARTED` that has none.
fn with_parent(event: &Event, parent: &str) -> Result<Event, CompactError> {
    let mut value = event.to_value();
    match value.as_object_mut() {
        Some(object) if !object.contains_key("parentRunId") => {
            object.insert("parentRunId".into(), Value::String(parent.to_owned()));
            Event::from_serialize(&value).map_err(CompactError::Synthesized)
        }
        _ => Ok(event.clone()),
    }
}

fn reduce_all(start: &Conversation, events: &[Event]) -> Result<Conversation, CompactError> {
    let mut reducer = Reducer::new(start.clone());
    for (index, event) in events.iter().enumerate() {
        reducer
            .apply(event)
            .map_err(|source| CompactError::Reduce { index, source })?;
    }
    Ok(reducer.into_conversation())
}

/// What the first pass over a log learned.
struct Scan {
    index: RunIndex,
    provenance: Provenance,
    /// Log index and `runId` of the last `RUN_STARTED`.
    last_start: Option<(usize, Option<String>)>,
    /// Some `RUN_STARTED` has no string `runId`, or the index refused an
    /// event (a lineage fault): the streaming path does not apply.
    faulty: bool,
}

fn scan(events: impl Iterator<Item = Event>) -> Scan {
    let mut s = Scan {
        index: RunIndex::new(),
        provenance: Provenance::new(),
        last_start: None,
        faulty: false,
    };
    for (i, event) in events.enumerate() {
        if s.faulty {
            continue;
        }
        if event.event_type() == &EventType::RunStarted {
            let id = run_id_of(&event);
            if id.is_none() {
                s.faulty = true;
                continue;
            }
            s.last_start = Some((i, id));
        }
        if s.index.push(&event).is_err() {
            s.faulty = true;
            continue;
        }
        let owner = match s.index.runs().len() {
            0 => Owner::Preamble,
            n => Owner::Run(n - 1),
        };
        s.provenance.observe(&event, owner);
    }
    s
}

/// The branch-history events of one pass: the preamble, then the segments
/// of the runs on the path (in log order: with every parent indexed before
/// its child, tree order is log order), without foreign restatements.
struct PathFilter {
    /// `(start, end)` log ranges, in log order.
    ranges: Vec<(usize, usize)>,
    on_path: Vec<bool>,
}

impl PathFilter {
    fn keeps(&self, i: usize) -> bool {
        // The ranges are in log order and do not overlap: the one that may
        // hold `i` is the last that starts at or before it.
        let after = self.ranges.partition_point(|&(a, _)| a <= i);
        after > 0 && i < self.ranges[after - 1].1
    }
}

/// Compacts in `latest` mode a log that `source` yields again on every call
/// (a file read anew), writing the output to `emit`. Memory holds no events
/// (see the module documentation); the result equals [`compact_latest`]'s.
pub fn compact_latest_from<S, I>(
    mut source: S,
    options: &LatestOptions,
    emit: &mut dyn FnMut(Event) -> Result<(), CompactError>,
) -> Result<(), CompactError>
where
    S: FnMut() -> I,
    I: Iterator<Item = Event>,
{
    let in_memory = |source: &mut S, emit: &mut dyn FnMut(Event) -> Result<(), CompactError>| {
        for event in compact_latest(source(), options)? {
            emit(event)?;
        }
        Ok(())
    };
    let scan = scan(source());
    if scan.faulty {
        return in_memory(&mut source, emit);
    }
    let run_id = match (&options.branch, &scan.last_start) {
        (Some(wanted), _) => wanted.clone(),
        (None, Some((_, Some(id)))) => id.clone(),
        // No run, or no id: the in-memory path decides (deltas, or errors).
        _ => return in_memory(&mut source, emit),
    };
    let Some(node) = scan.index.get(&run_id).cloned() else {
        return in_memory(&mut source, emit);
    };
    let Ok(path) = scan.index.path_positions(&run_id) else {
        return in_memory(&mut source, emit);
    };
    let runs = scan.index.runs();
    let mut on_path = vec![false; runs.len()];
    let mut ranges = vec![(scan.index.preamble().start, scan.index.preamble().end)];
    for &p in &path {
        on_path[p] = true;
        let segment = runs[p].segment();
        if ranges.last().is_some_and(|&(_, end)| end > segment.start) {
            // Not in log order: leave it to the in-memory path.
            return in_memory(&mut source, emit);
        }
        ranges.push((segment.start, segment.end));
    }
    let filter = PathFilter { ranges, on_path };
    let foreign = |id: &str| {
        scan.provenance.is_foreign(id, |&o| match o {
            Owner::Preamble => true,
            Owner::Run(p) => filter.on_path.get(p).copied().unwrap_or(false),
        })
    };

    // Second pass: the conversation at the end of the branch.
    let mut reducer = Reducer::new(options.start.clone());
    let mut started = None;
    let mut terminal = None;
    let mut position = 0;
    for (i, event) in source().enumerate() {
        if !filter.keeps(i) {
            continue;
        }
        if Some(i) == node.terminal_event {
            terminal = Some(event.clone());
        }
        let (event, _) = without_foreign(&event, foreign).map_err(CompactError::Synthesized)?;
        if i == node.first_event {
            // As the branch reads it (see `compact_latest`).
            started = Some(event.clone().into_owned());
        }
        reducer
            .apply(&event)
            .map_err(|source| CompactError::Reduce {
                index: position,
                source,
            })?;
        position += 1;
    }
    let target = reducer.into_conversation();
    let Some(mut started) = started else {
        return Err(CompactError::Internal(
            "the chosen run's RUN_STARTED was not read again",
        ));
    };
    if let Some(parent) = &node.parent_run_id {
        started = with_parent(&started, parent)?;
    }
    let start = &options.start;
    let held = held_ids(&[&start.messages, &target.messages]);
    let normalized = normalize_run_started(&started, |id| {
        id.as_str().is_some_and(|id| held.contains(id))
    })?;
    let tail: Vec<Event> = terminal.into_iter().collect();
    let restated = match replay(start, std::slice::from_ref(&normalized)) {
        Some(local) => restate_target(&local, target, &[normalized], &tail)?,
        None => None,
    };
    if let Some(envelope) = restated {
        for event in envelope {
            emit(event)?;
        }
        return Ok(());
    }
    // Third pass: the branch in `deltas` form.
    let mut compactor = DeltaCompactor::new();
    for (i, event) in source().enumerate() {
        if !filter.keeps(i) {
            continue;
        }
        let (event, _) = without_foreign(&event, foreign).map_err(CompactError::Synthesized)?;
        compactor.push(event.into_owned())?;
        for out in compactor.drain() {
            emit(out)?;
        }
    }
    compactor.finish()?;
    for out in compactor.drain() {
        emit(out)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The search finds exactly the positions some range holds, for
        /// ranges in log order (empty ones included), as a scan of them all.
        #[test]
        fn the_path_filter_keeps_what_its_ranges_hold(
            gaps in proptest::collection::vec((0usize..4, 0usize..4), 0..12),
        ) {
            let mut ranges = Vec::new();
            let mut at = 0;
            for (gap, len) in gaps {
                ranges.push((at + gap, at + gap + len));
                at += gap + len;
            }
            let filter = PathFilter { on_path: Vec::new(), ranges: ranges.clone() };
            for i in 0..at + 3 {
                let scan = ranges.iter().any(|&(a, b)| a <= i && i < b);
                prop_assert_eq!(filter.keeps(i), scan, "{} in {:?}", i, ranges);
            }
        }
    }
}
