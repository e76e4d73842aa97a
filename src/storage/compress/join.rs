//! Joining small blocks: a run of adjacent eligible blocks, each smaller than a frame, is
//! recompressed into one block whose frames concatenate the sources' frames up to the
//! frame size.
//!
//! Why: writes seal a block every `max_block_records` records, so an entry of small
//! records (JSON rows, log lines) is hundreds of blocks of a few hundred KB, each one
//! frame. Recompressed one for one, every block costs a file of its own — create, fsync,
//! unlink of the old one, a mapping: a quarter of a run's CPU on the fixtures — and each
//! small frame compresses on its own, worse than the data would in bigger frames. Joined,
//! a run writes a few times fewer files with frames of the configured size.
//!
//! The sources' records keep their order (the run's blocks are adjacent in time and do
//! not overlap); each record's frame number and offset are moved to where its bytes land
//! in the joined frames. Blocks of a frame or more are not joined: they already have full
//! frames, and blocks of incompressible data (camera frames) are that large, so they keep
//! the frame-copying path that leaves frames stored raw as they are.

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::storage::format::binary::{BinaryWriter, zigzag};
use crate::storage::format::block::{PayloadSpans, encode_frame, keep_payloads, payload_spans};
use crate::storage::format::block_meta::{self as meta, BlockSummary};
use crate::storage::format::codec::Codec;
use crate::storage::format::columns::TableColumns;
use crate::storage::format::frames::BlockFrames;
use crate::storage::format::index::BlockEntry;

/// A joined block has at most this many times `max_block_records` records...
pub(super) const JOIN_RECORDS: u64 = 8;
/// ...and at most this many frames' worth of payload.
pub(super) const JOIN_FRAMES: u64 = 4;

/// Cuts `blocks` (eligible, alone in their overlap group, in time order) into runs to
/// join: consecutive blocks with no other sealed block of the entry between them
/// (`neighbours` says whether two are adjacent), each smaller than a frame, within the
/// limits above. A block that joins nothing is a run of one.
pub(super) fn runs(
    blocks: Vec<BlockEntry>,
    frame_size: u64,
    max_block_records: u64,
    neighbours: impl Fn(&BlockEntry, &BlockEntry) -> bool,
) -> Vec<Vec<BlockEntry>> {
    let small = |b: &BlockEntry| b.payload_bytes < frame_size;
    let mut runs: Vec<Vec<BlockEntry>> = Vec::new();
    for b in blocks {
        if let Some(run) = runs.last_mut()
            && let Some(last) = run.last()
            && small(last)
            && small(&b)
            && neighbours(last, &b)
        {
            let records: u64 = run.iter().map(|r| r.record_count).sum();
            let payload: u64 = run.iter().map(|r| r.payload_bytes).sum();
            if records + b.record_count <= JOIN_RECORDS * max_block_records
                && payload + b.payload_bytes <= JOIN_FRAMES * frame_size
            {
                run.push(b);
                continue;
            }
        }
        runs.push(vec![b]);
    }
    runs
}

