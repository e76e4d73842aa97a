//! The commit protocol of an entry's sealed blocks: the index saved (its blocks sorted),
//! then the files it replaced removed — by path under the lock, or, for commits that
//! retire many blocks (recompression batches, merges, bulk removals), after the lock is
//! released (`obsolete.rs`) — and blocks written without the lock swapped in only if
//! what they replace is unchanged.

use std::path::PathBuf;
use std::sync::atomic::Ordering;

use super::{Entry, EntryState, ObsoleteFiles, Replacement};
use crate::error::Result;
use crate::storage::format::edits::BlockEdits;
use crate::storage::format::index::{EntryIndex, block_path, edits_path, max_overlap};
use crate::storage::sync::fsutil::remove_file_if_exists;

impl Entry {
    /// Drops a replaced block from the cache and retires its edit log; returns the files
    /// to unlink (step 4 of the protocol), the block's and its edit log's.
    fn discard_block_file(&self, st: &mut EntryState, seq: u64) -> impl Iterator<Item = PathBuf> {
        // A tiered block's local file is its stub (the block file may be gone already).
        let stub = crate::storage::format::index::stub_path(&self.dir, seq);
        self.ctx.cache.evict((self.uid, seq));
        // The commit that dropped the block made its edits durable or moot (folded into a
        // synced rewrite, or every record gone): writers waiting on them are released.
        let edits = st.edits.remove(&seq).map(|log| {
            log.sync_handle().retire();
            edits_path(&self.dir, seq)
        });
        [block_path(&self.dir, seq), stub].into_iter().chain(edits)
    }

    /// Commits blocks written without the lock: each replacement swaps its `old` blocks
    /// for its `new` ones, but only if every old block is still in the index (a writer or
    /// another run that changed one meanwhile wins, and the replacement's files are
    /// removed). One index commit for all; returns which replacements took effect, and the
    /// replaced files, for the caller to remove once it no longer holds anything a writer
    /// waits for.
    pub(crate) fn replace_blocks(
        &self,
        replacements: Vec<Replacement>,
    ) -> Result<(Vec<bool>, ObsoleteFiles)> {
        // A removal (or rename) of the entry, once begun, passes through this lock
        // before its directory moves (`Entry::begin_removal`): a commit holding the lock
        // first finishes at the old place, and one after it sees `is_removing`. This
        // committer holds no merge guard, so the lock is what keeps it from saving an
        // index through a path that no longer names this entry's directory.
        let lock = self.lock();
        let gone = match &lock {
            Ok(_) if self.is_removing() => Some("its removal has begun".to_string()),
            Ok(_) => None,
            Err(e) => Some(e.to_string()),
        };
        if let Some(why) = gone {
            // Nothing to commit. The directory was (or is being) renamed away with the
            // files written into it; the paths may now name files of an entry
            // re-created under the same name, so nothing is removed by path (a file that
            // landed in a new directory is a leftover its next open removes).
            log::info!(
                "entry {}: {why}; dropping {} rewritten block set(s)",
                self.name,
                replacements.len()
            );
            return Ok((vec![false; replacements.len()], ObsoleteFiles::none()));
        }
        let mut st = lock.expect("a lock that failed returned above");
        let mut next = st.index.clone();
        let mut created = Vec::new();
        let mut obsolete = Vec::new();
        let mut applied = Vec::with_capacity(replacements.len());
        for r in replacements {
            // Present and unchanged: a label change or tombstone since the rewrite read the
            // block would be lost by committing it.
            let present = r
                .old
                .iter()
                .all(|v| next.blocks.iter().any(|b| b.version() == *v));
            if !present {
                r.discard();
                applied.push(false);
                continue;
            }
            next.blocks.retain(|b| !r.old.contains(&b.version()));
            for (seq, _) in &r.old {
                // A block that keeps its file (a tier-only change) is not obsolete.
                if !r.new.iter().any(|b| b.seq == *seq) {
                    obsolete.push(*seq);
                }
            }
            next.blocks.extend(r.new);
            created.extend(r.files);
            applied.push(true);
        }
        let mut files = ObsoleteFiles::none();
        if applied.iter().any(|a| *a) {
            files = self.commit_deferred(&mut st, next, &created, &obsolete)?;
        }
        Ok((applied, files))
    }

