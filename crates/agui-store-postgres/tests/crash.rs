//! Crash safety: SIGKILL a child process appending to a PostgreSQL store at
//! random moments, at least 100 times, and check the store after each kill
//! (`agui_store::conformance::crash`: every acknowledged durable append
//! present once and intact, the run index in agreement with the log,
//! restores working, the store reopening cleanly while the killed session's
//! connections are still being torn down). The schema is the test's own,
//! dropped at the end. `harness = false`: this binary is also the child.

mod common;

use agui_store::conformance::crash;

fn main() {
    // The child takes its store URL from the harness's variable instead.
    let url = if std::env::var_os(crash::CHILD_ENV).is_some() {
        String::new()
    } else if let Some(url) = common::url() {
        url
    } else {
        println!("0 passed, 0 failed (skipped: no PostgreSQL)");
        return;
    };
    let (schema, _) = crash::test_main(
        "postgres",
        || {
            let schema = common::Schema::new(url);
            let url = store_url(&schema);
            (schema, url)
        },
        |url| async move { agui_store_postgres::open(&url).await },
    );
    drop(schema);
    println!("1 passed, 0 failed");
}

/// The server URL with the schema named in its query.
fn store_url(schema: &common::Schema) -> String {
    let sep = if schema.url.contains('?') { '&' } else { '?' };
    format!("{}{sep}schema={}", schema.url, schema.name)
}
