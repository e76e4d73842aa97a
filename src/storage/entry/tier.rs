//! Handing sealed blocks over to a remote object store: the copy → verify → commit →
//! clean protocol of `docs/crash-safety.md` ("Tiering"), in two halves so that several uploads
//! run while earlier blocks commit (`storage/bucket/tier.rs` drives them).
//!
//! [`Entry::upload_block`], on an uploading thread, per block:
//! 1. the upload's intent is recorded (fsynced, `remote/pending.rs`);
//! 2. the block file is mapped — or, in a tier run with a `compression` target, the file
//!    the compress stream just wrote in its place, never synced nor named as a local
//!    block ([`Entry::upload_recompressed`]) — its metadata checked against the index's
//!    checksum and every frame against its own, and uploaded under a fresh key with its
//!    `Content-MD5`;
//! 3. the ETag the store answered (the MD5 of what it stored) is compared with the bytes'
//!    own; a multipart upload's size and ETag are read back too;
//! 4. the stub `<seq>.tier` (the block's metadata and the object's location) is written
//!    and fsynced.
//!
//! [`Entry::commit_tiered`], for a batch of uploaded blocks of the entry:
//! 5. the entry's directory is fsynced (the stubs' names), and the index naming the
//!    blocks as tiered is committed (fsynced) — a block changed or removed meanwhile is
//!    left out, its object deleted;
//! 6. the local block files are removed, and the intents forgotten.
//!
//! A kill or power cut before 5 leaves each block local and whole (a stub, and a
//! recompressed file, are leftovers the next open removes; the object is an orphan:
//! deleted at start since its intent names it, or by the collector after its grace
//! period); after 5 the block reads from the remote, and a block file left behind is a
//! leftover the next open removes. So every record is read from exactly one place at any
//! instant.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::Entry;
use crate::error::{Error, Result};
use crate::storage::format::block::SealedBlock;
use crate::storage::format::index::{BlockEntry, RemoteLocation, block_path, stub_path};
use crate::storage::remote::Remote;
use crate::storage::remote::pending::{Pending, PendingOp, object_op_name};
use crate::storage::remote::stub::{StubHeader, write_stub};
use crate::storage::sync::fsutil::{fsync_dir, remove_file_if_exists};

/// The steps of a hand-over, reported as they finish (the crash tests kill at each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TierStep {
    /// The intent is durable; the upload starts.
    IntentRecorded,
    /// The object is stored and its ETag and size confirmed.
    Uploaded,
    /// The stub is written and synced.
    StubWritten,
    /// The index names the block as tiered.
    Committed,
    /// The local block file is gone.
    Cleaned,
}

/// Where a tier run's blocks go and how.
#[derive(Clone, Copy)]
pub struct Outgoing<'a> {
    /// The remote they go to.
    pub remote: &'a Arc<Remote>,
    /// The journal of upload intents and object deletions.
    pub pending: &'a Pending,
    /// Told of each step as it finishes (from several threads).
    pub step: &'a (dyn Fn(TierStep) + Sync),
}

/// A block uploaded and its stub written: what its commit needs.
pub struct Uploaded {
    /// The local block as it was when the upload began, or the blocks a recompressed
    /// one replaces.
    pub old: Vec<BlockEntry>,
    /// A recompressed block replacing them (naming its object) and its never-synced
    /// local file.
    new: Option<(BlockEntry, PathBuf)>,
    location: RemoteLocation,
    stub: PathBuf,
    intent: String,
    /// Bytes uploaded.
    pub bytes: u64,
}

impl Uploaded {
    /// The block's local file, removed once the commit names the object instead.
    fn local_file(&self, dir: &std::path::Path) -> PathBuf {
        match (&self.new, self.old.as_slice()) {
            (Some((_, path)), _) => path.clone(),
            (None, [old]) => block_path(dir, old.seq),
            (None, _) => PathBuf::new(),
        }
    }
}

impl Entry {
    /// Uploads sealed block `b` and writes its stub (steps 1–4 of the module
    /// documentation); `None` when the block changed or went away first.
    pub(crate) fn upload_block(&self, b: &BlockEntry, out: &Outgoing) -> Result<Option<Uploaded>> {
        // Opened under the upload guard, which a removal waits for: the path names this
        // entry's file, not one of an entry re-created under the same name.
        let mapped = {
            let Some(_guard) = self.upload_guard() else {
                return Ok(None);
            };
            if !self.holds_local(b)? {
                return Ok(None);
            }
            let what = format!(
                "block {:016x}.blk of entry {}/{}",
                b.seq, self.bucket, self.name
            );
            SealedBlock::open_frames(&block_path(&self.dir, b.seq), what, Some(b.meta_crc))?
        };
        self.upload_mapped(vec![b.clone()], &mapped, None, out)
    }

