//! A bound on the file descriptors logs hold.
//!
//! Every open or late log and every edit log is appended to for as long as its entry or
//! block lives, so holding each one's descriptor would make the number of entries and
//! edited blocks the number of open files — and past the process limit writes fail with
//! "Too many open files" and a restart cannot open the store. Instead a log's file is a
//! [`LazyFile`]: its descriptor is kept in a process-wide set of open files with a bound
//! ([`set_open_file_limit`]), closed when the set needs the room (the least recently used, by the clock rule) and
//! opened again by path
//! on the next use. Sealed blocks hold no descriptor at all (they are mapped, and a mapping
//! outlives its descriptor).
//!
//! Syncing through a descriptor opened after the write is sound: `fdatasync` flushes the
//! file's dirty pages whoever wrote them, and a write-back error nobody has seen yet is
//! reported to a descriptor opened after it happened.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// The default bound: well under the common soft limit of 1,024 descriptors, leaving the
/// rest to connections, mapped blocks being opened, directories being synced.
pub const DEFAULT_OPEN_FILE_LIMIT: usize = 256;

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// Uses of a log file that found its descriptor open, and that had to open it again.
static HITS: AtomicU64 = AtomicU64::new(0);
static REOPENS: AtomicU64 = AtomicU64::new(0);

/// What the open set holds and how often it answered (`/metrics`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenFileStats {
    /// Log files holding a descriptor now.
    pub open: u64,
    /// How many may ([`set_open_file_limit`]).
    pub limit: u64,
    /// Uses that found the descriptor open.
    pub hits: u64,
    /// Uses that opened the file again (it had been closed to make room).
    pub reopens: u64,
}

/// The process's open set, as of now.
pub fn open_file_stats() -> OpenFileStats {
    let set = open_set();
    OpenFileStats {
        open: set.open.len() as u64,
        limit: set.limit as u64,
        hits: HITS.load(Ordering::Relaxed),
        reopens: REOPENS.load(Ordering::Relaxed),
    }
}

static OPEN_FILES: Mutex<OpenSet> = Mutex::new(OpenSet {
    limit: DEFAULT_OPEN_FILE_LIMIT,
    open: BTreeMap::new(),
    hand: 0,
});

/// The process-wide set of log files with an open descriptor, evicted by the clock
/// (second-chance) rule: a use only sets the file's `used` bit, without this lock, so an
/// append costs no global lock; when room is needed the hand sweeps the set in id order,
/// clearing bits, and closes the first file not used since its last sweep — close to
/// least-recently-used.
struct OpenSet {
    limit: usize,
    /// Open files by id.
    open: BTreeMap<u64, Weak<LazyFile>>,
    /// The id the next sweep starts from.
    hand: u64,
}

fn open_set() -> MutexGuard<'static, OpenSet> {
    // Plain bookkeeping updated in single steps: a panic elsewhere leaves it consistent.
    OPEN_FILES.lock().unwrap_or_else(|p| p.into_inner())
}

impl OpenSet {
    /// Registers `file` as open and returns the files to close to stay within the bound
    /// (never `file` itself).
    fn opened(&mut self, file: &Arc<LazyFile>) -> Vec<Weak<LazyFile>> {
        self.open.insert(file.id, Arc::downgrade(file));
        let mut victims = Vec::new();
        // Two turns of the hand clear every bit, so a victim is always found.
        let mut steps = 2 * self.open.len() + 1;
        while self.open.len() > self.limit.max(1) && steps > 0 {
            steps -= 1;
            let next = self
                .open
                .range(self.hand..)
                .next()
                .or_else(|| self.open.iter().next())
                .map(|(id, weak)| (*id, weak.clone()));
            let Some((id, weak)) = next else {
                break;
            };
            self.hand = id + 1;
            let Some(candidate) = weak.upgrade() else {
                self.open.remove(&id);
                continue;
            };
            if id == file.id || candidate.used.swap(false, Ordering::Relaxed) {
                continue;
            }
            self.open.remove(&id);
            victims.push(weak);
        }
        victims
    }
}

/// Sets how many log files may hold a descriptor at once (at least 1). Files over the new
/// bound are closed as they are next used.
pub fn set_open_file_limit(limit: usize) {
    open_set().limit = limit.max(1);
}

/// A file opened on demand: its descriptor lives in the process-wide open set, and is opened
/// again by path (read and write, never truncated) when it was closed to make room.
pub struct LazyFile {
    id: u64,
    path: PathBuf,
    /// Device, inode and birth time of the file taken over: a path opened again must
    /// still name it (an entry removed and re-created has new files under the same names,
    /// and a freed inode number is soon reused; the birth time tells them apart).
    identity: Option<Identity>,
    slot: Mutex<Option<Arc<File>>>,
    /// Whether it is opened again for writing (a replica's files are only read).
    writable: bool,
    /// Used since the clock hand last passed (see `OpenSet`).
    used: AtomicBool,
}

