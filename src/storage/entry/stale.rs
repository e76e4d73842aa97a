//! Stale logs: an entry's open block or late log whose records all lie in a compress
//! run's window. The run seals them so they are compressed with the rest (an entry that
//! stopped receiving writes would otherwise keep its last block raw forever), and a dry
//! run samples them to predict the size after.

use std::sync::Arc;

use super::{Entry, EntryState, LogKind};
use crate::error::Result;

/// A log a compress run would seal: its records, bytes on disk, payload bytes, and where
/// its payloads are (in timestamp order), so a prediction can sample them.
#[derive(Debug, Clone)]
pub(crate) struct StaleLog {
    pub(crate) records: u64,
    pub(crate) bytes: u64,
    pub(crate) payload_bytes: u64,
    pub(crate) file: Arc<std::fs::File>,
    /// `(offset, size)` of each payload in the file.
    pub(crate) payloads: Vec<(u64, u64)>,
}

impl Entry {
    /// The logs (open block, late log) holding records, all of them in `[start, stop)`,
    /// with their record counts and bytes on disk: what [`Entry::seal_stale_logs`] would
    /// seal.
    pub(crate) fn stale_logs(&self, start: u64, stop: u64) -> Result<Vec<StaleLog>> {
        let st = self.lock()?;
        Self::stale_kinds(&st, start, stop)
            .into_iter()
            .filter_map(|kind| st.log(kind))
            .map(|log| {
                Ok(StaleLog {
                    records: log.records().len() as u64,
                    bytes: log.file_len(),
                    payload_bytes: log.records().values().map(|r| r.meta.size).sum(),
                    file: log.file()?,
                    payloads: log
                        .records()
                        .values()
                        .map(|r| (r.offset, r.meta.size))
                        .collect(),
                })
            })
            .collect()
    }

    /// Seals the logs whose every record lies in `[start, stop)`, so a compress run over
    /// that window compresses them too: an entry that stopped receiving writes would
    /// otherwise keep its last block raw forever. A later write starts a new log. Returns
    /// how many were sealed. The logs are taken off the write path under the lock and
    /// copied without it (`seal.rs`), as a full log is.
    pub(crate) fn seal_stale_logs(&self, start: u64, stop: u64) -> Result<usize> {
        let kinds = {
            let mut st = self.lock()?;
            let kinds = Self::stale_kinds(&st, start, stop);
            for &kind in &kinds {
                self.freeze(&mut st, kind, false)?;
            }
            kinds
        };
        self.seal_all()?;
        Ok(kinds.len())
    }

    fn stale_kinds(st: &EntryState, start: u64, stop: u64) -> Vec<LogKind> {
        st.logs()
            .filter(|(kind, _)| !matches!(kind, LogKind::Sealing(_)))
            .filter(|(_, log)| {
                let stamps = log.records();
                stamps.keys().next().is_some_and(|&first| first >= start)
                    && stamps.keys().next_back().is_some_and(|&last| last < stop)
            })
            .map(|(kind, _)| kind)
            .collect()
    }
}
