//! Replays every input kept in `fixtures/fuzz-regressions/run_input/` and
//! `.../upstream_reader/` through the check its fuzz target runs
//! (`fuzz/fuzz_targets/*_check.rs`).

use std::path::PathBuf;

#[path = "../../../fuzz/fuzz_targets/run_input_check.rs"]
mod run_input_check;
#[path = "../../../fuzz/fuzz_targets/upstream_reader_check.rs"]
mod upstream_reader_check;

fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/fuzz-regressions")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no inputs in {}", dir.display());
    files
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect()
}

#[test]
fn run_input_regressions() {
    for (path, data) in inputs("run_input") {
        eprintln!("replaying {}", path.display());
        run_input_check::check(&data);
    }
}

#[test]
fn upstream_reader_regressions() {
    for (path, data) in inputs("upstream_reader") {
        eprintln!("replaying {}", path.display());
        upstream_reader_check::check(&data);
    }
}