    /// The commit of every change to sealed blocks: saves `next` (its blocks sorted by first
    /// timestamp) as the new index, then unlinks the files it replaced (under the lock,
    /// so by path).
    pub(super) fn commit(
        &self,
        st: &mut EntryState,
        next: EntryIndex,
        created: &[PathBuf],
        obsolete_blocks: &[u64],
    ) -> Result<()> {
        for path in self.commit_index(st, next, created, obsolete_blocks)? {
            if let Err(e) = remove_file_if_exists(&path) {
                // The index no longer names the file: the next open removes it.
                log::warn!("{e}");
            }
        }
        Ok(())
    }

    /// [`Entry::commit`], returning the files it replaced instead of unlinking them, so
    /// that a commit retiring many blocks unlinks them after the entry lock is released.
    pub(super) fn commit_deferred(
        &self,
        st: &mut EntryState,
        next: EntryIndex,
        created: &[PathBuf],
        obsolete_blocks: &[u64],
    ) -> Result<ObsoleteFiles> {
        let files = self.commit_index(st, next, created, obsolete_blocks)?;
        Ok(ObsoleteFiles::collect(&self.dir, files))
    }

    /// Saves `next` as the index file, the edit logs synced first: the index in memory may
    /// rely on edits (a range narrowed by a tombstone, a block marked edited), and
    /// "fsynced with the next commit" is the durability an edit was acknowledged with. Every
    /// save of an entry's index goes through here, whatever else it commits.
    pub(super) fn save_index(&self, st: &mut EntryState, next: &EntryIndex) -> Result<()> {
        st.edits.values_mut().try_for_each(BlockEdits::sync)?;
        next.save(&self.dir)
    }

