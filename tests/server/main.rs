//! The server through the real binary and real HTTP: the API, its protocols and compatibility, tokens, HTTPS, metrics, the trail, query links, attachments, renames, policies, limits and hostile input.
//!
//! One test binary per area (each links the whole crate once); each file below is one
//! topic.

#[path = "../common/mod.rs"]
mod common;

mod attachments;
mod attack_findings;
mod bucket_rename;
mod busy_machine;
mod catch_up;
mod credentials_in_logs;
mod failover;
mod hostile;
mod network_edge;
mod network_volume;
mod open_files;
mod policy_bounds;
mod query_links;
mod replica;
mod ros_ext;
mod server_api;
mod server_batch_v1;
mod server_compat;
mod server_https;
mod server_lifecycle;
mod server_metrics;
mod server_process;
mod server_queries;
mod server_tokens;
mod settings;
mod slow_bodies;
mod strict_queries;
mod system_trail;
mod thinning;
mod unreadable_entry;
