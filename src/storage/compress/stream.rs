//! The encoding side of recompression: the stream of tasks over the eligible blocks. The
//! calling thread opens the blocks and hands their parts to the pool one task each, while
//! less than a bounded amount of input is out; the pool packs record tables and re-encodes
//! frames; the calling thread writes the results back in stream order as they arrive.
//! There is no barrier: nobody waits at the end of a batch while another thread finishes
//! the last frame of it.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fs::File;
use std::path::PathBuf;
use std::sync::{Arc, MutexGuard};

use super::commit::{Finished, FinishedBlock};
use super::join::{JoinSource, Joined};
use super::{CompressPool, CompressStats, Job};
use crate::error::{Error, Result};
use crate::storage::format::block::{BlockWriter, SealedBlock, encode_frame};
use crate::storage::format::block_meta as meta;
use crate::storage::format::codec::Codec;
use crate::storage::format::index::{BlockEntry, block_path};
use crate::storage::sync::fsutil::remove_file_if_exists;

/// Input out at once (handed to the pool and not written back yet), per pool thread, in
/// units of the configured frame size (8 MiB with the default 1 MiB frames). Measured in
/// bytes, not tasks, so blocks smaller than a frame still keep every thread busy; it bounds
/// the memory of the results waiting to be written in order, too.
const IN_FLIGHT_FRAMES_PER_THREAD: u64 = 8;

/// What a pool task produces for a block.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    /// The block's record table, packed for a block of the target codec (it comes before
    /// the frames in the stream).
    Records,
    /// One frame, re-encoded.
    Frame(usize),
}

/// What a job reads: one block, whose frames are re-encoded one for one, or a run of
/// small blocks joined into one ([`Joined`]).
#[derive(Clone)]
enum Source {
    Block(Arc<SealedBlock>),
    Joined(Arc<Joined>),
}

impl Source {
    /// Frames of the block being written.
    fn frame_count(&self) -> usize {
        match self {
            Source::Block(block) => block.frames().len(),
            Source::Joined(joined) => joined.frame_count(),
        }
    }
}

/// A unit of pool work: one part of one job's output block.
struct Task {
    job: usize,
    part: Part,
    source: Source,
}

impl Task {
    /// Bytes the task reads: what windows are measured in.
    fn weight(&self) -> u64 {
        match (&self.source, self.part) {
            (Source::Block(block), Part::Records) => block.records_section().len() as u64,
            (Source::Block(block), Part::Frame(i)) => block.frames()[i].raw_len,
            (Source::Joined(joined), Part::Records) => joined.table_weight(),
            (Source::Joined(joined), Part::Frame(i)) => joined.raw_len(i),
        }
    }
}

/// The result of a task.
enum Encoded {
    /// The record table, packed: (packing, bytes).
    Records(u32, Vec<u8>),
    /// The codec used, the stored bytes, the raw length.
    Frame(Codec, Vec<u8>, u64),
}

/// The block file being written for the job at the head of the stream.
pub(super) struct Output<'a> {
    /// The entry's merge guard: no removal renames the directory under this file.
    _writing: MutexGuard<'a, ()>,
    job: usize,
    source: Source,
    packed_records: (u32, Vec<u8>),
    /// Created at the first frame that changes; until then nothing is written.
    writer: Option<BlockWriter>,
    /// Leading frames that were stored raw and stayed raw: copied from the source when a
    /// later frame changes, never written if none does.
    unchanged: usize,
    path: PathBuf,
}

impl Output<'_> {
    /// Drops a half-written block: closes and removes its file, if this run created one
    /// (a path it could not create is not its file to remove).
    pub(super) fn discard(self) {
        if let Some(writer) = self.writer {
            drop(writer);
            let _ = remove_file_if_exists(&self.path);
        }
    }
}

