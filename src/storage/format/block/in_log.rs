//! A log sealed in place: the log file itself becomes the block, so a seal writes
//! kilobytes instead of copying the payload a second time.
//!
//! ```text
//! "HLLOG001" | op | op | … | [len][crc] 4 | meta | footer
//! ```
//!
//! The seal appends one last operation to the log (kind 4), whose body is a block's
//! metadata and footer: the footer ends the file as every block's does, and points at the
//! metadata inside that operation. The live records, in timestamp order, are cut into
//! runs that lie one after another in the file; each run is one raw frame, from its first
//! record's operation header to its last record's payload end, up to the entry's frame
//! size (a larger record is a frame alone). A frame is therefore the log's own bytes:
//! operation headers, record fields and payloads, and any dead operations between them
//! (label changes, removals, records removed or replaced, an earlier seal trailer). A
//! record's row points at its payload inside its frame. A belated record, written after
//! records with later timestamps, starts a frame of its own.
//!
//! The seal computes each frame's checksum from the log's bytes (read back, normally from
//! the page cache: reads, not writes) and, in the same pass, checks every live record's
//! operation against the checksum it was written with, so the frame checksum never
//! vouches for bytes that were damaged before the seal. Frames of about the configured
//! size keep the frame table and the checks a read needs as small as a copied block's.
//!
//! The file therefore opens both ways: as a log (the trailer replays as nothing), which is
//! what an open does when a crash came before the index commit, and as a block. A log
//! sealed with one frame per record (what an earlier version wrote) reads the same way.

use std::collections::HashMap;
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::footer::{FOOTER_LEN, Footer};
use crate::error::{Error, Result};
use crate::storage::format::block_meta::{self as meta, BlockSummary, FrameInfo};
use crate::storage::format::block_record::BlockRecord;
use crate::storage::format::codec::Codec;
use crate::storage::format::columns::TableColumns;
use crate::storage::format::log::LogRecord;
use crate::storage::format::oplog::OP_HEADER;

/// Bytes read at a time while a frame's checksum is computed.
const CHUNK: u64 = 1 << 20;

/// One frame of a sealed log: a run of live records (indexes into the records in
/// timestamp order) and the bytes of the log it covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameSpan {
    /// The records the frame holds.
    pub records: Range<usize>,
    /// The file offset of the first record's operation header.
    pub start: u64,
    /// The file offset where the last record's payload ends.
    pub end: u64,
}

/// Frame checksums an earlier attempt at the same seal computed, by the span of the log
/// they cover: a log only grows, so bytes read once need not be read again when the seal
/// starts over after a relabel or a removal.
pub type SpanChecksums = HashMap<(u64, u64), u32>;

/// Cuts `records` (a log's live records, in timestamp order) into frames: a record joins
/// the frame before it when it starts after that frame's end in the file and the frame,
/// with it, spans at most `frame_size` bytes.
pub fn plan_frames(records: &[LogRecord], frame_size: u64) -> Vec<FrameSpan> {
    let mut spans: Vec<FrameSpan> = Vec::new();
    for (i, rec) in records.iter().enumerate() {
        let end = rec.offset + rec.meta.size;
        match spans.last_mut() {
            Some(span) if rec.op >= span.end && end - span.start <= frame_size => {
                span.records.end = i + 1;
                span.end = end;
            }
            _ => spans.push(FrameSpan {
                records: i..i + 1,
                start: rec.op,
                end,
            }),
        }
    }
    spans
}

