//! The marker that makes a directory a data directory: `.halflife`, written (durably)
//! when a store is created or first opened by this version. The commands that work on a
//! stopped server's directory (`info`, `compress`, `delete`, `check`) refuse one that is
//! not a data directory, before writing anything in it — so `info --data-path /tmp`
//! says so instead of reading every folder of `/tmp` as a bucket and leaving a lock
//! behind.

use std::path::Path;

use crate::error::{Error, Result};
use crate::storage::sync::fsutil::write_atomic;

/// The marker file's name.
pub const MARKER_FILE: &str = ".halflife";

/// What the marker says, for whoever finds it.
const MARKER_TEXT: &[u8] = b"halflife data directory (format 1): do not remove\n";

/// Files only a data directory holds: a directory made before the marker existed is
/// recognised by them (and gets its marker at the next open).
const LAYOUT_FILES: [&str; 3] = [".tokens", ".lifecycles", ".lifecycles.journal"];

/// Writes the marker unless it is there: its file is synced and so is the directory,
/// so a power cut cannot leave a store without it.
pub fn write_marker(dir: &Path) -> Result<()> {
    if dir.join(MARKER_FILE).exists() {
        return Ok(());
    }
    write_atomic(&dir.join(MARKER_FILE), MARKER_TEXT)
}

/// Whether `dir` is a data directory: it has the marker, or the layout of one written
/// before the marker (server files, or a bucket with its settings file).
pub fn is_data_dir(dir: &Path) -> bool {
    if dir.join(MARKER_FILE).exists() || LAYOUT_FILES.iter().any(|f| dir.join(f).exists()) {
        return true;
    }
    let Ok(listing) = std::fs::read_dir(dir) else {
        return false;
    };
    listing.flatten().any(|item| {
        item.path()
            .join(crate::storage::bucket::SETTINGS_FILE)
            .is_file()
    })
}

/// Refuses a path that is not an existing data directory, naming it and saying what
/// makes one; nothing is written either way.
pub fn require_data_dir(dir: &Path) -> Result<()> {
    if !dir.is_dir() {
        return Err(Error::not_found(format!(
            "data directory '{}' does not exist",
            dir.display()
        )));
    }
    if !is_data_dir(dir) {
        return Err(Error::not_found(format!(
            "'{}' is not a halflife data directory (it has no {MARKER_FILE} marker and no \
             buckets); nothing was read or written. `halflife serve --data-path {}` creates one",
            dir.display(),
            dir.display()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_is_a_data_directory_by_its_marker_or_its_layout() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!is_data_dir(dir.path()));
        std::fs::create_dir(dir.path().join("photos")).unwrap();
        assert!(!is_data_dir(dir.path()), "any folder is not a bucket");
        let err = require_data_dir(dir.path()).unwrap_err();
        assert!(
            err.message().contains("is not a halflife data directory"),
            "{err}"
        );
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "nothing written"
        );
        // A bucket of an older store.
        std::fs::write(dir.path().join("photos/.settings"), b"{}").unwrap();
        assert!(is_data_dir(dir.path()));
        let fresh = tempfile::tempdir().unwrap();
        write_marker(fresh.path()).unwrap();
        write_marker(fresh.path()).unwrap();
        assert!(is_data_dir(fresh.path()));
        let missing = fresh.path().join("nope");
        assert!(
            require_data_dir(&missing)
                .unwrap_err()
                .message()
                .contains("does not exist")
        );
    }
}
