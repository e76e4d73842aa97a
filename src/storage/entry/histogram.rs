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
    /// The first stretch's start (µs).
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
}

impl Histogram {
    fn new(start: u64, stop: u64, columns: usize) -> Histogram {
        let span = stop - start;
        let step = span.div_ceil(columns as u64).max(1);
        let columns = span.div_ceil(step) as usize;
        Histogram {
            start,
            stop,
            step,
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
        (self.start..self.stop).contains(&ts)
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
    fn stretches_cover_the_range_and_never_outnumber_the_points_asked() {
        let h = Histogram::new(100, 200, 3);
        assert_eq!((h.step, h.records.len()), (34, 3));
        assert_eq!(
            (h.column(100), h.column(133), h.column(134), h.column(199)),
            (0, 0, 1, 2)
        );
        let h = Histogram::new(0, 10, 1000);
        assert_eq!((h.step, h.records.len()), (1, 10));
        let h = Histogram::new(0, u64::MAX, 7);
        assert!(h.records.len() <= 7);
        assert_eq!(h.column(u64::MAX - 1), h.records.len() - 1);
    }
}
