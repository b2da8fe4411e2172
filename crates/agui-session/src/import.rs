//! Import: a session document into a store, with the restore cases.

use std::collections::BTreeSet;
use std::io::BufRead;
use std::path::PathBuf;
use std::sync::Arc;

use agui_protocol::{Event, EventType};
use agui_store::{AppendRequest, Channel, Checkpoints, ErrorKind, Store, Timestamp};
use bytes::Bytes;
use serde::Serialize;
use tokio::sync::mpsc;

use crate::error::SessionError;
use crate::read::{Item, Summary, read};

/// Where a document is read from; opened once to check it, once to import.
pub trait Source: Send + Sync + 'static {
    /// A fresh reader from the document's start.
    fn open(&self) -> std::io::Result<Box<dyn BufRead + Send>>;
}

impl Source for PathBuf {
    fn open(&self) -> std::io::Result<Box<dyn BufRead + Send>> {
        Ok(Box::new(std::io::BufReader::with_capacity(
            256 * 1024,
            std::fs::File::open(self)?,
        )))
    }
}

impl Source for Bytes {
    fn open(&self) -> std::io::Result<Box<dyn BufRead + Send>> {
        Ok(Box::new(std::io::Cursor::new(self.clone())))
    }
}

/// Checks a document completely (schema, sequence, lineage, checksum)
/// without importing it. Blocking.
pub fn validate(source: &dyn Source) -> Result<Summary, SessionError> {
    read(source.open().map_err(SessionError::Io)?, |_| Ok(()))
}

/// Which restore case an import met (the failing cases, *empty* and
/// *invalid*, are errors: [`SessionError::NoAgents`],
/// [`SessionError::ThreadExists`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RestoreCase {
    /// Every participant is available, and no other agent.
    Equivalent,
    /// Every participant is available, and more agents: they join the
    /// thread and sync from its history on their first run.
    Enhanced,
    /// Some participants are missing: the history is complete and their
    /// channels are kept for when they are configured again.
    Reduced,
    /// No participant is available and `--history-only` asked to import the
    /// history anyway (channels kept).
    HistoryOnly,
}

impl RestoreCase {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            RestoreCase::Equivalent => "equivalent",
            RestoreCase::Enhanced => "enhanced",
            RestoreCase::Reduced => "reduced",
            RestoreCase::HistoryOnly => "history_only",
        }
    }
}

/// How to import.
#[derive(Clone, Default)]
pub struct ImportOptions {
    /// The tenant to import into.
    pub tenant: String,
    /// Import under this thread id instead of the document's (`--as`).
    pub target: Option<String>,
    /// The agents available on the importing side; `None` means every
    /// participant of the document (no agent check).
    pub agents: Option<Vec<String>>,
    /// Import the history even when no participant is available.
    pub history_only: bool,
    /// Called with the number of events written so far.
    pub progress: Option<Arc<dyn Fn(u64) + Send + Sync>>,
}

/// What an import did.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ImportReport {
    /// The case met.
    pub case: RestoreCase,
    /// The thread written.
    pub thread_id: String,
    /// The document's thread id.
    pub source_thread_id: String,
    /// Events imported.
    pub events: u64,
    /// Runs imported.
    pub runs: u64,
    /// Agents whose channels were imported.
    pub channels: Vec<String>,
    /// The document's participants.
    pub participants: Vec<String>,
    /// Participants not available here (their channels are kept; runs to
    /// them are refused until they are configured).
    pub missing: Vec<String>,
    /// Available agents that were not participants (they join on their
    /// first run).
    pub joining: Vec<String>,
    /// The content's SHA-256.
    pub sha256: String,
    /// Runs whose status the store derives differently from the document
    /// (a run the source interrupted without a later event), as
    /// `run: document → store`.
    pub status_differences: Vec<String>,
}

