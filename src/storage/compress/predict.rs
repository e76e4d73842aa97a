//! What a compression would leave on disk, predicted without writing anything: a dry run
//! re-encodes a sample of the eligible frames with the target codec and packs a sample of
//! their record tables, and scales what it measured to every eligible block.
//!
//! Each entry is measured on its own sample (entries compress unlike each other). The
//! work is bounded: one frame in [`SAMPLE_EVERY`] of an entry is sampled — every frame of
//! a small one, until [`SAMPLE_MIN`] is sampled, since a few frames say little; one in
//! more of a large bucket, so the sample stays near [`SAMPLE_BUDGET`] — reading stops at
//! [`SAMPLE_BUDGET`] stored bytes, and blocks are mapped without reading ahead, so only
//! the sampled frames are read. Blocks that a run would merge (they overlap) are sampled
//! as the merge writes them: their records in timestamp order, from at most
//! 16 blocks per sampled frame.

use std::borrow::Cow;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use crate::storage::entry::{Entry, StaleLog};
use crate::storage::format::block::{
    PayloadSpans, SealedBlock, encode_frame, keep_payloads, payload_spans,
};
use crate::storage::format::block_meta as meta;
use crate::storage::format::codec::Codec;
use crate::storage::format::columns::TableColumns;
use crate::storage::format::index::BlockEntry;

/// Most stored bytes a prediction reads.
pub const SAMPLE_BUDGET: u64 = 64 << 20;
/// Most blocks opened to sample one merged frame; past it the frame is sampled as stored.
const MAX_MERGE_SAMPLE_BLOCKS: usize = 16;
/// One frame in this many is sampled (once the data is large enough).
pub const SAMPLE_EVERY: u64 = 16;
/// Raw bytes sampled at least, when there are that many: smaller data is sampled more
/// densely, down to every frame.
pub const SAMPLE_MIN: u64 = 8 << 20;

/// An eligible sealed block.
pub(super) struct Candidate {
    pub(super) entry: Arc<Entry>,
    pub(super) block: BlockEntry,
    /// The group of overlapping blocks it is merged with, if any: a merge writes the
    /// group's records in timestamp order, which compresses unlike the frames as stored.
    pub(super) group: Option<Arc<Vec<BlockEntry>>>,
    /// The run of small blocks it is joined with, if any (`join.rs`): their frames are
    /// concatenated into frames of the full size, which compress better.
    pub(super) run: Option<Arc<Vec<BlockEntry>>>,
}

/// What the sample measured.
#[derive(Default)]
struct Sample {
    /// Raw bytes of the sampled frames, and what the target codec made of them.
    frames_raw: u64,
    frames_after: u64,
    /// Bytes besides frames of the sampled blocks' copies, and their records.
    overhead_after: u64,
    records: u64,
    /// Stored bytes read.
    read: u64,
    /// Stored bytes it may read.
    budget: u64,
}

impl Sample {
    /// Samples frames `local` (indexes as estimated from the payload size) of `block`,
    /// and its record table. A block that cannot be read is left out of the sample.
    fn take(&mut self, candidate: &Candidate, local: &[usize], target: Codec) {
        let block = match candidate.entry.block_for_sampling(&candidate.block) {
            Ok(block) => block,
            Err(e) => {
                log::debug!("not sampling: {e}");
                return;
            }
        };
        let frames = block.frames().len();
        if frames == 0 {
            return;
        }
        for &index in local {
            if self.read >= self.budget {
                break;
            }
            let taken = match (&candidate.group, &candidate.run) {
                (Some(group), _) => self.take_merged_frame(candidate, group, index, target),
                (None, Some(run)) => self.take_joined_frame(candidate, run, target),
                (None, None) if candidate.block.in_log => {
                    let frame_size = candidate.entry.frame_size() as u64;
                    self.take_span(&block, index as u64 * frame_size, frame_size, target)
                }
                (None, None) => self.take_frame(&block, index.min(frames - 1), target),
            };
            if let Err(e) = taken {
                log::debug!("not sampling a frame: {e}");
            }
        }
        match &candidate.run {
            // Joined: one table for the run, packed as one (its labels and types repeat).
            Some(run) => {
                let mut tables = Vec::new();
                for b in run.iter() {
                    match candidate.entry.block_for_sampling(b) {
                        Ok(member) => tables.extend_from_slice(member.records_section()),
                        Err(e) => {
                            log::debug!("not sampling a table: {e}");
                            return;
                        }
                    }
                }
                let (_, packed) = meta::pack_records(&tables, target);
                let frames = match run.iter().any(|b| b.in_log) {
                    true => joined_frames(run.iter().map(live_payload).sum(), candidate),
                    false => frames,
                };
                self.overhead_after += block.copied_overhead(target, frames, &packed);
                self.records += run.iter().map(|b| b.record_count).sum::<u64>();
            }
            None => {
                let (_, packed) = meta::pack_records(block.records_section(), target);
                let frames = match candidate.block.in_log {
                    true => joined_frames(live_payload(&candidate.block), candidate),
                    false => frames,
                };
                self.overhead_after += block.copied_overhead(target, frames, &packed);
                self.records += candidate.block.record_count;
            }
        }
    }

