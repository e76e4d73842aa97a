//! One-shot maintenance on a data directory whose server is stopped: compress or delete
//! the records of a bucket older than a duration, entry by entry, with a progress callback
//! and a summary. The data directory's lock keeps it off a directory a server is using.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::duration::parse_duration;
use crate::error::{Error, Result};
use crate::storage::compress::{CompressRequest, CompressWindow};
use crate::storage::condition::Condition;
use crate::storage::config::Config;
use crate::storage::{Codec, CompressPool, RemoveControl, Store};

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
    /// What the run touched, before: the blocks a compression rewrites, the entries a
    /// deletion removes records from.
    pub bytes_before: u64,
    /// What those take after (a compress dry run: predicted; a delete dry run: `None`,
    /// not predicted).
    pub bytes_after: Option<u64>,
    /// Size of the visited entries before.
    pub entries_bytes_before: u64,
    /// Size of the visited entries after (`None` on a dry run of a deletion).
    pub entries_bytes_after: Option<u64>,
    /// Blocks of the window a compression left as they are, their codec already as
    /// strong as the target or stronger, and the weakest and strongest of those codecs.
    pub kept: u64,
    /// See `kept`.
    pub kept_codecs: Option<(Codec, Codec)>,
    /// Wall time.
    pub duration: Duration,
    /// Stopped by `cancel` before the end: what is counted is done and committed, the
    /// rest is as it was.
    pub cancelled: bool,
}

/// How far a run is, for a progress bar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// The work ahead: bytes the run reads (the eligible blocks of a compression, the
    /// entries of a deletion).
    Start {
        /// Bytes ahead.
        total_bytes: u64,
    },
    /// An entry is next.
    Entry(String),
    /// Bytes done so far (each step is one block of a compression, one entry of a
    /// deletion).
    Bytes(u64),
}

/// Runs a job, reporting `progress` and asking `cancel` between blocks (and entries):
/// once it says yes, the run commits what it finished and returns a summary marked
/// cancelled.
pub fn run(
    job: &Job,
    progress: &(dyn Fn(Progress) + Sync),
    cancel: &dyn Fn() -> bool,
) -> Result<Summary> {
    crate::storage::marker::require_data_dir(&job.data_path)?;
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
    for entry in &entries {
        summary.entries_bytes_before += entry.info()?.size;
    }
    if let (Action::Compress(target), true) = (&job.action, job.dry_run) {
        // One estimate over every entry, so the sample (at most 64 MiB read) is spread
        // over all of them.
        let window = CompressWindow::new(&job.entries, 0..stop, *target);
        let total_bytes = bucket.eligible_for_compress(&window)?.bytes_before;
        progress(Progress::Start { total_bytes });
        let done = std::sync::atomic::AtomicU64::new(0);
        let walked = |bytes: u64| {
            let now = done.fetch_add(bytes, std::sync::atomic::Ordering::Relaxed) + bytes;
            progress(Progress::Bytes(now));
        };
        let stats = bucket.estimate_compress_observed(&window, &walked)?;
        summary.records = stats.records;
        summary.blocks = stats.blocks;
        summary.bytes_before = stats.bytes_before;
        summary.bytes_after = Some(stats.bytes_after);
        summary.entries_bytes_after = Some(
            summary.entries_bytes_before - stats.bytes_before.min(summary.entries_bytes_before)
                + stats.bytes_after,
        );
        summary.kept = stats.kept;
        summary.kept_codecs = stats.kept_codecs;
        summary.duration = started.elapsed();
        return Ok(summary);
    }
    let total_bytes = match &job.action {
        Action::Compress(target) => {
            let window = CompressWindow::new(&job.entries, 0..stop, *target);
            bucket.eligible_for_compress(&window)?.bytes_before
        }
        Action::Delete(_) => summary.entries_bytes_before,
    };
    progress(Progress::Start { total_bytes });
    let done = std::sync::atomic::AtomicU64::new(0);
    let step = |bytes: u64| {
        let now = done.fetch_add(bytes, std::sync::atomic::Ordering::Relaxed) + bytes;
        progress(Progress::Bytes(now));
    };
    let mut entries_after = 0;
    let mut touched_after = 0;
    let mut compressed = crate::storage::CompressStats::default();
    if let (Action::Compress(target), Some(pool)) = (&job.action, &pool) {
        // One stream over every selected entry: the pool and the committer stay busy from
        // the first block to the last, rather than draining at the end of each entry.
        let current = std::sync::Mutex::new(String::new());
        let on_block = |entry: &str, bytes: u64| {
            let mut shown = current.lock().unwrap_or_else(|p| p.into_inner());
            if *shown != entry {
                entry.clone_into(&mut shown);
                progress(Progress::Entry(entry.to_string()));
            }
            drop(shown);
            step(bytes);
        };
        let stats = bucket.compress_blocks(&CompressRequest {
            cancel,
            on_block: &on_block,
            ..CompressRequest::new(CompressWindow::new(&job.entries, 0..stop, *target), pool)
        })?;
        summary.records = stats.records;
        summary.blocks = stats.blocks;
        summary.bytes_before = stats.bytes_before;
        touched_after = stats.bytes_after;
        compressed = stats;
        summary.cancelled = cancel();
        for entry in &entries {
            entries_after += entry.info().map_or(0, |i| i.size);
        }
    } else {
        for entry in &entries {
            if cancel() {
                summary.cancelled = true;
            }
            let info = entry.info()?;
            if summary.cancelled {
                entries_after += info.size;
                continue;
            }
            progress(Progress::Entry(entry.name().to_string()));
            let name = [entry.name().to_string()];
            let stats = bucket.remove_records_until(
                &name,
                0,
                stop,
                when.as_ref(),
                RemoveControl::new(job.dry_run, cancel),
            )?;
            summary.records += stats.records;
            summary.blocks += stats.blocks;
            if stats.records > 0 {
                summary.bytes_before += info.size;
                // An entry emptied by a delete may be gone from the bucket's view.
                touched_after += entry.info().map_or(0, |i| i.size);
            }
            step(info.size);
            entries_after += entry.info().map_or(0, |i| i.size);
        }
    }
    summary.kept = compressed.kept;
    summary.kept_codecs = compressed.kept_codecs;
    if !job.dry_run {
        summary.bytes_after = Some(touched_after);
        summary.entries_bytes_after = Some(entries_after);
    }
    summary.cancelled |= cancel();
    summary.duration = started.elapsed();
    Ok(summary)
}

