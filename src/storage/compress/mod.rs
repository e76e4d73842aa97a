//! Parallel recompression of sealed blocks: the primitive behind the compress lifecycle.
//!
//! The sealed blocks whose records all lie in `[start, stop)` form groups of overlapping
//! time ranges (belated writes make blocks overlap). A group of several is compacted: its
//! blocks are merged into disjoint ones with the target codec (`storage::merge`), so the
//! data a compress run rewrites ends up sorted, compressed and without overlap. A block
//! that overlaps nothing is eligible for recompression when its codec is weaker than the
//! target; those take the frame-parallel path below, one block each, or a run of small
//! adjacent ones joined into one block with full frames (`join.rs`). The work is one
//! stream of tasks over all eligible blocks — per output block, its record table and each
//! of its frames, read from the memory-mapped sources (`stream`). The calling thread
//! opens the blocks (a join's sources mapped, checked and laid out) and hands each task to
//! a rayon pool while less than eight frames' worth of input per thread is out; the pool
//! packs the tables and re-encodes the frames; the calling thread writes the results back
//! in order into the new block files as they arrive, and a committer thread fsyncs
//! finished files and commits them (`commit`). There is no barrier between batches, so
//! one huge block keeps every thread busy, many small blocks do too, and memory stays
//! bounded by what is out (threads × eight frames), not by the data.
//!
//! Concurrency (`docs/crash-safety.md`, "Recompressing"): eligible blocks are snapshotted under a short entry lock,
//! encoded with no lock held, and committed under a short lock only if the block's sequence
//! number (its version) is unchanged; otherwise the new file is dropped and the block counts
//! as skipped. Commits are batched per entry so a run over thousands of blocks does not
//! rewrite the index thousands of times. Cancellation is checked between the parts written
//! back; a cancelled run commits the blocks it finished and discards the one it was
//! writing, so every block is either fully old or fully new.
//!
//! Files: this one (the pool, the plan, a run); `request.rs` (`CompressWindow`,
//! `CompressRequest`); `join.rs` (joining small blocks); `stream.rs` (the encoding side);
//! `commit.rs` (the committer); `seal.rs` (sealing stale logs first); `predict.rs` (the
//! dry run's prediction). `storage/bucket/compress.rs` holds the `Bucket` methods that call
//! them with the [`Scope`] they cover: this folder works on entries and knows no bucket.

mod commit;
mod join;
mod predict;
mod request;
mod seal;
mod stream;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::storage::entry::{BlockLimits, Entry};
use crate::storage::format::codec::Codec;
use crate::storage::format::index::BlockEntry;
use crate::storage::merge::{merge_blocks, overlap_groups};
use crate::storage::priority::BackgroundPriority;

use commit::commit_loop;
pub use commit::{Finished, FinishedBlock, commit_in_place};
pub use request::{CompressRequest, CompressWindow};

/// Where a compress run's finished blocks go instead of the local committer: a consumer
/// run on a thread of its own, fed in stream order until the stream ends, that raises
/// the flag to stop the stream and returns what it committed (a tier run with a
/// `compression` target uploads them).
pub type BlockSink<'a> = &'a (
        dyn Fn(crossbeam_channel::Receiver<FinishedBlock>, &AtomicBool) -> Result<CompressStats>
            + Sync
    );
use predict::{Candidate, EntryPlan, predict_bytes_after};
use stream::Run;

/// The rayon pool recompression runs on; its size is the `compress_threads` setting.
pub struct CompressPool {
    pool: rayon::ThreadPool,
    threads: usize,
}

impl CompressPool {
    /// A pool of `threads` threads (at least one).
    pub fn new(threads: usize) -> Result<Self> {
        Self::build(threads, BackgroundPriority::Normal)
    }

    /// A pool for background work (the lifecycle's): its threads run at `priority`, below
    /// the server's request handlers (`priority.rs`).
    pub fn background(threads: usize, priority: BackgroundPriority) -> Result<Self> {
        Self::build(threads, priority)
    }

