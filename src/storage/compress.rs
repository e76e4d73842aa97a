//! Parallel recompression of sealed blocks: the primitive behind the compress lifecycle.
//!
//! A block is eligible when it is sealed, all its records lie in `[start, stop)`, and its
//! codec is weaker than the target. The work is one stream of tasks over all eligible
//! blocks — per block, lz4-packing its record table, and re-encoding each frame from the
//! memory-mapped source. Tasks run on a rayon pool in windows of about eight frames' worth
//! of input per thread, while the calling thread writes the previous window, in order, into
//! the new block files and prepares the next one (mapping, checksum verification, table
//! packing); a committer thread fsyncs finished files and commits them. So one
//! huge block keeps every thread busy, many small blocks do too, and memory stays bounded
//! by two windows (threads × frame size), not by the data.
//!
//! Concurrency follows DESIGN.md: eligible blocks are snapshotted under a short entry lock,
//! encoded with no lock held, and committed under a short lock only if the block's sequence
//! number (its version) is unchanged; otherwise the new file is dropped and the block counts
//! as skipped. Commits are batched per entry so a run over thousands of blocks does not
//! rewrite the index thousands of times. Cancellation is checked between windows; a
//! cancelled run commits the blocks it finished and discards the one it was writing, so every
//! block is either fully old or fully new.

use std::borrow::Cow;
use std::collections::{HashSet, VecDeque};
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use rayon::prelude::*;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::storage::block::{BlockWriter, SealedBlock, encode_frame};
use crate::storage::block_meta as meta;
use crate::storage::bucket::Bucket;
use crate::storage::codec::Codec;
use crate::storage::entry::Entry;
use crate::storage::fsutil::remove_file_if_exists;
use crate::storage::index::{BlockEntry, block_path};

/// Input per window, per thread, in units of the configured frame size (8 MiB with the
/// default 1 MiB frames). Windows are measured in bytes, not frames, so blocks smaller than
/// a frame still make windows big enough to keep every thread busy; memory stays bounded by
/// about twice this (the window being encoded and the one being written) per thread.
const WINDOW_FRAMES_PER_THREAD: u64 = 8;
/// Commit an entry's finished blocks once this many are waiting…
const COMMIT_BATCH: usize = 64;
/// …or once the oldest has waited this long.
const COMMIT_EVERY: Duration = Duration::from_secs(1);

/// The rayon pool recompression runs on; its size is the `compress_threads` setting.
pub struct CompressPool {
    pool: rayon::ThreadPool,
    threads: usize,
}

impl CompressPool {
    /// A pool of `threads` threads (at least one).
    pub fn new(threads: usize) -> Result<Self> {
        if threads == 0 {
            return Err(Error::unprocessable("compress_threads must be at least 1"));
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("halflife-compress-{i}"))
            .build()
            .map_err(|e| Error::internal(format!("starting the compress pool: {e}")))?;
        Ok(CompressPool { pool, threads })
    }

    /// The machine's available parallelism, the default `compress_threads`.
    pub fn default_threads() -> usize {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }

    /// Number of threads.
    pub fn threads(&self) -> usize {
        self.threads
    }
}

/// What a recompression did (or, for an estimate, would do).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CompressStats {
    /// Blocks rewritten (estimate: eligible).
    pub blocks: u64,
    /// Records in those blocks.
    pub records: u64,
    /// Bytes of the blocks before (estimate: the bytes it would read).
    pub bytes_before: u64,
    /// Bytes of the blocks after (estimate: 0, unknown until compressed).
    pub bytes_after: u64,
    /// Eligible blocks left as they were: changed by a writer meanwhile, or unreadable.
    pub skipped: u64,
}

impl CompressStats {
    fn add(&mut self, other: CompressStats) {
        self.blocks += other.blocks;
        self.records += other.records;
        self.bytes_before += other.bytes_before;
        self.bytes_after += other.bytes_after;
        self.skipped += other.skipped;
    }
}

