//! Replication through real servers: between two halflife processes, with ReductStore, over TLS, and beside what the store does meanwhile.
//!
//! One test binary per area (each links the whole crate once); each file below is one
//! topic.

#[path = "../common/mod.rs"]
mod common;

mod least_privilege;
mod replication;
mod replication_interop;
mod replication_storage;
mod replication_tls;
