//! Open queries of the batch protocol: `POST /io/{bucket}/q` registers a streaming query
//! under a process-unique id; each `GET /io/{bucket}/read` takes the next batch from it.
//! A query expires `ttl` after its last access.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::storage::condition::BatchDirectives;
use crate::storage::query::RecordSource;
use crate::storage::{Payload, Record, RecordMeta};

/// Default of `RS_IO_BATCH_MAX_RECORDS`, as in ReductStore.
pub const BATCH_RECORDS: usize = 85;
/// Default of `RS_IO_BATCH_MAX_SIZE`, as in ReductStore.
pub const BATCH_BYTES: u64 = 8_000_000;
/// Default of `RS_IO_BATCH_MAX_METADATA_SIZE`, as in ReductStore.
pub const BATCH_METADATA_BYTES: u64 = 512_000;
/// Longest a read of a caught-up continuous query waits for new records (ReductStore
/// waits a quarter of the TTL; this caps it so a long TTL cannot hold a handler thread).
const MAX_CONTINUOUS_WAIT: Duration = Duration::from_secs(10);
/// How often a waiting continuous read looks for new records.
const CONTINUOUS_POLL: Duration = Duration::from_millis(50);

/// One batch: runs of records of one entry each, in timestamp order within an entry. The
/// merged stream never returns to an entry already in the batch, so no batch interleaves
/// entries and every client's pairing of headers with payloads is right.
pub struct Batch {
    /// The entries, in the order their runs appear (= by first timestamp in the batch).
    pub entries: Vec<String>,
    /// Each record's entry (index into `entries`) and metadata.
    pub records: Vec<(usize, RecordMeta)>,
    /// Payloads (none for metadata-only reads).
    pub payloads: Vec<Payload>,
    /// This batch holds the query's final record; for a continuous query, it drained
    /// what there is now.
    pub last: bool,
    /// Blocks that could not be read since the last batch (their errors): the query read
    /// around them, and the answer says so in `x-reduct-error`.
    pub damaged: Vec<Error>,
}

impl Batch {
    /// Total payload bytes.
    pub fn total_size(&self) -> u64 {
        self.records.iter().map(|(_, m)| m.size).sum()
    }
}

/// Where a batch ends: the server's limits (`RS_IO_BATCH_MAX_RECORDS`, `_MAX_SIZE`,
/// `_MAX_METADATA_SIZE`, ReductStore's defaults unless set), or the query's `#batch_*`
/// directives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchLimits {
    /// Most records in one batch.
    pub records: usize,
    /// A batch stops growing once its payloads pass this many bytes.
    pub bytes: u64,
    /// A batch stops growing once its record headers pass this many bytes.
    pub metadata_bytes: u64,
}

impl Default for BatchLimits {
    fn default() -> Self {
        BatchLimits {
            records: BATCH_RECORDS,
            bytes: BATCH_BYTES,
            metadata_bytes: BATCH_METADATA_BYTES,
        }
    }
}

impl BatchLimits {
    /// These limits, with what the query's directives set instead.
    fn with(self, d: &BatchDirectives) -> Self {
        BatchLimits {
            records: d.records.map_or(self.records, |n| {
                usize::try_from(n.max(1)).unwrap_or(usize::MAX)
            }),
            bytes: d.size.unwrap_or(self.bytes),
            metadata_bytes: d.metadata_size.unwrap_or(self.metadata_bytes),
        }
    }
}

/// The header bytes a record costs in a batch, roughly as both protocols write them.
fn header_bytes(meta: &RecordMeta) -> u64 {
    let labels: usize = meta.labels.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
    (32 + meta.content_type.len() + labels) as u64
}

/// Which queries an endpoint may read: `/io/{bucket}/read` reads bucket queries, the
/// entry endpoints read the queries made on that entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Made by `POST /io/{bucket}/q`.
    Bucket,
    /// Made by `POST|GET /b/{bucket}/{entry}/q`.
    Entry(String),
}

/// The endpoint reading a query, which decides how the end and a caught-up continuous
/// query are answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// `GET|HEAD /io/{bucket}/read` (protocol v2).
    Io,
    /// `GET|HEAD /b/{bucket}/{entry}/batch?q=` (protocol v1).
    Batch,
    /// `GET|HEAD /b/{bucket}/{entry}?q=`: one record per read.
    Single,
}

