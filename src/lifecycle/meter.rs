//! How far a running policy is: the run writes its plan and steps into a [`RunMeter`]
//! (atomics, no lock: the worker never waits for a reader), and the scheduler's info
//! reads a [`RunProgress`] snapshot of it — what `halflife policy run` draws its
//! progress bar from.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// A snapshot of a run's progress through its window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunProgress {
    /// The window's first instant (µs since the epoch).
    pub window_start: u64,
    /// The window's end (exclusive, µs since the epoch).
    pub window_stop: u64,
    /// Records in the window (a compression: of the blocks it rewrites; a deletion: the
    /// records it examines, of which a `when` may remove fewer).
    pub records_total: u64,
    /// Records done so far.
    pub records_done: u64,
    /// Blocks in the window.
    pub blocks_total: u64,
    /// Blocks done so far.
    pub blocks_done: u64,
    /// Bytes a compression reads (0 for a deletion).
    pub bytes_total: u64,
    /// Bytes read so far.
    pub bytes_done: u64,
}

/// The live counters of one run.
#[derive(Debug, Default)]
pub struct RunMeter {
    planned: AtomicBool,
    window_start: AtomicU64,
    window_stop: AtomicU64,
    records_total: AtomicU64,
    records_done: AtomicU64,
    blocks_total: AtomicU64,
    blocks_done: AtomicU64,
    bytes_total: AtomicU64,
    bytes_done: AtomicU64,
}

impl RunMeter {
    /// Sets the work ahead, once the run knows its window.
    pub fn plan(&self, start: u64, stop: u64, records: u64, blocks: u64, bytes: u64) {
        self.window_start.store(start, Ordering::Relaxed);
        self.window_stop.store(stop, Ordering::Relaxed);
        self.records_total.store(records, Ordering::Relaxed);
        self.blocks_total.store(blocks, Ordering::Relaxed);
        self.bytes_total.store(bytes, Ordering::Relaxed);
        self.planned.store(true, Ordering::Release);
    }

    /// Adds work done.
    pub fn advance(&self, records: u64, blocks: u64, bytes: u64) {
        self.records_done.fetch_add(records, Ordering::Relaxed);
        self.blocks_done.fetch_add(blocks, Ordering::Relaxed);
        self.bytes_done.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Marks the planned work done: a run that reached its end is at 100 % even where a
    /// step's bytes differed from the plan's (a log is counted by its file, then
    /// written as a block).
    pub fn complete(&self) {
        let copy = |total: &AtomicU64, done: &AtomicU64| {
            done.fetch_max(total.load(Ordering::Relaxed), Ordering::Relaxed);
        };
        copy(&self.records_total, &self.records_done);
        copy(&self.blocks_total, &self.blocks_done);
        copy(&self.bytes_total, &self.bytes_done);
    }

    /// The progress so far; `None` until the run has planned its window.
    pub fn snapshot(&self) -> Option<RunProgress> {
        if !self.planned.load(Ordering::Acquire) {
            return None;
        }
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let records_total = read(&self.records_total);
        let blocks_total = read(&self.blocks_total);
        let bytes_total = read(&self.bytes_total);
        // Totals are planned from the index; the steps may pass them (a log sealed on
        // the way, records written meanwhile): done never reads as more than total.
        Some(RunProgress {
            window_start: read(&self.window_start),
            window_stop: read(&self.window_stop),
            records_total,
            records_done: read(&self.records_done).min(records_total),
            blocks_total,
            blocks_done: read(&self.blocks_done).min(blocks_total),
            bytes_total,
            bytes_done: read(&self.bytes_done).min(bytes_total),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_meter_reports_nothing_before_its_plan_and_never_more_than_planned() {
        let meter = RunMeter::default();
        meter.advance(5, 1, 100);
        assert_eq!(meter.snapshot(), None);
        meter.plan(10, 20, 8, 2, 150);
        let progress = meter.snapshot().unwrap();
        assert_eq!((progress.window_start, progress.window_stop), (10, 20));
        assert_eq!((progress.records_done, progress.records_total), (5, 8));
        meter.advance(5, 5, 100);
        let progress = meter.snapshot().unwrap();
        assert_eq!(progress.records_done, 8);
        assert_eq!(progress.blocks_done, 2);
        assert_eq!(progress.bytes_done, 150);
    }
}
