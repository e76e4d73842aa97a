//! An entry as a replica sees it (`EntryContext::read_only`,
//! `docs/high-availability.md`): loaded from what its writer — another process on the
//! same directory — has committed, without writing anything, and loaded again when its
//! files say the writer changed it.
//!
//! The writer never changes a committed file in place: blocks and indexes are written
//! whole under new names and committed by an atomic replace of the index; logs and edit
//! logs only grow. So a load reads a consistent state — the index as committed, each log
//! up to its last complete operation — unless a file the index names vanishes before it
//! is read (the writer committed again and removed it). Then the load starts over from the
//! new index, and so does a read that meets a vanished file (`read.rs`): a replica answers
//! from an older commit or a newer one, never from a mix, and never a 500 for the race.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use super::edits::load_edits;
use super::{Entry, EntryContext, EntryState};
use crate::error::{Error, Result};
use crate::storage::format::index::{
    EntryIndex, INDEX_FILE, IndexLoad, block_path, log_path, max_overlap,
};
use crate::storage::format::log::OpenLog;

/// Loads tried before giving up, each after the writer committed during the previous one.
const LOAD_ATTEMPTS: usize = 5;

/// What a replica last loaded an entry from: enough of its files' identity to tell that
/// the writer changed them without reading them again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DiskVersion {
    /// The entry directory's device and inode: another one means the entry was removed
    /// and created again under its name.
    dir: Option<(u64, u64)>,
    /// The index's length and CRC trailer.
    index: (usize, u32),
    /// Each log and edit log loaded, with its size and modification time when read.
    appended: Vec<(PathBuf, Option<FileIdentity>)>,
}

/// What a look at an entry's files found against what was loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Look {
    /// Nothing changed.
    Same,
    /// A log or edit log grew (new records, relabels, removals).
    Appended,
    /// The writer committed a new index (a seal, merge, compress, tier, removal).
    Committed,
    /// The directory is gone or is another one: the entry was removed (and maybe
    /// created again); the bucket opens it anew.
    Recreated,
}

fn dir_identity(dir: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(dir).ok().map(|m| (m.dev(), m.ino()))
}

/// A file's size and modification time (seconds, nanoseconds).
type FileIdentity = (u64, i64, i64);

fn file_identity(path: &Path) -> Option<FileIdentity> {
    std::fs::metadata(path)
        .ok()
        .map(|m| (m.len(), m.mtime(), m.mtime_nsec()))
}

/// The index's bytes, `None` when it is not there.
fn read_index(dir: &Path) -> Result<Option<Vec<u8>>> {
    let path = dir.join(INDEX_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(format!("reading {}", path.display()), e)),
    }
}

/// The index's length and its CRC trailer (the checksum of every byte before it; a
/// checksum over the whole file, trailer included, is the same constant for every
/// valid index).
fn index_identity(bytes: &[u8]) -> (usize, u32) {
    let trailer = bytes.len().checked_sub(4).map_or(0, |at| {
        u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
    });
    (bytes.len(), trailer)
}

/// [`index_identity`] of the index on disk, read from its length and last four bytes
/// only (one descriptor: an index replaced meanwhile is another file), `None` when it is
/// not there.
fn index_identity_on_disk(dir: &Path) -> Result<Option<(usize, u32)>> {
    use std::os::unix::fs::FileExt;
    let path = dir.join(INDEX_FILE);
    let io = |e| Error::io(format!("reading {}", path.display()), e);
    let file = match std::fs::File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(e)),
    };
    let len = file.metadata().map_err(io)?.len();
    let len = usize::try_from(len).unwrap_or(usize::MAX);
    let mut tail = [0u8; 4];
    if len >= 4 {
        file.read_exact_at(&mut tail, (len - 4) as u64)
            .map_err(io)?;
    }
    Ok(Some((
        len,
        if len >= 4 {
            u32::from_le_bytes(tail)
        } else {
            0
        },
    )))
}

