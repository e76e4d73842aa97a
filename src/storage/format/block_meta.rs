//! The metadata section of a block file: the frame table and the record table.
//!
//! Raw layout: `codec u8, level u32, frame count u32, frames…`, then the record table, last
//! so recompression can copy its bytes unchanged. Table format 1 (read only) repeats every
//! string per record; format 2 (written now) uses varints, timestamp deltas and
//! dictionaries of content types, label names and values. The section
//! is stored raw (encoding 0, the only form of format v1, still written for uncompressed
//! blocks, which are read most) or lz4-packed (encoding 1: `raw_len u64` + lz4 bytes) for
//! compressed blocks, whose tables — repeated labels and content types — otherwise rival
//! the compressed payload in size.

use std::borrow::Cow;
use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::storage::format::binary::{BinaryReader, BinaryWriter};
use crate::storage::format::codec::Codec;
use crate::storage::record::RecordMeta;

/// Where one frame sits in the file and how to decode it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameInfo {
    /// Byte offset of the stored frame in the file.
    pub offset: u64,
    /// Stored (possibly compressed) length.
    pub stored_len: u64,
    /// Length once decoded.
    pub raw_len: u64,
    /// Codec of this frame; `None` when compression would have grown it.
    pub codec: Codec,
    /// CRC32 of the stored bytes.
    pub crc: u32,
}

/// One record of a sealed block: its metadata and where its payload is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockRecord {
    /// Timestamp, labels, content type and size.
    pub meta: RecordMeta,
    /// Index of the frame holding the payload.
    pub frame: u32,
    /// Offset of the payload inside the decoded frame.
    pub offset: u64,
}

/// What a finished block file holds; becomes the block's entry in the index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockSummary {
    /// Timestamp of the first record (the block id).
    pub first_ts: u64,
    /// Timestamp of the last record.
    pub last_ts: u64,
    /// Number of records.
    pub record_count: u64,
    /// File size in bytes.
    pub size: u64,
    /// Sum of the payload sizes.
    pub payload_bytes: u64,
    /// The block's codec tier.
    pub codec: Codec,
    /// CRC of the metadata section, repeated in the index to tie the two together.
    pub meta_crc: u32,
}

/// Metadata stored as is (low byte of the footer's encoding field).
pub const META_RAW: u32 = 0;
/// Metadata stored as `head_len u32, head, records_raw_len u64, lz4(records)`: the record
/// table is packed on its own so recompression can pack it on the pool while frames are
/// still being encoded.
pub const META_PACKED: u32 = 1;
/// Record table format 1 (second byte of the encoding field): fixed-width fields, strings
/// repeated per record. Read only; the first version of the format wrote it.
pub const TABLE_V1: u32 = 0;
/// Record table format 2: varints, timestamps as deltas, and content types, label names and
/// label values stored once in dictionaries and referenced by index — labels repeat across
/// records, so the table shrinks several times over.
pub const TABLE_V2: u32 = 1 << 8;

fn packing(encoding: u32) -> u32 {
    encoding & 0xff
}

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

