//! Crash safety: SIGKILL a child process appending to a file store at random
//! moments, at least 100 times, and check the store after each kill
//! (`agui_store::conformance::crash`: every acknowledged durable append
//! present once and intact, the run index in agreement with the log,
//! restores working). Segments of 1 MiB make kills land during rotation and
//! sealing too. `harness = false`: this binary is also the child.

use agui_store::conformance::crash;

fn main() {
    let (dir, _) = crash::test_main(
        "file",
        || {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let url = format!("file://{}?segment_mb=1", dir.path().join("store").display());
            (dir, url)
        },
        |url| async move { agui_store_file::open(&url).await },
    );
    let segments = std::fs::read_dir(dir.path().join("store"))
        .expect("the store directory")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with("seg"))
        .count();
    println!("file store: {segments} segment files at the end");
    println!("1 passed, 0 failed");
}
