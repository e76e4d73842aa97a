//! An entry's records and payload bytes counted per stretch of time, exactly and without
//! reading every record: a sealed block that lies within one stretch is counted from the
//! index (its live records and payload bytes), and only the blocks that straddle a
//! stretch's edge, or the range's, have their record tables read. So a chart of an entry
//! of ten million records costs a few hundred tables at most, not ten million rows, read
//! a few at a time under the entry's lock.

use std::collections::HashSet;

use serde::Serialize;

use super::Entry;
use crate::error::{Error, Result};

/// Stretches a histogram is cut into at most.
pub const MAX_COLUMNS: usize = 1000;

/// Record tables read under one hold of the entry's lock (each a fraction of a
/// millisecond once mapped).
const TABLES_PER_HOLD: usize = 16;

/// Records and payload bytes per stretch of `[start, stop)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Histogram {
    /// The first stretch's start (µs): a round instant at or before the range's start
    /// (stretches are round spans, [`ROUND_STEPS`]; the first counts from the range's
    /// start only).
    pub start: u64,
    /// The end of the range (µs, exclusive).
    pub stop: u64,
    /// Each stretch's length (µs); the last may reach past `stop`, but counts nothing
    /// there.
    pub step: u64,
    /// Records per stretch.
    pub records: Vec<u64>,
    /// Payload bytes per stretch.
    pub bytes: Vec<u64>,
    /// The range's start: records before it are not counted.
    #[serde(skip)]
    from: u64,
}

/// A microsecond, and the spans of the clock and the calendar built from it.
const US: u64 = 1;
const MS: u64 = 1_000 * US;
const SECOND: u64 = 1_000 * MS;
const MINUTE: u64 = 60 * SECOND;
const HOUR: u64 = 60 * MINUTE;
const DAY: u64 = 24 * HOUR;
/// The stretches a histogram may take: round spans of the clock and the calendar, as a
/// time axis steps (the console's `chart.js` has the same list), so a stretch reads as
/// "an hour" or "a week", never "5d 21h 6m". Past the last, whole multiples of it.
const ROUND_STEPS: &[u64] = &[
    US,
    2 * US,
    5 * US,
    10 * US,
    20 * US,
    50 * US,
    100 * US,
    200 * US,
    500 * US,
    MS,
    2 * MS,
    5 * MS,
    10 * MS,
    20 * MS,
    50 * MS,
    100 * MS,
    200 * MS,
    500 * MS,
    SECOND,
    2 * SECOND,
    5 * SECOND,
    10 * SECOND,
    15 * SECOND,
    30 * SECOND,
    MINUTE,
    2 * MINUTE,
    5 * MINUTE,
    10 * MINUTE,
    15 * MINUTE,
    30 * MINUTE,
    HOUR,
    2 * HOUR,
    3 * HOUR,
    6 * HOUR,
    12 * HOUR,
    DAY,
    2 * DAY,
    7 * DAY,
    14 * DAY,
    28 * DAY,
    91 * DAY,
    182 * DAY,
    364 * DAY,
];
/// 1970-01-05, a Monday: stretches of whole weeks start on Mondays (UTC).
const FIRST_MONDAY: u64 = 4 * DAY;

/// Where the stretch of length `step` holding `ts` starts: at a round instant (UTC
/// midnight for days, a Monday for weeks).
fn stretch_start(ts: u64, step: u64) -> u64 {
    let origin = if step.is_multiple_of(7 * DAY) && ts >= FIRST_MONDAY {
        FIRST_MONDAY
    } else {
        0
    };
    origin + (ts - origin) / step * step
}

/// The round steps, shortest first, then whole multiples of the longest.
fn round_steps() -> impl Iterator<Item = u64> {
    let longest = ROUND_STEPS[ROUND_STEPS.len() - 1];
    ROUND_STEPS
        .iter()
        .copied()
        .chain((2..).map_while(move |k: u64| k.checked_mul(longest)))
}

impl Histogram {
    /// No stretches: what an empty entry charts when no range is asked for.
    pub fn empty(start: u64, stop: u64) -> Histogram {
        Histogram {
            start,
            stop,
            step: 0,
            from: start,
            records: Vec::new(),
            bytes: Vec::new(),
        }
    }

    fn new(start: u64, stop: u64, columns: usize) -> Histogram {
        let columns = columns.max(1) as u64;
        // The shortest round step whose stretches, from the round instant at or before
        // `start`, cover the range in at most `columns`.
        let fits = |step: u64| {
            let first = stretch_start(start, step);
            (stop - first).div_ceil(step) <= columns
        };
        let step = round_steps().find(|&step| fits(step)).unwrap_or(u64::MAX);
        let first = stretch_start(start, step);
        let columns = (stop - first).div_ceil(step) as usize;
        Histogram {
            start: first,
            stop,
            step,
            from: start,
            records: vec![0; columns],
            bytes: vec![0; columns],
        }
    }

