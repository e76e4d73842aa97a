//! The payload side of a mapped block file: its mapping, its frame table and which frames
//! have passed their checksum. A parsed view of the block ([`super::block::SealedBlock`])
//! and its compact lookup ([`super::lookup::BlockLookup`]) share one, so a frame verified
//! through either is verified for both, and a record's payload is cut out the same way
//! whichever of them found it.
//!
//! Which frames passed ([`FrameChecks`]) outlives the mapping: the store's cache keeps it
//! for many more blocks than it keeps lookups, so a block opened again after its lookup
//! was evicted does not check its frame again. A random read that misses reads one record
//! of a frame; checking the whole frame (a megabyte, every page of it faulted in and later
//! unmapped) cost more than the rest of the miss.

use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use memmap2::Mmap;

use crate::error::{Error, Result};
use crate::storage::format::block_meta::FrameInfo;
use crate::storage::format::codec::Codec;
use crate::storage::record::Payload;

/// The last frame a reader decoded, by index, kept for its next record.
pub type DecodedFrame = Option<(u32, Arc<Vec<u8>>)>;

/// A file as `fstat` shows it. Block files are never written in place (a change writes a
/// new file), so the only change to one is damage from outside, and any write changes the
/// file's ctime (which, unlike the mtime, cannot be set back): checks remembered for
/// another identity are not trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileIdentity {
    dev: u64,
    ino: u64,
    len: u64,
    ctime: (i64, i64),
}

