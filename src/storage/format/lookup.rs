//! The compact lookup of a sealed block: what a read by timestamp and a duplicate check
//! need, and nothing else — the sorted timestamps, each record's frame, offset and size,
//! and its content type and labels as one index into the block's distinct (content type,
//! labels) sets, whose strings are each stored once, packed into one buffer.
//!
//! Why: a parsed record table costs a few hundred bytes per record (a label map and a
//! string each) and a parse per miss, so only a few hundred blocks stay parsed; random
//! reads over a larger entry would map and parse a whole table per request. A lookup costs
//! 20 bytes per record in most blocks (24 when the block spans more than 71 minutes),
//! plus each distinct set and string once, so a memory budget holds a hundred times as
//! many blocks, and a read through it decodes only the frame of the record asked for.
//! Before the sets and the narrow fields it cost 40 bytes per record and 8 per label:
//! the 10 million records of the scale bench's 10 GB store needed 660 MB, more than the
//! default budget, and random reads there missed. It is built from the parsed view
//! (edits applied), so it answers exactly as that view does.

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::Result;
use crate::storage::format::block::SealedBlock;
use crate::storage::format::block_meta::FrameInfo;
use crate::storage::format::columns::TableColumns;
use crate::storage::format::frames::{BlockFrames, DecodedFrame, FrameChecks};
use crate::storage::record::{Payload, RecordMeta};

/// Distinct strings packed into one buffer: string `i` ends at `ends[i]`.
#[derive(Default)]
struct Strings {
    text: String,
    ends: Vec<u32>,
}

impl Strings {
    /// Packs `strings` (already distinct: a table's dictionary), keeping their indices.
    fn packed(strings: &[String]) -> Option<Strings> {
        let mut text = String::with_capacity(strings.iter().map(String::len).sum());
        let mut ends = Vec::with_capacity(strings.len());
        for s in strings {
            text.push_str(s);
            ends.push(u32::try_from(text.len()).ok()?);
        }
        Some(Strings { text, ends })
    }

    fn get(&self, id: u32) -> &str {
        let id = id as usize;
        let start = if id == 0 {
            0
        } else {
            self.ends[id - 1] as usize
        };
        &self.text[start..self.ends[id] as usize]
    }

    fn heap_bytes(&self) -> usize {
        self.text.capacity() + self.ends.capacity() * 4
    }
}

/// Interns strings into [`Strings`] while a lookup is built.
struct Interner<'a> {
    ids: HashMap<&'a str, u32>,
    strings: Strings,
}

impl<'a> Interner<'a> {
    fn new() -> Self {
        Interner {
            ids: HashMap::new(),
            strings: Strings::default(),
        }
    }

    fn id(&mut self, text: &'a str) -> u32 {
        let strings = &mut self.strings;
        *self.ids.entry(text).or_insert_with(|| {
            strings.text.push_str(text);
            strings.ends.push(strings.text.len() as u32);
            (strings.ends.len() - 1) as u32
        })
    }

    fn finish(mut self) -> Strings {
        self.strings.text.shrink_to_fit();
        self.strings.ends.shrink_to_fit();
        self.strings
    }
}

/// A block's timestamps, sorted: as offsets from the first when the block spans less
/// than 2³² µs (71 minutes; most blocks), 4 bytes a record, else whole.
enum Stamps {
    Near { base: u64, deltas: Vec<u32> },
    Far(Vec<u64>),
}

impl Stamps {
    fn new(sorted: Vec<u64>) -> Stamps {
        let (Some(&base), Some(&last)) = (sorted.first(), sorted.last()) else {
            return Stamps::Far(sorted);
        };
        if u32::try_from(last - base).is_err() {
            return Stamps::Far(sorted);
        }
        Stamps::Near {
            base,
            deltas: sorted.iter().map(|&ts| (ts - base) as u32).collect(),
        }
    }

    fn find(&self, ts: u64) -> Option<usize> {
        match self {
            Stamps::Near { base, deltas } => {
                let delta = u32::try_from(ts.checked_sub(*base)?).ok()?;
                deltas.binary_search(&delta).ok()
            }
            Stamps::Far(stamps) => stamps.binary_search(&ts).ok(),
        }
    }

    fn get(&self, index: usize) -> u64 {
        match self {
            Stamps::Near { base, deltas } => base + u64::from(deltas[index]),
            Stamps::Far(stamps) => stamps[index],
        }
    }

