//! The store benchmark (`agui_store::bench`) on the PostgreSQL backend, in
//! one run: `cargo bench -p agui-store-postgres`. Needs
//! `AGUI_TEST_POSTGRES_URL` (or `AGUI_BENCH_POSTGRES_URL`); uses a schema of
//! its own, dropped at the end. `AGUI_BENCH_SMALL=1` runs a reduced size.

use agui_store::Store;
use agui_store::bench::{BenchOptions, run};
use agui_store_postgres::{PgOptions, PgStore};

fn main() {
    let Some(url) = std::env::var("AGUI_BENCH_POSTGRES_URL")
        .or_else(|_| std::env::var("AGUI_TEST_POSTGRES_URL"))
        .ok()
    else {
        eprintln!("notice: AGUI_TEST_POSTGRES_URL is not set; the PostgreSQL benchmark is skipped");
        return;
    };
    let mut opts = BenchOptions::default();
    if std::env::var_os("AGUI_BENCH_SMALL").is_some() {
        opts.append_events = 20_000;
        opts.restore_runs = 50;
        opts.restore_samples = 50;
    }
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    let mut o = PgOptions::from_url(&url).expect("a postgres:// URL");
    o.schema = format!("agui_bench_{}", std::process::id());
    let schema = o.schema.clone();
    let conn = o.conn.clone();
    let store = rt
        .block_on(PgStore::open_with(o))
        .expect("the PostgreSQL store opens");
    let store = Store::new(store);
    println!("== postgres (schema {schema})");
    let report = rt.block_on(run(store.clone(), &opts, |line| {
        println!("postgres: {line}")
    }));
    rt.block_on(store.close()).expect("close");
    rt.block_on(async {
        if let Ok((client, c)) = tokio_postgres::connect(&conn, tokio_postgres::NoTls).await {
            tokio::spawn(c);
            let _ = client
                .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                .await;
        }
    });
    match report {
        Ok(r) => println!("postgres: {r:?}"),
        Err(e) => {
            eprintln!(
                "the benchmark failed: {e} ({:?})",
                std::error::Error::source(&e)
            );
            std::process::exit(1);
        }
    }
}
