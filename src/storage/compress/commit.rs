//! The committer side of recompression: finished block files are fsynced on their own
//! thread and committed per entry in batches, each block only if it did not change
//! meanwhile.

use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use super::CompressStats;
use crate::error::{Error, Result};
use crate::storage::entry::{Entry, Replacement};
use crate::storage::format::fsutil::remove_file_if_exists;
use crate::storage::format::index::BlockEntry;

/// Commit an entry's finished blocks once this many are waiting…
const COMMIT_BATCH: usize = 64;
/// …or once the oldest has waited this long.
const COMMIT_EVERY: Duration = Duration::from_secs(1);

/// Commits recompressed blocks whose source is unchanged; returns what was committed and
/// how many were skipped. Files of skipped blocks are removed.
fn commit_recompressed(entry: &Entry, done: Vec<Finished>) -> Result<CompressStats> {
    let mut stats = CompressStats::default();
    let replacements = done
        .iter()
        .map(|f| Replacement {
            old: vec![f.old.version()],
            new: vec![f.new.clone()],
            files: f.path.iter().cloned().collect(),
        })
        .collect();
    let applied = entry.replace_blocks(replacements)?;
    for (f, applied) in done.iter().zip(applied) {
        if applied {
            stats.blocks += 1;
            stats.records += f.old.live_records();
            stats.bytes_before += f.old.size;
            stats.bytes_after += f.new.size;
        } else {
            stats.skipped += 1;
        }
    }
    Ok(stats)
}

/// A recompressed block waiting for its commit.
pub(super) struct Finished {
    pub(super) old: BlockEntry,
    pub(super) new: BlockEntry,
    /// The new file; `None` when no frame changed (every frame was stored raw and stayed
    /// raw): the block keeps its file and only its tier changes in the index.
    pub(super) path: Option<PathBuf>,
}

impl Finished {
    /// Removes the new file — under the entry's merge guard, and not at all once the
    /// entry's removal has begun (the file went with the renamed directory; its path may
    /// now name a file of an entry re-created under the same name).
    pub(super) fn discard(&self, entry: &Entry) {
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
    since: Instant,
}

/// The committer thread: fsyncs finished block files and commits them per entry in
/// batches (64 blocks, or whatever waited a second, or all at the end). After an error it
/// discards what still arrives, raises `failed` so the stream stops, and reports the error.
pub(super) fn commit_loop(
    rx: mpsc::Receiver<(Arc<Entry>, Finished, Option<File>)>,
    failed: &AtomicBool,
) -> Result<CompressStats> {
    let mut stats = CompressStats::default();
    let mut pending: Vec<PendingCommits> = Vec::new();
    let mut error: Option<Error> = None;
    let mut flush = |pending: &mut Vec<PendingCommits>, all: bool, error: &mut Option<Error>| {
        let mut i = 0;
        while i < pending.len() {
            let p = &pending[i];
            if !(all || p.done.len() >= COMMIT_BATCH || p.since.elapsed() >= COMMIT_EVERY) {
                i += 1;
                continue;
            }
            let p = pending.swap_remove(i);
            if error.is_some() {
                for f in &p.done {
                    f.discard(&p.entry);
                }
                continue;
            }
            match commit_recompressed(&p.entry, p.done) {
                Ok(committed) => stats.add(committed),
                Err(e) => *error = Some(e),
            }
        }
    };
    loop {
        match rx.recv_timeout(COMMIT_EVERY) {
            Ok((entry, finished, file)) => {
                if error.is_none()
                    && let Some(file) = file
                    && let Err(e) = file.sync_all()
                {
                    error = Some(Error::io("syncing a recompressed block", e));
                }
                if error.is_some() {
                    failed.store(true, Ordering::Relaxed);
                    finished.discard(&entry);
                    continue;
                }
                match pending.iter_mut().find(|p| Arc::ptr_eq(&p.entry, &entry)) {
                    Some(p) => p.done.push(finished),
                    None => pending.push(PendingCommits {
                        entry,
                        done: vec![finished],
                        since: Instant::now(),
                    }),
                }
                flush(&mut pending, false, &mut error);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => flush(&mut pending, false, &mut error),
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        if error.is_some() {
            failed.store(true, Ordering::Relaxed);
        }
    }
    flush(&mut pending, true, &mut error);
    match error {
        Some(e) => Err(e),
        None => Ok(stats),
    }
}
