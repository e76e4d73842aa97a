//! A log sealed in place: the log file itself becomes the block, so a seal writes
//! kilobytes instead of copying the payload a second time.
//!
//! ```text
//! "HLLOG001" | op | op | … | [len][crc] 4 | meta | footer
//! ```
//!
//! The seal appends one last operation to the log (kind 4), whose body is a block's
//! metadata and footer: the footer ends the file as every block's does, and points at the
//! metadata inside that operation. The metadata names one frame per live record, in
//! timestamp order: the body of the record's own operation (`[kind][timestamp][content
//! type][labels][size][payload]`), stored raw, checked with the checksum the operation
//! already carries. The record's payload is the frame's tail. Operations that no live
//! record names (label changes, removals, records removed or replaced, an earlier seal
//! trailer) stay in the file as dead bytes; a fold or a recompression drops them.
//!
//! The file therefore opens both ways: as a log (the trailer replays as nothing), which is
//! what an open does when a crash came before the index commit, and as a block.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::footer::{FOOTER_LEN, Footer};
use crate::error::{Error, Result};
use crate::storage::format::block_meta::{self as meta, BlockSummary, FrameInfo};
use crate::storage::format::block_record::BlockRecord;
use crate::storage::format::codec::Codec;
use crate::storage::format::log::LogRecord;
use crate::storage::format::oplog::OP_HEADER;

/// The `[body_len][crc]` header of one record's operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpHeader {
    /// Length of the operation's body (kind byte to the payload's end).
    pub body_len: u64,
    /// The body's CRC32.
    pub crc: u32,
}

/// Reads the operation header of each of `records` from the log `file` (at `path`), and
/// checks that each body ends where its payload does.
pub fn read_op_headers(file: &File, path: &Path, records: &[LogRecord]) -> Result<Vec<OpHeader>> {
    let mut headers = Vec::with_capacity(records.len());
    let mut buf = [0u8; OP_HEADER as usize];
    for rec in records {
        file.read_exact_at(&mut buf, rec.op).map_err(|e| {
            Error::io(
                format!(
                    "reading the header of record {} in {}",
                    rec.meta.timestamp,
                    path.display()
                ),
                e,
            )
        })?;
        let body_len = u64::from(u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]));
        let crc = u32::from_le_bytes([buf[4], buf[5], buf[6], buf[7]]);
        if rec.op + OP_HEADER + body_len != rec.offset + rec.meta.size {
            return Err(Error::internal(format!(
                "{}: the operation of record {} does not end where its payload does",
                path.display(),
                rec.meta.timestamp
            )));
        }
        headers.push(OpHeader { body_len, crc });
    }
    Ok(headers)
}

/// The seal trailer's bytes (metadata, then footer) for `records` (in timestamp order, at
/// least one) with their operation `headers`, the metadata starting at file offset
/// `meta_offset`; and what the block holds once the trailer ends the file.
pub fn seal_trailer(
    records: &[LogRecord],
    headers: &[OpHeader],
    meta_offset: u64,
) -> (Vec<u8>, BlockSummary) {
    let frames: Vec<FrameInfo> = records
        .iter()
        .zip(headers)
        .map(|(rec, h)| FrameInfo {
            offset: rec.op + OP_HEADER,
            stored_len: h.body_len,
            raw_len: h.body_len,
            codec: Codec::None,
            crc: h.crc,
        })
        .collect();
    let table: Vec<BlockRecord> = records
        .iter()
        .enumerate()
        .map(|(i, rec)| BlockRecord {
            meta: rec.meta.clone(),
            frame: i as u32,
            offset: rec.offset - (rec.op + OP_HEADER),
        })
        .collect();
    let mut bytes = meta::encode_head(Codec::None, &frames);
    meta::encode_records(&table, &mut bytes);
    let meta_len = bytes.len() as u64;
    let meta_crc = crc32fast::hash(&bytes);
    bytes.extend_from_slice(&Footer::encode(
        meta_offset,
        meta_len,
        meta_crc,
        meta::META_RAW | meta::TABLE_V3,
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

/// The payload of a sealed log's frame (its record's operation body), read from the
/// body's own fields: what a sample of the data takes when the record table was not
/// parsed.
pub fn frame_payload<'f>(frame: &'f [u8], what: &str) -> Result<&'f [u8]> {
    let mut r = crate::storage::format::binary::BinaryReader::new(frame, what);
    r.u8()?;
    r.u64()?;
    r.str()?;
    r.labels()?;
    let size = r.u64()? as usize;
    let start = frame.len() - r.remaining();
    frame.get(start..start.saturating_add(size)).ok_or_else(|| {
        Error::internal(format!(
            "{what}: a record's frame is shorter than its payload"
        ))
    })
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

    fn seal(log: &mut OpenLog) -> BlockSummary {
        let records: Vec<LogRecord> = log.records().values().cloned().collect();
        let file = log.file().unwrap();
        let headers = read_op_headers(&file, log.path(), &records).unwrap();
        let mut summary = None;
        log.append_seal(|at| {
            let (bytes, s) = seal_trailer(&records, &headers, at);
            summary = Some(s);
            bytes
        })
        .unwrap();
        summary.unwrap()
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
        let first = seal(&mut log);
        // A change after a trailer is sealed again: the newest trailer ends the file.
        log.append_record(meta(25, "late"), b"payload 25").unwrap();
        let summary = seal(&mut log);
        assert_ne!(first.meta_crc, summary.meta_crc);
        assert_eq!(summary.size, log.file_len());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), summary.size);

        let block = SealedBlock::open(&path, "block".into(), Some(summary.meta_crc)).unwrap();
        assert_eq!(block.summary(), summary);
        let stamps: Vec<u64> = block.records().iter().map(|r| r.meta.timestamp).collect();
        assert_eq!(stamps, vec![10, 20, 25, 30]);
        assert_eq!(block.records()[1].meta.labels, meta(0, "relabeled").labels);
        let mut frame: DecodedFrame = None;
        for (i, ts) in stamps.iter().enumerate() {
            let payload = block.payload_with(i, &mut frame).unwrap();
            assert_eq!(payload.as_slice(), format!("payload {ts}").as_bytes());
        }

        let again = OpenLog::open(&path).unwrap();
        assert_eq!(again.records().keys().copied().collect::<Vec<_>>(), stamps);
        assert_eq!(again.file_len(), summary.size, "nothing cut");
    }

    /// A payload byte flipped after the seal fails that record's frame, as a block's.
    #[test]
    fn a_damaged_payload_fails_its_frame() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.log");
        let mut log = OpenLog::create(&path).unwrap();
        log.append_record(meta(1, "a"), b"first").unwrap();
        log.append_record(meta(2, "a"), b"second").unwrap();
        let summary = seal(&mut log);
        let offset = log.records()[&2].offset;
        drop(log);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[offset as usize] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let block = SealedBlock::open(&path, "block".into(), Some(summary.meta_crc)).unwrap();
        let mut frame: DecodedFrame = None;
        assert_eq!(
            block.payload_with(0, &mut frame).unwrap().as_slice(),
            b"first"
        );
        let err = block.payload_with(1, &mut frame).unwrap_err();
        assert!(err.message().contains("corrupt") || err.message().contains("checksum"));
    }
}
