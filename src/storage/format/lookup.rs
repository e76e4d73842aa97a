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
//! many blocks, and a read through it decodes only the frame of the record asked for
//! (the 10 million records of the scale bench's 10 GB store fit the default budget). It
//! is built from the parsed view (edits applied), so it answers exactly as that view
//! does.

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::Result;
use crate::storage::format::block::SealedBlock;
use crate::storage::format::block_meta::FrameInfo;
use crate::storage::format::columns::TableColumns;
use crate::storage::format::frames::{BlockFrames, DecodedFrame, FrameChecks};
use crate::storage::record::{Payload, RecordMeta};

mod edit;

/// Distinct strings packed into one buffer: string `i` ends at `ends[i]`.
#[derive(Default, Clone)]
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
#[derive(Clone)]
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
#[derive(Clone)]
struct Slot {
    offset: u32,
    size: u32,
    frame: u32,
    meta: u32,
}

/// A content type and a set of labels that records share: most records of a block
/// repeat a few, so each is kept once.
#[derive(Clone)]
struct MetaSet {
    content_type: u32,
    /// Where its labels start in `pairs`, and how many it has.
    labels: u32,
    label_count: u32,
}

/// A label as (name, value) ids.
type Pair = (u32, u32);

/// Slots of the table that finds a record's set among those already kept.
const SET_SLOTS: usize = 256;

/// An empty slot of that table.
const NO_SET: u32 = u32::MAX;

/// Where a set goes in that table: a multiplicative hash of its ids.
fn set_slot(content_type: u32, labels: &[Pair]) -> usize {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut h = u64::from(content_type).wrapping_add(1).wrapping_mul(K);
    for &(name, value) in labels {
        h = (h ^ (u64::from(name) << 32 | u64::from(value))).wrapping_mul(K);
    }
    (h >> 56) as usize % SET_SLOTS
}

/// Tells a block's metadata sets apart while its lookup is built, record after record.
///
/// A record's set is found in a direct-mapped table of the sets kept so far, not a hash
/// map: this runs for every record of every block whose lookup is built (a cold read), and
/// a map's hashing and growth cost more than the rest of the build. A set whose slot
/// another took is kept again: a little memory, never a different answer.
struct SetTable {
    slots: [u32; SET_SLOTS],
    sets: Vec<MetaSet>,
    /// The labels of the sets kept.
    pairs: Vec<Pair>,
    previous: u32,
}

impl SetTable {
    fn new() -> SetTable {
        SetTable {
            slots: [NO_SET; SET_SLOTS],
            sets: Vec::new(),
            pairs: Vec::new(),
            previous: NO_SET,
        }
    }

    fn holds(&self, id: u32, content_type: u32, labels: &[Pair]) -> bool {
        let set = &self.sets[id as usize];
        let start = set.labels as usize;
        set.content_type == content_type
            && self.pairs[start..start + set.label_count as usize] == *labels
    }

    /// The id of the set of a record with these ids; `None` past 32-bit ids.
    fn id(&mut self, content_type: u32, labels: &[Pair]) -> Option<u32> {
        // Neighbours mostly share their set: skip the hash for them.
        if self.previous != NO_SET && self.holds(self.previous, content_type, labels) {
            return Some(self.previous);
        }
        let slot = set_slot(content_type, labels);
        let kept = self.slots[slot];
        let id = if kept != NO_SET && self.holds(kept, content_type, labels) {
            kept
        } else {
            let id = u32::try_from(self.sets.len())
                .ok()
                .filter(|&id| id != NO_SET)?;
            self.sets.push(MetaSet {
                content_type,
                labels: u32::try_from(self.pairs.len()).ok()?,
                label_count: u32::try_from(labels.len()).ok()?,
            });
            self.pairs.extend_from_slice(labels);
            self.slots[slot] = id;
            id
        };
        self.previous = id;
        Some(id)
    }

    /// The sets and their labels.
    fn finish(mut self) -> (Vec<MetaSet>, Vec<Pair>) {
        self.sets.shrink_to_fit();
        self.pairs.shrink_to_fit();
        (self.sets, self.pairs)
    }
}