/// The summary as a small table (what the CLI prints): sizes in binary units with the
/// exact bytes beside them, rates from what the run touched.
pub fn format_summary(job: &Job, s: &Summary) -> String {
    use crate::report::{human_bytes, human_rate};
    let mut action = match (&job.action, job.dry_run) {
        (Action::Compress(c), false) => format!("compressed to {c}"),
        (Action::Compress(c), true) => format!("would compress to {c} (dry run)"),
        (Action::Delete(_), false) => "deleted".to_string(),
        (Action::Delete(_), true) => "would delete (dry run)".to_string(),
    };
    if s.cancelled {
        action.push_str(", cancelled: the rest is untouched");
    }
    let exact = |b: u64| match b {
        0..1024 => human_bytes(b),
        _ => format!("{} ({b} B)", human_bytes(b)),
    };
    let compress = matches!(job.action, Action::Compress(_));
    let mut out = format!(
        "bucket '{}', {} entr{}, records older than {}: {action}\n",
        job.bucket,
        s.entries,
        if s.entries == 1 { "y" } else { "ies" },
        job.older_than
    );
    let mut rows = vec![
        ("records", s.records.to_string()),
        ("blocks", s.blocks.to_string()),
        (
            "bytes before",
            format!(
                "{} in the {} {}",
                exact(s.bytes_before),
                if compress { "blocks" } else { "entries" },
                if job.dry_run {
                    "it would touch"
                } else {
                    "it touched"
                }
            ),
        ),
    ];
    let after_key = if job.dry_run && compress {
        "bytes after (predicted)"
    } else {
        "bytes after"
    };
    match s.bytes_after {
        Some(after) => {
            let change = if s.bytes_before > 0 {
                format!(
                    ", {:+.1} %",
                    (after as f64 - s.bytes_before as f64) * 100.0 / s.bytes_before as f64
                )
            } else {
                String::new()
            };
            rows.push((after_key, format!("{}{change}", exact(after))));
        }
        None => rows.push((
            after_key,
            "not predicted: a dry run of a deletion counts records (whole blocks are \
             dropped, the rest is tombstoned until rewritten)"
                .to_string(),
        )),
    }
    rows.push((
        "entries",
        match s.entries_bytes_after {
            Some(after) => format!(
                "{} before, {} after",
                human_bytes(s.entries_bytes_before),
                human_bytes(after)
            ),
            None => format!("{} now", human_bytes(s.entries_bytes_before)),
        },
    ));
    rows.push(("duration", format!("{:.2} s", s.duration.as_secs_f64())));
    let secs = s.duration.as_secs_f64();
    rows.push((
        "throughput",
        if job.dry_run {
            "- (a dry run)".to_string()
        } else if s.records == 0 || secs <= 0.0 {
            "- (nothing to do)".to_string()
        } else if compress {
            format!(
                "{:.0} records/s, {} of blocks read",
                s.records as f64 / secs,
                human_rate(s.bytes_before, s.duration)
            )
        } else {
            format!("{:.0} records/s", s.records as f64 / secs)
        },
    ));
    for (k, v) in rows {
        out.push_str(&format!("  {k:<14} {v}\n"));
    }
    if let (Action::Compress(target), Some((weakest, strongest))) = (&job.action, s.kept_codecs) {
        let at = if weakest == strongest {
            weakest.to_string()
        } else {
            format!("{weakest} to {strongest}")
        };
        let than = if weakest == *target {
            String::new()
        } else {
            format!(", stronger than {target}")
        };
        out.push_str(&format!(
            "  {} block{} already at {at}{than}: left as they are\n",
            s.kept,
            if s.kept == 1 { "" } else { "s" }
        ));
    }
    out
}
