//! The gateway's shared state: store, agents, auth, in-flight runs, metrics,
//! shutdown, and start-up recovery.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use agui_protocol::Event;
use agui_store::{AppendRequest, ErrorKind, RunFilter, RunRecord, RunStatus, Store, StoreError};
use axum::http::{HeaderMap, StatusCode, header};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{AgentConfig, Auth, GatewayConfig};
use crate::error::{ApiError, ServerError};
use crate::metrics::Metrics;
use crate::tracker::OpenItems;

/// The tenant of every thread when auth is off.
pub const DEFAULT_TENANT: &str = "default";

/// The run in flight on a thread in this process, how to wait for its end,
/// and how to stop it.
struct InFlight {
    run: String,
    ended: Arc<tokio::sync::Notify>,
    stop: CancellationToken,
}

impl InFlight {
    fn new(run: &str, stop: &CancellationToken) -> InFlight {
        InFlight {
            run: run.to_owned(),
            ended: Arc::new(tokio::sync::Notify::new()),
            stop: stop.clone(),
        }
    }
}

/// How long a new run waits for a hold on its thread (a run set aside
/// joining it, a delete) to end before it gets 409.
const HOLD_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The pause before [`Gateway::close_run`] reads a run again whose thread
/// moved on while it was being closed.
const CLOSE_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(10);

/// How the gateway ends a run it closes itself ([`Gateway::close_run`]):
/// the terminal event appended after the closers of the run's open items,
/// and the status the run must have for it (a run in any other status
/// ended already, or is another's to close).
pub(crate) struct RunEnd {
    /// The run's terminal event.
    pub(crate) event: Event,
    /// `Running` for a run stopped or failed in flight, `Interrupted` for
    /// one whose gateway is gone (recovery marked it).
    pub(crate) status: RunStatus,
}

impl RunEnd {
    /// `RUN_ERROR` `interrupted`, for a run marked interrupted.
    pub(crate) fn interrupted() -> RunEnd {
        RunEnd {
            event: run_error(
                "interrupted",
                "the gateway stopped while this run was in flight",
            ),
            status: RunStatus::Interrupted,
        }
    }

    /// `RUN_ERROR` `interrupted`, for a run stored `running` that no process
    /// forwards (imported from a document exported while it was in flight):
    /// it ends `interrupted`, as recovery ends a run whose gateway is gone.
    pub(crate) fn orphaned() -> RunEnd {
        RunEnd {
            event: run_error(
                "interrupted",
                "the run was in flight when its thread was exported; no process forwards it here",
            ),
            status: RunStatus::Running,
        }
    }

    /// `RUN_ERROR` `store_error`, for a running run whose events the store
    /// failed to take (as its client saw it end).
    pub(crate) fn store_failed() -> RunEnd {
        RunEnd {
            event: run_error("store_error", "the gateway could not store the run"),
            status: RunStatus::Running,
        }
    }
}

/// What [`Gateway::close_run`] came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Closed {
    /// This call ended the run.
    Now,
    /// The run had ended already, is not in the status the close is for,
    /// or cannot be ended at its thread's head (another run follows it).
    Already,
    /// The thread or the run does not exist (deleted meanwhile).
    Gone,
}

/// What one attempt to reserve a thread came to.
enum Reserve {
    Done(RunSlot),
    /// Held by this run (an empty id for a hold); with how to wait for its
    /// end when the holder is this process.
    Held(
        String,
        Option<std::pin::Pin<Box<tokio::sync::futures::OwnedNotified>>>,
    ),
}

/// What [`Gateway::occupy_aside`] came to.
#[derive(Debug, PartialEq, Eq)]
enum AsideSlot {
    Reserved,
    /// The thread's holder in this process is not the one looked at.
    Moved,
    /// Another request of this run id holds the aside thread.
    Taken,
}

/// The gateway: everything a request handler needs.
pub struct Gateway {
    pub(crate) store: Store,
    pub(crate) config: GatewayConfig,
    pub(crate) agents: HashMap<String, AgentConfig>,
    pub(crate) http: reqwest::Client,
    /// Clients of agents with their own CA file.
    clients: HashMap<String, reqwest::Client>,
    pub(crate) metrics: Metrics,
    /// (tenant, thread) → run id of the run this process forwards now.
    active: Mutex<HashMap<(String, String), InFlight>>,
    pub(crate) runs: TaskTracker,
    /// Cancelled when in-flight runs must be closed (shutdown deadline).
    pub(crate) close_runs: CancellationToken,
    /// Cancelled when the gateway starts shutting down (ends live streams).
    pub(crate) shutting_down: CancellationToken,
    /// Time travel's recent positions (see `travel`).
    pub(crate) positions: crate::travel::Positions,
    /// Serialize the channel updates of a thread (by a hash of tenant and
    /// thread): see [`Gateway::channel_lock`].
    channel_locks: Box<[tokio::sync::Mutex<()>]>,
    channel_hash: std::collections::hash_map::RandomState,
}

