//! The crash harness: a child process appends to a store; the parent kills
//! it with SIGKILL at random moments, reopens the store and checks that every
//! append acknowledged as durable is present, nothing is duplicated or
//! corrupt, and the store opens cleanly. Generic over the store: the backend's
//! test supplies how to spawn the child and how to open the store.
//!
//! The child is the backend's own test binary re-executed with
//! [`CHILD_ENV`] set: a `harness = false` test whose `main` is one call of
//! [`test_main`] (the child's part, [`child_main`], when the variable is
//! present; the killing loop, [`run`], otherwise).
//!
//! Protocol: the child prints `ready` once open, then one line
//! `ack <thread> <last_seq>` after every acknowledged append.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use serde_json::json;

use super::events::{event, run_finished, run_started};
use crate::{AppendRequest, Durability, RunStatus, Store};

/// The environment variable that makes a backend's crash test binary act as
/// the child. Its value is the store URL.
pub const CHILD_ENV: &str = "AGUI_STORE_CRASH_CHILD";

/// The tenant the harness writes to.
pub const TENANT: &str = "crash";
/// How many threads the child spreads its appends over.
pub const THREADS: usize = 3;

fn thread_name(i: usize) -> String {
    format!("crash-{i}")
}

/// The event the child writes at `seq` of thread `thread`: its own position
/// is inside, so duplication, loss or corruption is visible.
fn payload(thread: usize, seq: u64) -> agui_protocol::Event {
    let pad = "p".repeat((seq % 97) as usize);
    event(json!({"type":"CUSTOM","name":"crash","value":{"thread":thread,"seq":seq,"pad":pad}}))
}

/// [`payload`]'s JSON text, written directly: what the verification
/// compares every stored event with (building each expected event through
/// `serde_json` made the checks most of the harness's time).
fn payload_text(thread: usize, seq: u64) -> String {
    let pad = "p".repeat((seq % 97) as usize);
    format!(
        r#"{{"type":"CUSTOM","name":"crash","value":{{"thread":{thread},"seq":{seq},"pad":"{pad}"}}}}"#
    )
}

/// The child: appends forever (until killed) to the store, printing an `ack`
/// line after each acknowledged append. Batches of 1 to 40 events; every
/// third append durable per [`Durability::Append`], the others `RunEnd`; some
/// batches start or end runs.
pub async fn child_main(store: &Store, seed: u64) -> crate::Result<()> {
    use std::io::Write;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut last = Vec::new();
    let mut open_run: Vec<Option<String>> = Vec::new();
    for t in 0..THREADS {
        let name = thread_name(t);
        let last_seq = match store.thread(TENANT, &name).await {
            Ok(info) => info.last_seq,
            Err(e) if e.kind() == crate::ErrorKind::NotFound => 0,
            Err(e) => return Err(e),
        };
        last.push(last_seq);
        let filter = crate::RunFilter {
            thread_id: Some(name),
            limit: crate::MAX_PAGE,
            ..Default::default()
        };
        let runs = store.list_runs(TENANT, &filter).await?.runs;
        open_run.push(
            runs.last()
                .filter(|r| r.status == RunStatus::Running)
                .map(|r| r.run_id.clone()),
        );
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "ready");
    let _ = out.flush();
    let mut n = 0u64;
    loop {
        n += 1;
        let t = rng.gen_range(0..THREADS);
        let name = thread_name(t);
        let len = rng.gen_range(1..=40u64);
        let first = last[t] + 1;
        let mut events: Vec<_> = (first..first + len).map(|s| payload(t, s)).collect();
        // Replace the first event by a run boundary now and then: the event
        // at that position is then a RUN_* (checked by the parent).
        match (rng.gen_range(0..6), open_run[t].take()) {
            (0, _) => {
                let run = format!("run-{t}-{first}");
                events[0] = run_started(&name, &run, None);
                open_run[t] = Some(run);
            }
            (1, Some(run)) => events[0] = run_finished(&name, &run),
            (_, still_open) => open_run[t] = still_open,
        }
        let durability = if n.is_multiple_of(3) {
            Durability::Append
        } else {
            Durability::RunEnd
        };
        let req = AppendRequest::new(events)
            .expect_seq(last[t])
            .durability(durability);
        let a = store.append(TENANT, &name, req).await?;
        last[t] = a.last_seq;
        let _ = writeln!(out, "ack {t} {}", a.last_seq);
        let _ = out.flush();
    }
}

