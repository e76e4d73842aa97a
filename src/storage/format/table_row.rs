//! One row of a format-3 record table, found by its timestamp without decoding the other
//! rows: what a read of one record takes from a block whose compact lookup is not cached
//! while the lookups' budget is full (`storage::cache`).
//!
//! Why: building a lookup decodes every row of the table, allocating its columns and
//! strings, and when lookups no longer fit their budget that work is thrown away again
//! a few reads later. Reading one row scans the table's varints once without keeping
//! them (the columns follow one another, so reaching a column means passing the ones
//! before it) and allocates only that row's strings.
//!
//! The table's layout is the one [`super::columns::TableColumns::decode`] reads; the row
//! found is checked the way that function checks every row: its frame exists, its
//! payload lies inside the frame, and the dictionary entries it names exist.

use crate::error::{Error, Result};
use crate::storage::format::binary::{BinaryReader, unzigzag};
use crate::storage::record::{Labels, RecordMeta};

/// A record of a block, as its table describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableRow {
    /// The record's metadata.
    pub meta: RecordMeta,
    /// The frame holding its payload.
    pub frame: u32,
    /// Where its payload starts in the decoded frame.
    pub offset: u64,
}

/// Where a dictionary starts in the table and how many strings it holds.
#[derive(Clone, Copy)]
struct Dictionary {
    at: usize,
    len: u64,
}

/// Reads the table forward, failing with errors that name the block.
struct Scanner<'a> {
    section: &'a [u8],
    what: &'a str,
}

impl<'a> Scanner<'a> {
    fn corrupt(&self, why: &str) -> Error {
        Error::internal(format!("{} is corrupt: {why}", self.what))
    }

    fn reader(&self, at: usize) -> BinaryReader<'a> {
        BinaryReader::new(&self.section[at.min(self.section.len())..], self.what)
    }

    /// Where `r`, a reader of this table, is in it.
    fn at(&self, r: &BinaryReader) -> usize {
        self.section.len() - r.remaining()
    }

    /// Passes `n` varints from `at`; where they end.
    ///
    /// A varint ends at each byte whose high bit is clear, so the ends are counted eight
    /// bytes at a time: most of a miss's scan is passing other rows' varints. Unlike a
    /// decode this does not refuse an overlong varint of another row; the table passed
    /// its checksum before it is scanned, and the row found is checked in full.
    fn skip_varints(&self, at: usize, n: u64) -> Result<usize> {
        const HIGH_BITS: u64 = 0x8080_8080_8080_8080;
        let bytes = self.section.get(at..).unwrap_or_default();
        let (mut pos, mut left) = (0usize, n);
        while left > 0 {
            let Some(word) = bytes.get(pos..pos + 8) else {
                break;
            };
            let word = u64::from_le_bytes(word.try_into().expect("a slice of 8 bytes"));
            let ends = u64::from((!word & HIGH_BITS).count_ones());
            // A word holding the last end needed is finished byte by byte: the bytes
            // after that end belong to the next column.
            if ends >= left {
                break;
            }
            left -= ends;
            pos += 8;
        }
        while left > 0 {
            let byte = *bytes
                .get(pos)
                .ok_or_else(|| self.corrupt("the table ends inside a column"))?;
            if byte & 0x80 == 0 {
                left -= 1;
            }
            pos += 1;
        }
        Ok(at + pos)
    }

    /// `r` moved past `n` varints.
    fn skip_in(&self, r: &BinaryReader<'a>, n: u64) -> Result<BinaryReader<'a>> {
        Ok(self.reader(self.skip_varints(self.at(r), n)?))
    }

    /// String `id` of `dict`.
    fn string(&self, dict: Dictionary, id: u64) -> Result<String> {
        if id >= dict.len {
            return Err(self.corrupt("a record names a missing dictionary entry"));
        }
        let mut r = self.reader(dict.at);
        self.skip_strs(&mut r, id)?;
        r.short_str()
    }

    /// Passes a string with a varint length prefix.
    fn skip_str(&self, r: &mut BinaryReader) -> Result<()> {
        let len = r.varint()?;
        r.take(usize::try_from(len).map_err(|_| self.corrupt("an absurd string length"))?)?;
        Ok(())
    }

    /// Passes `n` strings from `r`. Dictionary strings are short: a one-byte length is
    /// taken as it is, without the general varint decode.
    fn skip_strs(&self, r: &mut BinaryReader<'a>, n: u64) -> Result<()> {
        let mut pos = self.at(r);
        let mut left = n;
        while left > 0 {
            match self.section.get(pos) {
                Some(&len) if len < 0x80 => pos += 1 + usize::from(len),
                _ => break,
            }
            left -= 1;
        }
        if pos > self.section.len() {
            return Err(self.corrupt("a dictionary string runs past the table"));
        }
        *r = self.reader(pos);
        for _ in 0..left {
            self.skip_str(r)?;
        }
        Ok(())
    }
}

