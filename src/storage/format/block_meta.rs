//! The metadata section of a block file: the frame table and the record table.
//!
//! Raw layout: `codec u8, level u32, frame count u32, frames…`, then the record table, last
//! so recompression can copy its bytes unchanged. Table format 1 (read only) repeats every
//! string per record; format 2 (read only) uses varints, timestamp deltas and dictionaries
//! of content types, label names and values, record by record; format 3 (written now)
//! keeps the dictionaries and lays the table out in columns — timestamp deltas, frame
//! deltas, offsets as residuals from where the previous record ended, sizes, content-type
//! ids, label counts, label name ids, label value ids — so that each column is a run of
//! similar small numbers (mostly the same byte over and over) that the block's codec
//! compresses several times better than the interleaved rows. The section is stored raw
//! (encoding 0, for uncompressed blocks, which are read most), lz4-packed (encoding 1:
//! `raw_len u64` + lz4 bytes, for lz4 blocks) or zstd-packed at the block's level
//! (encoding 2, for zstd blocks): a table of labels and content types otherwise rivals the
//! compressed payload in size.

use std::borrow::Cow;
use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::storage::format::binary::{BinaryReader, BinaryWriter, zigzag};
use crate::storage::format::block_record::BlockRecord;
use crate::storage::format::codec::Codec;
use crate::storage::format::columns::{TableColumns, decode_dicts};
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
/// table is packed on its own so recompression can pack it while frames are still being
/// encoded.
pub const META_PACKED: u32 = 1;
/// As [`META_PACKED`], the record table packed with zstd (at the block's level).
pub const META_ZSTD: u32 = 2;
/// Record table format 1 (second byte of the encoding field): fixed-width fields, strings
/// repeated per record. Read only; the first version of the format wrote it.
pub const TABLE_V1: u32 = 0;
/// Record table format 2: varints, timestamps as deltas, and content types, label names and
/// label values stored once in dictionaries and referenced by index — labels repeat across
/// records, so the table shrinks several times over. Read only since format 3.
pub const TABLE_V2: u32 = 1 << 8;
/// Record table format 3: the dictionaries of format 2, then the fields in columns (see
/// the module documentation).
pub const TABLE_V3: u32 = 2 << 8;

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

