//! Durability of acknowledged changes: the sync mode, group commit per file, the changes a
//! caller still has to wait for, and the interval syncer.
//!
//! Appends to the logs (open, late, edit logs) are one `pwrite` under the entry lock. What
//! happens next is the [`Durability`] policy's: in `always` mode the append yields a
//! [`Pending`] the caller waits on *after* releasing the lock (so writers of one file share
//! syncs); in `interval` mode the file is queued for the [`Syncer`]; in `never` mode nothing.
//!
//! Files: `mode.rs` (the sync modes), `file_sync.rs` (group commit for one append-only
//! file), `syncer.rs` (the interval syncer), `open_files.rs` (the bound on descriptors logs
//! hold), `fsutil.rs` (durable file-system steps: atomic replace, durable directories,
//! fenced writes and removals). The file formats (`format/`) build on this folder, never
//! the other way round.

mod file_sync;
pub(crate) mod fsutil;
mod mode;
pub mod open_files;
mod syncer;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

pub use file_sync::FileSync;
pub use mode::SyncMode;
pub use open_files::LazyFile;
pub use syncer::Syncer;

use crate::error::Result;

/// The sync mode of a store and, in `interval` mode, the files written since the
/// syncer's last round.
pub struct Durability {
    mode: SyncMode,
    dirty: Mutex<Vec<Arc<FileSync>>>,
}

impl Durability {
    /// A policy for `mode`.
    pub fn new(mode: SyncMode) -> Arc<Durability> {
        Arc::new(Durability {
            mode,
            dirty: Mutex::new(Vec::new()),
        })
    }

    /// The mode.
    pub fn mode(&self) -> SyncMode {
        self.mode
    }

    /// What the caller of an append that ended at `end` of `file` must wait for before
    /// answering: the sync itself in `always` mode, nothing otherwise (in `interval` mode
    /// the file is queued for the syncer).
    pub fn after_append(&self, file: &Arc<FileSync>, end: u64) -> Pending {
        match self.mode {
            SyncMode::Always => Pending::on(file, end),
            SyncMode::Interval(_) => {
                if !file.queued.swap(true, Ordering::AcqRel) {
                    self.dirty
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(file.clone());
                }
                Pending::none()
            }
            SyncMode::Never => Pending::none(),
        }
    }

    /// One syncer round: syncs every file queued since the last one. A failure is logged
    /// and poisons that file only (see [`FileSync::wait_durable`]).
    pub fn sync_dirty(&self) -> usize {
        let files = std::mem::take(&mut *self.dirty.lock().unwrap_or_else(|p| p.into_inner()));
        for file in &files {
            // Cleared before the sync: an append during it queues the file again.
            file.queued.store(false, Ordering::Release);
            if let Err(e) = file.sync_written() {
                log::error!("interval sync: {e}");
            }
        }
        files.len()
    }
}

/// Appends whose sync a caller still has to wait for before acknowledging them: at most
/// one wait per file (the furthest offset), so a batch costs one sync per file it touched.
#[must_use = "a change is durable only once its Pending is waited on"]
#[derive(Default)]
pub struct Pending {
    waits: Vec<(Arc<FileSync>, u64)>,
}

impl Pending {
    /// Nothing to wait for.
    pub fn none() -> Pending {
        Pending::default()
    }

    /// Wait until `file` is synced up to `end`.
    pub fn on(file: &Arc<FileSync>, end: u64) -> Pending {
        Pending {
            waits: vec![(file.clone(), end)],
        }
    }

    /// Adds what `other` waits for.
    pub fn add(&mut self, other: Pending) {
        for (file, end) in other.waits {
            match self.waits.iter_mut().find(|(f, _)| Arc::ptr_eq(f, &file)) {
                Some((_, known)) => *known = (*known).max(end),
                None => self.waits.push((file, end)),
            }
        }
    }

    /// Whether there is nothing to wait for.
    pub fn is_empty(&self) -> bool {
        self.waits.is_empty()
    }

    /// Waits until every append is on stable storage.
    pub fn wait(self) -> Result<()> {
        self.waits
            .iter()
            .try_for_each(|(file, end)| file.wait_durable(*end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::time::Duration;

    fn tracked(dir: &std::path::Path, name: &str) -> Arc<FileSync> {
        let path = dir.join(name);
        let file = LazyFile::new(&path, File::create(&path).unwrap());
        FileSync::new(file, &path, 0, true)
    }

    #[test]
    fn always_waits_once_per_file_and_interval_queues_for_the_syncer() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (tracked(dir.path(), "a"), tracked(dir.path(), "b"));
        let always = Durability::new(SyncMode::Always);
        let mut pending = Pending::none();
        for end in [10, 30, 20] {
            a.appended(end);
            pending.add(always.after_append(&a, end));
        }
        b.appended(5);
        pending.add(always.after_append(&b, 5));
        assert_eq!(pending.waits.len(), 2);
        assert_eq!(pending.waits[0].1, 30);
        pending.wait().unwrap();
        assert!(a.is_clean() && b.is_clean());

        let interval = Durability::new(SyncMode::Interval(Duration::from_millis(5)));
        a.appended(40);
        assert!(interval.after_append(&a, 40).is_empty());
        assert!(interval.after_append(&a, 40).is_empty());
        assert!(!a.is_clean());
        assert_eq!(interval.sync_dirty(), 1, "queued once");
        assert!(a.is_clean());

        let never = Durability::new(SyncMode::Never);
        a.appended(50);
        assert!(never.after_append(&a, 50).is_empty());
        assert_eq!(never.sync_dirty(), 0);
        assert!(!a.is_clean());
    }
}