impl DiskVersion {
    /// How the entry's files at `dir` compare with this version.
    pub(crate) fn look(&self, dir: &Path) -> Look {
        if dir_identity(dir) != self.dir || self.dir.is_none() {
            return Look::Recreated;
        }
        match index_identity_on_disk(dir) {
            Ok(Some(identity)) if identity == self.index => {}
            Ok(None) => return Look::Recreated,
            _ => return Look::Committed,
        }
        if self
            .appended
            .iter()
            .any(|(path, seen)| file_identity(path) != *seen)
        {
            return Look::Appended;
        }
        Look::Same
    }
}

/// Loads a replica's entry state, starting over from the new index while the writer
/// commits under the load. An entry whose index is not there yet (the writer is creating
/// it) is a NotFound error.
pub(super) fn load(bucket: &str, name: &str, dir: &Path, ctx: &EntryContext) -> Result<EntryState> {
    let mut attempt = 1;
    loop {
        let before = index_identity_on_disk(dir)?;
        match load_once(bucket, name, dir, ctx) {
            Ok(state) => return Ok(state),
            Err(e) => {
                let after = index_identity_on_disk(dir)?;
                if attempt >= LOAD_ATTEMPTS || after == before {
                    return Err(e);
                }
                log::debug!(
                    "entry {bucket}/{name}: the writer committed while it was read ({e}); reading it again"
                );
                attempt += 1;
            }
        }
    }
}

fn load_once(bucket: &str, name: &str, dir: &Path, ctx: &EntryContext) -> Result<EntryState> {
    let dir_id = dir_identity(dir);
    let path = dir.join(INDEX_FILE);
    let Some(bytes) = read_index(dir)? else {
        return Err(Error::not_found(format!(
            "entry {bucket}/{name} has no index yet"
        )));
    };
    let mut index = match EntryIndex::from_bytes(&bytes, &path)? {
        IndexLoad::Loaded(index) => index,
        IndexLoad::Missing => unreachable_missing(bucket, name)?,
        IndexLoad::Damaged(e) => {
            return Err(Error::internal(format!(
                "entry {bucket}/{name}: its index does not load ({e}); its writer rebuilds it at its next open"
            )));
        }
    };
    let mut appended = Vec::new();
    let mut replay = |seq: Option<u64>| -> Result<Option<OpenLog>> {
        let Some(seq) = seq else {
            return Ok(None);
        };
        // Identity before the bytes: what is appended meanwhile is read again next time.
        let path = log_path(dir, seq);
        let identity = file_identity(&path);
        let opened = OpenLog::open_read_only(&path);
        let renamed = block_path(dir, seq);
        let (path, identity, opened) = match opened {
            // The writer is between renaming the sealed log to its block's name and
            // committing: the same bytes, still a log, under the block's name.
            Err(e) if index.sealing_logs.contains(&seq) && renamed.exists() => {
                log::debug!("{e}; reading the log under its block's name");
                let identity = file_identity(&renamed);
                let opened = OpenLog::open_read_only(&renamed);
                (renamed, identity, opened)
            }
            other => (path, identity, other),
        };
        appended.push((path, identity));
        opened.map(Some)
    };
    let open = replay(index.open_log)?;
    let late = replay(index.late_log)?;
    let mut sealing = Vec::new();
    for &seq in &index.sealing_logs {
        if let Some(log) = replay(Some(seq))? {
            sealing.push((seq, log));
        }
    }
    for b in &index.blocks {
        let path = super::edits_path(dir, b.seq);
        let identity = file_identity(&path);
        if b.edited || identity.is_some() {
            appended.push((path, identity));
        }
    }
    let (edits, _) = load_edits(bucket, name, dir, &mut index, ctx.accept_lost_edits, true)?;
    let mut state = EntryState::new(index, open, late, edits);
    state.sealing = sealing;
    state.seen = Some(DiskVersion {
        dir: dir_id,
        index: index_identity(&bytes),
        appended,
    });
    Ok(state)
}

