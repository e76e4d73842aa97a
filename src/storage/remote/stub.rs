//! The stub of a tiered block, `<seq>.tier`: what stays on the local disk once the
//! block's file is on a remote — the file's size and object location, then the file's
//! bytes from its metadata on (frame table, record table, footer), so queries evaluate
//! timestamps, labels and `when` without the network and know which byte range of the
//! object holds each frame.
//!
//! ```text
//! "HLTIER01" | header length u32 | header (JSON: location, size) | metadata … footer
//! ```
//!
//! Written and fsynced after the upload, and its directory synced before the index commit
//! that names it (once for a batch of stubs), so that commit relies on durable bytes; the
//! metadata's own checksum, which the index holds, proves the copy whole when the block
//! is opened.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::storage::format::index::RemoteLocation;
use crate::storage::sync::fsutil::write_new_file;

const STUB_MAGIC: &[u8; 8] = b"HLTIER01";

/// What a stub's header says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StubHeader {
    /// Where the block's file is.
    pub location: RemoteLocation,
    /// The block file's size.
    pub size: u64,
}

/// Writes the stub of a block file `block` (its bytes) at `path`, synced; its name is
/// durable once the caller syncs the directory.
pub fn write_stub(path: &Path, header: &StubHeader, block: &[u8]) -> Result<()> {
    let json = serde_json::to_vec(header)
        .map_err(|e| Error::internal(format!("encoding the stub {}: {e}", path.display())))?;
    let tail = &block[header.location.meta_offset as usize..];
    let mut bytes = Vec::with_capacity(12 + json.len() + tail.len());
    bytes.extend_from_slice(STUB_MAGIC);
    bytes.extend_from_slice(&(json.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&json);
    bytes.extend_from_slice(tail);
    write_new_file(path, &bytes)
}

/// The header of a stub's bytes `bytes` (read from, or to be written at, `path`), and
/// where the metadata after it starts.
pub fn parse_header(bytes: &[u8], path: &Path) -> Result<(StubHeader, usize)> {
    let corrupt = |why: &str| Error::internal(format!("{} is corrupt: {why}", path.display()));
    if bytes.len() < 12 || &bytes[..8] != STUB_MAGIC {
        return Err(corrupt("not a tier stub"));
    }
    let len = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize;
    let json = bytes
        .get(12..12 + len)
        .ok_or_else(|| corrupt("header cut short"))?;
    let header: StubHeader =
        serde_json::from_slice(json).map_err(|e| corrupt(&format!("header: {e}")))?;
    Ok((header, 12 + len))
}

/// The header of the stub at `path` alone (which object it describes), without reading
/// the metadata after it.
pub fn read_header(path: &Path) -> Result<StubHeader> {
    use std::io::Read;
    let io = |e| Error::io(format!("reading {}", path.display()), e);
    let corrupt = |why: &str| Error::internal(format!("{} is corrupt: {why}", path.display()));
    let mut file = std::fs::File::open(path).map_err(io)?;
    let mut start = [0u8; 12];
    file.read_exact(&mut start).map_err(io)?;
    if &start[..8] != STUB_MAGIC {
        return Err(corrupt("not a tier stub"));
    }
    let len = u32::from_le_bytes([start[8], start[9], start[10], start[11]]) as usize;
    // A header is a location and a size: a few hundred bytes.
    if len > 64 << 10 {
        return Err(corrupt("header too long"));
    }
    let mut json = vec![0u8; len];
    file.read_exact(&mut json).map_err(io)?;
    serde_json::from_slice(&json).map_err(|e| corrupt(&format!("header: {e}")))
}

/// Reads the stub at `path`: its header and the block's bytes from its metadata on.
pub fn read_stub(path: &Path) -> Result<(StubHeader, Vec<u8>)> {
    let bytes =
        std::fs::read(path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    let (header, end) = parse_header(&bytes, path)?;
    let corrupt = |why: &str| Error::internal(format!("{} is corrupt: {why}", path.display()));
    let tail = bytes[end..].to_vec();
    if header.location.meta_offset.checked_add(tail.len() as u64) != Some(header.size) {
        return Err(corrupt("its metadata does not end where the block does"));
    }
    Ok((header, tail))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stub_keeps_the_tail_and_the_location() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.tier");
        let header = StubHeader {
            location: RemoteLocation {
                remote: "cold".into(),
                key: "p/b/e/1".into(),
                etag: "abc".into(),
                meta_offset: 6,
            },
            size: 10,
        };
        write_stub(&path, &header, b"0123456789").unwrap();
        let (read, tail) = read_stub(&path).unwrap();
        assert_eq!((read, tail.as_slice()), (header, &b"6789"[..]));
        std::fs::write(&path, b"HLTIER01\xff\xff\xff\xff").unwrap();
        assert!(
            read_stub(&path)
                .unwrap_err()
                .message()
                .contains("cut short")
        );
    }
}
