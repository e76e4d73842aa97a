//! Sealing full logs into blocks off the write path, in place.
//!
//! The write that finds its log full does not copy it: it **freezes** it — one index
//! commit names the full log among `sealing_logs` and names a new, empty log in its place
//! — appends to the new log, and is acknowledged on its own sync as any other write. The
//! full log keeps answering reads, relabels and removals of its records (no record is
//! added to it) until a **seal** makes the log file itself the block, without writing its
//! payload again (`format/block/in_log.rs`):
//!
//! 1. under the lock, a snapshot of the log's live records and its length;
//! 2. without the lock, those records cut into frames of about the frame size, and each
//!    frame's checksum computed from the log's bytes (read back from the page cache,
//!    each record checked against its operation's checksum on the way);
//! 3. under the lock, if the log has not changed since the snapshot, the seal trailer
//!    (record table and footer, kilobytes) appended to the log;
//! 4. without the lock, the log synced up to the trailer's end;
//! 5. under the lock, if the log has not changed since the trailer (a relabel or removal
//!    appended after it means the trailer is stale: the seal starts over and appends a
//!    newer one), `<seq>.log` renamed `<seq>.blk` and the index commit that names the
//!    block instead of the log (its directory sync makes the rename durable with it).
//!
//! A crash before step 5's rename leaves the log named, with a trailer that replays as
//! nothing; between the rename and the commit, the index names a log that is now
//! `<seq>.blk`, and the open renames it back (`seal_names.rs`); after the commit,
//! nothing is left over. The open seals what a crash left waiting before anyone writes.
//! The third attempt holds the lock from the snapshot to the commit, so a log relabeled
//! during every attempt is still sealed.
//!
//! The background sealer thread (`storage/sealer.rs`) seals; at most
//! [`MAX_SEALING_LOGS`] full logs wait per entry, and a writer that would freeze one more
//! seals the oldest itself first (back pressure: disk and memory stay bounded when the
//! disk cannot keep up).

use std::fs::File;
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};

use super::{Entry, EntryState, LogKind, ObsoleteFiles, take_index_log};
use crate::error::{Error, Result};
use crate::storage::format::block::{
    FrameSpan, SpanChecksums, check_frames, plan_frames, seal_trailer,
};
use crate::storage::format::block_meta::BlockSummary;
use crate::storage::format::block_meta::FrameInfo;
use crate::storage::format::index::{BlockEntry, block_path, log_path};
use crate::storage::format::log::LogRecord;
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

/// What a seal read of a full log under the lock (step 1).
struct SealSnapshot {
    /// The log's sequence number, which the block keeps.
    seq: u64,
    /// Its length then: a log that grew since (a relabel, a removal) is sealed again.
    len: u64,
    /// Its live records then, in timestamp order.
    records: Vec<LogRecord>,
    /// A handle on its file.
    file: Arc<File>,
}

/// The trailer a seal appended (step 3).
struct Trailer {
    /// The log's length after it: the block's file length.
    end: u64,
    /// What the block holds.
    summary: BlockSummary,
}

/// How a seal's commit went.
enum Sealed {
    Committed,
    /// The log changed since the snapshot or the trailer: seal it again.
    Changed,
    /// The entry's removal began: nothing more is written.
    Stopped,
}

/// How many full logs of one entry may wait for their seal before a writer seals one.
pub(crate) const MAX_SEALING_LOGS: usize = 2;

