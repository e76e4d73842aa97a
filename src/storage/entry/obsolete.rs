//! Files a commit made obsolete (replaced blocks, their edit logs), removed after the
//! entry lock is released.
//!
//! Once the index no longer names a file, removing it is cleanup: a crash before it
//! leaves a file the next open removes. An unlink can take a while — on a file system
//! mounted with `discard` it waits for the freed blocks to be discarded — so a commit that
//! retires many blocks (a recompression batch, a delete policy) must not make writers wait
//! for it behind the entry lock.
//!
//! The names are removed relative to a handle on the entry's directory opened under the
//! lock, at the commit: if the entry is removed meanwhile (its directory renamed away)
//! and re-created under the same name, a late removal can only reach the old directory,
//! never a file of the new entry that happens to carry the same sequence number.

use std::ffi::{CString, OsString};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::storage::sync::fsutil::remove_file_if_exists;

/// Files to remove once the commit that dropped them is durable; see the module doc.
#[must_use = "obsolete files stay on disk until removed"]
pub(crate) struct ObsoleteFiles {
    /// The entry's directory as of the commit; `None` when it could not be opened (the
    /// files were then removed by path at once, under the lock).
    dir: Option<File>,
    names: Vec<OsString>,
}

impl ObsoleteFiles {
    /// Nothing to remove.
    pub(crate) fn none() -> Self {
        ObsoleteFiles {
            dir: None,
            names: Vec::new(),
        }
    }

    /// Collects `paths` (all inside `dir`) for removal relative to `dir`. Called under
    /// the entry lock. If the directory cannot be opened, they are removed here by path,
    /// which is what holding the lock makes safe.
    pub(crate) fn collect(dir: &Path, paths: Vec<PathBuf>) -> Self {
        if paths.is_empty() {
            return Self::none();
        }
        let names: Option<Vec<OsString>> = paths
            .iter()
            .map(|p| {
                (p.parent() == Some(dir))
                    .then(|| p.file_name().map(|n| n.to_os_string()))
                    .flatten()
            })
            .collect();
        match (File::open(dir), names) {
            (Ok(handle), Some(names)) => ObsoleteFiles {
                dir: Some(handle),
                names,
            },
            (opened, _) => {
                if let Err(e) = opened {
                    log::warn!(
                        "opening {} to remove replaced files later: {e}; removing them now",
                        dir.display()
                    );
                }
                for path in &paths {
                    if let Err(e) = remove_file_if_exists(path) {
                        // The index no longer names the file: the next open removes it.
                        log::warn!("{e}");
                    }
                }
                Self::none()
            }
        }
    }

    /// The files as (directory, name) pairs, to be removed elsewhere (by an unlinking
    /// thread, with [`remove_in`]).
    pub(crate) fn into_parts(self) -> Vec<(std::sync::Arc<File>, OsString)> {
        match self.dir {
            None => Vec::new(),
            Some(dir) => {
                let dir = std::sync::Arc::new(dir);
                self.names
                    .into_iter()
                    .map(|name| (dir.clone(), name))
                    .collect()
            }
        }
    }

    /// Removes the files now.
    pub(crate) fn remove(self) {
        for (dir, name) in self.into_parts() {
            remove_in(&dir, &name);
        }
    }
}

/// Removes `name` from the directory `dir` is a handle on; "already gone" is fine, any
/// other failure is logged (the next open of the entry removes what the index does not
/// name).
pub(crate) fn remove_in(dir: &File, name: &OsString) {
    let Ok(c_name) = CString::new(name.as_bytes()) else {
        return; // a file name never holds a NUL byte
    };
    // SAFETY: `dir` is an open directory descriptor for the duration of the call and
    // `c_name` a NUL-terminated string; unlinkat reads both and keeps neither.
    let rc = unsafe { libc::unlinkat(dir.as_raw_fd(), c_name.as_ptr(), 0) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::NotFound {
            log::warn!(
                "removing replaced file {}: {e}; the entry's next open removes it",
                name.to_string_lossy()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removes_relative_to_the_directory_as_it_was_at_the_commit() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("entry");
        std::fs::create_dir(&dir).expect("dir");
        let old = dir.join("000001.blk");
        std::fs::write(&old, b"old").expect("file");
        let obsolete = ObsoleteFiles::collect(&dir, vec![old.clone()]);
        assert_eq!(obsolete.names.len(), 1);
        // The entry is removed (renamed away) and re-created with a file of the same name.
        let moved = tmp.path().join("removed");
        std::fs::rename(&dir, &moved).expect("rename");
        std::fs::create_dir(&dir).expect("re-created");
        std::fs::write(&old, b"new entry's block").expect("new file");
        obsolete.remove();
        assert_eq!(std::fs::read(&old).expect("kept"), b"new entry's block");
        assert!(!moved.join("000001.blk").exists(), "the old file is gone");
    }

    #[test]
    fn a_file_already_gone_is_not_an_error() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let obsolete = ObsoleteFiles::collect(tmp.path(), vec![tmp.path().join("missing")]);
        obsolete.remove();
    }
}
