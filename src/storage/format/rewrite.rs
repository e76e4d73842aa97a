//! Writing a block file from records that already exist: a sealed block with its edits
//! folded in, or the live records of a log. A block is never modified in place; these functions write
//! a new file (fsynced) and return what it holds, and the caller commits the index naming
//! it (`docs/storage.md`, "The write path"). On error the partial file is removed.

use std::fs::File;
use std::path::Path;

use crate::error::Result;
use crate::storage::format::block::{BlockWriter, SealedBlock};
use crate::storage::format::block_meta::BlockSummary;
use crate::storage::format::codec::Codec;
use crate::storage::format::log::{LogRecord, OpenLog, read_payload_into};
use crate::storage::sync::fsutil::remove_file_if_exists;

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

/// Writes block file `path` with the records of `block` as it is seen (a view with its
/// edit log applied: removed records left out, labels changed), encoded with `codec`. The
/// view must hold at least one record.
pub fn write_records(
    block: &SealedBlock,
    codec: Codec,
    path: &Path,
    frame_size: usize,
) -> Result<BlockSummary> {
    write_new_block(path, codec, frame_size, |writer| {
        let mut frame = None;
        for (i, rec) in block.records().iter().enumerate() {
            let payload = block.payload_with(i, &mut frame)?;
            writer.push(&rec.meta, payload.as_slice())?;
        }
        Ok(())
    })
}

/// Writes the live records of a log (which must hold at least one) into block file `path`.
pub fn write_log_block(log: &OpenLog, path: &Path, frame_size: usize) -> Result<BlockSummary> {
    write_log_records(
        &*log.file()?,
        log.path(),
        log.records().values(),
        path,
        frame_size,
    )
}

/// Writes `records` (in timestamp order, at least one) of the log file `log` at `log_path`
/// into block file `path`: the seal of a log taken off the write path, which reads a
/// snapshot of its records without the entry lock.
pub fn write_log_records<'r>(
    log: &File,
    log_path: &Path,
    records: impl IntoIterator<Item = &'r LogRecord>,
    path: &Path,
    frame_size: usize,
) -> Result<BlockSummary> {
    write_new_block(path, Codec::None, frame_size, |writer| {
        let mut buf = Vec::new();
        for rec in records {
            writer.push(&rec.meta, read_payload_into(log, rec, log_path, &mut buf)?)?;
        }
        Ok(())
    })
}
