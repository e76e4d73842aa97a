//! Table-driven tests of every operator in both notations.

use serde_json::json;

use super::*;
use crate::error::ErrorKind;
use crate::storage::record::Labels;

fn record(ts: u64, labels: &[(&str, &str)]) -> RecordMeta {
    RecordMeta {
        timestamp: ts,
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<Labels>(),
        content_type: "application/json".into(),
        size: 0,
    }
}

fn check(when: serde_json::Value, meta: &RecordMeta, want: bool) {
    let cond = Condition::parse(&when, false).unwrap_or_else(|e| panic!("{when}: {e}"));
    assert_eq!(
        cond.evaluate(meta).unwrap(),
        want,
        "{when} on {:?}",
        meta.labels
    );
}

#[test]
fn every_operator_in_both_notations() {
    let r = record(
        1_700_000_000_000_000,
        &[
            ("n", "10"),
            ("f", "2.5"),
            ("s", "EWR-JFK"),
            ("b", "true"),
            ("nine", "9"),
        ],
    );
    let cases = [
        (json!({"&n": {"$eq": 10}}), true),
        (json!({"$eq": ["&n", 10]}), true),
        (json!({"&n": {"$eq": "10"}}), true),
        (json!({"&n": {"$ne": 10}}), false),
        (json!({"$ne": ["&n", 11]}), true),
        (json!({"&n": {"$gt": 9}}), true),
        (json!({"$gt": ["&n", "&nine"]}), true),
        (json!({"&nine": {"$lt": "10"}}), true),
        (json!({"&n": {"$gte": 10}}), true),
        (json!({"$gte": ["&n", 11]}), false),
        (json!({"&n": {"$lt": 10.5}}), true),
        (json!({"&n": {"$lte": 10}}), true),
        (json!({"$lte": ["&f", 2]}), false),
        (json!({"&f": {"$gt": 2}}), true),
        (json!({"&b": {"$eq": true}}), true),
        (json!({"&n": {"$in": [1, 10, 100]}}), true),
        (json!({"$in": ["&n", 1, 2]}), false),
        (json!({"$in": ["&s", ["EWR-JFK", "LGA"]]}), true),
        (json!({"&n": {"$nin": [1, 2]}}), true),
        (json!({"$nin": ["&n", 10]}), false),
        (json!({"&s": {"$contains": "-J"}}), true),
        (json!({"$contains": ["&s", "LGA"]}), false),
        (json!({"&s": {"$starts_with": "EWR"}}), true),
        (json!({"$starts_with": ["&s", "JFK"]}), false),
        (json!({"&s": {"$ends_with": "JFK"}}), true),
        (json!({"$ends_with": ["&s", "EWR"]}), false),
        (json!({"&s": {"$exists": true}}), true),
        (json!({"&zzz": {"$exists": false}}), true),
        (json!({"&zzz": {"$has": true}}), false),
        (json!({"$exists": ["&s", "&n"]}), true),
        (json!({"$has": ["&s", "&zzz"]}), false),
        (
            json!({"$and": [{"&n": {"$eq": 10}}, {"&s": {"$eq": "EWR-JFK"}}]}),
            true,
        ),
        (
            json!({"$all_of": [{"&n": {"$eq": 10}}, {"&s": {"$eq": "x"}}]}),
            false,
        ),
        (
            json!({"$or": [{"&n": {"$eq": 1}}, {"&s": {"$eq": "EWR-JFK"}}]}),
            true,
        ),
        (
            json!({"$any_of": [{"&n": {"$eq": 1}}, {"&s": {"$eq": "x"}}]}),
            false,
        ),
        (json!({"$not": [{"&n": {"$eq": 1}}]}), true),
        (json!({"$not": {"&n": {"$eq": 10}}}), false),
        (
            json!({"$none_of": [{"&n": {"$eq": 1}}, {"&n": {"$eq": 2}}]}),
            true,
        ),
        (
            json!({"$xor": [{"&n": {"$eq": 10}}, {"&f": {"$eq": 2.5}}]}),
            false,
        ),
        (
            json!({"$one_of": [{"&n": {"$eq": 10}}, {"&f": {"$eq": 3}}]}),
            true,
        ),
        (
            json!({"$lt": ["$timestamp", 1_700_000_000_000_001u64]}),
            true,
        ),
        (
            json!({"$timestamp": {"$gte": 1_700_000_000_000_000u64}}),
            true,
        ),
        (json!({"$gt": ["$timestamp", "&n"]}), true),
        // Durations compare as microseconds.
        (json!({"$lt": ["$timestamp", "20000d"]}), true),
        (json!({"$gt": ["$timestamp", "19000d"]}), true),
        // Several top-level keys are ANDed; ranges on one label.
        (
            json!({"&n": {"$gt": 5, "$lt": 20}, "&s": {"$starts_with": "EWR"}}),
            true,
        ),
        (json!({"&n": {"$gt": 5, "$lt": 8}}), false),
        // Nesting to any depth.
        (
            json!({"$or": [{"$and": [{"&n": {"$eq": 1}}]}, {"$not": [{"$or": [{"&b": {"$eq": false}}]}]}]}),
            true,
        ),
        // `$$` escapes a literal that starts with `$`.
        (json!({"$eq": ["$$timestamp", "$$timestamp"]}), true),
    ];
    for (when, want) in cases {
        check(when, &r, want);
    }
}

