//! The storage engine: buckets of entries of time-stamped records, stored in framed,
//! checksummed blocks under the copy → fsync → commit → clean protocol
//! (`docs/crash-safety.md`).
//!
//! Layout of a data directory:
//! ```text
//! <data>/<bucket>/.settings                 bucket settings (JSON, atomic replace)
//! <data>/<bucket>/<entry…>/.index           entry index: blocks + open log (JSON + CRC)
//! <data>/<bucket>/<entry…>/<seq>.blk        sealed blocks (frames + record table)
//! <data>/<bucket>/<entry…>/<seq>.log        the open and late logs, and full logs
//!                                           waiting for their seal (append-only)
//! ```
//!
//! Where things are:
//! - `store.rs`: [`Store`], the data directory: its lock, buckets, caches, sync mode, and
//!   the observer it tells of changes;
//! - `bucket/`: a bucket's entries, writes, queries, removals, renames, compression and
//!   tiering entry points, quota;
//! - `entry/`: one time series — the open and late logs, sealed blocks, edits, reads,
//!   recovery;
//! - `format/`: the files themselves (blocks, logs, edit logs, index);
//! - `compress/`, `merge.rs`: recompression and the merge of overlapping blocks;
//!   `sealer.rs`: the background thread of the large I/O no write waits for (seals of
//!   full logs, folds of tombstoned blocks, unlinks of evicted files);
//! - `remote/`: the object-store tier (S3 client, stubs, pending operations, frame cache,
//!   manifests); `remote_collector.rs`: the thread that cleans it up for the whole store;
//! - `sync/`: what an acknowledgement waits for (group commit, the interval syncer, the log
//!   descriptor bound, the durable file-system steps);
//! - `condition/`: the `when` language; `pattern.rs`: entry-name patterns; `names.rs`: name
//!   rules;
//! - `query.rs`: streaming queries; `record.rs`: records as callers see them;
//! - `cache.rs`: the shared caches within `--memory-budget`; `storage_cap.rs`: the
//!   store-wide disk cap;
//! - `settings.rs`, `config.rs`: bucket settings and the engine's configuration;
//! - `attachments.rs`: attachment entries as ReductStore keeps them; `system.rs`: the
//!   `$system` bucket;
//! - `observer.rs`: who is told of changes (replication, thinning); `marker.rs`: the data-
//!   directory marker;
//! - `replica.rs`: a replica's store, read without writing and following its writer;
//! - `fence.rs`: asked before every write into the directory (a PRIMARY or SECONDARY
//!   that lost its lease writes nothing more);
//! - `priority.rs`: background threads below request handlers; `fan_out.rs`: waiting work
//!   spread on a few threads.
//!
//! Layers, top first (`tests/cli/layout.rs` holds them, `ARCHITECTURE.md` draws them): this
//! outline; what works on the whole store (`system.rs`, `replica.rs`,
//! `remote_collector.rs`); `store.rs`; `config.rs`, `marker.rs`; `bucket/`; `compress/`,
//! `query.rs`; `merge.rs`; `entry/`; what an entry hands work to (`remote/`, the caches,
//! `sealer.rs`, `observer.rs`, `fan_out.rs`); `format/`; `sync/`; and the leaves
//! (`condition/`, names, patterns, settings, records, priorities, the fence). A file
//! imports its own layer and those below, by the file that holds the item (this outline's
//! re-exports are for callers outside the engine), and no two folders import each other.
//!
//! How the files fit on disk, and why each rewrite survives a crash: `docs/storage.md` and
//! `docs/crash-safety.md`.

pub(crate) mod attachments;
pub mod bucket;
pub(crate) mod cache;
pub mod compress;
pub mod condition;
pub mod config;
pub(crate) mod entry;
pub(crate) mod fan_out;
pub mod fence;
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
pub(crate) mod remote_collector;
pub(crate) mod replica;
pub(crate) mod sealer;
pub(crate) mod settings;
pub(crate) mod storage_cap;
pub(crate) mod store;
pub mod sync;
pub mod system;

pub use bucket::{Bucket, BucketInfo};
pub use compress::{CompressPool, CompressRequest, CompressStats, CompressWindow};
pub use entry::bulk::{RecordFilter, RemoveControl, RemoveStats};
pub use entry::{Entry, EntryInfo, TierInfo};
pub use format::codec::Codec;
pub use query::{QueryIter, QueryOptions};
pub use record::{DEFAULT_CONTENT_TYPE, Labels, Payload, Record, RecordMeta};
pub use settings::{BucketSettings, BucketSettingsUpdate, QuotaType};
pub use store::Store;
pub use sync::{Pending, SyncMode};