impl Gateway {
    /// A gateway over `store`. With no agent configured, the demo agent serves
    /// under the name `demo`.
    pub fn new(store: Store, mut config: GatewayConfig) -> Result<Gateway, ServerError> {
        if config.agents.is_empty() {
            config.agents.push(crate::config::demo_agent("demo"));
        }
        let mut agents = HashMap::new();
        for a in &config.agents {
            if agents.insert(a.name.clone(), a.clone()).is_some() {
                return Err(ServerError::Config(format!(
                    "agent `{}` is configured twice",
                    a.name
                )));
            }
        }
        let http = upstream_client(&config, None)?;
        let mut clients = HashMap::new();
        for a in &config.agents {
            if let Some(ca) = &a.ca_file {
                clients.insert(
                    a.name.clone(),
                    upstream_client(&config, Some((&a.name, ca)))?,
                );
            }
        }
        Ok(Gateway {
            store,
            config,
            agents,
            http,
            clients,
            metrics: Metrics::default(),
            active: Mutex::new(HashMap::new()),
            runs: TaskTracker::new(),
            close_runs: CancellationToken::new(),
            shutting_down: CancellationToken::new(),
            positions: Default::default(),
            channel_locks: (0..64).map(|_| tokio::sync::Mutex::new(())).collect(),
            channel_hash: Default::default(),
        })
    }

