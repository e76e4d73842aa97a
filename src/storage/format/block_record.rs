//! One record of a sealed block as the block's record table holds it; shared by the
//! table's row form (`block_meta.rs`) and its columnar form (`columns.rs`).

use crate::storage::record::RecordMeta;

/// One record of a sealed block: its metadata and where its payload is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockRecord {
    /// Timestamp, labels, content type and size.
    pub meta: RecordMeta,
    /// Index of the frame holding the payload.
    pub frame: u32,
    /// Offset of the payload inside the decoded frame.
    pub offset: u64,
}
