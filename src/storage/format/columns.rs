//! A format-3 record table decoded into its columns, without making a record of each row:
//! what a block's compact lookup is built from (`lookup.rs`), at the cost of a few
//! vectors of integers instead of a label map and strings per record. The parsed records
//! (`block_meta::decode_records`) are made from the same columns.

use crate::error::{Error, Result};
use crate::storage::format::binary::{BinaryReader, unzigzag};
use crate::storage::format::block_record::BlockRecord;

/// The columns of a format-3 record table, rows in timestamp order.
pub struct TableColumns {
    /// Distinct content types; rows name them by index.
    pub types: Vec<String>,
    /// Distinct label names.
    pub keys: Vec<String>,
    /// Distinct label values.
    pub values: Vec<String>,
    /// Per row: timestamp.
    pub stamps: Vec<u64>,
    /// Per row: the frame holding the payload.
    pub frames: Vec<u32>,
    /// Per row: the payload's offset in the decoded frame.
    pub offsets: Vec<u64>,
    /// Per row: the payload's size.
    pub sizes: Vec<u64>,
    /// Per row: index into `types`.
    pub type_ids: Vec<u64>,
    /// Per row: how many labels it has (its pairs follow the previous rows' in
    /// `key_ids` / `value_ids`).
    pub label_counts: Vec<u64>,
    /// Per label: index into `keys`.
    pub key_ids: Vec<u64>,
    /// Per label: index into `values`.
    pub value_ids: Vec<u64>,
}

impl TableColumns {
    /// Decodes a format-3 table; the rows are checked against the frames' decoded
    /// lengths (`frame_raw_lens`) and the dictionaries, so every index a reader takes from
    /// them is in bounds.
    pub fn decode(section: &[u8], frame_raw_lens: &[u64], what: &str) -> Result<TableColumns> {
        let corrupt = |why: &str| Error::internal(format!("{what} is corrupt: {why}"));
        let mut r = BinaryReader::new(section, what);
        let count = r.varint()? as usize;
        // Each record takes at least a byte per column: a count the table cannot hold is
        // corruption, not a reason to allocate.
        if count > r.remaining() {
            return Err(corrupt("the record count exceeds the table"));
        }
        let [types, keys, values] = decode_dicts(&mut r)?;
        let mut column = |n: usize| r.varints(n);
        // The delta-coded columns are resolved in place: timestamps from their deltas,
        // offsets from their residuals (each relative to the end of the record before it
        // in the same frame).
        let mut stamps = column(count)?;
        let frame_deltas = column(count)?;
        let mut offsets = column(count)?;
        let sizes = column(count)?;
        let type_ids = column(count)?;
        let label_counts = column(count)?;
        let total_labels = label_counts
            .iter()
            .try_fold(0usize, |sum, &n| sum.checked_add(n as usize))
            .filter(|&n| n <= section.len())
            .ok_or_else(|| corrupt("label counts exceed the table"))?;
        let key_ids = column(total_labels)?;
        let value_ids = column(total_labels)?;
        let mut frame_of = Vec::with_capacity(count);
        let (mut timestamp, mut frame, mut expected_offset) = (0u64, 0u32, 0u64);
        for i in 0..count {
            timestamp = timestamp.wrapping_add(stamps[i]);
            stamps[i] = timestamp;
            let next_frame = u32::try_from(frame_deltas[i])
                .ok()
                .and_then(|d| frame.checked_add(d))
                .ok_or_else(|| corrupt("frame number out of range"))?;
            if next_frame != frame {
                expected_offset = 0;
            }
            frame = next_frame;
            frame_of.push(frame);
            let offset = expected_offset.wrapping_add(unzigzag(offsets[i]) as u64);
            offsets[i] = offset;
            expected_offset = offset.wrapping_add(sizes[i]);
        }
        let columns = TableColumns {
            types,
            keys,
            values,
            stamps,
            frames: frame_of,
            offsets,
            sizes,
            type_ids,
            label_counts,
            key_ids,
            value_ids,
        };
        columns.check(frame_raw_lens, what)?;
        Ok(columns)
    }

    /// The columns of parsed records (a table older than format 3, to be rewritten).
    pub fn from_records(records: &[BlockRecord]) -> TableColumns {
        let mut columns = TableColumns {
            types: Vec::new(),
            keys: Vec::new(),
            values: Vec::new(),
            stamps: Vec::with_capacity(records.len()),
            frames: Vec::with_capacity(records.len()),
            offsets: Vec::with_capacity(records.len()),
            sizes: Vec::with_capacity(records.len()),
            type_ids: Vec::with_capacity(records.len()),
            label_counts: Vec::with_capacity(records.len()),
            key_ids: Vec::new(),
            value_ids: Vec::new(),
        };
        let intern = |dict: &mut Vec<String>, s: &str| -> u64 {
            match dict.iter().position(|d| d == s) {
                Some(i) => i as u64,
                None => {
                    dict.push(s.to_string());
                    dict.len() as u64 - 1
                }
            }
        };
        for r in records {
            columns.stamps.push(r.meta.timestamp);
            columns.frames.push(r.frame);
            columns.offsets.push(r.offset);
            columns.sizes.push(r.meta.size);
            let type_id = intern(&mut columns.types, &r.meta.content_type);
            columns.type_ids.push(type_id);
            columns.label_counts.push(r.meta.labels.len() as u64);
            for (k, v) in &r.meta.labels {
                let key = intern(&mut columns.keys, k);
                let value = intern(&mut columns.values, v);
                columns.key_ids.push(key);
                columns.value_ids.push(value);
            }
        }
        columns
    }

    /// Rows in timestamp order, each inside its frame, naming dictionary entries that exist.
    fn check(&self, frame_raw_lens: &[u64], what: &str) -> Result<()> {
        let corrupt = |why: &str| Error::internal(format!("{what} is corrupt: {why}"));
        if self.stamps.is_empty() {
            return Err(corrupt("no records"));
        }
        for i in 0..self.stamps.len() {
            let raw_len = *frame_raw_lens
                .get(self.frames[i] as usize)
                .ok_or_else(|| corrupt("a record names a missing frame"))?;
            if self.offsets[i]
                .checked_add(self.sizes[i])
                .is_none_or(|end| end > raw_len)
            {
                return Err(corrupt("a record lies outside its frame"));
            }
            if i > 0 && self.stamps[i - 1] >= self.stamps[i] {
                return Err(corrupt("records are not in timestamp order"));
            }
        }
        let within = |ids: &[u64], dict: &[String]| ids.iter().all(|&i| (i as usize) < dict.len());
        if !(within(&self.type_ids, &self.types)
            && within(&self.key_ids, &self.keys)
            && within(&self.value_ids, &self.values))
        {
            return Err(corrupt("a record names a missing dictionary entry"));
        }
        Ok(())
    }
}

/// Parses the dictionaries of format 2 and 3 tables: content types, label names, label
/// values.
pub(crate) fn decode_dicts(r: &mut BinaryReader) -> Result<[Vec<String>; 3]> {
    let mut dicts: [Vec<String>; 3] = Default::default();
    for dict in dicts.iter_mut() {
        let n = r.varint()? as usize;
        for _ in 0..n.min(r.remaining()) {
            dict.push(r.short_str()?);
        }
    }
    Ok(dicts)
}
