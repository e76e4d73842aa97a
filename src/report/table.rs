//! The report as a table for people: a row per entry, a totals row per bucket, and a
//! line per policy of the bucket with its state and last result.

use super::units::{human_bytes, human_time};
use super::{BucketReport, PolicyReport};
use crate::lifecycle::LifecycleType;
use crate::storage::TierInfo;

/// Widest line the table makes (a `when` too long for one line is wrapped).
pub const TABLE_WIDTH: usize = 100;

/// Width of the name column; a longer name gets a line of its own above its numbers.
const NAME_WIDTH: usize = 28;

/// The tiers of an entry on its own line: `zstd-3 12 blocks 4.1 MiB, open 1 block
/// 80.0 KiB`.
fn tiers_line(tiers: &[TierInfo]) -> String {
    let cells: Vec<String> = tiers
        .iter()
        .map(|t| {
            let blocks = if t.blocks == 1 { "block" } else { "blocks" };
            format!("{} {} {blocks} {}", t.tier, t.blocks, human_bytes(t.bytes))
        })
        .collect();
    wrap(&format!("tiers: {}", cells.join(", ")), 4)
}

/// `text` broken at spaces into lines of at most [`TABLE_WIDTH`] columns, each indented
/// by `indent` (a word longer than a line stays whole), each ending in a newline.
fn wrap(text: &str, indent: usize) -> String {
    let pad = " ".repeat(indent);
    let mut out = String::new();
    let mut line = pad.clone();
    for word in text.split(' ') {
        if line.len() > indent && line.len() + 1 + word.len() > TABLE_WIDTH {
            out.push_str(&line);
            out.push('\n');
            line = format!("{pad}  ");
        }
        if line.len() > indent && !line.ends_with(' ') {
            line.push(' ');
        }
        line.push_str(word);
    }
    out.push_str(&line);
    out.push('\n');
    out
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
        (LifecycleType::Tier, Some(remote)) => format!("tier to {remote}"),
        (LifecycleType::Tier, None) => "tier".to_string(),
    };
    let when = p
        .when
        .as_ref()
        .map(|w| format!(" where {w}"))
        .unwrap_or_default();
    let entries = if p.entries.is_empty() {
        String::new()
    } else {
        format!(" of {}", p.entries.join(","))
    };
    let mut line = format!(
        "policy '{}': {what}{entries}{when}, older than {}, every {}, {}: {}",
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

/// The report as a table of at most `TABLE_WIDTH` columns: per bucket its entries
/// (each with its tiers below it), a totals row and its policies.
pub fn format_table(buckets: &[BucketReport]) -> String {
    let row = |name: &str, records: u64, overlap: String, bytes: u64, oldest, latest| {
        let numbers = format!(
            "{records:>9} {overlap:>7} {:>10} {:<20} {:<20}",
            human_bytes(bytes),
            human_time(oldest),
            human_time(latest),
        );
        let numbers = numbers.trim_end();
        if name.chars().count() > NAME_WIDTH {
            format!("{name}\n{:NAME_WIDTH$} {numbers}\n", "")
        } else {
            format!("{name:<NAME_WIDTH$} {numbers}\n")
        }
    };
    let mut out = format!(
        "{:<NAME_WIDTH$} {:>9} {:>7} {:>10} {:<20} {}\n",
        "bucket/entry", "records", "overlap", "size", "oldest", "latest"
    );
    for bucket in buckets {
        for e in &bucket.entries {
            let name = format!("{}/{}", bucket.name, e.name);
            if let Some(error) = &e.error {
                out.push_str(&wrap(&format!("{name} unreadable: {error}"), 0));
                continue;
            }
            let (oldest, latest) = (e.oldest_record, e.latest_record);
            let overlap = e.overlap.to_string();
            out.push_str(&row(&name, e.records, overlap, e.bytes, oldest, latest));
            if !e.tiers.is_empty() {
                out.push_str(&tiers_line(&e.tiers));
            }
        }
        let t = &bucket.totals;
        let entries = match t.entries {
            0 => "no entries".to_string(),
            1 => "1 entry".to_string(),
            n => format!("{n} entries"),
        };
        let name = format!("{} ({entries})", bucket.name);
        let (oldest, latest) = (t.oldest_record, t.latest_record);
        out.push_str(&row(&name, t.records, "-".into(), t.bytes, oldest, latest));
        if !t.tiers.is_empty() {
            out.push_str(&tiers_line(&t.tiers));
        }
        for p in &bucket.policies {
            out.push_str(&wrap(&policy_line(p), 2));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_text_wraps_within_the_width() {
        let text = format!("policy 'p': delete where {}", "{\"&a\": 1} ".repeat(40));
        let wrapped = wrap(text.trim_end(), 2);
        assert!(wrapped.lines().count() > 3, "{wrapped}");
        for line in wrapped.lines() {
            assert!(line.len() <= TABLE_WIDTH, "{line}");
            assert!(line.starts_with("  "), "{line}");
        }
        assert_eq!(wrap("short", 4), "    short\n");
    }
}
