//! The command line and the repository around the code: every command, the operator's edges, a live server inspected, the README and docs, the crate layout.
//!
//! One test binary per area (each links the whole crate once); each file below is one
//! topic.

#[path = "../common/mod.rs"]
mod common;

mod cli;
mod cli_operator;
mod layout;
mod live_inspect;
mod readme;
