//! Crash safety: SIGKILL a child process appending to a file store at random
//! moments, at least 100 times, and check the store after each kill (every
//! acknowledged durable append present once and intact, the run index in
//! agreement with the log, restores working). Segments of 1 MiB make kills
//! land during rotation and sealing too.
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
            let store = agui_store::Store::new(agui_store_file::open(&url).await?);
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
    let url = format!("file://{}?segment_mb=1", dir.path().join("store").display());
    let exe = std::env::current_exe().expect("the test binary");
    let report = rt.block_on(crash::run(
        |seed| {
            let mut cmd = std::process::Command::new(&exe);
            cmd.env(crash::CHILD_ENV, &url)
                .env("AGUI_STORE_CRASH_SEED", seed.to_string());
            cmd
        },
        || async {
            agui_store_file::open(&url)
                .await
                .map(agui_store::Store::new)
        },
        kills,
        0x5eed,
    ));
    assert!(report.kills >= kills.min(100));
    assert!(report.acks > 0, "the children acknowledged appends");
    let segments = std::fs::read_dir(dir.path().join("store"))
        .expect("the store directory")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with("seg"))
        .count();
    println!(
        "file crash harness: {} kills, {} acknowledged appends, {} events checked, {segments} segment files",
        report.kills, report.acks, report.events
    );
    println!("1 passed, 0 failed");
}