    /// Holds the lock under which this process reads and rewrites a
    /// thread's channels (one of 64, by a hash of tenant and thread).
    pub(crate) async fn channel_lock(
        &self,
        tenant: &str,
        thread: &str,
    ) -> tokio::sync::MutexGuard<'_, ()> {
        use std::hash::BuildHasher;
        let h = self.channel_hash.hash_one((tenant, thread));
        let lock = &self.channel_locks[h as usize % self.channel_locks.len()];
        lock.lock().await
    }

    /// The HTTP client for an agent's upstream.
    pub(crate) fn client_for(&self, agent: &str) -> &reqwest::Client {
        self.clients.get(agent).unwrap_or(&self.http)
    }

    /// The configured agents.
    pub fn agents(&self) -> impl Iterator<Item = &AgentConfig> {
        self.config.agents.iter()
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The tenant of a request, from its bearer token.
    pub(crate) fn tenant(&self, headers: &HeaderMap) -> Result<String, ApiError> {
        match &self.config.auth {
            Auth::Open => Ok(DEFAULT_TENANT.to_owned()),
            Auth::Tokens(map) => {
                let unauthorized =
                    |m: &str| ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", m);
                let Some(value) = headers.get(header::AUTHORIZATION) else {
                    return Err(unauthorized(
                        "an Authorization: Bearer <token> header is required",
                    ));
                };
                let token = value
                    .to_str()
                    .ok()
                    .and_then(|v| {
                        v.strip_prefix("Bearer ")
                            .or_else(|| v.strip_prefix("bearer "))
                    })
                    .map(str::trim)
                    .ok_or_else(|| {
                        unauthorized("the Authorization header must be `Bearer <token>`")
                    })?;
                // Compare with every token in constant time per token.
                let mut found: Option<&String> = None;
                for (t, tenant) in map {
                    if constant_time_eq(t.as_bytes(), token.as_bytes()) {
                        found = Some(tenant);
                    }
                }
                found
                    .cloned()
                    .ok_or_else(|| unauthorized("the bearer token is not valid"))
            }
        }
    }

    /// Reserves a thread for a run in this process. When a run is in flight
    /// there (in this process, or claimed in the store by another): 409,
    /// unless the new run branches from another run (`parent` names a run
    /// other than the one in flight), in which case it runs aside (see
    /// [`crate::aside`]): the slot reserves the run's aside thread, and
    /// [`RunSlot::aside`] says so. While the thread is held (a run set aside
    /// joining it, a delete), waits for that to end, at most [`HOLD_WAIT`].
    pub(crate) async fn reserve(
        self: &Arc<Self>,
        tenant: &str,
        thread: &str,
        run: &str,
        parent: Option<&str>,
    ) -> Result<RunSlot, ApiError> {
        // A hold (a run set aside joining the thread, a delete) is short:
        // a run waits for it, up to a bound, rather than failing.
        let deadline = tokio::time::Instant::now() + HOLD_WAIT;
        loop {
            match self.try_reserve(tenant, thread, run).await? {
                Reserve::Done(slot) => return Ok(slot),
                Reserve::Held(current, ended) if current.is_empty() => {
                    let pause = tokio::time::sleep(std::time::Duration::from_millis(20));
                    let wait = async {
                        match ended {
                            Some(ended) => ended.await,
                            None => pause.await,
                        }
                    };
                    if tokio::time::timeout_at(deadline, wait).await.is_err() {
                        return Err(in_flight(&current));
                    }
                }
                Reserve::Held(current, ended) => {
                    // Held by a run of this process when there is an end
                    // to wait for; by another process's run otherwise.
                    let local = ended.is_some();
                    if let Some(slot) = self
                        .reserve_aside(tenant, thread, run, parent, &current, local)
                        .await?
                    {
                        return Ok(slot);
                    }
                    // The thread's holder changed meanwhile: look again.
                }
            }
        }
    }

    /// One attempt of [`Gateway::reserve`]: the slot, or who holds the
    /// thread (an empty id for a hold) and, when it is this process, how to
    /// wait for its end.
    async fn try_reserve(
        self: &Arc<Self>,
        tenant: &str,
        thread: &str,
        run: &str,
    ) -> Result<Reserve, ApiError> {
        let key = (tenant.to_owned(), thread.to_owned());
        let stop = CancellationToken::new();
        let held_by = self.occupy(&key, run, &stop);
        if let Some((current, ended)) = held_by {
            return Ok(Reserve::Held(current, Some(ended)));
        }
        let mut slot = RunSlot::new(self.clone(), key, run, stop, false);
        match self.store.claim_thread(tenant, thread, run).await {
            Ok(None) => slot.claimed = true,
            Ok(Some(holder)) => {
                drop(slot);
                return Ok(Reserve::Held(holder, None));
            }
            Err(e) => return Err(store_error(e)),
        }
        self.metrics
            .runs_in_flight
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        slot.counted = true;
        Ok(Reserve::Done(slot))
    }

    /// Marks `key` (tenant, thread) as held by `run` in this process, unless
    /// something holds it already: then that holder's run id (empty for a
    /// hold) and how to wait for its end, listening from now on.
    fn occupy(
        &self,
        key: &(String, String),
        run: &str,
        stop: &CancellationToken,
    ) -> Option<(
        String,
        std::pin::Pin<Box<tokio::sync::futures::OwnedNotified>>,
    )> {
        let mut active = self.active.lock().unwrap_or_else(|p| p.into_inner());
        match active.get(key) {
            Some(current) => {
                // Registered before the lock is released: no wake-up is lost.
                let mut ended = Box::pin(current.ended.clone().notified_owned());
                ended.as_mut().enable();
                Some((current.run.clone(), ended))
            }
            None => {
                active.insert(key.clone(), InFlight::new(run, stop));
                None
            }
        }
    }

    /// The thread is held by `current` (a run, or an empty id for an
    /// operation such as a delete; `local` when it is this process's): a
    /// branch from a run other than `current` reserves its aside thread;
    /// anything else is 409. `None` when the thread's holder in this
    /// process is no longer what it was (`current` ended, another run took
    /// the thread): the caller reserves again.
    async fn reserve_aside(
        self: &Arc<Self>,
        tenant: &str,
        thread: &str,
        run: &str,
        parent: Option<&str>,
        current: &str,
        local: bool,
    ) -> Result<Option<RunSlot>, ApiError> {
        if current.is_empty() || parent.is_none_or(|p| p == current) {
            return Err(in_flight(current));
        }
        // The run in flight holds its id, stored or not.
        if run == current {
            return Err(crate::run::run_exists(run));
        }
        let Some(aside) = agui_store::aside::aside_thread(thread, run) else {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "run_in_flight",
                format!(
                    "run {current:?} of this thread is still in flight, and this branch cannot run beside it: its threadId and runId together are too long to be set aside (the thread id's length in digits, a colon and both ids must fit in {} bytes); retry once that run has ended",
                    agui_store::MAX_ID_BYTES
                ),
            ));
        };
        let thread_key = (tenant.to_owned(), thread.to_owned());
        let key = (agui_store::aside::aside_tenant(tenant), aside);
        let stop = CancellationToken::new();
        let expected = local.then_some(current);
        match self.occupy_aside(&thread_key, expected, &key, run, &stop) {
            AsideSlot::Reserved => {}
            AsideSlot::Moved => return Ok(None),
            AsideSlot::Taken => return Err(crate::run::run_exists(run)),
        }
        let mut slot = RunSlot::new(self.clone(), key, run, stop, true);
        let (tenant, thread) = (&slot.key.0, &slot.key.1);
        match self.store.claim_thread(tenant, thread, run).await {
            Ok(None) => slot.claimed = true,
            Ok(Some(_)) => return Err(crate::run::run_exists(run)),
            Err(e) => return Err(store_error(e)),
        }
        self.metrics
            .runs_in_flight
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        slot.counted = true;
        Ok(Some(slot))
    }

    /// Marks the aside `key` as held by `run`, under the same lock as a
    /// look at the thread's own slot (`thread_key`): only while this
    /// process's holder of the thread is still `expected` (`None`: no run
    /// of this process holds it). Checked apart, the thread's run could
    /// end and a run of the same id as this branch start between the two
    /// looks: each would then pass the other's id check and both would run.
    fn occupy_aside(
        &self,
        thread_key: &(String, String),
        expected: Option<&str>,
        key: &(String, String),
        run: &str,
        stop: &CancellationToken,
    ) -> AsideSlot {
        let mut active = self.active.lock().unwrap_or_else(|p| p.into_inner());
        if active.get(thread_key).map(|f| f.run.as_str()) != expected {
            return AsideSlot::Moved;
        }
        if active.contains_key(key) {
            return AsideSlot::Taken;
        }
        active.insert(key.clone(), InFlight::new(run, stop));
        AsideSlot::Reserved
    }

    /// Claims the slot's thread in the store too, so that every process
    /// sharing the store (replicas on PostgreSQL) sees it: 409 when another
    /// one holds it. The slot (and so the local reservation) is released on
    /// any error.
    async fn claim(self: &Arc<Self>, mut slot: RunSlot) -> Result<RunSlot, ApiError> {
        let (tenant, thread) = (&slot.key.0, &slot.key.1);
        match self.store.claim_thread(tenant, thread, &slot.run).await {
            Ok(None) => {
                slot.claimed = true;
                Ok(slot)
            }
            Ok(Some(holder)) => Err(in_flight(&holder)),
            Err(e) => Err(store_error(e)),
        }
    }

    /// Holds a thread for an operation that must not overlap a run of this
    /// process (deleting it): 409 `run_in_flight` when a run holds it, even
    /// one that has stored nothing yet; while held, new runs get 409.
    pub(crate) async fn hold_thread(
        self: &Arc<Self>,
        tenant: &str,
        thread: &str,
    ) -> Result<RunSlot, ApiError> {
        let key = (tenant.to_owned(), thread.to_owned());
        if let Some((holder, _)) = self.occupy(&key, "", &CancellationToken::new()) {
            return Err(in_flight(&holder));
        }
        let slot = RunSlot::new(self.clone(), key, "", CancellationToken::new(), false);
        self.claim(slot).await
    }

    /// A run of `thread` set aside in flight in this process, stored or
    /// not yet: `run` itself when given, else any; its id.
    pub(crate) fn aside_here(
        &self,
        tenant: &str,
        thread: &str,
        run: Option<&str>,
    ) -> Option<String> {
        use agui_store::aside::{aside_tenant, aside_thread, parse_aside_thread};
        let a_tenant = aside_tenant(tenant);
        let active = self.active.lock().unwrap_or_else(|p| p.into_inner());
        match run {
            Some(run) => {
                let key = (a_tenant, aside_thread(thread, run)?);
                active.get(&key).map(|f| f.run.clone())
            }
            None => active
                .iter()
                .filter(|((t, a), _)| {
                    *t == a_tenant && parse_aside_thread(a).is_some_and(|(th, _)| th == thread)
                })
                .map(|(_, f)| f.run.clone())
                .next(),
        }
    }

    /// Resolves when the run (or hold) of the thread in this process ends;
    /// never when there is none (the thread is free here, or busy in
    /// another process). Listens from the call on: an end after it is not
    /// missed.
    pub(crate) fn thread_ended(
        &self,
        tenant: &str,
        thread: &str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        let active = self.active.lock().unwrap_or_else(|p| p.into_inner());
        match active.get(&(tenant.to_owned(), thread.to_owned())) {
            None => Box::pin(std::future::pending()),
            Some(f) => {
                let mut notified = Box::pin(f.ended.clone().notified_owned());
                notified.as_mut().enable();
                notified
            }
        }
    }

    /// Runs `f` on the slot `run` holds in this process, if it holds one.
    fn with_slot<T>(
        &self,
        tenant: &str,
        thread: &str,
        run: &str,
        f: impl FnOnce(&InFlight) -> T,
    ) -> Option<T> {
        if run.is_empty() {
            return None;
        }
        let active = self.active.lock().unwrap_or_else(|p| p.into_inner());
        active
            .get(&(tenant.to_owned(), thread.to_owned()))
            .filter(|s| s.run == run)
            .map(f)
    }

    /// Asks the run `run` of a thread to stop when this process forwards it;
    /// returns how to wait for its end, or `None` when it is not ours.
    pub(crate) fn stop_local(
        &self,
        tenant: &str,
        thread: &str,
        run: &str,
    ) -> Option<Arc<tokio::sync::Notify>> {
        self.with_slot(tenant, thread, run, |s| {
            s.stop.cancel();
            s.ended.clone()
        })
    }

    /// True while `run` holds the thread's slot in this process (from its
    /// request on, until it ended and stored what it stores).
    pub(crate) fn holds_run(&self, tenant: &str, thread: &str, run: &str) -> bool {
        self.with_slot(tenant, thread, run, |_| ()).is_some()
    }

    /// Closes runs a previous process left in flight: those
    /// [`Store::mark_interrupted`] marks `interrupted` now (left `running`;
    /// on a store shared by replicas, only those whose gateway is gone), and
    /// those an earlier start marked but never closed (see
    /// [`Gateway::unclosed_interrupted`]). Each gets its open messages and
    /// tool calls ended and a `RUN_ERROR` with code `interrupted`; its
    /// status is `interrupted`. Returns how many this call closed: a run
    /// whose close the store fails is closed in the background, once it can
    /// be, or else by the next start.
    pub async fn recover(self: &Arc<Self>) -> Result<u64, ServerError> {
        let err = |during: &'static str| {
            move |e: StoreError| ServerError::Store {
                during,
                message: e.to_string(),
            }
        };
        // Before marking: the runs marked now are closed below, not looked
        // up again.
        let mut runs = self
            .unclosed_interrupted()
            .await
            .map_err(err("listing interrupted runs"))?;
        let marked = self
            .store
            .mark_interrupted()
            .await
            .map_err(err("marking runs interrupted"))?;
        // A store shared by replicas marks only the runs whose owner is
        // gone: a run another live gateway is streaming stays `running`,
        // and is neither returned nor closed.
        runs.extend(marked);
        if runs.is_empty() {
            return Ok(0);
        }
        Ok(self.close_interrupted(runs).await)
    }

    /// The runs left `interrupted` without an end in their log: marked by
    /// an earlier start-up or sweep whose close the store failed, whose
    /// gateway stopped before a retry in the background got through. Only
    /// a run that is its thread's last can be one (a close is appended at
    /// the thread's head; a run another run follows was interrupted by
    /// that run's start, and [`Gateway::close_run`] leaves it), so each
    /// interrupted run costs a comparison of its last sequence number with
    /// its thread's head (one look-up a thread), and only the last event
    /// of a run at its thread's head is read, to tell a run closed (its
    /// `RUN_ERROR`) from one that is not: the events of interrupted runs
    /// of the past are never read.
    async fn unclosed_interrupted(&self) -> Result<Vec<(String, RunRecord)>, StoreError> {
        let mut found = Vec::new();
        for tenant in self.store.tenants().await? {
            // Each thread's last sequence number (`None`: deleted meanwhile).
            let mut heads: HashMap<String, Option<u64>> = HashMap::new();
            let mut cursor = None;
            loop {
                let page = self
                    .store
                    .list_runs(
                        &tenant,
                        &RunFilter {
                            status: Some(RunStatus::Interrupted),
                            limit: agui_store::MAX_PAGE,
                            cursor: cursor.take(),
                            ..RunFilter::default()
                        },
                    )
                    .await?;
                for run in page.runs {
                    let head = match heads.get(&run.thread_id) {
                        Some(head) => *head,
                        None => {
                            let head = match self.store.thread(&tenant, &run.thread_id).await {
                                Ok(info) => Some(info.last_seq),
                                Err(e) if e.kind() == ErrorKind::NotFound => None,
                                Err(e) => return Err(e),
                            };
                            heads.insert(run.thread_id.clone(), head);
                            head
                        }
                    };
                    let Some(head) = head else { continue };
                    if self.left_without_end(&tenant, &run, head).await? {
                        found.push((tenant.clone(), run));
                    }
                }
                match page.next_cursor {
                    Some(c) => cursor = Some(c),
                    None => break,
                }
            }
        }
        Ok(found)
    }

    /// True when `run` is its thread's last (`head` is the thread's last
    /// sequence number) and its log does not end with `RUN_FINISHED` or
    /// `RUN_ERROR`: one event read, and none when another run follows it.
    pub(crate) async fn left_without_end(
        &self,
        tenant: &str,
        run: &RunRecord,
        head: u64,
    ) -> Result<bool, StoreError> {
        if run.last_seq != head {
            return Ok(false);
        }
        match self
            .store
            .read(tenant, &run.thread_id, run.last_seq, 1)
            .await
        {
            Ok(page) => Ok(page
                .events
                .first()
                .is_some_and(|e| !e.event.event_type().is_run_terminal())),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// [`Gateway::recover`] at start-up, then a sweep in the background for
    /// as long as the gateway runs: on a store shared by replicas
    /// (PostgreSQL), the runs of a replica that is gone are closed by the
    /// live ones. That covers a gateway killed a moment ago whose session
    /// lock outlives it for a while (its database connection ends after
    /// it), a run its last transaction committed after this gateway looked,
    /// and a replica that dies while the others run and never comes back.
    /// Runs of live replicas (and this gateway's own) are never closed:
    /// their owners' locks are held. The sweep looks every 250 ms for the
    /// first 30 s, then every second. A store that no other process writes
    /// while this one has it open ([`Store::shared`] false: SQLite, file,
    /// memory) gets no sweep: start-up recovery took every run there is.
    pub async fn recover_at_start(self: &Arc<Self>) -> Result<u64, ServerError> {
        let closed = self.recover().await?;
        let joined = crate::aside::join_all(self).await?;
        if joined > 0 {
            tracing::info!(runs = joined, "runs set aside joined their threads");
        }
        if self.store.shared() {
            self.spawn_sweep();
        }
        Ok(closed)
    }

    /// Starts the background sweep of [`Gateway::recover_at_start`]: it
    /// ends when the gateway shuts down or is dropped.
    fn spawn_sweep(self: &Arc<Self>) {
        let gw = Arc::downgrade(self);
        tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            let mut failing = false;
            loop {
                let pause = if started.elapsed() < std::time::Duration::from_secs(30) {
                    std::time::Duration::from_millis(250)
                } else {
                    std::time::Duration::from_secs(1)
                };
                tokio::time::sleep(pause).await;
                let Some(gw) = gw.upgrade() else { return };
                if gw.shutting_down.is_cancelled() {
                    return;
                }
                match gw.sweep().await {
                    Ok(n) => {
                        if failing {
                            tracing::info!("recovering runs left in flight works again");
                            failing = false;
                        }
                        if n > 0 {
                            tracing::warn!(
                                runs = n,
                                "closed runs left in flight by a gateway that is gone as interrupted"
                            );
                        }
                    }
                    Err(e) => {
                        // Said once per outage; the sweep goes on.
                        if !failing {
                            tracing::warn!(error = %e, "cannot recover runs left in flight");
                            failing = true;
                        }
                    }
                }
            }
        });
    }

    /// One background pass: marks the runs of processes that are gone and
    /// closes exactly those (another replica sweeping at once gets others).
    async fn sweep(self: &Arc<Self>) -> Result<u64, ServerError> {
        let marked =
            self.store
                .mark_interrupted_elsewhere()
                .await
                .map_err(|e| ServerError::Store {
                    during: "marking runs interrupted",
                    message: e.to_string(),
                })?;
        if marked.is_empty() {
            return Ok(0);
        }
        let closed = self.close_interrupted(marked).await;
        // Some may have been set aside.
        crate::aside::join_all(self).await?;
        Ok(closed)
    }

    /// Ends each run, now `interrupted`, in its log: its open messages and
    /// tool calls closed, then a `RUN_ERROR` with code `interrupted` (a run
    /// still `running`, another live replica's, is left alone). Returns how
    /// many this call closed (see [`Gateway::close_run`]). A run the store
    /// fails to close does not hold up the others: it is closed later, in
    /// the background ([`Gateway::retry_later`]); the `interrupted` metric
    /// counts it then.
    async fn close_interrupted(self: &Arc<Self>, runs: Vec<(String, RunRecord)>) -> u64 {
        let mut closed = 0;
        for (tenant, run) in runs {
            let (thread, run_id) = (run.thread_id, run.run_id);
            match self.close_one_interrupted(&tenant, &thread, &run_id).await {
                Ok(now) => closed += u64::from(now),
                Err(e) => {
                    tracing::warn!(thread = %thread, run = %run_id, error = %e, "cannot close an interrupted run; trying again in the background");
                    let (t, th, r) = (tenant, thread.clone(), run_id.clone());
                    Gateway::retry_later(
                        Arc::downgrade(self),
                        "closing an interrupted run",
                        &thread,
                        &run_id,
                        move |g| {
                            let (t, th, r) = (t.clone(), th.clone(), r.clone());
                            async move { g.close_one_interrupted(&t, &th, &r).await.map(|_| ()) }
                        },
                    );
                }
            }
        }
        closed
    }

    /// Ends an interrupted run ([`Gateway::close_run`]) and counts it in
    /// the metrics when this call ended it; true then.
    pub(crate) async fn close_one_interrupted(
        &self,
        tenant: &str,
        thread: &str,
        run_id: &str,
    ) -> Result<bool, StoreError> {
        let end = RunEnd::interrupted();
        let now = self.close_run(tenant, thread, run_id, &end).await? == Closed::Now;
        if now {
            self.metrics
                .runs_interrupted
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(now)
    }

    /// Ends a run in its log: its open messages and tool calls closed,
    /// then `end`'s terminal event; only while the run has `end`'s status
    /// and its log has no terminal event yet. The close is appended only
    /// if the thread is as read (retried on a conflict, 20 times): another
    /// gateway closing the same run at once (replicas started together, a
    /// stop meeting the run's own end) makes it read again, find the run
    /// ended and leave it, so a run never gets two ends. A run another run
    /// follows in its thread's log is left as it is: an end appended at the
    /// head would end that later run. A store error is returned (nothing
    /// was written); so is the last conflict when the thread kept changing.
    pub(crate) async fn close_run(
        &self,
        tenant: &str,
        thread: &str,
        run_id: &str,
        end: &RunEnd,
    ) -> Result<Closed, StoreError> {
        const TRIES: usize = 21;
        let mut conflict = None;
        for _ in 0..TRIES {
            // The head first, then the run: a write in between shows in the
            // run's last sequence number, or makes the append conflict.
            let head = match self.store.thread(tenant, thread).await {
                Ok(info) => info.last_seq,
                Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Closed::Gone),
                Err(e) => return Err(e),
            };
            let record = match self.store.run(tenant, thread, run_id).await {
                Ok(record) => record,
                Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Closed::Gone),
                Err(e) => return Err(e),
            };
            if record.status != end.status {
                return Ok(Closed::Already);
            }
            if record.last_seq > head {
                // Written to since the head was read: read again.
                tokio::time::sleep(CLOSE_RETRY_PAUSE).await;
                continue;
            }
            if record.last_seq < head {
                tracing::warn!(thread = %thread, run = %run_id, "a run to close is followed by another run in its thread's log; it is left without its end");
                return Ok(Closed::Already);
            }
            let events = match self
                .store
                .read_range(tenant, thread, record.first_seq, head)
                .await
            {
                Ok(events) => events,
                Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Closed::Gone),
                Err(e) => return Err(e),
            };
            if events
                .last()
                .is_some_and(|e| e.event.event_type().is_run_terminal())
            {
                // Ended by another writer meanwhile.
                return Ok(Closed::Already);
            }
            let mut open = OpenItems::default();
            for e in &events {
                open.track(&e.event);
            }
            let mut batch = open.closers();
            batch.push(end.event.clone());
            let request = AppendRequest::new(batch)
                .agent_opt(record.agent)
                .expect_seq(head);
            match self.store.append(tenant, thread, request).await {
                Ok(_) => return Ok(Closed::Now),
                // The thread moved on: read it again.
                Err(e) if e.kind() == ErrorKind::Conflict => {
                    conflict = Some(e);
                    tokio::time::sleep(CLOSE_RETRY_PAUSE).await;
                }
                Err(e) => return Err(e),
            }
        }
        Err(conflict.unwrap_or_else(|| {
            StoreError::new(
                ErrorKind::Conflict,
                "the thread kept changing while a run was being closed",
            )
        }))
    }

    /// Ends, once the store takes writes again, a run of this gateway
    /// whose events the store failed to take (the client got `RUN_ERROR`
    /// `store_error`): left as it is, the run would stay `running` and
    /// hold its thread until a restart. Tried in the background
    /// ([`Gateway::retry_later`]) until it is ended or the gateway shuts
    /// down; its open items are closed and a `RUN_ERROR` `store_error`
    /// ends it, as its client saw.
    pub(crate) fn end_failed_run_later(
        self: &Arc<Self>,
        tenant: String,
        thread: String,
        run_id: String,
    ) {
        let (th, r) = (thread.clone(), run_id.clone());
        Gateway::retry_later(
            Arc::downgrade(self),
            "ending a run the store failed in its log",
            &thread,
            &run_id,
            move |g| {
                let (t, th, r) = (tenant.clone(), th.clone(), r.clone());
                async move {
                    g.close_run(&t, &th, &r, &RunEnd::store_failed())
                        .await
                        .map(drop)
                }
            },
        );
    }

    /// Releases the store's claim of `run` on a thread, tried again in the
    /// background ([`Gateway::retry_later`]) after it failed: a claim left
    /// behind would hold the thread for as long as this gateway lives.
    pub(crate) fn release_claim_later(
        gw: std::sync::Weak<Self>,
        tenant: String,
        thread: String,
        run: String,
    ) {
        let (th, r) = (thread.clone(), run.clone());
        Gateway::retry_later(
            gw,
            "releasing the thread's claim",
            &thread,
            &run,
            move |g| {
                let (t, th, r) = (tenant.clone(), th.clone(), r.clone());
                async move { g.store.release_thread(&t, &th, &r).await }
            },
        );
    }

    /// Does `op` again in the background after a first try failed (the
    /// caller logged that): 250 ms later, then at pauses doubling up to
    /// 5 s, until it succeeds (logged at info level, with `what` and the
    /// thread and run it was for), the gateway shuts down or is dropped.
    /// A try that fails again is logged at debug level only.
    pub(crate) fn retry_later<F, Fut>(
        gw: std::sync::Weak<Self>,
        what: &'static str,
        thread: &str,
        run: &str,
        op: F,
    ) where
        F: Fn(Arc<Gateway>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<(), StoreError>> + Send + 'static,
    {
        let (thread, run) = (thread.to_owned(), run.to_owned());
        tokio::spawn(async move {
            let mut pause = std::time::Duration::from_millis(250);
            loop {
                tokio::time::sleep(pause).await;
                let Some(g) = gw.upgrade() else { return };
                if g.shutting_down.is_cancelled() {
                    return;
                }
                match op(g).await {
                    Ok(()) => {
                        tracing::info!(thread = %thread, run = %run, "{what}: done, after a retry");
                        return;
                    }
                    Err(e) => {
                        tracing::debug!(thread = %thread, run = %run, error = %e, "{what}: failed again; trying again");
                    }
                }
                pause = (pause * 2).min(std::time::Duration::from_secs(5));
            }
        });
    }

    /// Starts shutting down: live streams end; runs may go on until
    /// [`Gateway::close_runs`] or their end.
    pub fn begin_shutdown(&self) {
        self.shutting_down.cancel();
        self.runs.close();
    }

    /// Waits for in-flight runs to end, up to the grace period, then closes
    /// the rest with `RUN_ERROR` (code `shutdown`) and waits for that.
    pub async fn drain_runs(&self) {
        self.runs.close();
        if tokio::time::timeout(self.config.shutdown_grace, self.runs.wait())
            .await
            .is_err()
        {
            tracing::warn!("closing the runs still in flight after the shutdown grace period");
            self.close_runs.cancel();
            self.runs.wait().await;
        }
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }
}

