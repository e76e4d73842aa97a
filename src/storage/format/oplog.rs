//! The framing both append-only files share — the open and late logs (`log.rs`) and the
//! per-block edit logs (`edits.rs`): an 8-byte magic, then operations
//! `[body_len u32][crc32 u32][body]`. An append is one `pwrite` (in the page cache, so it
//! survives a killed process; when it reaches stable storage is `storage::sync`'s
//! business); a torn tail (a crash or power cut mid-append) fails its length or checksum
//! and is cut off when the file is next opened.

use std::fs::{File, OpenOptions};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::storage::format::binary::BinaryWriter;
use crate::storage::sync::fsutil::{DAMAGED_MARK, write_new_file};
use crate::storage::sync::{FileSync, LazyFile};

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
    crate::storage::fence::check()?;
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
        // Ours (create_new): remove it, so a retry can create it again (unless the lease
        // was lost meanwhile: the name may be the new holder's by now).
        drop(file);
        let _ = crate::storage::sync::fsutil::remove_file_if_exists(path);
        return Err(Error::io(format!("writing {}", path.display()), e));
    }
    Ok(file)
}

/// How an op file starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// The magic: the file is what it claims to be.
    Valid,
    /// Shorter than the magic, a prefix of it (then zeros, if anything): a creation that
    /// was interrupted.
    Interrupted,
    /// Zeros where the magic belongs, or a prefix of it then zeros: the file's size
    /// reached the disk before all of its data (its header's write torn by a power loss).
    Zeros,
    /// Something else: damaged bytes (or a creation whose first bytes were torn by a power
    /// loss while the file's name was already durable). The operations after it are
    /// still replayed.
    Bad,
}

/// What a scan of an op file finds, before anything is changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scan {
    /// How the file starts.
    pub header: Header,
    /// Every complete, checksum-valid operation (from its header to its end), in order.
    pub ops: Vec<Range<usize>>,
    /// Damage inside the file: bad bytes with valid operations after them.
    pub damaged: Vec<Range<usize>>,
    /// A torn or zero-filled tail (nothing valid after it), cut off at open.
    pub tail: Option<Range<usize>>,
}

impl Scan {
    /// Where appends continue once the tail is cut.
    pub fn end(&self, len: usize) -> usize {
        self.tail.as_ref().map_or(len, |t| t.start)
    }
}

/// Scans the bytes of an op file: which operations are valid, where damage sits inside it,
/// and what tail a crash left. Pure: `open` and `halflife check` act on the same answer.
pub fn scan(bytes: &[u8], magic: &[u8; 8]) -> Scan {
    let head = &bytes[..bytes.len().min(magic.len())];
    let matched = head.iter().zip(magic).take_while(|(a, b)| a == b).count();
    // A prefix of the magic (maybe empty), then zeros: the header's write did not all
    // reach the disk (a creation cut short, or torn by a power loss before its sync).
    let cut_short = head[matched..].iter().all(|&b| b == 0);
    let header = if head == magic {
        Header::Valid
    } else if cut_short && bytes.len() < magic.len() {
        Header::Interrupted
    } else if cut_short {
        Header::Zeros
    } else {
        Header::Bad
    };
    let mut found = Scan {
        header,
        ops: Vec::new(),
        damaged: Vec::new(),
        tail: None,
    };
    if header == Header::Interrupted {
        return found;
    }
    let mut pos = magic.len();
    loop {
        while let Some(op_len) = valid_op_at(bytes, pos) {
            found.ops.push(pos..pos + op_len);
            pos += op_len;
        }
        if pos == bytes.len() {
            return found;
        }
        match next_valid_op(bytes, pos) {
            Some(next) => {
                found.damaged.push(pos..next);
                pos = next;
            }
            None => {
                found.tail = Some(pos..bytes.len());
                return found;
            }
        }
    }
}

/// Path of the copy of damaged bytes at `offset` of `path`: `<file>.damaged-<offset>`.
pub fn damaged_copy_path(path: &Path, offset: usize) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!("{DAMAGED_MARK}-{offset}"));
    PathBuf::from(name)
}

