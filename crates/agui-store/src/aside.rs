//! Runs set aside: where a run lives while it cannot join its thread's log.
//!
//! A thread's log holds one open run at a time (every event belongs to the
//! run started last before it, see [`crate::index`]), so a run that
//! branches from an earlier run while another branch's run is still in
//! flight cannot be written into the log as it arrives. Such a run is
//! written *aside*: in a thread of its own ([`aside_thread`]) under the
//! tenant's aside tenant ([`aside_tenant`]), durably and as it arrives,
//! then copied into its thread's log in one atomic append once the thread
//! has no run in flight, and the aside thread deleted. A reader of the
//! thread sees the run whole or not at all; until it joins, it is listed
//! among the thread's runs set aside.
//!
//! The store knows one rule about aside tenants: a `RUN_STARTED` written
//! there names its parent in the original thread, so the engine does not
//! look `parentRunId` up there (and `agui store check` does not call it a
//! fault), nor builds checkpoints there. Everything else (when to set a
//! run aside, when it joins) is the caller's: the gateway's.
//!
//! So a tenant id that ends in [`ASIDE_SUFFIX`] is reserved: the store
//! treats it as an aside tenant. The gateway refuses control characters in
//! tenant names (its tokens file); an embedder choosing tenant ids must
//! keep off that suffix too.

use agui_protocol::Event;

use crate::types::MAX_ID_BYTES;

/// What an aside tenant's id adds to its tenant's (a unit separator, then
/// `aside`).
pub const ASIDE_SUFFIX: &str = "\u{1f}aside";

/// The tenant under which `tenant`'s runs set aside are written.
pub fn aside_tenant(tenant: &str) -> String {
    format!("{tenant}{ASIDE_SUFFIX}")
}

/// True for a tenant that holds runs set aside.
pub fn is_aside_tenant(tenant: &str) -> bool {
    tenant.ends_with(ASIDE_SUFFIX)
}

/// The tenant whose runs an aside tenant holds; `None` for any other
/// tenant.
pub fn owner_tenant(tenant: &str) -> Option<&str> {
    tenant.strip_suffix(ASIDE_SUFFIX)
}

/// The `parentRunId`s of `events` (a batch appended to `tenant`) that name
/// runs elsewhere: for an aside tenant, every parent the batch itself does
/// not start (nor the head's `last_run`), which planning takes as known
/// (see [`crate::index::plan_batch`]); for any other tenant, none.
pub fn parents_elsewhere(tenant: &str, events: &[Event], last_run: Option<&str>) -> Vec<String> {
    match is_aside_tenant(tenant) {
        true => crate::index::parents_to_look_up(events, last_run),
        false => Vec::new(),
    }
}

/// The id of the aside thread that holds run `run` of thread `thread`:
/// the thread id's length in bytes, a colon, the thread id, then the run
/// id, so [`parse_aside_thread`] gets both back whatever they contain.
/// `None` when it would be longer than [`MAX_ID_BYTES`] (such a run cannot
/// be set aside).
pub fn aside_thread(thread: &str, run: &str) -> Option<String> {
    let id = format!("{}:{thread}{run}", thread.len());
    (id.len() <= MAX_ID_BYTES).then_some(id)
}

/// The thread and run an aside thread's id names; `None` for an id
/// [`aside_thread`] did not make.
pub fn parse_aside_thread(id: &str) -> Option<(&str, &str)> {
    let (len, rest) = id.split_once(':')?;
    if len.is_empty()
        || !len.bytes().all(|b| b.is_ascii_digit())
        || len.len() > 1 && len.starts_with('0')
    {
        return None;
    }
    let len: usize = len.parse().ok()?;
    if len == 0 || len >= rest.len() || !rest.is_char_boundary(len) {
        return None;
    }
    Some(rest.split_at(len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aside_ids_give_back_the_thread_and_run_whatever_they_hold() {
        for (thread, run) in [
            ("t", "r"),
            ("12:ab", "3:x"),
            ("é:ü", "🦀"),
            ("a\u{1f}aside", ":"),
        ] {
            let id = aside_thread(thread, run).unwrap();
            assert_eq!(parse_aside_thread(&id), Some((thread, run)), "{id:?}");
        }
        for bad in [
            "", "t", ":tr", "0:tr", "01:tr", "2:tr", "9:tr", "x:tr", "1:é",
        ] {
            assert_eq!(parse_aside_thread(bad), None, "{bad:?}");
        }
        let long = "x".repeat(MAX_ID_BYTES);
        assert_eq!(aside_thread(&long, "r"), None);
        let t = aside_tenant("acme");
        assert!(is_aside_tenant(&t));
        assert_eq!(owner_tenant(&t), Some("acme"));
        assert!(!is_aside_tenant("acme"));
        assert_eq!(owner_tenant("acme"), None);
    }
}
