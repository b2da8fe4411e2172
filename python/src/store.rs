//! `NativeStore`: one `Store` opened by URL, as the CLI opens it, with
//! each operation written once as a future and offered twice: blocking
//! (GIL released while it waits) for `agui.Store`, and as an asyncio
//! awaitable for `agui.AsyncStore`.

use std::future::Future;
use std::sync::Arc;

use agui_store::{AppendRequest, Durability, RunFilter, Store, StoreError, ThreadFilter};
use futures::StreamExt;
use pyo3::exceptions::PyStopAsyncIteration;
use pyo3::prelude::*;
use tokio::sync::Mutex;

use crate::core::{self, Attr, Failure, Kind};
use crate::run_detached;

/// A stored event as handed to Python: `(seq, received_at_micros, json)`.
type Stored = (u64, i64, String);

fn store_failure(err: StoreError) -> Failure {
    Failure::new(Kind::Store, err.to_string()).with("kind", Attr::Str(err.kind().as_str().into()))
}

/// Opens a store by URL: the same schemes, and the same backends, as
/// `agui store --store URL` and `agui serve --store URL`.
async fn open(url: &str) -> Result<Store, Failure> {
    let scheme = url.split_once("://").map(|(s, _)| s).unwrap_or_default();
    let opened: Result<Store, StoreError> = match scheme {
        "memory" => agui_store::MemoryStore::open(url).map(Store::new),
        "sqlite" => agui_store_sqlite::open(url).await.map(Store::new),
        "file" => agui_store_file::open(url).await.map(Store::new),
        "postgres" | "postgresql" => agui_store_postgres::open(url).await.map(Store::new),
        _ => {
            return Err(Failure::new(
                Kind::Store,
                "unsupported store URL (expected sqlite:///PATH, file:///DIR, postgres://... or memory://)",
            )
            .with("kind", Attr::Str("invalid".into())));
        }
    };
    opened.map_err(store_failure)
}

fn runtime() -> &'static tokio::runtime::Runtime {
    pyo3_async_runtimes::tokio::get_runtime()
}

/// Runs a store future to completion without the GIL.
fn block<T: Send>(
    py: Python<'_>,
    fut: impl Future<Output = Result<T, Failure>> + Send,
) -> PyResult<T> {
    run_detached(py, || runtime().block_on(fut))
}

/// Wraps a store future as an asyncio awaitable.
fn awaitable<'py, T>(
    py: Python<'py>,
    fut: impl Future<Output = Result<T, Failure>> + Send + 'static,
) -> PyResult<Bound<'py, PyAny>>
where
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    pyo3_async_runtimes::tokio::future_into_py(py, async move {
        let guarded = std::panic::AssertUnwindSafe(fut);
        match futures::FutureExt::catch_unwind(guarded).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(failure)) => Err(Python::attach(|py| failure.into_py_err(py))),
            Err(panic) => Err(Python::attach(|py| Failure::panic(panic).into_py_err(py))),
        }
    })
}

fn stored(events: Vec<agui_store::StoredEvent>) -> Vec<Stored> {
    events
        .into_iter()
        .map(|e| (e.seq, e.received_at.as_micros(), e.event.json().to_owned()))
        .collect()
}

fn json_of(value: &impl serde::Serialize) -> Result<String, Failure> {
    serde_json::to_string(value).map_err(|e| Failure::new(Kind::Internal, e.to_string()))
}

/// The operations, each as a future over the shared store.
mod ops {
    use super::*;

    pub async fn append(
        store: Store,
        tenant: String,
        thread: String,
        data: Vec<u8>,
        expected_seq: Option<u64>,
        agent: Option<String>,
        durable: bool,
    ) -> Result<(u64, u64), Failure> {
        let events = core::decode(&data, None)?;
        let mut req = AppendRequest::new(events);
        req.expected_seq = expected_seq;
        req.agent = agent;
        if durable {
            req.durability = Durability::Append;
        }
        let done = store
            .append(&tenant, &thread, req)
            .await
            .map_err(store_failure)?;
        Ok((done.first_seq, done.last_seq))
    }

    pub async fn read(
        store: Store,
        tenant: String,
        thread: String,
        after: u64,
        limit: usize,
    ) -> Result<(Vec<Stored>, Option<u64>), Failure> {
        let page = store
            .read(&tenant, &thread, after.saturating_add(1), limit)
            .await
            .map_err(store_failure)?;
        Ok((stored(page.events), page.next_seq))
    }

    pub async fn read_all(
        store: Store,
        tenant: String,
        thread: String,
        after: u64,
    ) -> Result<Vec<Stored>, Failure> {
        let mut out = Vec::new();
        let mut events = store.read_stream(&tenant, &thread, after.saturating_add(1));
        while let Some(item) = events.next().await {
            let e = item.map_err(store_failure)?;
            out.push((e.seq, e.received_at.as_micros(), e.event.json().to_owned()));
        }
        Ok(out)
    }

