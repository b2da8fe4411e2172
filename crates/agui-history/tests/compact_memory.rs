//! The memory bound of streaming compaction, shown by counting what the
//! compactor holds while a long log goes through it (not by timing).

use agui_history::compact::{DeltaCompactor, LatestOptions, compact_latest_from};
use agui_protocol::Event;
use std::cell::Cell;

/// `deltas` holds what is open at once, never the log: on a realistic log
/// of 200,000 events, the most it ever holds stays the same as on one of
/// 20,000.
#[test]
fn deltas_holds_what_is_open_not_the_log() {
    let most_held = |n: usize| {
        let mut compactor = DeltaCompactor::new();
        let mut most = 0;
        let mut out = 0;
        for event in agui_testkit::realistic(n, 7) {
            compactor.push(event).unwrap();
            most = most.max(compactor.held());
            out += compactor.drain().count();
        }
        compactor.finish().unwrap();
        out += compactor.drain().count();
        assert!(out > 0 && out < n);
        most
    };
    let short = most_held(20_000);
    let long = most_held(200_000);
    assert!(long < 1_000, "held {long} events at once");
    assert!(
        long <= 2 * short.max(50),
        "short log: {short}, long log: {long}"
    );
}

/// `latest` from a source it can read again holds no events: it reads the
/// log in at most three passes and never asks for more.
#[test]
fn latest_reads_again_instead_of_holding() {
    let events: Vec<Event> = agui_testkit::realistic(20_000, 3);
    let passes = Cell::new(0);
    let mut out = Vec::new();
    compact_latest_from(
        || {
            passes.set(passes.get() + 1);
            events.iter().cloned()
        },
        &LatestOptions::default(),
        &mut |e| {
            out.push(e);
            Ok(())
        },
    )
    .unwrap();
    assert!((2..=3).contains(&passes.get()), "{} passes", passes.get());
    assert!(
        !out.is_empty() && out.len() < 10,
        "{} events out",
        out.len()
    );
}
