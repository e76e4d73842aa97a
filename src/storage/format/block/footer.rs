//! A block file's framing: its first bytes, and its footer — where its metadata lies,
//! checked against the file's length and the metadata's checksum.

use crate::error::{Error, Result};
use crate::storage::format::binary::{BinaryReader, BinaryWriter};
use crate::storage::format::log::LOG_MAGIC;

/// The first bytes of every block file written as a block (a log sealed in place keeps
/// the log's, [`LOG_MAGIC`]).
pub(crate) const BLOCK_MAGIC: &[u8; 8] = b"HLBLK001";
/// The last bytes of every block file.
pub(super) const FOOTER_MAGIC: &[u8; 8] = b"HLBLKEND";
/// The footer's length.
pub(super) const FOOTER_LEN: usize = 32;

/// Where a block file's metadata (frame table and record table) lies, as its footer says,
/// checked against the file's length.
pub(crate) struct Footer {
    pub(super) meta_offset: usize,
    pub(super) meta_len: usize,
    pub(super) meta_crc: u32,
    pub(super) encoding: u32,
}

impl Footer {
    /// The footer of a file of `file_len` bytes whose first bytes are `head` and whose
    /// last [`FOOTER_LEN`] are `footer`.
    pub(super) fn parse(head: &[u8], footer: &[u8], file_len: usize, what: &str) -> Result<Footer> {
        let corrupt = |why: &str| Error::internal(format!("{what} is corrupt: {why}"));
        let known = head.starts_with(BLOCK_MAGIC) || head.starts_with(LOG_MAGIC);
        if file_len < BLOCK_MAGIC.len() + FOOTER_LEN || !known {
            return Err(corrupt("bad header or too short"));
        }
        if footer.len() != FOOTER_LEN || &footer[24..] != FOOTER_MAGIC {
            return Err(corrupt("bad footer"));
        }
        let mut fr = BinaryReader::new(footer, what);
        let meta_offset = fr.u64()? as usize;
        let meta_len = fr.u64()? as usize;
        let meta_crc = fr.u32()?;
        let encoding = fr.u32()?;
        if meta_offset.checked_add(meta_len) != Some(file_len - FOOTER_LEN) {
            return Err(corrupt("metadata offsets do not match the file size"));
        }
        Ok(Footer {
            meta_offset,
            meta_len,
            meta_crc,
            encoding,
        })
    }

    /// The footer's bytes for metadata of `meta_len` bytes at `meta_offset` with checksum
    /// `meta_crc` and `encoding`: what a block file ends with.
    pub(super) fn encode(meta_offset: u64, meta_len: u64, meta_crc: u32, encoding: u32) -> Vec<u8> {
        let mut footer = BinaryWriter::default();
        footer.u64(meta_offset);
        footer.u64(meta_len);
        footer.u32(meta_crc);
        footer.u32(encoding);
        footer.buf.extend_from_slice(FOOTER_MAGIC);
        footer.buf
    }

    /// The footer of a mapped block file.
    pub(super) fn of_mapped(map: &[u8], what: &str) -> Result<Footer> {
        let head = &map[..map.len().min(BLOCK_MAGIC.len())];
        let footer = &map[map.len().saturating_sub(FOOTER_LEN)..];
        Self::parse(head, footer, map.len(), what)
    }

    /// Checks the metadata bytes against the footer's checksum, and against the
    /// checksum the index committed (`expected`), which proves the file is that one.
    pub(super) fn check(&self, meta: &[u8], expected: Option<u32>, what: &str) -> Result<()> {
        let corrupt = |why: &str| Error::internal(format!("{what} is corrupt: {why}"));
        if crc32fast::hash(meta) != self.meta_crc {
            return Err(corrupt("record table checksum mismatch"));
        }
        if expected.is_some_and(|e| e != self.meta_crc) {
            return Err(corrupt("the file is not the one the index committed"));
        }
        Ok(())
    }
}

/// Where the metadata of the block file `bytes` starts, checked against its footer and
/// against the checksum the index committed (`expected_meta_crc`).
pub(crate) fn meta_offset(bytes: &[u8], what: &str, expected_meta_crc: u32) -> Result<u64> {
    let footer = Footer::of_mapped(bytes, what)?;
    let meta = &bytes[footer.meta_offset..footer.meta_offset + footer.meta_len];
    footer.check(meta, Some(expected_meta_crc), what)?;
    Ok(footer.meta_offset as u64)
}
