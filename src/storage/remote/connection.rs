//! One configured remote: its S3 client and what it did since the start (bytes uploaded
//! and fetched, objects deleted, failed calls by kind).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::error::{Error, Result};
use crate::storage::remote::s3::{FaultKind, ListedObject, RemoteFault, S3Client};
use crate::storage::remote::settings::RemoteSettings;

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
    /// Whether the manifests of the blocks tiered here are published (replicas that
    /// follow this remote read them; `manifest.rs`).
    pub publishes_manifests: bool,
    client: S3Client,
    /// What it did.
    pub stats: RemoteStats,
    /// Whether its last call got an answer (false until one has): reads always try it,
    /// speculative work (prefetching the blocks a reader may want next) only follows an
    /// answer, so it never piles connect timeouts onto a remote that is down.
    answered_last: AtomicBool,
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
    /// The remote `settings` describe, talked to through `client`.
    pub fn new(settings: &RemoteSettings, client: S3Client) -> Remote {
        Remote {
            name: settings.name.clone(),
            endpoint: settings.endpoint.clone(),
            bucket: settings.bucket.clone(),
            prefix: settings.prefix.clone(),
            publishes_manifests: settings.publish_manifests,
            client,
            stats: RemoteStats::default(),
            answered_last: AtomicBool::new(false),
        }
    }

    fn counted<T>(
        &self,
        r: std::result::Result<T, RemoteFault>,
    ) -> std::result::Result<T, RemoteFault> {
        if let Err(f) = &r {
            self.stats.faults[fault_index(f.kind)].fetch_add(1, Ordering::Relaxed);
        }
        let answered = !matches!(&r, Err(f) if f.kind == FaultKind::Unreachable);
        self.answered_last.store(answered, Ordering::Relaxed);
        r
    }

    /// Whether its last call got an answer (any answer, a refusal included).
    pub fn answering(&self) -> bool {
        self.answered_last.load(Ordering::Relaxed)
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

    /// Bytes `start..end` of `key`; a failure is [`ErrorKind::Unavailable`](crate::error::ErrorKind::Unavailable) naming the
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

    /// Every object under `folder` of our prefix.
    pub fn list_under(&self, folder: &str) -> std::result::Result<Vec<ListedObject>, RemoteFault> {
        self.counted(self.client.list(&format!("{}{folder}/", self.key_prefix())))
    }

    /// The whole object `key`, refused when larger than `max` bytes (what the caller
    /// can hold); a failure is [`ErrorKind::Unavailable`](crate::error::ErrorKind::Unavailable).
    pub fn fetch_all(&self, key: &str, max: u64) -> Result<Vec<u8>> {
        let Some((size, _)) = self.head(key)? else {
            return Err(Error::not_found(format!("object '{key}' is not there")));
        };
        if size > max {
            return Err(Error::internal(format!(
                "object '{key}' of remote '{}' is {size} bytes, more than the {max} expected",
                self.name
            )));
        }
        if size == 0 {
            return Ok(Vec::new());
        }
        self.fetch(key, 0, size)
    }

    /// Every object under our prefix.
    pub fn list(&self) -> std::result::Result<Vec<ListedObject>, RemoteFault> {
        self.counted(self.client.list(&self.key_prefix()))
    }
}
