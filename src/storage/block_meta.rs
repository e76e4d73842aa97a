//! The metadata section of a block file: the frame table and the record table.
//!
//! Raw layout: `codec u8, level u32, frame count u32, frames…, record count u32, records…`.
//! The record table comes last so recompression can copy its bytes unchanged. The section
//! is stored raw (encoding 0, the only form of format v1, still written for uncompressed
//! blocks, which are read most) or lz4-packed (encoding 1: `raw_len u64` + lz4 bytes) for
//! compressed blocks, whose tables — repeated labels and content types — otherwise rival
//! the compressed payload in size.

use std::borrow::Cow;

use crate::error::{Error, Result};
use crate::storage::binary::{BinaryReader, BinaryWriter};
use crate::storage::block::{BlockRecord, FrameInfo};
use crate::storage::codec::Codec;
use crate::storage::record::RecordMeta;

/// Metadata stored as is.
pub const META_RAW: u32 = 0;
/// Metadata stored as `head_len u32, head, records_raw_len u64, lz4(records)`: the record
/// table is packed on its own so recompression can pack it on the pool while frames are
/// still being encoded.
pub const META_PACKED: u32 = 1;

/// Encodes the block codec and the frame table.
pub fn encode_head(codec: Codec, frames: &[FrameInfo]) -> Vec<u8> {
    let mut w = BinaryWriter::default();
    let (id, level) = codec.to_parts();
    w.u8(id);
    w.u32(level as u32);
    w.u32(frames.len() as u32);
    for f in frames {
        w.u64(f.offset);
        w.u64(f.stored_len);
        w.u64(f.raw_len);
        let (id, level) = f.codec.to_parts();
        w.u8(id);
        w.u32(level as u32);
        w.u32(f.crc);
    }
    w.buf
}

/// Appends the record table to `out`.
pub fn encode_records(records: &[BlockRecord], out: &mut Vec<u8>) {
    let mut w = BinaryWriter {
        buf: std::mem::take(out),
    };
    w.u32(records.len() as u32);
    for r in records {
        w.u64(r.meta.timestamp);
        w.u32(r.frame);
        w.u64(r.offset);
        w.u64(r.meta.size);
        w.str(&r.meta.content_type);
        w.labels(&r.meta.labels);
    }
    *out = w.buf;
}

/// Packs a record table: `raw_len u64` + lz4 bytes.
pub fn pack_records(records: &[u8]) -> Vec<u8> {
    let mut out = (records.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&lz4_flex::compress(records));
    out
}

/// The stored form of a section from its head and its packed record table.
pub fn assemble_packed(head: &[u8], packed_records: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + head.len() + packed_records.len());
    out.extend_from_slice(&(head.len() as u32).to_le_bytes());
    out.extend_from_slice(head);
    out.extend_from_slice(packed_records);
    out
}

/// The raw section from its stored form.
pub fn unpack<'a>(stored: &'a [u8], encoding: u32, what: &str) -> Result<Cow<'a, [u8]>> {
    let corrupt = |why: String| Error::internal(format!("{what} is corrupt: {why}"));
    match encoding {
        META_RAW => Ok(Cow::Borrowed(stored)),
        META_PACKED => {
            let mut r = BinaryReader::new(stored, what);
            let head_len = r.u32()? as usize;
            let head = r.take(head_len)?;
            let raw_len = r.u64()? as usize;
            let packed = r.take(r.remaining())?;
            // A table is never more than ~255 times its lz4 form; refuse absurd sizes
            // rather than allocating them.
            if raw_len > packed.len().saturating_mul(255).max(1 << 20) {
                return Err(corrupt(format!("record table claims {raw_len} bytes")));
            }
            let records = lz4_flex::decompress(packed, raw_len)
                .map_err(|e| corrupt(format!("record table does not unpack: {e}")))?;
            let mut raw = Vec::with_capacity(head.len() + records.len());
            raw.extend_from_slice(head);
            raw.extend_from_slice(&records);
            Ok(Cow::Owned(raw))
        }
        other => Err(corrupt(format!("unknown metadata encoding {other}"))),
    }
}

/// Parses the head of a raw section: the block codec, the frames, and where the record
/// table starts in `meta`.
pub fn decode_frames(
    meta: &[u8],
    what: &str,
    meta_offset: u64,
) -> Result<(Codec, Vec<FrameInfo>, usize)> {
    let corrupt = |why: &str| Error::internal(format!("{what} is corrupt: {why}"));
    let mut r = BinaryReader::new(meta, what);
    let codec = Codec::from_parts(r.u8()?, r.u32()? as i32)?;
    let frame_count = r.u32()? as usize;
    let mut frames = Vec::with_capacity(frame_count.min(r.remaining()));
    for _ in 0..frame_count {
        let frame = FrameInfo {
            offset: r.u64()?,
            stored_len: r.u64()?,
            raw_len: r.u64()?,
            codec: Codec::from_parts(r.u8()?, r.u32()? as i32)?,
            crc: r.u32()?,
        };
        if frame
            .offset
            .checked_add(frame.stored_len)
            .is_none_or(|end| end > meta_offset)
        {
            return Err(corrupt("a frame lies outside the data section"));
        }
        frames.push(frame);
    }
    Ok((codec, frames, meta.len() - r.remaining()))
}

/// Parses a record table (the bytes from where [`decode_frames`] stopped).
pub fn decode_records(
    section: &[u8],
    frames: &[FrameInfo],
    what: &str,
) -> Result<Vec<BlockRecord>> {
    let corrupt = |why: &str| Error::internal(format!("{what} is corrupt: {why}"));
    let mut r = BinaryReader::new(section, what);
    let record_count = r.u32()? as usize;
    let mut records: Vec<BlockRecord> = Vec::with_capacity(record_count.min(r.remaining()));
    for _ in 0..record_count {
        let timestamp = r.u64()?;
        let frame = r.u32()?;
        let offset = r.u64()?;
        let size = r.u64()?;
        let content_type = r.str()?;
        let labels = r.labels()?;
        let raw_len = frames
            .get(frame as usize)
            .ok_or_else(|| corrupt("a record names a missing frame"))?
            .raw_len;
        if offset.checked_add(size).is_none_or(|end| end > raw_len) {
            return Err(corrupt("a record lies outside its frame"));
        }
        if records
            .last()
            .is_some_and(|p| p.meta.timestamp >= timestamp)
        {
            return Err(corrupt("records are not in timestamp order"));
        }
        records.push(BlockRecord {
            meta: RecordMeta {
                timestamp,
                labels,
                content_type,
                size,
            },
            frame,
            offset,
        });
    }
    if records.is_empty() {
        return Err(corrupt("no records"));
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_round_trips_and_rejects_garbage() {
        let head = b"head".to_vec();
        let records: Vec<u8> = b"label=value;".repeat(500);
        let stored = assemble_packed(&head, &pack_records(&records));
        assert!(stored.len() < records.len() / 5);
        let raw = unpack(&stored, META_PACKED, "t").unwrap();
        assert_eq!(&raw[..4], b"head");
        assert_eq!(&raw[4..], records.as_slice());
        assert_eq!(unpack(b"as is", META_RAW, "t").unwrap().as_ref(), b"as is");
        assert!(unpack(&[0xff; 16], META_PACKED, "t").is_err());
        assert!(
            unpack(
                &[
                    1, 0, 0, 0, 7, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f
                ],
                META_PACKED,
                "t"
            )
            .is_err()
        );
        assert!(unpack(b"abc", 7, "t").is_err());
    }
}
