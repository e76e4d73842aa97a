//! File-system helpers for the copy → fsync → atomic commit → clean protocol.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

/// Suffix of a file being written before its atomic rename; leftovers are removed at open.
pub const TMP_SUFFIX: &str = ".tmp";

/// In the name of a file set aside because it is damaged (a copy of damaged log bytes, an
/// unreadable index or block): kept for inspection, never removed as a leftover.
pub const DAMAGED_MARK: &str = ".damaged";
/// In the name of a block file an index rebuild found superseded (every record of it is in
/// a newer block): kept for inspection, never removed as a leftover.
pub const SUPERSEDED_MARK: &str = ".superseded";

/// Whether a file name is one set aside for inspection (see [`set_aside`]).
pub fn is_set_aside(name: &str) -> bool {
    name.contains(DAMAGED_MARK) || name.contains(SUPERSEDED_MARK)
}

/// Renames `path` to `<path><mark>` (or `<path><mark>-<n>` if that is taken) so nothing
/// treats it as live data any more while its bytes stay for inspection; the directory is
/// fsynced. Returns the new path.
pub fn set_aside(path: &Path, mark: &str) -> Result<PathBuf> {
    let mut n = 0u32;
    let target = loop {
        let mut name = path.as_os_str().to_owned();
        name.push(mark);
        if n > 0 {
            name.push(format!("-{n}"));
        }
        let target = PathBuf::from(name);
        if !target.exists() {
            break target;
        }
        n += 1;
    };
    fs::rename(path, &target)
        .map_err(|e| Error::io(format!("renaming {} aside", path.display()), e))?;
    fsync_dir(parent_of(path))?;
    Ok(target)
}

/// Makes a directory's entries (creations, renames, unlinks) durable.
pub fn fsync_dir(dir: &Path) -> Result<()> {
    let handle = File::open(dir).map_err(|e| Error::io(format!("opening {}", dir.display()), e))?;
    handle
        .sync_all()
        .map_err(|e| Error::io(format!("syncing {}", dir.display()), e))
}

/// Creates `dir` and any missing parents, fsyncing each parent after a child is created
/// in it, so a directory that exists after this call also exists after a power loss.
pub fn create_dirs_durably(dir: &Path) -> Result<()> {
    let mut missing = Vec::new();
    let mut at = dir;
    while !at.exists() {
        missing.push(at);
        match at.parent() {
            Some(parent) => at = parent,
            None => break,
        }
    }
    for path in missing.into_iter().rev() {
        match fs::create_dir(path) {
            Ok(()) => {}
            // A racing creator made it first: fine, it is there.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(Error::io(format!("creating {}", path.display()), e)),
        }
        fsync_dir(parent_of(path))?;
    }
    Ok(())
}

/// The parent of a path we built ourselves; every such path has one.
pub fn parent_of(path: &Path) -> &Path {
    path.parent()
        .expect("storage paths are always inside the data directory")
}

/// Replaces `path` with `bytes` atomically: write a temp file, fsync it, rename it over the
/// target, fsync the directory. A crash leaves either the old or the new content. A write
/// that fails (a full disk) removes its temp file, so it does not hold on to the space.
///
/// The fence is asked before the temp file is made and again right before the rename, the
/// commit point: writing and syncing the temp file can take long enough (milliseconds on a
/// network file system) for a pause to fall between the two, and a process that lost the
/// lease meanwhile must not put its older content over what the new holder committed.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    crate::storage::fence::check()?;
    replace(path, bytes, true)
}

/// [`write_atomic`] without asking the fence: for the lease file, the fence's own state.
pub fn replace_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    replace(path, bytes, false)
}

fn replace(path: &Path, bytes: &[u8], fenced: bool) -> Result<()> {
    let tmp = temp_path(path);
    let written = create_synced(&tmp, bytes)
        .and_then(|()| {
            if fenced {
                crate::storage::fence::check()
            } else {
                Ok(())
            }
        })
        .and_then(|()| {
            fs::rename(&tmp, path).map_err(|e| Error::io(format!("renaming {}", tmp.display()), e))
        });
    if let Err(e) = written {
        // This call's own name: no other process or call writes it.
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    fsync_dir(parent_of(path))
}

/// A temp name for one replace of `path`, of this process and this call alone
/// (`<name>.<pid>-<n>.tmp`): two processes sharing a directory (an old lease holder
/// resumed and the new one) never write or truncate each other's temp file, and a leftover
/// still ends with [`TMP_SUFFIX`].
fn temp_path(path: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(
        ".{}-{}{TMP_SUFFIX}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    PathBuf::from(tmp)
}

/// Creates (or truncates) a file with `bytes` and fsyncs it.
pub fn write_new_file(path: &Path, bytes: &[u8]) -> Result<()> {
    crate::storage::fence::check()?;
    create_synced(path, bytes)
}

fn create_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .map_err(|e| Error::io(format!("creating {}", path.display()), e))?;
    file.write_all(bytes)
        .map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
    file.sync_all()
        .map_err(|e| Error::io(format!("syncing {}", path.display()), e))
}

/// Removes a file, treating "already gone" as success (cleanup after a commit is idempotent).
/// A removal is a write into the directory: a process that lost the lease removes nothing
/// (the name may be a file the new holder made since, a block its index names).
pub fn remove_file_if_exists(path: &Path) -> Result<()> {
    crate::storage::fence::check()?;
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(format!("removing {}", path.display()), e)),
    }
}

