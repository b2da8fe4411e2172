//! Mapping native PostgreSQL and pool errors onto the portable kinds. The
//! public message never contains SQL; the native error stays the source.

use agui_store::{ErrorKind, StoreError};
use tokio_postgres::error::SqlState;

/// Maps a driver error: connection trouble, lock and serialization failures
/// and resource exhaustion are `Unavailable` (retrying may succeed), a
/// unique violation is `Conflict`, bad data is `Invalid`, the rest `Internal`.
pub(crate) fn pg(err: tokio_postgres::Error) -> StoreError {
    let kind = match err.code() {
        // A closed connection, I/O or protocol trouble below SQL.
        None => ErrorKind::Unavailable,
        Some(code) => classify(code),
    };
    // Class 28: the server refused the login (no such role, wrong password,
    // no pg_hba entry). Retrying with other settings may succeed; the
    // native error, kept as the source, names the role.
    let refused = err.code().is_some_and(|c| c.code().starts_with("28"));
    let missing = err.code() == Some(&SqlState::INVALID_CATALOG_NAME);
    // Class 54 (program limit exceeded), but for a statement too complex
    // (54001) or with too many arguments (54023): ours are fixed, so that
    // is the data, an id too long for a btree index row.
    let limit = err
        .code()
        .is_some_and(|c| c.code().starts_with("54") && !matches!(c.code(), "54001" | "54023"));
    let message = match kind {
        ErrorKind::Unavailable if refused => "the database refused the login",
        ErrorKind::Unavailable if missing => "no such database",
        ErrorKind::Unavailable => "the database is unavailable",
        ErrorKind::Conflict => "a concurrent write got there first",
        ErrorKind::Invalid if limit => {
            "the database cannot hold the data: a thread, tenant or run id too long for its indexes (about 2.7 KB once compressed)"
        }
        ErrorKind::Invalid => "the database refused the data",
        ErrorKind::Corrupt => "the database reported damaged data",
        _ => "the database failed the request",
    };
    StoreError::new(kind, message).with_source(err)
}

fn classify(code: &SqlState) -> ErrorKind {
    let c = code.code();
    if *code == SqlState::UNIQUE_VIOLATION {
        return ErrorKind::Conflict;
    }
    if *code == SqlState::T_R_SERIALIZATION_FAILURE
        || *code == SqlState::T_R_DEADLOCK_DETECTED
        || *code == SqlState::LOCK_NOT_AVAILABLE
        || *code == SqlState::QUERY_CANCELED
        || *code == SqlState::READ_ONLY_SQL_TRANSACTION
    {
        return ErrorKind::Unavailable;
    }
    if *code == SqlState::DATA_CORRUPTED || *code == SqlState::INDEX_CORRUPTED {
        return ErrorKind::Corrupt;
    }
    match c.get(..2) {
        // connection, invalid authorization (a missing role, a wrong
        // password), a database name that does not exist (3D: a setting
        // to fix, like a missing role, not a bug), insufficient
        // resources, operator intervention, system errors
        Some("08" | "28" | "3D" | "53" | "57" | "58") => ErrorKind::Unavailable,
        // program limits (an index row too large for a long id that does
        // not compress): a retry cannot succeed
        Some("54") => ErrorKind::Invalid,
        // data exceptions
        Some("22") => ErrorKind::Invalid,
        Some("XX") => ErrorKind::Internal,
        _ => ErrorKind::Internal,
    }
}

/// True when the server refused a connection because its database does
/// not exist: a read-only open then finds no store there.
pub(crate) fn is_missing_database(err: &deadpool_postgres::PoolError) -> bool {
    matches!(err, deadpool_postgres::PoolError::Backend(e)
        if e.code() == Some(&SqlState::INVALID_CATALOG_NAME))
}

/// Maps a pool error (no connection to be had).
pub(crate) fn pool(err: deadpool_postgres::PoolError) -> StoreError {
    match err {
        deadpool_postgres::PoolError::Backend(e) => pg(e),
        other => StoreError::unavailable("no database connection is available").with_source(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_onto_kinds() {
        assert_eq!(classify(&SqlState::UNIQUE_VIOLATION), ErrorKind::Conflict);
        assert_eq!(
            classify(&SqlState::T_R_DEADLOCK_DETECTED),
            ErrorKind::Unavailable
        );
        assert_eq!(
            classify(&SqlState::CONNECTION_FAILURE),
            ErrorKind::Unavailable
        );
        assert_eq!(classify(&SqlState::ADMIN_SHUTDOWN), ErrorKind::Unavailable);
        assert_eq!(classify(&SqlState::DISK_FULL), ErrorKind::Unavailable);
        assert_eq!(
            classify(&SqlState::INVALID_AUTHORIZATION_SPECIFICATION),
            ErrorKind::Unavailable,
            "a missing role"
        );
        assert_eq!(
            classify(&SqlState::INVALID_PASSWORD),
            ErrorKind::Unavailable
        );
        assert_eq!(
            classify(&SqlState::NUMERIC_VALUE_OUT_OF_RANGE),
            ErrorKind::Invalid
        );
        assert_eq!(
            classify(&SqlState::INVALID_CATALOG_NAME),
            ErrorKind::Unavailable,
            "a missing database"
        );
        assert_eq!(classify(&SqlState::DATA_CORRUPTED), ErrorKind::Corrupt);
        assert_eq!(classify(&SqlState::SYNTAX_ERROR), ErrorKind::Internal);
    }
}
