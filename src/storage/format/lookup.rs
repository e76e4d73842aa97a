//! The compact lookup of a sealed block: what a read by timestamp and a duplicate check
//! need, and nothing else — the sorted timestamps, each record's frame, offset and size,
//! and its content type and label set as indices into the block's few distinct ones.
//!
//! Why: a parsed record table costs a few hundred bytes per record (a label map and a
//! string each) and a parse per miss, so only a few hundred blocks stay parsed; random
//! reads over a larger entry would map and parse a whole table per request. A lookup costs
//! about 40 bytes per record, so a memory budget holds ten to a hundred times as many
//! blocks, and a read through it decodes only the frame of the record asked for. It is
//! built from the parsed view (edits applied), so it answers exactly as that view does.

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::Result;
use crate::storage::format::block::SealedBlock;
use crate::storage::format::frames::{BlockFrames, DecodedFrame};
use crate::storage::record::{Labels, Payload, RecordMeta};

/// Where a record's payload lies and which of the block's content types and label sets
/// it has.
struct Slot {
    offset: u64,
    size: u64,
    frame: u32,
    labels: u32,
    content_type: u32,
}

/// A sealed block's lookup: see the module documentation.
pub struct BlockLookup {
    body: Arc<BlockFrames>,
    stamps: Vec<u64>,
    slots: Vec<Slot>,
    content_types: Vec<String>,
    label_sets: Vec<Labels>,
}

impl BlockLookup {
    /// The lookup of a parsed view, sharing its mapping.
    pub fn of(view: &SealedBlock) -> BlockLookup {
        let records = view.records();
        let mut types: HashMap<&str, u32> = HashMap::new();
        let mut sets: HashMap<&Labels, u32> = HashMap::new();
        let mut content_types = Vec::new();
        let mut label_sets = Vec::new();
        let mut slots = Vec::with_capacity(records.len());
        for r in records {
            let content_type = *types.entry(&r.meta.content_type).or_insert_with(|| {
                content_types.push(r.meta.content_type.clone());
                (content_types.len() - 1) as u32
            });
            let labels = *sets.entry(&r.meta.labels).or_insert_with(|| {
                label_sets.push(r.meta.labels.clone());
                (label_sets.len() - 1) as u32
            });
            slots.push(Slot {
                offset: r.offset,
                size: r.meta.size,
                frame: r.frame,
                labels,
                content_type,
            });
        }
        BlockLookup {
            body: view.body().clone(),
            stamps: records.iter().map(|r| r.meta.timestamp).collect(),
            slots,
            content_types,
            label_sets,
        }
    }

    /// Index of the record with this exact timestamp.
    pub fn find(&self, ts: u64) -> Option<usize> {
        self.stamps.binary_search(&ts).ok()
    }

    /// Whether the block holds a record at `ts`.
    pub fn contains(&self, ts: u64) -> bool {
        self.find(ts).is_some()
    }

    /// The metadata of record `index`.
    pub fn meta(&self, index: usize) -> RecordMeta {
        let slot = &self.slots[index];
        RecordMeta {
            timestamp: self.stamps[index],
            labels: self.label_sets[slot.labels as usize].clone(),
            content_type: self.content_types[slot.content_type as usize].clone(),
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
        let strings: usize = self.content_types.iter().map(|t| t.len() + 24).sum();
        let labels: usize = self
            .label_sets
            .iter()
            .flat_map(|set| set.iter())
            .map(|(k, v)| k.len() + v.len() + 64)
            .sum();
        std::mem::size_of::<Self>()
            + self.body.heap_bytes()
            + self.stamps.len() * std::mem::size_of::<u64>()
            + self.slots.len() * std::mem::size_of::<Slot>()
            + strings
            + labels
            + self.label_sets.len() * 24
    }
}
