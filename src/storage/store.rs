//! The store: a data directory of buckets.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::Path;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::error::{Error, Result};
use crate::storage::bucket::{Bucket, BucketInfo, remove_trash, trash_name};
use crate::storage::cache::{BlockCache, CacheLimits, CacheStats};
use crate::storage::config::Config;
use crate::storage::entry::EntryContext;
use crate::storage::merge::Merger;
use crate::storage::names::{validate_bucket_name, validate_system_bucket_name};
use crate::storage::observer::{ChangeObserver, Observers};
use crate::storage::remote::Remotes;
use crate::storage::sealer::{SealQueue, Sealer};
use crate::storage::settings::BucketSettings;
use crate::storage::storage_cap::StorageCap;
use crate::storage::sync::fsutil::{create_dirs_durably, fsync_dir};
use crate::storage::sync::{Durability, Syncer};

/// Name of the lock file in the data directory.
pub const LOCK_FILE: &str = ".lock";

/// Takes the data directory's lock file, refusing a second opener (a server, a maintenance command, a library user) of the same directory.
pub(crate) fn lock_data_dir(path: &std::path::Path, patience: std::time::Duration) -> Result<File> {
    std::fs::create_dir_all(path)
        .map_err(|e| Error::io(format!("creating data directory {}", path.display()), e))?;
    let lock_path = path.join(LOCK_FILE);
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| Error::io(format!("opening {}", lock_path.display()), e))?;
    // A lock found taken is asked again for a moment before the refusal: a process that
    // just closed the directory may still share its lock with a child it forked a moment
    // before (the descriptor is closed on exec, not at fork), and a server stopping takes a
    // moment to let go.
    let deadline = std::time::Instant::now() + patience;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(Error::conflict(format!(
                    "data directory {} is in use by another halflife process (it holds {}); stop it first",
                    path.display(),
                    lock_path.display()
                )));
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(Error::io(format!("locking {}", lock_path.display()), e));
            }
        }
    }
}

/// Returns the memory freed while opening to the system. The entries open on several
/// threads (`bucket/open.rs`), and glibc gives each allocating thread an arena of its own
/// that keeps what the thread freed — the log replays' working memory, some 40 MiB on a
/// 1 GB store of 100 entries — resident after the threads are gone.
fn give_back_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory of the allocator's arenas; it has no
    // preconditions and touches no memory in use.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The bucket directories of a data directory, by name. A replica started before its
/// writer created the directory finds none (`missing_is_empty`).
pub(crate) fn bucket_dirs(
    data: &Path,
    missing_is_empty: bool,
) -> Result<Vec<(String, std::path::PathBuf)>> {
    let listing = match std::fs::read_dir(data) {
        Ok(listing) => listing,
        Err(e) if missing_is_empty && e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Vec::new());
        }
        Err(e) => return Err(Error::io(format!("listing {}", data.display()), e)),
    };
    let mut dirs = Vec::new();
    for item in listing.flatten() {
        let name = item.file_name().to_string_lossy().into_owned();
        let valid =
            validate_bucket_name(&name).is_ok() || validate_system_bucket_name(&name).is_ok();
        if valid && item.file_type().is_ok_and(|t| t.is_dir()) {
            dirs.push((name, item.path()));
        }
    }
    Ok(dirs)
}

/// How long a data directory's lock is waited for before it counts as held.
pub(crate) const LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_secs(1);

/// What the entries of one bucket share: the store's caches, the frame size, the overlap
/// bound.
fn entry_context(
    config: &Config,
    durability: &Arc<Durability>,
    cache: &Arc<BlockCache>,
    observer: &Arc<Observers>,
    remotes: &Arc<Remotes>,
    seals: SealQueue,
) -> EntryContext {
    EntryContext {
        seals,
        remotes: remotes.clone(),
        observer: observer.clone(),
        durability: durability.clone(),
        cache: cache.clone(),
        frame_size: config.frame_size,
        max_overlap: config.max_block_overlap,
        fold_share: config.tombstone_fold_share,
        accept_lost_edits: config.accept_lost_edit_logs,
        read_only: config.read_only,
    }
}

