//! The local cache of tiered blocks' frames (`<data>/.remote-cache/`): one sparse file per
//! tiered block read, as long as the block file, holding its header and metadata from the
//! start and each frame once fetched. A block is mapped from that file as if it were
//! local; the mapping asks [`CachedObject`] for a frame before its first read, and a miss
//! is one ranged GET of that frame (with read-ahead: the next few missing frames too).
//!
//! Bounded by bytes (`--remote-cache-size`): past the budget, whole files are dropped,
//! least recently used first. A mapping of a dropped file keeps working (the file is only
//! unlinked). The cache is emptied at every start: what it holds is a copy.
//!
//! In memory (`--remote-cache-in-memory`), each copy is an anonymous file
//! (`memfd_create`) instead, mapped through `/proc/self/fd`: the same sparse layout and
//! budget, no local disk written, and its memory freed once it is dropped and no mapping
//! is left.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::storage::format::block::BLOCK_MAGIC;
use crate::storage::format::block_meta::FrameInfo;
use crate::storage::format::frames::FrameFetch;
use crate::storage::format::index::RemoteLocation;
use crate::storage::remote::connection::Remote;
use crate::storage::remote::stub::read_stub;

/// A read-ahead request fetches up to this many frames (more while it is under
/// [`READ_AHEAD_SMALL`]).
const READ_AHEAD_FRAMES: usize = 4;
/// At most this many bytes are fetched by one read-ahead request, and a block whose
/// frames are no larger is prefetched whole.
const READ_AHEAD_BYTES: u64 = 8 << 20;
/// Frames are read ahead past [`READ_AHEAD_FRAMES`] while the request is smaller than
/// this: a sealed log's frames are single records, some of a few hundred bytes.
const READ_AHEAD_SMALL: u64 = 1 << 20;
/// The most bytes between two frames that a read-ahead fetches along (the operation
/// headers between a sealed log's frames).
const READ_AHEAD_GAP: u64 = 4096;

/// What the cache holds and how often it answered (`/metrics`).
#[derive(Debug, Clone, Copy, Default)]
pub struct FrameCacheStats {
    /// Bytes of frames held.
    pub used: u64,
    /// The budget.
    pub budget: u64,
    /// Frame reads the cache answered.
    pub hits: u64,
    /// Frame reads that fetched.
    pub misses: u64,
}

/// Which frames of a copy are present: each one fetched, or all of them at once.
#[derive(Default)]
struct Presence {
    frames: Vec<bool>,
    all: bool,
}

struct Shared {
    dir: PathBuf,
    /// Copies are anonymous files in memory, not files in `dir`.
    in_memory: bool,
    budget: u64,
    state: Mutex<State>,
    hits: AtomicU64,
    misses: AtomicU64,
}

#[derive(Default)]
struct State {
    objects: HashMap<String, Arc<CachedObject>>,
    used: u64,
    clock: u64,
}

impl Shared {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // Nothing a panic could leave half-done: keep serving after one.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Removes a dropped copy's file (an anonymous one goes with its last descriptor).
    fn unlink(&self, object: &CachedObject) {
        if !self.in_memory {
            let _ = std::fs::remove_file(&object.path);
        }
    }

    /// Counts `added` bytes fetched into `current`, then drops the least recently used
    /// other files while the cache is over its budget. Bytes fetched into a copy the
    /// cache dropped meanwhile (a reader still holds it) are not counted: they went with
    /// it, and a newer copy of the same object holds only its own.
    fn account(&self, current: &CachedObject, added: u64) {
        let mut st = self.state();
        st.clock += 1;
        let now = st.clock;
        match st.objects.get(&current.id) {
            Some(object) if std::ptr::eq(object.as_ref(), current) => {
                object.last_use.store(now, Ordering::Relaxed)
            }
            _ => return,
        }
        st.used += added;
        while st.used > self.budget {
            let victim = st
                .objects
                .iter()
                .filter(|(id, _)| **id != current.id)
                .min_by_key(|(_, o)| o.last_use.load(Ordering::Relaxed))
                .map(|(id, _)| id.clone());
            let Some(id) = victim else { break };
            if let Some(object) = st.objects.remove(&id) {
                st.used = st.used.saturating_sub(object.bytes.load(Ordering::Relaxed));
                self.unlink(&object);
            }
        }
    }
}