/// Appends the record table to `out`, in format 2.
pub fn encode_records(records: &[BlockRecord], out: &mut Vec<u8>) {
    fn intern<'a>(dict: &mut Vec<&'a str>, index: &mut HashMap<&'a str, u64>, s: &'a str) -> u64 {
        *index.entry(s).or_insert_with(|| {
            dict.push(s);
            dict.len() as u64 - 1
        })
    }
    let (mut types, mut keys, mut values) = (Vec::new(), Vec::new(), Vec::new());
    let (mut type_ix, mut key_ix, mut value_ix) = (HashMap::new(), HashMap::new(), HashMap::new());
    let mut body = BinaryWriter::default();
    let mut previous = 0u64;
    for r in records {
        body.varint(r.meta.timestamp.wrapping_sub(previous));
        previous = r.meta.timestamp;
        body.varint(u64::from(r.frame));
        body.varint(r.offset);
        body.varint(r.meta.size);
        body.varint(intern(&mut types, &mut type_ix, &r.meta.content_type));
        body.varint(r.meta.labels.len() as u64);
        for (k, v) in &r.meta.labels {
            body.varint(intern(&mut keys, &mut key_ix, k));
            body.varint(intern(&mut values, &mut value_ix, v));
        }
    }
    let mut w = BinaryWriter {
        buf: std::mem::take(out),
    };
    w.varint(records.len() as u64);
    for dict in [&types, &keys, &values] {
        w.varint(dict.len() as u64);
        for s in dict.iter() {
            w.short_str(s);
        }
    }
    w.buf.extend_from_slice(&body.buf);
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
    match packing(encoding) {
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

/// Parses a record table (the bytes from where [`decode_frames`] stopped) in the table
/// format the footer's `encoding` names.
pub fn decode_records(
    section: &[u8],
    frames: &[FrameInfo],
    what: &str,
    encoding: u32,
) -> Result<Vec<BlockRecord>> {
    let records = match encoding & !0xff {
        TABLE_V1 => decode_records_v1(section, what)?,
        TABLE_V2 => decode_records_v2(section, what)?,
        other => {
            return Err(Error::internal(format!(
                "{what} is corrupt: unknown record table format {}",
                other >> 8
            )));
        }
    };
    check_records(&records, frames, what)?;
    Ok(records)
}

/// Parses a format-2 record table.
fn decode_records_v2(section: &[u8], what: &str) -> Result<Vec<BlockRecord>> {
    let corrupt = |why: &str| Error::internal(format!("{what} is corrupt: {why}"));
    let mut r = BinaryReader::new(section, what);
    let count = r.varint()? as usize;
    let mut dicts: [Vec<String>; 3] = Default::default();
    for dict in dicts.iter_mut() {
        let n = r.varint()? as usize;
        for _ in 0..n.min(r.remaining()) {
            dict.push(r.short_str()?);
        }
    }
    let [types, keys, values] = &dicts;
    let lookup = |dict: &[String], i: u64| {
        dict.get(i as usize)
            .cloned()
            .ok_or_else(|| corrupt("a record names a missing dictionary entry"))
    };
    let mut records = Vec::with_capacity(count.min(r.remaining()));
    let mut timestamp = 0u64;
    for _ in 0..count {
        timestamp = timestamp.wrapping_add(r.varint()?);
        let frame = u32::try_from(r.varint()?).map_err(|_| corrupt("frame number out of range"))?;
        let offset = r.varint()?;
        let size = r.varint()?;
        let content_type = lookup(types, r.varint()?)?;
        let label_count = r.varint()? as usize;
        let mut labels = crate::storage::record::Labels::new();
        for _ in 0..label_count.min(r.remaining()) {
            let k = lookup(keys, r.varint()?)?;
            let v = lookup(values, r.varint()?)?;
            labels.insert(k, v);
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
    Ok(records)
}

/// Checks what every table format must satisfy: records inside their frames, in
/// timestamp order, at least one.
fn check_records(records: &[BlockRecord], frames: &[FrameInfo], what: &str) -> Result<()> {
    let corrupt = |why: &str| Error::internal(format!("{what} is corrupt: {why}"));
    for (i, rec) in records.iter().enumerate() {
        let raw_len = frames
            .get(rec.frame as usize)
            .ok_or_else(|| corrupt("a record names a missing frame"))?
            .raw_len;
        if rec
            .offset
            .checked_add(rec.meta.size)
            .is_none_or(|end| end > raw_len)
        {
            return Err(corrupt("a record lies outside its frame"));
        }
        if i > 0 && records[i - 1].meta.timestamp >= rec.meta.timestamp {
            return Err(corrupt("records are not in timestamp order"));
        }
    }
    if records.is_empty() {
        return Err(corrupt("no records"));
    }
    Ok(())
}

/// Parses a format-1 record table.
fn decode_records_v1(section: &[u8], what: &str) -> Result<Vec<BlockRecord>> {
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
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::format::codec::Codec;

    fn record(ts: u64, frame: u32, offset: u64, labels: &[(&str, &str)]) -> BlockRecord {
        BlockRecord {
            meta: RecordMeta {
                timestamp: ts,
                labels: labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                content_type: if ts.is_multiple_of(2) {
                    "application/json"
                } else {
                    "text/plain"
                }
                .into(),
                size: 10,
            },
            frame,
            offset,
        }
    }

    #[test]
    fn table_v2_round_trips_and_is_compact() {
        let frames = vec![FrameInfo {
            offset: 8,
            stored_len: 100_000,
            raw_len: 100_000,
            codec: Codec::None,
            crc: 0,
        }];
        let records: Vec<BlockRecord> = (0..1000u64)
            .map(|i| {
                record(
                    1_700_000_000_000_000 + i * 37,
                    0,
                    i * 10,
                    &[
                        ("carrier", ["UA", "AA", "DL"][i as usize % 3]),
                        ("origin", "EWR"),
                    ],
                )
            })
            .collect();
        let mut table = Vec::new();
        encode_records(&records, &mut table);
        assert!(table.len() < records.len() * 14, "{} bytes", table.len());
        let back = decode_records(&table, &frames, "t", META_RAW | TABLE_V2).unwrap();
        assert_eq!(back, records);
        // Damage is an error, never a panic.
        for cut in [1, table.len() / 2, table.len() - 1] {
            assert!(decode_records(&table[..cut], &frames, "t", TABLE_V2).is_err());
        }
        let mut bad = table.clone();
        bad[2] = 0x7f;
        let _ = decode_records(&bad, &frames, "t", TABLE_V2);
        assert!(decode_records(&table, &frames, "t", 7 << 8).is_err());
        // Records outside their frame or out of order are refused.
        let outside = vec![record(1, 3, 0, &[])];
        let mut t = Vec::new();
        encode_records(&outside, &mut t);
        assert!(decode_records(&t, &frames, "t", TABLE_V2).is_err());
    }

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
