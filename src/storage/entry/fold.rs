//! Folding a block's tombstones into a rewrite, off the write path.
//!
//! A removal of sealed records appends tombstones to the block's edit log (`edits.rs`):
//! one small write. Once the removed share of a block reaches the fold threshold, or its
//! edit log has grown larger than the block, the block is **folded**: rewritten without
//! the removed records, with its relabels applied, in the same codec. That rewrite is as
//! large as the block (64 MB by default), so the removal that crosses the threshold does
//! not make it: it asks the store's background thread (`storage/sealer.rs`), which
//!
//! 1. under the entry lock, takes the block's current view (its records with every edit
//!    applied) and its version, and a fresh sequence number;
//! 2. without the lock, writes and fsyncs the rewrite;
//! 3. commits it in place of the block only if the block's version is unchanged
//!    ([`Entry::replace_blocks`]); a relabel or removal that arrived meanwhile makes it
//!    fold again from the new view. The last attempt folds under the lock, so a block
//!    changed during every copy is still folded.
//!
//! Until the commit, readers see the block and its edit log as before; a crash leaves the
//! rewrite a leftover the next open removes, and the block still folds at the next
//! removal that reaches it, or the next catch-up.

use std::sync::Arc;

use super::{Entry, EntryState, Replacement};
use crate::error::Result;
use crate::storage::format::block::SealedBlock;
use crate::storage::format::edits::BlockEdits;
use crate::storage::format::index::{BlockEntry, block_path};
use crate::storage::format::rewrite::write_records;
use crate::storage::sync::fsutil::remove_file_if_exists;

/// Folds of one block tried without the lock before it is folded under it.
const FOLD_ATTEMPTS: usize = 3;

/// What a fold took of a block under the lock: enough to rewrite it without the lock.
struct FoldSnapshot {
    /// The block's index entry then (its version says whether it changed since).
    old: BlockEntry,
    /// Its records as readers saw them then, every edit applied.
    view: Arc<SealedBlock>,
    /// The rewrite's sequence number.
    seq: u64,
}

impl Entry {
    /// Whether block `b` (with edit log `edits`) is due for a fold: a local block whose
    /// tombstones reached the fold threshold, or whose edit log outgrew it (a compressed
    /// block of small records is smaller than the tombstones of a third of them, and a
    /// removal must not leave the entry larger than its data). A tiered block keeps its
    /// tombstones: folding would fetch it back to rewrite it locally.
    pub(super) fn wants_fold(&self, b: &BlockEntry, edits: Option<&BlockEdits>) -> bool {
        let outgrew = edits.is_some_and(|e| e.file_len() > b.size);
        b.remote.is_none()
            && b.edits.removed > 0
            && (b.edits.removed as f64 >= self.ctx.fold_share * b.record_count as f64 || outgrew)
    }

    /// Folds every block due for a fold (module doc).
    pub(crate) fn fold_all(&self) -> Result<()> {
        // The guard of the seals: one thread at a time does an entry's background work,
        // so a catch-up returns only once a fold the background thread began is done.
        let Some(_guard) = self.seal_guard() else {
            return Ok(());
        };
        while self.fold_next()? {}
        Ok(())
    }

    /// Folds the first block due for a fold; false when none is.
    fn fold_next(&self) -> Result<bool> {
        for attempt in 1..=FOLD_ATTEMPTS {
            let mut st = self.lock()?;
            let Some(pos) = self.due_for_fold(&st) else {
                return Ok(false);
            };
            if attempt == FOLD_ATTEMPTS {
                self.fold_under_lock(&mut st, pos)?;
                return Ok(true);
            }
            let snapshot = self.fold_snapshot(&mut st, pos)?;
            drop(st);
            let rewrite = self.write_fold(&snapshot)?;
            if self.commit_fold(rewrite)? {
                self.log_fold(&snapshot.old);
                return Ok(true);
            }
        }
        Ok(true)
    }

    /// The position of the first block due for a fold.
    fn due_for_fold(&self, st: &EntryState) -> Option<usize> {
        st.index
            .blocks
            .iter()
            .position(|b| self.wants_fold(b, st.edits.get(&b.seq)))
    }

    /// Step 1: block `pos` as readers see it now, and a fresh sequence number.
    fn fold_snapshot(&self, st: &mut EntryState, pos: usize) -> Result<FoldSnapshot> {
        let old = st.index.blocks[pos].clone();
        let view = self.block_in(st, &old)?;
        Ok(FoldSnapshot {
            old,
            view,
            seq: st.index.take_seq(),
        })
    }

    /// Step 2: the rewrite of a snapshot, written and fsynced without the lock.
    fn write_fold(&self, snapshot: &FoldSnapshot) -> Result<Replacement> {
        let path = block_path(&self.dir, snapshot.seq);
        let codec = snapshot.old.codec;
        match write_records(&snapshot.view, codec, &path, self.ctx.frame_size) {
            Ok(summary) => Ok(Replacement {
                old: vec![snapshot.old.version()],
                new: vec![BlockEntry::from_summary(snapshot.seq, &summary)],
                files: vec![path],
            }),
            Err(e) => {
                let _ = remove_file_if_exists(&path);
                Err(e)
            }
        }
    }