/// What a crash run measured.
#[derive(Debug, Clone, Default)]
pub struct CrashReport {
    /// Children killed with SIGKILL.
    pub kills: usize,
    /// Appends acknowledged across all children.
    pub acks: u64,
    /// Events in the store at the end.
    pub events: u64,
}

/// Runs the harness: `kills` times, spawn the child (`spawn` must return a
/// command that runs [`child_main`] on the store under test), wait a random
/// 5–150 ms after it is ready, SIGKILL it, then open the store with `open`,
/// verify it and close it. Panics on the first violation.
pub async fn run<F, Fut>(
    mut spawn: impl FnMut(u64) -> Command,
    open: F,
    kills: usize,
    seed: u64,
) -> CrashReport
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = crate::Result<Store>>,
{
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut acked: BTreeMap<usize, u64> = BTreeMap::new();
    let mut report = CrashReport::default();
    let mut checked = BTreeMap::new();
    for round in 0..kills {
        let mut cmd = spawn(rng.r#gen());
        cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
        let mut child: Child = cmd.spawn().expect("the crash child starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // Wait for `ready`, then let it append for a random while.
        let ready = rx.recv_timeout(Duration::from_secs(60));
        assert_eq!(
            ready.as_deref().ok(),
            Some("ready"),
            "round {round}: the child did not open the store"
        );
        let wait = Duration::from_millis(rng.gen_range(5..150));
        std::thread::sleep(wait);
        if let Ok(Some(status)) = child.try_wait() {
            panic!("round {round}: the child exited on its own: {status}");
        }
        child.kill().expect("SIGKILL");
        let _ = child.wait();
        report.kills += 1;
        let _ = reader.join();
        for line in rx.try_iter() {
            let mut parts = line.split(' ');
            if let (Some("ack"), Some(t), Some(seq)) = (parts.next(), parts.next(), parts.next()) {
                let (t, seq): (usize, u64) = (t.parse().unwrap(), seq.parse().unwrap());
                let e = acked.entry(t).or_insert(0);
                *e = (*e).max(seq);
                report.acks += 1;
            }
        }
        let store = open()
            .await
            .unwrap_or_else(|e| panic!("round {round}: reopen failed: {e:#?}"));
        // Every tenth round and the last read every thread whole; the others
        // read what came after the last check (the head, byte count and run
        // index are checked whole every round).
        let whole = round % 10 == 9 || round + 1 == kills;
        report.events = verify(&store, &acked, round, whole, &mut checked).await;
        store.close().await.expect("close");
    }
    report
}

/// Checks the store after a kill; returns the number of events.
///
/// `checked` holds, per thread, how many events an earlier round found
/// exactly as written and their bytes. Unless `whole`, only the events past
/// those are read; a store that lost or changed an earlier one still fails
/// here at once by its head or byte count, and at the next whole round by
/// content.
async fn verify(
    store: &Store,
    acked: &BTreeMap<usize, u64>,
    round: usize,
    whole: bool,
    checked: &mut BTreeMap<usize, (u64, u64)>,
) -> u64 {
    let mut total = 0;
    for t in 0..THREADS {
        let name = thread_name(t);
        let want = acked.get(&t).copied().unwrap_or(0);
        let (known, known_bytes) = match checked.get(&t) {
            Some(&c) if !whole => c,
            _ => (0, 0),
        };
        // On a database, the killed writer's last commit, already sent, can
        // land after the kill, between two of these reads: read the log
        // and the run index between two looks at the head, again until the
        // head stood still.
        let mut tries = 0;
        let read = loop {
            let before = store.thread(TENANT, &name).await.ok().map(|i| i.last_seq);
            let events = match store.read_range(TENANT, &name, known + 1, u64::MAX).await {
                Ok(e) => e,
                Err(e) if e.kind() == crate::ErrorKind::NotFound && want == 0 && known == 0 => {
                    break None;
                }
                Err(e) => panic!("round {round}: thread {t} unreadable: {e}"),
            };
            let runs = store
                .list_runs(
                    TENANT,
                    &crate::RunFilter {
                        thread_id: Some(name.clone()),
                        limit: crate::MAX_PAGE,
                        ..Default::default()
                    },
                )
                .await
                .expect("runs");
            let info = store.thread(TENANT, &name).await.expect("thread info");
            tries += 1;
            if before == Some(info.last_seq) || tries == 20 {
                break Some((events, runs, info));
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        };
        let Some((events, runs, info)) = read else {
            continue;
        };
        let len = known + events.len() as u64;
        assert!(
            len >= want,
            "round {round}: thread {t} lost acknowledged events: has {len}, acknowledged {want}",
        );
        for (i, e) in events.iter().enumerate() {
            let seq = known + i as u64 + 1;
            assert_eq!(
                e.seq, seq,
                "round {round}: thread {t}: sequence gap or duplicate"
            );
            match e.event.type_name() {
                "RUN_STARTED" | "RUN_FINISHED" => {}
                _ => assert_eq!(
                    e.event.json(),
                    payload_text(t, seq),
                    "round {round}: thread {t} event {seq} corrupt or misplaced"
                ),
            }
        }
        assert_eq!(
            info.last_seq, len,
            "round {round}: head agrees with the log"
        );
        let bytes: u64 = known_bytes
            + events
                .iter()
                .map(|e| e.event.len_bytes() as u64)
                .sum::<u64>();
        assert_eq!(
            info.bytes, bytes,
            "round {round}: byte count agrees with the log"
        );
        // The run index agrees with the log: every RUN_STARTED is indexed and
        // runs tile the log after the first one.
        let starts: Vec<u64> = events
            .iter()
            .filter(|e| e.event.type_name() == "RUN_STARTED")
            .map(|e| e.seq)
            .collect();
        let indexed: Vec<u64> = runs
            .runs
            .iter()
            .map(|r| r.first_seq)
            .filter(|&s| s > known)
            .collect();
        assert_eq!(indexed, starts, "round {round}: run index matches the log");
        for pair in runs.runs.windows(2) {
            assert_eq!(
                pair[0].last_seq + 1,
                pair[1].first_seq,
                "round {round}: runs tile"
            );
        }
        if let (Some(first), Some(last)) = (runs.runs.first(), runs.runs.last()) {
            assert_eq!(last.last_seq, len, "round {round}: last run ends the log");
            let n: u64 = runs.runs.iter().map(|r| r.event_count).sum();
            assert_eq!(n + first.first_seq - 1, len, "round {round}: run counts");
        }
        // Restoring works on every ended run (checkpoints valid or rebuilt).
        for r in runs
            .runs
            .iter()
            .filter(|r| r.status != RunStatus::Running)
            .rev()
            .take(2)
        {
            store
                .restore(TENANT, &name, &r.run_id)
                .await
                .unwrap_or_else(|e| panic!("round {round}: restore {}: {e}", r.run_id));
        }
        checked.insert(t, (len, bytes));
        total += len;
    }
    total
}

/// The whole `main` of a backend's crash test (`harness = false`).
///
/// In the child (when [`CHILD_ENV`] names the store URL) it opens the store
/// with `open` and runs [`child_main`], then exits. Otherwise it asks
/// `make_url` for a store URL (with whatever must live as long as the run,
/// a temporary directory), runs [`run`] with `AGUI_STORE_CRASH_KILLS` kills
/// (100 by default), re-executing this binary as the child, checks the
/// report, prints it under `name` and returns it with that guard.
pub fn test_main<B, G, Fut>(
    name: &str,
    make_url: impl FnOnce() -> (G, String),
    open: impl Fn(String) -> Fut,
) -> (G, CrashReport)
where
    B: crate::Backend + 'static,
    Fut: std::future::Future<Output = crate::Result<B>>,
{
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    if let Ok(url) = std::env::var(CHILD_ENV) {
        let seed: u64 = std::env::var("AGUI_STORE_CRASH_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1);
        let result = rt.block_on(async {
            let store = Store::new(open(url).await?);
            child_main(&store, seed).await
        });
        if let Err(e) = result {
            eprintln!("crash child: {e}");
            std::process::exit(1);
        }
        std::process::exit(0);
    }
    let kills: usize = std::env::var("AGUI_STORE_CRASH_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let (guard, url) = make_url();
    let exe = std::env::current_exe().expect("the test binary");
    let report = rt.block_on(run(
        |seed| {
            let mut cmd = Command::new(&exe);
            cmd.env(CHILD_ENV, &url)
                .env("AGUI_STORE_CRASH_SEED", seed.to_string());
            cmd
        },
        || async { open(url.clone()).await.map(Store::new) },
        kills,
        0x5eed,
    ));
    assert!(report.kills >= kills.min(100));
    assert!(report.acks > 0, "the children acknowledged appends");
    println!(
        "{name} crash harness: {} kills, {} acknowledged appends, {} events checked",
        report.kills, report.acks, report.events
    );
    (guard, report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_expected_text_is_the_payload_as_written() {
        for thread in [0, 3] {
            for seq in (1..400).chain([99_999, 1 << 40]) {
                assert_eq!(payload_text(thread, seq), payload(thread, seq).json());
            }
        }
    }
}
