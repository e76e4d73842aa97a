//! One-shot maintenance on a data directory whose server is stopped: compress or delete
//! the records of a bucket older than a duration, entry by entry, with a progress callback
//! and a summary. The data directory's lock keeps it off a directory a server is using.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::Config;
use crate::duration::parse_duration;
use crate::error::{Error, Result};
use crate::storage::condition::Condition;
use crate::storage::{Codec, CompressPool, Store};

/// What to do.
#[derive(Debug, Clone)]
pub enum Action {
    /// Recompress sealed blocks to this codec.
    Compress(Codec),
    /// Delete records, only those matching the condition when one is given (JSON).
    Delete(Option<serde_json::Value>),
}

/// Where and on what.
#[derive(Debug, Clone)]
pub struct Job {
    /// The data directory.
    pub data_path: PathBuf,
    /// The bucket.
    pub bucket: String,
    /// Entry patterns; empty means all.
    pub entries: Vec<String>,
    /// Records older than this duration (`30d`, `12h`) are processed.
    pub older_than: String,
    /// Recompression threads.
    pub threads: usize,
    /// Count and report only.
    pub dry_run: bool,
    /// The action.
    pub action: Action,
}

/// What a run did (or, dry, would do).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Entries visited.
    pub entries: usize,
    /// Records compressed or deleted.
    pub records: u64,
    /// Blocks rewritten or dropped.
    pub blocks: u64,
    /// Size of the visited entries before.
    pub bytes_before: u64,
    /// Size of the visited entries after.
    pub bytes_after: u64,
    /// Wall time.
    pub duration: Duration,
}

/// Runs a job; `progress(done, total, entry)` is called before each entry and once at the
/// end.
pub fn run(job: &Job, progress: &mut dyn FnMut(usize, usize, &str)) -> Result<Summary> {
    if !job.data_path.is_dir() {
        return Err(Error::not_found(format!(
            "data directory '{}' does not exist",
            job.data_path.display()
        )));
    }
    let older_than = parse_duration(&job.older_than)
        .map_err(|e| Error::unprocessable(format!("--older-than '{}': {e}", job.older_than)))?;
    if older_than < 0 {
        return Err(Error::unprocessable(format!(
            "--older-than '{}' must not be negative",
            job.older_than
        )));
    }
    let when = match &job.action {
        Action::Delete(Some(json)) => Some(Condition::parse(json, false)?),
        _ => None,
    };
    let pool = match &job.action {
        Action::Compress(target) => {
            crate::storage::compress::validate_target(*target)?;
            Some(CompressPool::new(job.threads)?)
        }
        Action::Delete(_) => None,
    };
    let mut config = Config::new(&job.data_path);
    config.compress_threads = job.threads;
    let store = Store::open(config)?;
    let bucket = store.bucket(&job.bucket)?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    let stop = now.saturating_sub(older_than as u64);
    let entries = bucket.select_entries(&job.entries)?;
    let started = Instant::now();
    let mut summary = Summary {
        entries: entries.len(),
        ..Default::default()
    };
    for (done, entry) in entries.iter().enumerate() {
        progress(done, entries.len(), entry.name());
        let name = [entry.name().to_string()];
        let before = entry.info()?.size;
        summary.bytes_before += before;
        match (&job.action, &pool) {
            (Action::Compress(target), Some(_)) if job.dry_run => {
                let stats = bucket.estimate_compress(&name, 0, stop, *target)?;
                summary.records += stats.records;
                summary.blocks += stats.blocks;
            }
            (Action::Compress(target), Some(pool)) => {
                let stats = bucket.compress_blocks(&name, 0, stop, *target, pool, &|| false)?;
                summary.records += stats.records;
                summary.blocks += stats.blocks;
            }
            _ => {
                let stats = bucket.remove_records_until(
                    &name,
                    0,
                    stop,
                    when.as_ref(),
                    job.dry_run,
                    &|| false,
                )?;
                summary.records += stats.records;
                summary.blocks += stats.blocks;
            }
        }
        // An entry emptied by a delete may be gone from the bucket's view; count it as 0.
        summary.bytes_after += entry.info().map_or(0, |i| i.size);
    }
    progress(entries.len(), entries.len(), "");
    summary.duration = started.elapsed();
    Ok(summary)
}

/// The summary as a small table (what the CLI prints).
pub fn format_summary(job: &Job, s: &Summary) -> String {
    let action = match (&job.action, job.dry_run) {
        (Action::Compress(c), false) => format!("compressed to {c}"),
        (Action::Compress(c), true) => format!("would compress to {c} (dry run)"),
        (Action::Delete(_), false) => "deleted".to_string(),
        (Action::Delete(_), true) => "would delete (dry run)".to_string(),
    };
    let secs = s.duration.as_secs_f64().max(1e-9);
    let mb = |b: u64| b as f64 / 1e6;
    let mut out = String::new();
    out.push_str(&format!(
        "bucket '{}', {} entries, records older than {}: {action}\n",
        job.bucket, s.entries, job.older_than
    ));
    for (k, v) in [
        ("records", s.records.to_string()),
        ("blocks", s.blocks.to_string()),
        (
            "bytes before",
            format!("{} ({:.1} MB)", s.bytes_before, mb(s.bytes_before)),
        ),
        (
            "bytes after",
            format!("{} ({:.1} MB)", s.bytes_after, mb(s.bytes_after)),
        ),
        ("duration", format!("{:.2} s", s.duration.as_secs_f64())),
        (
            "throughput",
            format!(
                "{:.0} records/s, {:.1} MB/s",
                s.records as f64 / secs,
                mb(s.bytes_before) / secs
            ),
        ),
    ] {
        out.push_str(&format!("  {k:<14} {v}\n"));
    }
    out
}