/// A sealed block's lookup: see the module documentation. Cloned only when an edit finds
/// it shared with a reader (a copy of its vectors, no hashing).
#[derive(Clone)]
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
    /// Bytes added by relabels in place (`edit.rs`), strings and sets left unused among
    /// them: past half the lookup, it is rebuilt instead.
    grown: usize,
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
        let mut sets = SetTable::new();
        let mut labels = Vec::new();
        let mut slots = Vec::with_capacity(records.len());
        for r in records {
            labels.clear();
            for (name, value) in &r.meta.labels {
                labels.push((names.id(name), values.id(value)));
            }
            slots.push(Slot {
                offset: u32::try_from(r.offset).ok()?,
                size: u32::try_from(r.meta.size).ok()?,
                frame: r.frame,
                meta: sets.id(types.id(&r.meta.content_type), &labels)?,
            });
        }
        let fits = |s: &Interner| u32::try_from(s.strings.text.len()).is_ok();
        if !(fits(&types) && fits(&names) && fits(&values)) {
            return None;
        }
        let (sets, pairs) = sets.finish();
        Some(BlockLookup {
            body: view.body().clone(),
            stamps: Stamps::new(records.iter().map(|r| r.meta.timestamp).collect()),
            slots,
            sets,
            content_types: types.finish(),
            names: names.finish(),
            values: values.finish(),
            pairs,
            grown: 0,
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
        let mut sets = SetTable::new();
        let mut slots = Vec::with_capacity(c.stamps.len());
        let mut at = 0usize;
        for i in 0..c.stamps.len() {
            let end = at + usize::try_from(c.label_counts[i]).ok()?;
            slots.push(Slot {
                offset: id(c.offsets[i])?,
                size: id(c.sizes[i])?,
                frame: c.frames[i],
                meta: sets.id(id(c.type_ids[i])?, all_pairs.get(at..end)?)?,
            });
            at = end;
        }
        let (sets, pairs) = sets.finish();
        Some(BlockLookup {
            body,
            stamps: Stamps::new(c.stamps),
            slots,
            sets,
            content_types: Strings::packed(&c.types)?,
            names: Strings::packed(&c.keys)?,
            values: Strings::packed(&c.values)?,
            pairs,
            grown: 0,
        })
    }

    /// Index of the record with this exact timestamp.
    pub fn find(&self, ts: u64) -> Option<usize> {
        self.stamps.find(ts)
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
    pub(super) fn record(i: u64, step: u64) -> (RecordMeta, Vec<u8>) {
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
            SealedBlock::open_columns(&path, "b".into(), Some(summary.meta_crc), None, None)
                .expect("open columns");
        let from_columns =
            BlockLookup::of_columns(body, columns.expect("format 3")).expect("columns fit");
        let from_records = BlockLookup::of(&view).expect("records fit");
        for lookup in [&from_records, &from_columns] {
            // Three camera values (or none) by two content types, and every fifth unique
            // (68 distinct), give or take a few kept twice.
            assert!(lookup.sets.len() < 100, "{}", lookup.sets.len());
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
                assert!(lookup.find(meta.timestamp + 1).is_none());
            }
            assert!(lookup.find(0).is_none());
            assert!(lookup.find(4_999).is_none());
            assert!(lookup.find(5_000 + 300 * step).is_none());
            assert!(lookup.find(u64::MAX).is_none());
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
    fn every_set_id_names_the_set_it_was_given_for() {
        // More sets than the table has slots, each seen twice, neighbours alike and not.
        let mut table = SetTable::new();
        let label_sets: Vec<Vec<Pair>> = (0..600u32)
            .map(|i| (0..i % 4).map(|j| (j, i)).collect())
            .collect();
        let order = (0..600usize).chain((0..600).rev()).chain([5, 5, 5]);
        for i in order {
            let content_type = i as u32 % 3;
            let id = table.id(content_type, &label_sets[i]).expect("fits");
            assert!(table.holds(id, content_type, &label_sets[i]), "set {i}");
        }
        let kept = table.sets.len();
        assert!((600..1200).contains(&kept), "{kept}");
        // The same set in a row is found without a second copy.
        let before = table.sets.len();
        table.id(9, &[(1, 2)]).expect("fits");
        table.id(9, &[(1, 2)]).expect("fits");
        assert_eq!(table.sets.len(), before + 1);
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
        let (body, _) =
            SealedBlock::open_columns(&path, "b".into(), Some(summary.meta_crc), None, None)
                .expect("open columns");
        assert!(BlockLookup::of_columns(body, c).is_none());
    }
}
