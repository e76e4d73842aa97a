//! Where the reads of an entry find a tiered block: its copy in the frame cache, made
//! from its stub, whose misses fetch frames from the remote; and the blocks after it a
//! streaming reader will want next, fetched ahead.

use super::{Entry, EntryState};
use crate::error::{Error, Result};
use crate::storage::format::frames::Fetch;
use crate::storage::format::index::{BlockEntry, block_path, stub_path};

/// How many tiered blocks after the one a query opens are fetched ahead.
const PREFETCH_BLOCKS: usize = 2;

impl Entry {
    /// The file a block is mapped from and, for a tiered block, what fetches its frames:
    /// its copy in the frame cache, made from its stub (`read_ahead`: a miss also fetches
    /// the next frames, for readers that stream the block).
    pub(crate) fn block_source(
        &self,
        b: &BlockEntry,
        read_ahead: bool,
    ) -> Result<(std::path::PathBuf, Option<Fetch>)> {
        let Some(location) = &b.remote else {
            return Ok((block_path(&self.dir, b.seq), None));
        };
        let remotes = &self.ctx.remotes;
        let remote = remotes.require(&location.remote)?;
        let cache = remotes.cache().ok_or_else(|| {
            Error::internal("a remote is configured without a frame cache".to_string())
        })?;
        let (path, object) = cache.open(remote, &stub_path(&self.dir, b.seq), location)?;
        Ok((
            path,
            Some(Fetch {
                source: object,
                read_ahead,
            }),
        ))
    }

    /// Starts fetching, on the global thread pool, the tiered blocks that follow `b` in
    /// the index ([`PREFETCH_BLOCKS`] of them), for a reader streaming the entry: a query
    /// opens blocks in timestamp order, and the network then overlaps its reading. Only
    /// while the remote's last call got an answer: against a remote that is down each
    /// prefetch would wait out a connect timeout of its own, on threads reads share.
    pub(super) fn prefetch_after(&self, st: &EntryState, b: &BlockEntry) {
        let blocks = &st.index.blocks;
        let Some(at) = blocks.iter().position(|x| x.seq == b.seq) else {
            return;
        };
        let next: Vec<_> = blocks[at + 1..]
            .iter()
            .take(PREFETCH_BLOCKS)
            .filter_map(|n| n.remote.clone().map(|r| (stub_path(&self.dir, n.seq), r)))
            .filter(|(_, r)| {
                self.ctx
                    .remotes
                    .get(&r.remote)
                    .is_some_and(|r| r.answering())
            })
            .collect();
        if next.is_empty() {
            return;
        }
        let remotes = self.ctx.remotes.clone();
        rayon::spawn(move || {
            let Some(cache) = remotes.cache() else { return };
            for (stub, location) in next {
                let Some(remote) = remotes.get(&location.remote) else {
                    continue;
                };
                // A remote whose last call went unanswered is left to the reads that
                // need its data (checked again: an earlier prefetch may have failed).
                if !remote.answering() {
                    continue;
                }
                if let Ok((_, object)) = cache.open(remote, &stub, &location) {
                    object.fetch_all();
                }
            }
        });
    }
}
