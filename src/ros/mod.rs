//! Robot recordings: MCAP records (what rosbag2 and ReductStore's ROS 2 agent write) read
//! as ROS 2 messages, for the `#ext.ros` query extension (ReductROS's query format, built
//! in). See `docs/robotics.md`.
//!
//! - [`mcap_messages`]: an MCAP record's messages, streamed with bounded memory;
//! - [`msgdef`]: `ros2msg` schema text parsed into field lists;
//! - [`cdr`]: a CDR message decoded into JSON text;
//! - [`jpeg`]: an image message's pixels as a JPEG;
//! - [`extract`]: the `extract` step, message to record;
//! - [`transform`]: the `transform` step, MCAP records to episodes of some topics;
//! - [`query`]: a query whose records go through the step;
//! - [`ext`]: the `#ext` parameters of a query, read.

pub mod cdr;
pub mod ext;
pub mod extract;
pub mod jpeg;
pub mod mcap_messages;
pub mod msgdef;
pub mod query;
pub mod transform;

#[cfg(test)]
mod tests;