struct OpenQuery {
    bucket: String,
    scope: Scope,
    /// The token that made it (authentication on): only it may read the query.
    owner: Option<String>,
    /// Who it counts against for the per-client cap: the token, or without
    /// authentication the client's address.
    holder: String,
    limits: BatchLimits,
    /// The last read of this continuous query found nothing new.
    caught_up: bool,
    iter: Box<dyn RecordSource>,
    /// A record taken from the iterator that belongs to the next batch.
    peeked: Option<Record>,
    /// An error met after records were already gathered: returned by the next read.
    pending_error: Option<Error>,
    /// Damaged blocks read around and not reported yet.
    damaged: Vec<Error>,
    done: bool,
    ttl: Duration,
    last_access: Instant,
}

/// Default of [`QueryLimits::max_open`].
pub const DEFAULT_MAX_OPEN_QUERIES: usize = 1024;
/// Default of [`QueryLimits::max_open_per_token`].
pub const DEFAULT_MAX_OPEN_QUERIES_PER_TOKEN: usize = 256;
/// Default of [`QueryLimits::max_ttl`].
pub const DEFAULT_MAX_QUERY_TTL: Duration = Duration::from_secs(3600);

/// Bounds on what open queries may hold: each keeps an iterator (and the blocks it has
/// mapped) alive until it is read to the end or expires.
#[derive(Debug, Clone, Copy)]
pub struct QueryLimits {
    /// Open queries at most; a new one past it gets 429.
    pub max_open: usize,
    /// Open queries one client may hold (a token with authentication on, an address
    /// without), so one client cannot take every slot; past it, its new queries get 429.
    pub max_open_per_token: usize,
    /// Longest TTL a query may ask for; longer ones are cut to it.
    pub max_ttl: Duration,
    /// Where a batch ends unless the query says otherwise.
    pub batch: BatchLimits,
}

impl Default for QueryLimits {
    fn default() -> Self {
        QueryLimits {
            max_open: DEFAULT_MAX_OPEN_QUERIES,
            max_open_per_token: DEFAULT_MAX_OPEN_QUERIES_PER_TOKEN,
            max_ttl: DEFAULT_MAX_QUERY_TTL,
            batch: BatchLimits::default(),
        }
    }
}

/// Who a query counts against for the per-client cap: the token with authentication on,
/// otherwise the client's address.
pub fn holder_of(token: Option<&str>, client: Option<std::net::IpAddr>) -> String {
    match (token, client) {
        (Some(token), _) => format!("Token '{token}'"),
        (None, Some(ip)) => format!("Client {ip}"),
        (None, None) => "A client of unknown address".to_string(),
    }
}

