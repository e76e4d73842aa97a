//! Writing a block file from records that already exist: an edited copy of a sealed block,
//! or the live records of a log. A block is never modified in place; these functions write
//! a new file (fsynced) and return what it holds, and the caller commits the index naming
//! it (DESIGN.md, "Crash safety"). On error the partial file is removed.

use std::collections::HashSet;
use std::path::Path;

use crate::error::Result;
use crate::storage::format::block::{BlockWriter, SealedBlock};
use crate::storage::format::block_meta::BlockSummary;
use crate::storage::format::codec::Codec;
use crate::storage::format::fsutil::remove_file_if_exists;
use crate::storage::format::log::OpenLog;
use crate::storage::record::{Labels, RecordMeta};

/// What to change while copying a sealed block.
#[derive(Default)]
pub struct BlockEdit<'a> {
    /// A record to add.
    pub insert: Option<(&'a RecordMeta, &'a [u8])>,
    /// New labels for the record with this timestamp.
    pub relabel: Option<(u64, Labels)>,
    /// Timestamps of records to drop.
    pub remove: Option<&'a HashSet<u64>>,
}

/// Creates block file `path` with `codec`, lets `write` push its records, and finishes
/// (fsyncs) it. A failure after the file was created removes it; a file that could not be
/// created (it exists) is not ours to remove.
pub fn write_new_block(
    path: &Path,
    codec: Codec,
    frame_size: usize,
    write: impl FnOnce(&mut BlockWriter) -> Result<()>,
) -> Result<BlockSummary> {
    let mut writer = BlockWriter::create(path, codec, frame_size)?;
    write(&mut writer)
        .and_then(|()| writer.finish())
        .inspect_err(|_| {
            let _ = remove_file_if_exists(path);
        })
}

/// Writes block file `path`: the records of `block` with `edit` applied, uncompressed (a
/// changed block becomes eligible for recompression again). Returns `None`, writing
/// nothing, when no record would remain.
pub fn write_edited(
    block: &SealedBlock,
    edit: &BlockEdit,
    path: &Path,
    frame_size: usize,
) -> Result<Option<BlockSummary>> {
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
    write_new_block(path, Codec::None, frame_size, |writer| {
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
        Ok(())
    })
    .map(Some)
}

/// Writes the live records of a log (which must hold at least one) into block file `path`.
pub fn write_log_block(log: &OpenLog, path: &Path, frame_size: usize) -> Result<BlockSummary> {
    write_new_block(path, Codec::None, frame_size, |writer| {
        let map = log.map()?;
        for rec in log.records().values() {
            writer.push(&rec.meta, log.payload_in(&map, rec)?)?;
        }
        Ok(())
    })
}
