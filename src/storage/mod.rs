//! The storage engine: buckets of entries of time-stamped records, stored in framed,
//! checksummed blocks under the copy → fsync → commit → clean protocol of ARCHITECTURE.md ("On disk").
//!
//! Layout of a data directory:
//! ```text
//! <data>/<bucket>/.settings                 bucket settings (JSON, atomic replace)
//! <data>/<bucket>/<entry…>/.index           entry index: blocks + open log (JSON + CRC)
//! <data>/<bucket>/<entry…>/<seq>.blk        sealed blocks (frames + record table)
//! <data>/<bucket>/<entry…>/<seq>.log        the open block (append-only log)
//! ```

pub(crate) mod attachments;
pub mod bucket;
pub(crate) mod bulk;
pub(crate) mod cache;
pub mod compress;
pub mod condition;
pub mod config;
pub(crate) mod entry;
pub(crate) mod fan_out;
pub mod format;
pub mod marker;
pub mod merge;
pub(crate) mod names;
pub(crate) mod observer;
pub(crate) mod pattern;
pub mod priority;
pub(crate) mod query;
pub(crate) mod record;
pub mod remote;
pub(crate) mod settings;
pub(crate) mod storage_cap;
pub(crate) mod store;
pub mod sync;
pub mod system;

pub use bucket::{Bucket, BucketInfo};
pub use bulk::{RecordFilter, RemoveControl, RemoveStats};
pub use compress::{CompressPool, CompressRequest, CompressStats, CompressWindow};
pub use entry::{Entry, EntryInfo, TierInfo};
pub use format::codec::Codec;
pub use query::{QueryIter, QueryOptions};
pub use record::{DEFAULT_CONTENT_TYPE, Labels, Payload, Record, RecordMeta};
pub use settings::{BucketSettings, BucketSettingsUpdate, QuotaType};
pub use store::Store;
pub use sync::{Pending, SyncMode};
