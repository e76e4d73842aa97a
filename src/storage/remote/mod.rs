//! Remote object stores: where the `tier` lifecycle action moves old blocks (see
//! ARCHITECTURE.md, "Tiering"). `settings.rs` configures one, `s3.rs` talks to it,
//! `stub.rs` is what stays on the local disk of a tiered block, `frame_cache.rs` keeps the
//! frames fetched back, `pending.rs` the object operations that must survive a restart,
//! `collector.rs` the work that carries them out and removes orphans.

pub mod ca;
pub mod collector;
pub mod frame_cache;
pub mod pending;
pub mod s3;
pub mod settings;
pub mod stub;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, ErrorKind, Result};
use crate::storage::remote::frame_cache::FrameCache;
use crate::storage::remote::pending::Pending;
use crate::storage::remote::s3::{FaultKind, ListedObject, RemoteFault, S3Client};
use crate::storage::remote::settings::RemoteSettings;

/// Name of the frame cache's directory in the data directory.
pub const FRAME_CACHE_DIR: &str = ".remote-cache";

/// What one remote did since the start (`/metrics`, `/storage`).
#[derive(Debug, Default)]
pub struct RemoteStats {
    /// Bytes uploaded and confirmed.
    pub uploaded_bytes: AtomicU64,
    /// Bytes fetched by ranged reads.
    pub fetched_bytes: AtomicU64,
    /// Objects deleted.
    pub deleted_objects: AtomicU64,
    /// Failed calls by kind (`FaultKind` order: unreachable, denied, missing, full, other).
    pub faults: [AtomicU64; 5],
}

/// One configured remote.
pub struct Remote {
    /// Its name.
    pub name: String,
    /// Its endpoint (no credentials).
    pub endpoint: String,
    /// Its bucket.
    pub bucket: String,
    /// The prefix of every key halflife writes there.
    pub prefix: String,
    client: S3Client,
    /// What it did.
    pub stats: RemoteStats,
}

fn fault_index(kind: FaultKind) -> usize {
    match kind {
        FaultKind::Unreachable => 0,
        FaultKind::Denied => 1,
        FaultKind::Missing => 2,
        FaultKind::Full => 3,
        FaultKind::Other => 4,
    }
}

/// The fault kinds in the order of [`RemoteStats::faults`].
pub const FAULT_KINDS: [FaultKind; 5] = [
    FaultKind::Unreachable,
    FaultKind::Denied,
    FaultKind::Missing,
    FaultKind::Full,
    FaultKind::Other,
];