/// A thread-safe handle to a data directory of buckets.
pub struct Store {
    config: Config,
    buckets: RwLock<BTreeMap<String, Arc<Bucket>>>,
    /// The background merge thread; stopped (and joined) when the store is dropped.
    merger: Merger,
    /// The thread sealing full logs; stopped after the seals asked for, when the store
    /// is dropped.
    sealer: Sealer,
    /// The sync mode every entry's appends follow.
    durability: Arc<Durability>,
    /// The block caches every entry shares (bounded by the configuration, not the data).
    cache: Arc<BlockCache>,
    /// Told of every write and label update, once installed ([`Store::observe`]).
    observer: Arc<Observers>,
    /// The remote object stores of tiered blocks.
    remotes: Arc<Remotes>,
    /// Buckets that failed to open (their indexes may name remote objects).
    unavailable_buckets: usize,
    /// The cap on all buckets' local bytes, when one is set.
    storage_cap: Option<StorageCap>,
    /// The interval syncer (`interval` mode only); its last round runs when the store is
    /// dropped.
    _syncer: Syncer,
    /// The data directory's lock, held while the store is open: opening removes files of
    /// interrupted changes, which must never happen under another process's feet.
    _lock: Option<File>,
}

impl Store {
    /// Opens (creating if needed) the data directory: takes its lock (a second opener,
    /// in this process or another, gets a conflict naming the lock file), removes
    /// leftovers of interrupted changes and opens every bucket. A bucket that fails to open is logged and skipped so
    /// that one damaged bucket does not take the others down.
    ///
    /// With `Config::read_only` (a replica) nothing is written in the directory: no lock
    /// is taken, nothing is recovered or removed, and a directory not created yet opens
    /// empty; [`Store::follow_writer`] reads what its writer changes.
    pub fn open(config: Config) -> Result<Store> {
        if config.read_only {
            return Self::open_read_only(config);
        }
        let data = &config.data_path;
        // Durably: a directory whose creation a power cut undoes takes every bucket with it.
        create_dirs_durably(data)?;
        // Under a lease, a lock still held is the previous holder's: no need to wait.
        let patience = if config.lease_guarded {
            std::time::Duration::ZERO
        } else {
            LOCK_PATIENCE
        };
        let lock = match lock_data_dir(data, patience) {
            Ok(lock) => Some(lock),
            Err(e) if config.lease_guarded && e.kind() == crate::error::ErrorKind::Conflict => {
                log::warn!(
                    "{e}: the lease guards this directory, so this instance (which holds it) opens it anyway"
                );
                None
            }
            Err(e) => return Err(e),
        };
        crate::storage::marker::write_marker(data)?;
        crate::storage::sync::open_files::set_open_file_limit(config.max_open_log_files);
        remove_trash(data)?;
        let remotes = Arc::new(Remotes::open(
            data,
            &config.remotes,
            config.remote_cache_bytes,
            config.remote_cache_in_memory,
        )?);
        Self::open_buckets(config, remotes, lock)
    }

    /// Opens every bucket of the directory, the caches and threads they share.
    pub(super) fn open_buckets(
        config: Config,
        remotes: Arc<Remotes>,
        lock: Option<File>,
    ) -> Result<Store> {
        let data = &config.data_path;
        let merger = Merger::start()?;
        let sealer = Sealer::start()?;
        let durability = Durability::new(config.sync_mode);
        let syncer = Syncer::start(&durability)?;
        let observer = Arc::new(Observers::default());
        let cache = Arc::new(BlockCache::new(CacheLimits {
            blocks: config.block_cache,
            block_bytes: config.block_cache_bytes,
            lookup_bytes: config.lookup_cache_bytes,
            decoded_bytes: config.frame_cache_bytes,
        }));
        let mut unavailable_buckets = 0;
        let mut buckets = BTreeMap::new();
        let ctx = entry_context(
            &config,
            &durability,
            &cache,
            &observer,
            &remotes,
            sealer.queue(),
        );
        for (name, dir) in bucket_dirs(data, config.read_only)? {
            match Bucket::open(&dir, &name, ctx.clone(), merger.queue()) {
                Ok(bucket) => {
                    buckets.insert(name, Arc::new(bucket));
                }
                Err(e) => {
                    unavailable_buckets += 1;
                    log::error!("bucket '{name}' is not available: {e}")
                }
            }
        }
        give_back_freed_memory();
        log::info!(
            "opened {} with {} bucket(s); sync mode {}",
            data.display(),
            buckets.len(),
            config.sync_mode
        );
        let storage_cap = config.max_storage_size.map(StorageCap::new);
        Ok(Store {
            config,
            buckets: RwLock::new(buckets),
            merger,
            sealer,
            durability,
            cache,
            observer,
            remotes,
            unavailable_buckets,
            storage_cap,
            _syncer: syncer,
            _lock: lock,
        })
    }

