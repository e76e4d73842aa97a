//! A task's sender thread: every 250 ms when idle (at once when something is recorded) it
//! walks the entries with pending records in name order and sends up to 85 of each as v1
//! batches (reference part 3 §24.4), reading each record from storage at send time.
//!
//! Where 1.21.5 loses records, this does not:
//! - a write and a label update of the same record in one round become one write of the
//!   record as it is now (1.21.5 sends both and the destination refuses the batch);
//! - "already exists" (409) on the destination counts as delivered, so records sent again
//!   after a crash are not errors;
//! - a connection error, a timeout, 5xx, 429, 401, 403 or 404 (the destination bucket gone)
//!   keeps the records and retries after a backoff; only per-record refusals and a batch
//!   the destination cannot take (400, 413, 422) drop records, each counted and logged.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::replication::backlog::{BacklogItem, ItemKind};
use crate::replication::events::{EventSummary, ReplicationEvents};
use crate::replication::origin::{ORIGIN_HEADER, origin_of};
use crate::replication::settings::{ReplicationCompression, ReplicationMode, ReplicationSettings};
use crate::replication::task::Task;
use crate::storage::Store;
use crate::storage::record::Record;
use crate::wire::percent;
use crate::wire::record_header::encode_v1_record;

/// Records per entry and batch (as 1.21.5).
const BATCH_RECORDS: usize = 85;
/// Payload bytes per batch.
const BATCH_BYTES: u64 = 8 << 20;
/// How long an idle sender sleeps between passes.
const IDLE: Duration = Duration::from_millis(250);

/// The first retry after a destination becomes unavailable; each further one waits twice
/// as long, up to [`LAST_RETRY`].
const FIRST_RETRY: Duration = Duration::from_secs(1);
/// The longest wait between retries.
const LAST_RETRY: Duration = Duration::from_secs(60);

/// A destination outage under way.
struct Outage {
    since: Instant,
    failures: u64,
    delay: Duration,
}

/// A pass that could not deliver: the code (an HTTP status, or -3 connection error, -6
/// broken request), why, and how many records it was sending (kept for the next pass).
struct Unavailable {
    code: i32,
    message: String,
    records: u64,
}

impl Unavailable {
    fn new(code: i32, message: impl Into<String>, records: usize) -> Unavailable {
        Unavailable {
            code,
            message: message.into(),
            records: records as u64,
        }
    }
}

/// How a sender reaches its destination and reports.
pub struct Link {
    /// Bounds each request; also the pause after the destination was unavailable.
    pub timeout: Duration,
    /// For `https://` destinations.
    pub tls: ureq::tls::TlsConfig,
    /// Where the summaries of its passes go (`$system` `replications/<instance>/<task>`).
    pub events: Option<Arc<ReplicationEvents>>,
    /// This server's id: the origin of the changes made here is it and the bucket.
    pub origin: Arc<str>,
}

/// Pending items of one entry that began on the same server, sent in one request.
struct Batch<'a> {
    items: &'a [BacklogItem],
    /// Where they began ([`ORIGIN_HEADER`]).
    origin: &'a str,
}

impl<'a> Batch<'a> {
    /// The first items of `items` that share the first one's origin (this server's when
    /// it has none): a request names one origin.
    fn leading(items: &'a [BacklogItem], own: &'a str) -> Batch<'a> {
        let first = items.first().and_then(|i| i.origin.as_deref());
        let same = items
            .iter()
            .take_while(|i| i.origin.as_deref() == first)
            .count();
        Batch {
            items: &items[..same],
            origin: first.unwrap_or(own),
        }
    }
}

