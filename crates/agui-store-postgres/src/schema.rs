//! The schema and its migrations, applied on open under an advisory lock so
//! that replicas starting together apply each migration once.

/// The migrations, in order. Index `i` brings the schema to version `i + 1`.
/// Never edit one that shipped: append a new one.
pub(crate) const MIGRATIONS: &[&str] = &[
    // 1: threads, events, runs, checkpoints.
    r#"
CREATE TABLE threads (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant          BYTEA  NOT NULL,
    thread          BYTEA  NOT NULL,
    agent           BYTEA,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL,
    last_seq        BIGINT NOT NULL,
    run_count       BIGINT NOT NULL DEFAULT 0,
    bytes           BIGINT NOT NULL DEFAULT 0,
    last_run        BYTEA,
    last_run_status SMALLINT,
    UNIQUE (tenant, thread)
);
CREATE INDEX threads_by_activity ON threads (tenant, updated_at DESC, thread);
CREATE INDEX threads_by_agent ON threads (tenant, agent, updated_at DESC, thread);

CREATE TABLE events (
    thread_id   BIGINT   NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    seq         BIGINT   NOT NULL,
    received_at BIGINT   NOT NULL,
    codec       SMALLINT NOT NULL,
    body        BYTEA    NOT NULL,
    PRIMARY KEY (thread_id, seq)
);
ALTER TABLE events ALTER COLUMN body SET STORAGE EXTERNAL;

CREATE TABLE runs (
    thread_id     BIGINT   NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    run_id        BYTEA    NOT NULL,
    tenant        BYTEA    NOT NULL,
    thread        BYTEA    NOT NULL,
    parent_run_id BYTEA,
    agent         BYTEA,
    status        SMALLINT NOT NULL,
    started_at    BIGINT   NOT NULL,
    finished_at   BIGINT,
    first_seq     BIGINT   NOT NULL,
    last_seq      BIGINT   NOT NULL,
    event_count   BIGINT   NOT NULL,
    bytes         BIGINT   NOT NULL,
    PRIMARY KEY (thread_id, run_id)
);
CREATE INDEX runs_by_thread ON runs (thread_id, first_seq);
CREATE INDEX runs_by_time ON runs (tenant, started_at, thread, first_seq);
CREATE INDEX runs_by_parent ON runs (tenant, parent_run_id);
CREATE INDEX runs_running ON runs (status) WHERE status = 0;

CREATE TABLE checkpoints (
    thread_id BIGINT NOT NULL,
    run_id    BYTEA  NOT NULL,
    blob      BYTEA  NOT NULL,
    PRIMARY KEY (thread_id, run_id),
    FOREIGN KEY (thread_id, run_id) REFERENCES runs (thread_id, run_id) ON DELETE CASCADE
);

CREATE TABLE flushes (id INT PRIMARY KEY, at BIGINT NOT NULL);
INSERT INTO flushes VALUES (1, 0);
"#,
    // 2: events move from one row each to one row per appended batch
    // (`agui_store::frame`): one index entry and one compressed body per batch.
    // Version 1 rows become one-event chunks under the legacy codecs (10
    // plain, 11 zstd), read back as before.
    r#"
CREATE TABLE chunks (
    thread_id   BIGINT   NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    first_seq   BIGINT   NOT NULL,
    last_seq    BIGINT   NOT NULL,
    received_at BIGINT   NOT NULL,
    codec       SMALLINT NOT NULL,
    raw_len     BIGINT,
    crc         BIGINT,
    data        BYTEA    NOT NULL,
    PRIMARY KEY (thread_id, first_seq)
) WITH (toast_tuple_target = 8160);
ALTER TABLE chunks ALTER COLUMN data SET STORAGE EXTERNAL;
INSERT INTO chunks (thread_id, first_seq, last_seq, received_at, codec, raw_len, crc, data)
    SELECT thread_id, seq, seq, received_at, codec + 10, NULL, NULL, body FROM events;
DROP TABLE events;
"#,
    // 3: which store session (one per open store, i.e. per gateway process)
    // last appended to each run, so that `mark_interrupted` leaves the runs
    // of live replicas alone. A session is live while it holds its advisory
    // lock. Runs from before have no owner and count as orphaned.
    r#"
ALTER TABLE runs ADD COLUMN owner INT;
CREATE SEQUENCE sessions AS INT MINVALUE 1 CYCLE;
"#,
    // 4: the base run a delta checkpoint names, beside its blob, so that a
    // restore reads the whole chain in one query. Older rows have none and
    // restore through the shared path.
    r#"
ALTER TABLE checkpoints ADD COLUMN base_run BYTEA;
"#,
    // 5: per-agent channel state of a thread (`Backend::put_channel`),
    // removed with its thread.
    r#"
CREATE TABLE channels (
    thread_id  BIGINT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    agent      BYTEA  NOT NULL,
    state      BYTEA  NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (thread_id, agent)
);
"#,
    // 6: threads claimed by a run in flight (or a delete) of a live session,
    // before anything of the run is stored: every replica's gateway sees
    // them (`claim_thread`). A claim whose session is gone lapses.
    r#"
CREATE TABLE claims (
    tenant BYTEA NOT NULL,
    thread BYTEA NOT NULL,
    run    BYTEA NOT NULL,
    owner  INT   NOT NULL,
    PRIMARY KEY (tenant, thread)
);
"#,
];

/// Whether a schema name is safe to splice into SQL as a quoted identifier:
/// 1 to 63 bytes of ASCII letters, digits and underscores.
pub(crate) fn valid_schema_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}
