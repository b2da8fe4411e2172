//! Per-branch upstream thread ids (`upstream_thread = "per-branch"`).
//!
//! Stateful frameworks (Google ADK's sessions, LangGraph's checkpointer) key
//! their state by `threadId` and ignore the history they are sent. A branch
//! from an earlier run must therefore reach them under a thread id of its
//! own. The id is derived from the run index alone, so nothing new is stored:
//!
//! - the thread's first run uses the user's thread id;
//! - a run that is the **first child** of its parent (the earliest run in
//!   log order whose parent it is) continues its parent's upstream thread:
//!   the upstream's latest state for that id is the parent's;
//! - any other run forks: it and its first-child descendants use
//!   `"{threadId}~{runId}"`, the run at which the branch forked.
//!
//! A run whose upstream id differs from its parent's is sent the whole
//! history of its branch, so the framework starts the new id from it.
//!
//! A run set aside (a branch that ran beside another branch's run, see
//! `crate::aside`) always forks: whether it is its parent's first child is
//! only settled when it joins the log. The branch starts the agent's
//! channel records (`upstreamThreads` keys) therefore count as branch
//! starts too: a run recorded as a fork stays one, wherever it joined.
//!
//! A branch is named by its first run (the thread's root run, or the run at
//! which it forked). Each agent's channel records the upstream thread id it
//! used per branch (`upstreamThreads`, see `crate::session`). When the id
//! derived here differs from the recorded one (the thread was imported under
//! another id), the upstream has never seen the derived id: the run is sent
//! its branch's whole history, as a fork is, so the framework starts the new
//! id from it instead of from nothing, and never shares state with the
//! thread the document came from.

use std::collections::{HashMap, HashSet};

use agui_store::RunRecord;

/// Where a new run goes upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NewRun {
    /// The upstream thread id.
    pub id: String,
    /// Whether the id is new to the upstream (a fork): the run is sent its
    /// branch's whole history.
    pub fork: bool,
    /// The branch's first run (the root run, or the run that forked).
    pub branch: String,
}

/// The upstream thread id of a new run `run` with parent `parent`, given the
/// thread's existing runs (any order) and the branch starts the agent's
/// channel records (`starts`). A run set aside (`aside`) forks.
pub(crate) fn for_new_run(
    thread: &str,
    runs: &[RunRecord],
    starts: &HashSet<&str>,
    run: &str,
    parent: Option<&str>,
    aside: bool,
) -> NewRun {
    let Some(parent) = parent else {
        return NewRun {
            id: thread.to_owned(),
            fork: false,
            branch: run.to_owned(),
        };
    };
    let index = Index::new(runs, starts);
    if aside || index.first_child.contains_key(parent) {
        // The parent already has a child that continued it: a fork.
        NewRun {
            id: fork_id(thread, run),
            fork: true,
            branch: run.to_owned(),
        }
    } else {
        let (start, root) = index.branch_start(parent);
        NewRun {
            id: if root {
                thread.to_owned()
            } else {
                fork_id(thread, start)
            },
            fork: false,
            branch: start.to_owned(),
        }
    }
}

/// The upstream thread id of an existing run.
#[cfg(test)]
pub(crate) fn of_run(thread: &str, runs: &[RunRecord], run: &str) -> String {
    Index::new(runs, &HashSet::new()).upstream_id(thread, run)
}

fn fork_id(thread: &str, run: &str) -> String {
    format!("{thread}~{run}")
}

struct Index<'a> {
    parent: HashMap<&'a str, Option<&'a str>>,
    /// parent → its first child (smallest `first_seq`).
    first_child: HashMap<&'a str, (&'a str, u64)>,
    /// Runs recorded as branch starts.
    starts: &'a HashSet<&'a str>,
}