    fn build(threads: usize, priority: BackgroundPriority) -> Result<Self> {
        if threads == 0 {
            return Err(Error::unprocessable("compress_threads must be at least 1"));
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("halflife-compress-{i}"))
            .start_handler(move |_| crate::storage::priority::run_in_background(priority))
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
    /// Bytes of the blocks after (estimate: predicted from a sample of frames).
    pub bytes_after: u64,
    /// Eligible blocks left as they were: changed by a writer meanwhile, or unreadable.
    pub skipped: u64,
    /// Blocks in the window left as they are because their codec is already as strong
    /// as the target, or stronger.
    pub kept: u64,
    /// The weakest and the strongest codec among the kept blocks.
    pub kept_codecs: Option<(Codec, Codec)>,
}

impl CompressStats {
    /// Adds another run's (or entry's) statistics.
    pub fn add(&mut self, other: CompressStats) {
        self.blocks += other.blocks;
        self.records += other.records;
        self.bytes_before += other.bytes_before;
        self.bytes_after += other.bytes_after;
        self.skipped += other.skipped;
        self.kept += other.kept;
        if let Some((weakest, strongest)) = other.kept_codecs {
            self.note_kept_codec(weakest);
            self.note_kept_codec(strongest);
        }
    }

    /// Counts the blocks a plan keeps as they are.
    fn keep(&mut self, kept: &[BlockEntry]) {
        self.kept += kept.len() as u64;
        for b in kept {
            self.note_kept_codec(b.codec);
        }
    }

