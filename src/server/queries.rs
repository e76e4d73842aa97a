//! Open queries of the batch protocol: `POST /io/{bucket}/q` registers a streaming query
//! under a process-unique id; each `GET /io/{bucket}/read` takes the next batch from it.
//! A query expires `ttl` after its last access.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::storage::{Payload, QueryIter, Record, RecordMeta};

/// Most records in one batch (what the reference server sends).
pub const BATCH_RECORDS: usize = 85;
/// A batch stops growing once its body passes this many bytes.
pub const BATCH_BYTES: u64 = 8 << 20;

/// One batch: records of a single entry, in timestamp order.
pub struct Batch {
    /// The entry the records belong to.
    pub entry: String,
    /// Metadata of each record.
    pub metas: Vec<RecordMeta>,
    /// Payloads (none for metadata-only reads).
    pub payloads: Vec<Payload>,
    /// This batch holds the query's final record.
    pub last: bool,
}

struct OpenQuery {
    bucket: String,
    iter: QueryIter,
    /// A record taken from the iterator that belongs to the next batch.
    peeked: Option<Record>,
    /// An error met after records were already gathered: returned by the next read.
    pending_error: Option<Error>,
    done: bool,
    ttl: Duration,
    last_access: Instant,
}

/// The registry of open queries.
#[derive(Default)]
pub struct QueryRegistry {
    next_id: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Mutex<OpenQuery>>>>,
}

fn expired(id: u64) -> Error {
    Error::not_found(format!(
        "Query {id} not found and it might have expired. Check TTL in your query request."
    ))
}

impl QueryRegistry {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Arc<Mutex<OpenQuery>>>> {
        // A panic while holding the map lock cannot leave it half-changed (single inserts
        // and removes), so a poisoned lock is still usable.
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a query on `bucket`; returns its id (unique in the process, from 1).
    pub fn register(&self, bucket: &str, iter: QueryIter, ttl: Duration) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let query = OpenQuery {
            bucket: bucket.to_string(),
            iter,
            peeked: None,
            pending_error: None,
            done: false,
            ttl,
            last_access: Instant::now(),
        };
        let mut open = self.lock();
        let now = Instant::now();
        open.retain(|_, q| {
            // A query busy in another request is not expired.
            q.try_lock()
                .map_or(true, |q| now.duration_since(q.last_access) < q.ttl)
        });
        open.insert(id, Arc::new(Mutex::new(query)));
        id
    }

    /// Removes every query of a bucket (it was deleted).
    pub fn forget_bucket(&self, bucket: &str) {
        self.lock()
            .retain(|_, q| q.try_lock().map_or(true, |q| q.bucket != bucket));
    }

    /// The next batch of query `id` on `bucket`; `None` once the query has no more records.
    pub fn next_batch(&self, bucket: &str, id: u64, with_payload: bool) -> Result<Option<Batch>> {
        let query = self.lock().get(&id).cloned().ok_or_else(|| expired(id))?;
        let mut q = query.lock().unwrap_or_else(|p| p.into_inner());
        if q.bucket != bucket || q.last_access.elapsed() >= q.ttl {
            return Err(expired(id));
        }
        q.last_access = Instant::now();
        if let Some(e) = q.pending_error.take() {
            return Err(e);
        }
        let mut batch = Batch {
            entry: String::new(),
            metas: Vec::new(),
            payloads: Vec::new(),
            last: false,
        };
        let mut bytes = 0u64;
        loop {
            if batch.metas.len() >= BATCH_RECORDS || bytes >= BATCH_BYTES {
                break;
            }
            let record = match q.peeked.take() {
                Some(r) => r,
                None if q.done => break,
                None => match q.iter.next() {
                    None => {
                        q.done = true;
                        break;
                    }
                    Some(Ok(r)) => r,
                    Some(Err(e)) if batch.metas.is_empty() => return Err(e),
                    Some(Err(e)) => {
                        q.pending_error = Some(e);
                        break;
                    }
                },
            };
            if batch.metas.is_empty() {
                batch.entry = record.entry.clone();
            } else if record.entry != batch.entry {
                // Never mix entries in one batch: both record orders clients expect agree.
                q.peeked = Some(record);
                break;
            }
            bytes += record.meta.size;
            if with_payload && let Some(p) = record.payload {
                batch.payloads.push(p);
            }
            batch.metas.push(record.meta);
        }
        if batch.metas.is_empty() {
            return Ok(None);
        }
        if q.peeked.is_none() && q.pending_error.is_none() && !q.done {
            match q.iter.next() {
                None => q.done = true,
                Some(Ok(r)) => q.peeked = Some(r),
                Some(Err(e)) => q.pending_error = Some(e),
            }
        }
        batch.last = q.done && q.peeked.is_none() && q.pending_error.is_none();
        Ok(Some(batch))
    }
}