    fn heap_bytes(&self) -> usize {
        match self {
            Stamps::Near { deltas, .. } => deltas.capacity() * 4,
            Stamps::Far(stamps) => stamps.capacity() * 8,
        }
    }
}

/// Where a record's payload lies (in its decoded frame), and its metadata set.
struct Slot {
    offset: u32,
    size: u32,
    frame: u32,
    meta: u32,
}

/// A content type and a set of labels that records share: most records of a block
/// repeat a few, so each is kept once.
struct MetaSet {
    content_type: u32,
    /// Where its labels start in `pairs`, and how many it has.
    labels: u32,
    label_count: u32,
}

/// A record as the builders see it: its content type id and its labels as (name, value)
/// ids, a range of all the block's pairs.
struct RowMeta {
    content_type: u32,
    labels: std::ops::Range<usize>,
}

/// A label as (name, value) ids.
type Pair = (u32, u32);

/// A metadata set while sets are told apart: content type id and labels.
type SetKey<'a> = (u32, &'a [Pair]);

/// The distinct metadata sets of a block's rows.
struct DistinctSets {
    /// Each row's set.
    of_row: Vec<u32>,
    sets: Vec<MetaSet>,
    /// The labels of the sets only.
    pairs: Vec<Pair>,
}

/// The distinct metadata sets of `rows` (labels taken from `all_pairs`). `None` past the
/// 32-bit ids.
fn distinct_sets(rows: &[RowMeta], all_pairs: &[Pair]) -> Option<DistinctSets> {
    let mut ids: HashMap<SetKey, u32> = HashMap::new();
    let mut sets = Vec::new();
    let mut pairs = Vec::new();
    let mut of_row = Vec::with_capacity(rows.len());
    let mut previous: Option<(SetKey, u32)> = None;
    for row in rows {
        let key = (row.content_type, &all_pairs[row.labels.clone()]);
        // Neighbours mostly share their set: skip the hash for them.
        let id = match previous {
            Some((last, id)) if last == key => id,
            _ => match ids.get(&key) {
                Some(&id) => id,
                None => {
                    let id = u32::try_from(sets.len()).ok()?;
                    sets.push(MetaSet {
                        content_type: row.content_type,
                        labels: u32::try_from(pairs.len()).ok()?,
                        label_count: u32::try_from(key.1.len()).ok()?,
                    });
                    pairs.extend_from_slice(key.1);
                    ids.insert(key, id);
                    id
                }
            },
        };
        previous = Some((key, id));
        of_row.push(id);
    }
    sets.shrink_to_fit();
    pairs.shrink_to_fit();
    Some(DistinctSets {
        of_row,
        sets,
        pairs,
    })
}

/// A sealed block's lookup: see the module documentation.
pub struct BlockLookup {
    body: Arc<BlockFrames>,
    stamps: Stamps,
    slots: Vec<Slot>,
    sets: Vec<MetaSet>,
    content_types: Strings,
    names: Strings,
    values: Strings,
    /// The labels of every set, as (name, value) ids, set after set.
    pairs: Vec<Pair>,
}