type Identity = (u64, u64, Option<std::time::SystemTime>);

fn identity(file: &File) -> Option<Identity> {
    use std::os::unix::fs::MetadataExt;
    // Birth time where the file system keeps one (statx); else device and inode alone.
    file.metadata()
        .ok()
        .map(|m| (m.dev(), m.ino(), m.created().ok()))
}

impl LazyFile {
    /// Takes over `file`, open at `path`.
    pub fn new(path: &Path, file: File) -> Arc<LazyFile> {
        Self::with_mode(path, file, true)
    }

    /// Takes over `file`, open read-only at `path`, and opens it read-only again when
    /// its descriptor was closed (a replica never writes in the directory it follows).
    pub fn new_read_only(path: &Path, file: File) -> Arc<LazyFile> {
        Self::with_mode(path, file, false)
    }

    fn with_mode(path: &Path, file: File, writable: bool) -> Arc<LazyFile> {
        let lazy = Arc::new(LazyFile {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            path: path.to_path_buf(),
            identity: identity(&file),
            slot: Mutex::new(Some(Arc::new(file))),
            writable,
            used: AtomicBool::new(true),
        });
        lazy.opened();
        lazy
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open file, opened again if its descriptor was closed. A caller may keep the
    /// handle (a reader outliving an unlink): the descriptor closes when the last one goes.
    /// A file that was removed (or replaced by another of the same name) while closed is
    /// `NotFound`.
    pub fn get(self: &Arc<Self>) -> std::io::Result<Arc<File>> {
        self.used.store(true, Ordering::Relaxed);
        if let Some(file) = self.slot().as_ref() {
            HITS.fetch_add(1, Ordering::Relaxed);
            return Ok(file.clone());
        }
        REOPENS.fetch_add(1, Ordering::Relaxed);
        let file = OpenOptions::new()
            .read(true)
            .write(self.writable)
            .open(&self.path)?;
        if identity(&file) != self.identity {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "the file was removed (another file has its name now)",
            ));
        }
        let file = {
            let mut slot = self.slot();
            if let Some(open) = slot.as_ref() {
                // Another thread opened it meanwhile: keep one descriptor.
                return Ok(open.clone());
            }
            slot.insert(Arc::new(file)).clone()
        };
        self.opened();
        Ok(file)
    }

    fn slot(&self) -> MutexGuard<'_, Option<Arc<File>>> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn opened(self: &Arc<Self>) {
        let victims = open_set().opened(self);
        // Closed outside the set's lock; a victim in use elsewhere keeps its handle.
        for victim in victims.iter().filter_map(Weak::upgrade) {
            victim.slot().take();
        }
    }
}

impl Drop for LazyFile {
    fn drop(&mut self) {
        open_set().open.remove(&self.id);
    }
}

/// Raises the soft limit on open descriptors to the hard limit, as databases do (a
/// user's shell often starts at 1,024 while the hard limit is far higher). Returns the soft
/// limit before and after.
pub fn raise_descriptor_limit() -> std::io::Result<(u64, u64)> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed by pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let before = limit.rlim_cur;
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        limit = raised;
    }
    Ok((before, limit.rlim_cur))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::FileExt;

    #[test]
    fn descriptors_stay_within_the_bound_and_files_reopen_on_use() {
        let dir = tempfile::tempdir().unwrap();
        // Other tests of this process use logs too: measure relative to them.
        set_open_file_limit(4);
        let files: Vec<Arc<LazyFile>> = (0..12)
            .map(|i| {
                let path = dir.path().join(format!("{i}"));
                let mut f = File::create(&path).unwrap();
                f.write_all(b"start").unwrap();
                LazyFile::new(
                    &path,
                    OpenOptions::new()
                        .read(true)
                        .write(true)
                        .open(&path)
                        .unwrap(),
                )
            })
            .collect();
        let open = files.iter().filter(|f| f.slot().is_some()).count();
        assert!(open <= 4, "{open} open");
        // Every file still works: written through a reopened descriptor, read back.
        for (i, f) in files.iter().enumerate() {
            f.get()
                .unwrap()
                .write_all_at(format!("{i}").as_bytes(), 5)
                .unwrap();
        }
        for (i, f) in files.iter().enumerate() {
            let text = std::fs::read_to_string(f.path()).unwrap();
            assert_eq!(text, format!("start{i}"));
        }
        assert!(files.iter().filter(|f| f.slot().is_some()).count() <= 4);
        // A closed file whose name now belongs to another is not opened in its place.
        let first = &files[0];
        first.slot().take();
        std::fs::remove_file(first.path()).unwrap();
        std::fs::write(first.path(), b"someone else").unwrap();
        let err = first.get().unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
        set_open_file_limit(DEFAULT_OPEN_FILE_LIMIT);
    }
}
