//! Bulk removal over a time range, the operation the delete lifecycle runs. Blocks that lie
//! wholly inside the range (with no record filter) are dropped as files without reading
//! them; blocks cut by the range or the filter are rewritten without the removed records.

use std::collections::HashSet;

use serde::Serialize;

use crate::error::Result;
use crate::storage::block::SealedBlock;
use crate::storage::entry::Entry;
use crate::storage::index::{block_path, log_path};
use crate::storage::record::RecordMeta;

/// What a bulk removal does with one sealed block.
enum Plan {
    Keep,
    Drop,
    Trim(std::sync::Arc<SealedBlock>, HashSet<u64>),
}

/// A per-record predicate deciding which records in the range to remove (the `when`
/// condition); an error (e.g. a strict condition missing a label) aborts the operation.
pub type RecordFilter<'a> = dyn Fn(&RecordMeta) -> Result<bool> + 'a;

/// What a bulk removal removed (or, in a dry run, would remove).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RemoveStats {
    /// Records removed.
    pub records: u64,
    /// Blocks affected: dropped whole or rewritten (the open block counts too).
    pub blocks: u64,
}

impl RemoveStats {
    /// Adds another entry's statistics.
    pub fn add(&mut self, other: RemoveStats) {
        self.records += other.records;
        self.blocks += other.blocks;
    }
}

impl Entry {
    /// Removes every record with `start <= ts < stop` that passes `filter`; with `dry_run`
    /// only counts them. Sealed-block changes commit in one index update.
    pub fn remove_range(
        &self,
        start: u64,
        stop: u64,
        filter: Option<&RecordFilter>,
        dry_run: bool,
    ) -> Result<RemoveStats> {
        let mut st = self.lock()?;
        let mut stats = RemoveStats::default();
        // Plan first, so a failing filter aborts before anything is written.
        let mut plans = Vec::with_capacity(st.index.blocks.len());
        for b in &st.index.blocks {
            let plan = if b.last_ts < start || b.first_ts >= stop {
                Plan::Keep
            } else if filter.is_none() && b.first_ts >= start && b.last_ts < stop {
                stats.records += b.record_count;
                Plan::Drop
            } else {
                let block = self.block(b)?;
                let mut doomed = HashSet::new();
                for rec in &block.records()[block.range(start, stop)] {
                    if filter.map_or(Ok(true), |f| f(&rec.meta))? {
                        doomed.insert(rec.meta.timestamp);
                    }
                }
                stats.records += doomed.len() as u64;
                match doomed.len() {
                    0 => Plan::Keep,
                    n if n == block.records().len() => Plan::Drop,
                    _ => Plan::Trim(block, doomed),
                }
            };
            if !matches!(plan, Plan::Keep) {
                stats.blocks += 1;
            }
            plans.push(plan);
        }
        let mut open_doomed = Vec::new();
        if let Some(open) = st.open.as_ref() {
            for (ts, rec) in open.records().range(start..stop.max(start)) {
                if filter.map_or(Ok(true), |f| f(&rec.meta))? {
                    open_doomed.push(*ts);
                }
            }
            if !open_doomed.is_empty() {
                stats.records += open_doomed.len() as u64;
                stats.blocks += 1;
            }
        }
        if dry_run {
            return Ok(stats);
        }

        let mut next = st.index.clone();
        let mut kept = Vec::with_capacity(next.blocks.len());
        let mut created = Vec::new();
        let mut obsolete = Vec::new();
        for (b, plan) in std::mem::take(&mut next.blocks).into_iter().zip(plans) {
            match plan {
                Plan::Keep => kept.push(b),
                Plan::Drop => obsolete.push(b.seq),
                Plan::Trim(block, doomed) => {
                    let seq = next.take_seq();
                    let edit = super::rewrite::BlockEdit {
                        remove: Some(&doomed),
                        ..Default::default()
                    };
                    match self.write_edited(&block, &edit, seq) {
                        Ok(Some(entry)) => {
                            kept.push(entry);
                            created.push(block_path(self.dir(), seq));
                        }
                        Ok(None) => {}
                        Err(e) => {
                            for path in &created {
                                let _ = std::fs::remove_file(path);
                            }
                            return Err(e);
                        }
                    }
                    obsolete.push(b.seq);
                }
            }
        }
        next.blocks = kept;

        let drop_open = st
            .open
            .as_ref()
            .is_some_and(|o| !open_doomed.is_empty() && open_doomed.len() == o.records().len());
        let dropped_log = if drop_open {
            next.open_log.take()
        } else {
            None
        };
        if next != st.index {
            self.commit(&mut st, next, &created, &obsolete)?;
        }
        if let Some(seq) = dropped_log {
            st.open = None;
            let _ = std::fs::remove_file(log_path(self.dir(), seq));
        } else if let Some(open) = st.open.as_mut() {
            for ts in open_doomed {
                open.append_remove(ts)?;
            }
        }
        Ok(stats)
    }
}