/// The upstream HTTP client: HTTP/1.1 and HTTPS (rustls) trusting the
/// system's roots and the bundled Mozilla roots, plus an agent's own CA file.
fn upstream_client(
    config: &GatewayConfig,
    ca: Option<(&str, &std::path::Path)>,
) -> Result<reqwest::Client, ServerError> {
    let mut b = reqwest::Client::builder()
        .use_rustls_tls()
        .connect_timeout(config.limits.upstream_connect_timeout)
        .tcp_nodelay(true)
        .pool_max_idle_per_host(256);
    if let Some((agent, path)) = ca {
        let pem = std::fs::read(path).map_err(|e| {
            ServerError::Config(format!(
                "agent `{agent}`: cannot read its CA file {}: {e}",
                path.display()
            ))
        })?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|_| {
            ServerError::Config(format!(
                "agent `{agent}`: the CA file {} holds no valid PEM certificate",
                path.display()
            ))
        })?;
        if certs.is_empty() {
            return Err(ServerError::Config(format!(
                "agent `{agent}`: the CA file {} holds no PEM certificate",
                path.display()
            )));
        }
        for c in certs {
            b = b.add_root_certificate(c);
        }
    }
    b.build()
        .map_err(|e| ServerError::Config(format!("HTTP client: {e}")))
}