/// Runs the sender of `task` until it is stopped.
pub fn run(task: Arc<Task>, store: Weak<Store>, link: Link) {
    let Link {
        timeout,
        tls,
        events,
        origin,
    } = link;
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .tls_config(tls)
        .build()
        .new_agent();
    let mut summary = EventSummary::new(events);
    // `Some(whether it takes compressed batches)` once the destination bucket is known,
    // for the settings it was learnt with.
    let mut destination: Option<bool> = None;
    let mut known_for = task.config();
    // The outage under way: since when, how many passes failed, the next retry's delay.
    let mut outage: Option<Outage> = None;
    while !task.stopped() {
        summary.tick(&task);
        let config = task.config();
        if !Arc::ptr_eq(&config, &known_for) {
            // New settings (another host or bucket, perhaps): ask the destination again.
            destination = None;
            known_for = config.clone();
        }
        let settings = &config.settings;
        match settings.mode {
            ReplicationMode::Enabled => {}
            ReplicationMode::Paused => {
                // Nothing is sent, but whether the destination could be reached is shown.
                let reachable = probe(&agent, settings);
                task.state().is_active = reachable;
                task.wait(IDLE);
                continue;
            }
            ReplicationMode::Disabled => {
                task.state().is_active = false;
                task.wait(IDLE);
                continue;
            }
        }
        let entries = task.entries_pending();
        if entries.is_empty() {
            task.state().is_active = true;
            task.wait(IDLE);
            continue;
        }
        let Some(store) = store.upgrade() else {
            break; // the server is shutting down
        };
        let started = Instant::now();
        let outcome = pass(
            &agent,
            &task,
            &store,
            settings,
            &entries,
            &mut destination,
            &origin,
        );
        drop(store);
        match outcome {
            Ok(()) => {
                if let Some(o) = outage.take() {
                    log::info!(
                        "replication '{}': destination {} reachable again after {} s and {} failed attempt(s)",
                        task.name(),
                        settings.dst_host,
                        o.since.elapsed().as_secs(),
                        o.failures
                    );
                }
                let counts = {
                    let mut state = task.state();
                    state.is_active = true;
                    state.take_pass()
                };
                summary.pass(&task, None, counts, started.elapsed());
            }
            Err(Unavailable {
                code,
                message,
                records,
            }) => {
                // One WARN when it goes down, with the destination's own words; the
                // retries after it are on a timer (1 s doubling to a minute), not one per
                // recorded write.
                let delay = match &mut outage {
                    None => {
                        log::warn!(
                            "replication '{}': destination {} unavailable ({code}: {message}); records kept, retrying with backoff",
                            task.name(),
                            settings.dst_host,
                        );
                        outage = Some(Outage {
                            since: Instant::now(),
                            failures: 1,
                            delay: FIRST_RETRY,
                        });
                        FIRST_RETRY
                    }
                    Some(o) => {
                        log::debug!(
                            "replication '{}': destination {} still unavailable ({code}: {message})",
                            task.name(),
                            settings.dst_host
                        );
                        o.failures += 1;
                        o.delay = (o.delay * 2).min(LAST_RETRY);
                        o.delay
                    }
                };
                destination = None;
                let counts = {
                    let mut state = task.state();
                    state.is_active = false;
                    state.unavailable(records, code, &message);
                    state.take_pass()
                };
                summary.pass(&task, Some((code, message)), counts, started.elapsed());
                // Recorded writes ring the task: only a stop or new settings cut this short.
                let retry_at = Instant::now() + delay;
                while !task.stopped() && Arc::ptr_eq(&task.config(), &known_for) {
                    let left = retry_at.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    task.wait(left.min(IDLE));
                }
                if !Arc::ptr_eq(&task.config(), &known_for) {
                    outage = None;
                }
            }
        }
    }
    summary.flush(&task);
}

/// Whether the destination answers for its bucket (found, or missing and creatable).
fn probe(agent: &ureq::Agent, settings: &ReplicationSettings) -> bool {
    let path = format!("b/{}", path_segment(&settings.dst_bucket));
    status_of(with_auth(agent.get(url(settings, &path)), settings).call())
        .is_ok_and(|(status, _)| status == 200 || status == 404)
}