/// Opens an op file and calls `replay(body, body_offset)` for each complete operation in
/// order. Returns the file and the offset appends continue at.
///
/// What a crash or a power cut leaves behind is a bad **tail**: a torn last operation, or
/// zeros where the file's new size reached the disk but its data did not. It is cut off
/// (the cut fsynced) and logged as a WARN naming the file, the offset and the bytes.
/// Damage **inside** the file — bad bytes followed by valid operations — is not cut: the
/// damaged bytes stay where they are, are skipped at every open (an ERROR naming file,
/// offset and length), a copy of them is set aside once as `<file>.damaged-<offset>`, and
/// every valid operation after them is replayed. A file shorter than its magic that starts
/// like it is a creation that was interrupted: it is completed and replays as empty.
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
    let found = scan(&bytes, magic);
    match found.header {
        Header::Bad => {
            // One damaged header must not cost the whole file (nor its entry): the
            // header is restored and what follows is read as usual.
            log::error!(
                "{}: its header is damaged; restoring it and keeping the operations after it",
                path.display()
            );
            set_aside(path, 0, &bytes[..bytes.len().min(magic.len())]);
            file.write_all_at(magic, 0)
                .and_then(|_| file.sync_all())
                .map_err(io)?;
        }
        Header::Interrupted => {
            file.write_all_at(magic, 0)
                .and_then(|_| file.sync_all())
                .map_err(io)?;
            return Ok((file, magic.len() as u64));
        }
        Header::Zeros => {
            log::warn!(
                "{}: its header is zeros (a creation cut short by a power loss); restoring it",
                path.display()
            );
            file.write_all_at(magic, 0)
                .and_then(|_| file.sync_all())
                .map_err(io)?;
        }
        Header::Valid => {}
    }
    for damage in &found.damaged {
        log::error!(
            "{}: {} damaged bytes at offset {} are skipped; the valid operations after them (from offset {}) are kept",
            path.display(),
            damage.len(),
            damage.start,
            damage.end
        );
        set_aside(path, damage.start, &bytes[damage.clone()]);
    }
    for op in &found.ops {
        replay(
            &bytes[op.start + OP_HEADER as usize..op.end],
            (op.start as u64) + OP_HEADER,
        )?;
    }
    if let Some(tail) = &found.tail {
        let zeros = if bytes[tail.clone()].iter().all(|&b| b == 0) {
            " (all zeros: the file's size reached the disk, its data did not)"
        } else {
            ""
        };
        log::warn!(
            "{}: cutting off {} bytes at offset {}, an interrupted write{zeros}",
            path.display(),
            tail.len(),
            tail.start
        );
        crate::storage::fence::check()?;
        file.set_len(tail.start as u64)
            .and_then(|_| file.sync_all())
            .map_err(io)?;
    }
    Ok((file, found.end(bytes.len()) as u64))
}

/// [`open`] for a reader that must not write (a replica on a directory another process
/// writes, `docs/high-availability.md`): the file is opened read-only and nothing is
/// restored, cut or set aside. What follows the last complete operation is an append
/// still in flight, not damage; damage inside is skipped as `open` skips it, and left for
/// the writer to report. Returns the file and the offset the replayed operations end at.
pub fn open_read_only(
    path: &Path,
    magic: &[u8; 8],
    mut replay: impl FnMut(&[u8], u64) -> Result<()>,
) -> Result<(File, u64)> {
    let io = |e| Error::io(format!("reading {}", path.display()), e);
    let file = File::open(path).map_err(io)?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut &file, &mut bytes).map_err(io)?;
    let found = scan(&bytes, magic);
    if found.header == Header::Interrupted {
        return Ok((file, 0));
    }
    for op in &found.ops {
        replay(
            &bytes[op.start + OP_HEADER as usize..op.end],
            (op.start as u64) + OP_HEADER,
        )?;
    }
    Ok((file, found.end(bytes.len()) as u64))
}

/// [`open`], or with `read_only` [`open_read_only`], with the file taken over as a
/// [`LazyFile`] and its group-commit state: what the open and late logs and the edit logs
/// all start from. A writer's file may hold what a killed process left in the page cache,
/// not on disk yet (its next sync covers it); a replica has nothing of its own to sync.
pub fn open_replayed(
    path: &Path,
    magic: &[u8; 8],
    read_only: bool,
    replay: impl FnMut(&[u8], u64) -> Result<()>,
) -> Result<(Arc<LazyFile>, Arc<FileSync>, u64)> {
    let (file, len) = if read_only {
        open_read_only(path, magic, replay)?
    } else {
        open(path, magic, replay)?
    };
    let file = if read_only {
        LazyFile::new_read_only(path, file)
    } else {
        LazyFile::new(path, file)
    };
    let sync = FileSync::new(file.clone(), path, len, read_only);
    Ok((file, sync, len))
}