impl<'a> Index<'a> {
    fn new(runs: &'a [RunRecord], starts: &'a HashSet<&'a str>) -> Index<'a> {
        let mut parent = HashMap::new();
        let mut first_child: HashMap<&str, (&str, u64)> = HashMap::new();
        for r in runs {
            let p = r.parent_run_id.as_deref().filter(|p| *p != r.run_id);
            parent.insert(r.run_id.as_str(), p);
            if let Some(p) = p {
                let e = first_child
                    .entry(p)
                    .or_insert((r.run_id.as_str(), r.first_seq));
                if r.first_seq < e.1 {
                    *e = (r.run_id.as_str(), r.first_seq);
                }
            }
        }
        Index {
            parent,
            first_child,
            starts,
        }
    }

    /// The first run of `run`'s branch, and whether that is a root run (the
    /// branch goes upstream under the user's thread id).
    fn branch_start<'r>(&self, run: &'r str) -> (&'r str, bool)
    where
        'a: 'r,
    {
        let mut cur = run;
        // Bounded walk up the first-child chain (a cycle cannot loop).
        for _ in 0..=self.parent.len() {
            match self.parent.get(cur).copied().flatten() {
                None => return (cur, true),
                // Recorded as a fork (a run set aside that joined as its
                // parent's first child).
                Some(_) if self.starts.contains(cur) => return (cur, false),
                Some(p) => match self.first_child.get(p) {
                    Some((first, _)) if *first == cur => cur = p,
                    _ => return (cur, false),
                },
            }
        }
        (cur, true)
    }

    #[cfg(test)]
    fn upstream_id(&self, thread: &str, run: &str) -> String {
        match self.branch_start(run) {
            (_, true) => thread.to_owned(),
            (start, false) => fork_id(thread, start),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agui_store::{RunStatus, Timestamp};

    fn run(id: &str, parent: Option<&str>, first_seq: u64) -> RunRecord {
        RunRecord {
            thread_id: "t".into(),
            run_id: id.into(),
            parent_run_id: parent.map(str::to_owned),
            agent: None,
            status: RunStatus::Finished,
            started_at: Timestamp(0),
            finished_at: None,
            first_seq,
            last_seq: first_seq,
            event_count: 1,
            bytes: 1,
            thread_instance: 0,
        }
    }

    #[test]
    fn first_children_continue_forks_get_their_own_id() {
        // r1 → r2 → r3 ; r1 → b1 (fork) → b2 ; r2 → c1 (fork)
        let runs = vec![
            run("r1", None, 1),
            run("r2", Some("r1"), 5),
            run("r3", Some("r2"), 9),
            run("b1", Some("r1"), 13),
            run("b2", Some("b1"), 17),
            run("c1", Some("r2"), 21),
        ];
        let none = HashSet::new();
        let id = |r| of_run("t", &runs, r);
        assert_eq!(id("r1"), "t");
        assert_eq!(id("r2"), "t");
        assert_eq!(id("r3"), "t");
        assert_eq!(id("b1"), "t~b1");
        assert_eq!(id("b2"), "t~b1");
        assert_eq!(id("c1"), "t~c1");
        // New runs: continuing a tip keeps its id; under a parent with a
        // child already, a fork.
        let new = |id: &str, fork, branch: &str| NewRun {
            id: id.into(),
            fork,
            branch: branch.into(),
        };
        assert_eq!(
            for_new_run("t", &runs, &none, "n", Some("r3"), false),
            new("t", false, "r1")
        );
        assert_eq!(
            for_new_run("t", &runs, &none, "n", Some("b2"), false),
            new("t~b1", false, "b1")
        );
        assert_eq!(
            for_new_run("t", &runs, &none, "n", Some("c1"), false),
            new("t~c1", false, "c1")
        );
        assert_eq!(
            for_new_run("t", &runs, &none, "n", Some("r1"), false),
            new("t~n", true, "n")
        );
        assert_eq!(
            for_new_run("t", &[], &none, "n", None, false),
            new("t", false, "n")
        );
        // A run set aside forks, even from a tip.
        assert_eq!(
            for_new_run("t", &runs, &none, "n", Some("r3"), true),
            new("t~n", true, "n")
        );
        // A fork recorded for a run that joined as its parent's first child
        // (a run set aside from r3): its children continue its id.
        let mut joined = runs.clone();
        joined.push(run("a1", Some("r3"), 25));
        let starts: HashSet<&str> = ["r1", "b1", "c1", "a1"].into();
        assert_eq!(
            for_new_run("t", &joined, &starts, "n", Some("a1"), false),
            new("t~a1", false, "a1")
        );
        // Without the record it would continue r1's branch.
        assert_eq!(
            for_new_run("t", &joined, &none, "n", Some("a1"), false),
            new("t", false, "r1")
        );
        // The recorded starts of an ordinary tree change nothing.
        for p in ["r1", "r2", "r3", "b1", "b2", "c1"] {
            assert_eq!(
                for_new_run("t", &runs, &starts, "n", Some(p), false),
                for_new_run("t", &runs, &none, "n", Some(p), false),
                "{p}"
            );
        }
    }
}