    pub async fn read_run(
        store: Store,
        tenant: String,
        thread: String,
        run_id: String,
    ) -> Result<Vec<Stored>, Failure> {
        let events = store
            .read_run(&tenant, &thread, &run_id)
            .await
            .map_err(store_failure)?;
        Ok(stored(events))
    }

    pub async fn read_branch(
        store: Store,
        tenant: String,
        thread: String,
        run_id: String,
    ) -> Result<Vec<Stored>, Failure> {
        let events = store
            .read_branch(&tenant, &thread, &run_id)
            .await
            .map_err(store_failure)?;
        Ok(stored(events))
    }

    /// The conversation at the end of `run` (default: the thread's last run),
    /// from the run's checkpoints: `(run_id, last_seq, json)`; `None` when
    /// the thread has no run yet.
    pub async fn messages_at(
        store: Store,
        tenant: String,
        thread: String,
        run: Option<String>,
    ) -> Result<Option<(String, u64, String)>, Failure> {
        let run_id = match run {
            Some(run) => run,
            None => {
                let info = store
                    .thread(&tenant, &thread)
                    .await
                    .map_err(store_failure)?;
                if info.run_count == 0 {
                    return Ok(None);
                }
                let mut last: Option<agui_store::RunRecord> = None;
                let mut cursor = None;
                loop {
                    let filter = RunFilter {
                        thread_id: Some(thread.clone()),
                        limit: 1000,
                        cursor,
                        ..RunFilter::default()
                    };
                    let page = store
                        .list_runs(&tenant, &filter)
                        .await
                        .map_err(store_failure)?;
                    for run in page.runs {
                        if last.as_ref().is_none_or(|l| run.first_seq > l.first_seq) {
                            last = Some(run);
                        }
                    }
                    match page.next_cursor {
                        Some(c) => cursor = Some(c),
                        None => break,
                    }
                }
                match last {
                    Some(run) => run.run_id,
                    None => return Ok(None),
                }
            }
        };
        let restored = store
            .restore(&tenant, &thread, &run_id)
            .await
            .map_err(store_failure)?;
        Ok(Some((
            restored.run_id,
            restored.last_seq,
            std::sync::Arc::unwrap_or_clone(restored.json),
        )))
    }

    pub async fn thread(store: Store, tenant: String, thread: String) -> Result<String, Failure> {
        let info = store
            .thread(&tenant, &thread)
            .await
            .map_err(store_failure)?;
        json_of(&info)
    }

    pub async fn threads(
        store: Store,
        tenant: String,
        agent: Option<String>,
        limit: usize,
        cursor: Option<String>,
    ) -> Result<(Vec<String>, Option<String>), Failure> {
        let filter = ThreadFilter {
            agent,
            limit,
            cursor,
        };
        let page = store
            .list_threads(&tenant, &filter)
            .await
            .map_err(store_failure)?;
        let threads = page.threads.iter().map(json_of).collect::<Result<_, _>>()?;
        Ok((threads, page.next_cursor))
    }

    pub async fn runs(
        store: Store,
        tenant: String,
        thread: Option<String>,
        limit: usize,
        cursor: Option<String>,
    ) -> Result<(Vec<String>, Option<String>), Failure> {
        let filter = RunFilter {
            thread_id: thread,
            limit,
            cursor,
            ..RunFilter::default()
        };
        let page = store
            .list_runs(&tenant, &filter)
            .await
            .map_err(store_failure)?;
        let runs = page.runs.iter().map(json_of).collect::<Result<_, _>>()?;
        Ok((runs, page.next_cursor))
    }

    pub async fn delete(store: Store, tenant: String, thread: String) -> Result<(), Failure> {
        store
            .delete_thread(&tenant, &thread)
            .await
            .map_err(store_failure)
    }

    pub async fn close(store: Store) -> Result<(), Failure> {
        store.close().await.map_err(store_failure)
    }

    pub async fn ready(store: Store) -> Result<(), Failure> {
        store.ready().await.map_err(store_failure)
    }

    /// How many runs were marked (the store returns them; Python callers
    /// have no close of their own to give them to, so the count stays).
    pub async fn mark_interrupted(store: Store) -> Result<u64, Failure> {
        let marked = store.mark_interrupted().await.map_err(store_failure)?;
        Ok(marked.len() as u64)
    }
}

/// A store opened by URL. Each method exists twice: `name` blocks (without
/// the GIL), `name_async` returns an asyncio awaitable.
#[pyclass(module = "agui._agui", frozen)]
struct NativeStore {
    store: Store,
}

