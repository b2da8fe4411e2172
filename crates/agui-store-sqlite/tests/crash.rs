//! Crash safety: SIGKILL a child process appending to a SQLite store at
//! random moments, at least 100 times, and check the store after each kill
//! (`agui_store::conformance::crash`). `harness = false`: this binary is
//! also the child.

use agui_store::conformance::crash;

fn main() {
    crash::test_main(
        "sqlite",
        || {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let url = format!("sqlite://{}", dir.path().join("crash.db").display());
            (dir, url)
        },
        |url| async move { agui_store_sqlite::open(&url).await },
    );
    println!("1 passed, 0 failed");
}
