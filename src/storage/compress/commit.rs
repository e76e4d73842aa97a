//! The committer side of recompression: finished block files are fsynced, several at
//! once, and committed per entry in batches, each block only if it did not change
//! meanwhile; the blocks they replaced are unlinked on threads of their own.
//!
//! Where the time goes without this: an fsync of a small file waits for its data, its
//! inode and a cache flush (0.2–0.4 ms here), an unlink on a file system mounted with
//! `discard` waits for the discard (0.2–0.3 ms). One after another on one thread, a run of
//! a few hundred blocks spent as long syncing and unlinking as encoding, and the run ended
//! only once the committer had caught up. Several fsyncs in flight share the device's
//! flushes, and the unlinks — cleanup, once the index no longer names a file — overlap
//! everything else.

use std::ffi::OsString;
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use super::CompressStats;
use crate::error::{Error, Result};
use crate::storage::entry::{Entry, ObsoleteFiles, Replacement, remove_in};
use crate::storage::format::index::BlockEntry;
use crate::storage::sync::fsutil::remove_file_if_exists;

/// Commit an entry's finished blocks once they replace this many blocks (a joined block
/// replaces several: counting outputs would hold a whole entry's unlinks until the stream
/// leaves it, then do them all after the last frame is encoded)…
const COMMIT_BATCH: usize = 32;
/// …or once the oldest has waited this long.
const COMMIT_EVERY: Duration = Duration::from_secs(1);
/// Finished block files fsynced at once.
const SYNC_THREADS: usize = 4;
/// Replaced block files unlinked at once.
const UNLINK_THREADS: usize = 4;

/// Commits recompressed blocks whose source is unchanged; returns what was committed and
/// how many were skipped, and the files of the blocks replaced. Files of skipped blocks
/// are removed.
fn commit_recompressed(
    entry: &Entry,
    done: Vec<Finished>,
) -> Result<(CompressStats, ObsoleteFiles)> {
    let mut stats = CompressStats::default();
    let replacements = done
        .iter()
        .map(|f| Replacement {
            old: f.old.iter().map(BlockEntry::version).collect(),
            new: vec![f.new.clone()],
            files: f.path.iter().cloned().collect(),
        })
        .collect();
    let (applied, replaced) = entry.replace_blocks(replacements)?;
    for (f, applied) in done.iter().zip(applied) {
        if applied {
            stats.blocks += f.old.len() as u64;
            stats.records += f.old.iter().map(BlockEntry::live_records).sum::<u64>();
            stats.bytes_before += f.old.iter().map(|b| b.size).sum::<u64>();
            stats.bytes_after += f.new.size;
        } else {
            stats.skipped += f.old.len() as u64;
        }
    }
    Ok((stats, replaced))
}

/// A recompressed block waiting for its commit.
pub struct Finished {
    /// The block it replaces, or the run of blocks it joins.
    pub old: Vec<BlockEntry>,
    /// The block written.
    pub new: BlockEntry,
    /// The new file (flushed, not synced); `None` when no frame changed (every frame was
    /// stored raw and stayed raw): the block keeps its file and only its tier changes in
    /// the index.
    pub path: Option<PathBuf>,
}

impl Finished {
    /// Removes the new file — under the entry's merge guard, and not at all once the
    /// entry's removal has begun (the file went with the renamed directory; its path may
    /// now name a file of an entry re-created under the same name).
    pub fn discard(&self, entry: &Entry) {
        if let Some(path) = &self.path
            && let Some(_writing) = entry.merge_guard()
        {
            let _ = remove_file_if_exists(path);
        }
    }
}

/// Per-entry queue of finished blocks and when the oldest one finished.
struct PendingCommits {
    entry: Arc<Entry>,
    done: Vec<Finished>,
    /// Blocks the finished ones replace.
    replacing: usize,
    since: Instant,
}

/// A finished block on its way to the committer: its entry, what to commit, and the new
/// file to fsync first (`None` when no file was written).
pub type FinishedBlock = (Arc<Entry>, Finished, Option<File>);

/// Commits one finished block locally, as the committer would (without syncing a file:
/// for a block whose frames did not change, which has none); returns what it did.
pub fn commit_in_place(entry: &Entry, finished: Finished) -> Result<CompressStats> {
    let (stats, replaced) = commit_recompressed(entry, vec![finished])?;
    replaced.remove();
    Ok(stats)
}

/// The first error of the run, shared by the syncing threads and the committer; `failed`
/// is raised with it so the stream stops.
struct FirstError<'a> {
    error: Mutex<Option<Error>>,
    failed: &'a AtomicBool,
}

impl FirstError<'_> {
    fn set(&self, e: Error) {
        let mut slot = self.error.lock().unwrap_or_else(|p| p.into_inner());
        slot.get_or_insert(e);
        self.failed.store(true, Ordering::Relaxed);
    }

    fn is_set(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    fn take(self) -> Option<Error> {
        self.error.into_inner().unwrap_or_else(|p| p.into_inner())
    }
}

