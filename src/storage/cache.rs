//! Caches shared by the entries of a bucket:
//! - mapped, parsed sealed blocks, so repeated reads of a block do not re-map the file and
//!   re-parse its table;
//! - the bare timestamps of many more blocks (8 bytes per record), which is all a write
//!   needs to refuse a duplicate. Out-of-order writes land anywhere in an entry's history,
//!   so their duplicate checks touch blocks at random; keeping only timestamps lets the
//!   cache cover sixteen times as many blocks for the memory of a few parsed ones.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use crate::error::Result;
use crate::storage::format::block::SealedBlock;

/// Identifies a block file: the entry instance's unique id and the file's sequence number.
/// Sequence numbers are never reused within an entry instance, so a key never names two
/// different files.
pub type BlockKey = (u64, u64);

/// How many blocks' timestamps are kept per parsed block the cache holds.
const TIMESTAMPS_PER_BLOCK_SLOT: usize = 16;

/// A least-recently-used map; eviction drops the oldest eighth at once, so an insert into
/// a full map costs O(1) amortized instead of a scan per insert.
struct Lru<K, V> {
    capacity: usize,
    tick: u64,
    items: HashMap<K, (V, u64)>,
}

impl<K: Hash + Eq + Copy, V: Clone> Lru<K, V> {
    fn new(capacity: usize) -> Self {
        Lru {
            capacity: capacity.max(1),
            tick: 0,
            items: HashMap::new(),
        }
    }

    fn get(&mut self, key: &K) -> Option<V> {
        self.tick += 1;
        let tick = self.tick;
        self.items.get_mut(key).map(|(v, used)| {
            *used = tick;
            v.clone()
        })
    }

    fn insert(&mut self, key: K, value: V) {
        if self.items.len() >= self.capacity && !self.items.contains_key(&key) {
            let mut ticks: Vec<u64> = self.items.values().map(|(_, t)| *t).collect();
            let drop = (self.capacity / 8).max(1).min(ticks.len() - 1);
            let (_, cutoff, _) = ticks.select_nth_unstable(drop);
            let cutoff = *cutoff;
            self.items.retain(|_, (_, t)| *t > cutoff);
        }
        self.tick += 1;
        self.items.insert(key, (value, self.tick));
    }

    fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        self.items.get_mut(key).map(|(v, _)| v)
    }

    fn remove(&mut self, key: &K) {
        self.items.remove(key);
    }
}

/// The caches of one bucket.
pub struct BlockCache {
    inner: Mutex<CacheInner>,
}

struct CacheInner {
    blocks: Lru<BlockKey, Arc<SealedBlock>>,
    timestamps: Lru<BlockKey, Arc<[u64]>>,
}

impl BlockCache {
    /// A cache holding at most `capacity` parsed blocks (at least one), and the
    /// timestamps of sixteen times as many.
    pub fn new(capacity: usize) -> Self {
        BlockCache {
            inner: Mutex::new(CacheInner {
                blocks: Lru::new(capacity),
                timestamps: Lru::new(capacity.max(1) * TIMESTAMPS_PER_BLOCK_SLOT),
            }),
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
        if let Some(block) = self.lock().blocks.get(&key) {
            return Ok(block);
        }
        // Map and parse without holding the lock; a racing opener just wins or loses.
        let block = Arc::new(open()?);
        let mut inner = self.lock();
        inner.blocks.insert(key, block.clone());
        inner.timestamps.insert(key, timestamps_of(&block));
        Ok(block)
    }

    /// Whether the block holds a record at `ts`, from its cached timestamps, the cached
    /// block, or else the block opened with `open` (and then cached).
    pub fn contains(
        &self,
        key: BlockKey,
        ts: u64,
        open: impl FnOnce() -> Result<SealedBlock>,
    ) -> Result<bool> {
        let cached = self.lock().timestamps.get(&key);
        let stamps = match cached {
            Some(stamps) => stamps,
            None => {
                let stamps = timestamps_of(&*self.get_or_open(key, open)?);
                self.lock().timestamps.insert(key, stamps.clone());
                stamps
            }
        };
        Ok(stamps.binary_search(&ts).is_ok())
    }

    /// Applies `change` to the cached view of a block whose edit log just grew, so the
    /// next read need not re-parse it: in place when no reader holds the view, else on a
    /// copy (readers keep the view they had). An uncached block needs nothing: it is
    /// opened with its edits applied.
    pub fn edit(&self, key: BlockKey, change: impl FnOnce(&mut SealedBlock)) {
        let mut inner = self.lock();
        let Some(view) = inner.blocks.get_mut(&key) else {
            inner.timestamps.remove(&key);
            return;
        };
        if Arc::get_mut(view).is_none() {
            *view = Arc::new(view.fork());
        }
        change(Arc::get_mut(view).expect("a view just forked has no other holder"));
        let stamps = timestamps_of(view);
        inner.timestamps.insert(key, stamps);
    }

    /// Forgets a block whose file was replaced or removed.
    pub fn evict(&self, key: BlockKey) {
        let mut inner = self.lock();
        inner.blocks.remove(&key);
        inner.timestamps.remove(&key);
    }
}

fn timestamps_of(block: &SealedBlock) -> Arc<[u64]> {
    block.records().iter().map(|r| r.meta.timestamp).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_evicts_the_least_recently_used_in_batches() {
        let mut lru: Lru<u64, u64> = Lru::new(16);
        for k in 0..16 {
            lru.insert(k, k);
        }
        // Touch the first half: the second half is now the oldest.
        for k in 0..8 {
            assert_eq!(lru.get(&k), Some(k));
        }
        lru.insert(100, 100);
        assert!(lru.items.len() <= 16);
        assert_eq!(lru.get(&100), Some(100));
        for k in 0..8 {
            assert_eq!(lru.get(&k), Some(k), "recently used {k} was kept");
        }
        assert!(lru.get(&8).is_none(), "the oldest went first");
        lru.remove(&100);
        assert!(lru.get(&100).is_none());
    }
}