/// The frame cache of every tiered block.
pub struct FrameCache {
    shared: Arc<Shared>,
}

/// One tiered block's sparse copy, and which of its frames it holds.
pub struct CachedObject {
    id: String,
    path: PathBuf,
    file: File,
    remote: Arc<Remote>,
    key: String,
    /// Where the frames end (the metadata's offset).
    frames_end: u64,
    present: Mutex<Presence>,
    bytes: AtomicU64,
    last_use: AtomicU64,
    shared: Weak<Shared>,
}

impl FrameCache {
    /// A cache in `dir` (emptied now), or `in_memory`, of at most `budget` bytes of
    /// frames.
    pub fn new(dir: &Path, budget: u64, in_memory: bool) -> Result<FrameCache> {
        if dir.exists() {
            std::fs::remove_dir_all(dir)
                .map_err(|e| Error::io(format!("emptying {}", dir.display()), e))?;
        }
        if !in_memory {
            std::fs::create_dir_all(dir)
                .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        }
        Ok(FrameCache {
            shared: Arc::new(Shared {
                dir: dir.to_path_buf(),
                in_memory,
                budget,
                state: Mutex::new(State::default()),
                hits: AtomicU64::new(0),
                misses: AtomicU64::new(0),
            }),
        })
    }

    /// A cache in memory only, touching no directory (a replica's: the data directory
    /// is its writer's).
    pub fn in_memory(budget: u64) -> FrameCache {
        FrameCache {
            shared: Arc::new(Shared {
                dir: PathBuf::new(),
                in_memory: true,
                budget,
                state: Mutex::new(State::default()),
                hits: AtomicU64::new(0),
                misses: AtomicU64::new(0),
            }),
        }
    }

    /// The sparse copy of the tiered block whose stub is `stub`, made now if the cache
    /// has none: its path, to be mapped, and what fetches its frames.
    pub fn open(
        &self,
        remote: &Arc<Remote>,
        stub: &Path,
        location: &RemoteLocation,
    ) -> Result<(PathBuf, Arc<CachedObject>)> {
        let id = object_id(&location.remote, &location.key);
        let mut st = self.shared.state();
        st.clock += 1;
        let now = st.clock;
        if let Some(object) = st.objects.get(&id) {
            object.last_use.store(now, Ordering::Relaxed);
            return Ok((object.path.clone(), object.clone()));
        }
        let (header, tail) = read_stub(stub)?;
        if header.location != *location {
            return Err(Error::internal(format!(
                "{} names object '{}', the index '{}'",
                stub.display(),
                header.location.key,
                location.key
            )));
        }
        let (path, file) = if self.shared.in_memory {
            anonymous_file(&id)?
        } else {
            let path = self.shared.dir.join(format!("{id}.blk"));
            let file = File::options()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&path)
                .map_err(|e| Error::io(format!("creating {}", path.display()), e))?;
            (path, file)
        };
        let io = |what: &str, e| Error::io(format!("{what} {}", path.display()), e);
        file.set_len(header.size).map_err(|e| io("sizing", e))?;
        file.write_all_at(BLOCK_MAGIC, 0)
            .and_then(|()| file.write_all_at(&tail, location.meta_offset))
            .map_err(|e| io("writing", e))?;
        let object = Arc::new(CachedObject {
            id: id.clone(),
            path: path.clone(),
            file,
            remote: remote.clone(),
            key: location.key.clone(),
            frames_end: location.meta_offset,
            present: Mutex::new(Presence::default()),
            bytes: AtomicU64::new(0),
            last_use: AtomicU64::new(now),
            shared: Arc::downgrade(&self.shared),
        });
        st.objects.insert(id, object.clone());
        Ok((path, object))
    }

    /// Drops the copy of the object `key` on `remote`, which was deleted.
    pub fn forget(&self, remote: &str, key: &str) {
        let mut st = self.shared.state();
        if let Some(object) = st.objects.remove(&object_id(remote, key)) {
            st.used = st.used.saturating_sub(object.bytes.load(Ordering::Relaxed));
            self.shared.unlink(&object);
        }
    }

    /// What the cache holds and how often it answered.
    pub fn stats(&self) -> FrameCacheStats {
        FrameCacheStats {
            used: self.shared.state().used,
            budget: self.shared.budget,
            hits: self.shared.hits.load(Ordering::Relaxed),
            misses: self.shared.misses.load(Ordering::Relaxed),
        }
    }
}

