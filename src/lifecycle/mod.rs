//! The lifecycle engine: policies that recompress (`compress`), move to an object store
//! (`tier`) and delete aging data, a delete whose `when` has aggregates thinning it.
//!
//! - [`settings`]: what users write, validated into a [`settings::Policy`];
//! - `progress`: which data range one run processes;
//! - [`events`]: the `lifecycle_run` system events, which are also the saved progress;
//! - [`action`]: what one run of a delete, compress or tier policy does; a delete whose
//!   `when` has aggregates thins (`action/delete/`: each record judged once, in time
//!   order, its progress carried in its events, belated writes noted for the next run);
//! - [`meter`]: how far a running policy is through its window;
//! - [`scheduler`]: the thread with the deadline heap, and the worker pool;
//! - [`definitions`]: the definitions on disk (snapshot + journal);
//! - [`repository`]: the validated definitions, driving the scheduler.

pub mod action;
pub mod definitions;
pub mod events;
pub mod meter;
pub(crate) mod progress;
pub mod repository;
pub mod scheduler;
pub mod settings;

pub use action::delete::thinning::Thinning;
pub use repository::{LifecycleInfo, LifecycleRepository};
pub use settings::{LifecycleMode, LifecycleSettings, LifecycleType};
