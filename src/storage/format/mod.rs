//! The on-disk format of an entry, and nothing else: block files, their metadata section,
//! the binary encoding and codecs they use, the append-only logs, the entry index (the
//! commit point) and the atomic-file helpers of the crash-safety protocol. These types know
//! nothing of entries, locks or caches; `storage::entry` decides what to write and when.
//!
//! Dependencies run one way: `binary`, `codec`, `fsutil` ← `columns` ← `block_meta` ←
//! `frames` ← `block` ← `lookup`, `index` ← `rewrite`; `log` needs only `binary`.

pub mod binary;
pub mod block;
pub mod block_meta;
pub mod block_record;
pub mod codec;
pub mod columns;
pub mod edits;
pub mod frames;
pub mod fsutil;
pub mod index;
pub mod journaled_map;
pub mod log;
pub mod lookup;
pub mod oplog;
pub mod rewrite;
pub mod table_row;
