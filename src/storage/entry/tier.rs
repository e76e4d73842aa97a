//! Handing a sealed block over to a remote object store: the copy → verify → commit →
//! clean protocol of ARCHITECTURE.md ("Tiering").
//!
//! 1. the upload's intent is recorded (fsynced, `remote/pending.rs`);
//! 2. the block file is mapped, its metadata checked against the index's checksum and
//!    every frame against its own, then uploaded under a fresh key with its `Content-MD5`;
//! 3. the ETag the store answered (the MD5 of what it stored) is compared with the bytes'
//!    own; a multipart upload's size and ETag are read back too;
//! 4. the stub `<seq>.tier` (the block's metadata and the object's location) is written
//!    and fsynced with its directory;
//! 5. the index naming the block as tiered is committed (fsynced);
//! 6. the local block file is removed, and the intent forgotten.
//!
//! A kill or power cut before 5 leaves the block local and whole (the stub is a leftover
//! the next open removes; the object is an orphan: deleted at start since its intent names
//! it, or by the collector after its grace period); after 5 the block reads from the
//! remote, and a block file left behind is a leftover the next open removes. So every
//! record is read from exactly one place at any instant.

use std::sync::Arc;

use super::Entry;
use crate::error::{Error, Result};
use crate::storage::format::block::SealedBlock;
use crate::storage::format::fsutil::remove_file_if_exists;
use crate::storage::format::index::{BlockEntry, RemoteLocation, block_path, stub_path};
use crate::storage::remote::Remote;
use crate::storage::remote::pending::{Pending, PendingOp, object_op_name};
use crate::storage::remote::stub::{StubHeader, write_stub};

/// The steps of a hand-over, reported as they finish (the crash tests kill at each).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TierStep {
    /// The intent is durable; the upload starts.
    IntentRecorded,
    /// The object is stored and its ETag and size confirmed.
    Uploaded,
    /// The stub is durable.
    StubWritten,
    /// The index names the block as tiered.
    Committed,
    /// The local block file is gone.
    Cleaned,
}

/// What a hand-over did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandOver {
    /// The block moved: the bytes uploaded.
    Moved(u64),
    /// The block changed or went away meanwhile (rewritten, removed): nothing moved.
    Skipped,
}

impl Entry {
    /// Moves sealed block `b` to `remote` (see the module documentation), telling `step`
    /// of each step done.
    pub(crate) fn tier_block(
        &self,
        b: &BlockEntry,
        remote: &Arc<Remote>,
        pending: &Pending,
        step: &mut dyn FnMut(TierStep),
    ) -> Result<HandOver> {
        // Held over the hand-over, as by every other writer of the entry's files: a
        // removal of the entry waits for it, a merge does not start meanwhile.
        let _guard = self.merging.lock().unwrap_or_else(|p| p.into_inner());
        if self.is_removing() || !self.holds_local(b.seq)? {
            return Ok(HandOver::Skipped);
        }
        let what = format!(
            "block {:016x}.blk of entry {}/{}",
            b.seq, self.bucket, self.name
        );
        let path = block_path(&self.dir, b.seq);
        // Mapped once: its frames checked (nothing damaged moves), then uploaded from the
        // mapping.
        let mapped = SealedBlock::open_frames(&path, what.clone(), Some(b.meta_crc))?;
        for i in 0..mapped.frames().len() {
            mapped.stored_frame(i)?;
        }
        let bytes = mapped.body().file_bytes();
        let meta_offset = crate::storage::format::block::meta_offset(bytes, &what, b.meta_crc)?;

        let key = remote.new_key(&self.bucket, &self.name, b.seq)?;
        let intent = object_op_name("upload", &remote.name, &key);
        pending.put(
            &intent,
            PendingOp::Upload {
                remote: remote.name.clone(),
                key: key.clone(),
            },
        )?;
        step(TierStep::IntentRecorded);
        let uploaded = remote
            .upload(&key, bytes)
            .map_err(Error::from)
            .and_then(|etag| Self::confirm_upload(remote, &key, bytes.len() as u64, etag));
        let etag = match uploaded {
            Ok(etag) => etag,
            Err(e) => {
                // Whatever part of it the store kept is not needed.
                pending.delete_objects(&[(remote.name.clone(), key)])?;
                pending.remove(&intent)?;
                return Err(e);
            }
        };
        step(TierStep::Uploaded);
        let location = RemoteLocation {
            remote: remote.name.clone(),
            key: key.clone(),
            etag,
            meta_offset,
        };
        let stub = stub_path(&self.dir, b.seq);
        let header = StubHeader {
            location: location.clone(),
            size: bytes.len() as u64,
        };
        write_stub(&stub, &header, bytes)?;
        step(TierStep::StubWritten);

        let mut st = self.lock()?;
        let pos = st
            .index
            .blocks
            .iter()
            .position(|x| x.seq == b.seq && x.remote.is_none());
        let Some(pos) = pos.filter(|_| !self.is_removing()) else {
            drop(st);
            // Rewritten or removed meanwhile: the object is not needed.
            let _ = remove_file_if_exists(&stub);
            pending.delete_objects(&[(remote.name.clone(), key)])?;
            pending.remove(&intent)?;
            return Ok(HandOver::Skipped);
        };
        let mut next = st.index.clone();
        next.blocks[pos].remote = Some(location);
        self.commit(&mut st, next, &[stub], &[])?;
        self.ctx.cache.evict((self.uid, b.seq));
        step(TierStep::Committed);
        if let Err(e) = remove_file_if_exists(&path) {
            // The index no longer names it: the next open removes it.
            log::warn!("{e}");
        }
        drop(st);
        step(TierStep::Cleaned);
        pending.forget_committed_upload(&intent)?;
        Ok(HandOver::Moved(bytes.len() as u64))
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

    /// Whether block `seq` is in the index and local.
    fn holds_local(&self, seq: u64) -> Result<bool> {
        Ok(self
            .lock()?
            .index
            .blocks
            .iter()
            .any(|b| b.seq == seq && b.remote.is_none()))
    }
}
