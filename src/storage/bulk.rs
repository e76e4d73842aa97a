//! Bulk removal over a time range, the operation the delete lifecycle runs. Blocks that lie
//! wholly inside the range (with no record filter) are dropped as files without reading
//! them; blocks cut by the range or the filter are rewritten without the removed records.

use std::collections::HashSet;

use serde::Serialize;

use crate::error::Result;
use crate::storage::entry::Entry;
use crate::storage::index::{block_path, log_path};
use crate::storage::record::RecordMeta;

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
        let mut next = st.index.clone();
        let mut kept = Vec::with_capacity(next.blocks.len());
        let mut created = Vec::new();
        let mut obsolete = Vec::new();
        let blocks = std::mem::take(&mut next.blocks);
        for b in blocks {
            if b.last_ts < start || b.first_ts >= stop {
                kept.push(b);
                continue;
            }
            if filter.is_none() && b.first_ts >= start && b.last_ts < stop {
                stats.records += b.record_count;
                stats.blocks += 1;
                obsolete.push(b.seq);
                continue;
            }
            let block = self.block(&b)?;
            let mut doomed = HashSet::new();
            for rec in &block.records()[block.range(start, stop)] {
                if filter.map_or(Ok(true), |f| f(&rec.meta))? {
                    doomed.insert(rec.meta.timestamp);
                }
            }
            if doomed.is_empty() {
                kept.push(b);
                continue;
            }
            stats.records += doomed.len() as u64;
            stats.blocks += 1;
            if dry_run {
                continue;
            }
            obsolete.push(b.seq);
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
        }
        next.blocks = kept;

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
        let drop_open = st
            .open
            .as_ref()
            .is_some_and(|o| !open_doomed.is_empty() && open_doomed.len() == o.records().len());
        let dropped_log = if drop_open { next.open_log.take() } else { None };
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