/// One pass over the entries with pending records.
fn pass(
    agent: &ureq::Agent,
    task: &Task,
    store: &Store,
    settings: &ReplicationSettings,
    entries: &[String],
    destination: &mut Option<bool>,
    origin: &str,
) -> Result<(), Unavailable> {
    // What a failure before the first batch keeps from being sent.
    let first_batch = || task.peek(&entries[0], BATCH_RECORDS).len();
    let bucket = store.bucket(&settings.src_bucket).map_err(|e| {
        Unavailable::new(
            404,
            format!("source bucket '{}': {}", settings.src_bucket, e.message()),
            first_batch(),
        )
    })?;
    let compressed_ok = match *destination {
        Some(ok) => ok,
        None => {
            let ok = ensure_bucket(agent, settings)
                .map_err(|(code, message)| Unavailable::new(code, message, first_batch()))?;
            *destination = Some(ok);
            ok
        }
    };
    let own = origin_of(origin, &settings.src_bucket);
    for entry in entries {
        if task.stopped() {
            break;
        }
        let items = task.peek(entry, BATCH_RECORDS);
        let batch = Batch::leading(&items, &own);
        let done = send_entry(agent, task, &bucket, settings, entry, &batch, compressed_ok)?;
        if let Err(e) = task.delivered(entry, done) {
            log::error!(
                "replication '{}': recording the delivery of {done} record(s) of {entry}: {e}",
                task.name()
            );
        }
    }
    Ok(())
}

fn url(settings: &ReplicationSettings, path: &str) -> String {
    format!("{}/api/v1/{path}", settings.dst_host.trim_end_matches('/'))
}

fn with_auth<B>(
    request: ureq::RequestBuilder<B>,
    settings: &ReplicationSettings,
) -> ureq::RequestBuilder<B> {
    match settings.dst_token.as_deref().filter(|t| !t.is_empty()) {
        Some(token) => request.header("authorization", &format!("Bearer {token}")),
        None => request,
    }
}

/// The status of a response, or why there was none (-6 for a request that timed out,
/// -3 for any other failure to get an answer).
fn status_of(
    result: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
) -> Result<(u16, ureq::http::Response<ureq::Body>), (i32, String)> {
    match result {
        Ok(response) => Ok((response.status().as_u16(), response)),
        Err(ureq::Error::Timeout(_)) => Err((-6, "the request timed out".into())),
        Err(e) => Err((-3, e.to_string())),
    }
}

/// Makes sure the destination bucket exists: created with its defaults when missing.
/// Returns whether the destination takes compressed batches (it says `x-reduct-api` 1.21
/// or later).
fn ensure_bucket(
    agent: &ureq::Agent,
    settings: &ReplicationSettings,
) -> Result<bool, (i32, String)> {
    let path = format!("b/{}", path_segment(&settings.dst_bucket));
    let (status, response) =
        status_of(with_auth(agent.get(url(settings, &path)), settings).call())?;
    let compressed_ok = response
        .headers()
        .get("x-reduct-api")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once('.'))
        .and_then(|(major, minor)| Some((major.parse::<u32>().ok()?, minor.parse::<u32>().ok()?)))
        .is_some_and(|version| version >= (1, 21));
    match status {
        200 => Ok(compressed_ok),
        404 => {
            let created = with_auth(agent.post(url(settings, &path)), settings).send_empty();
            match status_of(created)?.0 {
                200 | 409 => Ok(compressed_ok),
                code => Err((
                    i32::from(code),
                    format!("creating bucket '{}'", settings.dst_bucket),
                )),
            }
        }
        code => Err((
            i32::from(code),
            format!("checking bucket '{}'", settings.dst_bucket),
        )),
    }
}

/// Whether a whole-batch refusal leaves the records worth sending again.
fn transient(status: u16) -> bool {
    !matches!(status, 400 | 413 | 422)
}

