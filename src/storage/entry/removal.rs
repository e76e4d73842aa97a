//! Removing records in bulk: a time range (remove-queries, delete policies, maintenance)
//! planned before anything is written, and whole blocks (the FIFO quota).

use super::{Entry, ObsoleteFiles, take_index_log};
use crate::error::Result;
use crate::storage::entry::bulk::{BlockPlan, RecordFilter, RemoveStats, plan_removal};
use crate::storage::format::edits::BlockChange;
use crate::storage::format::index::log_path;
use crate::storage::sync::Pending;

impl Entry {
    /// Removes every record with `start <= ts < stop` that passes `filter`; with `dry_run`
    /// only counts them. Sealed-block changes commit in one index update; returns once the
    /// removal is as durable as the sync mode promises.
    pub fn remove_range(
        &self,
        start: u64,
        stop: u64,
        filter: Option<&RecordFilter>,
        dry_run: bool,
    ) -> Result<RemoveStats> {
        let mut st = self.lock()?;
        // Plan first, so a failing filter aborts before anything is written.
        let plan = plan_removal(self, &st, start, stop, filter)?;
        if dry_run {
            return Ok(plan.stats);
        }
        let mut next = st.index.clone();
        let mut obsolete = Vec::new();
        let mut trims = Vec::new();
        for (b, action) in st.index.blocks.iter().zip(plan.blocks) {
            match action {
                BlockPlan::Keep => {}
                BlockPlan::Drop => obsolete.push(b.seq),
                BlockPlan::Trim(doomed) => trims.push((b.seq, doomed)),
            }
        }
        next.blocks.retain(|b| !obsolete.contains(&b.seq));

        // A log whose every record goes is dropped with the commit; others get removals.
        let mut dropped_logs = Vec::new();
        for (kind, doomed) in &plan.logs {
            let log = st.log(*kind).expect("the plan names only existing logs");
            if doomed.len() == log.records().len()
                && let Some(seq) = take_index_log(&mut next, *kind)
            {
                dropped_logs.push((*kind, seq));
            }
        }
        // Whole blocks are unlinked after the lock is released (a delete policy may drop
        // hundreds; writers need not wait for that).
        let mut dropped_files = ObsoleteFiles::none();
        if next != st.index {
            dropped_files = self.commit_deferred(&mut st, next, &[], &obsolete)?;
        }
        // Records cut out of a block become tombstones: metadata only, whatever the
        // block's size and codec (a fold or a drop may follow, see `change_block`).
        let mut pending = Pending::none();
        let mut flags_to_commit = false;
        for (seq, doomed) in trims {
            if let Some(pos) = st.index.blocks.iter().position(|b| b.seq == seq) {
                let (p, flag) =
                    self.change_block_deferred(&mut st, pos, BlockChange::Remove(doomed))?;
                pending.add(p);
                flags_to_commit |= flag;
            }
        }
        if flags_to_commit {
            // One commit names every block this removal gave an edit log.
            let next = st.index.clone();
            self.commit(&mut st, next, &[], &[])?;
        }
        let mut dropped_log_files = Vec::new();
        for (kind, doomed) in plan.logs {
            if let Some((_, seq)) = dropped_logs.iter().find(|(k, _)| *k == kind) {
                if let Some(log) = st.take_log(kind) {
                    // The commit dropped it: nothing in it is needed any more.
                    log.retire();
                }
                dropped_log_files.push(log_path(&self.dir, *seq));
            } else if let Some(log) = st.log_mut(kind) {
                for ts in doomed {
                    log.append_remove(ts)?;
                }
                pending.add(self.after_append(log));
            }
        }
        // A dropped log may be a full one (64 MB): unlinked after the lock, as the blocks.
        let dropped_log_files = ObsoleteFiles::collect(&self.dir, dropped_log_files);
        drop(st);
        dropped_files.remove();
        dropped_log_files.remove();
        pending.wait()?;
        Ok(plan.stats)
    }

    /// Removes sealed block `seq` as a whole (the FIFO quota); returns its record count, 0
    /// when it is no longer there.
    pub(crate) fn drop_block(&self, seq: u64) -> Result<u64> {
        let mut st = self.lock()?;
        let Some(pos) = st.index.blocks.iter().position(|b| b.seq == seq) else {
            return Ok(0);
        };
        let mut next = st.index.clone();
        let gone = next.blocks.remove(pos);
        let files = self.commit_deferred(&mut st, next, &[], &[seq])?;
        drop(st);
        // The write that asked for room waits for the commit, not for the unlink.
        self.ctx.seals.later(Box::new(move || files.remove()));
        Ok(gone.live_records())
    }
}

#[cfg(test)]
mod tests {
    use crate::storage::config::Config;
    use crate::storage::format::index::block_path;
    use crate::storage::record::{Labels, RecordMeta};
    use crate::storage::settings::BucketSettings;
    use crate::storage::store::Store;

    /// A FIFO eviction waits for the commit that drops the block, not for the unlink of
    /// its file: that is queued for the background thread, held off here behind another
    /// entry's seal, and done once the thread gets to it.
    #[test]
    fn an_eviction_leaves_the_unlink_to_the_background_thread() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(Config::new(dir.path())).expect("store");
        let settings = BucketSettings {
            max_block_records: 2,
            ..Default::default()
        };
        let bucket = store.create_bucket("b", settings).expect("bucket");
        let write = |entry: &str, ts: u64| {
            let meta = RecordMeta {
                timestamp: ts,
                labels: Labels::new(),
                content_type: "text/plain".into(),
                size: 0,
            };
            bucket.write(entry, meta, b"payload").expect("write");
        };
        for ts in 1..=3 {
            write("e", ts);
        }
        bucket.catch_up().expect("sealed");
        write("busy", 1);
        let busy = bucket.entry("busy").expect("busy");
        let held = busy.sealing.lock().expect("guard");
        // The third write freezes a full log and asks the thread, which waits for the
        // guard: what is queued after it waits too.
        write("busy", 2);
        write("busy", 3);
        let entry = bucket.entry("e").expect("e");
        let evicted = entry.sealed_blocks().expect("blocks")[0].seq;
        assert_eq!(entry.drop_block(evicted).expect("evict"), 2);
        let file = block_path(entry.dir(), evicted);
        assert!(
            !entry
                .sealed_blocks()
                .expect("blocks")
                .iter()
                .any(|b| b.seq == evicted),
            "committed"
        );
        assert!(file.exists(), "the evicting writer did not unlink it");
        drop(held);
        // Returns once the thread has done what was queued before: the unlink included.
        entry.ctx.seals.barrier();
        assert!(!file.exists(), "the background thread unlinked it");
    }
}