/// The frames of `spans` over `records` (as [`plan_frames`] cut them) in the log `file`
/// at `path`: each frame's checksum, computed from the file unless `known` holds it, and
/// each of its records' operations checked on the way (module documentation).
pub fn check_frames(
    file: &File,
    path: &Path,
    records: &[LogRecord],
    spans: &[FrameSpan],
    known: &mut SpanChecksums,
) -> Result<Vec<FrameInfo>> {
    let mut buf = Vec::new();
    spans
        .iter()
        .map(|span| {
            let crc = match known.get(&(span.start, span.end)) {
                Some(&crc) => crc,
                None => {
                    let crc =
                        check_span(file, path, &records[span.records.clone()], span, &mut buf)?;
                    known.insert((span.start, span.end), crc);
                    crc
                }
            };
            let len = span.end - span.start;
            Ok(FrameInfo {
                offset: span.start,
                stored_len: len,
                raw_len: len,
                codec: Codec::None,
                crc,
            })
        })
        .collect()
}

/// A record's operation as a frame's bytes stream past: its `[len][crc]` header and the
/// checksum of its body so far.
struct OpCheck {
    header: [u8; OP_HEADER as usize],
    body: crc32fast::Hasher,
}

/// The part of `range` (file offsets) that `chunk`, starting at file offset `at`, holds,
/// and where that part starts in `range`.
fn overlap(range: Range<u64>, at: u64, chunk: &[u8]) -> (usize, &[u8]) {
    let from = range.start.max(at);
    let to = range.end.min(at + chunk.len() as u64);
    if from >= to {
        return (0, &[]);
    }
    (
        (from - range.start) as usize,
        &chunk[(from - at) as usize..(to - at) as usize],
    )
}

/// Reads `span` of the log chunk by chunk: the checksum of its bytes, once each of `recs`
/// (its records, in file order) has matched its operation's header.
fn check_span(
    file: &File,
    path: &Path,
    recs: &[LogRecord],
    span: &FrameSpan,
    buf: &mut Vec<u8>,
) -> Result<u32> {
    let mut frame = crc32fast::Hasher::new();
    let mut next = 0usize;
    let mut op = OpCheck {
        header: [0; OP_HEADER as usize],
        body: crc32fast::Hasher::new(),
    };
    let mut at = span.start;
    while at < span.end {
        let n = (span.end - at).min(CHUNK) as usize;
        buf.resize(n, 0);
        file.read_exact_at(buf, at)
            .map_err(|e| Error::io(format!("reading {} to seal it", path.display()), e))?;
        frame.update(buf);
        let chunk_end = at + n as u64;
        while let Some(rec) = recs.get(next) {
            if rec.op >= chunk_end {
                break;
            }
            let body_start = rec.op + OP_HEADER;
            let end = rec.offset + rec.meta.size;
            let (into, part) = overlap(rec.op..body_start, at, buf);
            op.header[into..into + part.len()].copy_from_slice(part);
            op.body.update(overlap(body_start..end, at, buf).1);
            if end > chunk_end {
                break;
            }
            let body = std::mem::replace(&mut op.body, crc32fast::Hasher::new());
            check_op(rec, &op.header, body.finalize(), path)?;
            next += 1;
        }
        at = chunk_end;
    }
    if next != recs.len() {
        return Err(Error::internal(format!(
            "{}: a frame to seal does not hold all its records",
            path.display()
        )));
    }
    Ok(frame.finalize())
}

/// Checks that the operation of `rec`, with `header`, ends where its payload does and
/// that its body's checksum (`crc`) is the one it was written with.
fn check_op(
    rec: &LogRecord,
    header: &[u8; OP_HEADER as usize],
    crc: u32,
    path: &Path,
) -> Result<()> {
    let body_len = u64::from(u32::from_le_bytes([
        header[0], header[1], header[2], header[3],
    ]));
    let written = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    if rec.op + OP_HEADER + body_len != rec.offset + rec.meta.size {
        return Err(Error::internal(format!(
            "{}: the operation of record {} does not end where its payload does",
            path.display(),
            rec.meta.timestamp
        )));
    }
    if crc != written {
        return Err(Error::internal(format!(
            "{} is corrupt: record {} no longer matches its checksum",
            path.display(),
            rec.meta.timestamp
        )));
    }
    Ok(())
}

