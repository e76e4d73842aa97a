//! A cached lookup changed in place by an edit of its block, so an edit costs what its
//! record's change costs, not a rebuild of the block's lookup. A relabel adds the record's
//! new set (its strings appended, not looked up: a lookup keeps no map of them) and points
//! the record at it; a removal drops the record's stamp and slot. What relabels leave
//! behind — strings and sets no record uses any more — is bounded: once it passes half the
//! lookup's size, the edit says no, and the cache rebuilds the lookup from the view.

use super::{BlockLookup, MetaSet, Stamps, Strings};
use crate::storage::record::Labels;

impl Strings {
    /// Appends `text` as a new string; `None` past 32-bit offsets or ids.
    fn push(&mut self, text: &str) -> Option<u32> {
        let end = u32::try_from(self.text.len() + text.len()).ok()?;
        let id = u32::try_from(self.ends.len()).ok()?;
        self.text.push_str(text);
        self.ends.push(end);
        Some(id)
    }
}

impl Stamps {
    fn remove(&mut self, index: usize) {
        match self {
            Stamps::Near { deltas, .. } => {
                deltas.remove(index);
            }
            Stamps::Far(stamps) => {
                stamps.remove(index);
            }
        }
    }
}

impl BlockLookup {
    /// Gives the record at `ts` exactly `labels` (its content type kept). False when the
    /// lookup cannot take the change in place: no record at `ts`, ids past 32 bits, or
    /// what earlier relabels left behind already half its size; it must then be rebuilt.
    pub fn relabel(&mut self, ts: u64, labels: &Labels) -> bool {
        let Some(index) = self.find(ts) else {
            return false;
        };
        let before = self.heap_bytes();
        if self.grown > before / 2 {
            return false;
        }
        let content_type = self.sets[self.slots[index].meta as usize].content_type;
        let first = self.pairs.len();
        for (name, value) in labels {
            let (Some(name), Some(value)) = (self.names.push(name), self.values.push(value)) else {
                self.pairs.truncate(first);
                return false;
            };
            self.pairs.push((name, value));
        }
        let (Ok(start), Ok(count), Ok(id)) = (
            u32::try_from(first),
            u32::try_from(labels.len()),
            u32::try_from(self.sets.len()),
        ) else {
            self.pairs.truncate(first);
            return false;
        };
        self.sets.push(MetaSet {
            content_type,
            labels: start,
            label_count: count,
        });
        self.slots[index].meta = id;
        self.grown += self.heap_bytes().saturating_sub(before);
        true
    }

    /// Drops the record at `ts`; false when there is none.
    pub fn remove(&mut self, ts: u64) -> bool {
        let Some(index) = self.find(ts) else {
            return false;
        };
        self.stamps.remove(index);
        self.slots.remove(index);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::record;
    use super::*;
    use crate::storage::format::block::{BlockWriter, SealedBlock};
    use crate::storage::format::codec::Codec;
    use crate::storage::format::edits::{BlockChange, apply_change};

    /// A lookup edited in place answers every record as the edited view does, through
    /// relabels (labels added, changed, all removed), removals, and enough relabels of
    /// one record to make it say no (and be rebuilt, as the cache does).
    #[test]
    fn an_edited_lookup_answers_as_the_edited_view() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("b.blk");
        let mut writer = BlockWriter::create(&path, Codec::Lz4, 2048).expect("create");
        for i in 0..300 {
            let (meta, payload) = record(i, 1_000);
            writer.push(&meta, &payload).expect("push");
        }
        let summary = writer.finish().expect("finish");
        let mut view = SealedBlock::open(&path, "b".into(), Some(summary.meta_crc)).expect("open");
        let mut lookup = BlockLookup::of(&view).expect("fits");
        let ts = |i: u64| 5_000 + i * 1_000;
        let labels = |pairs: &[(&str, &str)]| -> Labels {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let mut changes = vec![
            BlockChange::Relabel(ts(3), labels(&[("camera", "cam-9"), ("checked", "yes")])),
            BlockChange::Relabel(ts(7), labels(&[])),
            BlockChange::Remove(vec![(ts(0), 0), (ts(150), 0), (ts(299), 0)]),
            BlockChange::Relabel(ts(10), labels(&[("a,b", "x=y")])),
            BlockChange::Remove(vec![(ts(3), 0)]),
        ];
        changes.extend(
            (0..400).map(|n| {
                BlockChange::Relabel(ts(20), labels(&[("n", &format!("value number {n}"))]))
            }),
        );
        let mut rebuilt = 0;
        for change in &changes {
            apply_change(view.records_mut(), change);
            let fitted = match change {
                BlockChange::Relabel(ts, labels) => lookup.relabel(*ts, labels),
                BlockChange::Remove(gone) => gone.iter().all(|(ts, _)| lookup.remove(*ts)),
            };
            if !fitted {
                rebuilt += 1;
                lookup = BlockLookup::of(&view).expect("fits");
            }
            for (i, r) in view.records().iter().enumerate() {
                let found = lookup.find(r.meta.timestamp).expect("found");
                assert_eq!(found, i);
                assert_eq!(lookup.meta(found), r.meta);
                assert_eq!(lookup.frame_of(found), r.frame);
            }
            for gone in [0, 3, 150, 299].map(ts) {
                if view.find(gone).is_none() {
                    assert!(lookup.find(gone).is_none());
                }
            }
        }
        assert_eq!(view.records().len(), 296);
        // What relabels leave behind is bounded: the lookup asked to be rebuilt.
        assert!((1..50).contains(&rebuilt), "{rebuilt}");
        assert!(!lookup.relabel(ts(0), &labels(&[])), "a removed record");
    }
}