fn run_task(task: &Task, target: Codec) -> Result<Encoded> {
    let frame = match (task.part, &task.source) {
        (Part::Records, Source::Block(block)) => {
            let (packing, packed) = meta::pack_records(block.records_section(), target);
            return Ok(Encoded::Records(packing, packed));
        }
        (Part::Records, Source::Joined(joined)) => {
            let (packing, packed) = joined.pack_records(target);
            return Ok(Encoded::Records(packing, packed));
        }
        (Part::Frame(frame), _) => frame,
    };
    let (codec, bytes, raw_len) = match &task.source {
        Source::Block(block) => reencode_frame(block, frame, target)?,
        Source::Joined(joined) => joined.encode(frame, target)?,
    };
    Ok(Encoded::Frame(codec, bytes, raw_len))
}

/// Frame `frame` of `block` re-encoded with `target`: the codec used (a frame that does
/// not shrink is stored raw), the stored bytes and the raw length.
pub(super) fn reencode_frame(
    block: &SealedBlock,
    frame: usize,
    target: Codec,
) -> Result<(Codec, Vec<u8>, u64)> {
    let info = &block.frames()[frame];
    let stored = block.stored_frame(frame)?;
    let raw: Cow<[u8]> = if info.codec == Codec::None {
        Cow::Borrowed(stored)
    } else {
        Cow::Owned(info.codec.decode(stored, info.raw_len as usize)?)
    };
    let (codec, bytes) = encode_frame(target, &raw)?;
    Ok((codec, bytes, info.raw_len))
}

/// State of one `compress_blocks` call.
pub(super) struct Run<'a> {
    pub(super) jobs: &'a [Job],
    pub(super) target: Codec,
    pub(super) stats: CompressStats,
    pub(super) output: Option<Output<'a>>,
    pub(super) commits: crossbeam_channel::Sender<FinishedBlock>,
    pub(super) failed: HashSet<usize>,
    /// Per joined job, its blocks left out of the join (damaged), counted skipped.
    pub(super) excluded: HashMap<usize, u64>,
    /// Told the entry and the size before of each block written.
    pub(super) on_block: &'a (dyn Fn(&str, u64) + Sync),
}

