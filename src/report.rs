//! What `halflife info` shows about a data directory: every bucket and entry with its
//! records, blocks, overlap, size, time range and storage tiers — as a table for people
//! (human sizes, RFC 3339 dates) or as JSON for scripts (exact numbers, µs timestamps).

use std::time::{Duration, UNIX_EPOCH};

use serde::Serialize;

use crate::error::Result;
use crate::storage::{Store, TierInfo};
use crate::timefmt::rfc3339;

/// One entry of the report.
#[derive(Debug, Clone, Serialize)]
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
}

/// One bucket of the report.
#[derive(Debug, Clone, Serialize)]
pub struct BucketReport {
    /// Bucket name.
    pub name: String,
    /// Its entries, sorted by name.
    pub entries: Vec<EntryReport>,
}

/// Reads the report of every bucket of an open store.
pub fn collect(store: &Store) -> Result<Vec<BucketReport>> {
    let mut buckets = Vec::new();
    for bucket in store.buckets() {
        let mut entries = Vec::new();
        for entry in bucket.entries() {
            let info = entry.info()?;
            entries.push(EntryReport {
                name: info.name,
                records: info.record_count,
                blocks: info.block_count,
                overlap: entry.max_overlap()?,
                bytes: info.size,
                oldest_record: info.oldest_record,
                latest_record: info.latest_record,
                tiers: entry.tiers()?,
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        buckets.push(BucketReport {
            name: bucket.name().to_string(),
            entries,
        });
    }
    buckets.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(buckets)
}

/// A byte count for people: `512 B`, `1.5 KB`, `64.0 MB`, `2.10 GB` (powers of 1000, as
/// the sizes ReductStore takes).
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KB", "MB", "GB", "TB", "PB"];
    if bytes < 1000 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1000.0 && unit < UNITS.len() - 1 {
        value /= 1000.0;
        unit += 1;
    }
    let decimals = if value < 10.0 { 2 } else { 1 };
    format!("{value:.decimals$} {}", UNITS[unit])
}

/// A timestamp in µs as RFC 3339 (`-` for 0, an empty entry's).
pub fn human_time(micros: u64) -> String {
    if micros == 0 {
        return "-".to_string();
    }
    let text = rfc3339(UNIX_EPOCH + Duration::from_micros(micros));
    // Whole seconds read better; the JSON form keeps the µs.
    match text.split_once('.') {
        Some((seconds, _)) => format!("{seconds}Z"),
        None => text,
    }
}

/// The tiers of an entry in one cell: `zstd-3 12 (4.1 MB), open 1 (80 KB)` (blocks and
/// bytes per tier).
fn tiers_cell(tiers: &[TierInfo]) -> String {
    if tiers.is_empty() {
        return "-".to_string();
    }
    tiers
        .iter()
        .map(|t| format!("{} {} ({})", t.tier, t.blocks, human_bytes(t.bytes)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The report as a table.
pub fn format_table(buckets: &[BucketReport]) -> String {
    let mut out = format!(
        "{:<36} {:>10} {:>7} {:>7} {:>10} {:<20} {:<20} tiers (blocks, bytes)\n",
        "bucket/entry", "records", "blocks", "overlap", "size", "oldest", "latest"
    );
    for bucket in buckets {
        if bucket.entries.is_empty() {
            out.push_str(&format!("{:<36} (no entries)\n", bucket.name));
        }
        for e in &bucket.entries {
            out.push_str(&format!(
                "{:<36} {:>10} {:>7} {:>7} {:>10} {:<20} {:<20} {}\n",
                format!("{}/{}", bucket.name, e.name),
                e.records,
                e.blocks,
                e.overlap,
                human_bytes(e.bytes),
                human_time(e.oldest_record),
                human_time(e.latest_record),
                tiers_cell(&e.tiers)
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_times_read_as_people_write_them() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(999), "999 B");
        assert_eq!(human_bytes(1_500), "1.50 KB");
        assert_eq!(human_bytes(64_000_000), "64.0 MB");
        assert_eq!(human_bytes(2_100_000_000), "2.10 GB");
        assert_eq!(human_bytes(u64::MAX), "18446.7 PB");
        assert_eq!(human_time(0), "-");
        assert_eq!(human_time(1_356_998_400_000_000), "2013-01-01T00:00:00Z");
    }
}