    /// Samples frame `index` of a log as sealing would cut it: the payloads from the one
    /// starting at `index × frame_size` (in payload bytes) until a frame is full.
    fn take_log_frame(&mut self, log: &StaleLog, index: u64, frame_size: u64, target: Codec) {
        let start = index * frame_size;
        let mut position = 0u64;
        let mut raw = Vec::new();
        for &(offset, size) in &log.payloads {
            let end = position + size;
            if end > start && (raw.len() as u64) < frame_size {
                let mut payload = vec![0u8; size as usize];
                if let Err(e) = log.file.read_exact_at(&mut payload, offset) {
                    log::debug!("not sampling a log: {e}");
                    return;
                }
                raw.extend_from_slice(&payload);
            }
            position = end;
        }
        if raw.is_empty() {
            return;
        }
        if let Err(e) = self.measure(&raw, raw.len() as u64, target) {
            log::debug!("not sampling a log: {e}");
        }
    }

    /// Samples frame `index` of a block as the merge of its group would write it: the
    /// group's records from the frame's share of the block's time range on, in timestamp
    /// order, until a frame is full. Only the blocks overlapping the span such a frame
    /// covers (estimated from the group's payload density) are opened.
    fn take_merged_frame(
        &mut self,
        candidate: &Candidate,
        group: &[BlockEntry],
        index: usize,
        target: Codec,
    ) -> crate::error::Result<()> {
        let frame_size = candidate.entry.frame_size() as u64;
        let b = &candidate.block;
        let frames = b.payload_bytes.div_ceil(frame_size).max(1);
        let from =
            b.first_ts + ((b.last_ts - b.first_ts) as u128 * index as u128 / frames as u128) as u64;
        let first = group.iter().map(|g| g.first_ts).min().unwrap_or(b.first_ts);
        let last = group.iter().map(|g| g.last_ts).max().unwrap_or(b.last_ts);
        let payload: u64 = group.iter().map(|g| g.payload_bytes).sum::<u64>().max(1);
        // Twice the span a frame's worth of payload covers on average.
        let span = ((last - first) as u128 * 2 * frame_size as u128 / payload as u128) as u64;
        let until = from.saturating_add(span.max(1));
        let overlapping: Vec<&BlockEntry> = group
            .iter()
            .filter(|g| g.last_ts >= from && g.first_ts <= until)
            .collect();
        if overlapping.len() > MAX_MERGE_SAMPLE_BLOCKS {
            // Bounded work: sample the frame as stored instead.
            let block = candidate.entry.block_for_sampling(b)?;
            let frames = block.frames().len();
            return match frames {
                0 => Ok(()),
                _ => self.take_frame(&block, index.min(frames - 1), target),
            };
        }
        let mut blocks = Vec::new();
        for g in overlapping {
            blocks.push(candidate.entry.block_for_merge_sampling(g)?);
        }
        let mut order: Vec<(u64, usize, usize)> = blocks
            .iter()
            .enumerate()
            .flat_map(|(bi, block)| {
                block
                    .records()
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| (from..=until).contains(&r.meta.timestamp))
                    .map(move |(ri, r)| (r.meta.timestamp, bi, ri))
            })
            .collect();
        order.sort_unstable();
        let mut raw = Vec::new();
        // A decoded frame per block: the records of overlapping blocks interleave.
        let mut decoded = vec![None; blocks.len()];
        for (_, bi, ri) in order {
            if raw.len() as u64 >= frame_size {
                break;
            }
            raw.extend_from_slice(blocks[bi].payload_with(ri, &mut decoded[bi])?.as_slice());
        }
        if raw.is_empty() {
            return Ok(());
        }
        self.measure(&raw, raw.len() as u64, target)
    }

    /// Samples a frame of a block joined with the blocks after it in its run: theirs
    /// frames concatenated from this block's first on, until a frame is full.
    fn take_joined_frame(
        &mut self,
        candidate: &Candidate,
        run: &[BlockEntry],
        target: Codec,
    ) -> crate::error::Result<()> {
        let frame_size = candidate.entry.frame_size() as u64;
        let from = run
            .iter()
            .position(|b| b.seq == candidate.block.seq)
            .unwrap_or(0);
        let (mut raw, mut read) = (Vec::new(), 0u64);
        'blocks: for b in &run[from..] {
            let block = candidate.entry.block_for_sampling(b)?;
            let spans = b.in_log.then(|| sealed_log_spans(&block)).transpose()?;
            for (index, info) in block.frames().iter().enumerate() {
                if raw.len() as u64 >= frame_size {
                    break 'blocks;
                }
                let stored = block.stored_frame(index)?;
                read += stored.len() as u64;
                match (&spans, info.codec) {
                    // A join keeps a sealed log's payloads, not the operations around them.
                    (Some(spans), _) => {
                        keep_payloads(&mut raw, stored, &spans[index], block.body().what())?
                    }
                    (None, Codec::None) => raw.extend_from_slice(stored),
                    (None, codec) => {
                        raw.extend_from_slice(&codec.decode(stored, info.raw_len as usize)?)
                    }
                }
            }
        }
        if raw.is_empty() {
            return Ok(());
        }
        self.measure(&raw, read, target)
    }

    /// Samples a frame of a log sealed in place as its recompression cuts it: the
    /// payloads of its frames, from the frame holding payload byte `from` on, until a
    /// frame is full.
    fn take_span(
        &mut self,
        block: &SealedBlock,
        from: u64,
        frame_size: u64,
        target: Codec,
    ) -> crate::error::Result<()> {
        let (mut start, mut read) = (0u64, 0u64);
        let mut raw = Vec::new();
        for (index, spans) in sealed_log_spans(block)?.iter().enumerate() {
            start += spans.iter().map(|&(_, size)| size).sum::<u64>();
            if start <= from {
                continue;
            }
            let stored = block.stored_frame(index)?;
            read += stored.len() as u64;
            keep_payloads(&mut raw, stored, spans, block.body().what())?;
            if raw.len() as u64 >= frame_size {
                break;
            }
        }
        if raw.is_empty() {
            return Ok(());
        }
        self.measure(&raw, read, target)
    }

    fn take_frame(
        &mut self,
        block: &SealedBlock,
        index: usize,
        target: Codec,
    ) -> crate::error::Result<()> {
        let info = &block.frames()[index];
        let stored = block.stored_frame(index)?;
        let raw: Cow<[u8]> = if info.codec == Codec::None {
            Cow::Borrowed(stored)
        } else {
            Cow::Owned(info.codec.decode(stored, info.raw_len as usize)?)
        };
        self.measure(&raw, stored.len() as u64, target)
    }

    /// Adds a sampled frame: `raw` (its bytes before encoding, `read` of them read from
    /// disk) and what `target` makes of it.
    fn measure(&mut self, raw: &[u8], read: u64, target: Codec) -> crate::error::Result<()> {
        let (_, encoded) = encode_frame(target, raw)?;
        self.read += read;
        self.frames_raw += raw.len() as u64;
        self.frames_after += encoded.len() as u64;
        Ok(())
    }
}