    /// Saves `next` as the index and retires the replaced blocks; returns their files.
    fn commit_index(
        &self,
        st: &mut EntryState,
        mut next: EntryIndex,
        created: &[PathBuf],
        obsolete_blocks: &[u64],
    ) -> Result<Vec<PathBuf>> {
        // Edits can move a block's first timestamp (its first record removed), and sealed
        // or merged blocks are appended: restore the order the lookups rely on.
        next.blocks.sort_by_key(|b| b.first_ts);
        if let Err(e) = self.save_index(st, &next) {
            for path in created {
                let _ = remove_file_if_exists(path);
            }
            return Err(e);
        }
        // Objects of tiered blocks the new index no longer names: deleted once it is saved
        // (a crash before they are queued leaves orphans, which the collector removes).
        let kept: std::collections::HashSet<&str> = next
            .blocks
            .iter()
            .filter_map(|b| b.remote.as_ref().map(|r| r.key.as_str()))
            .collect();
        let gone: Vec<(String, String)> = st
            .index
            .blocks
            .iter()
            .filter_map(|b| b.remote.as_ref())
            .filter(|r| !kept.contains(r.key.as_str()))
            .map(|r| (r.remote.clone(), r.key.clone()))
            .collect();
        st.index = next;
        st.refresh_reach();
        self.ctx.remotes.delete_objects(&gone);
        self.depth
            .store(max_overlap(&st.index.blocks).0, Ordering::Relaxed);
        self.merge_failed.store(false, Ordering::Release);
        let mut files = Vec::new();
        for &seq in obsolete_blocks {
            files.extend(self.discard_block_file(st, seq));
        }
        Ok(files)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::config::Config;
    use crate::storage::format::codec::Codec;
    use crate::storage::record::RecordMeta;
    use crate::storage::settings::BucketSettings;
    use crate::storage::store::Store;

    /// A tombstone that narrows a block's range is in the index in memory before it is
    /// synced (sync mode `never`); any save of the index (here the one that starts a late
    /// log, then the one that freezes a full log) persists that range, so it must sync the
    /// edit log first: otherwise a power cut keeps the narrowed range and loses the
    /// tombstone, and the entry counts a record it no longer serves.
    #[test]
    fn every_index_save_syncs_the_edit_logs_it_relies_on() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut config = Config::new(dir.path());
        config.sync_mode = crate::storage::sync::SyncMode::Never;
        // Tombstones stay tombstones (no fold rewrites the block).
        config.tombstone_fold_share = 1.0;
        let store = Store::open(config).expect("store");
        let settings = BucketSettings {
            max_block_records: 4,
            ..Default::default()
        };
        let bucket = store.create_bucket("b", settings).expect("bucket");
        let write = |ts: u64| {
            let meta = RecordMeta {
                timestamp: ts,
                labels: Default::default(),
                content_type: "text/plain".into(),
                size: 1,
            };
            bucket.write("e", meta, b"x").expect("write");
        };
        for ts in [10, 20, 30, 40, 50] {
            write(ts);
        }
        bucket.catch_up().expect("seal");
        let entry = bucket.entry("e").expect("entry");
        let block = entry.sealed_blocks().expect("blocks")[0].seq;
        let edits_clean = || {
            let st = entry.lock().expect("lock");
            st.edits[&block].sync_handle().is_clean()
        };
        let tombstone = |ts: u64| {
            bucket.remove_record("e", ts).expect("remove");
            assert!(
                !edits_clean(),
                "never mode: the tombstone is not synced yet"
            );
        };
        // A block's first change commits the index itself; the next ones wait for a commit.
        bucket.remove_record("e", 20).expect("remove");
        tombstone(40);
        write(15);
        assert!(
            edits_clean(),
            "the save that started the late log synced it"
        );

        for ts in [60, 70, 80] {
            write(ts);
        }
        tombstone(30);
        write(90);
        let st = entry.lock().expect("lock");
        assert!(!st.sealing.is_empty(), "the open log was frozen");
        drop(st);
        assert!(edits_clean(), "the save that froze the full log synced it");
    }

    /// A commit that arrives after the entry's directory was renamed away (its removal
    /// under way, the entry not yet marked removed) must not write an index into whatever
    /// the old path names now — here a directory re-created at the same place.
    #[test]
    fn a_commit_during_removal_writes_nothing_at_the_old_path() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Store::open(Config::new(dir.path())).expect("store");
        let settings = BucketSettings {
            max_block_records: 2,
            ..Default::default()
        };
        let bucket = store.create_bucket("b", settings).expect("bucket");
        for ts in 1..=5u64 {
            let meta = RecordMeta {
                timestamp: ts,
                labels: Default::default(),
                content_type: "text/plain".into(),
                size: 1,
            };
            bucket.write("e", meta, b"x").expect("write");
        }
        // The full logs are sealed by the background thread: its blocks, once it is done.
        bucket.catch_up().expect("the seals");
        let entry = bucket.entry("e").expect("entry");
        let old = entry.sealed_blocks().expect("blocks")[0].clone();
        let mut retiered = old.clone();
        retiered.codec = Codec::Zstd(3);
        let replacement = Replacement {
            old: vec![old.version()],
            new: vec![retiered],
            files: Vec::new(),
        };
        let entry_dir = bucket.dir().join("e");
        let stopped = entry.begin_removal();
        std::fs::rename(&entry_dir, dir.path().join("moved")).expect("rename");
        std::fs::create_dir(&entry_dir).expect("re-created");
        let (applied, files) = entry
            .replace_blocks(vec![replacement])
            .expect("a commit during a removal is dropped, not an error");
        drop(stopped);
        assert_eq!(applied, [false]);
        assert!(files.into_parts().is_empty());
        let written: Vec<_> = std::fs::read_dir(&entry_dir)
            .expect("listing")
            .map(|f| f.expect("item").file_name())
            .collect();
        assert!(written.is_empty(), "written at the old path: {written:?}");
    }
}
