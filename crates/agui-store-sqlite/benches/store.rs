//! The store benchmark (see `agui_store::bench`) on the memory and SQLite
//! backends, in one run: `cargo bench -p agui-store-sqlite --bench store`.
//! `AGUI_BENCH_SMALL=1` runs a reduced size (for a quick look).

use agui_store::Store;
use agui_store::bench::{BenchOptions, run};

fn main() {
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    let mut opts = BenchOptions::default();
    if std::env::var_os("AGUI_BENCH_SMALL").is_some() {
        opts.append_events = 20_000;
        opts.restore_runs = 50;
        opts.restore_samples = 50;
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    let backends: Vec<(&str, Store)> = rt.block_on(async {
        vec![
            ("memory", agui_store::Store::memory()),
            (
                "sqlite",
                Store::new(
                    agui_store_sqlite::SqliteStore::open_path(&dir.path().join("bench.db"))
                        .await
                        .expect("the SQLite store opens"),
                ),
            ),
        ]
    });
    for (name, store) in backends {
        println!("== {name}");
        let report = rt
            .block_on(run(store.clone(), &opts, |line| println!("{name}: {line}")))
            .expect("the benchmark runs");
        println!("{name}: {report:?}");
        rt.block_on(store.close()).expect("close");
    }
}
