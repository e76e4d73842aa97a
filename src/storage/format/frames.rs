//! The payload side of a mapped block file: its mapping, its frame table and which frames
//! have passed their checksum. A parsed view of the block ([`super::block::SealedBlock`])
//! and its compact lookup ([`super::lookup::BlockLookup`]) share one, so a frame verified
//! through either is verified for both, and a record's payload is cut out the same way
//! whichever of them found it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use memmap2::Mmap;

use crate::error::{Error, Result};
use crate::storage::format::block_meta::FrameInfo;
use crate::storage::format::codec::Codec;
use crate::storage::record::Payload;

/// The last frame a reader decoded, by index, kept for its next record.
pub type DecodedFrame = Option<(u32, Arc<Vec<u8>>)>;

/// A mapped block file's frames.
pub struct BlockFrames {
    what: String,
    map: Arc<Mmap>,
    frames: Vec<FrameInfo>,
    verified: Vec<AtomicBool>,
}

impl BlockFrames {
    /// The frames `frames` of the file mapped at `map`; `what` names the block in errors.
    pub(crate) fn new(what: String, map: Arc<Mmap>, frames: Vec<FrameInfo>) -> Self {
        let verified = frames.iter().map(|_| AtomicBool::new(false)).collect();
        BlockFrames {
            what,
            map,
            frames,
            verified,
        }
    }

    /// What the block is, for error messages.
    pub fn what(&self) -> &str {
        &self.what
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
        let bytes = &self.map[frame.offset as usize..(frame.offset + frame.stored_len) as usize];
        if !self.verified[index].load(Ordering::Acquire) {
            if crc32fast::hash(bytes) != frame.crc {
                return Err(Error::internal(format!(
                    "{} is corrupt: frame {index} checksum mismatch",
                    self.what
                )));
            }
            self.verified[index].store(true, Ordering::Release);
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
            + self.frames.len()
                * (std::mem::size_of::<FrameInfo>() + std::mem::size_of::<AtomicBool>())
    }
}