thread_local! {
    /// The buffer an output frame's source frames are concatenated in, reused by each
    /// thread: a fresh frame-sized allocation per frame costs a page fault per 4 KiB
    /// touched (and its unmapping), a tenth of the encoding's own time.
    static JOIN_BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// One source of a join: its index entry, its frames (mapped) and its record table as
/// columns (no record made of each row: joining thousands of records must not cost a
/// label map each).
pub(super) struct JoinSource {
    pub(super) entry: BlockEntry,
    pub(super) frames: Arc<BlockFrames>,
    pub(super) table: TableColumns,
}

/// The sources of one joined block, and its layout.
pub(super) struct Joined {
    /// The index entries of the sources: what the joined block replaces.
    pub(super) old: Vec<BlockEntry>,
    sources: Vec<JoinSource>,
    /// Per output frame, the source frames it concatenates: (source, frame).
    frames: Vec<Vec<(usize, usize)>>,
    raw_lens: Vec<u64>,
    /// Per source, per frame: where it lands (output frame, offset of its first byte).
    placed: Vec<Vec<(u32, u64)>>,
    /// Per source that is a log sealed in place, per frame: its records' payloads
    /// (offset in the frame, size, in table order), the only bytes of the frame a join
    /// keeps (`format/block/in_log.rs`). `None` for a block: its frames are kept whole.
    payloads: Vec<Option<PayloadSpans>>,
    records: u64,
    payload_bytes: u64,
    first_ts: u64,
    last_ts: u64,
}

impl Joined {
    /// Lays out the join of `sources` (in time order) with frames of `frame_size`.
    pub(super) fn new(sources: Vec<JoinSource>, frame_size: u64) -> Result<Joined> {
        let mut frames: Vec<Vec<(usize, usize)>> = Vec::new();
        let mut raw_lens: Vec<u64> = Vec::new();
        let mut placed: Vec<Vec<(u32, u64)>> = Vec::with_capacity(sources.len());
        let payloads = sources
            .iter()
            .map(|source| {
                source
                    .entry
                    .in_log
                    .then(|| {
                        payload_spans(
                            source.frames.frames().len(),
                            &source.table,
                            source.frames.what(),
                        )
                    })
                    .transpose()
            })
            .collect::<Result<Vec<_>>>()?;
        for (s, source) in sources.iter().enumerate() {
            let mut here = Vec::with_capacity(source.frames.frames().len());
            for (f, info) in source.frames.frames().iter().enumerate() {
                if raw_lens.last().is_none_or(|&len| len >= frame_size) {
                    frames.push(Vec::new());
                    raw_lens.push(0);
                }
                let out = frames.len() - 1;
                frames[out].push((s, f));
                here.push((out as u32, raw_lens[out]));
                raw_lens[out] += match &payloads[s] {
                    Some(spans) => spans[f].iter().map(|&(_, size)| size).sum(),
                    None => info.raw_len,
                };
            }
            placed.push(here);
        }
        let mut previous: Option<u64> = None;
        for source in &sources {
            let (Some(&first), Some(&last)) =
                (source.table.stamps.first(), source.table.stamps.last())
            else {
                return Err(Error::internal("a block to join has no records"));
            };
            if let Some(before) = previous
                && before >= first
            {
                return Err(Error::internal(format!(
                    "blocks to join overlap: record {first} after {before}"
                )));
            }
            previous = Some(last);
        }
        let records = sources.iter().map(|s| s.table.stamps.len() as u64).sum();
        let payload_bytes = sources.iter().flat_map(|s| &s.table.sizes).sum();
        let (Some(first), Some(last)) = (sources.first(), sources.last()) else {
            return Err(Error::internal("no blocks to join"));
        };
        let (first_ts, last_ts) = (
            first.table.stamps[0],
            last.table.stamps[last.table.stamps.len() - 1],
        );
        Ok(Joined {
            old: sources.iter().map(|s| s.entry.clone()).collect(),
            sources,
            frames,
            raw_lens,
            placed,
            payloads,
            records,
            payload_bytes,
            first_ts,
            last_ts,
        })
    }

    /// Output frames.
    pub(super) fn frame_count(&self) -> usize {
        self.frames.len()
    }

    /// Raw length of output frame `i`.
    pub(super) fn raw_len(&self, i: usize) -> u64 {
        self.raw_lens[i]
    }

    /// Output frame `i`, encoded with `target`: its source frames decoded and
    /// concatenated. Returns the codec used, the stored bytes and the raw length.
    pub(super) fn encode(&self, i: usize, target: Codec) -> Result<(Codec, Vec<u8>, u64)> {
        JOIN_BUFFER.with_borrow_mut(|raw| {
            self.raw_into(i, raw)?;
            let (codec, stored) = encode_frame(target, raw)?;
            Ok((codec, stored, raw.len() as u64))
        })
    }

    /// Output frame `i` as it is before encoding: what is written for a frame that did
    /// not compress, once a later one did.
    pub(super) fn raw(&self, i: usize) -> Result<Vec<u8>> {
        let mut raw = Vec::new();
        self.raw_into(i, &mut raw)?;
        Ok(raw)
    }

    /// Whether the join is a log sealed in place alone: when none of its frames
    /// compresses, it keeps its file rather than being written again as it is.
    pub(super) fn is_one_sealed_log(&self) -> bool {
        matches!(self.old.as_slice(), [one] if one.in_log)
    }

    fn raw_into(&self, i: usize, raw: &mut Vec<u8>) -> Result<()> {
        {
            raw.clear();
            for &(s, f) in &self.frames[i] {
                let frames = &self.sources[s].frames;
                let info = &frames.frames()[f];
                let stored = frames.stored_frame(f)?;
                if let Some(spans) = &self.payloads[s] {
                    keep_payloads(raw, stored, &spans[f], frames.what())?;
                } else if info.codec == Codec::None {
                    raw.extend_from_slice(stored);
                } else {
                    raw.extend_from_slice(&info.codec.decode(stored, info.raw_len as usize)?);
                }
            }
            Ok(())
        }
    }

    /// The joined record table (format 3, as `block_meta::encode_records` writes it):
    /// the sources' rows one after another, their frames and offsets moved, their
    /// dictionaries merged. Packed for a block of `target`.
    pub(super) fn pack_records(&self, target: Codec) -> (u32, Vec<u8>) {
        let mut dicts: [(Vec<&str>, HashMap<&str, u64>); 3] = Default::default();
        let remaps: Vec<[Vec<u64>; 3]> = self
            .sources
            .iter()
            .map(|s| {
                let t = &s.table;
                let mut remap: [Vec<u64>; 3] = Default::default();
                for (d, names) in [&t.types, &t.keys, &t.values].into_iter().enumerate() {
                    let (dict, index) = &mut dicts[d];
                    remap[d] = names
                        .iter()
                        .map(|name| {
                            *index.entry(name.as_str()).or_insert_with(|| {
                                dict.push(name.as_str());
                                dict.len() as u64 - 1
                            })
                        })
                        .collect();
                }
                remap
            })
            .collect();
        let mut cols: [BinaryWriter; 8] = Default::default();
        let (mut previous_ts, mut previous_frame, mut expected_offset) = (0u64, 0u32, 0u64);
        let sources = self.sources.iter().zip(&remaps).zip(&self.placed);
        for (((source, remap), placed), payloads) in sources.zip(&self.payloads) {
            let t = &source.table;
            let mut label = 0;
            // Within a sealed log's frame: its rows' payloads so far, which land one
            // after another.
            let (mut source_frame, mut kept) = (u32::MAX, 0u64);
            for row in 0..t.stamps.len() {
                let ts = t.stamps[row];
                let (frame, base) = placed[t.frames[row] as usize];
                let offset = match payloads {
                    Some(_) => {
                        if t.frames[row] != source_frame {
                            (source_frame, kept) = (t.frames[row], 0);
                        }
                        kept += t.sizes[row];
                        base + kept - t.sizes[row]
                    }
                    None => base + t.offsets[row],
                };
                let size = t.sizes[row];
                cols[0].varint(ts.wrapping_sub(previous_ts));
                previous_ts = ts;
                cols[1].varint(u64::from(frame.wrapping_sub(previous_frame)));
                if frame != previous_frame {
                    expected_offset = 0;
                }
                previous_frame = frame;
                cols[2].varint(zigzag(offset.wrapping_sub(expected_offset) as i64));
                expected_offset = offset.wrapping_add(size);
                cols[3].varint(size);
                cols[4].varint(remap[0][t.type_ids[row] as usize]);
                let labels = t.label_counts[row];
                cols[5].varint(labels);
                for _ in 0..labels {
                    cols[6].varint(remap[1][t.key_ids[label] as usize]);
                    cols[7].varint(remap[2][t.value_ids[label] as usize]);
                    label += 1;
                }
            }
        }
        let mut w = BinaryWriter::default();
        w.varint(self.records);
        for (dict, _) in &dicts {
            w.varint(dict.len() as u64);
            for name in dict {
                w.short_str(name);
            }
        }
        for col in &cols {
            w.buf.extend_from_slice(&col.buf);
        }
        meta::pack_records(&w.buf, target)
    }

    /// Rows of the sources' record tables (what packing the joined one weighs, in bytes
    /// of the order of a few per row).
    pub(super) fn table_weight(&self) -> u64 {
        self.records * 16
    }

    /// What the joined block holds, as its summary needs it (size, codec and checksum
    /// are the writer's).
    pub(super) fn summary(&self, target: Codec) -> BlockSummary {
        BlockSummary {
            first_ts: self.first_ts,
            last_ts: self.last_ts,
            record_count: self.records,
            size: 0,
            payload_bytes: self.payload_bytes,
            codec: target,
            meta_crc: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::format::block::{BlockWriter, SealedBlock};
    use crate::storage::record::RecordMeta;

    /// A raw block of `stamps` (frames of `frame_size`), as a join source.
    fn source(dir: &std::path::Path, seq: u64, stamps: &[u64], frame_size: usize) -> JoinSource {
        let path = dir.join(format!("{seq}.blk"));
        let mut writer = BlockWriter::create(&path, Codec::None, frame_size).expect("create");
        for &ts in stamps {
            let meta = RecordMeta {
                timestamp: ts,
                labels: [
                    ("n".to_string(), ts.to_string()),
                    ("src".to_string(), seq.to_string()),
                ]
                .into(),
                content_type: if ts.is_multiple_of(2) {
                    "text/plain"
                } else {
                    "text/csv"
                }
                .into(),
                size: 0,
            };
            writer
                .push(&meta, format!("payload {ts};").as_bytes())
                .expect("push");
        }
        let summary = writer.finish().expect("finish");
        let (frames, table) =
            SealedBlock::open_for_joining(&path, format!("block {seq}"), None).expect("open");
        let mut entry = BlockEntry::from_summary(seq, &summary);
        entry.seq = seq;
        JoinSource {
            entry,
            frames,
            table,
        }
    }

    #[test]
    fn joined_rows_point_at_their_bytes_in_the_joined_frames() {
        let dir = tempfile::tempdir().expect("tempdir");
        // Frames of 40 bytes in the sources (a few records each), 100 in the join.
        let a = source(dir.path(), 1, &[1, 2, 3, 4, 5], 40);
        let b = source(dir.path(), 2, &[10, 20, 30], 40);
        let source_frames = a.frames.frames().len() + b.frames.frames().len();
        let joined = Joined::new(vec![a, b], 100).expect("join");
        assert!(joined.frame_count() < source_frames);
        let frames: Vec<Vec<u8>> = (0..joined.frame_count())
            .map(|i| {
                let (codec, stored, raw_len) = joined.encode(i, Codec::Zstd(3)).expect("encode");
                codec.decode(&stored, raw_len as usize).expect("decode")
            })
            .collect();
        let (packing, packed) = joined.pack_records(Codec::Zstd(3));
        assert_eq!(packing, meta::META_ZSTD);
        let raw_len = u64::from_le_bytes(packed[..8].try_into().expect("a length")) as usize;
        let table = Codec::Zstd(3)
            .decode(&packed[8..], raw_len)
            .expect("unpacked");
        let lens: Vec<u64> = frames.iter().map(|f| f.len() as u64).collect();
        let columns = TableColumns::decode(&table, &lens, "joined").expect("a valid table");
        assert_eq!(columns.stamps, vec![1, 2, 3, 4, 5, 10, 20, 30]);
        let mut label = 0;
        for row in 0..columns.stamps.len() {
            let ts = columns.stamps[row];
            let frame = &frames[columns.frames[row] as usize];
            let at = columns.offsets[row] as usize;
            let bytes = &frame[at..at + columns.sizes[row] as usize];
            assert_eq!(bytes, format!("payload {ts};").as_bytes());
            let content_type = &columns.types[columns.type_ids[row] as usize];
            assert_eq!(
                content_type,
                if ts.is_multiple_of(2) {
                    "text/plain"
                } else {
                    "text/csv"
                }
            );
            let labels: Vec<(&str, &str)> = (0..columns.label_counts[row])
                .map(|_| {
                    let pair = (
                        columns.keys[columns.key_ids[label] as usize].as_str(),
                        columns.values[columns.value_ids[label] as usize].as_str(),
                    );
                    label += 1;
                    pair
                })
                .collect();
            let src = if ts < 10 { "1" } else { "2" };
            assert_eq!(labels, vec![("n", ts.to_string().as_str()), ("src", src)]);
        }
        let summary = joined.summary(Codec::Zstd(3));
        assert_eq!((summary.first_ts, summary.last_ts), (1, 30));
        assert_eq!(summary.record_count, 8);
        assert_eq!(
            joined.old.iter().map(|b| b.seq).collect::<Vec<_>>(),
            vec![1, 2]
        );
    }

    #[test]
    fn overlapping_sources_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = source(dir.path(), 1, &[1, 2, 3], 40);
        let b = source(dir.path(), 2, &[3, 4], 40);
        assert!(Joined::new(vec![a, b], 100).is_err());
    }

    #[test]
    fn runs_join_small_adjacent_blocks_within_the_limits() {
        let entry = |seq: u64, records: u64, payload: u64| {
            let mut b = BlockEntry::from_summary(
                seq,
                &BlockSummary {
                    first_ts: seq * 100,
                    last_ts: seq * 100 + 50,
                    record_count: records,
                    size: payload,
                    payload_bytes: payload,
                    codec: Codec::None,
                    meta_crc: 0,
                },
            );
            b.seq = seq;
            b
        };
        let blocks = vec![
            entry(1, 10, 100),
            entry(2, 10, 100),
            entry(3, 10, 5000), // a frame or more: alone
            entry(4, 10, 100),
            entry(5, 10, 100),
            entry(6, 10, 100), // not adjacent to 5
            entry(7, 10, 100),
            entry(8, 10, 100),
        ];
        let runs = runs(blocks, 1000, 15, |a, b| !(a.seq == 5 && b.seq == 6));
        let seqs: Vec<Vec<u64>> = runs
            .iter()
            .map(|r| r.iter().map(|b| b.seq).collect())
            .collect();
        // At most 8 × 15 = 120 records and 4 frames (4000 bytes) per run.
        assert_eq!(seqs, vec![vec![1, 2], vec![3], vec![4, 5], vec![6, 7, 8]]);
    }
}
