//! Sealing the stale logs of a compress run's entries before it plans: an open block (or
//! late log) whose records all lie in the window is sealed first, so it is compressed with
//! the rest (see `Entry::seal_stale_logs`).
//!
//! A seal is mostly waiting: its block's fsync, the index's and the directory's. One entry
//! after another, a run over many entries with a log each spent those waits in a row before
//! its first frame was encoded (three entries: about 12 ms of a 250 ms run here), so
//! several entries are sealed at once.

use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::storage::entry::Entry;
use crate::storage::fan_out::for_each_on_threads;

/// Entries sealed at once.
const SEAL_THREADS: usize = 4;

/// Seals the stale logs of `entries` for the window `[start, stop)`, each under its
/// entry's merge guard (an entry being removed is left alone), several at once. Returns
/// the first error; the other entries' seals still finish (each is whole or not done).
pub(super) fn seal_stale_logs(entries: &[Arc<Entry>], start: u64, stop: u64) -> Result<()> {
    let first_error: Mutex<Option<Error>> = Mutex::new(None);
    for_each_on_threads(entries, SEAL_THREADS, |entry| {
        let Some(_merging) = entry.merge_guard() else {
            return; // being removed
        };
        if let Err(e) = entry.seal_stale_logs(start, stop) {
            first_error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert(e);
        }
    });
    match first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
