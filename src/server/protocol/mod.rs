//! The wire codecs of the ReductStore protocol: record batches (v1 headers per timestamp,
//! v2 headers per entry and delta), read from request heads (the percent-encoding of
//! names and a record's v1 header are in `wire/`, which replication shares).

pub mod batch;
pub mod batch_remove;
pub mod batch_v1;