/// Appends a CRC32 trailer so a torn or bit-flipped metadata file is detected on load.
pub fn with_crc_trailer(mut body: Vec<u8>) -> Vec<u8> {
    let crc = crc32fast::hash(&body);
    body.extend_from_slice(&crc.to_le_bytes());
    body
}

/// Checks and strips the CRC32 trailer written by [`with_crc_trailer`].
pub fn strip_crc_trailer<'a>(bytes: &'a [u8], what: &Path) -> Result<&'a [u8]> {
    if bytes.len() < 4 {
        return Err(Error::internal(format!(
            "{} is truncated ({} bytes)",
            what.display(),
            bytes.len()
        )));
    }
    let (body, trailer) = bytes.split_at(bytes.len() - 4);
    let stored = u32::from_le_bytes([trailer[0], trailer[1], trailer[2], trailer[3]]);
    if crc32fast::hash(body) != stored {
        return Err(Error::internal(format!(
            "checksum mismatch in {}",
            what.display()
        )));
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("settings");
        write_atomic(&path, b"one").unwrap();
        write_atomic(&path, b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_replace_whose_lease_is_lost_before_its_rename_leaves_the_commit_alone() {
        use crate::storage::fence::thread_fence;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index");
        write_atomic(&path, b"committed by the new holder").unwrap();
        // The first check passes, the one before the rename does not: a pause fell
        // between them and another instance took the lease.
        thread_fence::set(Some(1));
        let e = write_atomic(&path, b"an old holder's index").unwrap_err();
        thread_fence::set(None);
        assert_eq!(e.kind(), crate::error::ErrorKind::Unavailable, "{e}");
        assert_eq!(fs::read(&path).unwrap(), b"committed by the new holder");
        assert_eq!(
            fs::read_dir(dir.path()).unwrap().count(),
            1,
            "its temp file is gone"
        );
        // Nor does a fenced process remove a file (a block the new holder's index names).
        thread_fence::set(Some(0));
        assert!(remove_file_if_exists(&path).is_err());
        thread_fence::set(None);
        assert!(path.exists());
        remove_file_if_exists(&path).unwrap();
        assert!(!path.exists());
    }

    #[test]
    fn each_replace_writes_a_temp_file_of_its_own() {
        let path = Path::new("/data/b/e/index");
        let (one, two) = (temp_path(path), temp_path(path));
        assert_ne!(one, two);
        for tmp in [one, two] {
            let name = tmp.file_name().unwrap().to_string_lossy().into_owned();
            assert!(
                name.starts_with(&format!("index.{}-", std::process::id())),
                "{name}"
            );
            assert!(name.ends_with(TMP_SUFFIX), "{name}");
        }
    }

    #[test]
    fn nested_directories_are_created_and_existing_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let nested = dir.path().join("a").join("b").join("c");
        create_dirs_durably(&nested).unwrap();
        assert!(nested.is_dir());
        fs::write(nested.join("f"), b"x").unwrap();
        create_dirs_durably(&nested).unwrap();
        create_dirs_durably(&dir.path().join("a").join("d")).unwrap();
        assert_eq!(fs::read(nested.join("f")).unwrap(), b"x");
        assert!(dir.path().join("a").join("d").is_dir());
    }

    #[test]
    fn crc_trailer_detects_flips() {
        let sealed = with_crc_trailer(b"hello".to_vec());
        let path = Path::new("x");
        assert_eq!(strip_crc_trailer(&sealed, path).unwrap(), b"hello");
        let mut broken = sealed.clone();
        broken[1] ^= 0x40;
        assert!(
            strip_crc_trailer(&broken, path)
                .unwrap_err()
                .message()
                .contains("checksum mismatch")
        );
        assert!(strip_crc_trailer(b"ab", path).is_err());
    }
}