impl FileIdentity {
    /// The identity of the file `meta` describes.
    pub fn of(meta: &Metadata) -> Self {
        FileIdentity {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// Which frames of one block file have passed their checksum (see the module
/// documentation).
pub struct FrameChecks {
    file: FileIdentity,
    passed: Box<[AtomicBool]>,
}

impl FrameChecks {
    /// `known` when it holds the checks of this very file with `frames` frames, else
    /// checks with no frame passed yet.
    pub fn for_file(
        known: Option<Arc<FrameChecks>>,
        file: FileIdentity,
        frames: usize,
    ) -> Arc<FrameChecks> {
        match known {
            Some(k) if k.file == file && k.passed.len() == frames => k,
            _ => Arc::new(FrameChecks {
                file,
                passed: (0..frames).map(|_| AtomicBool::new(false)).collect(),
            }),
        }
    }

    /// Whether frame `index` has passed its checksum.
    pub fn passed(&self, index: usize) -> bool {
        self.passed[index].load(Ordering::Acquire)
    }

    /// Bytes of memory these checks take, for the cache's budget.
    pub fn heap_bytes(&self) -> usize {
        // The Arc's two counts, then the checks.
        2 * std::mem::size_of::<usize>() + std::mem::size_of::<Self>() + self.passed.len()
    }
}

/// Where the frames of a block whose mapped file does not hold them all come from: a
/// tiered block is mapped from a sparse local copy whose frames are fetched from its
/// remote when first needed.
pub trait FrameFetch: Send + Sync {
    /// Makes frame `index` of `frames` present in the mapped file (and, with
    /// `read_ahead`, some of the frames after it, in the same request); an error is the
    /// read's answer.
    fn ensure(&self, frames: &[FrameInfo], index: usize, read_ahead: bool) -> Result<()>;
}

/// How a mapped block gets frames its file does not hold yet: the fetcher, and whether
/// a miss reads ahead (a query streaming the block) or fetches the one frame (a read).
#[derive(Clone)]
pub struct Fetch {
    /// What fetches the frames.
    pub source: Arc<dyn FrameFetch>,
    /// Whether a miss also fetches the frames after it.
    pub read_ahead: bool,
}

/// A mapped block file's frames.
pub struct BlockFrames {
    what: String,
    map: Arc<Mmap>,
    frames: Vec<FrameInfo>,
    checks: Arc<FrameChecks>,
    fetch: Option<Fetch>,
}

impl BlockFrames {
    /// The frames `frames` of the file mapped at `map`; `what` names the block in errors;
    /// `checks` are of this file and have one flag per frame ([`FrameChecks::for_file`]).
    pub(crate) fn new(
        what: String,
        map: Arc<Mmap>,
        frames: Vec<FrameInfo>,
        checks: Arc<FrameChecks>,
        fetch: Option<Fetch>,
    ) -> Self {
        assert_eq!(
            checks.passed.len(),
            frames.len(),
            "a block's frame checks have one flag per frame"
        );
        BlockFrames {
            what,
            map,
            frames,
            checks,
            fetch,
        }
    }

    /// Which of the file's frames have passed their checksum: what the cache remembers
    /// for the next mapping of the file.
    pub fn checks(&self) -> &Arc<FrameChecks> {
        &self.checks
    }

    /// What the block is, for error messages.
    pub fn what(&self) -> &str {
        &self.what
    }

    /// The mapped file's bytes, whole (what the tier uploads).
    pub fn file_bytes(&self) -> &[u8] {
        &self.map
    }

    /// The size of the mapped file.
    pub fn file_len(&self) -> u64 {
        self.map.len() as u64
    }

    /// The frame table.
    pub fn frames(&self) -> &[FrameInfo] {
        &self.frames
    }

    /// The stored bytes of a frame, checksum-verified on first use.
    pub fn stored_frame(&self, index: usize) -> Result<&[u8]> {
        let frame = &self.frames[index];
        if !self.checks.passed(index)
            && let Some(fetch) = &self.fetch
        {
            fetch.source.ensure(&self.frames, index, fetch.read_ahead)?;
        }
        let bytes = &self.map[frame.offset as usize..(frame.offset + frame.stored_len) as usize];
        if !self.checks.passed(index) {
            if crc32fast::hash(bytes) != frame.crc {
                return Err(Error::internal(format!(
                    "{} is corrupt: frame {index} checksum mismatch",
                    self.what
                )));
            }
            self.checks.passed[index].store(true, Ordering::Release);
        }
        Ok(bytes)
    }

    /// The payload of `size` bytes at `offset` in decoded frame `frame`: a slice of the
    /// mapping for a stored frame, else of the frame decoded (or taken from `cache`, which
    /// then keeps this frame for the caller's next record).
    pub fn payload(
        &self,
        frame_index: u32,
        offset: u64,
        size: u64,
        cache: &mut DecodedFrame,
    ) -> Result<Payload> {
        let frame = &self.frames[frame_index as usize];
        let start = offset as usize;
        let end = start + size as usize;
        let stored = self.stored_frame(frame_index as usize)?;
        if frame.codec == Codec::None {
            let base = frame.offset as usize;
            return Ok(Payload::Mapped(self.map.clone(), base + start..base + end));
        }
        let decoded = match cache.as_ref() {
            Some((i, buf)) if *i == frame_index => buf.clone(),
            _ => {
                let buf = Arc::new(
                    frame
                        .codec
                        .decode(stored, frame.raw_len as usize)
                        .map_err(|e| Error::internal(format!("{}: {e}", self.what)))?,
                );
                *cache = Some((frame_index, buf.clone()));
                buf
            }
        };
        Ok(Payload::Owned(decoded, start..end))
    }

    /// Bytes of memory this takes besides the mapping.
    pub fn heap_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.what.len()
            + self.frames.len() * std::mem::size_of::<FrameInfo>()
            + self.checks.heap_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(file: &std::fs::File) -> FileIdentity {
        FileIdentity::of(&file.metadata().unwrap())
    }

    #[test]
    fn checks_are_trusted_only_for_the_same_file_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b");
        std::fs::write(&path, b"0123456789").unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let first = FrameChecks::for_file(None, identity(&file), 2);
        assert!(!first.passed(0) && !first.passed(1));
        first.passed[1].store(true, Ordering::Release);

        // The same file: the same checks.
        let again = FrameChecks::for_file(Some(first.clone()), identity(&file), 2);
        assert!(Arc::ptr_eq(&first, &again));
        assert!(again.passed(1));
        // Another frame count, or another file: fresh checks.
        let other_count = FrameChecks::for_file(Some(first.clone()), identity(&file), 3);
        assert!(!other_count.passed(1));
        let other_path = dir.path().join("c");
        std::fs::write(&other_path, b"0123456789").unwrap();
        let other = std::fs::File::open(&other_path).unwrap();
        assert!(!FrameChecks::for_file(Some(first.clone()), identity(&other), 2).passed(1));
        // The same file written in place (its inode and size kept): fresh checks, once
        // the file system shows the write in the ctime.
        let before = identity(&file);
        let writer = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while identity(&file) == before {
            assert!(
                std::time::Instant::now() < deadline,
                "the ctime never moved"
            );
            std::os::unix::fs::FileExt::write_all_at(&writer, b"x", 3).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!FrameChecks::for_file(Some(first), identity(&file), 2).passed(1));
    }
}