/// The committer: fsyncs finished block files ([`SYNC_THREADS`] at once) and commits them
/// per entry in batches (replacing [`COMMIT_BATCH`] blocks, or whatever waited a second, or
/// all at the end); the blocks replaced are unlinked on [`UNLINK_THREADS`] threads, all
/// done before it returns.
/// After an error it discards what still arrives, raises `failed` so the stream stops, and
/// reports the error.
///
/// `blocks` is how many blocks the stream may send: a small run (a policy's catch-up run
/// of a block or two) starts no more threads than it has blocks.
pub(super) fn commit_loop(
    rx: Receiver<FinishedBlock>,
    failed: &AtomicBool,
    blocks: usize,
) -> Result<CompressStats> {
    let first_error = FirstError {
        error: Mutex::new(None),
        failed,
    };
    let (synced_tx, synced_rx) = crossbeam_channel::unbounded::<(Arc<Entry>, Finished)>();
    let (unlink_tx, unlink_rx) = crossbeam_channel::unbounded::<(Arc<File>, OsString)>();
    let stats = std::thread::scope(|scope| {
        for _ in 0..SYNC_THREADS.min(blocks.max(1)) {
            let (rx, synced_tx, first_error) = (rx.clone(), synced_tx.clone(), &first_error);
            scope.spawn(move || sync_finished(rx, synced_tx, first_error));
        }
        drop(synced_tx);
        for _ in 0..UNLINK_THREADS.min(blocks.max(1)) {
            let unlink_rx = unlink_rx.clone();
            scope.spawn(move || {
                for (dir, name) in unlink_rx {
                    remove_in(&dir, &name);
                }
            });
        }
        let stats = commit_synced(synced_rx, &unlink_tx, &first_error);
        drop(unlink_tx);
        stats
    });
    match first_error.take() {
        Some(e) => Err(e),
        None => Ok(stats),
    }
}

/// A syncing thread: fsyncs each finished block's file and passes the block on; after
/// the run's first error, discards what still arrives.
fn sync_finished(
    rx: Receiver<FinishedBlock>,
    synced: Sender<(Arc<Entry>, Finished)>,
    first_error: &FirstError,
) {
    for (entry, finished, file) in rx {
        if !first_error.is_set()
            && let Some(file) = file
            && let Err(e) = file.sync_all()
        {
            first_error.set(Error::io("syncing a recompressed block", e));
        }
        if first_error.is_set() {
            finished.discard(&entry);
        } else if let Err(crossbeam_channel::SendError((entry, finished))) =
            synced.send((entry, finished))
        {
            finished.discard(&entry);
        }
    }
}

/// The committing loop: batches synced blocks per entry and commits them, handing the
/// replaced files to the unlinking threads.
fn commit_synced(
    synced: Receiver<(Arc<Entry>, Finished)>,
    unlink: &Sender<(Arc<File>, OsString)>,
    first_error: &FirstError,
) -> CompressStats {
    let mut stats = CompressStats::default();
    let mut pending: Vec<PendingCommits> = Vec::new();
    let mut current: Option<Arc<Entry>> = None;
    // `current`: the entry the stream is on. The stream takes the entries one after
    // another, so an entry it has left gets no more blocks: its batch is committed then.
    let mut flush = |pending: &mut Vec<PendingCommits>, current: Option<&Arc<Entry>>| {
        let mut i = 0;
        while i < pending.len() {
            let p = &pending[i];
            let left_behind = current.is_none_or(|c| !Arc::ptr_eq(c, &p.entry));
            if !(left_behind || p.replacing >= COMMIT_BATCH || p.since.elapsed() >= COMMIT_EVERY) {
                i += 1;
                continue;
            }
            let p = pending.swap_remove(i);
            if first_error.is_set() {
                for f in &p.done {
                    f.discard(&p.entry);
                }
                continue;
            }
            match commit_recompressed(&p.entry, p.done) {
                Ok((committed, replaced)) => {
                    stats.add(committed);
                    for file in replaced.into_parts() {
                        // The unlinking threads outlive this loop.
                        let _ = unlink.send(file);
                    }
                }
                Err(e) => first_error.set(e),
            }
        }
    };
    loop {
        match synced.recv_timeout(COMMIT_EVERY) {
            Ok((entry, finished)) => {
                if first_error.is_set() {
                    finished.discard(&entry);
                    continue;
                }
                let replacing = finished.old.len();
                match pending.iter_mut().find(|p| Arc::ptr_eq(&p.entry, &entry)) {
                    Some(p) => {
                        p.done.push(finished);
                        p.replacing += replacing;
                    }
                    None => pending.push(PendingCommits {
                        entry: entry.clone(),
                        done: vec![finished],
                        replacing,
                        since: Instant::now(),
                    }),
                }
                flush(&mut pending, Some(&entry));
                current = Some(entry);
            }
            Err(RecvTimeoutError::Timeout) => flush(&mut pending, current.as_ref()),
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    flush(&mut pending, None);
    stats
}
