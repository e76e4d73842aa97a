//! State split into shards, one picked per thread, so handler threads counting requests
//! do not queue on one lock (with more busy threads than cores, a thread preempted while
//! holding a shared lock stalls every other one); the writer visits them all.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Shards of each [`Sharded`]: more than the handler threads usually are.
const SHARDS: usize = 16;

static NEXT_THREAD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// The calling thread's shard index, assigned round-robin on first use.
    static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}

fn shard_of_thread() -> usize {
    SHARD.with(|shard| {
        if shard.get() == usize::MAX {
            shard.set(NEXT_THREAD.fetch_add(1, Ordering::Relaxed) % SHARDS);
        }
        shard.get()
    })
}

/// A `T` per shard.
pub struct Sharded<T> {
    shards: Vec<Mutex<T>>,
}

impl<T: Default> Default for Sharded<T> {
    fn default() -> Self {
        Sharded {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl<T> Sharded<T> {
    /// The calling thread's shard.
    pub fn mine(&self) -> MutexGuard<'_, T> {
        lock(&self.shards[shard_of_thread()])
    }

    /// Visits every shard in turn.
    pub fn each(&self, mut visit: impl FnMut(&mut T)) {
        for shard in &self.shards {
            visit(&mut lock(shard));
        }
    }
}