/// Keeps a copy of damaged bytes beside their file, once, for whoever inspects them; a
/// failure to write it is logged and changes nothing else.
fn set_aside(path: &Path, offset: usize, damaged: &[u8]) {
    let copy = damaged_copy_path(path, offset);
    if copy.exists() {
        return;
    }
    match write_new_file(&copy, damaged) {
        Ok(()) => log::error!(
            "{}: the damaged bytes are copied to {}",
            path.display(),
            copy.display()
        ),
        Err(e) => log::error!(
            "{}: could not keep a copy of the damaged bytes: {e}",
            path.display()
        ),
    }
}

/// The first offset after `damaged` where a valid operation starts, if any. Operation kinds
/// are small numbers (1 to 4), which rules out most offsets before any checksum is taken.
fn next_valid_op(bytes: &[u8], damaged: usize) -> Option<usize> {
    let header = OP_HEADER as usize;
    (damaged + 1..bytes.len().saturating_sub(header)).find(|&at| {
        matches!(bytes.get(at + header), Some(1..=4)) && valid_op_at(bytes, at).is_some()
    })
}

/// The error of an op file that could not be opened again (its descriptor had been closed
/// to bound open files): gone means its entry was removed meanwhile, a 404 for a client
/// whose write raced the removal; anything else is an I/O error.
pub fn reopen_error(path: &Path, e: std::io::Error) -> Error {
    if e.kind() == std::io::ErrorKind::NotFound {
        Error::not_found(format!(
            "{} was removed while in use (its entry was removed)",
            path.display()
        ))
    } else {
        Error::io(format!("opening {}", path.display()), e)
    }
}

/// Finishes `op` (no payload) and appends it at `*len` to the op file at `path` behind
/// `file` (opened again if its descriptor was closed), then moves `*len` past it and tells
/// `sync`, whose next sync covers it.
pub fn append_op(
    file: &Arc<LazyFile>,
    path: &Path,
    len: &mut u64,
    sync: &FileSync,
    mut op: BinaryWriter,
) -> Result<()> {
    finish_op(&mut op, &[])?;
    let handle = file.get().map_err(|e| reopen_error(path, e))?;
    append_at(&handle, path, *len, &op.buf, &[])?;
    *len += op.buf.len() as u64;
    sync.appended(*len);
    Ok(())
}

/// Appends `op` (finished with [`finish_op`]) at `start`, followed by `payload` if it is not
/// empty; on failure the file is cut back so no half-op stays behind.
pub fn append_at(file: &File, path: &Path, start: u64, op: &[u8], payload: &[u8]) -> Result<()> {
    // A fenced process writes nothing more in a directory another instance now holds.
    crate::storage::fence::check()?;
    let failed = |e| {
        cut_back(file, start);
        Error::io(format!("appending to {}", path.display()), e)
    };
    file.write_all_at(op, start).map_err(failed)?;
    if !payload.is_empty() {
        // Asked again before the second write: a pause that falls between the two (the
        // first takes milliseconds on a network file system) must not put this payload
        // over what a new holder appended since. The header alone is a torn tail, which
        // the next open cuts off.
        crate::storage::fence::check()?;
        file.write_all_at(payload, start + op.len() as u64)
            .map_err(failed)?;
    }
    Ok(())
}

/// Cuts `file` back to `len` after an append that failed or was not acknowledged — only
/// while this process may still write there: after a take-over, the bytes past `len` may
/// be the new holder's.
pub fn cut_back(file: &File, len: u64) {
    if crate::storage::fence::check().is_ok() {
        let _ = file.set_len(len);
    }
}

#[cfg(test)]
mod fence_tests {
    use super::*;
    use crate::storage::fence::thread_fence;

    #[test]
    fn an_append_whose_lease_is_lost_between_its_writes_leaves_what_follows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.log");
        // What a new holder appended from offset 100 on, after it took over.
        let theirs: Vec<u8> = (0..200u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &theirs).unwrap();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let mut op = start_op(1);
        finish_op(&mut op, b"an old holder's record").unwrap();
        // The header's write passed the fence; the payload's must ask again.
        thread_fence::set(Some(1));
        let e = append_at(&file, &path, 100, &op.buf, b"an old holder's record").unwrap_err();
        thread_fence::set(None);
        assert_eq!(e.kind(), crate::error::ErrorKind::Unavailable, "{e}");
        let after = std::fs::read(&path).unwrap();
        assert_eq!(after.len(), theirs.len(), "nothing was cut off");
        assert_eq!(&after[100 + op.buf.len()..], &theirs[100 + op.buf.len()..]);
        // A failed append is cut back only while the lease holds.
        thread_fence::set(Some(0));
        cut_back(&file, 100);
        thread_fence::set(None);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 200);
        cut_back(&file, 100);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 100);
    }
}