    /// Uploads `new`, a block the compress stream just wrote to `path` in place of `old`,
    /// and writes its stub (steps 1–4); `None` when the entry went away first. Its file
    /// is removed unless the upload goes on to its commit.
    pub(crate) fn upload_recompressed(
        &self,
        old: &[BlockEntry],
        new: &BlockEntry,
        path: Option<&Path>,
        out: &Outgoing,
    ) -> Result<Option<Uploaded>> {
        let Some(path) = path else {
            return Err(crate::error::Error::internal(
                "a recompressed block without its file",
            ));
        };
        let mapped = {
            let Some(_guard) = self.upload_guard() else {
                return Ok(None);
            };
            let what = format!(
                "block {:016x}.blk of entry {}/{}",
                new.seq, self.bucket, self.name
            );
            SealedBlock::open_frames(path, what, Some(new.meta_crc))
        };
        let uploaded = mapped.and_then(|mapped| {
            self.upload_mapped(
                old.to_vec(),
                &mapped,
                Some((new.clone(), path.to_path_buf())),
                out,
            )
        });
        if !matches!(uploaded, Ok(Some(_))) {
            self.drop_recompressed(Some(path));
        }
        uploaded
    }

    /// Removes the file the compress stream wrote at `path`, which will not be uploaded
    /// (not at all once the entry's removal has begun: it went with the directory).
    pub(crate) fn drop_recompressed(&self, path: Option<&Path>) {
        if let Some(path) = path
            && let Some(_guard) = self.upload_guard()
        {
            let _ = remove_file_if_exists(path);
        }
    }

    /// Steps 1–4 for the mapped file that goes out in place of `old` (`new` when it is a
    /// recompressed copy).
    fn upload_mapped(
        &self,
        old: Vec<BlockEntry>,
        mapped: &SealedBlock,
        new: Option<(BlockEntry, PathBuf)>,
        out: &Outgoing,
    ) -> Result<Option<Uploaded>> {
        let (remote, pending) = (out.remote, out.pending);
        // Nothing damaged moves.
        for i in 0..mapped.frames().len() {
            mapped.stored_frame(i)?;
        }
        let (seq, meta_crc) = match (&new, old.as_slice()) {
            (Some((n, _)), _) => (n.seq, n.meta_crc),
            (None, [b]) => (b.seq, b.meta_crc),
            (None, _) => return Err(Error::internal("a tiered block replaces one block")),
        };
        let bytes = mapped.body().file_bytes();
        let what = format!(
            "block {seq:016x}.blk of entry {}/{}",
            self.bucket, self.name
        );
        let meta_offset = crate::storage::format::block::meta_offset(bytes, &what, meta_crc)?;

        let key = remote.new_key(&self.bucket, &self.name, seq)?;
        let intent = object_op_name("upload", &remote.name, &key);
        pending.put(
            &intent,
            PendingOp::Upload {
                remote: remote.name.clone(),
                key: key.clone(),
            },
        )?;
        (out.step)(TierStep::IntentRecorded);
        let abandon = |e: Option<Error>| -> Result<Option<Uploaded>> {
            // Whatever part of it the store kept is not needed.
            pending.delete_objects(&[(remote.name.clone(), key.clone())])?;
            pending.remove(&intent)?;
            e.map_or(Ok(None), Err)
        };
        let uploaded = remote
            .upload(&key, bytes)
            .map_err(Error::from)
            .and_then(|etag| Self::confirm_upload(remote, &key, bytes.len() as u64, etag));
        let etag = match uploaded {
            Ok(etag) => etag,
            Err(e) => return abandon(Some(e)),
        };
        (out.step)(TierStep::Uploaded);
        let location = RemoteLocation {
            remote: remote.name.clone(),
            key: key.clone(),
            etag,
            meta_offset,
        };
        let stub = stub_path(&self.dir, seq);
        let header = StubHeader {
            location: location.clone(),
            size: bytes.len() as u64,
        };
        {
            let Some(_guard) = self.upload_guard() else {
                return abandon(None);
            };
            if let Err(e) = write_stub(&stub, &header, bytes) {
                let _ = remove_file_if_exists(&stub);
                return abandon(Some(e));
            }
        }
        (out.step)(TierStep::StubWritten);
        let new = new.map(|(mut entry, path)| {
            entry.remote = Some(location.clone());
            (entry, path)
        });
        Ok(Some(Uploaded {
            old,
            new,
            location,
            stub,
            intent,
            bytes: bytes.len() as u64,
        }))
    }

