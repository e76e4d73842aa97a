//! Usage: records and bytes written and read per bucket through the API, counted from
//! each successful request and response, and written every minute (and at shutdown) as
//! `usage/<instance>/<bucket>` and `usage/<instance>/total` events with the storage
//! figures of that moment, as ReductStore 1.21.5 does — and, ours, the bytes per storage
//! tier.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::sharded::Sharded;

use crate::server::http::Response;
use crate::server::http::head::RequestHead;
use crate::server::protocol::routes::{EntryRoute, entry_route};
use crate::wire::percent;

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
    pub written_entries: BTreeSet<String>,
    /// Entries read from.
    pub read_entries: BTreeSet<String>,
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
    /// halflife's own: blocks, records and bytes per storage tier now (`open`, a codec,
    /// `remote NAME`), what the console charts bytes by tier over time from.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tiers: Vec<crate::storage::TierInfo>,
}

/// Adds an entry's `tiers` to a bucket's, tier by tier.
pub fn add_tiers(into: &mut Vec<crate::storage::TierInfo>, tiers: Vec<crate::storage::TierInfo>) {
    for tier in tiers {
        match into.iter_mut().find(|t| t.tier == tier.tier) {
            Some(sum) => {
                sum.blocks += tier.blocks;
                sum.records += tier.records;
                sum.bytes += tier.bytes;
            }
            None => into.push(tier),
        }
    }
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
            tiers: Vec::new(),
        }
    }
}

/// Traffic per bucket since the last flush, in per-thread shards.
#[derive(Default)]
pub struct Usage {
    buckets: Sharded<BTreeMap<String, Traffic>>,
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

/// Which way a request moved records.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Way {
    Written,
    Read,
}

/// The entries a request moved records of: one, or the `x-reduct-entries` list.
enum Entries<'a> {
    One(Cow<'a, str>),
    Listed(&'a str),
}

/// What one request moved, borrowed from it: counted without allocating once its bucket
/// and entries are known.
struct Moved<'a> {
    bucket: Cow<'a, str>,
    way: Way,
    records: u64,
    bytes: u64,
    entries: Entries<'a>,
}

/// What a request to `rest` (the path after `/api/v1/`) answered with `response` moved,
/// if it wrote or read records.
fn moved<'a>(head: &'a RequestHead, rest: &'a str, response: &'a Response) -> Option<Moved<'a>> {
    let way = match head.method.as_str() {
        "POST" => Way::Written,
        "GET" => Way::Read,
        _ => return None,
    };
    let body_len = || {
        head.header("content-length")
            .and_then(crate::server::http::head::parse_decimal)
            .unwrap_or(0)
    };
    let sent = response.body.content_length();
    let mut parts = rest.splitn(3, '/');
    let (kind, bucket, tail) = (parts.next()?, parts.next()?, parts.next()?);
    let (records, bytes, entries) = match (kind, way) {
        ("b", _) => {
            let entry = percent::decode_cow(tail);
            match (entry_route(&head.method, &entry), way) {
                (EntryRoute::Record, Way::Written) if head.query_param("ts").is_some() => {
                    (1, body_len(), Entries::One(entry))
                }
                (EntryRoute::Record, Way::Read) => (1, sent, Entries::One(entry)),
                (EntryRoute::Batch(name), _) => {
                    let headers = if way == Way::Written {
                        &head.headers
                    } else {
                        &response.headers
                    };
                    let records = batch_records(header_names(headers), "x-reduct-time-");
                    let bytes = if way == Way::Written {
                        body_len()
                    } else {
                        sent
                    };
                    (records, bytes, Entries::One(Cow::Owned(name.to_string())))
                }
                _ => return None,
            }
        }
        ("io", Way::Written) if tail == "write" => (
            batch_records(header_names(&head.headers), "x-reduct-"),
            body_len(),
            Entries::Listed(head.header("x-reduct-entries").unwrap_or_default()),
        ),
        ("io", Way::Read) if tail == "read" => (
            batch_records(header_names(&response.headers), "x-reduct-"),
            sent,
            Entries::Listed(response_header(response, "x-reduct-entries").unwrap_or_default()),
        ),
        _ => return None,
    };
    let bucket = percent::decode_cow(bucket);
    (records > 0 && !bucket.starts_with('$')).then_some(Moved {
        bucket,
        way,
        records,
        bytes,
        entries,
    })
}

fn note_entry(set: &mut BTreeSet<String>, entry: &str) {
    if !set.contains(entry) {
        set.insert(entry.to_string());
    }
}

impl Usage {
    /// Counts a request to `rest` (the path after `/api/v1/`) answered with `response`,
    /// if it wrote or read records of a user bucket.
    pub fn account(&self, head: &RequestHead, rest: &str, response: &Response) {
        if !(200..300).contains(&response.status) {
            return;
        }
        let Some(moved) = moved(head, rest, response) else {
            return;
        };
        let mut buckets = self.buckets.mine();
        if !buckets.contains_key(moved.bucket.as_ref()) {
            buckets.insert(moved.bucket.to_string(), Traffic::default());
        }
        let Some(traffic) = buckets.get_mut(moved.bucket.as_ref()) else {
            return;
        };
        let set = match moved.way {
            Way::Written => {
                traffic.records_written += moved.records;
                traffic.write_bytes += moved.bytes;
                &mut traffic.written_entries
            }
            Way::Read => {
                traffic.records_read += moved.records;
                traffic.read_bytes += moved.bytes;
                &mut traffic.read_entries
            }
        };
        match &moved.entries {
            Entries::One(entry) => note_entry(set, entry),
            Entries::Listed(list) => {
                for entry in list.split(',') {
                    note_entry(set, &percent::decode_cow(entry));
                }
            }
        }
    }

    /// Takes the traffic counted since the last call, by bucket.
    pub fn take(&self) -> BTreeMap<String, Traffic> {
        let mut all: BTreeMap<String, Traffic> = BTreeMap::new();
        self.buckets.each(|shard| {
            for (bucket, traffic) in std::mem::take(shard) {
                all.entry(bucket).or_default().add(&traffic);
            }
        });
        all
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
