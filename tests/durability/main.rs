//! Losing power and disk space: the FUSE file system that drops what was not synced under the server (writes, renames, replication), and a real full disk.
//!
//! One test binary per area (each links the whole crate once); each file below is one
//! topic.

#[path = "../common/mod.rs"]
mod common;
#[path = "../powerfs/mod.rs"]
mod powerfs;

mod disk_full;
mod powercut;
mod powercut_failover;
mod powercut_rename;
mod powercut_replication;
mod powercut_seal;
mod powercut_tier;
