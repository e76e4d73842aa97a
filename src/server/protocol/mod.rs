//! The wire codecs of the ReductStore protocol: record batches (v1 headers per timestamp,
//! v2 headers per entry and delta) and the percent-encoding of names in paths and headers.

pub mod batch;
pub mod batch_remove;
pub mod batch_v1;
pub mod percent;
