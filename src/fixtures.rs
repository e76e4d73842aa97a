//! Real data sets turned into records, for benches, tests and the demo: NYC flights and
//! weather of 2013 as JSON records with their real timestamps and natural labels, a Debian
//! package log as text lines, and photographs as already-compressed payloads.
//!
//! Sources and licenses: `data-fixtures/SOURCES.md`.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

pub(crate) mod embedded;
use crate::storage::{Bucket, Labels, RecordMeta};
use crate::timefmt::utc_micros;

/// The six records of ReductStore 1.21.5's conditional-query reference:
/// the timestamps and labels its examples are worked on. The condition tests of the
/// crate and of `tests/` run against these.
pub const CONDITION_REFERENCE_RECORDS: [(u64, &[(&str, &str)]); 6] = [
    (
        1704067200000000,
        &[("n", "1"), ("s", "alpha"), ("flag", "true")],
    ),
    (
        1704072600000000,
        &[("n", "2"), ("s", "10"), ("flag", "false")],
    ),
    (1704153600000000, &[("n", "3"), ("s", "1h")]),
    (
        1704157200000000,
        &[("n", "4"), ("s", "nan"), ("flag", "true"), ("opt", "x")],
    ),
    (
        1704240000000000,
        &[("n", "5"), ("s", "a,b"), ("flag", "true")],
    ),
    (
        1704369600000000,
        &[
            ("n", "6"),
            ("s", "$dollar"),
            ("flag", "false"),
            ("opt", "y"),
        ],
    ),
];

/// One record of a fixture data set.
#[derive(Debug, Clone, PartialEq)]
pub struct FixtureRecord {
    /// Entry the record belongs in.
    pub entry: String,
    /// Timestamp in microseconds (unique within the entry).
    pub timestamp: u64,
    /// Natural labels of the record.
    pub labels: Labels,
    /// MIME type of the payload.
    pub content_type: String,
    /// Payload bytes.
    pub payload: Vec<u8>,
}

/// Writes fixture records into a bucket, each into its own entry.
pub fn write_to(bucket: &Bucket, records: &[FixtureRecord]) -> Result<()> {
    records
        .iter()
        .try_for_each(|r| write_record(bucket, &r.entry, r))
}

/// Writes fixture records into one entry of a bucket, whatever entry they name.
pub fn write_into(bucket: &Bucket, entry: &str, records: &[FixtureRecord]) -> Result<()> {
    records
        .iter()
        .try_for_each(|r| write_record(bucket, entry, r))
}

/// Writes fixture records into their entries in a shuffled order (see [`shuffled`]): what
/// several producers, uploads after an outage, or an unsorted import look like. The stored
/// data must be the same as with [`write_to`].
pub fn write_to_shuffled(bucket: &Bucket, records: &[FixtureRecord], seed: u64) -> Result<()> {
    write_to(bucket, &shuffled(records, seed))
}

/// [`write_into`] in a shuffled order.
pub fn write_into_shuffled(
    bucket: &Bucket,
    entry: &str,
    records: &[FixtureRecord],
    seed: u64,
) -> Result<()> {
    write_into(bucket, entry, &shuffled(records, seed))
}

