//! The cold tier on a real object store (Garage on loopback): the S3 client, the `tier`
//! lifecycle action through the library and through the real server, reads back by range,
//! remote outages, node loss in a three-node cluster, kills and power cuts during the
//! hand-over, the orphan collector.
//!
//! Without Garage every test is ignored; with `HALFLIFE_REQUIRE_GARAGE=1` they fail.

#[path = "../common/mod.rs"]
mod common;

mod blackhole;
mod cluster;
mod crash;
mod follow_remote;
mod library;
mod replica;
mod s3_client;
mod server;
mod trace_logs;
