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

/// Default of [`QueryLimits::max_open`].
pub const DEFAULT_MAX_OPEN_QUERIES: usize = 1024;
/// Default of [`QueryLimits::max_ttl`].
pub const DEFAULT_MAX_QUERY_TTL: Duration = Duration::from_secs(3600);

/// Bounds on what open queries may hold: each keeps an iterator (and the blocks it has
/// mapped) alive until it is read to the end or expires.
#[derive(Debug, Clone, Copy)]
pub struct QueryLimits {
    /// Open queries at most; a new one past it gets 429.
    pub max_open: usize,
    /// Longest TTL a query may ask for; longer ones are cut to it.
    pub max_ttl: Duration,
}

impl Default for QueryLimits {
    fn default() -> Self {
        QueryLimits {
            max_open: DEFAULT_MAX_OPEN_QUERIES,
            max_ttl: DEFAULT_MAX_QUERY_TTL,
        }
    }
}

/// A query whose last batch was served: it holds nothing but the answer to one more
/// read (204, as the API has it) until its TTL passes, and does not count as open.
struct Finished {
    bucket: String,
    ttl: Duration,
    last_access: Instant,
}

/// Most finished queries remembered; past it a read after the last batch gets 404
/// instead of 204 (clients stop at `x-reduct-last` anyway).
const MAX_FINISHED: usize = 1 << 16;

/// Live and finished queries, under one lock.
#[derive(Default)]
struct Queries {
    live: HashMap<u64, Arc<Mutex<OpenQuery>>>,
    finished: HashMap<u64, Finished>,
}

/// The registry of open queries.
#[derive(Default)]
pub struct QueryRegistry {
    limits: QueryLimits,
    next_id: AtomicU64,
    open: Mutex<Queries>,
}

fn expired(id: u64) -> Error {
    Error::not_found(format!(
        "Query {id} not found and it might have expired. Check TTL in your query request."
    ))
}

impl QueryRegistry {
    fn lock(&self) -> MutexGuard<'_, Queries> {
        // A panic while holding the map lock cannot leave it half-changed (single inserts
        // and removes), so a poisoned lock is still usable.
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A registry with these limits.
    pub fn new(limits: QueryLimits) -> QueryRegistry {
        QueryRegistry {
            limits,
            ..QueryRegistry::default()
        }
    }

    /// Registers a query on `bucket` for `ttl` (cut to the limit); returns its id (unique
    /// in the process, from 1). 429 when the open-query limit is reached.
    pub fn register(&self, bucket: &str, iter: QueryIter, ttl: Duration) -> Result<u64> {
        let mut open = self.lock();
        Self::purge(&mut open, Instant::now());
        if open.live.len() >= self.limits.max_open {
            return Err(Error::new(
                crate::ErrorKind::TooManyRequests,
                format!(
                    "Too many open queries ({}): read them to the end or let them expire",
                    self.limits.max_open
                ),
            ));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let query = OpenQuery {
            bucket: bucket.to_string(),
            iter,
            peeked: None,
            pending_error: None,
            done: false,
            ttl: ttl.min(self.limits.max_ttl),
            last_access: Instant::now(),
        };
        open.live.insert(id, Arc::new(Mutex::new(query)));
        Ok(id)
    }

    /// Drops the queries whose TTL has passed since their last read, and with them the
    /// blocks their iterators keep mapped. The server calls this on a clock.
    pub fn purge_expired(&self) {
        let mut open = self.lock();
        let before = open.live.len();
        Self::purge(&mut open, Instant::now());
        if open.live.len() < before {
            log::debug!("{} expired queries dropped", before - open.live.len());
        }
    }

    /// How many queries are open (expired ones not yet purged included; finished ones
    /// not).
    pub fn open_count(&self) -> usize {
        self.lock().live.len()
    }

    fn purge(open: &mut Queries, now: Instant) {
        open.live.retain(|_, q| {
            // A query busy in another request is not expired.
            q.try_lock()
                .map_or(true, |q| now.duration_since(q.last_access) < q.ttl)
        });
        open.finished
            .retain(|_, q| now.duration_since(q.last_access) < q.ttl);
    }

    /// Moves a query whose last batch was served out of the live ones.
    fn finish(&self, id: u64, bucket: &str, ttl: Duration) {
        let mut open = self.lock();
        open.live.remove(&id);
        if open.finished.len() >= MAX_FINISHED {
            Self::purge(&mut open, Instant::now());
        }
        if open.finished.len() < MAX_FINISHED {
            let finished = Finished {
                bucket: bucket.to_string(),
                ttl,
                last_access: Instant::now(),
            };
            open.finished.insert(id, finished);
        }
    }

    /// Removes every query of a bucket (it was deleted).
    pub fn forget_bucket(&self, bucket: &str) {
        let mut open = self.lock();
        open.live
            .retain(|_, q| q.try_lock().map_or(true, |q| q.bucket != bucket));
        open.finished.retain(|_, q| q.bucket != bucket);
    }

    /// The next batch of query `id` on `bucket`; `None` once the query has no more records.
    pub fn next_batch(&self, bucket: &str, id: u64, with_payload: bool) -> Result<Option<Batch>> {
        let query = {
            let mut open = self.lock();
            match open.live.get(&id) {
                Some(query) => query.clone(),
                None => {
                    // One read after the last batch answers 204.
                    return match open.finished.remove(&id) {
                        Some(f) if f.bucket == bucket && f.last_access.elapsed() < f.ttl => {
                            Ok(None)
                        }
                        _ => Err(expired(id)),
                    };
                }
            }
        };
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
                    None if q.iter.is_following() => {
                        // Caught up: the next read looks again from where each entry
                        // stopped.
                        q.iter.rewind();
                        break;
                    }
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
        // A continuous query counts its TTL from the end of each read (reduct-py polls
        // with a TTL of twice its interval plus one second).
        q.last_access = Instant::now();
        if batch.metas.is_empty() {
            if q.done && q.pending_error.is_none() {
                let ttl = q.ttl;
                drop(q);
                self.finish(id, bucket, ttl);
            }
            return Ok(None);
        }
        if q.iter.is_following() {
            // Never the last batch: more may be written.
            return Ok(Some(batch));
        }
        if q.peeked.is_none() && q.pending_error.is_none() && !q.done {
            match q.iter.next() {
                None => q.done = true,
                Some(Ok(r)) => q.peeked = Some(r),
                Some(Err(e)) => q.pending_error = Some(e),
            }
        }
        batch.last = q.done && q.peeked.is_none() && q.pending_error.is_none();
        if batch.last {
            // Nothing more to read: release the iterator (and the blocks it maps) now,
            // not when the TTL runs out, and free the query's place under the limit.
            let ttl = q.ttl;
            drop(q);
            self.finish(id, bucket, ttl);
        }
        Ok(Some(batch))
    }
}