    pub(super) fn read_map(&self) -> RwLockReadGuard<'_, BTreeMap<String, Arc<Bucket>>> {
        self.buckets.read().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn write_map(&self) -> RwLockWriteGuard<'_, BTreeMap<String, Arc<Bucket>>> {
        self.buckets.write().unwrap_or_else(|p| p.into_inner())
    }

    /// What the entries of a bucket opened now share.
    fn entry_context(&self) -> EntryContext {
        entry_context(
            &self.config,
            &self.durability,
            &self.cache,
            &self.observer,
            &self.remotes,
            self.sealer.queue(),
        )
    }

    /// Opens the bucket directory `dir` as bucket `name`.
    pub(super) fn open_bucket(&self, dir: &Path, name: &str) -> Result<Bucket> {
        Bucket::open(dir, name, self.entry_context(), self.merger.queue())
    }

    /// Installs an observer told of every write and label update from now on (the
    /// server's replication tasks, the thinning delete policies).
    pub fn observe(&self, observer: Arc<dyn ChangeObserver>) {
        self.observer.install(observer);
    }

    /// The sync mode every append follows (what other durable logs, such as replication
    /// backlogs, follow too).
    pub fn durability(&self) -> Arc<Durability> {
        self.durability.clone()
    }

    /// The remote object stores of tiered blocks.
    pub fn remotes(&self) -> &Arc<Remotes> {
        &self.remotes
    }

    /// Whether some bucket failed to open.
    pub(crate) fn has_unavailable_parts(&self) -> bool {
        self.unavailable_buckets > 0
    }

    /// The configuration the store was opened with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// What the block caches hold and how often they answered (`/metrics`).
    pub fn cache_stats(&self) -> CacheStats {
        self.cache.stats()
    }

    /// The data directory.
    pub fn data_path(&self) -> &Path {
        &self.config.data_path
    }

    /// Creates a user bucket; the name must match `^[A-Za-z0-9_-]+$`.
    pub fn create_bucket(&self, name: &str, settings: BucketSettings) -> Result<Arc<Bucket>> {
        validate_bucket_name(name)?;
        self.create(name, settings)
    }

    /// Creates a system bucket such as `$system` (names starting with `$`).
    pub fn create_system_bucket(
        &self,
        name: &str,
        settings: BucketSettings,
    ) -> Result<Arc<Bucket>> {
        validate_system_bucket_name(name)?;
        self.create(name, settings)
    }

    fn create(&self, name: &str, settings: BucketSettings) -> Result<Arc<Bucket>> {
        let mut buckets = self.write_map();
        if buckets.contains_key(name) || self.config.data_path.join(name).exists() {
            return Err(Error::conflict(format!("Bucket '{name}' already exists")));
        }
        let bucket = Arc::new(Bucket::create(
            &self.config.data_path,
            name,
            settings,
            self.entry_context(),
            self.merger.queue(),
        )?);
        buckets.insert(name.to_string(), bucket.clone());
        Ok(bucket)
    }

    /// The bucket with this name.
    pub fn bucket(&self, name: &str) -> Result<Arc<Bucket>> {
        self.read_map()
            .get(name)
            .cloned()
            .ok_or_else(|| Error::not_found(format!("Bucket '{name}' is not found")))
    }

    /// Admits a write of `incoming` bytes under the store's cap on its local disk
    /// (`RS_ENGINE_MAX_STORAGE_SIZE`): a 507 naming the cap when it would not fit. Called
    /// before a bucket's own quota makes room.
    pub fn admit_write(&self, incoming: u64) -> Result<()> {
        let Some(cap) = &self.storage_cap else {
            return Ok(());
        };
        cap.admit(incoming, || {
            self.buckets()
                .iter()
                .try_fold(0u64, |sum, b| Ok(sum.saturating_add(b.local_size()?)))
        })
    }

    /// All buckets, sorted by name.
    pub fn buckets(&self) -> Vec<Arc<Bucket>> {
        self.read_map().values().cloned().collect()
    }

    /// Info of every bucket, sorted by name.
    pub fn list_buckets(&self) -> Result<Vec<BucketInfo>> {
        self.buckets().iter().map(|b| b.info()).collect()
    }

    /// Renames a bucket: its directory moves with one `rename(2)`, made durable by
    /// syncing the data directory, so a kill or power cut leaves the old name or the new
    /// one, never both or neither. Writers and background merges of its entries stop
    /// first (a racing write gets an error, not a lost record); the bucket is then opened
    /// under its new name. What else names the bucket (tokens, policies) is the
    /// server's to follow.
    pub fn rename_bucket(&self, old: &str, new: &str) -> Result<Arc<Bucket>> {
        validate_bucket_name(new)?;
        let mut buckets = self.write_map();
        let bucket = buckets
            .get(old)
            .cloned()
            .ok_or_else(|| Error::not_found(format!("Bucket '{old}' is not found")))?;
        let data = &self.config.data_path;
        if buckets.contains_key(new) || data.join(new).exists() {
            return Err(Error::conflict(format!("Bucket '{new}' already exists")));
        }
        bucket.begin_removal();
        let entries = bucket.entries();
        // Merges and recompressions stop at their next step and wait: once the
        // directory moves, the old path may name a new bucket.
        let merges_stopped: Vec<_> = entries.iter().map(|e| e.begin_removal()).collect();
        // Writes made before the rename are synced under their old paths first: the
        // writers waiting on them are then answered with the truth (stored), and later
        // ones are refused (the bucket is being renamed).
        let synced = entries.iter().try_for_each(|e| e.sync_logs());
        let renamed = synced.and_then(|()| {
            std::fs::rename(bucket.dir(), data.join(new))
                .map_err(|e| Error::io(format!("renaming bucket '{old}' to '{new}'"), e))
        });
        if let Err(e) = renamed {
            drop(merges_stopped);
            entries.iter().for_each(|e| e.abandon_removal());
            bucket.abandon_removal();
            return Err(e);
        }
        fsync_dir(data)?;
        buckets.remove(old);
        bucket.mark_removed();
        drop(merges_stopped);
        let renamed = Arc::new(self.open_bucket(&data.join(new), new)?);
        buckets.insert(new.to_string(), renamed.clone());
        log::info!("bucket '{old}' renamed to '{new}'");
        Ok(renamed)
    }

    /// Removes a bucket: renamed away in one step, then deleted.
    pub fn remove_bucket(&self, name: &str) -> Result<()> {
        let mut buckets = self.write_map();
        let bucket = buckets
            .get(name)
            .cloned()
            .ok_or_else(|| Error::not_found(format!("Bucket '{name}' is not found")))?;
        let data = &self.config.data_path;
        let trash = data.join(trash_name());
        bucket.begin_removal();
        // As for a rename: merges and recompressions stop first, since once the
        // directory moves its path may name a re-created bucket and entry.
        let entries = bucket.entries();
        let writers_stopped: Vec<_> = entries.iter().map(|e| e.begin_removal()).collect();
        // Its tiered blocks' objects, deleted once the removal is durable.
        let objects: Vec<_> = entries.iter().flat_map(|e| e.remote_objects()).collect();
        if let Err(e) = std::fs::rename(bucket.dir(), &trash) {
            drop(writers_stopped);
            entries.iter().for_each(|e| e.abandon_removal());
            bucket.abandon_removal();
            return Err(Error::io(format!("removing bucket '{name}'"), e));
        }
        fsync_dir(data)?;
        buckets.remove(name);
        bucket.mark_removed();
        drop(writers_stopped);
        drop(buckets);
        self.remotes.delete_objects(&objects);
        if let Err(e) = std::fs::remove_dir_all(&trash) {
            log::warn!(
                "removing {}: {e}; it is removed at the next open",
                trash.display()
            );
        }
        Ok(())
    }
}
