//! Replays every input kept in `fixtures/fuzz-regressions/envelope/` through
//! the check the `envelope` fuzz target runs
//! (`fuzz/fuzz_targets/envelope_check.rs`).

use std::path::PathBuf;

#[path = "../../../fuzz/fuzz_targets/envelope_check.rs"]
mod envelope_check;

#[test]
fn envelope_regressions() {
    let dir =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/fuzz-regressions/envelope");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no inputs in {}", dir.display());
    for path in files {
        eprintln!("replaying {}", path.display());
        envelope_check::check(&std::fs::read(&path).unwrap());
    }
}
