//! A block file opened to read one record by positioned reads, without mapping it: what a
//! read takes from a block whose lookup is not cached while the lookups' budget is full
//! (`storage::cache`).
//!
//! Why not map it: a mapping made for one record is unmapped right after the response,
//! and unmapping pages other threads may have cached in their TLBs costs an interrupt to
//! every core. Reading the footer, the metadata and the record's bytes costs three
//! `pread`s. Only a frame that has not passed its checksum yet, a compressed frame or a
//! large record is mapped, and then read through [`BlockFrames`] as a mapped block is.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use memmap2::Mmap;

use super::BLOCK_MAGIC;
use super::footer::{FOOTER_LEN, Footer};
use crate::error::{Error, Result};
use crate::storage::format::block_meta::{self as meta, FrameInfo};
use crate::storage::format::codec::Codec;
use crate::storage::format::frames::{BlockFrames, DecodedFrame, FileIdentity, FrameChecks};
use crate::storage::format::table_row::{TableRow, find_row};
use crate::storage::record::Payload;

/// Records up to this size are read into memory; larger ones are served from a mapping,
/// which costs no copy and no heap.
const MAX_READ: u64 = 1 << 20;

/// A block file open for reading records by position (see the module documentation).
pub struct RowBlock {
    what: String,
    file: File,
    /// The file's length when opened; a mapping of another length is refused.
    len: usize,
    frames: Vec<FrameInfo>,
    checks: Arc<FrameChecks>,
}

impl RowBlock {
    /// Opens `path` and finds the row with timestamp `ts` in its table, checked like a
    /// mapped block's (`SealedBlock::open_row`): `None` for a table older than format 3,
    /// `Some((block, None))` when the block holds no record at `ts`. `known`: the frame
    /// checks of an earlier opening of the file, trusted only if it is unchanged.
    pub(crate) fn open(
        path: &Path,
        what: String,
        expected_meta_crc: Option<u32>,
        known: Option<Arc<FrameChecks>>,
        ts: u64,
    ) -> Result<Option<(RowBlock, Option<TableRow>)>> {
        let file = File::open(path).map_err(|e| Error::io(format!("opening {what}"), e))?;
        let stat = file
            .metadata()
            .map_err(|e| Error::io(format!("reading the size of {what}"), e))?;
        let len = usize::try_from(stat.len())
            .map_err(|_| Error::internal(format!("{what} is too large to read")))?;
        let read = |offset: usize, n: usize| -> Result<Vec<u8>> {
            let mut buf = vec![0; n];
            file.read_exact_at(&mut buf, offset as u64)
                .map_err(|e| Error::io(format!("reading {what}"), e))?;
            Ok(buf)
        };
        let head = read(0, BLOCK_MAGIC.len().min(len))?;
        let tail = read(len.saturating_sub(FOOTER_LEN), FOOTER_LEN.min(len))?;
        let footer = Footer::parse(&head, &tail, len, &what)?;
        let stored = read(footer.meta_offset, footer.meta_len)?;
        footer.check(&stored, expected_meta_crc, &what)?;
        if footer.encoding & !0xff != meta::TABLE_V3 {
            return Ok(None);
        }
        let table = meta::unpack(&stored, footer.encoding, &what)?;
        let (_, frames, records_start) =
            meta::decode_frames(&table, &what, footer.meta_offset as u64)?;
        let raw_lens: Vec<u64> = frames.iter().map(|f| f.raw_len).collect();
        let row = find_row(&table[records_start..], &raw_lens, &what, ts)?;
        let checks = FrameChecks::for_file(known, FileIdentity::of(&stat), frames.len());
        Ok(Some((
            RowBlock {
                what,
                file,
                len,
                frames,
                checks,
            },
            row,
        )))
    }

    /// The block's frames.
    pub fn frames(&self) -> &[FrameInfo] {
        &self.frames
    }

    /// Which of the block's frames passed their checksum.
    pub fn checks(&self) -> &Arc<FrameChecks> {
        &self.checks
    }

    /// The payload of the record of `size` bytes at `offset` in frame `frame` (a row of
    /// this block, so inside the frame): read from the file when the frame is stored as
    /// is and has passed its checksum, else from a mapping, checked and decoded as a
    /// mapped block's (`decoded` as for [`BlockFrames::payload`]).
    pub fn payload(
        &self,
        frame: u32,
        offset: u64,
        size: u64,
        decoded: &mut DecodedFrame,
    ) -> Result<Payload> {
        let info = &self.frames[frame as usize];
        if info.codec == Codec::None && self.checks.passed(frame as usize) && size <= MAX_READ {
            let mut bytes = vec![0; size as usize];
            self.file
                .read_exact_at(&mut bytes, info.offset + offset)
                .map_err(|e| Error::io(format!("reading {}", self.what), e))?;
            return Ok(Payload::from_vec(bytes));
        }
        // SAFETY: as for every block mapping (`SealedBlock::open_inner`): block files are
        // never modified in place.
        let map = unsafe { Mmap::map(&self.file) }
            .map_err(|e| Error::io(format!("mapping {}", self.what), e))?;
        if map.len() != self.len {
            return Err(Error::internal(format!(
                "{} is corrupt: its size changed while it was read",
                self.what
            )));
        }
        BlockFrames::new(
            self.what.clone(),
            Arc::new(map),
            self.frames.clone(),
            self.checks.clone(),
            None,
        )
        .payload(frame, offset, size, decoded)
    }
}
