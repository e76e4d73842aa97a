//! Evaluating a parsed condition allocates nothing: a counting allocator watches the
//! evaluation of every operator kind over a record.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use halflife::storage::RecordMeta;
use halflife::storage::condition::Condition;

struct Counting;
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn evaluation_allocates_nothing() {
    let meta = RecordMeta {
        timestamp: 1_700_000_000_000_000,
        labels: [
            ("carrier", "UA"),
            ("origin", "EWR"),
            ("delay", "12"),
            ("ratio", "0.5"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
        content_type: "application/json".into(),
        size: 10,
    };
    let condition = Condition::parse_str(
        r#"{
            "&carrier": {"$in": ["UA", "AA"]},
            "&origin": {"$ne": "LGA", "$starts_with": "E"},
            "$or": [{"&delay": {"$gt": "10"}}, {"&ratio": {"$lt": 0.1}}],
            "$not": [{"&missing": {"$eq": 1}}],
            "$one_of": [{"$lt": ["$timestamp", "20000d"]}, {"&carrier": {"$contains": "Q"}}],
            "$exists": ["&carrier", "&origin"]
        }"#,
        false,
    )
    .unwrap();
    assert!(condition.evaluate(&meta).unwrap());
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let mut matched = 0;
    for _ in 0..1000 {
        matched += usize::from(condition.evaluate(&meta).unwrap());
    }
    let after = ALLOCATIONS.load(Ordering::Relaxed);
    assert_eq!(matched, 1000);
    assert_eq!(
        after - before,
        0,
        "evaluation allocated {} times",
        after - before
    );
}
