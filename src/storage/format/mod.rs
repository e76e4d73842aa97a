//! The on-disk format of an entry, and nothing else: block files, their metadata section,
//! the binary encoding and codecs they use, the append-only logs and the entry index (the
//! commit point), written with the durable steps of `storage::sync`. These types know
//! nothing of entries, locks or caches; `storage::entry` decides what to write and when.
//!
//! Dependencies run one way: `binary`, `codec` ← `columns` ← `block_meta` ←
//! `frames` ← `block` ← `lookup`, `index` ← `rewrite`; `log` needs only `binary` and
//! `oplog`, and `block` needs `log` (a log sealed in place is a block).
//!
//! Files: `block.rs`, `block_meta.rs`, `block_record.rs`, `columns.rs`, `table_row.rs`
//! (the sealed block and its record table; `block/in_log.rs` a log sealed in place as a
//! block); `frames.rs` (its payload side); `lookup.rs`
//! (a block's compact lookup); `log.rs`, `oplog.rs` (the open and late logs); `edits.rs`
//! (a block's edit log); `index.rs` (the entry index, the commit point); `rewrite.rs`
//! (writing a block from existing records); `journaled_map.rs` (small durable maps:
//! policies, replication tasks); `binary.rs`, `codec.rs` (encoding, codecs);
//! `writeback.rs` (a block file written back a chunk at a time).

pub(crate) mod binary;
pub mod block;
pub(crate) mod block_meta;
pub(crate) mod block_record;
pub mod codec;
pub(crate) mod columns;
pub(crate) mod edits;
pub(crate) mod frames;
pub mod index;
pub(crate) mod journaled_map;
pub(crate) mod log;
pub(crate) mod lookup;
pub(crate) mod oplog;
pub(crate) mod rewrite;
pub(crate) mod table_row;
pub(crate) mod writeback;
