//! What an entry holds, from its index and logs alone (no block is read): counts, size
//! and time range, the stretches of records lifecycle windows are cut from, the storage
//! tiers, and how many blocks overlap.

use super::{Entry, EntryState};
use crate::error::Result;
use crate::storage::format::index::BlockEntry;

/// Statistics of an entry, as `GET /b/{bucket}` reports them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct EntryInfo {
    /// Entry name.
    pub name: String,
    /// Bytes on disk: block files plus the logs.
    pub size: u64,
    /// Number of records.
    pub record_count: u64,
    /// Number of blocks holding records (each log counts once it has one).
    pub block_count: u64,
    /// Oldest timestamp, 0 when empty.
    pub oldest_record: u64,
    /// Latest timestamp, 0 when empty.
    pub latest_record: u64,
}

/// A stretch of records of an entry as its index knows it: a sealed block, or a log's
/// records from some instant on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordSpan {
    /// Its first record's timestamp.
    pub first: u64,
    /// Its last record's timestamp.
    pub last: u64,
    /// Its live records.
    pub records: u64,
}

/// What an entry holds in one storage tier: the open and late logs (`open`, written as
/// they came) or the sealed blocks of one codec (`none`, `lz4`, `zstd-3`, ...).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TierInfo {
    /// `open`, the codec of the sealed blocks, or `remote NAME` for tiered blocks.
    pub tier: String,
    /// Blocks (logs holding records count as one each).
    pub blocks: u64,
    /// Live records.
    pub records: u64,
    /// Bytes on disk (block files and their edit logs, or the logs).
    pub bytes: u64,
}

impl Entry {
    /// The sealed blocks and the first timestamp of the logs, read under one lock: what a
    /// manifest of the entry's tiered blocks is made of (`storage/remote/manifest.rs`).
    pub(crate) fn blocks_and_first_logged(&self) -> Result<(Vec<BlockEntry>, Option<u64>)> {
        let st = self.lock()?;
        let first_logged = st
            .logs()
            .filter_map(|(_, log)| log.records().keys().next().copied())
            .min();
        Ok((st.index.blocks.clone(), first_logged))
    }

    /// How many sealed blocks a read of `ts` may have to search: those whose time range
    /// contains it (the read amplification overlap causes; 1 or 0 without overlap).
    pub fn blocks_covering(&self, ts: u64) -> Result<usize> {
        Ok(self.lock()?.covering(ts).count())
    }

    /// The most sealed blocks whose time ranges contain one instant: 1 when the blocks are
    /// disjoint (0 without blocks); belated writes raise it, merges and compaction lower it.
    pub fn max_overlap(&self) -> Result<usize> {
        // Taking the lock answers NotFound for a removed entry, as every other call does.
        drop(self.lock()?);
        Ok(self.depth.load(std::sync::atomic::Ordering::Relaxed))
    }

    pub(super) fn oldest_of(st: &EntryState) -> Option<u64> {
        let logs = st
            .logs()
            .filter_map(|(_, l)| l.records().keys().next().copied());
        st.index
            .blocks
            .first()
            .map(|b| b.first_ts)
            .into_iter()
            .chain(logs)
            .min()
    }

    pub(super) fn latest_of(st: &EntryState) -> Option<u64> {
        let logs = st
            .logs()
            .filter_map(|(_, l)| l.records().keys().next_back().copied());
        st.sealed_latest().into_iter().chain(logs).max()
    }

    /// The stretches of the entry's records that reach `from` or later: each sealed block
    /// whose last record is at or after `from`, and the log records from `from` — from
    /// the index alone, no block is read. What lifecycle windows skip gaps and bound
    /// their work by.
    pub fn spans_from(&self, from: u64) -> Result<Vec<RecordSpan>> {
        let st = self.lock()?;
        let mut spans: Vec<RecordSpan> = st
            .index
            .blocks
            .iter()
            .filter(|b| b.last_ts >= from && b.live_records() > 0)
            .map(|b| RecordSpan {
                first: b.first_ts,
                last: b.last_ts,
                records: b.live_records(),
            })
            .collect();
        for (_, log) in st.logs() {
            let mut after = log.records().range(from..);
            if let Some((&first, _)) = after.next() {
                let last = log.records().keys().next_back().copied().unwrap_or(first);
                spans.push(RecordSpan {
                    first,
                    last,
                    records: 1 + after.count() as u64,
                });
            }
        }
        Ok(spans)
    }

    /// Bytes the entry takes on the local disk (a tiered block: its stub).
    pub fn local_size(&self) -> Result<u64> {
        let st = self.lock()?;
        Ok(st
            .index
            .blocks
            .iter()
            .map(|b| match b.remote {
                None => b.live_size(),
                Some(_) => b.local_size(),
            })
            .sum::<u64>()
            + st.logs().map(|(_, l)| l.file_len()).sum::<u64>()
            + st.edits.values().map(|e| e.file_len()).sum::<u64>())
    }

    /// Size, counts and time range of the entry.
    pub fn info(&self) -> Result<EntryInfo> {
        let st = self.lock()?;
        let log_records = st.logs().map(|(_, l)| l.records().len() as u64);
        let logs_in_use = st.logs().filter(|(_, l)| !l.records().is_empty()).count() as u64;
        Ok(EntryInfo {
            name: self.name.clone(),
            size: st.index.blocks.iter().map(|b| b.live_size()).sum::<u64>()
                + st.logs().map(|(_, l)| l.file_len()).sum::<u64>()
                + st.edits.values().map(|e| e.file_len()).sum::<u64>(),
            record_count: st
                .index
                .blocks
                .iter()
                .map(|b| b.live_records())
                .sum::<u64>()
                + log_records.sum::<u64>(),
            block_count: st.index.blocks.len() as u64 + logs_in_use,
            oldest_record: Self::oldest_of(&st).unwrap_or(0),
            latest_record: Self::latest_of(&st).unwrap_or(0),
        })
    }

    /// Blocks, records and bytes by storage tier: the logs first (`open`), then each codec
    /// in strength order (none < lz4 < zstd by level), then each remote (`remote NAME`:
    /// the bytes of its objects). Tiers with nothing are left out.
    pub fn tiers(&self) -> Result<Vec<TierInfo>> {
        let st = self.lock()?;
        let mut by_codec: std::collections::BTreeMap<(i32, String), TierInfo> = Default::default();
        for block in &st.index.blocks {
            // Tiered blocks are one tier per remote, after every local one.
            let (rank, name) = match &block.remote {
                None => (block.codec.rank(), block.codec.to_string()),
                Some(r) => (i32::MAX, format!("remote {}", r.remote)),
            };
            let tier = by_codec
                .entry((rank, name.clone()))
                .or_insert_with(|| TierInfo {
                    tier: name,
                    blocks: 0,
                    records: 0,
                    bytes: 0,
                });
            tier.blocks += 1;
            tier.records += block.live_records();
            tier.bytes += block.live_size() + st.edits.get(&block.seq).map_or(0, |e| e.file_len());
        }
        let open = TierInfo {
            tier: "open".into(),
            blocks: st.logs().filter(|(_, l)| !l.records().is_empty()).count() as u64,
            records: st.logs().map(|(_, l)| l.records().len() as u64).sum(),
            bytes: st.logs().map(|(_, l)| l.file_len()).sum(),
        };
        Ok((open.records > 0)
            .then_some(open)
            .into_iter()
            .chain(by_codec.into_values())
            .collect())
    }
}