impl<'a> Run<'a> {
    /// Runs the stream: hands tasks to the pool while less than the in-flight limit is
    /// out (opening the next job's blocks when its tasks are needed), and writes results
    /// back in stream order as they arrive; between the two it sleeps on the results, so
    /// the pool's threads have the cores. (The committer thread syncs and commits finished
    /// blocks.)
    pub(super) fn stream(&mut self, pool: &CompressPool, cancel: &dyn Fn() -> bool) -> Result<()> {
        let frame_size = self.jobs.first().map_or(1 << 20, |j| j.entry.frame_size()) as u64;
        let limit = pool.threads() as u64 * IN_FLIGHT_FRAMES_PER_THREAD * frame_size;
        let target = self.target;
        if pool.pool.current_thread_index().is_some() {
            // This thread sleeps on results only the pool's threads produce: one of them
            // would wait for itself.
            return Err(Error::internal(
                "recompression cannot run on a thread of its own compress pool",
            ));
        }
        let (done_tx, done_rx) = crossbeam_channel::unbounded::<(u64, Task, Result<Encoded>)>();
        pool.pool.in_place_scope(|scope| {
            let mut queue: VecDeque<Task> = VecDeque::new();
            let mut next_job = 0;
            // Tasks handed out and written back, by their place in the stream; the weight
            // of those out; results that arrived before one that comes earlier.
            let (mut sent, mut written, mut in_flight) = (0u64, 0u64, 0u64);
            let mut arrived: BTreeMap<u64, (Task, Result<Encoded>)> = BTreeMap::new();
            loop {
                if cancel() {
                    // What is out finishes and is dropped. (Logged by the caller once the
                    // committer has counted what it committed.)
                    return Ok(());
                }
                while in_flight < limit {
                    let Some(task) = queue.pop_front() else {
                        if next_job == self.jobs.len() {
                            break;
                        }
                        self.enqueue(next_job, &mut queue);
                        next_job += 1;
                        continue;
                    };
                    in_flight += task.weight();
                    let (place, done) = (sent, done_tx.clone());
                    sent += 1;
                    scope.spawn(move |_| {
                        // A task that panicked still answers: this thread waits for every
                        // place in turn, and the job is then left as it was.
                        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            run_task(&task, target)
                        }))
                        .unwrap_or_else(|_| {
                            Err(Error::internal("encoding a recompression task panicked"))
                        });
                        // The stream stops listening only when it failed or was cancelled.
                        let _ = done.send((place, task, result));
                    });
                }
                if written == sent {
                    return Ok(()); // nothing out, nothing left
                }
                let (place, task, result) = done_rx
                    .recv()
                    .map_err(|_| Error::internal("the recompression results stopped"))?;
                arrived.insert(place, (task, result));
                while let Some((task, result)) = arrived.remove(&written) {
                    written += 1;
                    in_flight -= task.weight();
                    self.write_result(task, result)?;
                }
            }
        })
    }

    /// Maps the next job's blocks and queues its tasks, returning their weight; blocks
    /// that cannot be read are left as they are and counted as skipped.
    fn enqueue(&mut self, job_index: usize, queue: &mut VecDeque<Task>) -> u64 {
        let job = &self.jobs[job_index];
        let source = match job.old.as_slice() {
            // A log sealed in place has the log's operations in its frames: joined (with
            // itself alone), its payloads get frames of their own.
            [one] if !one.in_log => job.entry.block_frames(one).map(Source::Block),
            run => {
                // A damaged block stays as it is, alone: the others are joined around it
                // (the joined block overlaps it in time, as belated writes make blocks
                // do), so the damage costs that block only.
                let mut sources = Vec::with_capacity(run.len());
                for b in run {
                    let opened = job.entry.block_for_joining(b).and_then(|(frames, table)| {
                        (0..frames.frames().len())
                            .try_for_each(|f| frames.stored_frame(f).map(drop))?;
                        Ok(JoinSource {
                            entry: b.clone(),
                            frames,
                            table,
                        })
                    });
                    match opened {
                        Ok(source) => sources.push(source),
                        Err(e) => {
                            log::warn!("not recompressing: {e}");
                            self.stats.skipped += 1;
                            *self.excluded.entry(job_index).or_default() += 1;
                        }
                    }
                }
                if sources.is_empty() {
                    self.failed.insert(job_index);
                    return 0;
                }
                Joined::new(sources, job.entry.frame_size() as u64)
                    .map(|joined| Source::Joined(Arc::new(joined)))
            }
        };
        match source {
            Ok(source) => {
                let parts = std::iter::once(Part::Records)
                    .chain((0..source.frame_count()).map(Part::Frame));
                let mut weight = 0;
                for part in parts {
                    let task = Task {
                        job: job_index,
                        part,
                        source: source.clone(),
                    };
                    weight += task.weight();
                    queue.push_back(task);
                }
                weight
            }
            Err(e) => {
                log::warn!("not recompressing: {e}");
                self.skip(job_index);
                0
            }
        }
    }

    /// Leaves job `job`'s blocks as they are, counted as skipped (those left out of its
    /// join were counted already).
    fn skip(&mut self, job: usize) {
        if self.failed.insert(job) {
            let excluded = self.excluded.get(&job).copied().unwrap_or(0);
            self.stats.skipped += self.jobs[job].old.len() as u64 - excluded;
        }
    }

    /// Writes one task's result, in stream order; a damaged source leaves its job's
    /// blocks as they are.
    fn write_result(&mut self, task: Task, result: Result<Encoded>) -> Result<()> {
        if self.failed.contains(&task.job) {
            return Ok(());
        }
        match result {
            Ok(encoded) => self.write_part(task, encoded),
            Err(e) => {
                log::warn!("not recompressing: {e}");
                self.skip(task.job);
                if let Some(out) = self.output.take_if(|o| o.job == task.job) {
                    out.discard();
                }
                Ok(())
            }
        }
    }

    fn write_part(&mut self, task: Task, encoded: Encoded) -> Result<()> {
        let job: &'a Job = &self.jobs[task.job];
        let (codec, bytes, raw_len) = match encoded {
            Encoded::Records(packing, packed) => {
                let Some(writing) = job.entry.merge_guard() else {
                    // The entry is being removed: leave its blocks alone.
                    self.skip(task.job);
                    return Ok(());
                };
                self.output = Some(Output {
                    _writing: writing,
                    job: task.job,
                    source: task.source,
                    packed_records: (packing, packed),
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
        if job.entry.is_removing() {
            // The entry's removal waits for this block: drop it and move on.
            log::info!("entry {}: removed during recompression", job.entry.name());
            if let Some(out) = self.output.take() {
                out.discard();
            }
            self.skip(task.job);
            return Ok(());
        }
        // A joined block is written, its sources' files go; unless it is a sealed log
        // alone whose data does not compress.
        let unchanged = codec == Codec::None
            && match &out.source {
                Source::Block(b) => b.frames()[index].codec == Codec::None,
                Source::Joined(joined) => joined.is_one_sealed_log(),
            };
        match out.writer.as_mut() {
            // Incompressible data already stored raw: writing it again would change
            // nothing but wear the disk.
            None if unchanged => out.unchanged += 1,
            None => {
                // Held by the output from its creation on: a write that fails next leaves
                // the file to the output's discard, which removes it.
                let writer = out.writer.insert(BlockWriter::create(
                    &out.path,
                    self.target,
                    job.entry.frame_size(),
                )?);
                for i in 0..out.unchanged {
                    match &out.source {
                        Source::Block(block) => {
                            let info = &block.frames()[i];
                            writer.append_encoded_frame(
                                Codec::None,
                                block.stored_frame(i)?,
                                info.raw_len,
                            )?;
                        }
                        Source::Joined(joined) => {
                            let raw = joined.raw(i)?;
                            writer.append_encoded_frame(Codec::None, &raw, raw.len() as u64)?;
                        }
                    }
                }
                writer.append_encoded_frame(codec, &bytes, raw_len)?;
            }
            Some(writer) => writer.append_encoded_frame(codec, &bytes, raw_len)?,
        }
        if index != out.source.frame_count() - 1 {
            return Ok(());
        }
        let out = self
            .output
            .take()
            .expect("the output being finished exists");
        let path = out.path.clone();
        let finishing = self.finish_output(out, job);
        if finishing.is_err()
            && let Some(_writing) = job.entry.merge_guard()
        {
            // The file was created, and is not finished: ours to remove (under the merge
            // guard, and not once the entry's removal began, as a discard).
            let _ = remove_file_if_exists(&path);
        }
        let (finished, file) = finishing?;
        (self.on_block)(job.entry.name(), finished.old.iter().map(|b| b.size).sum());
        self.commits
            .send((job.entry.clone(), finished, file))
            .map_err(|_| Error::internal("the block committer stopped"))
    }

    /// No frame of `old` changed: the block keeps its file and takes the new tier, so it
    /// is not reconsidered by every run.
    fn kept(&self, old: &BlockEntry) -> Finished {
        let mut new = old.clone();
        new.codec = self.target;
        Finished {
            old: vec![old.clone()],
            new,
            path: None,
        }
    }

    /// Finishes the block file of `out` (whose last frame was written) into what the
    /// committer commits.
    fn finish_output(&self, out: Output<'_>, job: &Job) -> Result<(Finished, Option<File>)> {
        Ok(match (out.writer, &out.source, job.old.as_slice()) {
            (Some(writer), Source::Block(block), [old]) => {
                let (summary, file) =
                    writer.finish_copied(block, &old.summary(), &out.packed_records)?;
                let finished = Finished {
                    old: job.old.clone(),
                    new: BlockEntry::from_summary(job.new_seq, &summary),
                    path: Some(out.path),
                };
                (finished, Some(file))
            }
            (Some(writer), Source::Joined(joined), _) => {
                let (summary, file) = writer.finish_with_table(
                    &out.packed_records,
                    meta::TABLE_V3,
                    &joined.summary(self.target),
                )?;
                let finished = Finished {
                    old: joined.old.clone(),
                    new: BlockEntry::from_summary(job.new_seq, &summary),
                    path: Some(out.path),
                };
                (finished, Some(file))
            }
            (None, Source::Block(_), [old]) => (self.kept(old), None),
            (None, Source::Joined(joined), _) if joined.is_one_sealed_log() => {
                (self.kept(&joined.old[0]), None)
            }
            _ => {
                return Err(Error::internal(
                    "a recompressed block without its writer or its source",
                ));
            }
        })
    }
}
