//! The state of an entry behind its lock — its index, its two logs, the full logs waiting
//! for their seal, and `reach`, the running maximum of the blocks' last timestamps — with
//! the lookups over it. The state is changed only by `Entry` in `mod.rs` and the files it
//! names.

use std::collections::HashMap;
use std::sync::Arc;

use crate::storage::format::block::SealedBlock;
use crate::storage::format::edits::BlockEdits;
use crate::storage::format::index::EntryIndex;
use crate::storage::format::log::OpenLog;

/// The append-only logs of an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogKind {
    /// The open block: writes at or after its first record.
    Open,
    /// Belated writes, older than the open block.
    Late,
    /// A full log (this sequence number) taken off the write path and waiting for the
    /// background seal: no record is added to it, relabels and removals still are.
    Sealing(u64),
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
    /// The full logs waiting for their seal, oldest first, with their sequence numbers
    /// (the index's `sealing_logs`).
    pub(crate) sealing: Vec<(u64, OpenLog)>,
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
            sealing: Vec::new(),
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
            LogKind::Sealing(seq) => self
                .sealing
                .iter()
                .find(|(s, _)| *s == seq)
                .map(|(_, log)| log),
        }
    }

    pub(super) fn log_mut(&mut self, kind: LogKind) -> Option<&mut OpenLog> {
        match kind {
            LogKind::Open => self.open.as_mut(),
            LogKind::Late => self.late.as_mut(),
            LogKind::Sealing(seq) => self
                .sealing
                .iter_mut()
                .find(|(s, _)| *s == seq)
                .map(|(_, log)| log),
        }
    }

    /// Installs `log` as the open or late log (a log waiting for its seal is added by
    /// the freeze that takes it off the write path).
    pub(super) fn put_log(&mut self, kind: LogKind, log: OpenLog) {
        match kind {
            LogKind::Open => self.open = Some(log),
            LogKind::Late => self.late = Some(log),
            LogKind::Sealing(seq) => self.sealing.push((seq, log)),
        }
    }

    /// Takes the log of `kind` out of the state (its file is the caller's to retire).
    pub(super) fn take_log(&mut self, kind: LogKind) -> Option<OpenLog> {
        match kind {
            LogKind::Open => self.open.take(),
            LogKind::Late => self.late.take(),
            LogKind::Sealing(seq) => {
                let pos = self.sealing.iter().position(|(s, _)| *s == seq)?;
                Some(self.sealing.remove(pos).1)
            }
        }
    }

    /// The logs that exist, with their kind: the open log, the late log, then the logs
    /// waiting for their seal.
    pub(crate) fn logs(&self) -> impl Iterator<Item = (LogKind, &OpenLog)> {
        let written = [LogKind::Open, LogKind::Late]
            .into_iter()
            .filter_map(|k| self.log(k).map(|l| (k, l)));
        written.chain(
            self.sealing
                .iter()
                .map(|(seq, log)| (LogKind::Sealing(*seq), log)),
        )
    }

    /// The sequence number of the log of `kind`, as the index names it.
    pub(crate) fn log_seq(&self, kind: LogKind) -> Option<u64> {
        match kind {
            LogKind::Open => self.index.open_log,
            LogKind::Late => self.index.late_log,
            LogKind::Sealing(seq) => Some(seq),
        }
    }

    /// True when a write at `ts` is belated: older than the open block's first record, or,
    /// with no record in the open block, not past every sealed block and every log
    /// waiting for its seal (blocks a moment from now).
    pub(super) fn is_belated(&self, ts: u64) -> bool {
        match self.open.as_ref().and_then(|o| o.records().keys().next()) {
            Some(&first) => ts < first,
            None => {
                let sealing = self
                    .sealing
                    .iter()
                    .filter_map(|(_, log)| log.records().keys().next_back().copied());
                self.sealed_latest()
                    .into_iter()
                    .chain(sealing)
                    .max()
                    .is_some_and(|last| ts <= last)
            }
        }
    }
}

/// Takes the log of `kind` out of `index`: the open or late log's field cleared, or a
/// sealing log's number removed. Returns its sequence number.
pub(super) fn take_index_log(index: &mut EntryIndex, kind: LogKind) -> Option<u64> {
    match kind {
        LogKind::Open => index.open_log.take(),
        LogKind::Late => index.late_log.take(),
        LogKind::Sealing(seq) => {
            let pos = index.sealing_logs.iter().position(|s| *s == seq)?;
            Some(index.sealing_logs.remove(pos))
        }
    }
}