impl BlockLookup {
    /// The lookup of a parsed view, sharing its mapping; `None` when the block is too
    /// large for its 32-bit fields (a record or frame of 4 GiB, 4 GiB of distinct
    /// strings), so it is read parsed.
    pub fn of(view: &SealedBlock) -> Option<BlockLookup> {
        let records = view.records();
        let mut types = Interner::new();
        let mut names = Interner::new();
        let mut values = Interner::new();
        let mut all_pairs = Vec::new();
        let mut rows = Vec::with_capacity(records.len());
        for r in records {
            let start = all_pairs.len();
            for (name, value) in &r.meta.labels {
                all_pairs.push((names.id(name), values.id(value)));
            }
            rows.push(RowMeta {
                content_type: types.id(&r.meta.content_type),
                labels: start..all_pairs.len(),
            });
        }
        let fits = |s: &Interner| u32::try_from(s.strings.text.len()).is_ok();
        if !(fits(&types) && fits(&names) && fits(&values)) {
            return None;
        }
        let distinct = distinct_sets(&rows, &all_pairs)?;
        let slots = records
            .iter()
            .zip(distinct.of_row)
            .map(|(r, meta)| {
                Some(Slot {
                    offset: u32::try_from(r.offset).ok()?,
                    size: u32::try_from(r.meta.size).ok()?,
                    frame: r.frame,
                    meta,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(BlockLookup {
            body: view.body().clone(),
            stamps: Stamps::new(records.iter().map(|r| r.meta.timestamp).collect()),
            slots,
            sets: distinct.sets,
            content_types: types.finish(),
            names: names.finish(),
            values: values.finish(),
            pairs: distinct.pairs,
        })
    }

    /// The lookup of a block's table columns (`format/columns.rs`, checked when decoded),
    /// without making a record of each row: the dictionaries become the lookup's strings
    /// as they are. The block must have no edits (they apply to records). `None` when the
    /// block is too large for the lookup's 32-bit fields.
    pub fn of_columns(body: Arc<BlockFrames>, c: TableColumns) -> Option<BlockLookup> {
        let id = |v: u64| u32::try_from(v).ok();
        let all_pairs = c
            .key_ids
            .iter()
            .zip(&c.value_ids)
            .map(|(&k, &v)| Some((id(k)?, id(v)?)))
            .collect::<Option<Vec<_>>>()?;
        let mut rows = Vec::with_capacity(c.stamps.len());
        let mut at = 0usize;
        for (&type_id, &count) in c.type_ids.iter().zip(&c.label_counts) {
            let end = at + usize::try_from(count).ok()?;
            rows.push(RowMeta {
                content_type: id(type_id)?,
                labels: at..end,
            });
            at = end;
        }
        let distinct = distinct_sets(&rows, &all_pairs)?;
        let mut slots = Vec::with_capacity(c.stamps.len());
        for (i, meta) in distinct.of_row.into_iter().enumerate() {
            slots.push(Slot {
                offset: id(c.offsets[i])?,
                size: id(c.sizes[i])?,
                frame: c.frames[i],
                meta,
            });
        }
        Some(BlockLookup {
            body,
            stamps: Stamps::new(c.stamps),
            slots,
            sets: distinct.sets,
            content_types: Strings::packed(&c.types)?,
            names: Strings::packed(&c.keys)?,
            values: Strings::packed(&c.values)?,
            pairs: distinct.pairs,
        })
    }

    /// Index of the record with this exact timestamp.
    pub fn find(&self, ts: u64) -> Option<usize> {
        self.stamps.find(ts)
    }

    /// Whether the block holds a record at `ts`.
    pub fn contains(&self, ts: u64) -> bool {
        self.find(ts).is_some()
    }

    /// The block's frames.
    pub fn frames(&self) -> &[FrameInfo] {
        self.body.frames()
    }

    /// Which of the block's frames passed their checksum.
    pub fn checks(&self) -> &Arc<FrameChecks> {
        self.body.checks()
    }

    /// The frame holding record `index`.
    pub fn frame_of(&self, index: usize) -> u32 {
        self.slots[index].frame
    }

    /// The metadata of record `index`.
    pub fn meta(&self, index: usize) -> RecordMeta {
        let set = &self.sets[self.slots[index].meta as usize];
        let first = set.labels as usize;
        let labels = self.pairs[first..first + set.label_count as usize]
            .iter()
            .map(|&(name, value)| {
                (
                    self.names.get(name).to_string(),
                    self.values.get(value).to_string(),
                )
            })
            .collect();
        RecordMeta {
            timestamp: self.stamps.get(index),
            labels,
            content_type: self.content_types.get(set.content_type).to_string(),
            size: u64::from(self.slots[index].size),
        }
    }

    /// The payload of record `index`; decodes only the frame that holds it, unless
    /// `decoded` holds it already (and then keeps it for the caller's next read). The
    /// lookup keeps no decoded frame itself: thousands of lookups are cached, and their
    /// decoded frames would be a megabyte each (the cache keeps a few, in a budget).
    pub fn payload(&self, index: usize, decoded: &mut DecodedFrame) -> Result<Payload> {
        let slot = &self.slots[index];
        self.body.payload(
            slot.frame,
            u64::from(slot.offset),
            u64::from(slot.size),
            decoded,
        )
    }

    /// Bytes of memory the lookup takes (what the cache's budget counts), besides the
    /// mapping it shares.
    pub fn heap_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.body.heap_bytes()
            + self.stamps.heap_bytes()
            + self.slots.capacity() * std::mem::size_of::<Slot>()
            + self.sets.capacity() * std::mem::size_of::<MetaSet>()
            + self.pairs.capacity() * std::mem::size_of::<Pair>()
            + self.content_types.heap_bytes()
            + self.names.heap_bytes()
            + self.values.heap_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::format::block::BlockWriter;
    use crate::storage::format::codec::Codec;
    use crate::storage::record::Labels;

    /// Records with labels repeated (three sets), unique (a sequence number on every
    /// fifth) and absent, two content types, payloads of varied size; `step` apart.
    fn record(i: u64, step: u64) -> (RecordMeta, Vec<u8>) {
        let mut labels = Labels::new();
        if !i.is_multiple_of(7) {
            labels.insert("camera".into(), format!("cam-{}", i % 3));
        }
        if i.is_multiple_of(5) {
            labels.insert("seq".into(), i.to_string());
        }
        let content_type = if i.is_multiple_of(2) {
            "image/png"
        } else {
            "text/plain"
        };
        let payload = format!("payload {i} ").repeat((i % 9 + 1) as usize);
        let meta = RecordMeta {
            timestamp: 5_000 + i * step,
            labels,
            content_type: content_type.into(),
            size: payload.len() as u64,
        };
        (meta, payload.into_bytes())
    }

    /// Both ways of building a lookup answer every record as the parsed block does, and
    /// find nothing between records or outside the block.
    fn same_as_parsed(step: u64) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("b.blk");
        let mut writer = BlockWriter::create(&path, Codec::Lz4, 2048).expect("create");
        for i in 0..300 {
            let (meta, payload) = record(i, step);
            writer.push(&meta, &payload).expect("push");
        }
        let summary = writer.finish().expect("finish");
        let view = SealedBlock::open(&path, "b".into(), Some(summary.meta_crc)).expect("open");
        let (body, columns) =
            SealedBlock::open_columns(&path, "b".into(), Some(summary.meta_crc), None)
                .expect("open columns");
        let from_columns =
            BlockLookup::of_columns(body, columns.expect("format 3")).expect("columns fit");
        let from_records = BlockLookup::of(&view).expect("records fit");
        for lookup in [&from_records, &from_columns] {
            // Three camera values (or none) by two content types, and every fifth unique.
            assert!(lookup.sets.len() < 300 / 5 + 8 + 1, "{}", lookup.sets.len());
            for i in 0..300 {
                let (meta, payload) = record(i, step);
                let index = lookup.find(meta.timestamp).expect("found");
                assert_eq!(lookup.meta(index), meta, "record {i}");
                assert_eq!(
                    lookup
                        .payload(index, &mut None)
                        .expect("payload")
                        .as_slice(),
                    payload
                );
                assert!(!lookup.contains(meta.timestamp + 1));
            }
            assert!(!lookup.contains(0));
            assert!(!lookup.contains(4_999));
            assert!(!lookup.contains(5_000 + 300 * step));
            assert!(!lookup.contains(u64::MAX));
        }
    }

    #[test]
    fn a_lookup_answers_as_the_parsed_block() {
        same_as_parsed(1_000);
    }

    #[test]
    fn a_block_spanning_more_than_71_minutes_keeps_whole_timestamps() {
        let step = 60 * 60 * 1_000_000;
        same_as_parsed(step);
        let stamps = Stamps::new(vec![1, 2, 1 + (1 << 32)]);
        assert!(matches!(stamps, Stamps::Far(_)));
        let near = Stamps::new(vec![7, 8, 7 + u64::from(u32::MAX)]);
        assert!(matches!(near, Stamps::Near { .. }));
        assert_eq!(near.find(7 + u64::from(u32::MAX)), Some(2));
        assert_eq!(near.find(8 + u64::from(u32::MAX)), None);
        assert_eq!(near.find(6), None);
        assert_eq!(near.get(1), 8);
        assert!(Stamps::new(Vec::new()).find(0).is_none());
    }

    #[test]
    fn a_record_past_the_narrow_fields_gets_no_lookup() {
        let c = TableColumns {
            types: vec!["t".into()],
            keys: Vec::new(),
            values: Vec::new(),
            stamps: vec![1, 2],
            frames: vec![0, 0],
            offsets: vec![0, 1],
            sizes: vec![1, 1 << 32],
            type_ids: vec![0, 0],
            label_counts: vec![0, 0],
            key_ids: Vec::new(),
            value_ids: Vec::new(),
        };
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("b.blk");
        let mut writer = BlockWriter::create(&path, Codec::None, 2048).expect("create");
        let (meta, payload) = record(1, 1);
        writer.push(&meta, &payload).expect("push");
        let summary = writer.finish().expect("finish");
        let (body, _) = SealedBlock::open_columns(&path, "b".into(), Some(summary.meta_crc), None)
            .expect("open columns");
        assert!(BlockLookup::of_columns(body, c).is_none());
    }
}
