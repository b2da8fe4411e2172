//! `reduce` against the official reducer in Node, on realistic streams of
//! 10k and 100k events, measured in one run. Figures: `../BENCHMARK.md`.
//!
//! Run: `cargo bench -p agui-history --bench reduce` (needs Node and the SDK
//! in `oracle/`: `npm ci --prefix oracle`). Prints, per size, our time
//! (median of several runs), the official time (`oracle/bench-reduce.mjs`:
//! `transformChunks` then `defaultApplyEvents` of `@ag-ui/client` 1.0.0),
//! the ratio, and how each grows from one size to the next. The machine is
//! shared and noisy: compare the ratios, not single times.
//!
//! What is compared, so that the comparison is fair:
//! - Same events (`agui_testkit::gen::realistic(n, 42)`), same starting
//!   point (no messages, state `{}`), and both results must have the same
//!   number of messages.
//! - Ours: `reduce(&events, Conversation::default())` on events already
//!   read into envelopes (their JSON text and type); reading each field
//!   from the JSON text is part of the timed work. Official: the events as
//!   parsed JavaScript objects; `JSON.parse` of the input and the
//!   `structuredClone` that protects the input from the reducer's mutations
//!   are outside its timer, so neither side pays for decoding the input.
//! - The official pipeline runs exactly as a client runs it: no subscribers,
//!   `NODE_ENV` unset (its production path). Its cost grows with the
//!   conversation on every event (it clones the message list for each
//!   mutation it emits and finds messages by scanning), which is why it is
//!   quadratic; that is the official reducer's own behaviour, not the
//!   bench's.
//! - It runs once per size (a single run takes minutes, so JIT warm-up is
//!   noise); ours is the median of 31 runs at 10k and 7 at 100k, after one
//!   warm-up run. Dropping our result is outside our timer.
//! - The official run has a time budget (`AGUI_BENCH_NODE_BUDGET_S`,
//!   default 900 s; 0 for none). When it runs out, a counting subscriber
//!   stops the run and reports how many input events it had reached; the
//!   ratio printed is then a lower bound (`>`): the budget over our time.
//!
//! Environment: `AGUI_BENCH_SIZES` (default `10000,100000`),
//! `AGUI_BENCH_NODE_RUNS` (official runs per size, default 1; `0` times ours
//! only, for profiling), `AGUI_BENCH_NODE_BUDGET_S`.

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

/// One official measurement: the median time, the message count, and how
/// far the reducer got (`processed` of the input events; `finished` false
/// when the budget ran out first, and `time` is then the budget).
struct Official {
    time: Duration,
    messages: usize,
    processed: usize,
    finished: bool,
}

fn official(events: &[Event], runs: u64, budget: Option<Duration>) -> Official {
    let mut input = json!({
        "events": events.iter().map(Event::to_value).collect::<Vec<Value>>(),
        "runs": runs,
    });
    if let Some(b) = budget {
        input["budgetMs"] = json!(b.as_secs_f64() * 1000.0);
    }
    let out = oracle::run("bench-reduce.mjs", &input);
    let times: Vec<Duration> = out["ms"]
        .as_array()
        .expect("times")
        .iter()
        .map(|ms| Duration::from_secs_f64(ms.as_f64().unwrap_or(0.0) / 1000.0))
        .collect();
    Official {
        time: median(times),
        messages: out["messages"].as_u64().unwrap_or(0) as usize,
        processed: out["processed"].as_u64().unwrap_or(0) as usize,
        finished: out["finished"].as_bool().unwrap_or(false),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let node_runs: u64 = env_or("AGUI_BENCH_NODE_RUNS", 1);
    let budget_s: f64 = env_or("AGUI_BENCH_NODE_BUDGET_S", 900.0);
    let budget = (budget_s > 0.0).then(|| Duration::from_secs_f64(budget_s));
    let sizes: Vec<usize> = std::env::var("AGUI_BENCH_SIZES")
        .unwrap_or_else(|_| "10000,100000".to_owned())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let mut rows = Vec::new();
    for &n in &sizes {
        let events = streams::realistic(n, 42);
        let bytes: usize = events.iter().map(Event::len_bytes).sum();
        let (t_ours, conv) = ours(&events);
        let line = format!(
            "reduce {n:>7} events ({:.1} MB, {} messages): ours {:>9.3} ms ({:.2} M events/s)",
            bytes as f64 / 1e6,
            conv.messages.len(),
            ms(t_ours),
            n as f64 / t_ours.as_secs_f64() / 1e6
        );
        if node_runs == 0 {
            println!("{line}");
            rows.push((n, t_ours, None));
            continue;
        }
        let node = official(&events, node_runs, budget);
        let ratio = node.time.as_secs_f64() / t_ours.as_secs_f64();
        if node.finished {
            assert_eq!(
                conv.messages.len(),
                node.messages,
                "both reducers must build the same conversation"
            );
            println!(
                "{line}, official {:>10.1} ms, ratio {ratio:>8.0}x",
                ms(node.time)
            );
        } else {
            println!(
                "{line}, official did not finish: {} of {n} events in {:.1} s (budget), ratio > {ratio:.0}x",
                node.processed,
                node.time.as_secs_f64()
            );
        }
        rows.push((n, t_ours, Some(node)));
    }
    for pair in rows.windows(2) {
        let (n0, o0, j0) = &pair[0];
        let (n1, o1, j1) = &pair[1];
        let grow = |a: Duration, b: Duration| b.as_secs_f64() / a.as_secs_f64();
        let official = match (j0, j1) {
            (Some(a), Some(b)) if a.finished && b.finished => {
                format!(", official {:.1}x", grow(a.time, b.time))
            }
            (Some(a), Some(b)) if a.finished => format!(
                ", official > {:.1}x (it had reached {} of {n1} events when the budget ran out)",
                grow(a.time, b.time),
                b.processed
            ),
            _ => String::new(),
        };
        println!(
            "growth {n0} -> {n1} events ({:.0}x): ours {:.1}x{official} (linear = {:.0}x)",
            *n1 as f64 / *n0 as f64,
            grow(*o0, *o1),
            *n1 as f64 / *n0 as f64,
        );
    }
}
