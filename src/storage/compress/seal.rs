//! Sealing the stale logs of a compress run's entries before it plans: an open block (or
//! late log) whose records all lie in the window is sealed first, so it is compressed with
//! the rest (see `Entry::seal_stale_logs`).
//!
//! A seal is mostly waiting: its block's fsync, the index's and the directory's. One entry
//! after another, a run over many entries with a log each spent those waits in a row before
//! its first frame was encoded (three entries: about 12 ms of a 250 ms run here), so
//! several entries are sealed at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::Result;
use crate::storage::entry::Entry;

/// Entries sealed at once.
const SEAL_THREADS: usize = 4;

/// Seals the stale logs of `entries` for the window `[start, stop)`, each under its
/// entry's merge guard (an entry being removed is left alone), several at once. Returns
/// the first error; the other entries' seals still finish (each is whole or not done).
pub(super) fn seal_stale_logs(entries: &[Arc<Entry>], start: u64, stop: u64) -> Result<()> {
    let seal = |entry: &Entry| -> Result<()> {
        let Some(_merging) = entry.merge_guard() else {
            return Ok(()); // being removed
        };
        entry.seal_stale_logs(start, stop).map(drop)
    };
    if entries.len() <= 1 {
        return entries.iter().try_for_each(|e| seal(e));
    }
    let next = AtomicUsize::new(0);
    let work = || -> Result<()> {
        while let Some(entry) = entries.get(next.fetch_add(1, Ordering::Relaxed)) {
            seal(entry)?;
        }
        Ok(())
    };
    std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..SEAL_THREADS.min(entries.len()))
            .map(|_| scope.spawn(work))
            .collect();
        let mine = work();
        helpers.into_iter().fold(mine, |first, helper| {
            let theirs = helper.join().unwrap_or_else(|_| {
                Err(crate::error::Error::internal(
                    "a thread sealing stale logs panicked",
                ))
            });
            first.and(theirs)
        })
    })
}
