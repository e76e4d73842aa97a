//! What `halflife info` and `GET /api/v1/b/{bucket}/storage` show about a data
//! directory: every bucket with its totals, its entries (records, blocks, overlap, size,
//! time range, storage tiers) and its lifecycle policies — as a table for people
//! (`table.rs`: binary sizes, RFC 3339 dates) or as JSON for scripts (exact numbers, µs
//! timestamps). A running server and a stopped one give the same report, so `info --url`
//! renders exactly what `info` does.
//!
//! Files: `policies.rs` (a bucket's policies in the report), `table.rs` (the report as a
//! table for people), `units.rs` (sizes, rates and instants as people read them).

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::storage::attachments::is_attachment_entry;
use crate::storage::{Bucket, Entry, Store, TierInfo};

pub mod policies;
pub(crate) mod table;
pub(crate) mod units;

pub use policies::PolicyReport;
pub use table::format_table;
pub use units::{human_bytes, human_rate, human_time};

/// One entry of the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EntryReport {
    /// Entry name.
    pub name: String,
    /// Live records.
    pub records: u64,
    /// Blocks (logs holding records count as one each).
    pub blocks: u64,
    /// The most sealed blocks covering one instant (1 when disjoint).
    pub overlap: usize,
    /// Bytes on disk.
    pub bytes: u64,
    /// Oldest record (µs since the epoch), 0 when empty.
    pub oldest_record: u64,
    /// Latest record (µs since the epoch), 0 when empty.
    pub latest_record: u64,
    /// What each storage tier holds: `open` logs, then sealed blocks by codec.
    pub tiers: Vec<TierInfo>,
    /// Why the entry could not be read (its counts are then 0); the rest of the bucket
    /// is unaffected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A bucket's entries added up.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BucketTotals {
    /// Entries listed.
    pub entries: u64,
    /// Live records.
    pub records: u64,
    /// Blocks.
    pub blocks: u64,
    /// Bytes on disk.
    pub bytes: u64,
    /// Oldest record (µs), 0 when empty.
    pub oldest_record: u64,
    /// Latest record (µs), 0 when empty.
    pub latest_record: u64,
    /// The tiers over every entry, by tier name.
    pub tiers: Vec<TierInfo>,
}

/// One bucket of the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BucketReport {
    /// Bucket name.
    pub name: String,
    /// Its entries added up.
    pub totals: BucketTotals,
    /// Its entries, sorted by name (attachment entries are not listed; their bytes
    /// count in the totals, as in ReductStore's bucket size).
    pub entries: Vec<EntryReport>,
    /// The lifecycle policies working on it, sorted by name.
    pub policies: Vec<PolicyReport>,
}

impl BucketReport {
    /// The report of a bucket that was not read: its name, nothing counted.
    pub fn named(name: &str) -> BucketReport {
        BucketReport {
            name: name.to_string(),
            totals: BucketTotals::default(),
            entries: Vec::new(),
            policies: Vec::new(),
        }
    }
}

/// One entry's report; what cannot be read is its `error`.
fn entry_report(entry: &Entry) -> EntryReport {
    let read = || -> Result<EntryReport> {
        let info = entry.info()?;
        Ok(EntryReport {
            name: info.name,
            records: info.record_count,
            blocks: info.block_count,
            overlap: entry.max_overlap()?,
            bytes: info.size,
            oldest_record: info.oldest_record,
            latest_record: info.latest_record,
            tiers: entry.tiers()?,
            error: None,
        })
    };
    read().unwrap_or_else(|e| EntryReport {
        error: Some(e.message().to_string()),
        ..unreadable(entry.name().to_string())
    })
}

/// The row of an entry that cannot be read: its name, nothing counted.
fn unreadable(name: String) -> EntryReport {
    EntryReport {
        name,
        records: 0,
        blocks: 0,
        overlap: 0,
        bytes: 0,
        oldest_record: 0,
        latest_record: 0,
        tiers: Vec::new(),
        error: None,
    }
}

/// The report of one bucket, with the given policies.
pub fn bucket_report(bucket: &Bucket, mut policies: Vec<PolicyReport>) -> BucketReport {
    let mut entries = Vec::new();
    let mut totals = BucketTotals::default();
    for entry in bucket.entries() {
        let report = entry_report(&entry);
        totals.add(&report);
        if !is_attachment_entry(entry.name()) {
            totals.entries += 1;
            entries.push(report);
        }
    }
    for (name, why) in bucket.unavailable_entries() {
        totals.entries += 1;
        entries.push(EntryReport {
            error: Some(why),
            ..unreadable(name)
        });
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    policies.sort_by(|a, b| a.name.cmp(&b.name));
    BucketReport {
        name: bucket.name().to_string(),
        totals,
        entries,
        policies,
    }
}

impl BucketTotals {
    fn add(&mut self, e: &EntryReport) {
        if e.records > 0 {
            if self.records == 0 || e.oldest_record < self.oldest_record {
                self.oldest_record = e.oldest_record;
            }
            self.latest_record = self.latest_record.max(e.latest_record);
        }
        self.records += e.records;
        self.blocks += e.blocks;
        self.bytes += e.bytes;
        for tier in &e.tiers {
            match self.tiers.iter_mut().find(|t| t.tier == tier.tier) {
                Some(sum) => {
                    sum.blocks += tier.blocks;
                    sum.records += tier.records;
                    sum.bytes += tier.bytes;
                }
                None => self.tiers.push(tier.clone()),
            }
        }
        // `open` first, then codecs by name, as an entry lists them.
        self.tiers
            .sort_by(|a, b| (a.tier != "open", &a.tier).cmp(&(b.tier != "open", &b.tier)));
    }
}

/// Reads the report of every bucket of a stopped server's store, with the policies its
/// data directory holds.
pub fn collect(store: &Store) -> Result<Vec<BucketReport>> {
    let mut policies = policies::offline(store)?;
    let mut buckets = Vec::new();
    for bucket in store.buckets() {
        let (mine, rest) = policies.into_iter().partition(|(b, _)| b == bucket.name());
        policies = rest;
        let mine = mine.into_iter().map(|(_, p)| p).collect();
        buckets.push(bucket_report(&bucket, mine));
    }
    buckets.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(buckets)
}

/// The buckets a report shows: `only` that one when given (an error naming it when it is
/// not there), else every user bucket, and the system's (`$system`) after them when
/// `all`. Returns them with how many system buckets were left out.
pub fn select(
    buckets: Vec<BucketReport>,
    only: Option<&str>,
    all: bool,
) -> Result<(Vec<BucketReport>, usize)> {
    if let Some(name) = only {
        let chosen: Vec<BucketReport> = buckets.into_iter().filter(|b| b.name == name).collect();
        if chosen.is_empty() {
            return Err(crate::error::Error::not_found(format!(
                "bucket '{}' is not there",
                name.escape_default()
            )));
        }
        return Ok((chosen, 0));
    }
    let (system, mut users): (Vec<_>, Vec<_>) =
        buckets.into_iter().partition(|b| b.name.starts_with('$'));
    let hidden = if all {
        users.extend(system);
        0
    } else {
        system.len()
    };
    Ok((users, hidden))
}