    /// Step 3: commits the rewrite if the block is unchanged since its snapshot (else
    /// removes it); whether it was committed.
    fn commit_fold(&self, rewrite: Replacement) -> Result<bool> {
        let (applied, replaced) = self.replace_blocks(vec![rewrite])?;
        replaced.remove();
        Ok(applied.first().copied().unwrap_or(false))
    }

    /// Rewrites sealed block `pos` with its edits folded in, under the lock, and commits
    /// it in place of the old file.
    fn fold_under_lock(&self, st: &mut EntryState, pos: usize) -> Result<()> {
        let old = st.index.blocks[pos].clone();
        let view = self.block_in(st, &old)?;
        let mut next = st.index.clone();
        let seq = next.take_seq();
        let path = block_path(&self.dir, seq);
        let summary = write_records(&view, old.codec, &path, self.ctx.frame_size)?;
        next.blocks[pos] = BlockEntry::from_summary(seq, &summary);
        self.commit(st, next, &[path], &[old.seq])?;
        self.log_fold(&old);
        Ok(())
    }

    fn log_fold(&self, old: &BlockEntry) {
        log::debug!(
            "entry {}/{}: folded {} tombstone(s) of block {} into a rewrite",
            self.bucket,
            self.name,
            old.edits.removed,
            old.first_ts
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::storage::config::Config;
    use crate::storage::format::index::{block_path, edits_path};
    use crate::storage::record::{Labels, RecordMeta};
    use crate::storage::settings::BucketSettings;
    use crate::storage::store::Store;

    fn store(dir: &std::path::Path) -> Store {
        let mut config = Config::new(dir);
        config.tombstone_fold_share = 0.5;
        let store = Store::open(config).expect("store");
        let settings = BucketSettings {
            max_block_records: 4,
            ..Default::default()
        };
        let bucket = store.create_bucket("b", settings).expect("bucket");
        for ts in 1..=5u64 {
            let meta = RecordMeta {
                timestamp: ts,
                labels: Labels::new(),
                content_type: "text/plain".into(),
                size: 0,
            };
            bucket.write("e", meta, &[ts as u8; 100]).expect("write");
        }
        bucket.catch_up().expect("sealed");
        store
    }

    fn labels() -> Labels {
        let mut labels = Labels::new();
        labels.insert("k".into(), "v".into());
        labels
    }

    /// The removal that takes a block to the fold threshold returns without the rewrite
    /// (the background thread is held off here): reads see the tombstones at once, and
    /// the fold comes with the catch-up, with a relabel made meanwhile in it.
    #[test]
    fn the_removal_at_the_threshold_does_not_wait_for_the_fold() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = store(dir.path());
        let bucket = store.bucket("b").expect("bucket");
        let entry = bucket.entry("e").expect("entry");
        let block = entry.sealed_blocks().expect("blocks")[0].clone();
        let held = entry.sealing.lock().expect("guard");
        bucket.remove_record("e", 2).expect("remove");
        bucket
            .remove_record("e", 3)
            .expect("remove: half the block, the threshold");
        bucket.update_labels("e", 4, &labels()).expect("relabel");
        let blocks = entry.sealed_blocks().expect("blocks");
        assert_eq!(blocks[0].seq, block.seq, "no rewrite on the write path");
        assert_eq!(blocks[0].live_records(), 2);
        assert!(bucket.read("e", Some(3)).is_err(), "the tombstone answers");
        drop(held);
        bucket.catch_up().expect("fold");
        let blocks = entry.sealed_blocks().expect("blocks");
        assert_ne!(blocks[0].seq, block.seq, "folded");
        assert_eq!(blocks[0].record_count, 2);
        assert!(!block_path(entry.dir(), block.seq).exists());
        assert!(!edits_path(entry.dir(), block.seq).exists());
        assert_eq!(
            bucket.read("e", Some(4)).expect("read").meta.labels,
            labels()
        );
        for gone in [2, 3] {
            assert!(bucket.read("e", Some(gone)).is_err());
        }
        assert_eq!(bucket.read("e", Some(1)).expect("read").meta.timestamp, 1);
    }

    /// A relabel that reaches the block while its rewrite is made without the lock makes
    /// the rewrite stale: it is not committed (its file removed), and the next fold keeps
    /// the relabel.
    #[test]
    fn a_change_during_the_rewrite_is_not_lost() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = store(dir.path());
        let bucket = store.bucket("b").expect("bucket");
        let entry = bucket.entry("e").expect("entry");
        let held = entry.sealing.lock().expect("guard");
        bucket.remove_record("e", 2).expect("remove");
        bucket.remove_record("e", 3).expect("remove");
        let mut st = entry.lock().expect("lock");
        let pos = entry.due_for_fold(&st).expect("due");
        let snapshot = entry.fold_snapshot(&mut st, pos).expect("snapshot");
        drop(st);
        let rewrite = entry.write_fold(&snapshot).expect("rewrite");
        let written = rewrite.files[0].clone();
        assert!(written.exists());
        bucket.update_labels("e", 4, &labels()).expect("relabel");
        assert!(!entry.commit_fold(rewrite).expect("commit"), "stale");
        assert!(!written.exists(), "the stale rewrite is removed");
        drop(held);
        bucket.catch_up().expect("fold");
        let blocks = entry.sealed_blocks().expect("blocks");
        assert_eq!(blocks[0].record_count, 2, "folded");
        assert_eq!(
            bucket.read("e", Some(4)).expect("read").meta.labels,
            labels()
        );
    }
}