/// A query whose last batch was served: it holds nothing but the answer to one more
/// read (204, as the API has it) until its TTL passes, and does not count as open.
struct Finished {
    bucket: String,
    scope: Scope,
    owner: Option<String>,
    /// A single-record read already answered 204 after the end.
    ended: bool,
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

/// 403 when a query made by one token is read with another.
fn check_owner(owner: Option<&str>, token: Option<&str>, id: u64) -> Result<()> {
    match (owner, token) {
        (Some(owner), Some(token)) if owner != token => Err(Error::forbidden(format!(
            "Query {id} belongs to another token than '{token}'"
        ))),
        _ => Ok(()),
    }
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

    /// Registers a query on `bucket` for `ttl` (cut to the limit), owned by a token
    /// (`owner`, with authentication on) and counted against `holder` (the token, or the
    /// client's address: see [`holder_of`]); returns its id. 429 when the open-query
    /// limit, or the holder's share of it, is reached.
    pub fn register(
        &self,
        bucket: &str,
        scope: Scope,
        (owner, holder): (Option<String>, String),
        iter: Box<dyn RecordSource>,
        ttl: Duration,
    ) -> Result<u64> {
        let mut open = self.lock();
        Self::purge(&mut open, Instant::now());
        if open.live.len() >= self.limits.max_open {
            return Err(Error::new(
                crate::error::ErrorKind::TooManyRequests,
                format!(
                    "Too many open queries ({}): read them to the end or let them expire",
                    self.limits.max_open
                ),
            ));
        }
        // A query busy in a read is not counted: the cap is a bound, not a ledger.
        let held = open
            .live
            .values()
            .filter(|q| q.try_lock().is_ok_and(|q| q.holder == holder))
            .count();
        if held >= self.limits.max_open_per_token {
            return Err(Error::new(
                crate::error::ErrorKind::TooManyRequests,
                format!(
                    "{holder} has {held} open queries, the most one client may hold (--max-open-queries-per-token): read them to the end or let them expire"
                ),
            ));
        }
        let mut id = self.allocate_id();
        while open.live.contains_key(&id) || open.finished.contains_key(&id) {
            id = self.allocate_id();
        }
        let query = OpenQuery {
            bucket: bucket.to_string(),
            scope,
            owner,
            holder,
            limits: self.limits.batch.with(&iter.directives().batch),
            caught_up: false,
            iter,
            peeked: None,
            pending_error: None,
            damaged: Vec::new(),
            done: false,
            ttl: ttl.min(self.limits.max_ttl),
            last_access: Instant::now(),
        };
        open.live.insert(id, Arc::new(Mutex::new(query)));
        Ok(id)
    }

    /// A fresh query id: random, so one client cannot guess another's, and below 2^53
    /// so JavaScript clients read it exactly. A query refused after its id was taken (an
    /// unknown extension) names it, as ReductStore does.
    pub fn allocate_id(&self) -> u64 {
        let mut bytes = [0u8; 8];
        if getrandom::fill(&mut bytes).is_err() {
            // No system randomness: fall back to a counter (still unique).
            return self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        }
        (u64::from_le_bytes(bytes) >> 11).max(1)
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
    fn finish(
        &self,
        id: u64,
        bucket: &str,
        (scope, owner): (Scope, Option<String>),
        ttl: Duration,
        ended: bool,
    ) {
        let mut open = self.lock();
        open.live.remove(&id);
        if open.finished.len() >= MAX_FINISHED {
            Self::purge(&mut open, Instant::now());
        }
        if open.finished.len() < MAX_FINISHED {
            let finished = Finished {
                bucket: bucket.to_string(),
                scope,
                owner,
                ended,
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

    /// The next batch of query `id` on `bucket` for `reader` (a single-record reader gets
    /// batches of one); `None` once the query has no more records now (204).
    /// `token` is the reading token (authentication on): a query made by another is
    /// refused with 403.
    pub fn next_batch(
        &self,
        bucket: &str,
        scope: &Scope,
        id: u64,
        with_payload: bool,
        reader: Reader,
        token: Option<&str>,
    ) -> Result<Option<Batch>> {
        let query = {
            let mut open = self.lock();
            match open.live.get(&id) {
                Some(query) => query.clone(),
                None => return Self::after_end(&mut open, (bucket, scope, id), reader, token),
            }
        };
        let mut q = query.lock().unwrap_or_else(|p| p.into_inner());
        if q.bucket != bucket || q.scope != *scope || q.last_access.elapsed() >= q.ttl {
            return Err(expired(id));
        }
        check_owner(q.owner.as_deref(), token, id)?;
        q.last_access = Instant::now();
        if let Some(e) = q.pending_error.take() {
            return Err(e);
        }
        let mut limits = q.limits;
        if reader == Reader::Single {
            limits.records = 1;
        }
        if !with_payload {
            // The payload limit does not apply to metadata-only reads.
            limits.bytes = u64::MAX;
        }
        let (mut batch, mut drained) = Self::gather(&mut q, limits, with_payload)?;
        let following = q.iter.is_following();
        // A caught-up continuous query: a batch read (and a single read that found nothing
        // the time before) waits a while for new records, as ReductStore does.
        if following && batch.records.is_empty() && (reader != Reader::Single || q.caught_up) {
            let wait = (q.ttl / 4).min(MAX_CONTINUOUS_WAIT);
            let deadline = Instant::now() + wait;
            while batch.records.is_empty() && Instant::now() < deadline {
                drop(q);
                std::thread::sleep(CONTINUOUS_POLL);
                q = query.lock().unwrap_or_else(|p| p.into_inner());
                (batch, drained) = Self::gather(&mut q, limits, with_payload)?;
            }
        }
        // A continuous query counts its TTL from the end of each read (reduct-py polls
        // with a TTL of twice its interval plus one second).
        q.last_access = Instant::now();
        if following {
            batch.damaged = std::mem::take(&mut q.damaged);
            q.caught_up = batch.records.is_empty();
            if batch.records.is_empty() {
                return Ok(None);
            }
            // v1 says `x-reduct-last: true` when a batch drains what there is now; v2
            // clients read on until they stop, so it never says so.
            batch.last = drained && reader == Reader::Batch;
            return Ok(Some(batch));
        }
        if batch.records.is_empty() {
            // Damage after the last record: reported once, as the answer.
            let damage = (!q.damaged.is_empty()).then(|| q.damaged.remove(0));
            if let Some(e) = damage {
                return Err(e);
            }
            if q.done && q.pending_error.is_none() {
                let (ttl, who) = (q.ttl, (q.scope.clone(), q.owner.clone()));
                drop(q);
                // This read is the one 204 a single-record reader gets.
                self.finish(id, bucket, who, ttl, reader == Reader::Single);
            }
            return Ok(None);
        }
        while q.peeked.is_none() && q.pending_error.is_none() && !q.done {
            match q.iter.next() {
                None => q.done = true,
                Some(Ok(r)) => q.peeked = Some(r),
                Some(Err(e)) if q.iter.has_failed() => q.pending_error = Some(e),
                Some(Err(e)) => q.damaged.push(e),
            }
        }
        batch.damaged = std::mem::take(&mut q.damaged);
        batch.last = q.done && q.peeked.is_none() && q.pending_error.is_none();
        if batch.last {
            // Nothing more to read: release the iterator (and the blocks it maps) now,
            // not when the TTL runs out, and free the query's place under the limit.
            let (ttl, who) = (q.ttl, (q.scope.clone(), q.owner.clone()));
            drop(q);
            self.finish(id, bucket, who, ttl, false);
        }
        Ok(Some(batch))
    }

    /// A read of a query whose last record was delivered: 204 until its TTL passes
    /// (then 404); a single-record reader gets one 204, then 400 "closed".
    fn after_end(
        open: &mut Queries,
        (bucket, scope, id): (&str, &Scope, u64),
        reader: Reader,
        token: Option<&str>,
    ) -> Result<Option<Batch>> {
        let Some(f) = open.finished.get_mut(&id) else {
            return Err(expired(id));
        };
        if f.bucket != bucket || f.scope != *scope || f.last_access.elapsed() >= f.ttl {
            return Err(expired(id));
        }
        check_owner(f.owner.as_deref(), token, id)?;
        if reader == Reader::Single {
            if f.ended {
                let entry = match &f.scope {
                    Scope::Entry(e) => e.as_str(),
                    Scope::Bucket => "",
                };
                return Err(Error::bad_request(format!(
                    "Query'{bucket}/{entry}/{id}' was closed: broken channel"
                )));
            }
            f.ended = true;
        }
        Ok(None)
    }

    /// Takes the next records of the query, up to the limits, never returning to an entry
    /// already in the batch; returns the batch and whether the iterator ran dry.
    fn gather(q: &mut OpenQuery, limits: BatchLimits, with_payload: bool) -> Result<(Batch, bool)> {
        let mut batch = Batch {
            entries: Vec::new(),
            records: Vec::new(),
            payloads: Vec::new(),
            last: false,
            damaged: Vec::new(),
        };
        let (mut bytes, mut header_total) = (0u64, 0u64);
        let mut drained = false;
        loop {
            if batch.records.len() >= limits.records
                || bytes > limits.bytes
                || header_total > limits.metadata_bytes
            {
                break;
            }
            let record = match q.peeked.take() {
                Some(r) => r,
                None if q.done => break,
                None => match q.iter.next() {
                    None if q.iter.is_following() => {
                        // Caught up: the next look starts where each entry stopped.
                        q.iter.rewind();
                        drained = true;
                        break;
                    }
                    None => {
                        q.done = true;
                        break;
                    }
                    Some(Ok(r)) => r,
                    // A strict condition's error is the whole answer: ReductStore drops
                    // what the response had gathered, so a client that wants all or
                    // nothing never gets the records of the batch before it. (An error
                    // met only while looking one record past a full batch is the next
                    // read's answer, as the next batch's would be there.)
                    Some(Err(e)) if q.iter.has_failed() => return Err(e),
                    // A damaged block is read around: the batch goes on with the next
                    // block and says which one it skipped.
                    Some(Err(e)) => {
                        q.damaged.push(e);
                        continue;
                    }
                },
            };
            // A batch names its records by timestamp, so one timestamp of an entry is
            // named once: a record at or before the last one of its entry (only an
            // extension makes such records) starts the next batch.
            let repeats = batch.records.last().is_some_and(|(i, last)| {
                batch.entries[*i] == record.entry && last.timestamp >= record.meta.timestamp
            });
            if repeats {
                q.peeked = Some(record);
                break;
            }
            let index = match batch.entries.iter().position(|e| *e == record.entry) {
                Some(i) if i + 1 == batch.entries.len() => i,
                Some(_) => {
                    // Back to an entry already in the batch: the batch ends here.
                    q.peeked = Some(record);
                    break;
                }
                None => {
                    batch.entries.push(record.entry.clone());
                    batch.entries.len() - 1
                }
            };
            bytes += record.meta.size;
            header_total += header_bytes(&record.meta);
            if with_payload && let Some(p) = record.payload {
                batch.payloads.push(p);
            }
            batch.records.push((index, record.meta));
        }
        Ok((batch, drained))
    }
}
