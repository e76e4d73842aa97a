//! Where a replicated change began: the marker that stops a cycle of replications.
//!
//! Each server has an id, made once and kept in `<data>/.origin-id`. A change made through
//! the API is sent on by a replication with its origin, `<server id>/<bucket>`, in
//! [`ORIGIN_HEADER`]; a change that arrived through a replication keeps the origin it came
//! with (in the backlog, so a restart keeps it too) and is sent on with it. A server that
//! receives a change whose origin is the very bucket it is sent to answers it as delivered
//! and neither stores nor forwards it: it began there. So a change goes round a cycle of
//! replications (between buckets of one server or across several) once and stops where it
//! started, even when two servers change the same record at once and their updates would
//! otherwise chase each other for ever. (Those two may then keep different values: with no
//! clock both trust, neither wins; the next change of either settles it.)

use std::path::Path;

use crate::error::{Error, Result};
use crate::storage::names::MAX_NAME_LEN;
use crate::storage::sync::fsutil::write_atomic;

/// The request header naming where the changes of a replicated batch began.
pub const ORIGIN_HEADER: &str = "x-halflife-origin";

/// Where the id is kept, under the data directory.
const ORIGIN_FILE: &str = ".origin-id";

/// Longest server id taken from a request (ours are 32 characters).
const MAX_ID_LEN: usize = 64;

/// This server's origin id: read from the data directory, or made and stored there on
/// the first start. A directory it cannot be stored in (read-only) gets an id for this
/// run, with a WARN: cycles still stop within the run.
pub fn local_origin(data: &Path) -> String {
    let path = data.join(ORIGIN_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) if valid_id(text.trim()) => return text.trim().to_string(),
        Ok(text) => log::warn!(
            "{} is damaged ({} bytes that are not an id); a new origin id replaces it",
            path.display(),
            text.len()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => log::warn!(
            "reading {}: {e}; a new origin id replaces it",
            path.display()
        ),
    }
    let id = new_id();
    if let Err(e) = write_atomic(&path, id.as_bytes()) {
        log::warn!(
            "the origin id cannot be stored ({}); this run uses {id}",
            e.message()
        );
    }
    id
}

/// The origin of changes made through the API to `bucket` of the server `id`.
pub fn origin_of(id: &str, bucket: &str) -> String {
    format!("{id}/{bucket}")
}

/// Checks an origin taken from a request and splits it into the server id (1–64
/// letters, digits, `-` or `_`) and the bucket (a bucket name).
pub fn parse_origin(value: &str) -> Result<(&str, &str)> {
    let split = value.split_once('/').filter(|(id, bucket)| {
        valid_id(id)
            && (1..=MAX_NAME_LEN).contains(&bucket.len())
            && bucket.bytes().all(|b| id_char(b) || b == b'$')
    });
    split.ok_or_else(|| {
        Error::unprocessable(format!(
            "{ORIGIN_HEADER} must be '<server id>/<bucket>' (an id of 1 to {MAX_ID_LEN} letters, digits, '-' or '_', and a bucket name)"
        ))
    })
}

fn valid_id(id: &str) -> bool {
    (1..=MAX_ID_LEN).contains(&id.len()) && id.bytes().all(id_char)
}

fn id_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

/// 16 random bytes in hex; the time and process id when the system has no randomness.
fn new_id() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        bytes = (nanos ^ (u128::from(std::process::id()) << 96)).to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_made_once_and_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = local_origin(dir.path());
        assert_eq!(first.len(), 32);
        assert_eq!(local_origin(dir.path()), first);
        let other = tempfile::tempdir().expect("tempdir");
        assert_ne!(local_origin(other.path()), first);
    }

    #[test]
    fn a_damaged_id_is_replaced() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join(ORIGIN_FILE), "not an id!").expect("write");
        let id = local_origin(dir.path());
        assert!(valid_id(&id), "{id}");
        assert_eq!(local_origin(dir.path()), id);
    }

    #[test]
    fn origins_from_requests_are_bounded() {
        assert_eq!(
            parse_origin("0123abcd-x_Y/$system").ok(),
            Some(("0123abcd-x_Y", "$system"))
        );
        let long_id = format!("{}/b", "a".repeat(65));
        let long_bucket = format!("a/{}", "b".repeat(129));
        for bad in [
            "",
            "abc",
            "/b",
            "a/",
            "a b/c",
            "a/b\r\nx",
            "a/b/c",
            &long_id,
            &long_bucket,
        ] {
            assert!(parse_origin(bad).is_err(), "{bad:?}");
        }
    }
}
