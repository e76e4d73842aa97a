//! Remote object stores: where the `tier` lifecycle action moves old blocks (see
//! `docs/crash-safety.md`, "Tiering"). `settings.rs` configures one, `s3.rs` talks to it,
//! `connection.rs` is one configured remote with what it did,
//! `stub.rs` is what stays on the local disk of a tiered block, `frame_cache.rs` keeps the
//! frames fetched back, `pending.rs` the object operations that must survive a restart,
//! `manifest.rs` what replicas that follow a remote read (`mirror.rs` how they do),
//! `collector.rs` the work that carries them out and removes orphans.

pub(crate) mod ca;
pub(crate) mod connection;
pub(crate) mod frame_cache;
pub mod manifest;
pub mod mirror;
pub(crate) mod pending;
pub mod s3;
pub mod settings;
pub(crate) mod stub;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use crate::error::{Error, ErrorKind, Result};
pub use crate::storage::remote::connection::{FAULT_KINDS, Remote, RemoteStats};
use crate::storage::remote::frame_cache::FrameCache;
use crate::storage::remote::pending::Pending;
use crate::storage::remote::s3::S3Client;
use crate::storage::remote::settings::RemoteSettings;

/// Name of the frame cache's directory in the data directory.
pub const FRAME_CACHE_DIR: &str = ".remote-cache";

/// The remotes of a store, their frame cache and their pending operations.
pub struct Remotes {
    remotes: BTreeMap<String, Arc<Remote>>,
    cache: Option<FrameCache>,
    pending: Option<Pending>,
    /// What the writer published for replicas that follow a remote (`manifest.rs`).
    publisher: manifest::Publisher,
}

impl Remotes {
    /// The remotes `settings` configure for the store in `data`, with a frame cache of
    /// `cache_bytes` (on disk, or `in_memory`). Nothing is sent: a remote that cannot be
    /// reached is found by its first use (and the server's start check, which only warns).
    pub fn open(
        data: &Path,
        settings: &[RemoteSettings],
        cache_bytes: u64,
        in_memory: bool,
    ) -> Result<Remotes> {
        let mut remotes = BTreeMap::new();
        for s in settings {
            let remote = Remote::new(s, S3Client::new(s)?);
            remotes.insert(s.name.to_ascii_lowercase(), Arc::new(remote));
        }
        let used = !remotes.is_empty();
        let cache = if used {
            Some(FrameCache::new(
                &data.join(FRAME_CACHE_DIR),
                cache_bytes,
                in_memory,
            )?)
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
            publisher: Default::default(),
        })
    }

    /// The remotes of a replica (`Config::read_only`): its frame cache under
    /// `cache_dir` (`--replica-cache-path`) or in memory, never in the data directory it
    /// reads, and no pending operations (it uploads and deletes nothing).
    pub fn open_for_replica(
        settings: &[RemoteSettings],
        cache_dir: Option<&Path>,
        cache_bytes: u64,
    ) -> Result<Remotes> {
        let mut remotes = BTreeMap::new();
        for s in settings {
            let remote = Remote::new(s, S3Client::new(s)?);
            remotes.insert(s.name.to_ascii_lowercase(), Arc::new(remote));
        }
        let cache = if remotes.is_empty() {
            None
        } else {
            Some(match cache_dir {
                Some(dir) => FrameCache::new(&dir.join(FRAME_CACHE_DIR), cache_bytes, false)?,
                None => FrameCache::in_memory(cache_bytes),
            })
        };
        Ok(Remotes {
            remotes,
            cache,
            pending: None,
            publisher: Default::default(),
        })
    }

    /// No remote (a store that never tiers).
    pub fn none() -> Remotes {
        Remotes {
            remotes: BTreeMap::new(),
            cache: None,
            pending: None,
            publisher: Default::default(),
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

    /// What the writer published for replicas that follow a remote.
    pub fn publisher(&self) -> &manifest::Publisher {
        &self.publisher
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
                cache.forget(remote, key);
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
