//! `agui._agui`: the native half of the `agui` Python package.
//!
//! Every function here takes encoded events (`bytes`: a JSON array, NDJSON or
//! SSE, detected as the CLI does) and returns encoded results; the Python
//! half (`agui/__init__.py`) turns dicts and `ag_ui.core` models into bytes
//! and back. The work runs with the GIL released and inside
//! `catch_unwind`, so a panic becomes an `AguiInternalError`, never a crash
//! or a `BaseException`.

use std::panic::{AssertUnwindSafe, catch_unwind};

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

mod core;
mod store;
mod stream;

use core::Failure;

create_exception!(
    _agui,
    AguiError,
    PyException,
    "Base class of every error raised by agui."
);
create_exception!(
    _agui,
    AguiDecodeError,
    AguiError,
    "Input that is not an event stream (bad framing, invalid JSON, not an event object)."
);
create_exception!(
    _agui,
    AguiVerifyError,
    AguiError,
    "A stream the AG-UI sequence verifier rejects."
);
create_exception!(
    _agui,
    AguiReduceError,
    AguiError,
    "An event the official reducer would throw on."
);
create_exception!(
    _agui,
    AguiCompactError,
    AguiError,
    "A stream that cannot be compacted."
);
create_exception!(
    _agui,
    AguiLineageError,
    AguiError,
    "A run tree that cannot be followed (faults, unknown run)."
);
create_exception!(
    _agui,
    AguiArtifactError,
    AguiError,
    "An artifact that cannot be exported or is malformed."
);
create_exception!(
    _agui,
    AguiStoreError,
    AguiError,
    "A store operation failed."
);
create_exception!(
    _agui,
    AguiInternalError,
    AguiError,
    "A bug in agui (a Rust panic), reported instead of crashing the interpreter."
);

/// Runs `work` without the GIL, turning a panic into a [`Failure`].
pub(crate) fn run_detached<T, F>(py: Python<'_>, work: F) -> PyResult<T>
where
    T: Send,
    F: FnOnce() -> Result<T, Failure> + Send,
{
    let outcome = py.detach(|| catch_unwind(AssertUnwindSafe(work)));
    match outcome {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(failure)) => Err(failure.into_py_err(py)),
        Err(panic) => Err(Failure::panic(panic).into_py_err(py)),
    }
}

fn bytes(py: Python<'_>, data: Vec<u8>) -> Py<PyBytes> {
    PyBytes::new(py, &data).unbind()
}

/// Decodes `data` and writes it again as `to` (`json`, `ndjson`, `sse`);
/// SSE frames get `id:` lines from `first_id` on when it is given.
#[pyfunction]
#[pyo3(signature = (data, to, first_id=None, format=None))]
fn encode(
    py: Python<'_>,
    data: &[u8],
    to: &str,
    first_id: Option<u64>,
    format: Option<&str>,
) -> PyResult<Py<PyBytes>> {
    let out = run_detached(py, || core::encode(data, to, first_id, format))?;
    Ok(bytes(py, out))
}

/// Verifies a stream; returns the number of events.
#[pyfunction]
fn verify(py: Python<'_>, data: &[u8]) -> PyResult<usize> {
    run_detached(py, || core::verify(data))
}

/// Every problem of a stream, as `(index, event_type, reason)` tuples.
#[pyfunction]
fn verify_all(py: Python<'_>, data: &[u8]) -> PyResult<Vec<(u64, String, String)>> {
    run_detached(py, || core::verify_all(data))
}

#[pyfunction]
fn expand_chunks(py: Python<'_>, data: &[u8], to: &str) -> PyResult<Py<PyBytes>> {
    let out = run_detached(py, || core::expand_chunks(data, to))?;
    Ok(bytes(py, out))
}

#[pyfunction]
#[pyo3(signature = (data, start=None, pretty=false))]
fn reduce(
    py: Python<'_>,
    data: &[u8],
    start: Option<&[u8]>,
    pretty: bool,
) -> PyResult<Py<PyBytes>> {
    let out = run_detached(py, || core::reduce(data, start, pretty))?;
    Ok(bytes(py, out))
}

#[pyfunction]
#[pyo3(signature = (data, mode, branch=None, start=None, to="ndjson"))]
fn compact(
    py: Python<'_>,
    data: &[u8],
    mode: &str,
    branch: Option<&str>,
    start: Option<&[u8]>,
    to: &str,
) -> PyResult<Py<PyBytes>> {
    let out = run_detached(py, || core::compact(data, mode, branch, start, to))?;
    Ok(bytes(py, out))
}

