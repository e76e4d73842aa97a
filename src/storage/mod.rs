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

pub mod attachments;
pub mod bucket;
pub mod bulk;
pub mod cache;
pub mod compress;
pub mod condition;
pub mod config;
pub mod entry;
pub(crate) mod fan_out;
pub mod format;
pub mod marker;
pub mod merge;
pub mod names;
pub mod observer;
pub mod pattern;
pub mod priority;
pub mod query;
pub mod quota;
pub mod record;
pub mod remote;
pub mod settings;
pub mod storage_cap;
pub mod store;
pub mod sync;
pub mod system;

pub use bucket::{Bucket, BucketInfo};
pub use bulk::{RecordFilter, RemoveControl, RemoveStats};
pub use compress::{CompressPool, CompressStats};
pub use entry::{Entry, EntryInfo, TierInfo};
pub use format::codec::Codec;
pub use query::{QueryIter, QueryOptions};
pub use record::{DEFAULT_CONTENT_TYPE, Labels, Payload, Record, RecordMeta};
pub use settings::{BucketSettings, BucketSettingsUpdate, QuotaType};
pub use store::Store;
pub use sync::{Pending, SyncMode};