/// Per frame of `block`, a log sealed in place, its records' payloads (offset, size):
/// what a join keeps of the frame.
fn sealed_log_spans(block: &SealedBlock) -> crate::error::Result<PayloadSpans> {
    let what = block.body().what();
    let raw_lens: Vec<u64> = block.frames().iter().map(|f| f.raw_len).collect();
    let table = TableColumns::decode(block.records_section(), &raw_lens, what)?;
    payload_spans(block.frames().len(), &table, what)
}

/// The frames a join makes of `payload` bytes: a sealed log's frames, whose payloads lie
/// among the log's operations, are joined into frames of the entry's frame size.
fn joined_frames(payload: u64, candidate: &Candidate) -> usize {
    let frame_size = (candidate.entry.frame_size() as u64).max(1);
    payload.div_ceil(frame_size).max(1) as usize
}

/// Payload bytes of a block's live records (tombstoned ones are dropped by a rewrite).
fn live_payload(b: &BlockEntry) -> u64 {
    if b.record_count == 0 {
        return 0;
    }
    (b.payload_bytes as u128 * b.live_records() as u128 / b.record_count as u128) as u64
}

/// What a compression would rewrite in one entry.
pub(crate) struct EntryPlan {
    /// The entry's frame size (raw bytes per frame).
    pub(crate) frame_size: u64,
    /// Its eligible sealed blocks.
    pub(super) candidates: Vec<Candidate>,
    /// Its logs that would be sealed and compressed.
    pub(crate) logs: Vec<StaleLog>,
}

impl EntryPlan {
    fn raw_bytes(&self) -> u64 {
        self.candidates
            .iter()
            .map(|c| live_payload(&c.block))
            .sum::<u64>()
            + self.logs.iter().map(|l| l.payload_bytes).sum::<u64>()
    }
}