/// The seal trailer's bytes (metadata, then footer) for `records` (in timestamp order, at
/// least one) cut into `spans` with their `frames`, the metadata starting at file offset
/// `meta_offset`; and what the block holds once the trailer ends the file.
pub fn seal_trailer(
    records: &[LogRecord],
    spans: &[FrameSpan],
    frames: &[FrameInfo],
    meta_offset: u64,
) -> (Vec<u8>, BlockSummary) {
    let table: Vec<BlockRecord> = spans
        .iter()
        .enumerate()
        .flat_map(|(frame, span)| {
            records[span.records.clone()]
                .iter()
                .map(move |rec| BlockRecord {
                    meta: rec.meta.clone(),
                    frame: frame as u32,
                    offset: rec.offset - span.start,
                })
        })
        .collect();
    let mut encoded = Vec::new();
    meta::encode_records(&table, &mut encoded);
    let (packing, packed) = meta::pack_records(&encoded, Codec::None);
    let mut bytes = meta::assemble_packed(&meta::encode_head(Codec::None, frames), &packed);
    let meta_len = bytes.len() as u64;
    let meta_crc = crc32fast::hash(&bytes);
    bytes.extend_from_slice(&Footer::encode(
        meta_offset,
        meta_len,
        meta_crc,
        packing | meta::TABLE_V3,
    ));
    let summary = BlockSummary {
        first_ts: records.first().map_or(0, |r| r.meta.timestamp),
        last_ts: records.last().map_or(0, |r| r.meta.timestamp),
        record_count: records.len() as u64,
        size: meta_offset + meta_len + FOOTER_LEN as u64,
        payload_bytes: records.iter().map(|r| r.meta.size).sum(),
        codec: Codec::None,
        meta_crc,
    };
    (bytes, summary)
}

/// Per frame of a log sealed in place, its records' payloads: (offset in the frame, size),
/// in table order.
pub type PayloadSpans = Vec<Vec<(u64, u64)>>;

/// Per frame of a log sealed in place (`frame_count` frames, `table` its record table),
/// the payloads of its records as (offset in the frame, size), in table order: the only
/// bytes of the frames a recompression keeps (the rest is the log's operation headers,
/// record fields and dead operations).
pub fn payload_spans(frame_count: usize, table: &TableColumns, what: &str) -> Result<PayloadSpans> {
    let mut spans = vec![Vec::new(); frame_count];
    for row in 0..table.stamps.len() {
        spans
            .get_mut(table.frames[row] as usize)
            .ok_or_else(|| {
                Error::internal(format!("{what} is corrupt: a record names a missing frame"))
            })?
            .push((table.offsets[row], table.sizes[row]));
    }
    Ok(spans)
}