fn in_flight(run: &str) -> ApiError {
    if run.is_empty() {
        return ApiError::new(
            StatusCode::CONFLICT,
            "run_in_flight",
            "the thread is held by another operation (a delete, or a run set aside joining its log); retry",
        );
    }
    ApiError::new(
        StatusCode::CONFLICT,
        "run_in_flight",
        format!(
            "run {run:?} of this thread is still in flight; wait for it to end, attach to it with GET /threads/{{id}}/events, or branch from another run with parentRunId"
        ),
    )
}

/// The 409 for a run in flight on the thread.
pub(crate) fn in_flight_error(run: &str) -> ApiError {
    in_flight(run)
}

/// A thread reserved for one run; released on drop.
pub struct RunSlot {
    gw: Arc<Gateway>,
    key: (String, String),
    /// The run (empty for a hold).
    run: String,
    /// Counted in the `runs_in_flight` metric (a run, not a hold).
    counted: bool,
    /// Claimed in the store.
    claimed: bool,
    /// Released by [`RunSlot::release`].
    released: bool,
    /// The slot reserves a run's aside thread (see [`crate::aside`]): its
    /// key is the aside tenant and thread.
    pub(crate) aside: bool,
    /// Cancelled when the run must stop (`POST .../stop`).
    pub(crate) stop: CancellationToken,
}

