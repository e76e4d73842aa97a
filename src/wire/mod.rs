//! The parts of the ReductStore wire format that both sides of a connection need: the
//! percent-encoding of names in paths and headers, and the header of one record of a v1
//! batch. The server decodes requests with them (`server/protocol/`) and a replication
//! sends batches with them (`replication/sender.rs`), so they live below both.
//!
//! Files: `percent.rs` (percent-encoding as the API uses it), `record_header.rs` (a v1
//! batch's record header, read and sent).

pub mod percent;
pub(crate) mod record_header;
