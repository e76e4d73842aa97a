//! A small cache of mapped, parsed sealed blocks, shared by the entries of a bucket, so
//! repeated reads of the same block do not re-map the file and re-parse its table.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::error::Result;
use crate::storage::format::block::SealedBlock;

/// Identifies a block file: the entry instance's unique id and the file's sequence number.
/// Sequence numbers are never reused within an entry instance, so a key never names two
/// different files.
pub type BlockKey = (u64, u64);

/// Least-recently-used cache of [`SealedBlock`]s.
pub struct BlockCache {
    capacity: usize,
    inner: Mutex<CacheInner>,
}

#[derive(Default)]
struct CacheInner {
    tick: u64,
    blocks: HashMap<BlockKey, (Arc<SealedBlock>, u64)>,
}

impl BlockCache {
    /// A cache holding at most `capacity` blocks (at least one).
    pub fn new(capacity: usize) -> Self {
        BlockCache {
            capacity: capacity.max(1),
            inner: Mutex::new(CacheInner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CacheInner> {
        // The cache holds no invariant a panic could break; keep serving after one.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached block, or `open` it and remember it.
    pub fn get_or_open(
        &self,
        key: BlockKey,
        open: impl FnOnce() -> Result<SealedBlock>,
    ) -> Result<Arc<SealedBlock>> {
        {
            let mut inner = self.lock();
            inner.tick += 1;
            let tick = inner.tick;
            if let Some((block, used)) = inner.blocks.get_mut(&key) {
                *used = tick;
                return Ok(block.clone());
            }
        }
        // Map and parse without holding the lock; a racing opener just wins or loses.
        let block = Arc::new(open()?);
        let mut inner = self.lock();
        if inner.blocks.len() >= self.capacity
            && let Some(oldest) = inner
                .blocks
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| *k)
        {
            inner.blocks.remove(&oldest);
        }
        let tick = inner.tick;
        inner.blocks.insert(key, (block.clone(), tick));
        Ok(block)
    }

    /// Forgets a block whose file was replaced or removed.
    pub fn evict(&self, key: BlockKey) {
        self.lock().blocks.remove(&key);
    }
}
