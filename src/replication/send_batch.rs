//! One request of a replication: the pending items of one entry that began on the same
//! server, read at send time, label updates first, then writes (compressed when the
//! destination takes it); what the destination answers settles each item.

use crate::replication::backlog::{BacklogItem, ItemKind};
use crate::replication::destination::{
    Unavailable, error_message, path_segment, record_error, status_of, transient, url, with_auth,
};
use crate::replication::origin::ORIGIN_HEADER;
use crate::replication::settings::{ReplicationCompression, ReplicationSettings};
use crate::replication::task::Task;
use crate::storage::record::Record;
use crate::wire::record_header::encode_v1_record;

/// Payload bytes per batch.
const BATCH_BYTES: u64 = 8 << 20;

/// Pending items of one entry that began on the same server, sent in one request.
pub(super) struct Batch<'a> {
    items: &'a [BacklogItem],
    /// Where they began ([`ORIGIN_HEADER`]).
    origin: &'a str,
}

impl<'a> Batch<'a> {
    /// The first items of `items` that share the first one's origin (this server's when
    /// it has none): a request names one origin.
    pub(super) fn leading(items: &'a [BacklogItem], own: &'a str) -> Batch<'a> {
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

/// Sends the pending `items` of `entry`; returns how many of them are settled (delivered,
/// or dropped with a counted error). A record deleted before it could be sent is dropped
/// and counted (404).
pub(super) fn send_entry(
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
                // A missing bucket is a per-record 404 in a v1 batch (as 1.21.5 answers):
                // the records are kept and the batch is tried again (after the sender made
                // the bucket, or said why it cannot), never dropped one by one.
                if let Some((code, message)) = write_records
                    .iter()
                    .filter_map(|r| record_error(&response, r.meta.timestamp))
                    .find(|(code, message)| *code == 404 && is_missing_bucket(message))
                {
                    return Err(unavailable(code, message));
                }
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

/// Whether a 404's message says the destination bucket is missing (`Bucket 'x' is not
/// found`), rather than a record or an entry.
fn is_missing_bucket(message: &str) -> bool {
    message.starts_with("Bucket '") && message.ends_with("not found")
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
