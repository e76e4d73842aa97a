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
/// Metadata packed with lz4 behind its raw length.
pub const META_LZ4: u32 = 1;

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

/// The stored form of a raw section and its encoding id.
pub fn pack(raw: Vec<u8>, compress: bool) -> (Vec<u8>, u32) {
    if !compress {
        return (raw, META_RAW);
    }
    let mut stored = (raw.len() as u64).to_le_bytes().to_vec();
    stored.extend_from_slice(&lz4_flex::compress(&raw));
    (stored, META_LZ4)
}

/// The raw section from its stored form.
pub fn unpack<'a>(stored: &'a [u8], encoding: u32, what: &str) -> Result<Cow<'a, [u8]>> {
    let corrupt = |why: String| Error::internal(format!("{what} is corrupt: {why}"));
    match encoding {
        META_RAW => Ok(Cow::Borrowed(stored)),
        META_LZ4 => {
            let mut r = BinaryReader::new(stored, what);
            let raw_len = r.u64()? as usize;
            // A table never exceeds a few hundred bytes per record of a block; refuse
            // absurd sizes rather than allocating them.
            if raw_len > stored.len().saturating_mul(255).max(1 << 20) {
                return Err(corrupt(format!("record table claims {raw_len} bytes")));
            }
            lz4_flex::decompress(&stored[8..], raw_len)
                .map(Cow::Owned)
                .map_err(|e| corrupt(format!("record table does not unpack: {e}")))
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
        let raw: Vec<u8> = b"label=value;".repeat(500);
        let (stored, enc) = pack(raw.clone(), true);
        assert_eq!(enc, META_LZ4);
        assert!(stored.len() < raw.len() / 5);
        assert_eq!(unpack(&stored, enc, "t").unwrap().as_ref(), raw.as_slice());
        let (stored, enc) = pack(raw.clone(), false);
        assert_eq!(enc, META_RAW);
        assert_eq!(unpack(&stored, enc, "t").unwrap().as_ref(), raw.as_slice());
        assert!(unpack(&[0xff; 16], META_LZ4, "t").is_err());
        assert!(unpack(b"abc", 7, "t").is_err());
    }
}