/// An anonymous file in memory named after `id`, and the path that opens it (for as long
/// as the returned file is open).
fn anonymous_file(id: &str) -> Result<(PathBuf, File)> {
    use std::os::fd::FromRawFd;
    let name = std::ffi::CString::new(format!("halflife-cache-{id}"))
        .map_err(|e| Error::internal(format!("naming a cache file: {e}")))?;
    // SAFETY: `name` is a valid NUL-terminated string; the descriptor returned is new and
    // owned by nothing else, so the `File` takes sole ownership of it.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(Error::io(
            "creating an in-memory frame cache file",
            std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: see above.
    let file = unsafe { File::from_raw_fd(fd) };
    Ok((PathBuf::from(format!("/proc/self/fd/{fd}")), file))
}

/// The cache's name of an object: a digest of remote and key (keys may hold `/`).
fn object_id(remote: &str, key: &str) -> String {
    let digest = Sha256::new()
        .chain_update(remote.as_bytes())
        .chain_update([0])
        .chain_update(key.as_bytes())
        .finalize();
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

impl FrameFetch for CachedObject {
    fn ensure(&self, frames: &[FrameInfo], index: usize, read_ahead: bool) -> Result<()> {
        let Some(shared) = self.shared.upgrade() else {
            return Err(Error::internal("the store is closing"));
        };
        // One fetch at a time per block: a second reader of the same frame waits for the
        // first one's bytes instead of fetching them again.
        let mut guard = self.present.lock().unwrap_or_else(|p| p.into_inner());
        if guard.all {
            shared.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let present = &mut guard.frames;
        if present.len() != frames.len() {
            present.resize(frames.len(), false);
        }
        if present[index] {
            shared.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        shared.misses.fetch_add(1, Ordering::Relaxed);
        let start = frames[index].offset;
        let mut end = start + frames[index].stored_len;
        let mut last = index;
        if read_ahead {
            // Frames of a log sealed in place have its operations' headers between them:
            // a small gap is fetched along rather than costing a request per record.
            while last + 1 < frames.len()
                && (last + 1 - index < READ_AHEAD_FRAMES || end - start < READ_AHEAD_SMALL)
                && !present[last + 1]
                && (end..=end + READ_AHEAD_GAP).contains(&frames[last + 1].offset)
                && frames[last + 1].offset + frames[last + 1].stored_len - start <= READ_AHEAD_BYTES
            {
                last += 1;
                end = frames[last].offset + frames[last].stored_len;
            }
        }
        let bytes = self.remote.fetch(&self.key, start, end)?;
        self.file.write_all_at(&bytes, start).map_err(|e| {
            Error::io(
                format!("writing the frame cache {}", self.path.display()),
                e,
            )
        })?;
        for flag in &mut present[index..=last] {
            *flag = true;
        }
        drop(guard);
        self.bytes.fetch_add(end - start, Ordering::Relaxed);
        shared.account(self, end - start);
        Ok(())
    }
}

impl CachedObject {
    /// Fetches every frame of the block in one request when they are small enough
    /// ([`READ_AHEAD_BYTES`]) and none is here yet: the prefetch of a block a query will
    /// stream next. A failure is left for the read that needs the frames to report.
    pub fn fetch_all(&self) {
        let size = self.frames_end.saturating_sub(BLOCK_MAGIC.len() as u64);
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        if size == 0 || size > READ_AHEAD_BYTES {
            return;
        }
        let mut guard = self.present.lock().unwrap_or_else(|p| p.into_inner());
        if guard.all || guard.frames.iter().any(|f| *f) {
            return;
        }
        let start = BLOCK_MAGIC.len() as u64;
        let Ok(bytes) = self.remote.fetch(&self.key, start, self.frames_end) else {
            return;
        };
        if self.file.write_all_at(&bytes, start).is_err() {
            return;
        }
        guard.all = true;
        drop(guard);
        self.bytes.fetch_add(size, Ordering::Relaxed);
        shared.account(self, size);
    }
}
