//! `when` evaluation speed over the flights fixture (records/s), so later changes can see a
//! regression. Run: `cargo bench --bench condition`

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use halflife::fixtures;
use halflife::storage::RecordMeta;
use halflife::storage::condition::{Condition, Verdict};

fn benches(c: &mut Criterion) {
    let records: Vec<RecordMeta> = fixtures::flights(&fixtures::fixtures_dir(), None)
        .expect("flights fixture")
        .into_iter()
        .map(|r| RecordMeta {
            timestamp: r.timestamp,
            labels: r.labels,
            content_type: r.content_type,
            size: r.payload.len() as u64,
        })
        .collect();
    eprintln!(
        "condition bench: {} flight records (labels carrier, origin)",
        records.len()
    );
    let conditions = [
        ("eq", r#"{"&carrier": {"$eq": "UA"}}"#),
        (
            "in_and_ne",
            r#"{"$in": ["&carrier", "UA", "AA", "DL"], "&origin": {"$ne": "LGA"}}"#,
        ),
        (
            "timestamp_range",
            r#"{"$gte": ["$timestamp", 1360000000000000], "$lt": ["$timestamp", "15900d"]}"#,
        ),
        (
            "arithmetic_and_dates",
            r#"{"$eq": [{"$rem": [{"$hour": ["$timestamp", "America/New_York"]}, 2]}, 0], "$gt": [{"$add": [{"$cast": ["&carrier", "string"]}, "x"]}, "A"]}"#,
        ),
        ("each_n", r#"{"&origin": {"$eq": "EWR"}, "$each_n": 10}"#),
        (
            "nested_or",
            r#"{"$or": [{"$and": [{"&carrier": {"$starts_with": "U"}}, {"&origin": {"$eq": "EWR"}}]}, {"$not": [{"$exists": "carrier"}]}]}"#,
        ),
    ];
    let mut group = c.benchmark_group("condition");
    group.throughput(Throughput::Elements(records.len() as u64));
    for (name, text) in conditions {
        let condition = Condition::parse_str(text, false).expect("condition parses");
        group.bench_function(name, |b| {
            b.iter(|| {
                let mut matcher = condition.matcher();
                let mut matched = 0usize;
                for r in &records {
                    matched +=
                        usize::from(matcher.evaluate(r).expect("evaluates") == Verdict::Match);
                }
                matched
            })
        });
    }
    group.finish();
}

criterion_group!(condition, benches);
criterion_main!(condition);
