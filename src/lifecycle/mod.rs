//! The lifecycle engine: policies that recompress and delete aging data.
//!
//! - [`settings`]: what users write, validated into a [`settings::Policy`];
//! - [`progress`]: which data range one run processes;
//! - [`events`]: the `lifecycle_run` system events, which are also the saved progress.
//!
//! The repository, scheduler thread and worker pool come next (issue 5).

pub mod action;
pub mod events;
pub mod progress;
pub mod repository;
pub mod scheduler;
pub mod settings;