/// Checks that a codec can be a recompression target.
pub fn validate_target(target: Codec) -> Result<()> {
    match target {
        Codec::None => Err(Error::unprocessable(
            "Compression target 'none' is not a compression; use 'lz4' or 'zstd'",
        )),
        Codec::Lz4 => Ok(()),
        Codec::Zstd(level) if (1..=22).contains(&level) => Ok(()),
        Codec::Zstd(level) => Err(Error::unprocessable(format!(
            "zstd level {level} is out of range 1..=22"
        ))),
    }
}

impl Entry {
    /// Snapshot of the blocks a compression to `target` over `[start, stop)` would rewrite,
    /// each with a reserved sequence number for its new file.
    fn compress_candidates(
        &self,
        start: u64,
        stop: u64,
        target: Codec,
    ) -> Result<Vec<(BlockEntry, u64)>> {
        let mut st = self.lock()?;
        let eligible: Vec<BlockEntry> = st
            .index
            .blocks
            .iter()
            .filter(|b| b.first_ts >= start && b.last_ts < stop && b.codec.is_weaker_than(target))
            .cloned()
            .collect();
        // Reserving only bumps the in-memory counter; it is persisted with the next commit,
        // and a file written under a number that never got committed is removed at open.
        Ok(eligible
            .into_iter()
            .map(|b| {
                let seq = st.index.take_seq();
                (b, seq)
            })
            .collect())
    }

    /// Commits recompressed blocks whose source is unchanged; returns what was committed
    /// and how many were skipped. Files of skipped blocks are removed.
    fn commit_recompressed(&self, done: Vec<Finished>) -> Result<CompressStats> {
        let mut stats = CompressStats::default();
        let mut st = match self.lock() {
            Ok(st) => st,
            Err(e) => {
                for f in &done {
                    f.discard();
                }
                // The entry was removed meanwhile: nothing to commit.
                log::info!(
                    "entry {}: {e}; dropping {} recompressed block(s)",
                    self.name(),
                    done.len()
                );
                stats.skipped += done.len() as u64;
                return Ok(stats);
            }
        };
        let mut next = st.index.clone();
        let mut created = Vec::new();
        let mut obsolete = Vec::new();
        let mut changed = false;
        for f in done {
            match next.blocks.iter().position(|b| b.seq == f.old.seq) {
                Some(pos) => {
                    stats.blocks += 1;
                    stats.records += f.old.record_count;
                    stats.bytes_before += f.old.size;
                    stats.bytes_after += f.new.size;
                    next.blocks[pos] = f.new;
                    changed = true;
                    if let Some(path) = f.path {
                        obsolete.push(f.old.seq);
                        created.push(path);
                    }
                }
                None => {
                    stats.skipped += 1;
                    f.discard();
                }
            }
        }
        if changed {
            self.commit(&mut st, next, &created, &obsolete)?;
        }
        Ok(stats)
    }
}

/// A recompressed block waiting for its commit.
struct Finished {
    old: BlockEntry,
    new: BlockEntry,
    /// The new file; `None` when no frame changed (every frame was stored raw and stayed
    /// raw): the block keeps its file and only its tier changes in the index.
    path: Option<PathBuf>,
}

impl Finished {
    fn discard(&self) {
        if let Some(path) = &self.path {
            let _ = remove_file_if_exists(path);
        }
    }
}

/// One eligible block in the work stream.
struct Job {
    entry: Arc<Entry>,
    old: BlockEntry,
    new_seq: u64,
}

/// What a pool task produces for a block.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    /// The block's record table, lz4-packed (it comes before the frames in the stream).
    Records,
    /// One frame, re-encoded.
    Frame(usize),
}

/// A unit of pool work: one part of one block.
struct Task {
    job: usize,
    part: Part,
    block: Arc<SealedBlock>,
    /// For [`Part::Records`]: the lz4-packed record table, made while the batch was
    /// prepared (off the pool), so the pool threads only re-encode frames.
    packed: Vec<u8>,
}

impl Task {
    /// Bytes the task reads: what windows are measured in.
    fn weight(&self) -> u64 {
        match self.part {
            Part::Records => self.block.records_section().len() as u64,
            Part::Frame(i) => self.block.frames()[i].raw_len,
        }
    }
}

