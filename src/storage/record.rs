//! Records as callers see them: metadata, and payload bytes that borrow the mapped block
//! file or a decoded frame instead of copying.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use memmap2::Mmap;

/// Labels of a record: name → value, kept sorted by name.
pub type Labels = BTreeMap<String, String>;

/// Content type stored when a writer gives none.
pub const DEFAULT_CONTENT_TYPE: &str = "application/octet-stream";

/// Everything about a record except its payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordMeta {
    /// Timestamp in microseconds since the UNIX epoch; unique within an entry.
    pub timestamp: u64,
    /// Labels attached to the record.
    pub labels: Labels,
    /// MIME type of the payload.
    pub content_type: String,
    /// Payload size in bytes.
    pub size: u64,
}

/// Payload bytes of a record, shared with the block they came from.
#[derive(Clone)]
pub enum Payload {
    /// A slice of a memory-mapped, uncompressed frame.
    Mapped(Arc<Mmap>, Range<usize>),
    /// A slice of a decoded (or read) buffer.
    Owned(Arc<Vec<u8>>, Range<usize>),
}

impl Payload {
    /// Wraps an owned buffer.
    pub fn from_vec(bytes: Vec<u8>) -> Self {
        let len = bytes.len();
        Payload::Owned(Arc::new(bytes), 0..len)
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        match self {
            Payload::Mapped(map, range) => &map[range.clone()],
            Payload::Owned(buf, range) => &buf[range.clone()],
        }
    }

    /// The bytes `range` (relative to this payload, within it) as a payload of their own,
    /// sharing the buffer or map.
    pub fn slice(&self, range: Range<usize>) -> Payload {
        match self {
            Payload::Mapped(map, own) => {
                Payload::Mapped(map.clone(), own.start + range.start..own.start + range.end)
            }
            Payload::Owned(buf, own) => {
                Payload::Owned(buf.clone(), own.start + range.start..own.start + range.end)
            }
        }
    }

    /// Number of bytes.
    pub fn len(&self) -> usize {
        match self {
            Payload::Mapped(_, range) | Payload::Owned(_, range) => range.len(),
        }
    }

    /// True when the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl AsRef<[u8]> for Payload {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Payload({} bytes)", self.len())
    }
}

/// A record read from an entry: its metadata and, unless only metadata was asked for, its
/// payload.
#[derive(Debug, Clone)]
pub struct Record {
    /// Name of the entry the record belongs to.
    pub entry: String,
    /// Timestamp, labels, content type, size.
    pub meta: RecordMeta,
    /// The payload; `None` for metadata-only queries.
    pub payload: Option<Payload>,
}
