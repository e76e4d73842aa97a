//! Planning a bulk removal over a time range, the operation the delete lifecycle runs.
//! Blocks that lie wholly inside the range (with no record filter) are dropped as files
//! without reading them; blocks cut by the range or the filter get tombstones for the
//! removed records (their block edit logs; see `storage::format::edits`). [`Entry::remove_range`] carries the plan out.

use serde::Serialize;

use crate::error::Result;
use crate::storage::entry::{Entry, EntryState, LogKind};
use crate::storage::record::RecordMeta;

/// What a bulk removal does with one sealed block.
pub(crate) enum BlockPlan {
    Keep,
    Drop,
    /// Tombstones for these records (timestamp, payload size).
    Trim(Vec<(u64, u64)>),
}

/// A bulk removal, decided before anything is written.
pub(crate) struct RemovalPlan {
    /// One action per sealed block, in index order.
    pub blocks: Vec<BlockPlan>,
    /// Timestamps to remove from each log that loses records.
    pub logs: Vec<(LogKind, Vec<u64>)>,
    /// What the removal removes.
    pub stats: RemoveStats,
}

/// A per-record predicate deciding which records in the range to remove (the `when`
/// condition); an error (e.g. a strict condition missing a label) aborts the operation.
pub type RecordFilter<'a> = dyn Fn(&RecordMeta) -> Result<bool> + 'a;

/// How a bulk removal by time range runs.
#[derive(Clone, Copy)]
pub struct RemoveControl<'a> {
    /// Count what would go, changing nothing.
    pub dry_run: bool,
    /// Asked between entries; yes stops early (what was done stays done).
    pub cancel: &'a dyn Fn() -> bool,
    /// Keep the records a replication has not delivered yet (and those after them in
    /// their entry), so retention never loses a record on its way to another server.
    /// False removes them too: they are then never delivered.
    pub keep_pending_replication: bool,
}

impl RemoveControl<'static> {
    /// Removes now, uncancellable, keeping what replication still needs.
    pub fn remove() -> Self {
        RemoveControl {
            dry_run: false,
            cancel: &|| false,
            keep_pending_replication: true,
        }
    }
}

impl<'a> RemoveControl<'a> {
    /// Removes (or counts, with `dry_run`), asking `cancel` between entries, keeping what
    /// replication still needs.
    pub fn new(dry_run: bool, cancel: &'a dyn Fn() -> bool) -> Self {
        RemoveControl {
            dry_run,
            cancel,
            keep_pending_replication: true,
        }
    }
}

/// What a bulk removal removed (or, in a dry run, would remove).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RemoveStats {
    /// Records removed.
    pub records: u64,
    /// Blocks affected: dropped whole or given tombstones (each log counts too).
    pub blocks: u64,
    /// The oldest record of the range kept because a replication has not delivered it
    /// yet (it and the records after it were kept; `remove_records_until` only).
    pub kept_from: Option<u64>,
}

impl RemoveStats {
    /// Adds another entry's statistics.
    pub fn add(&mut self, other: RemoveStats) {
        self.records += other.records;
        self.blocks += other.blocks;
        self.kept_from = match (self.kept_from, other.kept_from) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

/// Decides, under the entry lock held by the caller, what removing the records with
/// `start <= ts < stop` that pass `filter` does to each block.
pub(crate) fn plan_removal(
    entry: &Entry,
    st: &EntryState,
    start: u64,
    stop: u64,
    filter: Option<&RecordFilter>,
) -> Result<RemovalPlan> {
    let mut stats = RemoveStats::default();
    let mut blocks = Vec::with_capacity(st.index.blocks.len());
    for b in &st.index.blocks {
        let plan = if b.last_ts < start || b.first_ts >= stop {
            BlockPlan::Keep
        } else if filter.is_none() && b.first_ts >= start && b.last_ts < stop {
            stats.records += b.live_records();
            BlockPlan::Drop
        } else {
            let block = entry.block_in(st, b)?;
            let mut doomed = Vec::new();
            for rec in &block.records()[block.range(start, stop)] {
                if filter.map_or(Ok(true), |f| f(&rec.meta))? {
                    doomed.push((rec.meta.timestamp, rec.meta.size));
                }
            }
            stats.records += doomed.len() as u64;
            match doomed.len() {
                0 => BlockPlan::Keep,
                n if n == block.records().len() => BlockPlan::Drop,
                _ => BlockPlan::Trim(doomed),
            }
        };
        if !matches!(plan, BlockPlan::Keep) {
            stats.blocks += 1;
        }
        blocks.push(plan);
    }
    let mut logs = Vec::new();
    for (kind, log) in st.logs() {
        let mut doomed = Vec::new();
        for (ts, rec) in log.records().range(start..stop.max(start)) {
            if filter.map_or(Ok(true), |f| f(&rec.meta))? {
                doomed.push(*ts);
            }
        }
        if !doomed.is_empty() {
            stats.records += doomed.len() as u64;
            stats.blocks += 1;
            logs.push((kind, doomed));
        }
    }
    Ok(RemovalPlan {
        blocks,
        logs,
        stats,
    })
}