/// Appends the record table to `out`, in format 3 (columns).
pub fn encode_records(records: &[BlockRecord], out: &mut Vec<u8>) {
    fn intern<'a>(dict: &mut Vec<&'a str>, index: &mut HashMap<&'a str, u64>, s: &'a str) -> u64 {
        *index.entry(s).or_insert_with(|| {
            dict.push(s);
            dict.len() as u64 - 1
        })
    }
    let (mut types, mut keys, mut values) = (Vec::new(), Vec::new(), Vec::new());
    let (mut type_ix, mut key_ix, mut value_ix) = (HashMap::new(), HashMap::new(), HashMap::new());
    // One writer per column, filled in one pass and concatenated.
    let mut cols: [BinaryWriter; 8] = Default::default();
    let (mut previous_ts, mut previous_frame, mut expected_offset) = (0u64, 0u32, 0u64);
    for r in records {
        cols[0].varint(r.meta.timestamp.wrapping_sub(previous_ts));
        previous_ts = r.meta.timestamp;
        cols[1].varint(u64::from(r.frame.wrapping_sub(previous_frame)));
        if r.frame != previous_frame {
            expected_offset = 0;
        }
        previous_frame = r.frame;
        // Records follow each other inside a frame: the residual is almost always 0.
        cols[2].varint(zigzag(r.offset.wrapping_sub(expected_offset) as i64));
        expected_offset = r.offset.wrapping_add(r.meta.size);
        cols[3].varint(r.meta.size);
        cols[4].varint(intern(&mut types, &mut type_ix, &r.meta.content_type));
        cols[5].varint(r.meta.labels.len() as u64);
        for (k, v) in &r.meta.labels {
            cols[6].varint(intern(&mut keys, &mut key_ix, k));
            cols[7].varint(intern(&mut values, &mut value_ix, v));
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
    for col in &cols {
        w.buf.extend_from_slice(&col.buf);
    }
    *out = w.buf;
}

/// Packs a record table for a block of `codec`: zstd at the block's level for zstd blocks,
/// lz4 otherwise (and should zstd fail, which only a bad level could make it do). Returns
/// the packing (`META_ZSTD` or `META_PACKED`) and `raw_len u64` + the packed bytes.
pub fn pack_records(records: &[u8], codec: Codec) -> (u32, Vec<u8>) {
    let mut out = (records.len() as u64).to_le_bytes().to_vec();
    if let Codec::Zstd(level) = codec {
        // Through the codec: its per-thread compression context is reused, where a fresh
        // one per table would allocate and clear its match tables each time.
        match codec.encode(records) {
            Ok(packed) => {
                out.extend_from_slice(&packed);
                return (META_ZSTD, out);
            }
            Err(e) => log::warn!("packing a record table with zstd {level}: {e}; using lz4"),
        }
    }
    out.extend_from_slice(&lz4_flex::compress(records));
    (META_PACKED, out)
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
        packing @ (META_PACKED | META_ZSTD) => {
            let mut r = BinaryReader::new(stored, what);
            let head_len = r.u32()? as usize;
            let head = r.take(head_len)?;
            let raw_len = r.u64()? as usize;
            let packed = r.take(r.remaining())?;
            // A table is never more than ~255 times its lz4 form (zstd's best ratio is far
            // higher, but a column of zeros is still bounded by 2 bytes per record in its
            // other columns); refuse absurd sizes rather than allocating them.
            let bound = if packing == META_ZSTD { 4096 } else { 255 };
            if raw_len > packed.len().saturating_mul(bound).max(1 << 20) {
                return Err(corrupt(format!("record table claims {raw_len} bytes")));
            }
            let records = if packing == META_ZSTD {
                unpack_zstd(packed, raw_len)
                    .map_err(|e| corrupt(format!("record table does not unpack: {e}")))
                    .and_then(|t| {
                        (t.len() == raw_len)
                            .then_some(t)
                            .ok_or_else(|| corrupt("record table has the wrong length".into()))
                    })?
            } else {
                lz4_flex::decompress(packed, raw_len)
                    .map_err(|e| corrupt(format!("record table does not unpack: {e}")))?
            };
            let mut raw = Vec::with_capacity(head.len() + records.len());
            raw.extend_from_slice(head);
            raw.extend_from_slice(&records);
            Ok(Cow::Owned(raw))
        }
        other => Err(corrupt(format!("unknown metadata encoding {other}"))),
    }
}

/// Decompresses a zstd-packed table with this thread's decompression context: creating
/// one per table (about 100 KB of state, freshly faulted in) would cost more than the
/// table's decoding.
fn unpack_zstd(packed: &[u8], raw_len: usize) -> std::io::Result<Vec<u8>> {
    thread_local! {
        static CONTEXT: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
            const { std::cell::RefCell::new(None) };
    }
    CONTEXT.with(|cell| {
        let mut slot = cell.borrow_mut();
        let context = match slot.as_mut() {
            Some(context) => context,
            None => slot.insert(zstd::bulk::Decompressor::new()?),
        };
        context.decompress(packed, raw_len)
    })
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
        TABLE_V3 => decode_records_v3(section, frames, what)?,
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

/// Parses a format-3 (columnar) record table: its columns (checked), made into records.
fn decode_records_v3(section: &[u8], frames: &[FrameInfo], what: &str) -> Result<Vec<BlockRecord>> {
    let raw_lens: Vec<u64> = frames.iter().map(|f| f.raw_len).collect();
    let c = TableColumns::decode(section, &raw_lens, what)?;
    let mut label_at = 0;
    let records = (0..c.stamps.len())
        .map(|i| {
            let mut labels = crate::storage::record::Labels::new();
            for _ in 0..c.label_counts[i] {
                labels.insert(
                    c.keys[c.key_ids[label_at] as usize].clone(),
                    c.values[c.value_ids[label_at] as usize].clone(),
                );
                label_at += 1;
            }
            BlockRecord {
                meta: RecordMeta {
                    timestamp: c.stamps[i],
                    labels,
                    content_type: c.types[c.type_ids[i] as usize].clone(),
                    size: c.sizes[i],
                },
                frame: c.frames[i],
                offset: c.offsets[i],
            }
        })
        .collect();
    Ok(records)
}

/// Parses a format-2 record table.
fn decode_records_v2(section: &[u8], what: &str) -> Result<Vec<BlockRecord>> {
    let corrupt = |why: &str| Error::internal(format!("{what} is corrupt: {why}"));
    let mut r = BinaryReader::new(section, what);
    let count = r.varint()? as usize;
    let dicts = decode_dicts(&mut r)?;
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
mod tests;