/// Sends the pending `items` of `entry`; returns how many of them are settled (delivered,
/// or dropped with a counted error). A record deleted before it could be sent is dropped
/// and counted (404).
fn send_entry(
    agent: &ureq::Agent,
    task: &Task,
    bucket: &crate::storage::Bucket,
    settings: &ReplicationSettings,
    entry: &str,
    batch: &Batch<'_>,
    compressed_ok: bool,
) -> Result<usize, Unavailable> {
    // One send per record: a write and an update of it in one round are one write (read
    // now, so with its labels as they are now). Records are read as they are taken, so a
    // batch stops growing at `BATCH_BYTES` of payload (but takes at least one record).
    let mut writes: Vec<Record> = Vec::new();
    // Updates with the labels they removed (several updates of a record: all of them).
    let mut updates: Vec<(Record, Vec<String>)> = Vec::new();
    let mut bytes = 0u64;
    let mut settled = 0;
    for item in batch.items {
        if writes.iter().any(|r| r.meta.timestamp == item.ts) {
            settled += 1;
            continue;
        }
        if item.kind == ItemKind::Update
            && let Some((_, removed)) = updates
                .iter_mut()
                .find(|(r, _)| r.meta.timestamp == item.ts)
        {
            removed.extend(item.removed.iter().cloned());
            settled += 1;
            continue;
        }
        let record = match bucket.read(entry, Some(item.ts)) {
            Ok(record) => record,
            Err(e) => {
                settled += 1;
                task.state().dropped(1, 404, e.message());
                log::warn!(
                    "replication '{}': record {} of {entry} cannot be sent: {}",
                    task.name(),
                    item.ts,
                    e.message()
                );
                continue;
            }
        };
        if item.kind == ItemKind::Write {
            if settled > 0 && bytes + record.meta.size > BATCH_BYTES {
                break;
            }
            bytes += record.meta.size;
            updates.retain(|(r, _)| r.meta.timestamp != item.ts);
            writes.push(record);
        } else {
            updates.push((record, item.removed.clone()));
        }
        settled += 1;
    }
    let dst_entry = settings.destination_entry(entry);
    let path = format!(
        "b/{}/{}/batch",
        path_segment(&settings.dst_bucket),
        path_segment(&dst_entry)
    );
    // Label updates first; those the destination does not have are sent as writes.
    updates.sort_by_key(|(r, _)| r.meta.timestamp);
    let mut resend: Vec<u64> = Vec::new();
    if !updates.is_empty() {
        let mut request = with_auth(agent.patch(url(settings, &path)), settings)
            .header(ORIGIN_HEADER, batch.origin);
        for (r, removed) in &updates {
            // An update carries no body: its length is 0 and its content type empty; the
            // labels it removed go as empty values, which remove them there too.
            request = request.header(
                &format!("x-reduct-time-{}", r.meta.timestamp),
                &format!("0,,{}", update_labels(&r.meta, removed)),
            );
        }
        let unavailable = |code, message| Unavailable::new(code, message, updates.len());
        let (status, response) =
            status_of(request.send_empty()).map_err(|(c, m)| unavailable(c, m))?;
        match status {
            200 => {
                let mut delivered = 0;
                for (r, _) in &updates {
                    match record_error(&response, r.meta.timestamp) {
                        None => delivered += 1,
                        Some((404, _)) => resend.push(r.meta.timestamp),
                        Some((code, message)) => {
                            refused(task, entry, r.meta.timestamp, code, &message)
                        }
                    }
                }
                task.state().delivered(delivered, 0);
            }
            404 => resend.extend(updates.iter().map(|(r, _)| r.meta.timestamp)),
            code if transient(code) => {
                return Err(unavailable(i32::from(code), error_message(&response)));
            }
            code => {
                let message = error_message(&response);
                log::error!(
                    "replication '{}': the destination refused label updates of {} record(s) of {entry} ({code}: {message}); they are dropped",
                    task.name(),
                    updates.len()
                );
                task.state()
                    .dropped(updates.len() as u64, i32::from(code), &message);
            }
        }
    }
    let mut write_records = writes;
    write_records.extend(
        updates
            .into_iter()
            .map(|(r, _)| r)
            .filter(|r| resend.contains(&r.meta.timestamp)),
    );
    write_records.sort_by_key(|r| r.meta.timestamp);
    if !write_records.is_empty() {
        let mut request = with_auth(agent.post(url(settings, &path)), settings)
            .header("content-type", "application/octet-stream")
            .header(ORIGIN_HEADER, batch.origin);
        let mut body = Vec::new();
        for r in &write_records {
            let (name, value) = encode_v1_record(&r.meta);
            request = request.header(&name, &value);
            if let Some(payload) = &r.payload {
                body.extend_from_slice(payload.as_slice());
            }
        }
        let coding = match settings.compression {
            ReplicationCompression::None => None,
            _ if !compressed_ok => None,
            ReplicationCompression::Gzip => Some("gzip"),
            ReplicationCompression::Zstd => Some("zstd"),
        };
        if let Some(coding) = coding {
            match compress(coding, &body) {
                Ok(packed) => {
                    body = packed;
                    request = request.header("content-encoding", coding);
                }
                Err(e) => log::warn!(
                    "replication '{}': compressing a batch with {coding} failed ({e}); sent as it is",
                    task.name()
                ),
            }
        }
        let unavailable = |code, message| Unavailable::new(code, message, write_records.len());
        let (status, response) =
            status_of(request.send(&body[..])).map_err(|(c, m)| unavailable(c, m))?;
        match status {
            200 => {
                let (mut delivered, mut bytes) = (0, 0);
                for r in &write_records {
                    match record_error(&response, r.meta.timestamp) {
                        // Already there (sent before a crash, or written there too).
                        None | Some((409, _)) => {
                            delivered += 1;
                            bytes += r.meta.size;
                        }
                        Some((code, message)) => {
                            refused(task, entry, r.meta.timestamp, code, &message)
                        }
                    }
                }
                task.state().delivered(delivered, bytes);
            }
            code if transient(code) => {
                return Err(unavailable(i32::from(code), error_message(&response)));
            }
            code => {
                let message = error_message(&response);
                log::error!(
                    "replication '{}': the destination refused a batch of {} record(s) of {entry} ({code}: {message}); they are dropped",
                    task.name(),
                    write_records.len()
                );
                task.state()
                    .dropped(write_records.len() as u64, i32::from(code), &message);
            }
        }
    }
    Ok(settled)
}