impl Remote {
    fn counted<T>(
        &self,
        r: std::result::Result<T, RemoteFault>,
    ) -> std::result::Result<T, RemoteFault> {
        if let Err(f) = &r {
            self.stats.faults[fault_index(f.kind)].fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    /// The key of a new object for block `seq` of `bucket/entry`: a fresh random suffix,
    /// so an upload tried again never writes over an object a collector may be deleting.
    pub fn new_key(&self, bucket: &str, entry: &str, seq: u64) -> Result<String> {
        let mut random = [0u8; 6];
        getrandom::fill(&mut random)
            .map_err(|e| Error::internal(format!("no randomness for an object key: {e}")))?;
        let suffix: String = random.iter().map(|b| format!("{b:02x}")).collect();
        let name = format!("{bucket}/{entry}/{seq:016x}-{suffix}.blk");
        Ok(if self.prefix.is_empty() {
            name
        } else {
            format!("{}/{name}", self.prefix)
        })
    }

    /// The prefix every key of ours starts with (what the collector lists).
    pub fn key_prefix(&self) -> String {
        if self.prefix.is_empty() {
            String::new()
        } else {
            format!("{}/", self.prefix)
        }
    }

    /// Uploads `bytes` as `key`; the ETag the store confirmed.
    pub fn upload(&self, key: &str, bytes: &[u8]) -> std::result::Result<String, RemoteFault> {
        let r = self.counted(self.client.put(key, bytes));
        if r.is_ok() {
            self.stats
                .uploaded_bytes
                .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        }
        r
    }

    /// The size and ETag of `key`, if it exists.
    pub fn head(&self, key: &str) -> std::result::Result<Option<(u64, String)>, RemoteFault> {
        self.counted(self.client.head(key))
    }

    /// Bytes `start..end` of `key`; a failure is [`ErrorKind::Unavailable`] naming the
    /// remote and the cause.
    pub fn fetch(&self, key: &str, start: u64, end: u64) -> Result<Vec<u8>> {
        let bytes = self.counted(self.client.get_range(key, start, end))?;
        self.stats
            .fetched_bytes
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        Ok(bytes)
    }

    /// Deletes `key` (gone already is no error).
    pub fn delete(&self, key: &str) -> std::result::Result<(), RemoteFault> {
        let r = self.counted(self.client.delete(key));
        if r.is_ok() {
            self.stats.deleted_objects.fetch_add(1, Ordering::Relaxed);
        }
        r
    }

    /// Every object under our prefix.
    pub fn list(&self) -> std::result::Result<Vec<ListedObject>, RemoteFault> {
        self.counted(self.client.list(&self.key_prefix()))
    }
}

/// The remotes of a store, their frame cache and their pending operations.
pub struct Remotes {
    remotes: BTreeMap<String, Arc<Remote>>,
    cache: Option<FrameCache>,
    pending: Option<Pending>,
}

impl Remotes {
    /// The remotes `settings` configure for the store in `data`, with a frame cache of
    /// `cache_bytes`. Nothing is sent: a remote that cannot be reached is found by its
    /// first use (and the server's start check, which only warns).
    pub fn open(data: &Path, settings: &[RemoteSettings], cache_bytes: u64) -> Result<Remotes> {
        let mut remotes = BTreeMap::new();
        for s in settings {
            let remote = Remote {
                name: s.name.clone(),
                endpoint: s.endpoint.clone(),
                bucket: s.bucket.clone(),
                prefix: s.prefix.clone(),
                client: S3Client::new(s)?,
                stats: RemoteStats::default(),
            };
            remotes.insert(s.name.to_ascii_lowercase(), Arc::new(remote));
        }
        let used = !remotes.is_empty();
        let cache = if used {
            Some(FrameCache::new(&data.join(FRAME_CACHE_DIR), cache_bytes)?)
        } else {
            None
        };
        let pending = if used || Pending::exists_in(data) {
            Some(Pending::open(data)?)
        } else {
            None
        };
        Ok(Remotes {
            remotes,
            cache,
            pending,
        })
    }

    /// No remote (a store that never tiers).
    pub fn none() -> Remotes {
        Remotes {
            remotes: BTreeMap::new(),
            cache: None,
            pending: None,
        }
    }

    /// The remote named `name` (without regard to case).
    pub fn get(&self, name: &str) -> Option<&Arc<Remote>> {
        self.remotes.get(&name.to_ascii_lowercase())
    }

    /// The remote named `name`, or the 503 a read of a block tiered there answers.
    pub fn require(&self, name: &str) -> Result<&Arc<Remote>> {
        self.get(name).ok_or_else(|| {
            Error::new(
                ErrorKind::Unavailable,
                format!("remote '{name}' is not configured on this server (--remote {name}=URL)"),
            )
        })
    }

    /// Every remote.
    pub fn all(&self) -> impl Iterator<Item = &Arc<Remote>> {
        self.remotes.values()
    }

    /// The frame cache (present whenever a remote is configured).
    pub fn cache(&self) -> Option<&FrameCache> {
        self.cache.as_ref()
    }

    /// The pending operations (present whenever a remote is configured, or some were left).
    pub fn pending(&self) -> Option<&Pending> {
        self.pending.as_ref()
    }

    /// Queues the deletion of objects no index names any more; without a journal (no
    /// remote configured) the objects are left for `halflife check` to report.
    pub fn delete_objects(&self, objects: &[(String, String)]) {
        if objects.is_empty() {
            return;
        }
        if let Some(cache) = &self.cache {
            for (remote, key) in objects {
                cache.forget(&crate::storage::format::index::RemoteLocation {
                    remote: remote.clone(),
                    key: key.clone(),
                    etag: String::new(),
                    meta_offset: 0,
                });
            }
        }
        let queued = match &self.pending {
            Some(p) => p.delete_objects(objects),
            None => Err(Error::internal("no remote is configured")),
        };
        if let Err(e) = queued {
            // The collector finds them as orphans at its next listing.
            log::warn!(
                "{} object(s) no longer needed could not be queued for deletion ({e}); the orphan collector will remove them",
                objects.len()
            );
        }
    }
}