/// The restore case for a document's participants and the available agents.
pub fn restore_case(
    participants: &[String],
    available: Option<&[String]>,
    history_only: bool,
) -> Result<(RestoreCase, Vec<String>, Vec<String>), SessionError> {
    let Some(available) = available else {
        return Ok((RestoreCase::Equivalent, Vec::new(), Vec::new()));
    };
    let have: BTreeSet<&String> = available.iter().collect();
    let want: BTreeSet<&String> = participants.iter().collect();
    let missing: Vec<String> = want.difference(&have).map(|s| (*s).clone()).collect();
    let joining: Vec<String> = have.difference(&want).map(|s| (*s).clone()).collect();
    let case = if !want.is_empty() && missing.len() == want.len() {
        if !history_only {
            return Err(SessionError::NoAgents {
                participants: participants.to_vec(),
            });
        }
        RestoreCase::HistoryOnly
    } else if !missing.is_empty() {
        RestoreCase::Reduced
    } else if !joining.is_empty() {
        RestoreCase::Enhanced
    } else {
        RestoreCase::Equivalent
    };
    Ok((case, missing, joining))
}

enum Msg {
    Batch {
        events: Vec<Event>,
        received_at: Timestamp,
        agent: Option<String>,
    },
    Channel(Channel),
}

/// Most events per append.
const BATCH: usize = 1000;

/// The prefix of the staging thread ids imports write under.
pub const STAGING_PREFIX: &str = ".agui-import-";

/// A fresh staging thread id: unique per process and call, short whatever
/// the target's length.
fn staging_id() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update(Timestamp::now().0.to_le_bytes());
    h.update(std::process::id().to_le_bytes());
    h.update(n.to_le_bytes());
    let digest = h.finalize();
    format!("{STAGING_PREFIX}{}", hex::encode(&digest[..8]))
}

/// Imports a document. It is checked whole first (nothing is written when
/// it is damaged), then the restore case is decided, then it is read again
/// and written batch by batch (memory bounded by a batch) under a fresh
/// staging thread id, which one atomic [`Store::rename_thread`] gives
/// the target id at the end. Readers of the target see nothing or the whole
/// thread. Should anything fail before the rename (the store, or a document
/// that changed between the two reads), the staging thread is deleted
/// again; should the process die, only the staging thread (named
/// [`STAGING_PREFIX`]...) is left, never a partial target.
pub async fn import(
    store: Store,
    source: Arc<dyn Source>,
    opts: ImportOptions,
) -> Result<ImportReport, SessionError> {
    let src = source.clone();
    let summary = tokio::task::spawn_blocking(move || validate(&*src))
        .await
        .map_err(|_| SessionError::Io(std::io::Error::other("the reader task failed")))??;
    let target = opts
        .target
        .clone()
        .unwrap_or_else(|| summary.thread_id.clone());
    agui_store::check_id("thread", &target)?;
    let tenant = opts.tenant.clone();
    let exists = match store.thread(&tenant, &target).await {
        Ok(info) => info.last_seq > 0,
        Err(e) if e.kind() == ErrorKind::NotFound => false,
        Err(e) => return Err(e.into()),
    };
    if exists || !store.channels(&tenant, &target).await?.is_empty() {
        return Err(SessionError::ThreadExists { thread: target });
    }
    let (case, missing, joining) = restore_case(
        &summary.participants,
        opts.agents.as_deref(),
        opts.history_only,
    )?;
    let staging = staging_id();
    let mut written = false;
    let mut result = write(
        &store,
        source,
        &tenant,
        &staging,
        &summary,
        &opts,
        &mut written,
    )
    .await;
    if result.is_ok() && written {
        result = match store.rename_thread(&tenant, &staging, &target).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::Conflict => Err(SessionError::ThreadExists {
                thread: target.clone(),
            }),
            Err(e) => Err(e.into()),
        };
    }
    if let Err(e) = result {
        if written {
            match store.delete_thread(&tenant, &staging).await {
                Ok(()) => {}
                Err(d) if d.kind() == ErrorKind::NotFound => {}
                Err(d) => {
                    return Err(SessionError::Store(
                        agui_store::StoreError::internal(format!(
                            "the import failed ({e}) and its partial thread could not be removed"
                        ))
                        .with_source(d),
                    ));
                }
            }
        }
        return Err(e);
    }
    store.flush().await?;
    let mut status_differences = Vec::new();
    for r in &summary.runs {
        let now = store.run(&tenant, &target, &r.run_id).await?;
        if now.status.as_str() != r.status {
            status_differences.push(format!(
                "{}: {} → {}",
                r.run_id,
                r.status,
                now.status.as_str()
            ));
        }
    }
    Ok(ImportReport {
        case,
        thread_id: target,
        source_thread_id: summary.thread_id.clone(),
        events: summary.events,
        runs: summary.runs.len() as u64,
        channels: summary.channels.clone(),
        participants: summary.participants.clone(),
        missing,
        joining,
        sha256: summary.sha256.clone(),
        status_differences,
    })
}