/// A small deterministic generator (xorshift64), so shuffled tests and benches repeat.
struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> Self {
        XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// The records in a random order given by `seed` (Fisher–Yates).
pub fn shuffled(records: &[FixtureRecord], seed: u64) -> Vec<FixtureRecord> {
    let mut out = records.to_vec();
    let mut rng = XorShift::new(seed);
    for i in (1..out.len()).rev() {
        out.swap(i, rng.below(i + 1));
    }
    out
}

/// The records in timestamp order except `percent` % of them, picked at random, which come
/// at the end in random order: a backfill of belated records falling between existing ones.
pub fn with_backfill(records: &[FixtureRecord], percent: u32, seed: u64) -> Vec<FixtureRecord> {
    let mut rng = XorShift::new(seed);
    let (mut in_order, mut late) = (Vec::new(), Vec::new());
    for r in records {
        if rng.below(100) < percent as usize {
            late.push(r.clone());
        } else {
            in_order.push(r.clone());
        }
    }
    let seed = rng.0;
    in_order.extend(shuffled(&late, seed));
    in_order
}

fn write_record(bucket: &Bucket, entry: &str, r: &FixtureRecord) -> Result<()> {
    bucket.write(entry, meta_of(r), &r.payload)
}

fn meta_of(r: &FixtureRecord) -> RecordMeta {
    RecordMeta {
        timestamp: r.timestamp,
        labels: r.labels.clone(),
        content_type: r.content_type.clone(),
        size: 0,
    }
}

/// Writes fixture records into their entries as a loader sending batches would: each
/// `batch` records are acknowledged together, after the syncs they share (one per file
/// the batch touched, as a batched HTTP write). `written` is told the records written so
/// far after each batch.
pub fn write_batched(
    bucket: &Bucket,
    records: &[FixtureRecord],
    batch: usize,
    written: &dyn Fn(usize),
) -> Result<()> {
    let mut done = 0;
    for chunk in records.chunks(batch.max(1)) {
        let mut pending = crate::storage::Pending::none();
        for r in chunk {
            pending.add(bucket.write_deferred(&r.entry, meta_of(r), &r.payload)?);
        }
        pending.wait()?;
        done += chunk.len();
        written(done);
    }
    Ok(())
}

/// Where the demo's fixtures come from: the `data-fixtures/` directory when it exists (see
/// [`fixtures_dir`]), else the copies compiled into the binary, written to `scratch`.
/// Returns the directory and whether it is the extracted copy.
pub fn demo_fixtures(scratch: &Path) -> Result<(PathBuf, bool)> {
    let dir = fixtures_dir();
    if dir.join("flights.csv.zst").is_file() {
        return Ok((dir, false));
    }
    Ok((embedded::extract(scratch)?, true))
}

/// The `data-fixtures/` directory: `HALFLIFE_FIXTURES` if set, else the one in the source
/// tree this crate was built from.
pub fn fixtures_dir() -> PathBuf {
    std::env::var_os("HALFLIFE_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("data-fixtures"))
}

fn read_zst(dir: &Path, name: &str) -> Result<String> {
    let path = dir.join(name);
    let raw =
        std::fs::read(&path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    let text = zstd::decode_all(raw.as_slice())
        .map_err(|e| Error::io(format!("decoding {}", path.display()), e))?;
    String::from_utf8(text).map_err(|_| Error::internal(format!("{} is not UTF-8", path.display())))
}

/// Parses `YYYY-MM-DD?hh:mm:ss` (any separator, optional trailing `Z`) as UTC µs.
pub fn parse_utc(text: &str) -> Result<u64> {
    let bad = || Error::unprocessable(format!("Invalid date-time '{text}'"));
    let digits: Vec<i64> = text
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<i64>().map_err(|_| bad()))
        .collect::<Result<_>>()?;
    let [y, mo, d, h, mi, s] = digits[..] else {
        return Err(bad());
    };
    let micros = utc_micros(y, mo, d, h, mi, s).ok_or_else(bad)?;
    u64::try_from(micros).map_err(|_| bad())
}

/// Gives rows that share a timestamp distinct ones by adding their order (in µs).
struct UniqueTimestamps {
    last_base: u64,
    seq: u64,
}

impl UniqueTimestamps {
    fn new() -> Self {
        UniqueTimestamps {
            last_base: u64::MAX,
            seq: 0,
        }
    }
    fn next(&mut self, base: u64) -> u64 {
        if base == self.last_base {
            self.seq += 1;
        } else {
            self.last_base = base;
            self.seq = 0;
        }
        base + self.seq
    }
}

fn json_value(cell: &str) -> serde_json::Value {
    if cell == "NA" {
        return serde_json::Value::Null;
    }
    if let Ok(i) = cell.parse::<i64>() {
        return i.into();
    }
    if let Ok(f) = cell.parse::<f64>()
        && let Some(n) = serde_json::Number::from_f64(f)
    {
        return serde_json::Value::Number(n);
    }
    cell.into()
}

/// Turns a CSV table into JSON records; `time_hour` gives the timestamp and the columns in
/// `label_columns` become labels. Rows are sorted by time so row order breaks ties.
fn csv_records(
    text: &str,
    entry: &str,
    label_columns: &[&str],
    limit: Option<usize>,
    file_order: bool,
) -> Result<Vec<FixtureRecord>> {
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
    let time_col = header
        .iter()
        .position(|c| *c == "time_hour")
        .ok_or_else(|| Error::internal(format!("{entry}: no time_hour column")))?;
    let mut rows: Vec<(u64, usize, Vec<&str>)> = Vec::new();
    for (row, line) in lines.take(limit.unwrap_or(usize::MAX)).enumerate() {
        let cells: Vec<&str> = line.split(',').collect();
        if cells.len() != header.len() {
            return Err(Error::internal(format!("{entry}: malformed row '{line}'")));
        }
        rows.push((parse_utc(cells[time_col])?, row, cells));
    }
    rows.sort_by_key(|(ts, _, _)| *ts);
    let mut unique = UniqueTimestamps::new();
    let mut records: Vec<(usize, FixtureRecord)> = rows
        .into_iter()
        .map(|(base, row, cells)| {
            let mut labels = Labels::new();
            // Keys sorted by name: the payload bytes the golden data directories hold
            // (serde_json keeps insertion order, which conditions need).
            let mut object = std::collections::BTreeMap::new();
            for (name, cell) in header.iter().zip(&cells) {
                if label_columns.contains(name) {
                    labels.insert(name.to_string(), cell.to_string());
                }
                object.insert(name.to_string(), json_value(cell));
            }
            let record = FixtureRecord {
                entry: entry.to_string(),
                timestamp: unique.next(base),
                labels,
                content_type: "application/json".into(),
                payload: serde_json::to_vec(&object)
                    .expect("a map of JSON values always serializes"),
            };
            (row, record)
        })
        .collect();
    if file_order {
        records.sort_by_key(|(row, _)| *row);
    }
    Ok(records.into_iter().map(|(_, r)| r).collect())
}

/// Flights leaving New York in 2013 (336,776 rows; `limit` takes the first rows of the
/// file), entry `flights`, labels `carrier` and `origin`.
pub fn flights(dir: &Path, limit: Option<usize>) -> Result<Vec<FixtureRecord>> {
    csv_records(
        &read_zst(dir, "flights.csv.zst")?,
        "flights",
        &["carrier", "origin"],
        limit,
        false,
    )
}

/// The same records as [`flights`], in the order the file holds them: January, then
/// October, November, December, then February to September — so two thirds of them arrive
/// after later ones, as in an import of the file as it is.
pub fn flights_in_file_order(dir: &Path, limit: Option<usize>) -> Result<Vec<FixtureRecord>> {
    csv_records(
        &read_zst(dir, "flights.csv.zst")?,
        "flights",
        &["carrier", "origin"],
        limit,
        true,
    )
}

/// Hourly weather at the three airports in 2013 (26,115 rows), entry `weather`, label
/// `origin`.
pub fn weather(dir: &Path) -> Result<Vec<FixtureRecord>> {
    csv_records(
        &read_zst(dir, "weather.csv.zst")?,
        "weather",
        &["origin"],
        None,
        false,
    )
}

/// A Debian package log (5,235 lines), entry `logs/dpkg`, label `action` (the word after
/// the timestamp: startup, install, upgrade, configure, status…).
pub fn dpkg_log(dir: &Path) -> Result<Vec<FixtureRecord>> {
    let text = read_zst(dir, "dpkg.log.zst")?;
    let mut unique = UniqueTimestamps::new();
    let mut out = Vec::new();
    for line in text.lines().filter(|l| l.len() > 20) {
        let base = parse_utc(&line[..19])?;
        let action = line[20..].split_whitespace().next().unwrap_or("unknown");
        let mut labels = Labels::new();
        labels.insert("action".into(), action.to_string());
        out.push(FixtureRecord {
            entry: "logs/dpkg".into(),
            timestamp: unique.next(base),
            labels,
            content_type: "text/plain".into(),
            payload: line.as_bytes().to_vec(),
        });
    }
    out.sort_by_key(|r| r.timestamp);
    Ok(out)
}

/// The seven photographs as camera frames of entry `camera`, one per second from
/// 2024-01-01, labels `name` and `format`.
pub fn images(dir: &Path) -> Result<Vec<FixtureRecord>> {
    let images_dir = dir.join("images");
    let listing = std::fs::read_dir(&images_dir)
        .map_err(|e| Error::io(format!("listing {}", images_dir.display()), e))?;
    let mut paths: Vec<PathBuf> = listing.flatten().map(|e| e.path()).collect();
    paths.sort();
    let base = parse_utc("2024-01-01T00:00:00Z")?;
    let mut out = Vec::new();
    for (i, path) in paths.iter().enumerate() {
        let (Some(stem), Some(ext)) = (path.file_stem(), path.extension()) else {
            continue;
        };
        let format = ext.to_string_lossy().to_lowercase();
        let content_type = match format.as_str() {
            "png" => "image/png",
            "jpg" | "jpeg" => "image/jpeg",
            _ => continue,
        };
        let mut labels = Labels::new();
        labels.insert("name".into(), stem.to_string_lossy().into_owned());
        labels.insert("format".into(), format.clone());
        out.push(FixtureRecord {
            entry: "camera".into(),
            timestamp: base + i as u64 * 1_000_000,
            labels,
            content_type: content_type.into(),
            payload: std::fs::read(path)
                .map_err(|e| Error::io(format!("reading {}", path.display()), e))?,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_parse_as_utc() {
        assert_eq!(parse_utc("1970-01-01T00:00:00Z").unwrap(), 0);
        assert_eq!(
            parse_utc("2013-01-01T10:00:00Z").unwrap(),
            1_357_034_400_000_000
        );
        assert_eq!(
            parse_utc("2025-06-24 14:36:25").unwrap(),
            1_750_775_785_000_000
        );
        assert!(parse_utc("2013-13-01T10:00:00Z").is_err());
        assert!(parse_utc("yesterday").is_err());
    }

    #[test]
    fn fixture_sets_load_with_unique_sorted_timestamps() {
        let dir = fixtures_dir();
        let sets = [
            flights(&dir, Some(5000)).unwrap(),
            weather(&dir).unwrap(),
            dpkg_log(&dir).unwrap(),
            images(&dir).unwrap(),
        ];
        assert_eq!(sets[1].len(), 26_115);
        assert_eq!(sets[2].len(), 5_235);
        assert_eq!(sets[3].len(), 7);
        for set in &sets {
            assert!(set.windows(2).all(|w| w[0].timestamp < w[1].timestamp));
        }
        let first = &sets[0][0];
        assert_eq!(first.labels["carrier"], "UA");
        assert_eq!(first.labels["origin"], "EWR");
        let json: serde_json::Value = serde_json::from_slice(&first.payload).unwrap();
        assert_eq!(json["flight"], 1545);
        assert_eq!(sets[2][0].labels["action"], "startup");
    }

    #[test]
    fn file_order_and_shuffles_hold_the_same_records() {
        let dir = fixtures_dir();
        let sorted = flights(&dir, Some(3000)).unwrap();
        let by_ts = |set: &[FixtureRecord]| {
            let mut set = set.to_vec();
            set.sort_by_key(|r| r.timestamp);
            set
        };
        let file = flights_in_file_order(&dir, Some(3000)).unwrap();
        assert_eq!(by_ts(&file), sorted);
        let shuffled_set = shuffled(&sorted, 7);
        assert_ne!(shuffled_set, sorted);
        assert_eq!(shuffled_set, shuffled(&sorted, 7), "a seed repeats");
        assert_eq!(by_ts(&shuffled_set), sorted);
        let backfill = with_backfill(&sorted, 10, 7);
        assert_eq!(by_ts(&backfill), sorted);
        let belated = backfill
            .windows(2)
            .filter(|w| w[1].timestamp < w[0].timestamp)
            .count();
        assert!((50..=600).contains(&belated), "{belated}");
    }
}