impl RunSlot {
    /// A slot for `run` (empty for a hold) on `key`, neither claimed in the
    /// store nor counted yet.
    fn new(
        gw: Arc<Gateway>,
        key: (String, String),
        run: &str,
        stop: CancellationToken,
        aside: bool,
    ) -> RunSlot {
        RunSlot {
            gw,
            key,
            run: run.to_owned(),
            counted: false,
            claimed: false,
            released: false,
            aside,
            stop,
        }
    }

    /// Where the run's events go: the reserved tenant and thread (for a
    /// run set aside, its aside tenant and thread).
    pub(crate) fn log(&self) -> (String, String) {
        self.key.clone()
    }

    /// Releases the store's claim (awaited), then the local reservation.
    /// Call it before the run's client sees the end of its stream, so that
    /// the client's next run finds the thread free.
    pub(crate) async fn release(mut self) {
        if self.claimed {
            let (tenant, thread) = (&self.key.0, &self.key.1);
            if let Err(e) = self
                .gw
                .store
                .release_thread(tenant, thread, &self.run)
                .await
            {
                tracing::error!(thread = %thread, run = %self.run, error = %e, "cannot release the thread's claim in the store; trying again");
                Gateway::release_claim_later(
                    Arc::downgrade(&self.gw),
                    tenant.clone(),
                    thread.clone(),
                    self.run.clone(),
                );
            }
            self.claimed = false;
        }
        self.release_local();
        self.released = true;
    }