#[pyfunction]
fn run_tree(py: Python<'_>, data: &[u8]) -> PyResult<Py<PyBytes>> {
    let out = run_detached(py, || core::run_tree(data))?;
    Ok(bytes(py, out))
}

#[pyfunction]
#[pyo3(signature = (data, run_id, event=None, start=None, pretty=false))]
fn history_at(
    py: Python<'_>,
    data: &[u8],
    run_id: &str,
    event: Option<usize>,
    start: Option<&[u8]>,
    pretty: bool,
) -> PyResult<Py<PyBytes>> {
    let out = run_detached(py, || core::history_at(data, run_id, event, start, pretty))?;
    Ok(bytes(py, out))
}

#[pyfunction]
#[pyo3(signature = (data, run_id, event=None, to="ndjson"))]
fn branch_events(
    py: Python<'_>,
    data: &[u8],
    run_id: &str,
    event: Option<usize>,
    to: &str,
) -> PyResult<(Py<PyBytes>, core::Dropped)> {
    let (out, dropped) = run_detached(py, || core::branch_events(data, run_id, event, to))?;
    Ok((bytes(py, out), dropped))
}

#[pyfunction]
#[pyo3(signature = (data, run_id, source=None, started_at=None, finished_at=None, pretty=false))]
fn export_artifact(
    py: Python<'_>,
    data: &[u8],
    run_id: &str,
    source: Option<&str>,
    started_at: Option<String>,
    finished_at: Option<String>,
    pretty: bool,
) -> PyResult<Py<PyBytes>> {
    let out = run_detached(py, || {
        core::export_artifact(data, run_id, source, started_at, finished_at, pretty)
    })?;
    Ok(bytes(py, out))
}

#[pyfunction]
fn validate_artifact(py: Python<'_>, data: &[u8]) -> PyResult<Py<PyBytes>> {
    let out = run_detached(py, || core::validate_artifact(data))?;
    Ok(bytes(py, out))
}

/// Reads a file into bytes without the GIL (for `read_events(path)`).
#[pyfunction]
fn read_file(py: Python<'_>, path: std::path::PathBuf) -> PyResult<Py<PyBytes>> {
    let out = run_detached(py, || {
        std::fs::read(&path).map_err(|e| {
            Failure::new(
                core::Kind::Decode,
                format!("cannot read {}: {e}", path.display()),
            )
        })
    })?;
    Ok(bytes(py, out))
}

/// Panics on purpose: lets the tests check that a panic becomes an
/// `AguiInternalError`.
#[pyfunction]
fn _panic_for_tests(py: Python<'_>, message: String) -> PyResult<()> {
    run_detached(py, move || -> Result<(), Failure> { panic!("{message}") })
}

#[pymodule]
fn _agui(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("AguiError", py.get_type::<AguiError>())?;
    m.add("AguiDecodeError", py.get_type::<AguiDecodeError>())?;
    m.add("AguiVerifyError", py.get_type::<AguiVerifyError>())?;
    m.add("AguiReduceError", py.get_type::<AguiReduceError>())?;
    m.add("AguiCompactError", py.get_type::<AguiCompactError>())?;
    m.add("AguiLineageError", py.get_type::<AguiLineageError>())?;
    m.add("AguiArtifactError", py.get_type::<AguiArtifactError>())?;
    m.add("AguiStoreError", py.get_type::<AguiStoreError>())?;
    m.add("AguiInternalError", py.get_type::<AguiInternalError>())?;
    m.add_function(wrap_pyfunction!(encode, m)?)?;
    m.add_function(wrap_pyfunction!(verify, m)?)?;
    m.add_function(wrap_pyfunction!(verify_all, m)?)?;
    m.add_function(wrap_pyfunction!(expand_chunks, m)?)?;
    m.add_function(wrap_pyfunction!(reduce, m)?)?;
    m.add_function(wrap_pyfunction!(compact, m)?)?;
    m.add_function(wrap_pyfunction!(run_tree, m)?)?;
    m.add_function(wrap_pyfunction!(history_at, m)?)?;
    m.add_function(wrap_pyfunction!(branch_events, m)?)?;
    m.add_function(wrap_pyfunction!(export_artifact, m)?)?;
    m.add_function(wrap_pyfunction!(validate_artifact, m)?)?;
    m.add_function(wrap_pyfunction!(read_file, m)?)?;
    m.add_function(wrap_pyfunction!(_panic_for_tests, m)?)?;
    store::register(m)?;
    stream::register(m)?;
    Ok(())
}
