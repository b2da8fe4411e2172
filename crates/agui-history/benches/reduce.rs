//! `reduce` against the official reducer in Node, on realistic streams of
//! 10k and 100k events, measured in one run.
//!
//! Run: `cargo bench -p agui-history --bench reduce` (needs Node and the SDK
//! in `oracle/`). Prints, per size, our time (median of several runs), the
//! official time (`oracle/bench-reduce.mjs`: `transformChunks` then
//! `defaultApplyEvents`), the ratio, and how each grows from 10k to 100k.
//! The machine is shared and noisy: compare the ratios, not single times.
//!
//! `AGUI_BENCH_NODE_RUNS` sets the official runs per size (default 1; the
//! official reducer takes minutes at 100k); `AGUI_BENCH_NODE_RUNS=0` times
//! ours only (for profiling).

use std::time::{Duration, Instant};

use agui_history::reduce::{Conversation, reduce};
use agui_protocol::Event;
use agui_testkit::{r#gen as streams, oracle};
use serde_json::{Value, json};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ours(events: &[Event]) -> (Duration, Conversation) {
    // Warm up once, then time enough runs for a stable median.
    let result = reduce(events, Conversation::default()).expect("the stream reduces");
    let runs = if events.len() <= 10_000 { 31 } else { 7 };
    let times = (0..runs)
        .map(|_| {
            let t0 = Instant::now();
            let c = reduce(events, Conversation::default()).expect("the stream reduces");
            let t = t0.elapsed();
            std::hint::black_box(c);
            t
        })
        .collect();
    (median(times), result)
}

fn official(events: &[Event], runs: u64) -> (Duration, usize) {
    let input = json!({
        "events": events.iter().map(Event::to_value).collect::<Vec<Value>>(),
        "runs": runs,
    });
    let out = oracle::run("bench-reduce.mjs", &input);
    let times: Vec<Duration> = out["ms"]
        .as_array()
        .expect("times")
        .iter()
        .map(|ms| Duration::from_secs_f64(ms.as_f64().unwrap_or(0.0) / 1000.0))
        .collect();
    let messages = out["messages"].as_u64().unwrap_or(0) as usize;
    (median(times), messages)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let node_runs: u64 = std::env::var("AGUI_BENCH_NODE_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let mut rows = Vec::new();
    for n in [10_000usize, 100_000] {
        let events = streams::realistic(n, 42);
        let bytes: usize = events.iter().map(Event::len_bytes).sum();
        let (t_ours, conv) = ours(&events);
        if node_runs == 0 {
            println!(
                "reduce {n:>7} events: ours {:>9.3} ms ({:.2} M events/s)",
                ms(t_ours),
                n as f64 / t_ours.as_secs_f64() / 1e6
            );
            continue;
        }
        let (t_node, node_messages) = official(&events, node_runs);
        assert_eq!(
            conv.messages.len(),
            node_messages,
            "both reducers must build the same conversation"
        );
        let ratio = t_node.as_secs_f64() / t_ours.as_secs_f64();
        println!(
            "reduce {n:>7} events ({:.1} MB, {} messages): ours {:>9.3} ms ({:.2} M events/s), official {:>10.1} ms, ratio {:>8.0}x",
            bytes as f64 / 1e6,
            conv.messages.len(),
            ms(t_ours),
            n as f64 / t_ours.as_secs_f64() / 1e6,
            ms(t_node),
            ratio,
        );
        rows.push((n, t_ours, t_node));
    }
    if rows.len() < 2 {
        return;
    }
    let (n0, o0, j0) = rows[0];
    let (n1, o1, j1) = rows[1];
    println!(
        "growth {n0} -> {n1} events ({}x): ours {:.1}x, official {:.1}x (linear = {}x)",
        n1 / n0,
        o1.as_secs_f64() / o0.as_secs_f64(),
        j1.as_secs_f64() / j0.as_secs_f64(),
        n1 / n0,
    );
}