/// The row of the format-3 table `section` with timestamp `ts`, if there is one;
/// `frame_raw_lens` are the decoded lengths of the block's frames, `what` names the block.
pub fn find_row(
    section: &[u8],
    frame_raw_lens: &[u64],
    what: &str,
    ts: u64,
) -> Result<Option<TableRow>> {
    let s = Scanner { section, what };
    let mut r = s.reader(0);
    let count = r.varint()?;
    if count > r.remaining() as u64 {
        return Err(s.corrupt("the record count exceeds the table"));
    }
    let mut dicts = [Dictionary { at: 0, len: 0 }; 3];
    for dict in dicts.iter_mut() {
        let len = r.varint()?;
        *dict = Dictionary { at: s.at(&r), len };
        s.skip_strs(&mut r, len)?;
    }
    let [types, keys, values] = dicts;

    // Timestamps, delta-coded: the row's index, or no row. Rows are in timestamp order,
    // so the first timestamp at or past `ts` decides.
    let mut timestamp = 0u64;
    let mut row = None;
    for i in 0..count {
        timestamp = timestamp.wrapping_add(r.varint()?);
        if timestamp >= ts {
            row = (timestamp == ts).then_some(i);
            break;
        }
    }
    let Some(row) = row else {
        return Ok(None);
    };
    // The rest of the column, passed without adding it up.
    r = s.skip_in(&r, count - row - 1)?;

    // Frame deltas: the row's frame, and the first row of that frame (offsets are coded
    // relative to the end of the record before, within a frame).
    let (mut frame, mut frame_start) = (0u32, 0u64);
    for i in 0..=row {
        let delta = r.varint()?;
        if delta != 0 {
            frame = u32::try_from(delta)
                .ok()
                .and_then(|d| frame.checked_add(d))
                .ok_or_else(|| s.corrupt("frame number out of range"))?;
            frame_start = i;
        }
    }
    let offsets_at = s.skip_varints(s.at(&r), count - row - 1)?;
    let sizes_at = s.skip_varints(offsets_at, count)?;
    let types_at = s.skip_varints(sizes_at, count)?;
    let mut r = s.reader(s.skip_varints(types_at, row)?);
    let type_id = r.varint()?;
    r = s.skip_in(&r, count - row - 1)?;
    let (mut labels_before, mut label_count, mut total_labels) = (0u64, 0u64, 0u64);
    for i in 0..count {
        let n = r.varint()?;
        if i < row {
            labels_before += n;
        } else if i == row {
            label_count = n;
        }
        total_labels = total_labels
            .checked_add(n)
            .filter(|&t| t <= section.len() as u64)
            .ok_or_else(|| s.corrupt("label counts exceed the table"))?;
    }
    let keys_at = s.at(&r);
    let values_at = s.skip_varints(keys_at, total_labels)?;
    // The whole table must be there, as a full decode would require.
    s.skip_varints(values_at, total_labels)?;

    // The row's offset: the offsets and sizes columns side by side from its frame's
    // first row.
    let mut offset_reader = s.reader(offsets_at);
    let mut size_reader = s.reader(sizes_at);
    let (mut expected, mut offset, mut size) = (0u64, 0u64, 0u64);
    for i in 0..=row {
        let residual = offset_reader.varint()?;
        size = size_reader.varint()?;
        if i >= frame_start {
            offset = expected.wrapping_add(unzigzag(residual) as u64);
            expected = offset.wrapping_add(size);
        }
    }
    let raw_len = *frame_raw_lens
        .get(frame as usize)
        .ok_or_else(|| s.corrupt("a record names a missing frame"))?;
    if offset.checked_add(size).is_none_or(|end| end > raw_len) {
        return Err(s.corrupt("a record lies outside its frame"));
    }

    let mut key_reader = s.reader(s.skip_varints(keys_at, labels_before)?);
    let mut value_reader = s.reader(s.skip_varints(values_at, labels_before)?);
    let mut labels = Labels::new();
    for _ in 0..label_count {
        let key = s.string(keys, key_reader.varint()?)?;
        let value = s.string(values, value_reader.varint()?)?;
        labels.insert(key, value);
    }
    Ok(Some(TableRow {
        meta: RecordMeta {
            timestamp: ts,
            labels,
            content_type: s.string(types, type_id)?,
            size,
        },
        frame,
        offset,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::format::block_meta::encode_records;
    use crate::storage::format::block_record::BlockRecord;
    use crate::storage::format::columns::TableColumns;

    fn encoded(records: &[BlockRecord]) -> Vec<u8> {
        let mut section = Vec::new();
        encode_records(records, &mut section);
        section
    }

    /// Every row the whole-table decoder gives, found one by one, and no row between.
    fn same_as_decoded(section: &[u8], raw_lens: &[u64]) {
        let columns = TableColumns::decode(section, raw_lens, "t").unwrap();
        let mut at = 0usize;
        for i in 0..columns.stamps.len() {
            let ts = columns.stamps[i];
            let row = find_row(section, raw_lens, "t", ts).unwrap().unwrap();
            let labels: Labels = (0..columns.label_counts[i] as usize)
                .map(|j| {
                    (
                        columns.keys[columns.key_ids[at + j] as usize].clone(),
                        columns.values[columns.value_ids[at + j] as usize].clone(),
                    )
                })
                .collect();
            at += columns.label_counts[i] as usize;
            assert_eq!(row.meta.labels, labels, "row {i}");
            assert_eq!(
                row.meta.content_type,
                columns.types[columns.type_ids[i] as usize]
            );
            assert_eq!(
                (row.frame, row.offset, row.meta.size),
                (columns.frames[i], columns.offsets[i], columns.sizes[i]),
                "row {i}"
            );
            assert_eq!(find_row(section, raw_lens, "t", ts + 1).unwrap(), None);
        }
        assert_eq!(find_row(section, raw_lens, "t", 0).unwrap(), None);
        assert_eq!(find_row(section, raw_lens, "t", u64::MAX).unwrap(), None);
    }

    /// Row `i`'s timestamp: gaps that grow, never 1 wide.
    fn stamp(i: u64) -> u64 {
        1_000 + 3 * i * i + 3 * i
    }

    fn records() -> Vec<BlockRecord> {
        let mut records = Vec::new();
        // Three frames; sizes that vary, labels that repeat and that do not, a record
        // without labels, two content types.
        let (mut frame, mut offset) = (0u32, 0u64);
        for i in 0..300u64 {
            if i == 100 || i == 250 {
                frame += 1;
                offset = 0;
            }
            let size = (i * 37) % 500;
            let mut labels = Labels::new();
            if i % 7 != 0 {
                labels.insert("camera".into(), format!("cam-{}", i % 3));
                labels.insert("seq".into(), format!("{i}"));
            }
            records.push(BlockRecord {
                meta: RecordMeta {
                    timestamp: stamp(i),
                    labels,
                    content_type: if i % 2 == 0 {
                        "image/png"
                    } else {
                        "text/plain"
                    }
                    .into(),
                    size,
                },
                frame,
                offset,
            });
            offset += size;
        }
        records
    }

    #[test]
    fn finds_each_row_as_the_whole_table_decodes_it() {
        let records = records();
        let raw_lens = vec![1 << 20; 3];
        let section = encoded(&records);
        same_as_decoded(&section, &raw_lens);
    }

    #[test]
    fn skipping_varints_ends_where_decoding_them_does() {
        // Varints of 1 to 10 bytes in a pseudo-random mix, so ends fall everywhere in a word.
        let mut bytes = Vec::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let value = x >> (x % 64);
            let mut v = value;
            while v >= 0x80 {
                bytes.push((v as u8) | 0x80);
                v >>= 7;
            }
            bytes.push(v as u8);
        }
        let s = Scanner {
            section: &bytes,
            what: "t",
        };
        for start in [0usize, 1, 7] {
            let mut r = BinaryReader::new(&bytes, "t");
            for _ in 0..start {
                r.varint().unwrap();
            }
            let at = bytes.len() - r.remaining();
            for n in 0..(2000 - start as u64) {
                assert_eq!(
                    s.skip_varints(at, n).unwrap(),
                    bytes.len() - r.remaining(),
                    "{n} varints from varint {start}"
                );
                r.varint().unwrap();
            }
            assert!(s.skip_varints(at, 2001 - start as u64).is_err());
        }
    }

    #[test]
    fn damaged_tables_fail_cleanly() {
        let records = records();
        let raw_lens = vec![1 << 20; 3];
        let section = encoded(&records);
        for cut in [0, 1, 5, section.len() / 2, section.len() - 1] {
            // Cut short: an error or no row, never a panic.
            let _ = find_row(&section[..cut], &raw_lens, "t", stamp(150));
        }
        // A frame too short for its records.
        let err = find_row(&section, &[1 << 20, 10, 1 << 20], "t", stamp(150)).unwrap_err();
        assert!(err.to_string().contains("outside its frame"), "{err}");
        for byte in 0..section.len() {
            let mut damaged = section.clone();
            damaged[byte] ^= 0x5a;
            let _ = find_row(&damaged, &raw_lens, "t", stamp(150));
        }
    }
}
