//! Changes to sealed blocks: a block is never modified in place. The edited block is
//! written to a new file and fsynced, the index naming it is committed, and only then is
//! the old file unlinked (DESIGN.md, "Crash safety"). Sealing the open block works the
//! same way.

use std::collections::HashSet;

use crate::error::Result;
use crate::storage::block::{BlockWriter, SealedBlock};
use crate::storage::codec::Codec;
use crate::storage::entry::{Entry, EntryState};
use crate::storage::fsutil::remove_file_if_exists;
use crate::storage::index::{BlockEntry, block_path, log_path};
use crate::storage::record::{Labels, RecordMeta};

/// What to change while copying a sealed block.
#[derive(Default)]
pub(crate) struct BlockEdit<'a> {
    /// A record to add (a belated write).
    pub insert: Option<(&'a RecordMeta, &'a [u8])>,
    /// New labels for the record with this timestamp.
    pub relabel: Option<(u64, Labels)>,
    /// Timestamps of records to drop.
    pub remove: Option<&'a HashSet<u64>>,
}

impl Entry {
    /// Writes block file `seq`: the records of `block` with `edit` applied, uncompressed
    /// (a changed block becomes eligible for recompression again). Returns `None`, writing
    /// nothing, when no record would remain.
    pub(crate) fn write_edited(
        &self,
        block: &SealedBlock,
        edit: &BlockEdit,
        seq: u64,
    ) -> Result<Option<BlockEntry>> {
        let removed = edit.remove.map_or(0, |r| {
            block
                .records()
                .iter()
                .filter(|rec| r.contains(&rec.meta.timestamp))
                .count()
        });
        if block.records().len() - removed + usize::from(edit.insert.is_some()) == 0 {
            return Ok(None);
        }
        let path = block_path(self.dir(), seq);
        let written = (|| {
            let mut writer = BlockWriter::create(&path, Codec::None, self.frame_size)?;
            let mut pending = edit.insert;
            for (i, rec) in block.records().iter().enumerate() {
                let ts = rec.meta.timestamp;
                if let Some((meta, payload)) = pending
                    && meta.timestamp < ts
                {
                    writer.push(meta, payload)?;
                    pending = None;
                }
                if edit.remove.is_some_and(|r| r.contains(&ts)) {
                    continue;
                }
                let payload = block.payload(i)?;
                match &edit.relabel {
                    Some((relabel_ts, labels)) if *relabel_ts == ts => {
                        let mut meta = rec.meta.clone();
                        meta.labels = labels.clone();
                        writer.push(&meta, payload.as_slice())?;
                    }
                    _ => writer.push(&rec.meta, payload.as_slice())?,
                }
            }
            if let Some((meta, payload)) = pending {
                writer.push(meta, payload)?;
            }
            writer.finish()
        })();
        match written {
            Ok(summary) => Ok(Some(BlockEntry::from_summary(seq, &summary))),
            Err(e) => {
                let _ = remove_file_if_exists(&path);
                Err(e)
            }
        }
    }

    /// Replaces sealed block `pos` by an edited copy (or drops it when nothing remains).
    pub(crate) fn rewrite_one(
        &self,
        st: &mut EntryState,
        pos: usize,
        block: &SealedBlock,
        edit: &BlockEdit,
    ) -> Result<()> {
        let mut next = st.index.clone();
        let old_seq = next.blocks[pos].seq;
        let seq = next.take_seq();
        let mut created = Vec::new();
        match self.write_edited(block, edit, seq)? {
            Some(entry) => {
                next.blocks[pos] = entry;
                created.push(block_path(self.dir(), seq));
            }
            None => {
                next.blocks.remove(pos);
            }
        }
        self.commit(st, next, &created, &[old_seq])
    }

    /// Turns the open block into a sealed block file and commits it; the entry then has no
    /// open block until the next write starts one.
    pub(crate) fn seal(&self, st: &mut EntryState) -> Result<()> {
        let open = st
            .open
            .as_ref()
            .expect("seal is only called with an open block");
        let mut next = st.index.clone();
        let old_log = next.open_log.take();
        let mut created = Vec::new();
        if !open.records().is_empty() {
            let seq = next.take_seq();
            let path = block_path(self.dir(), seq);
            let written = (|| {
                let map = open.map()?;
                let mut writer = BlockWriter::create(&path, Codec::None, self.frame_size)?;
                for rec in open.records().values() {
                    writer.push(&rec.meta, open.payload_in(&map, rec)?)?;
                }
                writer.finish()
            })();
            let summary = match written {
                Ok(summary) => summary,
                Err(e) => {
                    let _ = remove_file_if_exists(&path);
                    return Err(e);
                }
            };
            next.blocks.push(BlockEntry::from_summary(seq, &summary));
            created.push(path);
        }
        self.commit(st, next, &created, &[])?;
        st.open = None;
        if let Some(seq) = old_log {
            let _ = remove_file_if_exists(&log_path(self.dir(), seq));
        }
        Ok(())
    }
}
