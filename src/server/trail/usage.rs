//! Usage: records and bytes written and read per bucket through the API, counted from
//! each successful request and response, and written every minute (and at shutdown) as
//! `usage/<instance>/<bucket>` and `usage/<instance>/total` events with the storage
//! figures of that moment, as ReductStore 1.21.5 does.

use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;

use serde::Serialize;

use crate::server::api::routes::{EntryRoute, entry_route};
use crate::server::http::Response;
use crate::server::http::head::RequestHead;
use crate::server::protocol::percent;

/// What one bucket saw since the last flush.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Traffic {
    /// Payload bytes written.
    pub write_bytes: u64,
    /// Payload bytes read.
    pub read_bytes: u64,
    /// Records written.
    pub records_written: u64,
    /// Records read.
    pub records_read: u64,
    /// Entries written to.
    pub written_entries: HashSet<String>,
    /// Entries read from.
    pub read_entries: HashSet<String>,
}

impl Traffic {
    /// Adds `other` to this.
    pub fn add(&mut self, other: &Traffic) {
        self.write_bytes += other.write_bytes;
        self.read_bytes += other.read_bytes;
        self.records_written += other.records_written;
        self.records_read += other.records_read;
        self.written_entries
            .extend(other.written_entries.iter().cloned());
        self.read_entries.extend(other.read_entries.iter().cloned());
    }
}

/// The payload of a usage event, in ReductStore's field order.
#[derive(Debug, Serialize)]
pub struct UsageEvent<'a> {
    /// The event's time (µs).
    pub timestamp: u64,
    /// The instance name.
    pub instance: &'a str,
    /// Always 200.
    pub status: u16,
    /// Always empty.
    pub message: &'a str,
    /// Seconds since the last flush.
    pub duration: f64,
    /// Payload bytes written.
    pub write_bytes: u64,
    /// Payload bytes read.
    pub read_bytes: u64,
    /// Records written.
    pub records_written: u64,
    /// Records read.
    pub records_read: u64,
    /// Entries written to.
    pub written_entries: u64,
    /// Entries read from.
    pub read_entries: u64,
    /// Bytes stored now.
    pub storage_bytes: u64,
    /// Buckets counted.
    pub bucket_count: u64,
    /// Entries stored.
    pub entry_count: u64,
    /// Blocks stored.
    pub block_count: u64,
    /// Records stored.
    pub record_count: u64,
}

impl<'a> UsageEvent<'a> {
    /// An event of `traffic` over `duration` seconds, storage figures still zero.
    pub fn of(traffic: &Traffic, instance: &'a str, duration: f64) -> UsageEvent<'a> {
        UsageEvent {
            timestamp: 0,
            instance,
            status: 200,
            message: "",
            duration,
            write_bytes: traffic.write_bytes,
            read_bytes: traffic.read_bytes,
            records_written: traffic.records_written,
            records_read: traffic.records_read,
            written_entries: traffic.written_entries.len() as u64,
            read_entries: traffic.read_entries.len() as u64,
            storage_bytes: 0,
            bucket_count: 0,
            entry_count: 0,
            block_count: 0,
            record_count: 0,
        }
    }
}

/// Traffic per bucket since the last flush.
#[derive(Default)]
pub struct Usage {
    buckets: Mutex<BTreeMap<String, Traffic>>,
}

/// Records in a batch: headers named `prefix<digits>…` (v1 `x-reduct-time-<ts>`, v2
/// `x-reduct-<entry>-<delta>`).
fn batch_records<'a>(headers: impl Iterator<Item = &'a str>, prefix: &str) -> u64 {
    headers
        .filter(|name| {
            name.strip_prefix(prefix)
                .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
        })
        .count() as u64
}

fn response_header<'r>(response: &'r Response, name: &str) -> Option<&'r str> {
    response
        .headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

fn header_names(headers: &[(String, String)]) -> impl Iterator<Item = &str> {
    headers.iter().map(|(n, _)| n.as_str())
}

impl Usage {
    /// Counts a request to `rest` (the path after `/api/v1/`) answered with `response`,
    /// if it wrote or read records of a user bucket.
    pub fn account(&self, head: &RequestHead, rest: &str, response: &Response) {
        if !(200..300).contains(&response.status) {
            return;
        }
        let (write, read) = (head.method == "POST", head.method == "GET");
        let body_len = head
            .header("content-length")
            .and_then(crate::server::http::head::parse_decimal)
            .unwrap_or(0);
        let sent = response.body.content_length();
        let parts: Vec<&str> = rest.splitn(3, '/').collect();
        let mut traffic = Traffic::default();
        let bucket = match parts.as_slice() {
            ["b", bucket, entry] => {
                let entry = percent::decode(entry);
                match entry_route(&head.method, &entry) {
                    EntryRoute::Record if write && head.query_param("ts").is_some() => {
                        traffic.records_written = 1;
                        traffic.write_bytes = body_len;
                        traffic.written_entries.insert(entry);
                    }
                    EntryRoute::Record if read => {
                        traffic.records_read = 1;
                        traffic.read_bytes = sent;
                        traffic.read_entries.insert(entry);
                    }
                    EntryRoute::Batch(name) if write => {
                        traffic.records_written =
                            batch_records(header_names(&head.headers), "x-reduct-time-");
                        traffic.write_bytes = body_len;
                        traffic.written_entries.insert(name.to_string());
                    }
                    EntryRoute::Batch(name) if read => {
                        traffic.records_read =
                            batch_records(header_names(&response.headers), "x-reduct-time-");
                        traffic.read_bytes = sent;
                        traffic.read_entries.insert(name.to_string());
                    }
                    _ => return,
                }
                *bucket
            }
            ["io", bucket, "write"] if write => {
                traffic.records_written = batch_records(header_names(&head.headers), "x-reduct-");
                traffic.write_bytes = body_len;
                let entries = head.header("x-reduct-entries").unwrap_or_default();
                traffic.written_entries = entries.split(',').map(percent::decode).collect();
                *bucket
            }
            ["io", bucket, "read"] if read => {
                traffic.records_read = batch_records(header_names(&response.headers), "x-reduct-");
                traffic.read_bytes = sent;
                let entries = response_header(response, "x-reduct-entries").unwrap_or_default();
                traffic.read_entries = entries.split(',').map(percent::decode).collect();
                *bucket
            }
            _ => return,
        };
        let bucket = percent::decode(bucket);
        if bucket.starts_with('$') || (traffic.records_written == 0 && traffic.records_read == 0) {
            return;
        }
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        match buckets.get_mut(&bucket) {
            Some(known) => known.add(&traffic),
            None => {
                buckets.insert(bucket, traffic);
            }
        }
    }

    /// Takes the traffic counted since the last call, by bucket.
    pub fn take(&self) -> BTreeMap<String, Traffic> {
        std::mem::take(&mut *self.buckets.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_records_count_numbered_headers_only() {
        let names = [
            "x-reduct-time-10",
            "x-reduct-time-11",
            "x-reduct-error-10",
            "content-type",
        ];
        assert_eq!(batch_records(names.into_iter(), "x-reduct-time-"), 2);
        let v2 = [
            "x-reduct-0-0",
            "x-reduct-1-5",
            "x-reduct-entries",
            "x-reduct-labels",
        ];
        assert_eq!(batch_records(v2.into_iter(), "x-reduct-"), 2);
    }
}