/// Seals of one log tried without holding the lock throughout before one holds it: a log
/// relabeled during every attempt would otherwise never be sealed.
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
        // Checksums computed by an attempt that went stale are kept: the log's bytes
        // never change, only grow.
        let mut known = SpanChecksums::new();
        for attempt in 1..=SEAL_ATTEMPTS {
            let held = attempt == SEAL_ATTEMPTS;
            let mut st = self.lock()?;
            let Some(snapshot) = self.seal_snapshot(&mut st)? else {
                return Ok(false);
            };
            if snapshot.records.is_empty() {
                // Every record was removed: the log goes with nothing to write.
                self.drop_empty_log(st, snapshot.seq)?;
                return Ok(true);
            }
            // Step 2: the frames' bytes are read from the page cache without the lock,
            // except by the last attempt, which finds most of them in `known`.
            let frames = |known: &mut SpanChecksums| self.seal_frames(&snapshot, known);
            let (frames, mut st) = match held {
                true => (frames(&mut known)?, st),
                false => {
                    drop(st);
                    let frames = frames(&mut known)?;
                    (frames, self.lock()?)
                }
            };
            let Some(trailer) = self.append_trailer(&mut st, &snapshot, &frames)? else {
                continue;
            };
            let st = match held {
                true => {
                    self.sync_trailer(&st, &snapshot, &trailer)?;
                    st
                }
                false => {
                    let sync = st
                        .log(LogKind::Sealing(snapshot.seq))
                        .map(|log| log.sync_handle().clone());
                    drop(st);
                    if let Some(sync) = sync {
                        sync.wait_durable(trailer.end)?;
                    }
                    self.lock()?
                }
            };
            match self.commit_seal(st, &snapshot, &trailer)? {
                Sealed::Committed => return Ok(true),
                Sealed::Stopped => return Ok(false),
                Sealed::Changed => continue,
            }
        }
        Ok(true)
    }

    /// Step 1: what the oldest log waiting for its seal holds; `None` when no log waits.
    fn seal_snapshot(&self, st: &mut EntryState) -> Result<Option<SealSnapshot>> {
        let Some((seq, log)) = st.sealing.first() else {
            return Ok(None);
        };
        Ok(Some(SealSnapshot {
            seq: *seq,
            len: log.file_len(),
            records: log.records().values().cloned().collect(),
            file: log.file()?,
        }))
    }

    /// Step 2: the frames of `snapshot`'s records and their checksums (`known`: those
    /// computed before).
    fn seal_frames(
        &self,
        snapshot: &SealSnapshot,
        known: &mut SpanChecksums,
    ) -> Result<(Vec<FrameSpan>, Vec<FrameInfo>)> {
        let spans = plan_frames(&snapshot.records, self.frame_size() as u64);
        let path = log_path(&self.dir, snapshot.seq);
        let frames = check_frames(&snapshot.file, &path, &snapshot.records, &spans, known)?;
        Ok((spans, frames))
    }

    /// Step 3: appends the seal trailer of `snapshot` (cut into `frames`) to its log,
    /// unless the log changed since (`None`: start over) or the entry's removal began.
    fn append_trailer(
        &self,
        st: &mut EntryState,
        snapshot: &SealSnapshot,
        (spans, frames): &(Vec<FrameSpan>, Vec<FrameInfo>),
    ) -> Result<Option<Trailer>> {
        let Some(log) = st.log_mut(LogKind::Sealing(snapshot.seq)) else {
            return Ok(None);
        };
        if log.file_len() != snapshot.len || self.is_removing() {
            return Ok(None);
        }
        let mut summary = None;
        let end = log.append_seal(|meta_offset| {
            let (bytes, s) = seal_trailer(&snapshot.records, spans, frames, meta_offset);
            summary = Some(s);
            bytes
        })?;
        let summary = summary.ok_or_else(|| Error::internal("the seal trailer was not built"))?;
        Ok(Some(Trailer { end, summary }))
    }

    /// Step 4 under the lock (the last attempt): the log synced up to its trailer.
    fn sync_trailer(
        &self,
        st: &EntryState,
        snapshot: &SealSnapshot,
        trailer: &Trailer,
    ) -> Result<()> {
        match st.log(LogKind::Sealing(snapshot.seq)) {
            Some(log) => log.sync_handle().wait_durable(trailer.end),
            None => Ok(()),
        }
    }

    /// Step 5: if the log still ends with `trailer`, renames it to the block's name and
    /// commits the index that names the block instead of the log.
    fn commit_seal(
        &self,
        mut st: MutexGuard<'_, EntryState>,
        snapshot: &SealSnapshot,
        trailer: &Trailer,
    ) -> Result<Sealed> {
        if self.is_removing() {
            return Ok(Sealed::Stopped);
        }
        let unchanged = st
            .log(LogKind::Sealing(snapshot.seq))
            .is_some_and(|log| log.file_len() == trailer.end);
        if !unchanged {
            return Ok(Sealed::Changed);
        }
        let (from, to) = (
            log_path(&self.dir, snapshot.seq),
            block_path(&self.dir, snapshot.seq),
        );
        crate::storage::fence::check()?;
        std::fs::rename(&from, &to).map_err(|e| {
            Error::io(
                format!(
                    "renaming the sealed log {} to {}",
                    from.display(),
                    to.display()
                ),
                e,
            )
        })?;
        let mut next = st.index.clone();
        take_index_log(&mut next, LogKind::Sealing(snapshot.seq));
        next.blocks
            .push(BlockEntry::sealed_in_log(snapshot.seq, &trailer.summary));
        if let Err(e) = self.commit(&mut st, next, &[], &[]) {
            // The index in memory still names the log; the one on disk may name either
            // (a save can fail after its rename): the open restores whichever name it
            // names.
            if let Err(back) = std::fs::rename(&to, &from) {
                log::error!(
                    "renaming {} back to {} after a failed commit: {back}; the next open restores the name the index expects",
                    to.display(),
                    from.display()
                );
            }
            return Err(e);
        }
        if let Some(log) = st.take_log(LogKind::Sealing(snapshot.seq)) {
            // Every live record is now in a synced, committed block.
            log.retire();
        }
        Ok(Sealed::Committed)
    }

    /// Commits the index without log `seq`, every record of which was removed, then
    /// removes the log's file after the lock.
    fn drop_empty_log(&self, mut st: MutexGuard<'_, EntryState>, seq: u64) -> Result<()> {
        let mut next = st.index.clone();
        take_index_log(&mut next, LogKind::Sealing(seq));
        self.commit(&mut st, next, &[], &[])?;
        if let Some(log) = st.take_log(LogKind::Sealing(seq)) {
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
    use crate::storage::format::block::SpanChecksums;
    use crate::storage::format::index::{EntryIndex, block_path, log_path};
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

    /// Steps 2 and 3 of a seal, as the sealer takes them: the trailer of `taken`
    /// appended to its log.
    fn trailer_of(entry: &super::Entry, taken: &super::SealSnapshot) -> super::Trailer {
        let frames = entry
            .seal_frames(taken, &mut SpanChecksums::new())
            .expect("frames");
        let mut st = entry.lock().expect("lock");
        entry
            .append_trailer(&mut st, taken, &frames)
            .expect("trailer")
            .expect("the log did not change")
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
        snapshot("frozen");

        let taken = snapshot_oldest(&entry);
        let log = log_path(&entry_dir, taken.seq);
        let trailer = trailer_of(&entry, &taken);
        snapshot("trailer-appended");
        let copy = snapshot("trailer-half-written");
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(log_path(&copy, taken.seq))
            .expect("open");
        file.set_len((taken.len + trailer.end) / 2)
            .expect("truncate");
        {
            let st = entry.lock().expect("lock");
            entry.sync_trailer(&st, &taken, &trailer).expect("sync");
        }
        let copy = snapshot("renamed-not-committed");
        std::fs::rename(log_path(&copy, taken.seq), block_path(&copy, taken.seq)).expect("rename");

        let st = entry.lock().expect("lock");
        assert!(matches!(
            entry.commit_seal(st, &taken, &trailer).expect("commit"),
            super::Sealed::Committed
        ));
        assert!(!log.exists(), "the log is the block now");
        let index = EntryIndex::load(&entry_dir).expect("index");
        assert!(index.blocks[0].in_log && index.blocks[0].seq == taken.seq);
        assert_eq!(index.format, crate::storage::format::index::INDEX_FORMAT);
        snapshot("sealed");
        let copy = snapshot("committed-rename-undone");
        std::fs::rename(block_path(&copy, taken.seq), log_path(&copy, taken.seq)).expect("rename");
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

    /// A relabel and a removal that reach a full log after its trailer make the trailer
    /// stale: it is not committed, and the seal made again keeps both.
    #[test]
    fn a_change_after_the_trailer_is_sealed_with_the_log() {
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
        let path = log_path(entry.dir(), taken.seq);
        let trailer = trailer_of(&entry, &taken);
        let mut labels = crate::storage::record::Labels::new();
        labels.insert("seen".into(), "yes".into());
        bucket.update_labels("e", 2, &labels).expect("relabel");
        bucket.remove_record("e", 3).expect("remove");
        let st = entry.lock().expect("lock");
        assert!(matches!(
            entry.commit_seal(st, &taken, &trailer).expect("commit"),
            super::Sealed::Changed
        ));
        assert!(path.exists(), "the stale trailer is not committed");
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
