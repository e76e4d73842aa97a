//! Group commit for one append-only file (an open or late log, an edit log).
//!
//! Writers append under their entry's lock and then, outside it, wait until the file is
//! synced up to the end of their append. The first waiter becomes the syncer: it notes
//! how far the file is written, runs one `fdatasync` and wakes everyone whose append lies
//! below that mark. Appends that land while a sync is in flight wait for the next one, so
//! a burst of writers costs one sync per round, not one per record.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::error::{Error, Result};
use crate::storage::sync::LazyFile;
use crate::storage::sync::fsutil::fsync_dir;

/// The sync state of one append-only file, shared by its owner and by waiting writers.
pub struct FileSync {
    file: Arc<LazyFile>,
    path: PathBuf,
    state: Mutex<SyncState>,
    synced_cond: Condvar,
    /// Set while the file is in the interval syncer's list of files to sync.
    pub(super) queued: AtomicBool,
}

struct SyncState {
    /// End of the last append.
    written: u64,
    /// Everything below this offset is on stable storage.
    synced: u64,
    /// A sync of this file is running (its caller wakes the others).
    syncing: bool,
    /// The directory whose entry for this file is not yet durable (a file created without
    /// a sync); synced together with the file's next sync.
    dir: Option<PathBuf>,
    /// A failed sync: the kernel may have dropped the dirty pages, so no later sync can
    /// vouch for them; every wait fails from then on.
    failed: Option<String>,
    /// The file's content no longer matters (sealed into a synced block, or dropped by a
    /// commit): waits return at once.
    retired: bool,
}

impl FileSync {
    /// Tracks `file` (at `path`), `len` bytes long. `durable` says whether those bytes and
    /// the file's directory entry are already on stable storage; otherwise the first sync
    /// also syncs the directory.
    pub fn new(file: Arc<LazyFile>, path: &Path, len: u64, durable: bool) -> Arc<FileSync> {
        Arc::new(FileSync {
            file,
            path: path.to_path_buf(),
            state: Mutex::new(SyncState {
                written: len,
                synced: if durable { len } else { 0 },
                syncing: false,
                dir: if durable {
                    None
                } else {
                    path.parent().map(Path::to_path_buf)
                },
                failed: None,
                retired: false,
            }),
            synced_cond: Condvar::new(),
            queued: AtomicBool::new(false),
        })
    }

    /// Tracks a file just created, `len` bytes long, none of them synced, whose directory
    /// entry the caller makes durable itself (the index commit that names a new log syncs
    /// its directory before any append): the first sync is one `fdatasync`, with no
    /// directory sync.
    pub fn named_by_commit(file: Arc<LazyFile>, path: &Path, len: u64) -> Arc<FileSync> {
        let sync = FileSync::new(file, path, len, false);
        sync.lock().dir = None;
        sync
    }

    fn lock(&self) -> MutexGuard<'_, SyncState> {
        // The state is plain numbers updated in single steps: a panic elsewhere cannot
        // leave it half-changed.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records that the file is now written up to `end` (called after each append).
    pub fn appended(&self, end: u64) {
        let mut st = self.lock();
        st.written = st.written.max(end);
    }

    /// End of the last append.
    pub fn written(&self) -> u64 {
        self.lock().written
    }

    /// Whether everything appended so far is on stable storage.
    pub fn is_clean(&self) -> bool {
        let st = self.lock();
        st.retired || st.synced >= st.written
    }

    /// The file's content is now durable elsewhere or no longer needed: present and
    /// future waits return at once, and no more syncs are made.
    pub fn retire(&self) {
        let mut st = self.lock();
        st.retired = true;
        drop(st);
        self.synced_cond.notify_all();
    }

    /// Returns once the file is on stable storage up to `end` (group commit: joins a
    /// running sync, or runs one covering every append made so far).
    pub fn wait_durable(&self, end: u64) -> Result<()> {
        let mut st = self.lock();
        loop {
            if st.retired || st.synced >= end {
                return Ok(());
            }
            if let Some(why) = &st.failed {
                return Err(Error::internal(format!(
                    "{} could not be synced earlier ({why}); its unsynced changes may be lost",
                    self.path.display()
                )));
            }
            if st.syncing {
                st = self.synced_cond.wait(st).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            st.syncing = true;
            let target = st.written;
            let dir = st.dir.take();
            drop(st);
            let result = self.sync_file(dir.as_deref());
            st = self.lock();
            st.syncing = false;
            match result {
                Ok(()) => st.synced = st.synced.max(target),
                Err(e) => {
                    log::error!("{e}");
                    st.failed = Some(e.message().to_string());
                }
            }
            self.synced_cond.notify_all();
        }
    }

    /// Syncs everything appended so far.
    pub fn sync_written(&self) -> Result<()> {
        let end = self.written();
        self.wait_durable(end)
    }

    fn sync_file(&self, dir: Option<&Path>) -> Result<()> {
        let file = match self.file.get() {
            Ok(file) => file,
            // Unlinked after it was retired (sealed, dropped): nothing to sync. The
            // descriptor had been closed to make room, so the path was all there was.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && self.lock().retired => {
                return Ok(());
            }
            Err(e) => return Err(Error::io(format!("opening {}", self.path.display()), e)),
        };
        file.sync_data()
            .map_err(|e| Error::io(format!("syncing {}", self.path.display()), e))?;
        dir.map_or(Ok(()), fsync_dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    #[test]
    fn waits_return_once_synced_and_concurrent_writers_share_rounds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.log");
        let file = LazyFile::new(&path, std::fs::File::create(&path).unwrap());
        let sync = FileSync::new(file.clone(), &path, 0, false);
        assert!(sync.is_clean());
        let threads: Vec<_> = (0..8u64)
            .map(|i| {
                let (file, sync) = (file.clone(), sync.clone());
                std::thread::spawn(move || {
                    for j in 0..50u64 {
                        let at = (i * 50 + j) * 8;
                        let handle = file.get().unwrap();
                        handle.write_all_at(&at.to_le_bytes(), at).unwrap();
                        sync.appended(at + 8);
                        sync.wait_durable(at + 8).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(sync.is_clean());
        assert_eq!(sync.written(), 400 * 8);
    }

    #[test]
    fn a_retired_file_never_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.log");
        let file = LazyFile::new(&path, std::fs::File::create(&path).unwrap());
        let sync = FileSync::new(file, &path, 0, true);
        sync.appended(100);
        assert!(!sync.is_clean());
        sync.retire();
        assert!(sync.is_clean());
        sync.wait_durable(100).unwrap();
    }
}
