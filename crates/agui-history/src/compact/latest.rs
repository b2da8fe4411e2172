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
//! Memory: `latest` reads the whole log, since the chosen branch is only
//! known at the end.

use agui_protocol::{Event, EventType};
use serde::Deserialize;
use serde_json::Value;

use super::envelope::{normalize_run_started, replay, restate};
use super::{CompactError, compact_deltas};
use crate::lineage::Lineage;
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
    let (history, parent): (Vec<Event>, Option<String>) = match &lineage {
        Some(lineage) if lineage.index().get(&chosen.run_id).is_some() => {
            let branch = lineage
                .branch(&chosen.run_id, None)
                .map_err(|e| CompactError::Lineage(e.to_string()))?;
            let parent = lineage
                .index()
                .get(&chosen.run_id)
                .and_then(|node| node.parent_run_id.clone());
            (
                branch
                    .events
                    .into_iter()
                    .map(|(_, e)| e.into_owned())
                    .collect(),
                parent,
            )
        }
        _ => (events[..chosen.end].to_vec(), None),
    };
    let target = reduce_all(&options.start, &history)?;

    let mut started = events[chosen.first].clone();
    if let Some(parent) = parent {
        started = with_parent(&started, &parent)?;
    }
    let start = &options.start;
    let normalized = normalize_run_started(&started, |id| {
        let held = |list: &[Value]| list.iter().any(|m| m.get("id") == Some(id));
        held(&start.messages) || held(&target.messages)
    })?;
    let tail: Vec<Event> = chosen
        .terminal
        .map(|i| events[i].clone())
        .into_iter()
        .collect();
    let restated = match replay(start, std::slice::from_ref(&normalized)) {
        Some(local) => restate(&local, &target, &[normalized], &tail)?,
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
