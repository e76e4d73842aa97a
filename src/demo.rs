//! `halflife demo`: the whole idea in one run. Builds a store from the real fixtures in a
//! temporary directory, lets a delete policy (with a `when` condition) and a compress policy
//! (older than one day) run, and prints the store before and after, and the event trail.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::fixtures;
use crate::lifecycle::events::{EventLog, RunEvent, SYSTEM_BUCKET};
use crate::lifecycle::repository::LifecycleRepository;
use crate::lifecycle::settings::LifecycleSettings;
use crate::report::human_bytes;
use crate::storage::config::Config;
use crate::storage::{Bucket, BucketSettings, QueryOptions, Store};

const DELETE_POLICY: &str = r#"{"type":"delete","bucket":"airport","entries":["flights","logs/*"],
  "older_than":"30d","interval":"1s","processing_interval":"1000d",
  "when":{"$or":[{"$in":["&carrier","OO","HA"]},{"&action":{"$eq":"status"}}]}}"#;
const COMPRESS_POLICY: &str = r#"{"type":"compress","bucket":"airport","older_than":"1d",
  "interval":"1s","processing_interval":"1000d","compression":{"algorithm":"zstd","level":9}}"#;

/// Records acknowledged together while loading, as a client's batched writes are.
const LOAD_BATCH: usize = 1000;

/// The policies' interval once the demo has run (theirs is 1 s, which only the demo's
/// lowered minimum allows).
const KEPT_INTERVAL: &str = "1h";

fn io(e: std::io::Error) -> Error {
    Error::io("writing the demo output", e)
}

/// Runs the demo, writing its report to `out`. The store lives in `dir` (created), or in a
/// temporary directory removed at the end.
pub fn run(out: &mut dyn Write, dir: Option<&Path>) -> Result<()> {
    let (path, remove) = match dir {
        Some(d) => (d.to_path_buf(), false),
        None => (
            std::env::temp_dir().join(format!("halflife-demo-{}", std::process::id())),
            true,
        ),
    };
    let result = run_in(out, &path);
    if remove {
        let _ = std::fs::remove_dir_all(&path);
    } else {
        writeln!(
            out,
            "\nthe store is kept in {0}; its policies now run hourly: halflife serve --data-path {0}",
            path.display()
        )
        .map_err(io)?;
    }
    result
}

