//! How an entry coordinates with work done apart from its state lock: background merge
//! requests, the merge guard that every writer of files outside the lock holds, and the
//! start of the entry's removal, which stops those writers first.

use std::sync::atomic::Ordering;
use std::sync::{MutexGuard, RwLockReadGuard, RwLockWriteGuard};

use super::Entry;

/// Held by an entry's removal: no merge, recompression or tier upload writes the
/// entry's files while it lives ([`Entry::begin_removal`]).
pub(crate) struct WritersStopped<'a> {
    _writers: MutexGuard<'a, ()>,
    _sealers: MutexGuard<'a, ()>,
    _uploads: RwLockWriteGuard<'a, ()>,
}

impl Entry {
    /// True when more sealed blocks than the overlap bound cover one instant and no merge
    /// is queued yet; marks the merge queued.
    pub(crate) fn take_merge_request(&self) -> bool {
        if self.merge_queued.load(Ordering::Relaxed)
            || self.merge_failed.load(Ordering::Relaxed)
            || self.depth.load(Ordering::Relaxed) <= self.ctx.max_overlap
        {
            return false;
        }
        !self.merge_queued.swap(true, Ordering::AcqRel)
    }

    /// True when full logs wait for the background thread's seal and no look at the
    /// overlap after them is queued yet; marks one queued.
    pub(crate) fn take_merge_recheck(&self) -> bool {
        if self.merge_recheck_queued.load(Ordering::Relaxed) {
            return false;
        }
        let waiting = self.lock().is_ok_and(|st| !st.sealing.is_empty());
        waiting && !self.merge_recheck_queued.swap(true, Ordering::AcqRel)
    }

    /// Clears the mark of [`Entry::take_merge_recheck`] (the look is being made).
    pub(crate) fn merge_rechecked(&self) {
        self.merge_recheck_queued.store(false, Ordering::Release);
    }

    /// Records that a background merge failed: no new request until the blocks change.
    pub(crate) fn merge_failed(&self) {
        self.merge_failed.store(true, Ordering::Release);
    }

    /// Excludes other merges and file writers of this entry while the guard lives;
    /// `None` once the entry's removal has begun (write nothing then).
    pub(crate) fn merge_guard(&self) -> Option<MutexGuard<'_, ()>> {
        let guard = self.merging.lock().unwrap_or_else(|p| p.into_inner());
        (!self.is_removing()).then_some(guard)
    }

    /// Lets a tier run's upload or commit use the entry's files by path while the guard
    /// lives, alongside other uploads and the recompression stream; `None` once the
    /// entry's removal has begun.
    pub(crate) fn upload_guard(&self) -> Option<RwLockReadGuard<'_, ()>> {
        let guard = self.uploading.read().unwrap_or_else(|p| p.into_inner());
        (!self.is_removing()).then_some(guard)
    }

    /// Whether the entry's removal has begun: a writer holding the merge guard stops at
    /// its next step (discarding what it half wrote) so the removal can go on.
    pub(crate) fn is_removing(&self) -> bool {
        self.removing.load(Ordering::Acquire)
    }

    /// Begins the entry's removal: asks running merges, recompressions, seals and tier
    /// uploads to stop, and waits until none holds the merge guard, the seal guard or an
    /// upload guard. While the returned guard lives no such
    /// writer touches the entry's directory, so it can be renamed away and its name
    /// reused with nothing written into the new entry's files.
    ///
    /// Commits made without the merge guard (the recompression's committer thread) are
    /// stopped too: this passes through the entry's state lock after raising the flag,
    /// so a commit already inside it finishes before the directory moves, and every
    /// later one sees the flag ([`Entry::replace_blocks`]).
    pub(crate) fn begin_removal(&self) -> WritersStopped<'_> {
        self.removing.store(true, Ordering::Release);
        let writers = self.merging.lock().unwrap_or_else(|p| p.into_inner());
        drop(self.state.lock().unwrap_or_else(|p| p.into_inner()));
        let sealers = self.sealing.lock().unwrap_or_else(|p| p.into_inner());
        let uploads = self.uploading.write().unwrap_or_else(|p| p.into_inner());
        WritersStopped {
            _writers: writers,
            _sealers: sealers,
            _uploads: uploads,
        }
    }

    /// Syncs everything appended to the entry's logs and edit logs, so no write already
    /// made waits on a file about to move (a bucket rename): its sync would look for the
    /// old path and fail, and the write, stored, would be answered as lost.
    pub(crate) fn sync_logs(&self) -> crate::error::Result<()> {
        let files: Vec<_> = {
            let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            st.logs()
                .map(|(_, log)| (log.sync_handle().clone(), log.file_len()))
                .chain(
                    st.edits
                        .values()
                        .map(|e| (e.sync_handle().clone(), e.file_len())),
                )
                .collect()
        };
        files
            .iter()
            .try_for_each(|(file, end)| file.wait_durable(*end))
    }

    /// Undoes [`Entry::begin_removal`] when the removal failed (the entry stays).
    pub(crate) fn abandon_removal(&self) {
        self.removing.store(false, Ordering::Release);
    }

    /// Clears the queued mark (the merger took the request).
    pub(crate) fn merge_started(&self) {
        self.merge_queued.store(false, Ordering::Release);
    }
}