/// The result of a task.
enum Encoded {
    /// The record table (already packed into the task).
    Records,
    /// The codec used, the stored bytes, the raw length.
    Frame(Codec, Vec<u8>, u64),
}

/// The block file being written for the job at the head of the stream.
struct Output {
    job: usize,
    block: Arc<SealedBlock>,
    packed_records: Vec<u8>,
    /// Created at the first frame that changes; until then nothing is written.
    writer: Option<BlockWriter>,
    /// Leading frames that were stored raw and stayed raw: copied from the source when a
    /// later frame changes, never written if none does.
    unchanged: usize,
    path: PathBuf,
}

/// Per-entry queue of finished blocks and when the oldest one finished.
struct PendingCommits {
    entry: Arc<Entry>,
    done: Vec<Finished>,
    since: Instant,
}

fn run_task(task: &Task, target: Codec) -> Result<Encoded> {
    let frame = match task.part {
        Part::Records => return Ok(Encoded::Records),
        Part::Frame(frame) => frame,
    };
    let info = &task.block.frames()[frame];
    let stored = task.block.stored_frame(frame)?;
    let raw: Cow<[u8]> = if info.codec == Codec::None {
        Cow::Borrowed(stored)
    } else {
        Cow::Owned(info.codec.decode(stored, info.raw_len as usize)?)
    };
    let (codec, bytes) = encode_frame(target, &raw)?;
    Ok(Encoded::Frame(codec, bytes, info.raw_len))
}

impl Bucket {
    /// What [`Bucket::compress_blocks`] would rewrite, changing nothing: eligible blocks,
    /// their records, and the bytes it would read.
    pub fn estimate_compress(
        &self,
        entries: &[String],
        start: u64,
        stop: u64,
        target: Codec,
    ) -> Result<CompressStats> {
        validate_target(target)?;
        let mut stats = CompressStats::default();
        for entry in self.select_entries(entries)? {
            let st = entry.lock()?;
            for b in &st.index.blocks {
                if b.first_ts >= start && b.last_ts < stop && b.codec.is_weaker_than(target) {
                    stats.blocks += 1;
                    stats.records += b.record_count;
                    stats.bytes_before += b.size;
                }
            }
        }
        Ok(stats)
    }

    /// Recompresses the sealed blocks of the entries matching `entries` whose records all
    /// lie in `[start, stop)` and whose codec is weaker than `target`, on `pool`. `cancel`
    /// is asked between frame windows (e.g. `&|| flag.load(Ordering::Relaxed)`); when it
    /// says yes, the run commits what it finished and stops.
    pub fn compress_blocks(
        &self,
        entries: &[String],
        start: u64,
        stop: u64,
        target: Codec,
        pool: &CompressPool,
        cancel: &dyn Fn() -> bool,
    ) -> Result<CompressStats> {
        validate_target(target)?;
        let mut jobs = Vec::new();
        for entry in self.select_entries(entries)? {
            for (old, new_seq) in entry.compress_candidates(start, stop, target)? {
                jobs.push(Job {
                    entry: entry.clone(),
                    old,
                    new_seq,
                });
            }
        }
        // Finished block files go to a committer thread, which fsyncs them and commits
        // them in batches while the stream goes on.
        let (commit_tx, commit_rx) = mpsc::channel::<(Arc<Entry>, Finished, Option<File>)>();
        let committer_failed = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let committer = scope.spawn(|| commit_loop(commit_rx, &committer_failed));
            let mut run = Run {
                jobs: &jobs,
                target,
                stats: CompressStats::default(),
                output: None,
                commits: commit_tx,
                failed: HashSet::new(),
            };
            let cancelled = || cancel() || committer_failed.load(Ordering::Relaxed);
            let result = run.stream(pool, &cancelled);
            // Whatever happened, discard a half-written block and let the committer finish.
            if let Some(out) = run.output.take() {
                drop(out.writer);
                let _ = remove_file_if_exists(&out.path);
            }
            let Run {
                mut stats, commits, ..
            } = run;
            drop(commits);
            let committed = committer
                .join()
                .unwrap_or_else(|_| Err(Error::internal("the block committer panicked")));
            result?;
            stats.add(committed?);
            Ok(stats)
        })
    }
}