fn run_in(out: &mut dyn Write, path: &PathBuf) -> Result<()> {
    let mut config = Config::new(path);
    config.lifecycle_min_interval = 1_000_000;
    config.lifecycle_min_older_than = 1_000_000;
    config.instance_name = "demo".into();
    // A person waits for these runs: they go as fast as the machine allows, not on the
    // CPU time nothing else wants.
    config.lifecycle_priority = crate::storage::priority::BackgroundPriority::Normal;
    let store = Arc::new(Store::open(config.clone())?);
    let bucket = store.create_bucket("airport", BucketSettings::default())?;

    // Next to the store, never inside it (a directory there would be read as a bucket).
    let scratch = path.with_extension("fixtures");
    let (src, extracted) = fixtures::demo_fixtures(&scratch)?;
    if extracted {
        writeln!(
            out,
            "halflife demo: data-fixtures/ not found ({} or HALFLIFE_FIXTURES); using the copies built into this binary, unpacked in {}",
            fixtures::fixtures_dir().display(),
            src.display()
        )
        .map_err(io)?;
    } else {
        writeln!(
            out,
            "halflife demo: loading the real fixtures from {}",
            src.display()
        )
        .map_err(io)?;
    }
    let started = Instant::now();
    let load = || -> Result<Vec<Vec<fixtures::FixtureRecord>>> {
        Ok(vec![
            fixtures::flights(&src, Some(100_000))?,
            fixtures::weather(&src)?,
            fixtures::dpkg_log(&src)?,
            fixtures::images(&src)?,
        ])
    };
    let sets = load();
    if extracted {
        // In memory now: the unpacked copy is not needed any more.
        let _ = std::fs::remove_dir_all(&scratch);
    }
    let sets = sets?;
    let total: usize = sets.iter().map(Vec::len).sum();
    // Drawn only when stderr is a terminal.
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(total as u64),
        indicatif::ProgressDrawTarget::stderr(),
    );
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} [{bar:30}] {pos}/{len} records {msg}")
            .map(|s| s.progress_chars("#>."))
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut before_set = 0;
    for set in &sets {
        let shown = |n: usize| bar.set_position((before_set + n) as u64);
        fixtures::write_batched(&bucket, set, LOAD_BATCH, &shown)?;
        before_set += set.len();
    }
    bar.finish_and_clear();
    writeln!(
        out,
        "wrote {} records in {:.1?}\n",
        sets.iter().map(Vec::len).sum::<usize>(),
        started.elapsed()
    )
    .map_err(io)?;
    let before = snapshot(&bucket)?;

    let repo = LifecycleRepository::open(store.clone(), &config)?;
    let delete = LifecycleSettings::from_json(DELETE_POLICY.as_bytes())?;
    let compress = LifecycleSettings::from_json(COMPRESS_POLICY.as_bytes())?;
    writeln!(out, "policy drop-noise: delete, flights and logs/*, older than 30d, when carrier is OO or HA, or the log action is 'status'").map_err(io)?;
    writeln!(
        out,
        "policy squeeze:    compress to zstd 9, every entry, older than 1d\n"
    )
    .map_err(io)?;
    repo.create("drop-noise", delete)?;
    repo.create("squeeze", compress)?;
    // Start each now, one after the other; the scheduler then walks through the years of
    // data window by window (100 ms apart while windows are empty) until caught up.
    let events = EventLog::open(&store, &config.instance_name, config.system_events_quota)?;
    for name in ["drop-noise", "squeeze"] {
        // A policy its schedule already started is just as good: wait for it.
        match repo.run_now(name) {
            Err(e) if e.message().contains("is already running") => {}
            other => other?,
        }
        wait_until_caught_up(&events, name)?;
    }
    // Stored as a plain server takes them: an interval at its minimum (10 m) or above,
    // so a kept store starts cleanly under `halflife serve`.
    for (name, text) in [("drop-noise", DELETE_POLICY), ("squeeze", COMPRESS_POLICY)] {
        let mut settings = LifecycleSettings::from_json(text.as_bytes())?;
        settings.interval = KEPT_INTERVAL.to_string();
        repo.update(name, settings)?;
    }
    repo.shutdown();
    let after = snapshot(&bucket)?;

    writeln!(
        out,
        "{:<12} {:>9} {:>9} {:>12} {:>12} {:>7}",
        "entry", "records", "after", "bytes", "after", "ratio"
    )
    .map_err(io)?;
    for ((name, records, bytes), (_, records_after, bytes_after)) in before.iter().zip(&after) {
        // An empty entry (a parent of others) has no ratio.
        let ratio = match (*bytes, *bytes_after) {
            (0, _) | (_, 0) => "-".to_string(),
            (b, a) => format!("{:.2}x", b as f64 / a as f64),
        };
        writeln!(
            out,
            "{name:<12} {records:>9} {records_after:>9} {:>12} {:>12} {ratio:>7}",
            human_bytes(*bytes),
            human_bytes(*bytes_after),
        )
        .map_err(io)?;
    }
    let (bytes, bytes_after): (u64, u64) = before
        .iter()
        .zip(&after)
        .map(|(b, a)| (b.2, a.2))
        .fold((0, 0), |s, x| (s.0 + x.0, s.1 + x.1));
    writeln!(
        out,
        "{:<12} {:>9} {:>9} {:>12} {:>12} {:>6.2}x\n",
        "total",
        "",
        "",
        human_bytes(bytes),
        human_bytes(bytes_after),
        bytes as f64 / bytes_after.max(1) as f64
    )
    .map_err(io)?;

    writeln!(
        out,
        "event trail ({SYSTEM_BUCKET}, entries lifecycle/demo/<policy>):"
    )
    .map_err(io)?;
    writeln!(
        out,
        "{:<12} {:<9} {:>9} {:>7} {:>10} {:>9} status",
        "policy", "action", "records", "blocks", "duration", "caught up"
    )
    .map_err(io)?;
    let system = store.bucket(SYSTEM_BUCKET)?;
    for record in system.query(&QueryOptions::default())? {
        let record = record?;
        let payload = record
            .payload
            .ok_or_else(|| Error::internal("event without payload"))?;
        let e: RunEvent = serde_json::from_slice(payload.as_slice())
            .map_err(|err| Error::internal(format!("event does not parse: {err}")))?;
        writeln!(
            out,
            "{:<12} {:<9} {:>9} {:>7} {:>8.1}ms {:>9} {}",
            e.policy_name,
            e.action_type,
            e.processed_records,
            e.processed_blocks,
            e.duration * 1000.0,
            e.caught_up,
            if e.message.is_empty() {
                "ok"
            } else {
                e.message.as_str()
            }
        )
        .map_err(io)?;
    }
    Ok(())
}

fn snapshot(bucket: &Bucket) -> Result<Vec<(String, u64, u64)>> {
    Ok(bucket
        .entry_infos()?
        .into_iter()
        .map(|e| (e.name, e.record_count, e.size))
        .collect())
}

/// How long a policy may go without a new run event before the demo says it is stuck:
/// the wait follows the policy's own progress, so a busy machine only makes it longer.
const STALLED_AFTER: Duration = Duration::from_secs(600);

fn wait_until_caught_up(events: &EventLog, name: &str) -> Result<()> {
    let mut last_seen = None;
    let mut since = Instant::now();
    loop {
        let latest = events.latest(name)?;
        if let Some(e) = &latest {
            if e.caught_up {
                return Ok(());
            }
            if e.is_error() {
                return Err(Error::internal(format!(
                    "policy '{name}' failed: {}",
                    e.message
                )));
            }
        }
        let stamp = latest.as_ref().map(|e| e.timestamp);
        if stamp != last_seen {
            last_seen = stamp;
            since = Instant::now();
        } else if since.elapsed() > STALLED_AFTER {
            return Err(Error::internal(format!(
                "policy '{name}' made no progress for {} s",
                STALLED_AFTER.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
