//! The framing both append-only files share — the open and late logs (`log.rs`) and the
//! per-block edit logs (`edits.rs`): an 8-byte magic, then operations
//! `[body_len u32][crc32 u32][body]`. An append is one `pwrite` (in the page cache, so it
//! survives a killed process; when it reaches stable storage is `storage::sync`'s
//! business); a torn tail (a crash or power cut mid-append) fails its length or checksum
//! and is cut off when the file is next opened.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::error::{Error, Result};
use crate::storage::format::binary::BinaryWriter;

/// Length of `[body_len][crc]` before each body.
pub const OP_HEADER: u64 = 8;

/// Starts an operation buffer: room for `[body_len][crc]`, then the op kind.
pub fn start_op(kind: u8) -> BinaryWriter {
    let mut w = BinaryWriter::default();
    w.buf.reserve(64);
    w.buf.extend_from_slice(&[0u8; OP_HEADER as usize]);
    w.u8(kind);
    w
}

/// Fills in the header of `op` (from [`start_op`]) for a body that continues with
/// `payload` (written separately or appended by the caller).
pub fn finish_op(op: &mut BinaryWriter, payload: &[u8]) -> Result<()> {
    let head = &op.buf[OP_HEADER as usize..];
    let body_len = head.len() as u64 + payload.len() as u64;
    let body_len = u32::try_from(body_len).map_err(|_| {
        Error::unprocessable(format!(
            "a change of {} bytes is too large for one write",
            body_len
        ))
    })?;
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(head);
    hasher.update(payload);
    let crc = hasher.finalize();
    op.buf[..4].copy_from_slice(&body_len.to_le_bytes());
    op.buf[4..8].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// Length of the complete, checksum-valid operation at `pos`, if there is one.
pub fn valid_op_at(bytes: &[u8], pos: usize) -> Option<usize> {
    let header = bytes.get(pos..pos + OP_HEADER as usize)?;
    let body_len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    let body_start = pos + OP_HEADER as usize;
    let body = bytes.get(body_start..body_start.checked_add(body_len)?)?;
    (body_len > 0 && crc32fast::hash(body) == crc).then_some(OP_HEADER as usize + body_len)
}

/// Creates an op file holding only `magic`. It must not exist (an existing file is never
/// truncated). With `sync` the file is fsynced; otherwise it is as durable as an append
/// (its owner fsyncs it before the next commit that relies on it).
pub fn create(path: &Path, magic: &[u8; 8], sync: bool) -> Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| Error::io(format!("creating {}", path.display()), e))?;
    let written = file
        .write_all_at(magic, 0)
        .and_then(|_| if sync { file.sync_all() } else { Ok(()) });
    if let Err(e) = written {
        // Ours (create_new): remove it, so a retry can create it again.
        drop(file);
        let _ = std::fs::remove_file(path);
        return Err(Error::io(format!("writing {}", path.display()), e));
    }
    Ok(file)
}

/// Opens an op file and calls `replay(body, body_offset)` for each complete operation in
/// order. Returns the file and the offset appends continue at.
///
/// What a crash or a power cut leaves behind is a bad **tail**: a torn last operation, or
/// zeros where the file's new size reached the disk but its data did not. It is cut off
/// (the cut fsynced) and logged as a WARN naming the file, the offset and the bytes.
/// Damage **inside** the file — bad bytes followed by valid operations — is not cut: the
/// damaged bytes stay where they are, are skipped at every open (an ERROR naming them),
/// and every valid operation after them is replayed. A file shorter than its magic that
/// starts like it is a creation that was interrupted: it is completed and replays as empty.
pub fn open(
    path: &Path,
    magic: &[u8; 8],
    mut replay: impl FnMut(&[u8], u64) -> Result<()>,
) -> Result<(File, u64)> {
    let io = |e| Error::io(format!("reading {}", path.display()), e);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(io)?;
    let bytes = std::fs::read(path).map_err(io)?;
    if bytes.len() < magic.len() && magic.starts_with(&bytes) {
        file.write_all_at(magic, 0)
            .and_then(|_| file.sync_all())
            .map_err(io)?;
        return Ok((file, magic.len() as u64));
    }
    if bytes.len() >= magic.len() && bytes[..magic.len()].iter().all(|&b| b == 0) {
        // Created, and its size reached the disk before its first bytes did.
        log::warn!(
            "{}: its header is zeros (a creation cut short by a power loss); restoring it",
            path.display()
        );
        file.write_all_at(magic, 0)
            .and_then(|_| file.sync_all())
            .map_err(io)?;
    } else if bytes.len() < magic.len() || &bytes[..magic.len()] != magic {
        return Err(Error::internal(format!(
            "{} has a bad header",
            path.display()
        )));
    }
    let mut pos = magic.len();
    loop {
        while let Some(op_len) = valid_op_at(&bytes, pos) {
            let body = &bytes[pos + OP_HEADER as usize..pos + op_len];
            replay(body, (pos as u64) + OP_HEADER)?;
            pos += op_len;
        }
        if pos == bytes.len() {
            return Ok((file, pos as u64));
        }
        match next_valid_op(&bytes, pos) {
            Some(next) => {
                log::error!(
                    "{}: {} damaged bytes at offset {pos} are skipped; the valid operations after them (from offset {next}) are kept",
                    path.display(),
                    next - pos
                );
                pos = next;
            }
            None => {
                let tail = &bytes[pos..];
                let zeros = if tail.iter().all(|&b| b == 0) {
                    " (all zeros: the file's size reached the disk, its data did not)"
                } else {
                    ""
                };
                log::warn!(
                    "{}: cutting off {} bytes at offset {pos}, an interrupted write{zeros}",
                    path.display(),
                    tail.len()
                );
                file.set_len(pos as u64)
                    .and_then(|_| file.sync_all())
                    .map_err(io)?;
                return Ok((file, pos as u64));
            }
        }
    }
}

/// The first offset after `damaged` where a valid operation starts, if any. Operation kinds
/// are small numbers (1 to 3), which rules out most offsets before any checksum is taken.
fn next_valid_op(bytes: &[u8], damaged: usize) -> Option<usize> {
    let header = OP_HEADER as usize;
    (damaged + 1..bytes.len().saturating_sub(header)).find(|&at| {
        matches!(bytes.get(at + header), Some(1..=3)) && valid_op_at(bytes, at).is_some()
    })
}

/// Appends `op` (finished with [`finish_op`]) at `start`, followed by `payload` if it is not
/// empty; on failure the file is cut back so no half-op stays behind.
pub fn append_at(file: &File, path: &Path, start: u64, op: &[u8], payload: &[u8]) -> Result<()> {
    let written = file.write_all_at(op, start).and_then(|_| {
        if payload.is_empty() {
            Ok(())
        } else {
            file.write_all_at(payload, start + op.len() as u64)
        }
    });
    written.map_err(|e| {
        let _ = file.set_len(start);
        Error::io(format!("appending to {}", path.display()), e)
    })
}
