//! Work over a list spread on a few scoped threads, for what is mostly waiting (fsyncs,
//! reads of small files): opening the entries of a bucket, sealing the stale logs of a
//! compress run's entries.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Calls `work` on every item of `items` from up to `threads` threads, the calling thread
/// one of them; each thread takes the next item as it frees up. Returns when all are done.
pub(crate) fn for_each_on_threads<T: Sync>(items: &[T], threads: usize, work: impl Fn(&T) + Sync) {
    let next = AtomicUsize::new(0);
    let run = || {
        while let Some(item) = items.get(next.fetch_add(1, Ordering::Relaxed)) {
            work(item);
        }
    };
    std::thread::scope(|scope| {
        for _ in 1..threads.min(items.len()) {
            scope.spawn(run);
        }
        run();
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn every_item_is_worked_on_once() {
        let items: Vec<u64> = (0..100).collect();
        let seen = Mutex::new(Vec::new());
        for_each_on_threads(&items, 4, |&i| seen.lock().expect("not poisoned").push(i));
        let mut seen = seen.into_inner().expect("not poisoned");
        seen.sort();
        assert_eq!(seen, items);
        for_each_on_threads(&[] as &[u64], 4, |_| panic!("no items"));
    }
}