    /// Commits a batch of this entry's uploaded blocks as tiered and removes their local
    /// files (steps 5–6); says for each whether it moved. A block changed or removed
    /// meanwhile is left as it is, its stub, its copy and its object dropped; so is the
    /// whole batch when the commit fails (its error returned).
    pub(crate) fn commit_tiered(&self, done: &[Uploaded], out: &Outgoing) -> Result<Vec<bool>> {
        let Some(_guard) = self.upload_guard() else {
            // Removed meanwhile: its directory (with the stubs) went with it.
            for u in done {
                self.abandon(u, out, false)?;
            }
            return Ok(vec![false; done.len()]);
        };
        let committed = self.commit_uploaded(done, out);
        let moved = match committed {
            Ok(moved) => moved,
            Err(e) => {
                for u in done {
                    self.abandon(u, out, true)?;
                }
                return Err(e);
            }
        };
        for (u, moved) in done.iter().zip(&moved) {
            if *moved {
                (out.step)(TierStep::Cleaned);
                out.pending.forget_committed_upload(&u.intent)?;
            } else {
                self.abandon(u, out, true)?;
            }
        }
        Ok(moved)
    }

    /// Step 5 and the local files' removal, under the entry lock (the caller holds the
    /// upload guard).
    fn commit_uploaded(&self, done: &[Uploaded], out: &Outgoing) -> Result<Vec<bool>> {
        fsync_dir(&self.dir)?;
        let mut st = self.lock()?;
        let mut next = st.index.clone();
        let (mut moved, mut stubs, mut replaced) = (Vec::new(), Vec::new(), Vec::new());
        for u in done {
            // Still local and, for a recompressed copy, unedited since it was read (an
            // edit of a block that moves as it is stays in its local log).
            let here = |b: &BlockEntry| {
                next.blocks.iter().position(|x| {
                    x.seq == b.seq
                        && x.remote.is_none()
                        && (u.new.is_none() || x.version() == b.version())
                })
            };
            let found: Option<Vec<usize>> = u.old.iter().map(here).collect();
            moved.push(found.is_some());
            let Some(found) = found else { continue };
            match &u.new {
                None => {
                    for pos in found {
                        next.blocks[pos].remote = Some(u.location.clone());
                    }
                }
                Some((entry, _)) => {
                    let seqs: Vec<u64> = u.old.iter().map(|b| b.seq).collect();
                    next.blocks.retain(|x| !seqs.contains(&x.seq));
                    next.blocks.push(entry.clone());
                    replaced.extend(seqs);
                }
            }
            stubs.push(u.stub.clone());
        }
        if stubs.is_empty() {
            return Ok(moved);
        }
        self.commit(&mut st, next, &stubs, &replaced)?;
        for (u, moved) in done.iter().zip(&moved) {
            if !*moved {
                continue;
            }
            for b in &u.old {
                self.ctx.cache.evict((self.uid, b.seq));
            }
            (out.step)(TierStep::Committed);
            if let Err(e) = remove_file_if_exists(&u.local_file(&self.dir)) {
                // The index no longer names it: the next open removes it.
                log::warn!("{e}");
            }
        }
        Ok(moved)
    }

    /// Drops an uploaded block that will not be committed: its object queued for
    /// deletion, its intent forgotten, and (`files`, under the upload guard the caller
    /// holds) its stub and recompressed copy removed.
    fn abandon(&self, u: &Uploaded, out: &Outgoing, files: bool) -> Result<()> {
        if files {
            let _ = remove_file_if_exists(&u.stub);
            if let Some((_, path)) = &u.new {
                let _ = remove_file_if_exists(path);
            }
        }
        out.pending
            .delete_objects(&[(u.location.remote.clone(), u.location.key.clone())])?;
        out.pending.remove(&u.intent)
    }

    /// The objects of the entry's tiered blocks, as (remote, key): what its removal
    /// deletes.
    pub(crate) fn remote_objects(&self) -> Vec<(String, String)> {
        let Ok(st) = self.lock() else {
            return Vec::new();
        };
        st.index
            .blocks
            .iter()
            .filter_map(|b| b.remote.as_ref())
            .map(|r| (r.remote.clone(), r.key.clone()))
            .collect()
    }

    /// The ETag of an upload of `size` bytes, confirmed. A single PUT is confirmed by its
    /// answer: the store checked the bytes against their `Content-MD5` and answered the MD5
    /// of what it stored, which the client compared with its own. A multipart upload's
    /// parts are confirmed so, and the whole object by reading its size and ETag back.
    fn confirm_upload(remote: &Remote, key: &str, size: u64, etag: String) -> Result<String> {
        if size < crate::storage::remote::s3::MULTIPART_THRESHOLD as u64 {
            return Ok(etag);
        }
        match remote.head(key).map_err(Error::from)? {
            Some((stored_size, stored)) if stored_size == size && stored == etag => Ok(etag),
            found => Err(Error::new(
                crate::error::ErrorKind::Unavailable,
                format!(
                    "remote '{}': '{key}' reads back as {found:?}, not the {size} bytes with ETag '{etag}' sent",
                    remote.name
                ),
            )),
        }
    }

    /// Whether block `b` is in the index and local.
    fn holds_local(&self, b: &BlockEntry) -> Result<bool> {
        Ok(self
            .lock()?
            .index
            .blocks
            .iter()
            .any(|x| x.seq == b.seq && x.remote.is_none()))
    }
}
