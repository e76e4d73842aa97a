//! Random single-record reads against `halflife serve` when the entry outgrows the cache
//! of parsed blocks: requests/s and the server's CPU per request (from
//! `/proc/<pid>/stat`), in one run:
//!
//! 1. reads among the records of the first 24 blocks (the cache holds 32 parsed blocks):
//!    the cached case;
//! 2. reads among all the entry's records (356 blocks by default, 11 × the cache), through the
//!    blocks' compact lookups (`--lookup-cache` 256 MiB, so they all fit): the first 4 s, while
//!    the blocks' first reads build their lookups, then warm;
//! 3. the same with `--lookup-cache 4MiB`, a sixth of the default entry's lookups: most
//!    reads miss and read just their row from the block's table (`format/table_row.rs`);
//! 4. the same with `--lookup-cache 0`: every read maps its block and parses its table,
//!    which is what every read past the cache cost before the lookups.
//!
//! The goal: case 2, warm, costs at most 1.3 × the CPU per request of case 1.
//!
//! With `REDUCTSTORE_BIN` naming a ReductStore binary, the same records are loaded into it
//! and read the same two ways, in the same run (otherwise that row says NOT RUN).
//!
//! Run: `cargo bench --bench reads`; `READS_RECORDS=3600000` loads that many records
//! instead of 363,952 (about 3.7 GB per server at 3.6 million).

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{Connection, ServerProcess, reductstore_if_set, start_reductstore, start_server};

/// Records in the entry: 1 KiB each, 1,024 to a block (`READS_RECORDS`, default 363,952).
fn records() -> u64 {
    match std::env::var("READS_RECORDS") {
        Ok(n) => n
            .parse()
            .unwrap_or_else(|_| panic!("READS_RECORDS={n} is not a number of records")),
        Err(_) => 363_952,
    }
}
const PARSED_BLOCKS: &str = "32";
const FIRST_TS: u64 = 1_700_000_000_000_000;
const CLIENTS: usize = 2;

fn server(data: &Path, lookup_cache: &str) -> ServerProcess {
    start_server(
        data,
        &[
            ("RS_BLOCK_CACHE", PARSED_BLOCKS),
            ("RS_LOOKUP_CACHE_SIZE", lookup_cache),
            ("RS_SYNC_MODE", "never"),
        ],
    )
}

/// Writes the entry `r/e` as v1 batches of `per_batch` records: record `i` at
/// `FIRST_TS + i`, 1 KiB, two labels.
fn load(s: &ServerProcess, per_batch: usize) {
    assert_eq!(s.request("POST", "/api/v1/b/r", &[], b"").status, 200);
    let mut conn = Connection::open(s.addr);
    let ids: Vec<u64> = (0..records()).collect();
    for chunk in ids.chunks(per_batch) {
        let headers: Vec<(String, String)> = chunk
            .iter()
            .map(|i| {
                (
                    format!("x-reduct-time-{}", FIRST_TS + i),
                    format!("1024,application/octet-stream,camera=front,seq={i}"),
                )
            })
            .collect();
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let body: Vec<u8> = chunk
            .iter()
            .flat_map(|i| {
                let mut payload = vec![(i % 251) as u8; 1024];
                payload[..8].copy_from_slice(&i.to_le_bytes());
                payload
            })
            .collect();
        let r = conn.call("POST", "/api/v1/b/r/e/batch", &headers, &body);
        assert_eq!(r.status, 200, "{}", r.error());
    }
}

