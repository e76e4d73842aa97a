//! The `$system` bucket, where the server keeps its own events (lifecycle runs, the
//! audit, usage and log trail). As in ReductStore it is created by the first event, so a
//! fresh server has no bucket, and it may carry a FIFO quota of its own.

use std::sync::{Arc, OnceLock};

use crate::error::{Error, ErrorKind, Result};
use crate::storage::bucket::Bucket;
use crate::storage::record::{Labels, RecordMeta};
use crate::storage::settings::{BucketSettings, QuotaType};
use crate::storage::store::Store;

/// The system bucket's name.
pub const SYSTEM_BUCKET: &str = "$system";

/// A lazily created `$system` of one store.
pub struct SystemBucket {
    store: Arc<Store>,
    bucket: OnceLock<Arc<Bucket>>,
    /// The FIFO quota a new `$system` gets (`None`: no quota).
    quota: Option<u64>,
}

impl SystemBucket {
    /// `$system` of `store`; created on first write with a FIFO quota of `quota` bytes.
    pub fn new(store: &Arc<Store>, quota: Option<u64>) -> SystemBucket {
        SystemBucket {
            store: store.clone(),
            bucket: OnceLock::new(),
            quota,
        }
    }

    /// The store it belongs to.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// The settings `$system` gets with a quota of `quota` bytes (`None`: none).
    pub fn settings(quota: Option<u64>) -> BucketSettings {
        let mut settings = BucketSettings::default();
        if let Some(size) = quota {
            settings.quota_type = QuotaType::Fifo;
            settings.quota_size = size;
        }
        settings
    }

    /// `$system`, if it exists yet.
    pub fn existing(&self) -> Result<Option<&Arc<Bucket>>> {
        if let Some(bucket) = self.bucket.get() {
            return Ok(Some(bucket));
        }
        match self.store.bucket(SYSTEM_BUCKET) {
            Ok(bucket) => Ok(Some(self.bucket.get_or_init(|| bucket))),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `$system`, created if it does not exist yet.
    pub fn get_or_create(&self) -> Result<&Arc<Bucket>> {
        if let Some(bucket) = self.existing()? {
            return Ok(bucket);
        }
        let bucket = match self
            .store
            .create_system_bucket(SYSTEM_BUCKET, Self::settings(self.quota))
        {
            Ok(bucket) => bucket,
            // Created meanwhile by another writer.
            Err(e) if e.kind() == ErrorKind::Conflict => self.store.bucket(SYSTEM_BUCKET)?,
            Err(e) => return Err(e),
        };
        Ok(self.bucket.get_or_init(|| bucket))
    }

    /// Writes a JSON event at `ts` (µs), or at the next free instant after it when `ts`
    /// is taken: `payload(ts)` makes the payload for the instant used, so a timestamp it
    /// carries stays the record's. Returns the instant used.
    pub fn write(
        &self,
        entry: &str,
        ts: u64,
        labels: Labels,
        payload: impl FnMut(u64) -> Result<Vec<u8>>,
    ) -> Result<u64> {
        self.write_as(entry, ts, labels, payload, true)
    }

    /// [`SystemBucket::write`] of an event no replication task may take (see
    /// [`Bucket::write_unobserved`]).
    pub fn write_unreplicated(
        &self,
        entry: &str,
        ts: u64,
        labels: Labels,
        payload: impl FnMut(u64) -> Result<Vec<u8>>,
    ) -> Result<u64> {
        self.write_as(entry, ts, labels, payload, false)
    }

    fn write_as(
        &self,
        entry: &str,
        ts: u64,
        labels: Labels,
        mut payload: impl FnMut(u64) -> Result<Vec<u8>>,
        observed: bool,
    ) -> Result<u64> {
        let bucket = self.get_or_create()?;
        for at in ts..ts.saturating_add(1000) {
            let meta = RecordMeta {
                timestamp: at,
                labels: labels.clone(),
                content_type: "application/json".into(),
                size: 0,
            };
            let payload = payload(at)?;
            let written = if observed {
                bucket.write(entry, meta, &payload)
            } else {
                bucket.write_unobserved(entry, meta, &payload)
            };
            match written {
                Err(e) if e.kind() == ErrorKind::Conflict => continue,
                Err(e) => return Err(e),
                Ok(()) => return Ok(at),
            }
        }
        Err(Error::internal(format!(
            "no free timestamp for an event of '{entry}' near {ts}"
        )))
    }
}

/// Replaces every character an entry segment cannot hold with `_` (an empty name becomes
/// `unknown`, as in ReductStore).
pub fn sanitize(name: &str) -> String {
    let clean: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.is_empty() {
        "unknown".to_string()
    } else {
        clean
    }
}