/// The committer thread: fsyncs finished block files and commits them per entry in
/// batches (64 blocks, or whatever waited a second, or all at the end). After an error it
/// discards what still arrives, raises `failed` so the stream stops, and reports the error.
fn commit_loop(
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
                    f.discard();
                }
                continue;
            }
            match p.entry.commit_recompressed(p.done) {
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
                    finished.discard();
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

/// State of one `compress_blocks` call.
struct Run<'a> {
    jobs: &'a [Job],
    target: Codec,
    stats: CompressStats,
    output: Option<Output>,
    commits: mpsc::Sender<(Arc<Entry>, Finished, Option<File>)>,
    failed: HashSet<usize>,
}

impl Run<'_> {
    /// Runs the stream as a pipeline: while the pool encodes one batch of tasks, this
    /// thread writes the batch before it and prepares the one after it (maps the blocks,
    /// verifies the source frames' checksums, packs the record tables), so the pool
    /// threads only ever re-encode frames (the committer thread syncs and commits
    /// finished blocks).
    fn stream(&mut self, pool: &CompressPool, cancel: &dyn Fn() -> bool) -> Result<()> {
        let frame_size = self.jobs.first().map_or(1 << 20, |j| j.entry.frame_size) as u64;
        let max_window = pool.threads() as u64 * WINDOW_FRAMES_PER_THREAD * frame_size;
        // Windows start at one frame per thread and double up to the full size, so the
        // writing and syncing of the first blocks overlap encoding even in a small run.
        let mut window = pool.threads() as u64 * frame_size;
        let mut queue: VecDeque<Task> = VecDeque::new();
        let mut queued = 0u64;
        let mut next_job = 0;
        let mut encoded: Option<(Vec<Task>, Vec<Result<Encoded>>)> = None;
        let mut batch = self.prepare_batch(window, &mut queue, &mut queued, &mut next_job);
        loop {
            window = (window * 2).min(max_window);
            if cancel() {
                log::info!(
                    "recompression cancelled after {} block(s)",
                    self.stats.blocks
                );
                return Ok(());
            }
            if batch.is_empty() && encoded.is_none() {
                return Ok(());
            }
            let target = self.target;
            let mut results = Vec::new();
            let mut written = Ok(());
            let mut following = Vec::new();
            pool.pool.in_place_scope(|scope| {
                if !batch.is_empty() {
                    scope.spawn(|_| {
                        results = batch.par_iter().map(|t| run_task(t, target)).collect();
                    });
                }
                if let Some((tasks, results)) = encoded.take() {
                    written = self.write_window(tasks, results);
                }
                if written.is_ok() {
                    following = self.prepare_batch(window, &mut queue, &mut queued, &mut next_job);
                }
            });
            written?;
            encoded = (!batch.is_empty()).then_some((batch, results));
            batch = following;
        }
    }

    /// Takes the next window's worth of tasks off the queue, mapping more blocks into it
    /// as needed, and does the tasks' non-encoding work: frame checksums are verified
    /// (the pool then finds them verified) and record tables packed.
    fn prepare_batch(
        &mut self,
        window: u64,
        queue: &mut VecDeque<Task>,
        queued: &mut u64,
        next_job: &mut usize,
    ) -> Vec<Task> {
        while *queued < window && *next_job < self.jobs.len() {
            *queued += self.enqueue(*next_job, queue);
            *next_job += 1;
        }
        let mut batch = Vec::new();
        let mut batch_bytes = 0;
        while batch_bytes < window
            && let Some(mut task) = queue.pop_front()
        {
            match task.part {
                Part::Records => {
                    task.packed = meta::pack_records(task.block.records_section());
                }
                Part::Frame(i) => {
                    // A failure shows again, as the task's error, when the pool reads it.
                    let _ = task.block.stored_frame(i);
                }
            }
            batch_bytes += task.weight();
            batch.push(task);
        }
        *queued -= batch_bytes;
        batch
    }

    /// Maps the next eligible block and queues its tasks, returning their weight; a block
    /// that cannot be read is left as it is and counted as skipped.
    fn enqueue(&mut self, job_index: usize, queue: &mut VecDeque<Task>) -> u64 {
        let job = &self.jobs[job_index];
        match job.entry.block_frames(&job.old) {
            Ok(block) => {
                let parts = std::iter::once(Part::Records)
                    .chain((0..block.frames().len()).map(Part::Frame));
                let mut weight = 0;
                for part in parts {
                    let task = Task {
                        job: job_index,
                        part,
                        block: block.clone(),
                        packed: Vec::new(),
                    };
                    weight += task.weight();
                    queue.push_back(task);
                }
                weight
            }
            Err(e) => {
                log::warn!("not recompressing: {e}");
                self.stats.skipped += 1;
                0
            }
        }
    }

    fn write_window(&mut self, tasks: Vec<Task>, results: Vec<Result<Encoded>>) -> Result<()> {
        for (task, result) in tasks.into_iter().zip(results) {
            if self.failed.contains(&task.job) {
                continue;
            }
            match result {
                Ok(encoded) => self.write_part(task, encoded)?,
                Err(e) => {
                    // A damaged source frame: leave that block as it is, go on with the rest.
                    log::warn!("not recompressing: {e}");
                    self.stats.skipped += 1;
                    self.failed.insert(task.job);
                    if let Some(out) = self.output.take_if(|o| o.job == task.job) {
                        drop(out.writer);
                        let _ = remove_file_if_exists(&out.path);
                    }
                }
            }
        }
        Ok(())
    }

    fn write_part(&mut self, task: Task, encoded: Encoded) -> Result<()> {
        let job = &self.jobs[task.job];
        let (codec, bytes, raw_len) = match encoded {
            Encoded::Records => {
                self.output = Some(Output {
                    job: task.job,
                    block: task.block,
                    packed_records: task.packed,
                    writer: None,
                    unchanged: 0,
                    path: block_path(job.entry.dir(), job.new_seq),
                });
                return Ok(());
            }
            Encoded::Frame(codec, bytes, raw_len) => (codec, bytes, raw_len),
        };
        let out = match self.output.as_mut() {
            Some(out) if out.job == task.job => out,
            _ => return Err(Error::internal("recompression frames arrived out of order")),
        };
        let Part::Frame(index) = task.part else {
            return Err(Error::internal("a record table arrived as a frame"));
        };
        let unchanged = codec == Codec::None && out.block.frames()[index].codec == Codec::None;
        match out.writer.as_mut() {
            // Incompressible data already stored raw: writing it again would change
            // nothing but wear the disk.
            None if unchanged => out.unchanged += 1,
            None => {
                let mut writer = BlockWriter::create(&out.path, self.target, job.entry.frame_size)?;
                for i in 0..out.unchanged {
                    let info = &out.block.frames()[i];
                    writer.append_encoded_frame(
                        Codec::None,
                        out.block.stored_frame(i)?,
                        info.raw_len,
                    )?;
                }
                writer.append_encoded_frame(codec, &bytes, raw_len)?;
                out.writer = Some(writer);
            }
            Some(writer) => writer.append_encoded_frame(codec, &bytes, raw_len)?,
        }
        if index != out.block.frames().len() - 1 {
            return Ok(());
        }
        let out = self
            .output
            .take()
            .expect("the output being finished exists");
        let (finished, file) = match out.writer {
            Some(writer) => {
                let (summary, file) =
                    writer.finish_copied(&out.block, &job.old, &out.packed_records)?;
                let finished = Finished {
                    old: job.old.clone(),
                    new: BlockEntry::from_summary(job.new_seq, &summary),
                    path: Some(out.path),
                };
                (finished, Some(file))
            }
            None => {
                // No frame changed: the block keeps its file and takes the new tier, so
                // it is not reconsidered by every run.
                let mut new = job.old.clone();
                new.codec = self.target;
                let finished = Finished {
                    old: job.old.clone(),
                    new,
                    path: None,
                };
                (finished, None)
            }
        };
        self.commits
            .send((job.entry.clone(), finished, file))
            .map_err(|_| Error::internal("the block committer stopped"))
    }
}