/// Appends to `raw` the payloads `spans` (as [`payload_spans`] gives them) of `frame`, a
/// frame of the sealed log `what`.
pub fn keep_payloads(
    raw: &mut Vec<u8>,
    frame: &[u8],
    spans: &[(u64, u64)],
    what: &str,
) -> Result<()> {
    for &(offset, size) in spans {
        let payload = frame.get(offset as usize..offset.saturating_add(size) as usize);
        raw.extend_from_slice(payload.ok_or_else(|| {
            Error::internal(format!(
                "{what} is corrupt: a record lies outside its frame"
            ))
        })?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::format::block::SealedBlock;
    use crate::storage::format::frames::DecodedFrame;
    use crate::storage::format::log::OpenLog;
    use crate::storage::record::{Labels, RecordMeta};

    fn meta(ts: u64, label: &str) -> RecordMeta {
        let mut labels = Labels::new();
        labels.insert("k".into(), label.into());
        RecordMeta {
            timestamp: ts,
            labels,
            content_type: "text/plain".into(),
            size: 0,
        }
    }

    fn frames_of(
        log: &OpenLog,
        frame_size: u64,
    ) -> Result<(Vec<LogRecord>, Vec<FrameSpan>, Vec<FrameInfo>)> {
        let records: Vec<LogRecord> = log.records().values().cloned().collect();
        let spans = plan_frames(&records, frame_size);
        let frames = check_frames(
            &*log.file()?,
            log.path(),
            &records,
            &spans,
            &mut SpanChecksums::new(),
        )?;
        Ok((records, spans, frames))
    }

    fn seal(log: &mut OpenLog, frame_size: u64) -> BlockSummary {
        let (records, spans, frames) = frames_of(log, frame_size).unwrap();
        let mut summary = None;
        log.append_seal(|at| {
            let (bytes, s) = seal_trailer(&records, &spans, &frames, at);
            summary = Some(s);
            bytes
        })
        .unwrap();
        summary.unwrap()
    }

    fn payloads(block: &SealedBlock) -> Vec<Vec<u8>> {
        let mut frame: DecodedFrame = None;
        (0..block.records().len())
            .map(|i| {
                block
                    .payload_with(i, &mut frame)
                    .unwrap()
                    .as_slice()
                    .to_vec()
            })
            .collect()
    }

    /// Records written out of order, relabeled, removed and replaced, sealed in place:
    /// the file opens as a block holding exactly the live records, and still as the same
    /// log.
    #[test]
    fn a_sealed_log_opens_as_a_block_and_as_the_same_log() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.log");
        let mut log = OpenLog::create(&path).unwrap();
        for ts in [30, 10, 20, 40] {
            log.append_record(meta(ts, "a"), format!("payload {ts}").as_bytes())
                .unwrap();
        }
        log.append_labels(20, &meta(0, "relabeled").labels).unwrap();
        log.append_remove(40).unwrap();
        let first = seal(&mut log, 1 << 20);
        // A change after a trailer is sealed again: the newest trailer ends the file.
        log.append_record(meta(25, "late"), b"payload 25").unwrap();
        let summary = seal(&mut log, 1 << 20);
        assert_ne!(first.meta_crc, summary.meta_crc);
        assert_eq!(summary.size, log.file_len());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), summary.size);

        let block = SealedBlock::open(&path, "block".into(), Some(summary.meta_crc)).unwrap();
        assert_eq!(block.summary(), summary);
        let stamps: Vec<u64> = block.records().iter().map(|r| r.meta.timestamp).collect();
        assert_eq!(stamps, vec![10, 20, 25, 30]);
        // 10, 20 and 25 follow one another in the file (over the dead operations and the
        // first trailer between them); 30 was written before them.
        assert_eq!(block.frames().len(), 2);
        assert_eq!(block.records()[1].meta.labels, meta(0, "relabeled").labels);
        let expected: Vec<Vec<u8>> = stamps
            .iter()
            .map(|ts| format!("payload {ts}").into_bytes())
            .collect();
        assert_eq!(payloads(&block), expected);

        let again = OpenLog::open(&path).unwrap();
        assert_eq!(again.records().keys().copied().collect::<Vec<_>>(), stamps);
        assert_eq!(again.file_len(), summary.size, "nothing cut");
    }

    /// Records in file order share frames up to the frame size; a larger record is a
    /// frame alone, and a belated one starts a frame.
    #[test]
    fn frames_are_cut_at_the_frame_size_and_at_belated_records() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = OpenLog::create(&dir.path().join("1.log")).unwrap();
        for ts in 1..=20 {
            log.append_record(meta(ts * 10, "a"), &[ts as u8; 100])
                .unwrap();
        }
        log.append_record(meta(205, "a"), &[0; 2000]).unwrap();
        log.append_record(meta(55, "late"), b"late").unwrap();
        let records: Vec<LogRecord> = log.records().values().cloned().collect();
        let spans = plan_frames(&records, 1000);
        for span in &spans {
            let rows = &records[span.records.clone()];
            assert!(
                rows.windows(2)
                    .all(|w| w[1].op >= w[0].offset + w[0].meta.size)
            );
            assert!(span.end - span.start <= 1000 || rows.len() == 1, "{span:?}");
        }
        let stamps = |span: &FrameSpan| -> Vec<u64> {
            records[span.records.clone()]
                .iter()
                .map(|r| r.meta.timestamp)
                .collect()
        };
        let late = spans.iter().position(|s| stamps(s).contains(&55)).unwrap();
        assert_eq!(
            stamps(&spans[late]),
            vec![55],
            "the belated record is cut off"
        );
        assert_eq!(
            stamps(&spans[late + 1])[0],
            60,
            "the frame after it starts again"
        );
        assert_eq!(
            stamps(spans.last().unwrap()),
            vec![205],
            "the large record is alone"
        );
        // Each frame of 100-byte records holds several (an operation is ~140 bytes).
        assert!(spans.len() < 10, "{} frames", spans.len());

        let summary = seal(&mut log, 1000);
        let block = SealedBlock::open(log.path(), "block".into(), Some(summary.meta_crc)).unwrap();
        assert_eq!(block.frames().len(), spans.len());
        let mut expected: Vec<(u64, Vec<u8>)> =
            (1..=20).map(|ts| (ts * 10, vec![ts as u8; 100])).collect();
        expected.push((55, b"late".to_vec()));
        expected.push((205, vec![0; 2000]));
        expected.sort();
        assert_eq!(
            payloads(&block),
            expected.into_iter().map(|(_, p)| p).collect::<Vec<_>>()
        );
    }

    /// A payload byte flipped after the seal fails the reads of that frame's records, as
    /// a block's; the other frames keep reading.
    #[test]
    fn a_damaged_payload_fails_its_frame() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.log");
        let mut log = OpenLog::create(&path).unwrap();
        log.append_record(meta(1, "a"), &[1; 600]).unwrap();
        log.append_record(meta(2, "a"), &[2; 600]).unwrap();
        let summary = seal(&mut log, 1000);
        let offset = log.records()[&2].offset;
        drop(log);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[offset as usize] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let block = SealedBlock::open(&path, "block".into(), Some(summary.meta_crc)).unwrap();
        assert_eq!(block.frames().len(), 2);
        let mut frame: DecodedFrame = None;
        assert_eq!(
            block.payload_with(0, &mut frame).unwrap().as_slice(),
            &[1; 600]
        );
        let err = block.payload_with(1, &mut frame).unwrap_err();
        assert!(err.message().contains("corrupt") || err.message().contains("checksum"));
    }

    /// A record whose bytes were damaged before the seal is refused by it: the frame's
    /// checksum would otherwise vouch for the damage.
    #[test]
    fn the_seal_refuses_a_record_damaged_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.log");
        let mut log = OpenLog::create(&path).unwrap();
        log.append_record(meta(1, "a"), b"first").unwrap();
        log.append_record(meta(2, "a"), b"second").unwrap();
        let records: Vec<LogRecord> = log.records().values().cloned().collect();
        let spans = plan_frames(&records, 1 << 20);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[records[1].offset as usize] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let file = File::open(&path).unwrap();
        let err =
            check_frames(&file, &path, &records, &spans, &mut SpanChecksums::new()).unwrap_err();
        assert!(
            err.message().contains("record 2 no longer matches"),
            "{err}"
        );
    }

    /// A span checked once is not read again: what lets the last attempt of a seal,
    /// which holds the entry's lock, skip the reading.
    #[test]
    fn known_checksums_are_not_computed_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.log");
        let mut log = OpenLog::create(&path).unwrap();
        log.append_record(meta(1, "a"), b"first").unwrap();
        let records: Vec<LogRecord> = log.records().values().cloned().collect();
        let spans = plan_frames(&records, 1 << 20);
        let file = log.file().unwrap();
        let mut known = SpanChecksums::new();
        let first = check_frames(&file, &path, &records, &spans, &mut known).unwrap();
        assert_eq!(known.len(), 1);
        std::fs::write(&path, b"").unwrap();
        let again = check_frames(&file, &path, &records, &spans, &mut known).unwrap();
        assert_eq!(first, again);
    }
}