/// Random GETs of records `0..among` from `CLIENTS` connections for `span`; returns
/// (requests/s, server CPU µs per request).
fn random_reads(s: &ServerProcess, among: u64, span: Duration) -> (f64, f64) {
    let ticks_before = s.cpu_ticks();
    let start = Instant::now();
    let counts: Vec<u64> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..CLIENTS as u64)
            .map(|c| {
                scope.spawn(move || {
                    let mut conn = Connection::open(s.addr);
                    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (c + 1);
                    let mut n = 0;
                    while start.elapsed() < span {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let i = x % among;
                        let r = conn.call(
                            "GET",
                            &format!("/api/v1/b/r/e?ts={}", FIRST_TS + i),
                            &[],
                            b"",
                        );
                        assert_eq!(r.status, 200, "{}", r.error());
                        assert_eq!(r.body[..8], i.to_le_bytes(), "the record asked for");
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("client"))
            .collect()
    });
    let elapsed = start.elapsed().as_secs_f64();
    let requests: u64 = counts.iter().sum();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let cpu = (s.cpu_ticks() - ticks_before) as f64 / hz;
    (requests as f64 / elapsed, cpu / requests as f64 * 1e6)
}

fn measure(s: &ServerProcess, among: u64) -> (f64, f64) {
    random_reads(s, among, Duration::from_secs(1));
    random_reads(s, among, Duration::from_secs(4))
}

/// Prints one row of the table: rate, CPU per request, and that CPU against `cached_cpu`.
fn row(what: &str, (rate, cpu): (f64, f64), cached_cpu: f64) {
    eprintln!(
        "  {what:<58} {rate:>9.0} req/s  {cpu:>6.1} µs CPU/req  ({:.2} × the cached CPU)",
        cpu / cached_cpu
    );
}

/// Loads the entry into `s` and says how long that took.
fn timed_load(s: &ServerProcess, name: &str, per_batch: usize) {
    let records = records();
    let loading = Instant::now();
    load(s, per_batch);
    let seconds = loading.elapsed().as_secs_f64();
    eprintln!(
        "{name}: loaded {records} records of 1 KiB in {seconds:.1} s ({:.0} records/s)",
        records as f64 / seconds
    );
}

fn main() {
    let records = records();
    let blocks = records.div_ceil(1024);
    let data = tempfile::tempdir().expect("tempdir");
    let s = server(data.path(), "256MiB");
    timed_load(&s, "halflife", 500);
    let hot = measure(&s, 24 * 1024);
    // The first seconds over every block build their lookups (each block's first read
    // maps it, checks its frame and decodes its table); then the same reads, warm.
    let all_cold = random_reads(&s, records, Duration::from_secs(4));
    let all = measure(&s, records);
    let metrics = s.get("/metrics");
    drop(s);
    // A budget for a sixth of the default entry's lookups: most reads miss, and read
    // their row from the block's table.
    let s = server(data.path(), "4MiB");
    let over_budget = measure(&s, records);
    drop(s);
    let s = server(data.path(), "0");
    let parsed = measure(&s, records);
    drop(s);
    drop(data);

    // halflife's rows print before ReductStore is loaded, which takes minutes at 3.6
    // million records.
    eprintln!(
        "\nrandom single-record GETs, {CLIENTS} connections, {PARSED_BLOCKS} parsed blocks cached:"
    );
    row("among the first 24 blocks' records (cached)", hot, hot.1);
    row(
        &format!("among all {blocks} blocks' records, first 4 s (lookups built)"),
        all_cold,
        hot.1,
    );
    row(
        &format!("among all {blocks} blocks' records, through lookups (warm)"),
        all,
        hot.1,
    );
    row(
        &format!("among all {blocks} blocks' records, lookup cache 4 MiB (rows read)"),
        over_budget,
        hot.1,
    );
    row(
        &format!("among all {blocks} blocks' records, lookup cache 0 (parse per read)"),
        parsed,
        hot.1,
    );
    eprintln!("  goal: all through lookups ≤ 1.3 × the cached CPU per request");
    for line in std::str::from_utf8(&metrics.body)
        .unwrap_or("")
        .lines()
        .filter(|l| l.starts_with("halflife_cache_"))
    {
        eprintln!("  {line}");
    }

    match reductstore_if_set() {
        Some(bin) => {
            let data = tempfile::tempdir().expect("tempdir");
            let s = start_reductstore(&bin, data.path(), &[]);
            // It takes at most 100 headers a request.
            timed_load(&s, "ReductStore", 64);
            row(
                "ReductStore, among the first 24 blocks' records",
                measure(&s, 24 * 1024),
                hot.1,
            );
            row(
                "ReductStore, among all the records",
                measure(&s, records),
                hot.1,
            );
        }
        None => eprintln!("  ReductStore: NOT RUN (set REDUCTSTORE_BIN to a ReductStore binary)"),
    }
}
