//! Merging overlapping blocks into disjoint ones.
//!
//! Belated writes seal into blocks whose time ranges overlap others, and every read of an
//! instant has to search each block that covers it. Two things bound that:
//! - the **background merge**: when more than `max_overlap` sealed blocks cover one instant,
//!   the blocks covering the busiest instant are merged (raw in, raw out) by the merger
//!   thread, never under the entry lock for the I/O;
//! - **compaction** in the compress action, which merges every group of overlapping blocks
//!   in its window while it recompresses them (see `compress`).
//!
//! Both follow the crash-safety protocol: the merged blocks are written under fresh
//! sequence numbers and fsynced, then one index commit swaps them for their sources — only
//! if every source is still there (a writer or another run that changed one wins) — and
//! only then are the sources unlinked.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::storage::entry::{BlockLimits, Entry, Replacement};
use crate::storage::format::block::SealedBlock;
use crate::storage::format::codec::Codec;
pub use crate::storage::format::index::max_overlap;
use crate::storage::format::index::{BlockEntry, block_path};
use crate::storage::format::rewrite::write_new_block;
use crate::storage::sync::fsutil::remove_file_if_exists;

/// The blocks to merge when more than `bound` of them cover one instant: those covering
/// the busiest instant.
pub(crate) fn overlap_to_merge(blocks: &[BlockEntry], bound: usize) -> Option<Vec<BlockEntry>> {
    let (depth, at) = max_overlap(blocks);
    // Tiered blocks are not merged: that would fetch them back to write them locally.
    let group: Vec<BlockEntry> = blocks
        .iter()
        .filter(|b| b.first_ts <= at && at <= b.last_ts && b.remote.is_none())
        .cloned()
        .collect();
    (depth > bound && group.len() > 1).then_some(group)
}

/// Splits blocks (sorted by first timestamp) into groups connected by overlapping ranges.
pub(crate) fn overlap_groups(blocks: &[BlockEntry]) -> Vec<Vec<BlockEntry>> {
    let mut groups: Vec<Vec<BlockEntry>> = Vec::new();
    let mut reach = 0u64;
    for b in blocks {
        match groups.last_mut() {
            Some(group) if b.first_ts <= reach => {
                group.push(b.clone());
                reach = reach.max(b.last_ts);
            }
            _ => {
                groups.push(vec![b.clone()]);
                reach = b.last_ts;
            }
        }
    }
    groups
}

/// Where each record of a merged output block comes from: (source, record index).
type OutputPlan = Vec<(usize, usize)>;

/// Merges `group` into disjoint blocks with `codec`, cut at `limits`: the sources' records
/// in timestamp order, written under fresh sequence numbers and fsynced. With a pool, the
/// output blocks are written in parallel. Returns the replacement to commit; nothing is
/// committed here.
pub(crate) fn merge_blocks(
    entry: &Entry,
    group: &[BlockEntry],
    codec: Codec,
    limits: BlockLimits,
    pool: Option<&rayon::ThreadPool>,
) -> Result<Replacement> {
    let sources: Vec<Arc<SealedBlock>> = group
        .iter()
        .map(|b| entry.block(b))
        .collect::<Result<_>>()?;
    let outputs = plan_outputs(&sources, limits)?;
    let seqs = entry.reserve_seqs(outputs.len())?;
    let frame_size = entry.frame_size();
    let write = |(plan, seq): (&OutputPlan, &u64)| -> Result<(BlockEntry, PathBuf)> {
        let path = block_path(entry.dir(), *seq);
        let summary = write_new_block(&path, codec, frame_size, |writer| {
            // One decoded frame per source for this output alone: parallel outputs reading
            // the same compressed source do not evict each other's frame.
            let mut frames = vec![None; sources.len()];
            for &(src, idx) in plan {
                let payload = sources[src].payload_with(idx, &mut frames[src])?;
                writer.push(&sources[src].records()[idx].meta, payload.as_slice())?;
            }
            Ok(())
        })?;
        Ok((BlockEntry::from_summary(*seq, &summary), path))
    };
    let written: Vec<Result<(BlockEntry, PathBuf)>> = match pool {
        Some(pool) => pool.install(|| outputs.par_iter().zip(&seqs).map(write).collect()),
        None => outputs.iter().zip(&seqs).map(write).collect(),
    };
    let (mut new, mut files, mut failure) = (Vec::new(), Vec::new(), None);
    for result in written {
        match result {
            Ok((b, path)) => {
                new.push(b);
                files.push(path);
            }
            Err(e) => failure = failure.or(Some(e)),
        }
    }
    if let Some(e) = failure {
        // Only the files this merge wrote are removed; a failed one cleaned up after itself.
        for path in &files {
            let _ = remove_file_if_exists(path);
        }
        return Err(e);
    }
    Ok(Replacement {
        old: group.iter().map(BlockEntry::version).collect(),
        new,
        files,
    })
}

