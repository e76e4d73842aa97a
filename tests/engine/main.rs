//! The storage engine and the lifecycle engine through the library API: writes, reads, edits, overlap, recompression, conditions, caches, damage, crashes (child processes), the on-disk formats, policies and their model checks.
//!
//! One test binary per area (each links the whole crate once); each file below is one
//! topic.

#[path = "../common/mod.rs"]
mod common;

mod compress;
mod compress_crash;
mod concurrency;
mod conditions;
mod corruption;
mod crash;
mod edits;
mod golden;
mod lifecycle;
mod lifecycle_store;
mod model;
mod overlap;
mod predict;
mod replica;
mod scheduler_healing;
mod seal;
mod selection;
mod storage_api;
mod tiny_caches;