    fn release_local(&mut self) {
        let mut active = self.gw.active.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = active.remove(&self.key) {
            f.ended.notify_waiters();
        }
        drop(active);
        if self.counted {
            self.counted = false;
            self.gw
                .metrics
                .runs_in_flight
                .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

impl Drop for RunSlot {
    /// A slot not released explicitly (a cancelled request, a panic):
    /// releases the store's claim on a task of its own.
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if self.claimed {
            let store = self.gw.store.clone();
            let gw = Arc::downgrade(&self.gw);
            let (tenant, thread) = self.key.clone();
            let run = self.run.clone();
            let release = async move {
                if let Err(e) = store.release_thread(&tenant, &thread, &run).await {
                    tracing::error!(thread = %thread, run = %run, error = %e, "cannot release the thread's claim in the store; trying again");
                    Gateway::release_claim_later(gw, tenant, thread, run);
                }
            };
            match tokio::runtime::Handle::try_current() {
                Ok(h) => {
                    h.spawn(release);
                }
                Err(_) => tracing::warn!(
                    "no runtime to release a thread's claim; it lapses with the process"
                ),
            }
        }
        self.release_local();
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A `RUN_ERROR` event.
pub(crate) fn run_error(code: &str, message: &str) -> Event {
    Event::from_serialize(&json!({"type": "RUN_ERROR", "message": message, "code": code}))
        .unwrap_or_else(|_| {
            // Serializing a `json!` object with a string `type` cannot fail;
            // this constant is the fallback all the same.
            Event::from_json(r#"{"type":"RUN_ERROR","message":"internal error","code":"internal"}"#)
                .expect("a constant, valid event")
        })
}

/// Maps a store error onto an API error without leaking its details.
pub(crate) fn store_error(e: StoreError) -> ApiError {
    match e.kind() {
        ErrorKind::NotFound => ApiError::not_found("no such thread or run"),
        ErrorKind::Invalid => ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid",
            e.message().to_owned(),
        ),
        ErrorKind::Conflict => ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            "the thread changed meanwhile (another run started); retry",
        ),
        ErrorKind::Unavailable => {
            tracing::error!(error = %e, source = ?std::error::Error::source(&e), "store unavailable");
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                "the event store is unavailable; retry later",
            )
        }
        _ => {
            tracing::error!(error = %e, source = ?std::error::Error::source(&e), "store error");
            ApiError::store()
        }
    }
}

/// Sets the agent only when there is one.
pub(crate) trait AgentOpt {
    fn agent_opt(self, agent: Option<String>) -> Self;
}

impl AgentOpt for AppendRequest {
    fn agent_opt(mut self, agent: Option<String>) -> Self {
        self.agent = agent;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_compare() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }

    fn gateway() -> Arc<Gateway> {
        Arc::new(Gateway::new(Store::memory(), GatewayConfig::default()).unwrap())
    }

    async fn reserved(gw: &Arc<Gateway>, run: &str, parent: Option<&str>) -> RunSlot {
        match gw.reserve("default", "t", run, parent).await {
            Ok(slot) => slot,
            Err(e) => panic!("run {run} was not reserved: {e:?}"),
        }
    }

    /// A branch saw run `a` in flight and decided to run aside; before it
    /// took its aside slot, `a` ended and a run of the branch's own id took
    /// the thread. Taking the aside slot now must not pass: the thread's
    /// holder moved, and the branch's next look finds its own id in flight.
    #[tokio::test]
    async fn a_branch_does_not_go_aside_past_a_holder_that_moved() {
        let gw = gateway();
        let a = reserved(&gw, "a", None).await;
        assert!(!a.aside);
        a.release().await;
        let x = reserved(&gw, "x", None).await;
        assert!(!x.aside);

        // The branch's second step, with what its first step saw.
        let stale = gw
            .reserve_aside("default", "t", "x", Some("p"), "a", true)
            .await;
        assert!(
            matches!(stale, Ok(None)),
            "went aside past a holder that moved"
        );
        // Its next look: its own id holds the thread.
        let again = gw.reserve("default", "t", "x", Some("p")).await;
        let Err(e) = again else {
            panic!("two runs of id x at once");
        };
        assert_eq!(e.status, StatusCode::CONFLICT);
        assert_eq!(e.code, "run_exists");
        assert!(gw.aside_here("default", "t", Some("x")).is_none());

        // A branch of another id beside `x` still runs aside.
        let y = reserved(&gw, "y", Some("p")).await;
        assert!(y.aside);
        // Seen as held by another process while `x` holds it here: moved.
        let key = (
            agui_store::aside::aside_tenant("default"),
            agui_store::aside::aside_thread("t", "z").unwrap(),
        );
        let thread_key = ("default".to_owned(), "t".to_owned());
        let stop = CancellationToken::new();
        assert_eq!(
            gw.occupy_aside(&thread_key, None, &key, "z", &stop),
            AsideSlot::Moved
        );
        assert_eq!(
            gw.occupy_aside(&thread_key, Some("x"), &key, "z", &stop),
            AsideSlot::Reserved
        );
        assert_eq!(
            gw.occupy_aside(&thread_key, Some("x"), &key, "z", &stop),
            AsideSlot::Taken
        );
        drop((x, y));
    }

    #[test]
    fn run_error_event() {
        let e = run_error("x", "a \"b\"");
        assert_eq!(
            e.json(),
            r#"{"type":"RUN_ERROR","message":"a \"b\"","code":"x"}"#
        );
    }
}