/// The k-way merge of the sources' records, cut into output blocks at the limits.
fn plan_outputs(sources: &[Arc<SealedBlock>], limits: BlockLimits) -> Result<Vec<OutputPlan>> {
    let mut heap: BinaryHeap<Reverse<(u64, usize, usize)>> = sources
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.records().is_empty())
        .map(|(i, s)| Reverse((s.records()[0].meta.timestamp, i, 0)))
        .collect();
    let mut outputs: Vec<OutputPlan> = Vec::new();
    let mut current: OutputPlan = Vec::new();
    let (mut bytes, mut previous) = (0u64, None);
    while let Some(Reverse((ts, src, idx))) = heap.pop() {
        if previous == Some(ts) {
            return Err(Error::internal(format!(
                "two blocks being merged both hold timestamp {ts}"
            )));
        }
        previous = Some(ts);
        let size = sources[src].records()[idx].meta.size;
        let full = current.len() as u64 >= limits.max_block_records
            || bytes + size > limits.max_block_size;
        if full && !current.is_empty() {
            outputs.push(std::mem::take(&mut current));
            bytes = 0;
        }
        current.push((src, idx));
        bytes += size;
        if let Some(next) = sources[src].records().get(idx + 1) {
            heap.push(Reverse((next.meta.timestamp, src, idx + 1)));
        }
    }
    if !current.is_empty() {
        outputs.push(current);
    }
    Ok(outputs)
}

/// One background merge round for `entry`: if more than its overlap bound of blocks cover
/// one instant, merges those blocks (raw) and commits. Returns whether a merge took effect.
pub(crate) fn merge_overlapping(entry: &Entry, limits: BlockLimits) -> Result<bool> {
    let Some(_merging) = entry.merge_guard() else {
        return Ok(false);
    };
    let Some(group) = overlap_to_merge(&entry.sealed_blocks()?, entry.ctx.max_overlap) else {
        return Ok(false);
    };
    let records: u64 = group.iter().map(|b| b.live_records()).sum();
    let replacement = merge_blocks(entry, &group, Codec::None, limits, None)?;
    let outputs = replacement.new.len();
    let (applied, replaced) = entry.replace_blocks(vec![replacement])?;
    replaced.remove();
    let applied = applied[0];
    if applied {
        log::info!(
            "entry {}: merged {} overlapping block(s) ({records} records) into {outputs}",
            entry.name(),
            group.len()
        );
    }
    Ok(applied)
}

enum MergeJob {
    Entry(Arc<Entry>, BlockLimits),
    Stop,
}

/// The handle writers use to ask for a background merge of an entry.
#[derive(Clone)]
pub(crate) struct MergeQueue {
    tx: Sender<MergeJob>,
}

impl MergeQueue {
    /// Asks for a merge of `entry` if it needs one and none is queued.
    pub(crate) fn request_if_needed(&self, entry: &Arc<Entry>, limits: BlockLimits) {
        if entry.take_merge_request() {
            // A send fails only when the merger has stopped (the store is closing); the
            // next open asks again.
            let _ = self.tx.send(MergeJob::Entry(entry.clone(), limits));
        }
    }
}

