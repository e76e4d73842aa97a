//! The report as a table for people: a row per entry, a totals row per bucket, and a
//! line per policy of the bucket with its state and last result.

use super::units::{human_bytes, human_time};
use super::{BucketReport, PolicyReport};
use crate::lifecycle::LifecycleType;
use crate::storage::TierInfo;

/// The tiers of an entry in one cell: `zstd-3 12 (4.1 MiB), open 1 (80.0 KiB)` (blocks
/// and bytes per tier).
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

/// An RFC 3339 instant to the second.
fn short_time(text: &str) -> String {
    match text.split_once('.') {
        Some((seconds, _)) => format!("{seconds}Z"),
        None => text.to_string(),
    }
}

/// One policy in a line: what it does, its state, its last run, what comes next.
fn policy_line(p: &PolicyReport) -> String {
    let what = match (p.kind, &p.target) {
        (LifecycleType::Compress, Some(target)) => format!("compress to {target}"),
        (LifecycleType::Compress, None) => "compress".to_string(),
        (LifecycleType::Delete, _) => "delete".to_string(),
    };
    let entries = if p.entries.is_empty() {
        String::new()
    } else {
        format!(" of {}", p.entries.join(","))
    };
    let mut line = format!(
        "  policy '{}': {what}{entries}, older than {}, every {}, {}: {}",
        p.name,
        p.older_than,
        p.interval,
        p.mode.as_str(),
        p.state
    );
    if let Some(progress) = &p.progress {
        if progress.bytes_total > 0 {
            line.push_str(&format!(
                " ({} of {}",
                human_bytes(progress.bytes_done),
                human_bytes(progress.bytes_total)
            ));
        } else {
            line.push_str(&format!(
                " ({} of {} records",
                progress.records_done, progress.records_total
            ));
        }
        line.push_str(&format!(
            ", {} of {} blocks)",
            progress.blocks_done, progress.blocks_total
        ));
    }
    if let (Some(at), Some(last)) = (&p.last_run, &p.last_result) {
        line.push_str(&format!(
            "; last run {}: {} records, {} blocks",
            short_time(at),
            last.processed_records,
            last.processed_blocks
        ));
        if last.bytes_saved > 0 {
            line.push_str(&format!(", saved {}", human_bytes(last.bytes_saved)));
        }
        if let Some(ts) = last.last_processed_ts.or(last.resume_ts) {
            line.push_str(&format!(", done up to {}", human_time(ts)));
        }
    }
    if let Some(total) = p.bytes_saved_total.filter(|&b| b > 0) {
        line.push_str(&format!("; saved {} since start", human_bytes(total)));
    }
    if let Some(next) = &p.next_run {
        line.push_str(&format!("; next run {}", short_time(next)));
    }
    if let Some(error) = &p.error {
        line.push_str(&format!("; error: {error}"));
    }
    line
}

/// The report as a table.
pub fn format_table(buckets: &[BucketReport]) -> String {
    let row = |name: &str,
               records: u64,
               blocks: u64,
               overlap: String,
               bytes: u64,
               oldest: u64,
               latest: u64,
               tiers: &[TierInfo]| {
        format!(
            "{name:<36} {records:>10} {blocks:>7} {overlap:>7} {:>10} {:<20} {:<20} {}\n",
            human_bytes(bytes),
            human_time(oldest),
            human_time(latest),
            tiers_cell(tiers)
        )
    };
    let mut out = format!(
        "{:<36} {:>10} {:>7} {:>7} {:>10} {:<20} {:<20} tiers (blocks, bytes)\n",
        "bucket/entry", "records", "blocks", "overlap", "size", "oldest", "latest"
    );
    for bucket in buckets {
        for e in &bucket.entries {
            let name = format!("{}/{}", bucket.name, e.name);
            match &e.error {
                Some(error) => out.push_str(&format!("{name:<36} unreadable: {error}\n")),
                None => out.push_str(&row(
                    &name,
                    e.records,
                    e.blocks,
                    e.overlap.to_string(),
                    e.bytes,
                    e.oldest_record,
                    e.latest_record,
                    &e.tiers,
                )),
            }
        }
        let t = &bucket.totals;
        let entries = match t.entries {
            0 => "no entries".to_string(),
            1 => "1 entry".to_string(),
            n => format!("{n} entries"),
        };
        out.push_str(&row(
            &format!("{} ({entries})", bucket.name),
            t.records,
            t.blocks,
            "-".to_string(),
            t.bytes,
            t.oldest_record,
            t.latest_record,
            &t.tiers,
        ));
        for p in &bucket.policies {
            out.push_str(&policy_line(p));
            out.push('\n');
        }
    }
    out
}
