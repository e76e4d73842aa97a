//! A bound on the file descriptors logs hold.
//!
//! Every open or late log and every edit log is appended to for as long as its entry or
//! block lives, so holding each one's descriptor would make the number of entries and
//! edited blocks the number of open files — and past the process limit writes fail with
//! "Too many open files" and a restart cannot open the store. Instead a log's file is a
//! [`LazyFile`]: its descriptor is kept in a process-wide LRU of open files with a bound
//! ([`set_open_file_limit`]), closed when the LRU needs the room and opened again by path
//! on the next use. Sealed blocks hold no descriptor at all (they are mapped, and a mapping
//! outlives its descriptor).
//!
//! Syncing through a descriptor opened after the write is sound: `fdatasync` flushes the
//! file's dirty pages whoever wrote them, and a write-back error nobody has seen yet is
//! reported to a descriptor opened after it happened.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// The default bound: well under the common soft limit of 1,024 descriptors, leaving the
/// rest to connections, mapped blocks being opened, directories being synced.
pub const DEFAULT_OPEN_FILE_LIMIT: usize = 256;

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

static OPEN_FILES: Mutex<Lru> = Mutex::new(Lru {
    limit: DEFAULT_OPEN_FILE_LIMIT,
    tick: 0,
    by_id: None,
    by_tick: BTreeMap::new(),
});

/// The process-wide LRU of log files with an open descriptor.
struct Lru {
    limit: usize,
    tick: u64,
    /// Open files: id → (last use, the file). `None` until the first file (a `HashMap`
    /// cannot be built in a `static`).
    by_id: Option<HashMap<u64, (u64, Weak<LazyFile>)>>,
    /// Last use → id, oldest first.
    by_tick: BTreeMap<u64, u64>,
}

fn lru() -> MutexGuard<'static, Lru> {
    // Plain bookkeeping updated in single steps: a panic elsewhere leaves it consistent.
    OPEN_FILES.lock().unwrap_or_else(|p| p.into_inner())
}

impl Lru {
    /// Marks `file` as just used (registering it if it is new) and returns the files to
    /// close to stay within the bound (never `file` itself).
    fn touch(&mut self, file: &Arc<LazyFile>) -> Vec<Weak<LazyFile>> {
        self.tick += 1;
        let tick = self.tick;
        let by_id = self.by_id.get_or_insert_with(HashMap::new);
        if let Some((old, _)) = by_id.insert(file.id, (tick, Arc::downgrade(file))) {
            self.by_tick.remove(&old);
        }
        self.by_tick.insert(tick, file.id);
        let mut victims = Vec::new();
        while by_id.len() > self.limit.max(1) {
            let Some((_, id)) = self.by_tick.pop_first() else {
                break;
            };
            if let Some((_, weak)) = by_id.remove(&id) {
                victims.push(weak);
            }
        }
        victims
    }

    fn forget(&mut self, id: u64) {
        if let Some((tick, _)) = self.by_id.as_mut().and_then(|m| m.remove(&id)) {
            self.by_tick.remove(&tick);
        }
    }
}

/// Sets how many log files may hold a descriptor at once (at least 1). Files over the new
/// bound are closed as they are next used.
pub fn set_open_file_limit(limit: usize) {
    lru().limit = limit.max(1);
}

/// A file opened on demand: its descriptor lives in the process-wide LRU, and is opened
/// again by path (read and write, never truncated) when it was closed to make room.
pub struct LazyFile {
    id: u64,
    path: PathBuf,
    /// Device, inode and birth time of the file taken over: a path opened again must
    /// still name it (an entry removed and re-created has new files under the same names,
    /// and a freed inode number is soon reused; the birth time tells them apart).
    identity: Option<Identity>,
    slot: Mutex<Option<Arc<File>>>,
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
        let lazy = Arc::new(LazyFile {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            path: path.to_path_buf(),
            identity: identity(&file),
            slot: Mutex::new(Some(Arc::new(file))),
        });
        lazy.touched();
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
        if let Some(file) = self.slot().as_ref() {
            let file = file.clone();
            self.touched();
            return Ok(file);
        }
        let file = OpenOptions::new().read(true).write(true).open(&self.path)?;
        if identity(&file) != self.identity {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "the file was removed (another file has its name now)",
            ));
        }
        let file = Arc::new(file);
        let file = {
            let mut slot = self.slot();
            // Another thread may have opened it meanwhile: keep one descriptor.
            slot.get_or_insert(file).clone()
        };
        self.touched();
        Ok(file)
    }

    fn slot(&self) -> MutexGuard<'_, Option<Arc<File>>> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn touched(self: &Arc<Self>) {
        let victims = lru().touch(self);
        // Closed outside the LRU's lock; a victim in use elsewhere keeps its handle.
        for victim in victims.iter().filter_map(Weak::upgrade) {
            victim.slot().take();
        }
    }
}

impl Drop for LazyFile {
    fn drop(&mut self) {
        lru().forget(self.id);
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
