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

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};

use super::{Entry, EntryState, LogKind, ObsoleteFiles, take_index_log};
use crate::error::Result;
use crate::storage::format::block_meta::BlockSummary;
use crate::storage::format::index::{BlockEntry, block_path, log_path};
use crate::storage::format::log::LogRecord;
use crate::storage::format::rewrite::write_log_records;
use crate::storage::sealer::Sealable;
use crate::storage::sync::fsutil::remove_file_if_exists;

impl Sealable for Entry {
    fn name(&self) -> &str {
        Entry::name(self)
    }

    fn started(&self) {
        self.background_queued.store(false, Ordering::Release);
    }

    fn catch_up(&self) -> Result<()> {
        Entry::seal_all(self)?;
        self.fold_all()
    }
}

/// What a seal read of a full log under the lock: enough to copy it without the lock.
struct SealSnapshot {
    /// The log's sequence number.
    seq: u64,
    /// Its length then: a log that grew since (a relabel, a removal) is sealed again.
    len: u64,
    /// Its live records then, in timestamp order.
    records: Vec<LogRecord>,
    /// A handle on its file, which outlives the file's removal.
    file: Arc<File>,
    /// The block's sequence number.
    block_seq: u64,
}

impl SealSnapshot {
    fn block_path(&self, dir: &Path) -> PathBuf {
        block_path(dir, self.block_seq)
    }
}

/// How a seal's commit went.
enum Sealed {
    Committed,
    /// The log changed during the copy: seal it again.
    Changed,
    /// The entry's removal began: nothing more is written.
    Stopped,
}

/// How many full logs of one entry may wait for their seal before a writer seals one.
pub(crate) const MAX_SEALING_LOGS: usize = 2;

/// Seals of one log tried without the lock before the copy is made under it: a log
/// relabeled during every copy would otherwise never be sealed.
const SEAL_ATTEMPTS: usize = 3;

impl Entry {
    /// Takes the full log of `kind` off the write path: one index commit names it among
    /// the logs waiting for their seal and, with `start_next`, a new empty log of `kind`
    /// in its place, and asks the background thread for the seal.
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
        if let Err(e) = self.save_index(st, &next) {
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
        self.request_background();
        Ok(())
    }

    /// Asks the background thread for this entry's seals, once until it
    /// starts on them. An entry its bucket does not share yet (at open) has them done
    /// by its open or its next request.
    pub(super) fn request_background(&self) {
        if self.background_queued.swap(true, Ordering::AcqRel) {
            return;
        }
        match self.this.upgrade() {
            Some(this) => self.ctx.seals.request(this),
            None => self.background_queued.store(false, Ordering::Release),
        }
    }

    /// Seals every log waiting for its seal.
    pub(crate) fn seal_all(&self) -> Result<()> {
        while self.seal_next()? {}
        Ok(())
    }