    fn column(&self, ts: u64) -> usize {
        ((ts - self.start) / self.step) as usize
    }

    fn add(&mut self, ts: u64, records: u64, bytes: u64) {
        let at = self.column(ts);
        self.records[at] += records;
        self.bytes[at] += bytes;
    }

    fn holds(&self, ts: u64) -> bool {
        (self.from..self.stop).contains(&ts)
    }
}

impl Entry {
    /// The entry's live records and their payload bytes in `[start, stop)`, cut into at
    /// most `columns` stretches of equal length (at most `MAX_COLUMNS`).
    pub fn histogram(&self, start: u64, stop: u64, columns: usize) -> Result<Histogram> {
        if start >= stop {
            return Err(Error::unprocessable(format!(
                "The histogram's start ({start}) must be before its stop ({stop})"
            )));
        }
        if !(1..=MAX_COLUMNS).contains(&columns) {
            return Err(Error::unprocessable(format!(
                "A histogram has 1 to {MAX_COLUMNS} points, not {columns}"
            )));
        }
        let mut out = Histogram::new(start, stop, columns);
        // The lock is let go every few record tables read, so writers to the entry wait
        // for a few milliseconds at most; the walk then starts over, skipping the block
        // files already counted. Exact unless the entry changes meanwhile: a merge in
        // between may then leave records out or count them twice.
        let mut counted: HashSet<u64> = HashSet::new();
        loop {
            let st = self.lock()?;
            let mut tables = 0;
            let mut paused = false;
            for b in st.index.blocks[st.first_reaching(start)..]
                .iter()
                .take_while(|b| b.first_ts < stop)
            {
                if counted.contains(&b.seq) || b.last_ts < start || b.live_records() == 0 {
                    continue;
                }
                if tables == TABLES_PER_HOLD {
                    paused = true;
                    break;
                }
                counted.insert(b.seq);
                if out.holds(b.first_ts)
                    && out.holds(b.last_ts)
                    && out.column(b.first_ts) == out.column(b.last_ts)
                {
                    let bytes = b.payload_bytes.saturating_sub(b.edits.removed_bytes);
                    out.add(b.first_ts, b.live_records(), bytes);
                    continue;
                }
                tables += 1;
                let block = self.block_in(&st, b)?;
                for r in block.records() {
                    if out.holds(r.meta.timestamp) {
                        out.add(r.meta.timestamp, 1, r.meta.size);
                    }
                }
            }
            if paused {
                continue;
            }
            for (_, log) in st.logs() {
                for (&ts, r) in log.records().range(start..stop) {
                    out.add(ts, 1, r.meta.size);
                }
            }
            break;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stretches_are_round_spans_and_never_outnumber_the_points_asked() {
        let h = Histogram::new(100, 200, 3);
        assert_eq!((h.start, h.step, h.records.len()), (100, 50, 2));
        assert_eq!((h.column(100), h.column(149), h.column(150)), (0, 0, 1));
        let h = Histogram::new(0, 10, 1000);
        assert_eq!((h.step, h.records.len()), (1, 10));
        let h = Histogram::new(0, u64::MAX, 7);
        assert!(h.records.len() <= 7);
        assert_eq!(h.step % (364 * DAY), 0);
        assert_eq!(h.column(u64::MAX - 1), h.records.len() - 1);
        // The span: about 60 stretches of 5d 21h 6m over a year became days...
        let year_ago = 1_765_000_000 * SECOND;
        let h = Histogram::new(year_ago, year_ago + 353 * DAY, 60);
        assert_eq!(h.step, 7 * DAY, "a week");
        // ...starting on a Monday at midnight UTC, the range's start in the first.
        assert_eq!((h.start - FIRST_MONDAY) % (7 * DAY), 0);
        assert!(h.start <= year_ago && year_ago - h.start < 7 * DAY);
        assert!(h.records.len() <= 60);
        // A day in 60: 30-minute stretches from a round half hour.
        let h = Histogram::new(year_ago + 17, year_ago + 24 * HOUR, 60);
        assert_eq!(h.step, 30 * MINUTE);
        assert_eq!(h.start % (30 * MINUTE), 0);
        // What lies before the range's start is not counted, though its stretch is.
        let mut h = Histogram::new(year_ago + 17, year_ago + 24 * HOUR, 60);
        assert!(!h.holds(year_ago + 16) && h.holds(year_ago + 17));
        h.add(year_ago + 17, 1, 5);
        assert_eq!((h.records[0], h.bytes[0]), (1, 5));
    }
}
