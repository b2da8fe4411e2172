//! Crash safety: SIGKILL a child process appending to a SQLite store at
//! random moments, at least 100 times, and check the store after each kill.
//! (`harness = false`: this binary is also the child, when
//! `AGUI_STORE_CRASH_CHILD` names the store URL.)

use agui_store::conformance::crash;

fn main() {
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    if let Ok(url) = std::env::var(crash::CHILD_ENV) {
        let seed: u64 = std::env::var("AGUI_STORE_CRASH_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1);
        let result = rt.block_on(async {
            let store = agui_store::Store::new(agui_store_sqlite::open(&url).await?);
            crash::child_main(&store, seed).await
        });
        if let Err(e) = result {
            eprintln!("crash child: {e}");
            std::process::exit(1);
        }
        return;
    }
    let kills: usize = std::env::var("AGUI_STORE_CRASH_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let url = format!("sqlite://{}", dir.path().join("crash.db").display());
    let exe = std::env::current_exe().expect("the test binary");
    let report = rt.block_on(crash::run(
        |seed| {
            let mut cmd = std::process::Command::new(&exe);
            cmd.env(crash::CHILD_ENV, &url)
                .env("AGUI_STORE_CRASH_SEED", seed.to_string());
            cmd
        },
        || async {
            agui_store_sqlite::open(&url)
                .await
                .map(agui_store::Store::new)
        },
        kills,
        0x5eed,
    ));
    assert!(report.kills >= kills.min(100));
    assert!(report.acks > 0, "the children acknowledged appends");
    println!(
        "sqlite crash harness: {} kills, {} acknowledged appends, {} events checked",
        report.kills, report.acks, report.events
    );
    println!("1 passed, 0 failed");
}