impl MergeQueue {
    /// [`MergeQueue::request_if_needed`] now, and again once the background thread has
    /// sealed the full logs the entry has waiting: the block a seal adds can take the
    /// overlap past the bound after the write that froze its log asked, and no write may
    /// come after it to ask again.
    pub(crate) fn request_now_and_after_seals(&self, entry: &Arc<Entry>, limits: BlockLimits) {
        self.request_if_needed(entry, limits);
        if entry.take_merge_recheck() {
            let (queue, again) = (self.clone(), entry.clone());
            // Behind the seal the write asked for: the thread takes its jobs in order.
            entry.ctx.seals.later(Box::new(move || {
                again.merge_rechecked();
                queue.request_if_needed(&again, limits);
            }));
        }
    }
}

/// The merger thread of a store: merges the entries writers queue, one at a time.
pub(crate) struct Merger {
    tx: Sender<MergeJob>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Merger {
    /// Starts the thread.
    pub(crate) fn start() -> Result<Merger> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let stop = Arc::new(AtomicBool::new(false));
        let stop_flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("halflife-merge".into())
            .spawn(move || merge_loop(rx, &stop_flag))
            .map_err(|e| Error::io("starting the merge thread", e))?;
        Ok(Merger {
            tx,
            stop,
            handle: Some(handle),
        })
    }

    /// A queue for the buckets of the store.
    pub(crate) fn queue(&self) -> MergeQueue {
        MergeQueue {
            tx: self.tx.clone(),
        }
    }
}

impl Drop for Merger {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        let _ = self.tx.send(MergeJob::Stop);
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

fn merge_loop(rx: Receiver<MergeJob>, stop: &AtomicBool) {
    while let Ok(job) = rx.recv() {
        let (entry, limits) = match job {
            MergeJob::Stop => return,
            MergeJob::Entry(entry, limits) => (entry, limits),
        };
        entry.merge_started();
        // Merge until the bound holds; stop early when asked to, or when a round did not
        // take effect (a concurrent change: the next write asks again).
        loop {
            if stop.load(Ordering::Acquire) {
                return;
            }
            match merge_overlapping(&entry, limits) {
                Ok(true) => continue,
                Ok(false) => break,
                Err(e) => {
                    log::warn!(
                        "entry {}: background merge failed: {e}; retried when its blocks change",
                        entry.name()
                    );
                    entry.merge_failed();
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(seq: u64, first_ts: u64, last_ts: u64) -> BlockEntry {
        BlockEntry {
            seq,
            first_ts,
            last_ts,
            record_count: 1,
            size: 1,
            payload_bytes: 1,
            codec: Codec::None,
            meta_crc: 0,
            edited: false,
            in_log: false,
            remote: None,
            edits: Default::default(),
        }
    }

    #[test]
    fn overlap_depth_and_groups() {
        let blocks = vec![
            block(0, 0, 9),
            block(1, 5, 20),
            block(2, 10, 10),
            block(3, 10, 12),
            block(4, 30, 40),
            block(5, 41, 50),
        ];
        assert_eq!(max_overlap(&blocks), (3, 10));
        assert_eq!(max_overlap(&[]), (0, 0));
        let merge = overlap_to_merge(&blocks, 2).unwrap();
        assert_eq!(merge.iter().map(|b| b.seq).collect::<Vec<_>>(), [1, 2, 3]);
        assert!(overlap_to_merge(&blocks, 3).is_none());
        let groups: Vec<Vec<u64>> = overlap_groups(&blocks)
            .iter()
            .map(|g| g.iter().map(|b| b.seq).collect())
            .collect();
        assert_eq!(groups, vec![vec![0, 1, 2, 3], vec![4], vec![5]]);
        // Touching ranges (last == next first) overlap; adjacent ones do not.
        let touching = vec![block(0, 0, 5), block(1, 5, 6), block(2, 7, 8)];
        assert_eq!(max_overlap(&touching), (2, 5));
        assert_eq!(overlap_groups(&touching).len(), 2);
    }
}
