//! Sealing full logs into blocks off the write path.
//!
//! The write that finds its log full does not copy it: it **freezes** it — one index
//! commit names the full log among `sealing_logs` and names a new, empty log in its place
//! — appends to the new log, and is acknowledged on its own sync as any other write. The
//! full log keeps answering reads, relabels and removals of its records (no record is
//! added to it) until a **seal** turns it into a block:
//!
//! 1. under the lock, a snapshot of the log's live records, its length and a handle on
//!    its file, and a fresh sequence number for the block;
//! 2. without the lock, the block file written from that snapshot and fsynced;
//! 3. under the lock, if the log has not changed since the snapshot (a relabel or removal
//!    appended to it means the block is stale: it is removed and the seal starts over),
//!    the index commit that names the block instead of the log; then the log file is
//!    removed.
//!
//! A crash before step 3's commit leaves the log named and the block a leftover the next
//! open removes; after it, the log is the leftover. The open seals what a crash left
//! waiting before anyone writes.
//!
//! The background sealer thread (`storage/sealer.rs`) seals; at most
//! [`MAX_SEALING_LOGS`] full logs wait per entry, and a writer that would freeze one more
//! seals the oldest itself first (back pressure: disk and memory stay bounded when the
//! disk cannot keep up).

use std::sync::MutexGuard;
use std::sync::atomic::Ordering;

use super::{Entry, EntryState, LogKind, ObsoleteFiles, take_index_log};
use crate::error::Result;
use crate::storage::format::fsutil::remove_file_if_exists;
use crate::storage::format::index::{BlockEntry, block_path, log_path};
use crate::storage::format::log::LogRecord;
use crate::storage::format::rewrite::write_log_records;

/// How many full logs of one entry may wait for their seal before a writer seals one.
pub(crate) const MAX_SEALING_LOGS: usize = 2;

/// Seals of one log tried without the lock before the copy is made under it: a log
/// relabeled during every copy would otherwise never be sealed.
const SEAL_ATTEMPTS: usize = 3;

impl Entry {
    /// Takes the full log of `kind` off the write path: one index commit names it among
    /// the logs waiting for their seal and, with `start_next`, a new empty log of `kind`
    /// in its place. The background sealer is asked for at the writer's next step
    /// ([`Entry::take_seal_request`]).
    pub(super) fn freeze(
        &self,
        st: &mut EntryState,
        kind: LogKind,
        start_next: bool,
    ) -> Result<()> {
        let mut next = st.index.clone();
        let Some(full) = take_index_log(&mut next, kind) else {
            return Ok(());
        };
        next.sealing_logs.push(full);
        let fresh = match start_next {
            true => Some(self.create_log(&mut next, kind)?),
            false => None,
        };
        if let Err(e) = next.save(&self.dir) {
            if let Some(log) = &fresh {
                let _ = remove_file_if_exists(log.path());
            }
            return Err(e);
        }
        st.index = next;
        if let Some(log) = st.take_log(kind) {
            st.sealing.push((full, log));
        }
        if let Some(log) = fresh {
            st.put_log(kind, log);
        }
        self.seal_wanted.store(true, Ordering::Release);
        Ok(())
    }

    /// True once after a log was taken off the write path: the caller asks the
    /// background sealer for this entry.
    pub(crate) fn take_seal_request(&self) -> bool {
        self.seal_wanted.load(Ordering::Relaxed) && self.seal_wanted.swap(false, Ordering::AcqRel)
    }

    /// Seals every log waiting for its seal.
    pub(crate) fn seal_all(&self) -> Result<()> {
        while self.seal_next()? {}
        Ok(())
    }

    /// Excludes other sealers of this entry while the guard lives; `None` once the
    /// entry's removal has begun.
    fn seal_guard(&self) -> Option<MutexGuard<'_, ()>> {
        let guard = self.sealing.lock().unwrap_or_else(|p| p.into_inner());
        (!self.is_removing()).then_some(guard)
    }

    /// Seals the oldest log waiting for its seal (module doc). Returns false when none
    /// waits or the entry's removal has begun.
    pub(crate) fn seal_next(&self) -> Result<bool> {
        let Some(_sealing) = self.seal_guard() else {
            return Ok(false);
        };
        for attempt in 1..=SEAL_ATTEMPTS {
            let mut st = self.lock()?;
            let Some((seq, log)) = st.sealing.first() else {
                return Ok(false);
            };
            let seq = *seq;
            if log.records().is_empty() {
                // Every record was removed: the log goes with nothing to write.
                self.retire_sealed_log(st, seq, None)?;
                return Ok(true);
            }
            let len = log.file_len();
            let records: Vec<LogRecord> = log.records().values().cloned().collect();
            let file = log.file()?;
            let block_seq = st.index.take_seq();
            let block = block_path(&self.dir, block_seq);
            // The last attempt copies under the lock, so nothing can change the log.
            let held = (attempt == SEAL_ATTEMPTS).then_some(st);
            let written = write_log_records(
                &file,
                &log_path(&self.dir, seq),
                &records,
                &block,
                self.ctx.frame_size,
            );
            let st = match held {
                Some(st) => st,
                None => match self.lock() {
                    Ok(st) => st,
                    Err(e) => {
                        let _ = remove_file_if_exists(&block);
                        return Err(e);
                    }
                },
            };
            let summary = written?;
            let unchanged = st
                .log(LogKind::Sealing(seq))
                .is_some_and(|log| log.file_len() == len);
            if self.is_removing() || !unchanged {
                // The removal waits for this guard, so the path still names this
                // entry's directory. A changed log is sealed again from its new state.
                let _ = remove_file_if_exists(&block);
                if self.is_removing() {
                    return Ok(false);
                }
                continue;
            }
            self.retire_sealed_log(st, seq, Some(BlockEntry::from_summary(block_seq, &summary)))?;
            return Ok(true);
        }
        Ok(true)
    }

    /// Commits the index that names `block` (the sealed log's records, synced) instead
    /// of log `seq`, then removes the log's file after the lock.
    fn retire_sealed_log(
        &self,
        mut st: MutexGuard<'_, EntryState>,
        seq: u64,
        block: Option<BlockEntry>,
    ) -> Result<()> {
        let mut next = st.index.clone();
        take_index_log(&mut next, LogKind::Sealing(seq));
        let created: Vec<_> = block.iter().map(|b| block_path(&self.dir, b.seq)).collect();
        next.blocks.extend(block);
        self.commit(&mut st, next, &created, &[])?;
        if let Some(log) = st.take_log(LogKind::Sealing(seq)) {
            // Every live record is now in a synced, committed block.
            log.retire();
        }
        let files = ObsoleteFiles::collect(&self.dir, vec![log_path(&self.dir, seq)]);
        drop(st);
        files.remove();
        Ok(())
    }
}