/// The bytes the eligible blocks and stale logs would take once compressed to `target`.
///
/// Each entry is predicted from its own sample: entries compress unlike each other
/// (images barely, JSON rows tenfold), so one ratio over a mixed bucket would weigh them
/// by how the sample happened to fall. Each entry's stride follows its own size (a small
/// entry is sampled whole), thinned on a large bucket so the whole sample stays near the
/// shared read budget; each entry's sample starts at its first frame, so every entry is
/// measured, and one the budget left unsampled takes the bucket's measured ratios.
pub(super) fn predict_bytes_after(plans: &[EntryPlan], target: Codec, walked: &dyn Fn(u64)) -> u64 {
    let total_raw: u64 = plans.iter().map(EntryPlan::raw_bytes).sum();
    // Sparser on a large bucket, so that all its samples stay near SAMPLE_BUDGET.
    let bucket_stride = total_raw.div_ceil(SAMPLE_BUDGET).max(1);
    let mut read = 0u64;
    let samples: Vec<Sample> = plans
        .iter()
        .map(|plan| {
            let mut sample = Sample {
                budget: SAMPLE_BUDGET.saturating_sub(read),
                ..Default::default()
            };
            // One frame in 16 of an entry; denser on a small one (at least SAMPLE_MIN
            // sampled: a few frames say little).
            let stride = plan
                .raw_bytes()
                .div_ceil(SAMPLE_MIN)
                .clamp(1, SAMPLE_EVERY)
                .max(bucket_stride);
            sample.take_entry(plan, stride, target, walked);
            read += sample.read;
            sample
        })
        .collect();
    let mut bucket = Sample::default();
    for s in &samples {
        bucket.frames_raw += s.frames_raw;
        bucket.frames_after += s.frames_after;
        bucket.overhead_after += s.overhead_after;
        bucket.records += s.records;
    }
    plans
        .iter()
        .zip(&samples)
        .map(|(plan, sample)| {
            let measured = if sample.frames_raw > 0 {
                sample
            } else {
                &bucket
            };
            scale(plan, measured)
        })
        .sum::<f64>()
        .round() as u64
}

impl Sample {
    /// Samples one in `stride` frames of an entry's blocks and logs, from its first.
    fn take_entry(&mut self, plan: &EntryPlan, stride: u64, target: Codec, walked: &dyn Fn(u64)) {
        let frame_size = plan.frame_size.max(1);
        let mut position = 0u64;
        for candidate in &plan.candidates {
            let frames = candidate.block.payload_bytes.div_ceil(frame_size).max(1);
            let first = position.div_ceil(stride) * stride;
            let local: Vec<usize> = (first..position + frames)
                .step_by(stride as usize)
                .map(|k| (k - position) as usize)
                .collect();
            position += frames;
            if !local.is_empty() && self.read < self.budget {
                self.take(candidate, &local, target);
            }
            walked(candidate.block.size);
        }
        // Logs are sealed into frames the same way: sample those too.
        for log in &plan.logs {
            let frames = log.payload_bytes.div_ceil(frame_size).max(1);
            let first = position.div_ceil(stride) * stride;
            for k in (first..position + frames).step_by(stride as usize) {
                if self.read >= self.budget {
                    break;
                }
                self.take_log_frame(log, k - position, frame_size, target);
            }
            position += frames;
            walked(log.bytes);
        }
    }
}

/// An entry's bytes after, scaled from what `sample` measured.
fn scale(plan: &EntryPlan, sample: &Sample) -> f64 {
    let frame_ratio = if sample.frames_raw > 0 {
        sample.frames_after as f64 / sample.frames_raw as f64
    } else {
        1.0
    };
    let per_record =
        (sample.records > 0).then(|| sample.overhead_after as f64 / sample.records as f64);
    let blocks: f64 = plan
        .candidates
        .iter()
        .map(|c| {
            let b = &c.block;
            let overhead = per_record.map_or(b.size.saturating_sub(b.payload_bytes) as f64, |r| {
                r * b.live_records() as f64
            });
            live_payload(b) as f64 * frame_ratio + overhead
        })
        .sum();
    let sealed_logs: f64 = plan
        .logs
        .iter()
        .map(|l| {
            // Without a sampled table, the log's own metadata packed as the frames pack.
            let overhead = per_record.map_or(
                l.bytes.saturating_sub(l.payload_bytes) as f64 * frame_ratio,
                |r| r * l.records as f64,
            );
            l.payload_bytes as f64 * frame_ratio + overhead
        })
        .sum();
    blocks + sealed_logs
}