/// The labels of an update: the record's labels now (sorted, a value with a comma
/// quoted, as a v1 batch writes them), then the removed ones it does not have again as
/// empty values.
fn update_labels(meta: &crate::storage::RecordMeta, removed: &[String]) -> String {
    let mut parts: Vec<String> = meta
        .labels
        .iter()
        .map(|(k, v)| {
            if v.contains(',') {
                format!("{k}=\"{v}\"")
            } else {
                format!("{k}={v}")
            }
        })
        .collect();
    let mut gone: Vec<&String> = removed
        .iter()
        .filter(|k| !meta.labels.contains_key(k.as_str()))
        .collect();
    gone.sort();
    gone.dedup();
    parts.extend(gone.into_iter().map(|k| format!("{k}=")));
    parts.join(",")
}

/// A batch body compressed for `Content-Encoding: gzip` or `zstd`.
fn compress(coding: &str, body: &[u8]) -> std::io::Result<Vec<u8>> {
    use std::io::Write;
    if coding == "zstd" {
        return zstd::encode_all(body, 3);
    }
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(body)?;
    encoder.finish()
}

/// Counts and logs a record the destination refused for good.
fn refused(task: &Task, entry: &str, ts: u64, code: i32, message: &str) {
    log::error!(
        "replication '{}': the destination refused record {ts} of {entry} ({code}: {message}); it is dropped",
        task.name()
    );
    task.state().dropped(1, code, message);
}

/// The per-record error a v1 batch answered for `ts` (`x-reduct-error-<ts>: <code>,<msg>`).
fn record_error(response: &ureq::http::Response<ureq::Body>, ts: u64) -> Option<(i32, String)> {
    let value = response
        .headers()
        .get(format!("x-reduct-error-{ts}"))?
        .to_str()
        .unwrap_or("");
    let (code, message) = value.split_once(',').unwrap_or((value, ""));
    Some((code.trim().parse().unwrap_or(-1), message.to_string()))
}

/// The destination's `x-reduct-error`, or the status line.
fn error_message(response: &ureq::http::Response<ureq::Body>) -> String {
    response
        .headers()
        .get("x-reduct-error")
        .and_then(|v| v.to_str().ok())
        .map_or_else(|| response.status().to_string(), str::to_string)
}

/// A name as URL path text: unreserved bytes and `/` (nested entries) as they are, every
/// other byte percent-encoded (`%` included).
fn path_segment(name: &str) -> String {
    percent::encode_keeping(name, |b| b.is_ascii_alphanumeric() || b"-._~/".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_path_text() {
        assert_eq!(path_segment("cam/front"), "cam/front");
        assert_eq!(path_segment("50% $meta"), "50%25%20%24meta");
    }
}
