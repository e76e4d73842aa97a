//! The header of one record of a v1 batch, as a read batch answers it and a replication
//! sends it: `x-reduct-time-<ts>: <len>,<content-type>[,<labels>]`.

use crate::storage::RecordMeta;

/// The name of a v1 record header, before the record's timestamp.
pub const TIME_PREFIX: &str = "x-reduct-time-";

/// The header of one record of a v1 read batch: `<len>,<content-type>[,<labels>]`, the
/// full label set sorted by name, a value with a comma quoted.
pub fn encode_v1_record(meta: &RecordMeta) -> (String, String) {
    let mut value = format!("{},{}", meta.size, meta.content_type);
    for (k, v) in &meta.labels {
        value.push(',');
        value.push_str(k);
        value.push('=');
        if v.contains(',') {
            value.push('"');
            value.push_str(v);
            value.push('"');
        } else {
            value.push_str(v);
        }
    }
    (format!("{TIME_PREFIX}{}", meta.timestamp), value)
}