async fn write(
    store: &Store,
    source: Arc<dyn Source>,
    tenant: &str,
    target: &str,
    summary: &Summary,
    opts: &ImportOptions,
    written: &mut bool,
) -> Result<(), SessionError> {
    let (tx, mut rx) = mpsc::channel::<Msg>(16);
    let agents: Vec<Option<String>> = summary.runs.iter().map(|r| r.agent.clone()).collect();
    let expected = summary.sha256.clone();
    let producer = tokio::task::spawn_blocking(move || -> Result<(), SessionError> {
        let mut batch: Vec<Event> = Vec::new();
        let mut at = Timestamp(0);
        let mut agent: Option<String> = None;
        let send = |m: Msg| {
            tx.blocking_send(m)
                .map_err(|_| SessionError::Io(std::io::Error::other("the import stopped")))
        };
        let input = source.open().map_err(SessionError::Io)?;
        let again = read(input, |item| {
            match item {
                Item::Event {
                    received_at,
                    event,
                    run,
                    ..
                } => {
                    let starts = *event.event_type() == EventType::RunStarted;
                    if !batch.is_empty() && (starts || received_at != at || batch.len() >= BATCH) {
                        send(Msg::Batch {
                            events: std::mem::take(&mut batch),
                            received_at: at,
                            agent: agent.clone(),
                        })?;
                    }
                    at = received_at;
                    agent = run.and_then(|i| agents.get(i).cloned().flatten());
                    batch.push(event);
                }
                Item::Channel(c) => {
                    if !batch.is_empty() {
                        send(Msg::Batch {
                            events: std::mem::take(&mut batch),
                            received_at: at,
                            agent: agent.clone(),
                        })?;
                    }
                    send(Msg::Channel(c))?;
                }
                Item::Header(_) | Item::Run(_) => {}
            }
            Ok(())
        })?;
        if !batch.is_empty() {
            send(Msg::Batch {
                events: std::mem::take(&mut batch),
                received_at: at,
                agent,
            })?;
        }
        if again.sha256 != expected {
            return Err(SessionError::damaged(
                crate::Damage::Checksum,
                0,
                "the document changed while it was imported",
            ));
        }
        Ok(())
    });
    let mut seq = 0u64;
    let mut consumed: Result<(), SessionError> = Ok(());
    while let Some(msg) = rx.recv().await {
        let step = match msg {
            Msg::Batch {
                events,
                received_at,
                agent,
            } => {
                // No checkpoints on the import's appends: building them
                // holds the thread's whole conversation (see
                // `agui_store::Checkpoints`); the first restore builds them.
                let mut req = AppendRequest::new(events)
                    .expect_seq(seq)
                    .checkpoints(Checkpoints::Defer);
                req.agent = agent;
                req.received_at = Some(received_at);
                match store.append(tenant, target, req).await {
                    Ok(a) => {
                        *written = true;
                        seq = a.last_seq;
                        if let Some(p) = &opts.progress {
                            p(seq);
                        }
                        Ok(())
                    }
                    Err(e) if e.kind() == ErrorKind::Conflict && seq == 0 => {
                        Err(SessionError::ThreadExists {
                            thread: target.to_owned(),
                        })
                    }
                    Err(e) => Err(e.into()),
                }
            }
            Msg::Channel(c) => match store.put_channel(tenant, target, c).await {
                Ok(()) => Ok(()),
                // A document with channels but no events: nothing holds
                // them (the store keeps channels of existing threads).
                Err(e) if e.kind() == ErrorKind::NotFound && seq == 0 => Ok(()),
                Err(e) => Err(e.into()),
            },
        };
        if let Err(e) = step {
            consumed = Err(e);
            break;
        }
    }
    drop(rx);
    let produced = producer
        .await
        .map_err(|_| SessionError::Io(std::io::Error::other("the reader task failed")))?;
    consumed?;
    produced?;
    Ok(())
}
