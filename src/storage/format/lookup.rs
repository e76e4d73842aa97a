//! The compact lookup of a sealed block: what a read by timestamp and a duplicate check
//! need, and nothing else — the sorted timestamps, each record's frame, offset and size,
//! and its content type and labels as indices into the block's distinct strings (each
//! stored once, packed into one buffer).
//!
//! Why: a parsed record table costs a few hundred bytes per record (a label map and a
//! string each) and a parse per miss, so only a few hundred blocks stay parsed; random
//! reads over a larger entry would map and parse a whole table per request. A lookup costs
//! about 40 bytes per record and 8 per label (plus each distinct string once), so a memory budget holds ten to a hundred times as many
//! blocks, and a read through it decodes only the frame of the record asked for. It is
//! built from the parsed view (edits applied), so it answers exactly as that view does.

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

/// Where a record's payload lies, its content type and where its labels start in
/// `pairs` and how many it has.
struct Slot {
    offset: u64,
    size: u64,
    frame: u32,
    content_type: u32,
    labels: u32,
    label_count: u32,
}

/// A sealed block's lookup: see the module documentation.
pub struct BlockLookup {
    body: Arc<BlockFrames>,
    stamps: Vec<u64>,
    slots: Vec<Slot>,
    content_types: Strings,
    names: Strings,
    values: Strings,
    /// Every record's labels, as (name, value) ids, record after record.
    pairs: Vec<(u32, u32)>,
}

impl BlockLookup {
    /// The lookup of a parsed view, sharing its mapping; `None` when the block is too
    /// large for its 32-bit indices (4 GiB of distinct strings), so it is read parsed.
    pub fn of(view: &SealedBlock) -> Option<BlockLookup> {
        let records = view.records();
        let mut types = Interner::new();
        let mut names = Interner::new();
        let mut values = Interner::new();
        let mut pairs = Vec::new();
        let mut slots = Vec::with_capacity(records.len());
        for r in records {
            let labels = u32::try_from(pairs.len()).ok()?;
            for (name, value) in &r.meta.labels {
                pairs.push((names.id(name), values.id(value)));
            }
            slots.push(Slot {
                offset: r.offset,
                size: r.meta.size,
                frame: r.frame,
                content_type: types.id(&r.meta.content_type),
                labels,
                label_count: r.meta.labels.len() as u32,
            });
        }
        let fits = |s: &Interner| u32::try_from(s.strings.text.len()).is_ok();
        if !(fits(&types) && fits(&names) && fits(&values)) {
            return None;
        }
        pairs.shrink_to_fit();
        Some(BlockLookup {
            body: view.body().clone(),
            stamps: records.iter().map(|r| r.meta.timestamp).collect(),
            slots,
            content_types: types.finish(),
            names: names.finish(),
            values: values.finish(),
            pairs,
        })
    }

    /// The lookup of a block's table columns (`format/columns.rs`, checked when decoded),
    /// without making a record of each row: the dictionaries become the lookup's strings
    /// as they are. The block must have no edits (they apply to records). `None` when the
    /// block is too large for the lookup's 32-bit indices.
    pub fn of_columns(body: Arc<BlockFrames>, c: TableColumns) -> Option<BlockLookup> {
        let id = |v: u64| u32::try_from(v).ok();
        let mut slots = Vec::with_capacity(c.stamps.len());
        let mut at = 0u64;
        for i in 0..c.stamps.len() {
            slots.push(Slot {
                offset: c.offsets[i],
                size: c.sizes[i],
                frame: c.frames[i],
                content_type: id(c.type_ids[i])?,
                labels: id(at)?,
                label_count: id(c.label_counts[i])?,
            });
            at += c.label_counts[i];
        }
        let pairs = c
            .key_ids
            .iter()
            .zip(&c.value_ids)
            .map(|(&k, &v)| Some((id(k)?, id(v)?)))
            .collect::<Option<Vec<_>>>()?;
        Some(BlockLookup {
            body,
            stamps: c.stamps,
            slots,
            content_types: Strings::packed(&c.types)?,
            names: Strings::packed(&c.keys)?,
            values: Strings::packed(&c.values)?,
            pairs,
        })
    }

    /// Index of the record with this exact timestamp.
    pub fn find(&self, ts: u64) -> Option<usize> {
        self.stamps.binary_search(&ts).ok()
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
        let slot = &self.slots[index];
        let first = slot.labels as usize;
        let labels = self.pairs[first..first + slot.label_count as usize]
            .iter()
            .map(|&(name, value)| {
                (
                    self.names.get(name).to_string(),
                    self.values.get(value).to_string(),
                )
            })
            .collect();
        RecordMeta {
            timestamp: self.stamps[index],
            labels,
            content_type: self.content_types.get(slot.content_type).to_string(),
            size: slot.size,
        }
    }

    /// The payload of record `index`; decodes only the frame that holds it, unless
    /// `decoded` holds it already (and then keeps it for the caller's next read). The
    /// lookup keeps no decoded frame itself: thousands of lookups are cached, and their
    /// decoded frames would be a megabyte each (the cache keeps a few, in a budget).
    pub fn payload(&self, index: usize, decoded: &mut DecodedFrame) -> Result<Payload> {
        let slot = &self.slots[index];
        self.body
            .payload(slot.frame, slot.offset, slot.size, decoded)
    }

    /// Bytes of memory the lookup takes (what the cache's budget counts), besides the
    /// mapping it shares.
    pub fn heap_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.body.heap_bytes()
            + self.stamps.capacity() * std::mem::size_of::<u64>()
            + self.slots.capacity() * std::mem::size_of::<Slot>()
            + self.pairs.capacity() * std::mem::size_of::<(u32, u32)>()
            + self.content_types.heap_bytes()
            + self.names.heap_bytes()
            + self.values.heap_bytes()
    }
}