/// Writes the `#[pymethods]` block: the sync and async forms of each listed
/// operation, plus the methods written out (`$($extra)*`). (PyO3 does not
/// expand macros inside a `#[pymethods]` block, so the whole block is made
/// here.)
macro_rules! store_methods {
    ($( $sync:ident, $async_:ident, ($($arg:ident : $ty:ty),*) -> $out:ty, $op:path; )* { $($extra:tt)* }) => {
        #[pymethods]
        impl NativeStore {
            $(
                fn $sync(&self, py: Python<'_>, $($arg: $ty),*) -> PyResult<$out> {
                    block(py, $op(self.store.clone(), $($arg),*))
                }
                fn $async_<'py>(&self, py: Python<'py>, $($arg: $ty),*) -> PyResult<Bound<'py, PyAny>> {
                    awaitable(py, $op(self.store.clone(), $($arg),*))
                }
            )*
            $($extra)*
        }
    };
}

store_methods! {
    read, read_async, (tenant: String, thread: String, after: u64, limit: usize) -> (Vec<Stored>, Option<u64>), ops::read;
    read_all, read_all_async, (tenant: String, thread: String, after: u64) -> Vec<Stored>, ops::read_all;
    read_run, read_run_async, (tenant: String, thread: String, run_id: String) -> Vec<Stored>, ops::read_run;
    read_branch, read_branch_async, (tenant: String, thread: String, run_id: String) -> Vec<Stored>, ops::read_branch;
    messages_at, messages_at_async, (tenant: String, thread: String, run: Option<String>) -> Option<(String, u64, String)>, ops::messages_at;
    thread, thread_async, (tenant: String, thread: String) -> String, ops::thread;
    threads, threads_async, (tenant: String, agent: Option<String>, limit: usize, cursor: Option<String>) -> (Vec<String>, Option<String>), ops::threads;
    runs, runs_async, (tenant: String, thread: Option<String>, limit: usize, cursor: Option<String>) -> (Vec<String>, Option<String>), ops::runs;
    delete, delete_async, (tenant: String, thread: String) -> (), ops::delete;
    close, close_async, () -> (), ops::close;
    mark_interrupted, mark_interrupted_async, () -> u64, ops::mark_interrupted;
    ready, ready_async, () -> (), ops::ready;
    {
    #[staticmethod]
    fn open(py: Python<'_>, url: String) -> PyResult<NativeStore> {
        let store = block(py, async move { open(&url).await })?;
        Ok(NativeStore { store })
    }

    #[staticmethod]
    fn open_async(py: Python<'_>, url: String) -> PyResult<Bound<'_, PyAny>> {
        awaitable(py, async move {
            open(&url).await.map(|store| NativeStore { store })
        })
    }

    #[pyo3(signature = (tenant, thread, data, expected_seq=None, agent=None, durable=false))]
    #[allow(clippy::too_many_arguments)]
    fn append(
        &self,
        py: Python<'_>,
        tenant: String,
        thread: String,
        data: Vec<u8>,
        expected_seq: Option<u64>,
        agent: Option<String>,
        durable: bool,
    ) -> PyResult<(u64, u64)> {
        let op = ops::append(self.store.clone(), tenant, thread, data, expected_seq, agent, durable);
        block(py, op)
    }

    #[pyo3(signature = (tenant, thread, data, expected_seq=None, agent=None, durable=false))]
    #[allow(clippy::too_many_arguments)]
    fn append_async<'py>(
        &self,
        py: Python<'py>,
        tenant: String,
        thread: String,
        data: Vec<u8>,
        expected_seq: Option<u64>,
        agent: Option<String>,
        durable: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let op = ops::append(self.store.clone(), tenant, thread, data, expected_seq, agent, durable);
        awaitable(py, op)
    }


    /// Subscribes to a thread after sequence `after`: an async iterator of
    /// stored events, committed ones first, then live ones.
    fn subscribe_async<'py>(
        &self,
        py: Python<'py>,
        tenant: String,
        thread: String,
        after: u64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let store = self.store.clone();
        awaitable(py, async move {
            let stream = store
                .subscribe(&tenant, &thread, after.saturating_add(1))
                .await
                .map_err(store_failure)?;
            Ok(Subscription {
                stream: Arc::new(Mutex::new(Some(stream))),
            })
        })
    }
    }
}

/// A live subscription: `async for (seq, received_at, json) in sub`.
#[pyclass(module = "agui._agui", frozen)]
struct Subscription {
    stream: Arc<Mutex<Option<agui_store::EventStream>>>,
}

#[pymethods]
impl Subscription {
    fn __aiter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __anext__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let stream = self.stream.clone();
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            let mut guard = stream.lock().await;
            let next = match guard.as_mut() {
                Some(s) => s.next().await,
                None => None,
            };
            match next {
                Some(Ok(e)) => Ok((e.seq, e.received_at.as_micros(), e.event.json().to_owned())),
                Some(Err(err)) => {
                    *guard = None;
                    Err(Python::attach(|py| store_failure(err).into_py_err(py)))
                }
                None => {
                    *guard = None;
                    Err(PyStopAsyncIteration::new_err(()))
                }
            }
        })
    }

    /// Ends the subscription.
    fn close<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let stream = self.stream.clone();
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            stream.lock().await.take();
            Ok(())
        })
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativeStore>()?;
    m.add_class::<Subscription>()?;
    Ok(())
}