/// `from_bytes` never answers Missing (the bytes are there); an error rather than a panic
/// if that ever changes.
fn unreachable_missing<T>(bucket: &str, name: &str) -> Result<T> {
    Err(Error::internal(format!(
        "entry {bucket}/{name}: its index read as missing though its bytes were read"
    )))
}

impl Entry {
    /// Opens a replica's entry: its state as its writer last committed it.
    pub(super) fn open_replica(
        bucket: &str,
        name: &str,
        dir: &Path,
        ctx: EntryContext,
    ) -> Result<Entry> {
        let empty = EntryState::new(EntryIndex::new(), None, None, Default::default());
        let entry = Self::with_state(bucket, name, dir, ctx, empty);
        let fresh = entry.load_narrowed()?;
        entry.install(fresh)?;
        Ok(entry)
    }

    /// Whether this is a replica's entry (read from a directory another process writes).
    pub(crate) fn is_replica(&self) -> bool {
        self.ctx.read_only
    }

    /// A replica's look at the entry's files: loads its state again when the writer
    /// changed them (`Look::Appended` only when `appends` — a read retrying after a
    /// vanished file cares only for commits). Returns what the look found;
    /// `Look::Recreated` is the bucket's to act on, and an entry that is not a replica's
    /// is always `Look::Same`.
    pub(crate) fn follow_writer(&self, appends: bool) -> Result<Look> {
        let seen = self.lock()?.seen.clone();
        let Some(seen) = seen else {
            return Ok(Look::Same);
        };
        let look = seen.look(&self.dir);
        match look {
            Look::Same | Look::Recreated => return Ok(look),
            Look::Appended if !appends => return Ok(Look::Same),
            Look::Appended | Look::Committed => {}
        }
        // One load at a time: a read retrying and the refresh thread need not both.
        let _one = self.reloading.lock().unwrap_or_else(|p| p.into_inner());
        if self.lock()?.seen.as_ref() != Some(&seen) {
            return Ok(look);
        }
        let fresh = self.load_narrowed()?;
        self.install(fresh)?;
        Ok(look)
    }

    /// Loads the state and narrows its blocks' ranges (which reads blocks with edits),
    /// starting over when the writer committed under it.
    fn load_narrowed(&self) -> Result<EntryState> {
        let mut attempt = 1;
        loop {
            let mut fresh = load(&self.bucket, &self.name, &self.dir, &self.ctx)?;
            self.forget_changed(&fresh)?;
            match self.narrow_ranges(&mut fresh) {
                Ok(()) => return Ok(fresh),
                Err(e) => {
                    let moved_on = fresh
                        .seen
                        .as_ref()
                        .is_some_and(|seen| seen.look(&self.dir) == Look::Committed);
                    if attempt >= LOAD_ATTEMPTS || !moved_on {
                        return Err(e);
                    }
                    attempt += 1;
                }
            }
        }
    }

    /// Forgets the cached views of blocks that `fresh` no longer names as they were
    /// (rewritten, tiered, edited since).
    fn forget_changed(&self, fresh: &EntryState) -> Result<()> {
        let st = self.lock()?;
        self.forget_changed_in(&st, fresh);
        Ok(())
    }

    fn forget_changed_in(&self, st: &EntryState, fresh: &EntryState) {
        for b in &st.index.blocks {
            let same = fresh.index.blocks.iter().any(|n| {
                n.seq == b.seq
                    && n.meta_crc == b.meta_crc
                    && n.remote == b.remote
                    && n.edits == b.edits
            });
            if !same {
                self.ctx.cache.evict((self.uid, b.seq));
            }
        }
    }

    /// Makes `fresh` the state readers see. Views are cached only under the lock, so
    /// forgetting the changed ones under the same lock as the swap leaves none stale.
    fn install(&self, fresh: EntryState) -> Result<()> {
        let mut st = self.lock()?;
        self.forget_changed_in(&st, &fresh);
        *st = fresh;
        self.depth
            .store(max_overlap(&st.index.blocks).0, Ordering::Relaxed);
        Ok(())
    }
}
