//! Incremental pieces for servers: a push decoder for an upstream byte
//! stream and the sequence verifier, one event at a time.

use std::sync::Mutex;

use agui_codec::{DecodeOptions, Decoder, Format, PushDecoder};
use agui_protocol::Event;
use agui_protocol::verify::Verifier;
use pyo3::prelude::*;

use crate::core::{Attr, Failure, Kind};
use crate::run_detached;

/// Decodes a byte stream pushed in pieces (`sse` by default, as an AG-UI
/// HTTP response): `push(bytes)` returns the events completed so far as
/// their JSON text; `finish()` the last ones.
#[pyclass(module = "agui._agui")]
pub struct StreamDecoder {
    decoder: Decoder,
}

impl StreamDecoder {
    fn drain(&mut self) -> Result<Vec<String>, Failure> {
        let mut out = Vec::new();
        while let Some(item) = self.decoder.pull() {
            match item {
                Ok(event) => out.push(event.json().to_owned()),
                Err(err) => {
                    let index = err.position().map_or(0, |p| p.index);
                    return Err(Failure::new(
                        Kind::Decode,
                        format!("event #{index}: cannot decode: {err}"),
                    )
                    .with("index", Attr::Int(index))
                    .with("reason", Attr::Str(err.to_string())));
                }
            }
        }
        Ok(out)
    }
}

#[pymethods]
impl StreamDecoder {
    #[new]
    #[pyo3(signature = (format="sse", max_event_size=agui_codec::DEFAULT_MAX_EVENT_SIZE))]
    fn new(format: &str, max_event_size: usize) -> PyResult<StreamDecoder> {
        let format: Format = format
            .parse()
            .map_err(pyo3::exceptions::PyValueError::new_err)?;
        let options = DecodeOptions {
            format: Some(format),
            max_event_size,
            ..DecodeOptions::default()
        };
        Ok(StreamDecoder {
            decoder: Decoder::new(options),
        })
    }

    /// Without the GIL, and a Rust panic comes back as `AguiInternalError`,
    /// as in every other function.
    fn push(&mut self, py: Python<'_>, data: &[u8]) -> PyResult<Vec<String>> {
        run_detached(py, || {
            self.decoder.push(data);
            self.drain()
        })
    }

    fn finish(&mut self, py: Python<'_>) -> PyResult<Vec<String>> {
        run_detached(py, || {
            self.decoder.finish();
            self.drain()
        })
    }
}

/// The AG-UI sequence verifier of the official client (the one `agui verify`
/// and the gateway use), fed one event at a time.
#[pyclass(module = "agui._agui", name = "Verifier")]
pub struct PyVerifier {
    inner: Mutex<(Verifier, usize)>,
}

#[pymethods]
impl PyVerifier {
    #[new]
    fn new() -> PyVerifier {
        PyVerifier {
            inner: Mutex::new((Verifier::new(), 0)),
        }
    }

    /// Checks the next event (its JSON text); raises `AguiVerifyError`
    /// (or `AguiDecodeError` for text that is not an event). Returns the
    /// event's type.
    fn push(&self, py: Python<'_>, json: &str) -> PyResult<String> {
        run_detached(py, || {
            // A panic while the lock was held leaves it poisoned: later
            // pushes then fail instead of checking against a broken state.
            let mut guard = self
                .inner
                .lock()
                .map_err(|_| Failure::new(Kind::Internal, "verifier poisoned"))?;
            let (verifier, count) = &mut *guard;
            let index = *count;
            let event = Event::from_json(json).map_err(|e| {
                Failure::new(
                    Kind::Decode,
                    format!("event #{index}: not an AG-UI event: {e}"),
                )
                .with("index", Attr::Int(index as u64))
                .with("reason", Attr::Str(e.to_string()))
            })?;
            *count += 1;
            verifier.push(&event).map_err(|e| {
                Failure::new(
                    Kind::Verify,
                    format!("event #{index} ({}): {e}", event.type_name()),
                )
                .with("index", Attr::Int(index as u64))
                .with("event_type", Attr::Str(event.type_name().to_owned()))
                .with("reason", Attr::Str(e.to_string()))
            })?;
            Ok(event.type_name().to_owned())
        })
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<StreamDecoder>()?;
    m.add_class::<PyVerifier>()?;
    Ok(())
}
