//! What a bucket offers of compression: estimates and runs over a window of its
//! blocks. The planning, streaming and committing are `storage/compress/`'s.

use super::Bucket;
use crate::error::Result;
use crate::storage::compress::{
    self, BlockSink, CompressRequest, CompressStats, CompressWindow, Scope,
};

impl Bucket {
    /// What [`Bucket::compress_blocks`] would rewrite, changing nothing: eligible blocks,
    /// their records, the bytes it would read, and the bytes it would leave, predicted by
    /// compressing a sample of the frames (`predict.rs`: at most 64 MiB read).
    pub fn estimate_compress(&self, window: &CompressWindow) -> Result<CompressStats> {
        self.estimate_compress_observed(window, &|_| {})
    }

    /// [`Bucket::estimate_compress`] telling `walked` the stored bytes of each block and
    /// log as the sampling passes it (they add up to `bytes_before`): what a progress bar
    /// follows, since sampling at a slow level takes a while.
    pub fn estimate_compress_observed(
        &self,
        window: &CompressWindow,
        walked: &dyn Fn(u64),
    ) -> Result<CompressStats> {
        compress::estimate(self.compress_scope(window)?, window, walked)
    }

    /// Like [`Bucket::estimate_compress`] without the prediction (`bytes_after` is 0):
    /// only the block indexes are read. What a progress bar needs to know first.
    pub fn eligible_for_compress(&self, window: &CompressWindow) -> Result<CompressStats> {
        compress::eligible(self.compress_scope(window)?, window)
    }

    /// Recompresses the sealed blocks of `request`'s window on its pool. When its
    /// `cancel` says yes, the run commits what it finished and stops.
    pub fn compress_blocks(&self, request: &CompressRequest) -> Result<CompressStats> {
        compress::run(self.compress_scope(&request.window)?, request, None)
    }

    /// [`Bucket::compress_blocks`] whose recompressed blocks go to `sink` instead of
    /// being synced and committed here (a tier run with a `compression` target: they are
    /// uploaded as they are written). Groups of overlapping blocks are still merged and
    /// committed locally.
    pub fn compress_into(
        &self,
        request: &CompressRequest,
        sink: BlockSink,
    ) -> Result<CompressStats> {
        compress::run(self.compress_scope(&request.window)?, request, Some(sink))
    }

    /// The entries `window` names, with this bucket's block limits.
    fn compress_scope(&self, window: &CompressWindow) -> Result<Scope> {
        compress::validate_target(window.target)?;
        Ok(Scope {
            entries: self.select_entries(window.entries)?,
            limits: self.settings().block_limits(),
        })
    }
}