    fn note_kept_codec(&mut self, codec: Codec) {
        self.kept_codecs = Some(match self.kept_codecs {
            None => (codec, codec),
            Some((weakest, strongest)) => (
                if codec.is_weaker_than(weakest) {
                    codec
                } else {
                    weakest
                },
                if strongest.is_weaker_than(codec) {
                    codec
                } else {
                    strongest
                },
            ),
        });
    }
}

/// What a recompression target can be, as refusals say it.
pub const TARGETS: &str = "a target is lz4, zstd (level 3) or zstd-<level 1..22>";

/// Checks that a codec can be a recompression target.
pub fn validate_target(target: Codec) -> Result<()> {
    match target {
        Codec::None => Err(Error::unprocessable(format!(
            "'none' is not a compression target: {TARGETS}"
        ))),
        Codec::Lz4 => Ok(()),
        Codec::Zstd(level) if (1..=22).contains(&level) => Ok(()),
        Codec::Zstd(level) => Err(Error::unprocessable(format!(
            "zstd level {level} is out of range 1..=22"
        ))),
    }
}

/// What a compression over a window does to an entry's sealed blocks: those fully inside
/// the window form groups of overlapping ranges; a group of several is merged (whatever
/// its codecs), a block that overlaps nothing is recompressed if its codec is weaker.
struct CompressPlan {
    recompress: Vec<BlockEntry>,
    merge: Vec<Vec<BlockEntry>>,
    /// Alone and already at the target's strength or stronger: left as they are.
    kept: Vec<BlockEntry>,
}

impl CompressPlan {
    fn new(blocks: &[BlockEntry], start: u64, stop: u64, target: Codec) -> Self {
        let in_window: Vec<BlockEntry> = blocks
            .iter()
            .filter(|b| b.first_ts >= start && b.last_ts < stop && b.remote.is_none())
            .cloned()
            .collect();
        let mut plan = CompressPlan {
            recompress: Vec::new(),
            merge: Vec::new(),
            kept: Vec::new(),
        };
        for mut group in overlap_groups(&in_window) {
            // A block with an edit log is rewritten through the merge path, which reads
            // its records as seen and so folds the edits in (the frame-copying path keeps
            // the record table as it is stored).
            if group.len() > 1 || group[0].edits.ops > 0 {
                plan.merge.push(group);
            } else if let Some(b) = group.pop() {
                if b.codec.is_weaker_than(target) {
                    plan.recompress.push(b);
                } else if b.live_records() > 0 {
                    plan.kept.push(b);
                }
            }
        }
        plan
    }
}

/// Merges one group of overlapping blocks into disjoint blocks and commits them. A group
/// that cannot be read, or that changed meanwhile, is left as it was and counted skipped.
fn compact(
    entry: &Entry,
    group: &[BlockEntry],
    target: Codec,
    limits: BlockLimits,
    pool: &CompressPool,
) -> Result<CompressStats> {
    let codec = group.iter().map(|b| b.codec).fold(target, |strongest, c| {
        if strongest.is_weaker_than(c) {
            c
        } else {
            strongest
        }
    });
    let mut stats = CompressStats::default();
    let replacement = match merge_blocks(entry, group, codec, limits, Some(&pool.pool)) {
        Ok(r) => r,
        Err(e) => {
            log::warn!("entry {}: not compacting: {e}", entry.name());
            stats.skipped += group.len() as u64;
            return Ok(stats);
        }
    };
    let bytes_after: u64 = replacement.new.iter().map(|b| b.size).sum();
    let (applied, replaced) = entry.replace_blocks(vec![replacement])?;
    replaced.remove();
    if applied[0] {
        stats.blocks += group.len() as u64;
        stats.records += group.iter().map(|b| b.live_records()).sum::<u64>();
        stats.bytes_before += group.iter().map(|b| b.size).sum::<u64>();
        stats.bytes_after += bytes_after;
    } else {
        stats.skipped += group.len() as u64;
    }
    Ok(stats)
}

/// One block to write in the work stream: from one eligible block, or from a run of
/// small adjacent ones joined (`join.rs`).
struct Job {
    entry: Arc<Entry>,
    old: Vec<BlockEntry>,
    new_seq: u64,
}

/// Cuts an entry's eligible blocks into the runs its jobs write (see `join.rs`): two
/// blocks may join when they are next to each other among all of `sealed`, with no block
/// reaching into the gap between them.
fn job_runs(
    recompress: Vec<BlockEntry>,
    sealed: &[BlockEntry],
    frame_size: u64,
    max_block_records: u64,
) -> Vec<Vec<BlockEntry>> {
    let mut order: Vec<&BlockEntry> = sealed.iter().collect();
    order.sort_by_key(|b| (b.first_ts, b.seq));
    // Per block (by seq): its place in time order, and the furthest end of the blocks
    // before it.
    let mut place = std::collections::HashMap::with_capacity(order.len());
    let mut reach = 0u64;
    for (i, b) in order.iter().enumerate() {
        place.insert(b.seq, (i, reach));
        reach = reach.max(b.last_ts);
    }
    let neighbours = |a: &BlockEntry, b: &BlockEntry| match (place.get(&a.seq), place.get(&b.seq)) {
        (Some(&(i, _)), Some(&(j, reach_before_b))) => {
            j == i + 1 && reach_before_b == a.last_ts && a.last_ts < b.first_ts
        }
        _ => false,
    };
    let mut recompress = recompress;
    recompress.sort_by_key(|b| (b.first_ts, b.seq));
    join::runs(recompress, frame_size, max_block_records, neighbours)
}

/// What a compression covers: the entries its window names, and their bucket's block
/// limits (a joined block holds at most `max_block_records`).
pub struct Scope {
    /// The entries selected by the window's `entries`.
    pub entries: Vec<Arc<Entry>>,
    /// The bucket's block limits.
    pub limits: BlockLimits,
}

/// `Bucket::estimate_compress` telling `walked` the stored bytes of each block and
/// log as the sampling passes it (they add up to `bytes_before`): what a progress bar
/// follows, since sampling at a slow level takes a while.
pub(crate) fn estimate(
    scope: Scope,
    window: &CompressWindow,
    walked: &dyn Fn(u64),
) -> Result<CompressStats> {
    let (mut stats, plans) = plan(scope, window)?;
    stats.bytes_after = predict_bytes_after(&plans, window.target, walked);
    Ok(stats)
}

/// Like `Bucket::estimate_compress` without the prediction (`bytes_after` is 0):
/// only the block indexes are read. What a progress bar needs to know first.
pub(crate) fn eligible(scope: Scope, window: &CompressWindow) -> Result<CompressStats> {
    Ok(plan(scope, window)?.0)
}

/// The blocks and logs a compression over the window would rewrite, entry by entry
/// (each entry compresses in its own way: predictions are made per entry), with
/// their totals.
fn plan(scope: Scope, window: &CompressWindow) -> Result<(CompressStats, Vec<EntryPlan>)> {
    let CompressWindow {
        start,
        stop,
        target,
        ..
    } = *window;
    validate_target(target)?;
    let Scope { entries, limits } = scope;
    let mut stats = CompressStats::default();
    let mut plans = Vec::new();
    for entry in entries {
        let sealed = entry.sealed_blocks()?;
        let plan = CompressPlan::new(&sealed, start, stop, target);
        stats.keep(&plan.kept);
        let mut candidates = Vec::new();
        let runs = job_runs(
            plan.recompress,
            &sealed,
            entry.frame_size() as u64,
            limits.max_block_records,
        );
        let alone = runs.into_iter().flat_map(|run| {
            let joined = (run.len() > 1).then(|| Arc::new(run.clone()));
            run.into_iter().map(move |b| (b, None, joined.clone()))
        });
        let merged = plan.merge.into_iter().flat_map(|group| {
            let group = Arc::new(group);
            (0..group.len()).map(move |i| (group[i].clone(), Some(group.clone()), None))
        });
        for (b, group, run) in alone.chain(merged) {
            stats.blocks += 1;
            stats.records += b.live_records();
            stats.bytes_before += b.size;
            candidates.push(Candidate {
                entry: entry.clone(),
                block: b,
                group,
                run,
            });
        }
        // Stale logs would be sealed and compressed too.
        let logs = entry.stale_logs(start, stop)?;
        for log in &logs {
            stats.blocks += 1;
            stats.records += log.records;
            stats.bytes_before += log.bytes;
        }
        if !candidates.is_empty() || !logs.is_empty() {
            plans.push(EntryPlan {
                frame_size: entry.frame_size() as u64,
                candidates,
                logs,
            });
        }
    }
    Ok((stats, plans))
}

/// A compression run (`Bucket::compress_blocks`) over `scope`, its finished blocks
/// committed locally or handed to `sink`.
pub(crate) fn run(
    scope: Scope,
    request: &CompressRequest,
    sink: Option<BlockSink>,
) -> Result<CompressStats> {
    let CompressRequest {
        window,
        pool,
        cancel,
        on_block,
    } = *request;
    let CompressWindow {
        start,
        stop,
        target,
        ..
    } = window;
    validate_target(target)?;
    let Scope { entries, limits } = scope;
    let mut jobs = Vec::new();
    let mut compacted = CompressStats::default();
    // An open block (or late log) whose records all lie in the window (every one
    // older than its end) is sealed first, so it is compressed with the rest.
    if !cancel() {
        seal::seal_stale_logs(&entries, start, stop)?;
    }
    for entry in entries {
        if cancel() {
            break;
        }
        // Plan and compact under the entry's merge guard, so a background merge
        // neither changes the blocks between planning and commit nor races the
        // compaction for them.
        let Some(merging) = entry.merge_guard() else {
            continue; // being removed
        };
        let plan = CompressPlan::new(&entry.sealed_blocks()?, start, stop, target);
        compacted.keep(&plan.kept);
        // Compaction: overlapping blocks are merged into disjoint ones with the target
        // codec (or a stronger one a source already had), output blocks in parallel.
        for group in &plan.merge {
            if cancel() {
                break;
            }
            compacted.add(compact(&entry, group, target, limits, pool)?);
            on_block(entry.name(), group.iter().map(|b| b.size).sum());
        }
        let runs = job_runs(
            plan.recompress,
            &entry.sealed_blocks()?,
            entry.frame_size() as u64,
            limits.max_block_records,
        );
        drop(merging);
        let seqs = entry.reserve_seqs(runs.len())?;
        for (old, new_seq) in runs.into_iter().zip(seqs) {
            jobs.push(Job {
                entry: entry.clone(),
                old,
                new_seq,
            });
        }
    }
    // Finished block files go to the committer, which fsyncs them and commits them in
    // batches while the stream goes on.
    let (commit_tx, commit_rx) = crossbeam_channel::unbounded::<FinishedBlock>();
    let committer_failed = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let committer = scope.spawn(|| match sink {
            Some(sink) => sink(commit_rx, &committer_failed),
            None => commit_loop(commit_rx, &committer_failed, jobs.len()),
        });
        let mut run = Run {
            jobs: &jobs,
            target,
            stats: CompressStats::default(),
            output: None,
            commits: commit_tx,
            failed: HashSet::new(),
            excluded: Default::default(),
            on_block,
        };
        let cancelled = || cancel() || committer_failed.load(Ordering::Relaxed);
        let result = run.stream(pool, &cancelled);
        // Whatever happened, discard a half-written block and let the committer finish.
        if let Some(out) = run.output.take() {
            out.discard();
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
        stats.add(compacted);
        if cancel() {
            log::info!(
                "recompression cancelled after {} block(s) ({} records); the rest is as it was",
                stats.blocks,
                stats.records
            );
        }
        Ok(stats)
    })
}