#[test]
fn type_coercion_orders_numbers_not_text() {
    let r = record(1, &[("a", "9"), ("b", "10"), ("c", "abc"), ("d", "1e3")]);
    check(json!({"$lt": ["&a", "&b"]}), &r, true);
    check(json!({"&c": {"$gt": "abb"}}), &r, true);
    check(json!({"&c": {"$eq": 1}}), &r, false);
    check(json!({"&c": {"$ne": 1}}), &r, true);
    check(json!({"&d": {"$eq": 1000}}), &r, true);
}

#[test]
fn missing_labels_do_not_match_or_fail_when_strict() {
    let r = record(1, &[("a", "1")]);
    for when in [
        json!({"&missing": {"$eq": 1}}),
        json!({"&missing": {"$ne": 1}}),
        json!({"&missing": {"$in": [1]}}),
        json!({"&missing": {"$contains": "x"}}),
    ] {
        check(when.clone(), &r, false);
        let strict = Condition::parse(&when, true).unwrap();
        let err = strict.evaluate(&r).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotFound);
        assert_eq!(err.message(), "Reference 'missing' not found");
    }
    // $exists never fails on a missing label, strict or not.
    let strict = Condition::parse(&json!({"&missing": {"$exists": false}}), true).unwrap();
    assert!(strict.evaluate(&r).unwrap());
}

#[test]
fn rejected_conditions_name_the_operator() {
    let cases = [
        (json!({"$each_n": 2}), "Aggregation operator '$each_n'"),
        (json!({"$limit": 10}), "Aggregation operator '$limit'"),
        (
            json!({"&a": {"$each_t": "1s"}}),
            "Aggregation operator '$each_t'",
        ),
        (json!({"$gate": [true]}), "Aggregation operator '$gate'"),
        (json!({"$foo": ["&a", 1]}), "Unknown operator '$foo'"),
        (json!({"&a": {"$bar": 1}}), "Unknown operator '$bar'"),
        (json!({"$add": ["&a", 1]}), "Unknown operator '$add'"),
        (json!({"#ctx_before": "1s"}), "Directive '#ctx_before'"),
        (json!({"#ext": {}}), "Directive '#ext'"),
        (
            json!({"@computed": {"$eq": 1}}),
            "Computed label '@computed'",
        ),
        (json!({"$eq": ["@x", 1]}), "Computed label '@x'"),
        (json!({"$gt": ["&a"]}), "'$gt' needs 2 operands, got 1"),
        (
            json!({"$eq": ["&a", 1, 2]}),
            "'$eq' needs 2 operands, got 3",
        ),
        (
            json!({"label": {"$eq": 1}}),
            "'label' is neither a label reference",
        ),
        (json!({"&a": 1}), "'&a' must map to an object"),
        (
            json!({"&a": {"$and": [1]}}),
            "Logical operator '$and' cannot apply",
        ),
        (json!({"$and": [1]}), "'$and' expects conditions"),
        (json!({"$and": []}), "'$and' needs at least one operand"),
        (json!({"$eq": ["&a", null]}), "null is not a valid operand"),
        (
            json!({"$eq": ["&a", "$gt"]}),
            "Operator '$gt' cannot be used as an operand",
        ),
        (json!({"$eq": ["&a", "$nope"]}), "Unknown operator '$nope'"),
        (
            json!({"$contains": ["&a", 5]}),
            "'$contains' expects text operands",
        ),
        (json!({"&a": {"$in": 5}}), "'$in' on '&a' expects an array"),
        (json!({"&a": {"$exists": 1}}), "expects true or false"),
        (json!([1, 2]), "must be a JSON object"),
        (
            json!({"$eq": ["&a", 18446744073709551615u64]}),
            "out of range",
        ),
    ];
    for (when, want) in cases {
        let err = Condition::parse(&when, false).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unprocessable, "{when}");
        assert!(
            err.message().contains(want),
            "{when}: got '{err}', want '{want}'"
        );
    }
    assert!(
        Condition::parse_str("{not json", false)
            .unwrap_err()
            .message()
            .contains("Invalid JSON")
    );
}

#[test]
fn oversized_and_overdeep_conditions_are_refused() {
    let terms: Vec<serde_json::Value> = (0..20_000)
        .map(|i| serde_json::json!({"&a": {"$gt": i}}))
        .collect();
    let wide = serde_json::json!({ "$and": terms });
    let e = Condition::parse(&wide, false).unwrap_err();
    assert_eq!(e.kind(), crate::ErrorKind::Unprocessable);
    assert!(e.message().contains("10000 terms"), "{e}");
    let mut deep = serde_json::json!({"&a": {"$eq": 1}});
    for _ in 0..100 {
        deep = serde_json::json!({ "$not": [deep] });
    }
    let e = Condition::parse(&deep, false).unwrap_err();
    assert!(e.message().contains("deeper than 64"), "{e}");
    // A condition of ordinary size still parses.
    let fine: Vec<serde_json::Value> = (0..100)
        .map(|i| serde_json::json!({"&a": {"$ne": i}}))
        .collect();
    assert!(Condition::parse(&serde_json::json!({ "$and": fine }), false).is_ok());
}
