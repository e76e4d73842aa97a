//! The state of an entry behind its lock — its index, its two logs and `reach`, the
//! running maximum of the blocks' last timestamps — with the lookups over it. The state is
//! changed only by `Entry` in `mod.rs`.

use std::collections::HashMap;
use std::sync::Arc;

use crate::storage::format::block::SealedBlock;
use crate::storage::format::edits::BlockEdits;
use crate::storage::format::index::EntryIndex;
use crate::storage::format::log::OpenLog;

/// The two append-only logs of an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogKind {
    /// The open block: writes at or after its first record.
    Open,
    /// Belated writes, older than the open block.
    Late,
}

/// Where an existing record lives.
pub(crate) enum Place {
    /// In one of the logs.
    Log(LogKind),
    /// At position `record` of sealed block `pos` (index order), mapped as `block`.
    Sealed {
        pos: usize,
        block: Arc<SealedBlock>,
        record: usize,
    },
}

/// The mutable state of an entry, behind its lock.
pub(crate) struct EntryState {
    pub(crate) index: EntryIndex,
    pub(crate) open: Option<OpenLog>,
    pub(crate) late: Option<OpenLog>,
    /// The edit logs of sealed blocks that have one, by block sequence number.
    pub(crate) edits: HashMap<u64, BlockEdits>,
    /// `reach[i]` = the greatest `last_ts` of `index.blocks[..=i]`.
    reach: Vec<u64>,
    pub(super) removed: bool,
    /// What a replica loaded this state from (`replica.rs`); `None` for the writer.
    pub(super) seen: Option<super::replica::DiskVersion>,
}

impl EntryState {
    pub(super) fn new(
        index: EntryIndex,
        open: Option<OpenLog>,
        late: Option<OpenLog>,
        edits: HashMap<u64, BlockEdits>,
    ) -> Self {
        let mut st = EntryState {
            index,
            open,
            late,
            edits,
            reach: Vec::new(),
            removed: false,
            seen: None,
        };
        st.refresh_reach();
        st
    }

    /// Restores the order by first timestamp and `reach` after a block's range changed in
    /// memory (its first or last record removed by a tombstone).
    pub(super) fn resort(&mut self) {
        self.index.blocks.sort_by_key(|b| b.first_ts);
        self.refresh_reach();
    }

    /// Recomputes `reach` after the blocks changed (every commit).
    pub(super) fn refresh_reach(&mut self) {
        let mut max = 0;
        self.reach = self
            .index
            .blocks
            .iter()
            .map(|b| {
                max = max.max(b.last_ts);
                max
            })
            .collect();
    }

    /// Positions of the sealed blocks whose time range contains `ts`, newest first.
    pub(crate) fn covering(&self, ts: u64) -> impl Iterator<Item = usize> + '_ {
        let hi = self.index.blocks.partition_point(|b| b.first_ts <= ts);
        (0..hi)
            .rev()
            .take_while(move |&i| self.reach[i] >= ts)
            .filter(move |&i| self.index.blocks[i].last_ts >= ts)
    }

    /// Position of the first block that can hold a record at or after `ts`.
    pub(crate) fn first_reaching(&self, ts: u64) -> usize {
        self.reach.partition_point(|&r| r < ts)
    }

    /// The greatest last timestamp of the sealed blocks.
    pub(crate) fn sealed_latest(&self) -> Option<u64> {
        self.reach.last().copied()
    }

    pub(crate) fn log(&self, kind: LogKind) -> Option<&OpenLog> {
        match kind {
            LogKind::Open => self.open.as_ref(),
            LogKind::Late => self.late.as_ref(),
        }
    }

    pub(super) fn log_slot(&mut self, kind: LogKind) -> &mut Option<OpenLog> {
        match kind {
            LogKind::Open => &mut self.open,
            LogKind::Late => &mut self.late,
        }
    }

    /// The logs that exist, with their kind.
    pub(crate) fn logs(&self) -> impl Iterator<Item = (LogKind, &OpenLog)> {
        [LogKind::Open, LogKind::Late]
            .into_iter()
            .filter_map(|k| self.log(k).map(|l| (k, l)))
    }

    /// True when a write at `ts` is belated: older than the open block's first record, or,
    /// with no record in the open block, not past every sealed block.
    pub(super) fn is_belated(&self, ts: u64) -> bool {
        match self.open.as_ref().and_then(|o| o.records().keys().next()) {
            Some(&first) => ts < first,
            None => self.sealed_latest().is_some_and(|last| ts <= last),
        }
    }
}

/// The index field naming a log.
pub(super) fn index_log(index: &mut EntryIndex, kind: LogKind) -> &mut Option<u64> {
    match kind {
        LogKind::Open => &mut index.open_log,
        LogKind::Late => &mut index.late_log,
    }
}
