//! Evaluating a parsed condition allocates nothing: a counting allocator watches the
//! evaluation of every operator kind over a record.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use halflife::storage::RecordMeta;
use halflife::storage::condition::{Condition, Verdict};

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
    // Every operator family, in the forms 1.21.5 accepts; a missing label (rejecting the
    // record) must not allocate either, nor must text made from numbers.
    let condition = Condition::parse_str(
        r#"{
            "$in": ["&carrier", "UA", "AA"],
            "$nin": ["&origin", "LGA", "JFK"],
            "&origin": {"$starts_with": "E"},
            "$or": [{"&delay": {"$gt": 10}}, {"&ratio": {"$lt": 0.1}}],
            "$one_of": [{"$lt": ["$timestamp", "20000d"]}, {"&carrier": {"$contains": "Q"}}],
            "$exists": ["carrier", "origin"],
            "$and": [{"$eq": [{"$rem": ["&delay", 5]}, 2]}, {"$gt": [{"$div": ["&delay", 4]}, 2.5]}],
            "$gte": [{"$abs": [{"$sub": ["&delay", 100]}]}, {"$mult": ["&ratio", 2]}],
            "$ends_with": [{"$cast": ["&delay", "string"]}, "2"],
            "$eq": [{"$hour": ["$timestamp", "Europe/Berlin"]}, 23],
            "$ne": [{"$weekday": "$timestamp"}, 9],
            "$lte": [{"$ref": "delay"}, 12],
            "$each_n": 1,
            "$each_t": 0,
            "$limit": 1000000,
            "$gate": ["1000d", true]
        }"#,
        false,
    )
    .unwrap();
    let missing = Condition::parse_str(r#"{"&missing": {"$eq": 1}}"#, false).unwrap();
    let mut matcher = condition.matcher();
    let mut missing_matcher = missing.matcher();
    assert_eq!(matcher.evaluate(&meta).unwrap(), Verdict::Match);
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let mut matched = 0;
    for _ in 0..1000 {
        matched += usize::from(matcher.evaluate(&meta).unwrap() == Verdict::Match);
        matched += usize::from(missing_matcher.evaluate(&meta).unwrap() == Verdict::Match);
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
