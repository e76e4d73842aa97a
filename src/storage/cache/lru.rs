//! The least-recently-used map the store's caches are made of.

use std::collections::HashMap;
use std::hash::Hash;

/// A least-recently-used map bounded by a total cost (a count when every item costs 1,
/// bytes otherwise) and a number of items; eviction drops the oldest eighth at once, so an
/// insert into a full map costs O(1) amortized instead of a scan per insert.
pub(super) struct Lru<K, V> {
    pub(super) budget: usize,
    pub(super) max_items: usize,
    pub(super) used: usize,
    tick: u64,
    pub(super) items: HashMap<K, (V, u64, usize)>,
    /// The cost of the last item offered, kept or not.
    last_offered: usize,
}

impl<K: Hash + Eq + Copy, V: Clone> Lru<K, V> {
    pub(super) fn new(budget: usize) -> Self {
        Self::with_max_items(budget, usize::MAX)
    }

    pub(super) fn with_max_items(budget: usize, max_items: usize) -> Self {
        Lru {
            budget,
            max_items: max_items.max(1),
            used: 0,
            tick: 0,
            items: HashMap::new(),
            last_offered: 0,
        }
    }

    pub(super) fn get(&mut self, key: &K) -> Option<V> {
        self.tick += 1;
        let tick = self.tick;
        self.items.get_mut(key).map(|(v, used, _)| {
            *used = tick;
            v.clone()
        })
    }

    /// Keeps `value` at `cost`; an item that alone exceeds the budget is not kept.
    pub(super) fn insert(&mut self, key: K, value: V, cost: usize) {
        self.last_offered = cost;
        self.remove(&key);
        if cost > self.budget {
            return;
        }
        while (self.used + cost > self.budget || self.items.len() >= self.max_items)
            && !self.items.is_empty()
        {
            let mut ticks: Vec<u64> = self.items.values().map(|(_, t, _)| *t).collect();
            let drop = (ticks.len() / 8).min(ticks.len() - 1);
            let (_, cutoff, _) = ticks.select_nth_unstable(drop);
            let cutoff = *cutoff;
            let mut freed = 0;
            self.items.retain(|_, (_, t, c)| {
                let keep = *t > cutoff;
                if !keep {
                    freed += *c;
                }
                keep
            });
            self.used -= freed;
        }
        self.tick += 1;
        self.used += cost;
        self.items.insert(key, (value, self.tick, cost));
    }

    /// Whether keeping one more item of the usual cost (the average of those held, or
    /// else the last one offered) would not be kept at all, or would evict others: that is
    /// reaching within an eighth of the budget, since an eviction frees an eighth at once
    /// and the map is as full as it gets just after one.
    pub(super) fn is_full(&self) -> bool {
        let usual = match self.items.len() {
            0 => self.last_offered,
            n => self.used / n,
        };
        usual > 0 && self.used + usual > self.budget - self.budget / 8
    }

    pub(super) fn remove(&mut self, key: &K) -> Option<V> {
        let (value, _, cost) = self.items.remove(key)?;
        self.used -= cost;
        Some(value)
    }

    /// Changes the item at `key` in place: `change` gets it and its cost and answers its
    /// new cost, or `None` to drop it. Its recency is kept: an edit is not a read.
    pub(super) fn update(&mut self, key: &K, change: impl FnOnce(&mut V, usize) -> Option<usize>) {
        let Some((value, _, cost)) = self.items.get_mut(key) else {
            return;
        };
        let old = *cost;
        match change(value, old) {
            Some(new) => {
                *cost = new;
                self.used = self.used - old + new;
            }
            None => {
                self.remove(key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_evicts_the_least_recently_used_in_batches() {
        let mut lru: Lru<u64, u64> = Lru::new(16);
        for k in 0..16 {
            lru.insert(k, k, 1);
        }
        // Touch the first half: the second half is now the oldest.
        for k in 0..8 {
            assert_eq!(lru.get(&k), Some(k));
        }
        lru.insert(100, 100, 1);
        assert!(lru.items.len() <= 16);
        assert_eq!(lru.get(&100), Some(100));
        for k in 0..8 {
            assert_eq!(lru.get(&k), Some(k), "recently used {k} was kept");
        }
        assert!(lru.get(&8).is_none(), "the oldest went first");
        lru.remove(&100);
        assert!(lru.get(&100).is_none());
    }

    #[test]
    fn lru_keeps_within_its_item_count_and_bytes_both() {
        let mut lru: Lru<u64, u64> = Lru::with_max_items(1000, 4);
        for k in 0..10 {
            lru.insert(k, k, 10);
            assert!(lru.items.len() <= 4, "{} items", lru.items.len());
        }
        assert!(lru.get(&9).is_some(), "the newest is kept");
        for k in 10..20 {
            lru.insert(k, k, 400);
            assert!(lru.used <= 1000 && lru.items.len() <= 4);
        }
        assert!(lru.get(&19).is_some());
    }

    #[test]
    fn lru_is_full_when_one_more_usual_item_would_evict() {
        let mut lru: Lru<u64, u64> = Lru::new(1000);
        assert!(!lru.is_full(), "empty, nothing offered yet");
        for k in 0..7 {
            lru.insert(k, k, 100);
            assert!(!lru.is_full(), "{} of 1000 held", lru.used);
        }
        lru.insert(7, 7, 100);
        assert!(
            lru.is_full(),
            "800 of 1000 held: one more passes seven eighths"
        );
        // Just after an eviction it is still full.
        for k in 8..20 {
            lru.insert(k, k, 100);
            assert!(lru.is_full(), "{} of 1000 held", lru.used);
        }
        // A budget no item fits into is full though empty.
        let mut tiny: Lru<u64, u64> = Lru::new(10);
        tiny.insert(1, 1, 100);
        assert!(tiny.items.is_empty() && tiny.is_full());
    }

    #[test]
    fn an_item_changed_in_place_keeps_its_recency_and_the_total_right() {
        let mut lru: Lru<u64, u64> = Lru::new(1000);
        lru.insert(1, 1, 100);
        lru.insert(2, 2, 100);
        lru.update(&1, |v, cost| {
            *v = 10;
            Some(cost + 50)
        });
        assert_eq!((lru.get(&1), lru.used), (Some(10), 250));
        lru.update(&2, |_, _| None);
        assert_eq!((lru.get(&2), lru.used), (None, 150));
        lru.update(&3, |_, _| Some(1));
        assert_eq!(lru.used, 150, "an absent item changes nothing");
    }

    #[test]
    fn lru_keeps_within_its_byte_budget() {
        let mut lru: Lru<u64, u64> = Lru::new(1000);
        for k in 0..100 {
            lru.insert(k, k, 90);
            assert!(lru.used <= 1000, "{} bytes held", lru.used);
        }
        assert_eq!(
            lru.used,
            lru.items.values().map(|(_, _, c)| c).sum::<usize>()
        );
        assert!(lru.get(&99).is_some(), "the newest is kept");
        // Replacing an item counts it once; one larger than the budget is not kept.
        lru.insert(99, 0, 10);
        assert_eq!(
            lru.used,
            lru.items.values().map(|(_, _, c)| c).sum::<usize>()
        );
        lru.insert(7, 7, 1001);
        assert!(lru.get(&7).is_none());
        assert!(lru.used <= 1000);
    }
}