    /// Excludes other sealers of this entry while the guard lives; `None` once the
    /// entry's removal has begun.
    pub(super) fn seal_guard(&self) -> Option<MutexGuard<'_, ()>> {
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
            let Some(snapshot) = self.seal_snapshot(&mut st)? else {
                return Ok(false);
            };
            if snapshot.records.is_empty() {
                // Every record was removed: the log goes with nothing to write.
                self.retire_sealed_log(st, snapshot.seq, None)?;
                return Ok(true);
            }
            // The last attempt copies under the lock, so nothing can change the log.
            let held = (attempt == SEAL_ATTEMPTS).then_some(st);
            let written = self.write_sealed_block(&snapshot);
            let st = match held {
                Some(st) => st,
                None => match self.lock() {
                    Ok(st) => st,
                    Err(e) => {
                        let _ = remove_file_if_exists(&snapshot.block_path(&self.dir));
                        return Err(e);
                    }
                },
            };
            match self.commit_seal(st, &snapshot, written?)? {
                Sealed::Committed => return Ok(true),
                Sealed::Stopped => return Ok(false),
                Sealed::Changed => continue,
            }
        }
        Ok(true)
    }

    /// Step 1: what the oldest log waiting for its seal holds, and a fresh sequence
    /// number for its block; `None` when no log waits.
    fn seal_snapshot(&self, st: &mut EntryState) -> Result<Option<SealSnapshot>> {
        let Some((seq, log)) = st.sealing.first() else {
            return Ok(None);
        };
        let snapshot = SealSnapshot {
            seq: *seq,
            len: log.file_len(),
            records: log.records().values().cloned().collect(),
            file: log.file()?,
            block_seq: 0,
        };
        Ok(Some(SealSnapshot {
            block_seq: st.index.take_seq(),
            ..snapshot
        }))
    }

    /// Step 2: the block file of a snapshot's records, written and fsynced.
    fn write_sealed_block(&self, snapshot: &SealSnapshot) -> Result<BlockSummary> {
        write_log_records(
            &snapshot.file,
            &log_path(&self.dir, snapshot.seq),
            &snapshot.records,
            &snapshot.block_path(&self.dir),
            self.ctx.frame_size,
        )
    }

    /// Step 3: commits the block written from `snapshot` if the log did not change
    /// since; otherwise removes the block.
    fn commit_seal(
        &self,
        st: MutexGuard<'_, EntryState>,
        snapshot: &SealSnapshot,
        summary: BlockSummary,
    ) -> Result<Sealed> {
        let unchanged = st
            .log(LogKind::Sealing(snapshot.seq))
            .is_some_and(|log| log.file_len() == snapshot.len);
        if self.is_removing() || !unchanged {
            // The removal waits for the seal guard, so the path still names this
            // entry's directory. A changed log is sealed again from its new state.
            let _ = remove_file_if_exists(&snapshot.block_path(&self.dir));
            return Ok(match self.is_removing() {
                true => Sealed::Stopped,
                false => Sealed::Changed,
            });
        }
        let block = BlockEntry::from_summary(snapshot.block_seq, &summary);
        self.retire_sealed_log(st, snapshot.seq, Some(block))?;
        Ok(Sealed::Committed)
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

/// A kill at each step of a seal: the data directory as a killed process leaves it
/// there (every byte written is in the page cache, so a copy of the directory is what a
/// restart finds), opened again, serves every record once and keeps no leftover.
#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::storage::config::Config;
    use crate::storage::format::index::{EntryIndex, log_path};
    use crate::storage::query::QueryOptions;
    use crate::storage::record::RecordMeta;
    use crate::storage::settings::BucketSettings;
    use crate::storage::store::Store;

    const RECORDS: u64 = 5;

    fn payload(ts: u64) -> Vec<u8> {
        format!("frame {ts}; ").repeat(300).into_bytes()
    }

    fn write(store: &Store, ts: u64) {
        let meta = RecordMeta {
            timestamp: ts,
            labels: Default::default(),
            content_type: "application/octet-stream".into(),
            size: 0,
        };
        let bucket = store.bucket("b").expect("bucket");
        bucket.write("e", meta, &payload(ts)).expect("write");
    }

    /// Freezes the entry's full open log as the write that fills it does.
    fn freeze_open(entry: &super::Entry) {
        let mut st = entry.lock().expect("lock");
        entry
            .freeze(&mut st, super::LogKind::Open, true)
            .expect("freeze");
    }

    /// Step 1 of a seal, as the sealer takes it: the oldest waiting log's snapshot.
    fn snapshot_oldest(entry: &super::Entry) -> super::SealSnapshot {
        let mut st = entry.lock().expect("lock");
        entry
            .seal_snapshot(&mut st)
            .expect("snapshot")
            .expect("a log waits for its seal")
    }

    fn copy_dir(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).expect("mkdir");
        for item in std::fs::read_dir(from).expect("listing") {
            let item = item.expect("item");
            let target = to.join(item.file_name());
            if item.file_type().expect("type").is_dir() {
                copy_dir(&item.path(), &target);
            } else {
                std::fs::copy(item.path(), &target).expect("copy");
            }
        }
    }

    /// Opens the copy `data`, checks every record (`1..=records`) once and byte-exact, and that the
    /// entry's directory holds only what its index names, no log waiting for a seal.
    fn verify(data: &Path, step: &str, records: u64) {
        let store = Store::open(Config::new(data)).expect(step);
        let bucket = store.bucket("b").expect(step);
        for ts in 1..=records {
            let record = bucket.read("e", Some(ts)).expect(step);
            let got = record.payload.expect(step);
            assert_eq!(got.as_slice(), payload(ts), "{step}: record {ts}");
        }
        let options = QueryOptions {
            entries: vec!["e".into()],
            ..Default::default()
        };
        let stamps: Vec<u64> = bucket
            .query(&options)
            .expect(step)
            .map(|r| r.expect(step).meta.timestamp)
            .collect();
        assert_eq!(stamps, (1..=records).collect::<Vec<_>>(), "{step}");
        drop(store);
        let dir = data.join("b").join("e");
        let index = EntryIndex::load(&dir).expect(step);
        assert!(index.sealing_logs.is_empty(), "{step}: sealed at open");
        let kept = index.kept_files();
        for item in std::fs::read_dir(&dir).expect(step) {
            let name = item.expect(step).file_name().to_string_lossy().to_string();
            assert!(kept.contains(&name), "{step}: leftover {name}");
        }
    }

    #[test]
    fn a_kill_at_each_step_of_a_seal_loses_nothing_and_leaves_nothing() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let data = tmp.path().join("data");
        let store = Store::open(Config::new(&data)).expect("store");
        let settings = BucketSettings {
            max_block_records: RECORDS - 1,
            ..Default::default()
        };
        store.create_bucket("b", settings).expect("bucket");
        for ts in 1..RECORDS {
            write(&store, ts);
        }
        let entry = store.bucket("b").expect("b").entry("e").expect("e");
        let entry_dir = data.join("b").join("e");
        let mut steps = Vec::new();
        let mut snapshot = |name: &str| {
            let to = tmp.path().join(name);
            copy_dir(&data, &to);
            steps.push(name.to_string());
            to.join("b").join("e")
        };

        // Held, the sealer thread waits: this test takes the seal's steps itself.
        let held = entry.sealing.lock().expect("seal guard");
        // Killed inside the freeze: the next log created, the index not yet replaced.
        let next_seq = EntryIndex::load(&entry_dir).expect("index").next_seq;
        let copy = snapshot("freezing");
        std::fs::write(log_path(&copy, next_seq), b"HLLOG001").expect("stray log");
        std::fs::write(copy.join(".index.tmp"), b"{\"half").expect("stray index");

        freeze_open(&entry);
        write(&store, RECORDS);
        let index = EntryIndex::load(&entry_dir).expect("index");
        assert_eq!(index.sealing_logs.len(), 1, "the full log is frozen");
        assert!(index.blocks.is_empty(), "and did not copy it");
        let frozen = snapshot("frozen");

        let taken = snapshot_oldest(&entry);
        let summary = entry.write_sealed_block(&taken).expect("block");
        snapshot("block-written");
        let copy = snapshot("block-half-written");
        let block = taken.block_path(&copy);
        let len = std::fs::metadata(&block).expect("block").len();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&block)
            .expect("open");
        file.set_len(len / 2).expect("truncate");

        let st = entry.lock().expect("lock");
        assert!(matches!(
            entry.commit_seal(st, &taken, summary).expect("commit"),
            super::Sealed::Committed
        ));
        snapshot("sealed");
        let copy = snapshot("committed-log-not-removed");
        let log = log_path(&frozen, taken.seq);
        std::fs::copy(&log, log_path(&copy, taken.seq)).expect("log back");
        drop(held);
        drop(store);

        for step in steps {
            // Killed before the fifth write was acknowledged, the copy holds four.
            let records = if step == "freezing" {
                RECORDS - 1
            } else {
                RECORDS
            };
            verify(&tmp.path().join(&step), &step, records);
        }
    }

    /// A relabel and a removal that reach a full log while its copy is made make the
    /// copy stale: it is not committed, and the seal made again keeps both.
    #[test]
    fn a_change_during_the_copy_is_sealed_with_the_log() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let store = Store::open(Config::new(tmp.path())).expect("store");
        let settings = BucketSettings {
            max_block_records: RECORDS - 1,
            ..Default::default()
        };
        let bucket = store.create_bucket("b", settings).expect("bucket");
        for ts in 1..RECORDS {
            write(&store, ts);
        }
        let entry = bucket.entry("e").expect("e");
        let held = entry.sealing.lock().expect("seal guard");
        freeze_open(&entry);
        write(&store, RECORDS);
        let taken = snapshot_oldest(&entry);
        let mut labels = crate::storage::record::Labels::new();
        labels.insert("seen".into(), "yes".into());
        bucket.update_labels("e", 2, &labels).expect("relabel");
        bucket.remove_record("e", 3).expect("remove");
        let summary = entry.write_sealed_block(&taken).expect("block");
        let block = taken.block_path(entry.dir());
        let st = entry.lock().expect("lock");
        assert!(matches!(
            entry.commit_seal(st, &taken, summary).expect("commit"),
            super::Sealed::Changed
        ));
        assert!(!block.exists(), "the stale copy is removed");
        drop(held);
        bucket.catch_up().expect("seal");
        let index = EntryIndex::load(entry.dir()).expect("index");
        assert!(index.sealing_logs.is_empty());
        assert_eq!(index.blocks.len(), 1);
        assert_eq!(index.blocks[0].record_count, RECORDS - 2);
        let relabeled = bucket.read("e", Some(2)).expect("read");
        assert_eq!(relabeled.meta.labels, labels);
        assert!(bucket.read("e", Some(3)).is_err(), "removed");
    }
}
