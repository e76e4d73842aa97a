//! The operator's side of the CLI: `halflife info` for people and for scripts, Ctrl-C
//! stopping a maintenance run cleanly, bad values refused by the parser.

use crate::common;

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use halflife::Config;
use halflife::fixtures;
use halflife::storage::format::codec::Codec;
use halflife::storage::format::index::EntryIndex;
use halflife::storage::{BucketSettings, QueryOptions, Store};

fn halflife() -> Command {
    Command::new(env!("CARGO_BIN_EXE_halflife"))
}

/// A data directory with `n` flight records in bucket `b`.
fn flights_dir(n: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(Config::new(dir.path())).expect("store");
    let bucket = store
        .create_bucket("b", BucketSettings::default())
        .expect("bucket");
    let records = fixtures::flights(&fixtures::fixtures_dir(), Some(n)).expect("flights");
    fixtures::write_to(&bucket, &records).expect("write");
    dir
}

/// Records and a digest of every timestamp, label set and payload of bucket `b`.
fn contents(dir: &std::path::Path) -> (usize, u64) {
    let store = Store::open(Config::new(dir)).expect("store");
    let mut hasher = DefaultHasher::new();
    let mut count = 0;
    for record in store
        .bucket("b")
        .expect("bucket")
        .query(&QueryOptions::default())
        .expect("query")
    {
        let record = record.expect("every record reads");
        record.meta.timestamp.hash(&mut hasher);
        record.meta.labels.hash(&mut hasher);
        record
            .payload
            .expect("payload")
            .as_slice()
            .hash(&mut hasher);
        count += 1;
    }
    (count, hasher.finish())
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

fn run(args: &[&str], dir: &std::path::Path) -> (i32, String, String) {
    let out = halflife()
        .args(args)
        .arg("--data-path")
        .arg(dir)
        .output()
        .expect("run halflife");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn info_shows_dates_sizes_and_tiers_and_json() {
    let dir = flights_dir(3_000);
    let (code, table, err) = run(&["info"], dir.path());
    assert_eq!(code, 0, "{err}");
    let header = table.lines().next().expect("a header");
    assert!(
        header.contains("oldest") && header.contains("overlap"),
        "{table}"
    );
    let line = table
        .lines()
        .find(|l| l.starts_with("b/"))
        .expect("an entry line");
    assert!(line.contains("2013-01-01T"), "RFC 3339 dates: {line}");
    assert!(
        line.contains(" MiB") || line.contains(" KiB"),
        "human sizes, binary units: {line}"
    );
    let tiers = table
        .lines()
        .skip_while(|l| *l != line)
        .nth(1)
        .expect("the tiers line");
    assert!(
        tiers.contains("tiers: none ") || tiers.contains("tiers: open "),
        "tiers: {table}"
    );
    assert!(table.lines().all(|l| l.len() <= 100), "{table}");

    let (code, _, err) = run(
        &[
            "compress",
            "--bucket",
            "b",
            "--older-than",
            "1h",
            "--target",
            "zstd-3",
        ],
        dir.path(),
    );
    assert_eq!(code, 0, "{err}");
    let (code, json, err) = run(&["info", "--json"], dir.path());
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(&json).expect("info --json is JSON");
    let bucket = &report[0];
    assert_eq!(bucket["name"], "b");
    let entries = bucket["entries"].as_array().expect("entries");
    assert!(!entries.is_empty());
    let mut records = 0;
    for entry in entries {
        let tiers = entry["tiers"].as_array().expect("tiers");
        assert!(
            tiers.iter().all(|t| t["tier"] == "zstd-3"),
            "every block compressed: {entry}"
        );
        let tier_records: u64 = tiers.iter().map(|t| t["records"].as_u64().unwrap()).sum();
        assert_eq!(Some(tier_records), entry["records"].as_u64(), "{entry}");
        let tier_bytes: u64 = tiers.iter().map(|t| t["bytes"].as_u64().unwrap()).sum();
        assert_eq!(Some(tier_bytes), entry["bytes"].as_u64(), "{entry}");
        assert!(entry["oldest_record"].as_u64().unwrap() > 1_356_998_400_000_000);
        records += tier_records;
    }
    assert_eq!(records, 3_000);
}

#[test]
fn ctrl_c_cancels_a_compression_cleanly() {
    // Enough data at a slow level that the run is still going when the signal comes.
    let dir = flights_dir(60_000);
    let before = contents(dir.path());
    let mut child = halflife()
        .args([
            "compress",
            "--bucket",
            "b",
            "--older-than",
            "1h",
            "--target",
            "zstd-19",
            "--threads",
            "1",
            "-v",
            "--data-path",
        ])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn compress");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut line = String::new();
    stderr.read_line(&mut line).expect("the start line");
    assert!(line.contains("Ctrl-C stops cleanly"), "{line}");
    // Interrupt it once it has committed a compressed block (its index says so: the
    // child's own durable report), so the cancel meets a run with work both committed
    // and pending. (A new block file alone is no such report: it may be one being
    // written, which the cancel discards.)
    let committed = || {
        std::fs::read_dir(dir.path().join("b"))
            .expect("the bucket's directory")
            .flatten()
            .filter(|e| e.path().is_dir())
            .filter_map(|e| EntryIndex::load(&e.path()).ok())
            .flat_map(|index| index.blocks)
            .filter(|b| b.codec == Codec::Zstd(19))
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while committed() == 0 {
        assert!(Instant::now() < deadline, "no compressed block within 20 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = child.id().to_string();
    let sent = Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .expect("kill");
    assert!(sent.success());
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "compress did not stop after Ctrl-C"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().expect("output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(status.code(), Some(130), "{stdout}");
    assert!(stdout.contains("cancelled"), "{stdout}");
    // The log (-v) and the summary count the same blocks.
    let mut log = String::new();
    stderr.read_to_string(&mut log).expect("the log");
    let summary_blocks = stdout
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("blocks"))
        .map(|v| v.trim().to_string())
        .expect("a blocks row");
    assert!(
        log.contains(&format!(
            "recompression cancelled after {summary_blocks} block(s)"
        )),
        "summary says {summary_blocks} blocks: {log}"
    );
    // Nothing lost or changed, whatever was compressed.
    assert_eq!(contents(dir.path()), before);
    // And the next run finishes the job.
    let (code, out, err) = run(
        &[
            "compress",
            "--bucket",
            "b",
            "--older-than",
            "1h",
            "--target",
            "lz4",
        ],
        dir.path(),
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(!out.contains("cancelled"), "{out}");
    // What the cancelled run compressed is stronger than lz4, and the summary says so.
    assert!(
        out.lines()
            .any(|l| l.contains("already at zstd-19, stronger than lz4: left as they are")),
        "{out}"
    );
    assert_eq!(contents(dir.path()), before);
}

#[test]
fn serve_refuses_bad_values_before_starting() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (flag, value, expected) in [
        (
            "--http-idle-timeout",
            "soon",
            "invalid value 'soon' for '--http-idle-timeout",
        ),
        ("--max-query-ttl", "0s", "must be positive"),
        (
            "--lifecycle-workers",
            "0",
            "invalid value '0' for '--lifecycle-workers",
        ),
        (
            "--http-threads",
            "many",
            "invalid value 'many' for '--http-threads",
        ),
        (
            "--metrics-public",
            "perhaps",
            "invalid value 'perhaps' for '--metrics-public",
        ),
    ] {
        let out = halflife()
            .args(["serve", "--port", "0", flag, value, "--data-path"])
            .arg(dir.path())
            .output()
            .expect("run serve");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {err}");
        assert!(err.contains(expected), "{flag} {value}: {err}");
    }
}

#[test]
fn demo_runs_without_the_source_tree_from_the_embedded_fixtures() {
    // As an installed binary finds it: no data-fixtures/ where it looks.
    let scratch = tempfile::tempdir().expect("tempdir");
    let keep = scratch.path().join("store");
    let out = halflife()
        .args(["demo", "--keep"])
        .arg(&keep)
        .env("HALFLIFE_FIXTURES", scratch.path().join("nowhere"))
        .output()
        .expect("run demo");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("using the copies built into this binary"),
        "{text}"
    );
    assert!(text.contains("the store is kept in"), "{text}");
    assert!(
        !keep.with_extension("fixtures").exists(),
        "the unpacked fixtures are removed"
    );
    // The kept store starts under a plain serve, its policies valid at the defaults, and
    // each reports the runs the demo printed (under its instance `demo`), caught up.
    let server = common::start_server(&keep, &[]);
    for name in ["drop-noise", "squeeze"] {
        let runs: Vec<&str> = text
            .lines()
            .filter(|l| l.split_whitespace().next() == Some(name))
            .collect();
        assert!(!runs.is_empty(), "{text}");
        let records: u64 = runs
            .iter()
            .map(|l| l.split_whitespace().nth(2).unwrap().parse::<u64>().unwrap())
            .sum();
        let r = server.get(&format!("/api/v1/lifecycles/{name}"));
        assert_eq!(r.status, 200);
        let info = r.json();
        assert_eq!(info["info"]["is_running"], true, "{info}");
        assert!(info["info"]["last_error"].is_null(), "{info}");
        assert_eq!(info["settings"]["interval"], "1h", "{info}");
        assert_eq!(info["info"]["total_runs"], runs.len(), "{info}\n{text}");
        assert_eq!(info["info"]["processed_records_total"], records, "{info}");
        assert_eq!(info["info"]["caught_up"], true, "{info}");
        assert_eq!(info["info"]["last_status"], "ok", "{info}");
        assert!(info["info"]["last_processed_ts"].is_u64(), "{info}");
        assert_eq!(info["info"]["last_event"]["instance"], "demo", "{info}");
    }
    assert!(
        server.log_lines("invalid").is_empty(),
        "{:?}",
        server.log_lines("invalid")
    );
    server.terminate();
}

#[test]
fn on_a_terminal_the_progress_bar_shows_bytes_and_time_left() {
    let dir = flights_dir(20_000);
    // A pseudo-terminal from Python's standard library (CI has Python 3).
    let out = Command::new("python3")
        .args([
            "-c",
            "import pty, sys; sys.exit(pty.spawn(sys.argv[1:]) >> 8)",
        ])
        .arg(env!("CARGO_BIN_EXE_halflife"))
        .args([
            "compress",
            "--bucket",
            "b",
            "--older-than",
            "1h",
            "--target",
            "zstd-9",
        ])
        .arg("--data-path")
        .arg(dir.path())
        .output()
        .expect("run python3 with a pty");
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{screen}");
    assert!(screen.contains("eta"), "a bar with the time left: {screen}");
    assert!(screen.contains("MiB"), "a bar with bytes: {screen}");
    assert!(
        screen.contains("compressed to zstd-9"),
        "then the summary: {screen}"
    );
}

/// Every file under `dir` with its bytes.
fn snapshot(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut files: Vec<_> = walk(dir)
        .into_iter()
        .filter(|p| !p.ends_with(".lock"))
        .map(|p| {
            let bytes = std::fs::read(&p).expect("read");
            (p, bytes)
        })
        .collect();
    files.sort();
    files
}

fn flip_byte(path: &std::path::Path, at: usize) {
    let mut bytes = std::fs::read(path).expect("read");
    bytes[at] ^= 0x5a;
    std::fs::write(path, bytes).expect("write");
}

/// A store in `dir` with bucket `b` (10 records a block) and `entries`, each of 45
/// records `"<entry> <ts> "` × 30 at timestamps 0 to 44.
fn store_of_entries(dir: &std::path::Path, entries: &[&str]) -> Store {
    let store = Store::open(Config::new(dir)).expect("store");
    let settings = BucketSettings {
        max_block_records: 10,
        ..Default::default()
    };
    let b = store.create_bucket("b", settings).expect("bucket");
    for entry in entries {
        for ts in 0..45u64 {
            let meta = halflife::storage::RecordMeta {
                timestamp: ts,
                labels: Default::default(),
                content_type: "text/plain".into(),
                size: 0,
            };
            b.write(entry, meta, format!("{entry} {ts} ").repeat(30).as_bytes())
                .expect("write");
        }
    }
    store
}

#[test]
fn check_reports_damage_without_changing_anything_and_repair_fixes_what_it_can() {
    use halflife::storage::format::index::{EntryIndex, block_path, edits_path, log_path};
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let store = store_of_entries(dir.path(), &["edited", "logged", "indexless", "damaged"]);
        let b = store.bucket("b").expect("bucket");
        let mut labels = halflife::storage::Labels::new();
        labels.insert("k".into(), "v".into());
        b.update_labels("edited", 3, &labels).expect("relabel");
    }
    let entry = |name: &str| dir.path().join("b").join(name);
    let index = |name: &str| EntryIndex::load(&entry(name)).expect("index");
    // A lost edit log, a leftover file, a flipped byte inside a log, a lost index, and a
    // flipped byte in a block's payload.
    let first = index("edited").blocks[0].seq;
    std::fs::remove_file(edits_path(&entry("edited"), first)).expect("remove edt");
    std::fs::write(entry("edited").join("00000000000000ff.blk"), b"half").expect("leftover");
    let log = log_path(
        &entry("logged"),
        index("logged").open_log.expect("open log"),
    );
    flip_byte(&log, 200);
    std::fs::remove_file(entry("indexless").join(".index")).expect("remove index");
    let block = block_path(&entry("damaged"), index("damaged").blocks[1].seq);
    flip_byte(&block, 20);

    let before = snapshot(dir.path());
    let (code, out, err) = run(&["check"], dir.path());
    assert_eq!(code, 1, "{out}{err}");
    for expected in [
        "the edit log of block 0 is missing",
        "00000000000000ff.blk: a file the index does not name",
        "damaged bytes at offset",
        "the entry's index is missing",
        "frame 0 checksum mismatch",
        "checked 1 bucket(s), 4 entries",
    ] {
        assert!(out.contains(expected), "{expected:?} in:\n{out}");
    }
    assert_eq!(snapshot(dir.path()), before, "a check changes nothing");

    let (code, out, err) = run(&["check", "--repair"], dir.path());
    assert_eq!(code, 1, "the damaged block stays damaged:\n{out}{err}");
    let after = out
        .split("after the repair:")
        .nth(1)
        .expect("a second check");
    assert!(after.contains("frame 0 checksum mismatch"), "{after}");
    for gone in ["edit log", "00000000000000ff.blk", "index is missing"] {
        assert!(!after.contains(gone), "{gone:?} repaired:\n{after}");
    }
    assert_eq!(
        after.matches("ERROR").count(),
        1,
        "only the block:\n{after}"
    );
    assert!(
        after.contains("note"),
        "the damaged log bytes are set aside:\n{after}"
    );
    // The rebuilt entry serves every record.
    let store = Store::open(Config::new(dir.path())).expect("store");
    let records = store
        .bucket("b")
        .expect("bucket")
        .query(&QueryOptions {
            entries: vec!["indexless".into()],
            ..Default::default()
        })
        .expect("query")
        .filter(|r| r.is_ok())
        .count();
    assert_eq!(records, 45);
}

/// A seal cut between renaming its log to the block's name and the commit that names the
/// block (or a commit whose rename was undone after it): `check` reports the file under
/// its present name with the rename the open makes, errors none, and after the repair
/// every record reads.
#[test]
fn check_reports_a_seal_cut_between_its_rename_and_its_commit() {
    use halflife::storage::format::index::{EntryIndex, block_path, log_path};
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let store = store_of_entries(dir.path(), &["renamed", "undone"]);
        store
            .bucket("b")
            .expect("bucket")
            .catch_up()
            .expect("sealed");
    }
    let entry = |name: &str| dir.path().join("b").join(name);
    // Renamed, not committed: the index names the log waiting for its seal, the file
    // has the block's name.
    let mut index = EntryIndex::load(&entry("renamed")).expect("index");
    let block = index.blocks.remove(1);
    assert!(block.in_log, "sealed in place");
    index.sealing_logs.push(block.seq);
    index.save(&entry("renamed")).expect("save");
    // Committed, the rename undone: the index names the block, the file the log's name.
    let undone = EntryIndex::load(&entry("undone")).expect("index").blocks[2].seq;
    std::fs::rename(
        block_path(&entry("undone"), undone),
        log_path(&entry("undone"), undone),
    )
    .expect("rename back");

    let (code, out, err) = run(&["check"], dir.path());
    assert_eq!(code, 1, "something for the open to repair:\n{out}{err}");
    assert!(out.contains("0 error(s), 2 warning(s)"), "{out}");
    assert_eq!(
        out.matches("a seal was cut short between renaming this file and committing the index")
            .count(),
        2,
        "{out}"
    );
    assert!(
        !out.contains("ERROR") && !out.contains("does not name"),
        "{out}"
    );

    let (code, out, err) = run(&["check", "--repair"], dir.path());
    assert_eq!(code, 0, "{out}{err}");
    let after = out.split("after the repair:").nth(1).unwrap_or_default();
    assert!(!after.contains("seal was cut short"), "{after}");
    let store = Store::open(Config::new(dir.path())).expect("store");
    let b = store.bucket("b").expect("bucket");
    for name in ["renamed", "undone"] {
        for ts in 0..45u64 {
            let record = b.read(name, Some(ts)).expect("read");
            assert_eq!(
                record.payload.expect("payload").as_slice(),
                format!("{name} {ts} ").repeat(30).as_bytes()
            );
        }
    }
}
