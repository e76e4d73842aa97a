//! Attachments, as ReductStore keeps them: the records of a hidden entry `<entry>/$meta`
//! (or a top-level `$meta`), one per `key` label, such as calibration, camera intrinsics
//! or a schema kept next to the data.
//!
//! - A write needs the `key` label and is an upsert: the older live records of that key
//!   go (after the new one is durable, so a crash never leaves the key without a value).
//! - Removal is a tombstone: the label `remove=true`, set by a label update. Queries skip
//!   tombstones; a read by timestamp still finds them; clearing the label revives one.
//! - Records are never deleted one by one (422): only with the parent entry.
//! - The entry is hidden: not listed, not counted, never matched by a glob or an empty
//!   entry list (only by its exact name), never evicted by a FIFO quota, never touched by
//!   a delete policy. Its bytes count in the bucket's size.

use crate::error::{Error, Result};
use crate::storage::record::Labels;

/// The last segment naming an attachment entry.
pub const META_SEGMENT: &str = "$meta";
/// The label naming an attachment.
pub const KEY_LABEL: &str = "key";
/// The label whose value `true` marks a removed attachment.
pub const REMOVE_LABEL: &str = "remove";

/// Whether an entry holds attachments (`$meta` or `…/$meta`).
pub fn is_attachment_entry(name: &str) -> bool {
    name == META_SEGMENT
        || name
            .strip_suffix(META_SEGMENT)
            .is_some_and(|parent| parent.ends_with('/'))
}

/// Whether a record's labels mark it removed.
pub fn is_tombstone(labels: &Labels) -> bool {
    labels.get(REMOVE_LABEL).is_some_and(|v| v == "true")
}

/// The `key` of a record written to an attachment entry: required, and a write may not
/// carry `remove=true` (removal is a label update). ReductStore's words.
pub fn key_of_write<'a>(entry: &str, labels: &'a Labels) -> Result<&'a str> {
    if is_tombstone(labels) {
        return Err(Error::unprocessable(format!(
            "System entry '{entry}' does not support writing records with label 'remove=true'; use record update"
        )));
    }
    labels.get(KEY_LABEL).map(String::as_str).ok_or_else(|| {
        Error::unprocessable(format!(
            "System entry '{entry}' records must contain label 'key'"
        ))
    })
}

/// The refusal of a record removal in an attachment entry.
pub fn record_removal_refused(entry: &str) -> Error {
    Error::unprocessable(format!(
        "Can't delete records from system entry '{entry}'; use label update with remove=true"
    ))
}

/// The refusal of removing an attachment entry on its own.
pub fn entry_removal_refused(entry: &str) -> Error {
    Error::unprocessable(format!(
        "Can't delete system entry '{entry}'; remove the parent entry instead"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn attachment_entries_end_in_a_meta_segment() {
        for yes in ["$meta", "cam/$meta", "a/b/$meta"] {
            assert!(is_attachment_entry(yes), "{yes}");
        }
        for no in ["cam", "cam$meta", "cam/x$meta", "$meta/x", "meta"] {
            assert!(!is_attachment_entry(no), "{no}");
        }
    }

    #[test]
    fn a_write_needs_a_key_and_no_tombstone() {
        assert_eq!(
            key_of_write("cam/$meta", &labels(&[("key", "calib")])).unwrap(),
            "calib"
        );
        assert!(key_of_write("cam/$meta", &labels(&[("key", "k"), ("remove", "false")])).is_ok());
        let e = key_of_write("cam/$meta", &labels(&[])).unwrap_err();
        assert_eq!(
            e.message(),
            "System entry 'cam/$meta' records must contain label 'key'"
        );
        let e =
            key_of_write("cam/$meta", &labels(&[("key", "k"), ("remove", "true")])).unwrap_err();
        assert!(e.message().contains("use record update"), "{e}");
    }
}
