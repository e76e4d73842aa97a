//! Conformance of the condition language with ReductStore 1.21.5: one case per rule and
//! per example of its conditional-query reference, on the six records its examples use.

use serde_json::{Value as Json, json};

use super::*;
use crate::storage::record::Labels;

/// The six records of section 13 (entry `a`).
fn records() -> Vec<RecordMeta> {
    crate::fixtures::CONDITION_REFERENCE_RECORDS
        .iter()
        .map(|(ts, labels)| RecordMeta {
            timestamp: *ts,
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<Labels>(),
            content_type: "text/plain".into(),
            size: 1,
        })
        .collect()
}

/// Records 1-based as the reference names them, or the error (status, message).
fn run_on(
    when: &Json,
    strict: bool,
    data: &[RecordMeta],
) -> std::result::Result<Vec<usize>, (u16, String)> {
    let condition = Condition::parse(when, strict)
        .map_err(|e| (e.kind().http_status(), e.message().to_string()))?;
    let mut matcher = condition.matcher();
    let mut out = Vec::new();
    for (i, meta) in data.iter().enumerate() {
        match matcher.evaluate(meta) {
            Ok(Verdict::Match) => out.push(i + 1),
            Ok(Verdict::Skip) => {}
            Ok(Verdict::Stop) => break,
            Err(e) => return Err((e.kind().http_status(), e.message().to_string())),
        }
    }
    Ok(out)
}

fn run(when: &Json, strict: bool) -> std::result::Result<Vec<usize>, (u16, String)> {
    run_on(when, strict, &records())
}

/// `[r…]` for non-strict results.
fn selects(cases: &[(Json, &[usize])]) {
    for (when, want) in cases {
        assert_eq!(run(when, false), Ok(want.to_vec()), "{when}");
    }
}

/// 422 (or `status`) with this message at parse time or, strict, at evaluation.
fn refuses(cases: &[(Json, u16, &str)]) {
    for (when, status, message) in cases {
        assert_eq!(
            run(when, true),
            Err((*status, message.to_string())),
            "{when}"
        );
    }
}

const ALL: &[usize] = &[1, 2, 3, 4, 5, 6];

#[test]
fn document_structure() {
    selects(&[
        (json!({}), ALL),
        (json!(null), ALL),
        (json!(true), ALL),
        (json!(false), &[]),
        (json!(0), &[]),
        (json!("hello"), ALL),
        (json!("&flag"), &[1, 4, 5]),
        (json!({"&n": {"$gt": 2}, "&flag": {"$eq": true}}), &[4, 5]),
        (json!({"&flag": {"$and": true}}), &[1, 4, 5]),
        (json!({"&flag": {"$not": true}}), &[]),
        (json!({"&n": {"$xor": true}}), &[]),
        (json!({"&n": {"$eq": {"$add": [1, 2]}}}), &[3]),
        (json!({"$timestamp": {"$lt": 1704153600000000u64}}), &[1, 2]),
        (json!({"$timestamp": []}), ALL),
    ]);
    refuses(&[
        (json!([]), 422, "Array type is not supported: []"),
        (
            json!({"&n": {"$gt": 1, "$lt": 4}}),
            422,
            "Object notation must have exactly one operator",
        ),
        (
            json!({"&n": {}}),
            422,
            "Object notation must have exactly one operator",
        ),
        (json!({"&n": null}), 422, "Null type is not supported: null"),
        (
            json!({"$eq": ["&n", null]}),
            422,
            "Null type is not supported: null",
        ),
        (json!({"&n": 5}), 422, "Operator '&n' must start with '$'"),
        (
            json!({"and": [true]}),
            422,
            "Operator 'and' must start with '$'",
        ),
        (
            json!({"&n": {"eq": 1}}),
            422,
            "Operator 'eq' must start with '$'",
        ),
        (
            json!({"$not": [{"#ctx_before": 1}]}),
            422,
            "Operator '#ctx_before' must start with '$'",
        ),
        (json!({"$xx": 1}), 422, "Operator '$xx' not supported"),
        (json!({"$": [1]}), 422, "Operator '$' not supported"),
        (
            json!({"&n": {"$xx": 1}}),
            422,
            "Operator '$xx' not supported",
        ),
        (
            json!({"$xx": {"$eq": 1}}),
            422,
            "Unknown '$' literal '$xx'; use '$$' to escape a string value",
        ),
        (
            json!({"$ref": {"$cast": ["&n", "int"]}}),
            422,
            "Unknown '$' literal '$ref'; use '$$' to escape a string value",
        ),
        (
            json!({"&n": {"$eq": {"$add": [1, 2], "$sub": [5, 1]}}}),
            422,
            "$eq requires exactly two operands",
        ),
        (
            json!({"&n": {"$in": [1, 3]}}),
            422,
            "Array type is not supported: [1,3]",
        ),
        (
            json!({"$in": ["&n", [1, 2]]}),
            422,
            "Array type is not supported: [1,2]",
        ),
        (
            json!({"$xx": 1, "#foo": 1}),
            422,
            "Directive '#foo' is not supported",
        ),
    ]);
}

#[test]
fn string_literals_are_never_numbers() {
    selects(&[
        (json!({"&s": {"$eq": 10}}), &[2]),
        (json!({"&s": {"$eq": "10"}}), &[]),
        (json!({"&s": {"$eq": "$$dollar"}}), &[6]),
        (json!({"&s": {"$eq": "1h"}}), &[]),
        (json!({"$eq": ["$and", true]}), ALL),
        (json!({"$eq": ["m90", "1h 30m"]}), ALL),
        (json!({"$eq": ["2.5m", "2.5m"]}), ALL),
        (json!({"$eq": ["1h", 3600000000u64]}), ALL),
        (json!({"&n": {"$gt": "2"}}), &[]),
        (json!({"&n": {"$gt": "5"}}), &[]),
        (json!({"&flag": {"$eq": 1}}), &[1, 4, 5]),
        (json!({"&s": {"$gt": "a"}}), &[1, 5]),
        (json!({"&s": {"$ne": "nan"}}), ALL),
        (json!({"$eq": [{"$cast": ["10us", "string"]}, "10us"]}), &[]),
        (
            json!({"$ends_with": [{"$cast": ["10us", "string"]}, "us"]}),
            ALL,
        ),
    ]);
    refuses(&[
        (
            json!({"&s": {"$eq": "$dollar"}}),
            422,
            "Unknown '$' literal '$dollar'; use '$$' to escape a string value",
        ),
        (
            json!({"$eq": ["$limit", 1]}),
            422,
            "Unknown '$' literal '$limit'; use '$$' to escape a string value",
        ),
        (
            json!({"&n": {"$lt": 18446744073709551615u64}}),
            422,
            "Integer 18446744073709551615 is out of range: integers in a condition must fit a signed 64-bit integer (at most 9223372036854775807)",
        ),
    ]);
}

#[test]
fn errors_reject_the_whole_record() {
    selects(&[
        (json!({"$not": [{"&flag": {"$eq": true}}]}), &[2, 6]),
        (
            json!({"$or": [{"&flag": {"$eq": true}}, {"&n": {"$eq": 3}}]}),
            &[1, 4, 5],
        ),
        (
            json!({"$or": [{"&n": {"$eq": 3}}, {"&flag": {"$eq": true}}]}),
            &[1, 3, 4, 5],
        ),
        (json!({"$and": ["&flag", "&opt"]}), &[4]),
        (
            json!({"$xor": [{"&n": {"$lt": 3}}, {"&flag": {"$eq": true}}]}),
            &[2, 4, 5],
        ),
        (json!({"$or": [true, {"&opt": {"$eq": "x"}}]}), ALL),
        (json!({"@x": {"$eq": 1}}), &[]),
    ]);
    assert_eq!(
        run(&json!({"$or": [true, {"&opt": {"$eq": "x"}}]}), true),
        Ok(ALL.to_vec())
    );
    refuses(&[
        (
            json!({"&opt": {"$eq": "x"}}),
            404,
            "Reference 'opt' not found",
        ),
        (json!({"@x": {"$eq": 1}}), 404, "Reference '@x' not found"),
        (
            json!({"$eq": [{"$ref": "opt"}, "x"]}),
            404,
            "Label '\"opt\"' not found",
        ),
    ]);
}

#[test]
fn membership_existence_and_strings() {
    selects(&[
        (json!({"$in": ["&n", 1, 3, "5"]}), &[1, 3]),
        (json!({"$nin": ["&s", "alpha", "10"]}), &[2, 3, 4, 5, 6]),
        (json!({"&n": {"$in": 3}}), &[3]),
        (json!({"$in": [{"$rem": ["&n", 10]}, 1, 3]}), &[1, 3]),
        (json!({"$exists": ["opt"]}), &[4, 6]),
        (json!({"$has": ["opt", "flag"]}), &[4, 6]),
        (json!({"$exists": "opt"}), &[4, 6]),
        (json!({"$exists": ["&opt"]}), &[]),
        (json!({"&opt": {"$exists": true}}), &[]),
        (json!({"$not": [{"$has": "opt"}]}), &[1, 2, 3, 5]),
        (json!({"&s": {"$contains": ","}}), &[5]),
        (json!({"&s": {"$starts_with": "1"}}), &[2, 3]),
        (json!({"$contains": ["&n", 1]}), &[1]),
        (json!({"&flag": {"$ends_with": "ue"}}), &[1, 4, 5]),
        (json!({"$starts_with": ["$timestamp", "17040"]}), &[1, 2]),
    ]);
    refuses(&[
        (
            json!({"$in": ["&n"]}),
            422,
            "$in operator requires at least two operands",
        ),
        (
            json!({"$nin": ["&n"]}),
            422,
            "$nin operator requires at least two operands",
        ),
        (
            json!({"$has": []}),
            422,
            "$exists requires at least one operand",
        ),
        (
            json!({"$gt": "&n"}),
            422,
            "$gt requires exactly two operands",
        ),
        (
            json!({"$contains": ["&s"]}),
            422,
            "$contains requires exactly two operands",
        ),
        (
            json!({"$timestamp": [1]}),
            422,
            "$timestamp requires no operands",
        ),
        (json!({"$id": [1]}), 422, "$timestamp requires no operands"),
    ]);
}

#[test]
fn arithmetic() {
    selects(&[
        (json!({"$eq": [{"$add": ["&n", 10]}, 13]}), &[3]),
        (json!({"$eq": [{"$add": ["&s", "!"]}, "alpha!"]}), &[1]),
        (json!({"$gt": [{"$div": ["&n", 4]}, 1]}), &[5, 6]),
        (json!({"$eq": [{"$div_num": ["&n", 4]}, 1]}), &[4, 5, 6]),
        (json!({"$eq": [{"$rem": ["&n", 4]}, 1]}), &[1, 5]),
        (json!({"$eq": [{"$mult": ["&n", "1h"]}, "2h"]}), &[2]),
        (
            json!({"$eq": [{"$abs": [{"$sub": ["&n", 4]}]}, 1]}),
            &[3, 5],
        ),
        (json!({"$div": ["&n", 0]}), &[]),
        (
            json!({"$eq": [{"$sub": ["$timestamp", 1704067200000000u64]}, "1d"]}),
            &[3],
        ),
        (json!({"$eq": [{"$mult": []}, 0]}), ALL),
        (json!({"$eq": ["$add", 0]}), ALL),
        (json!({"$eq": [{"$add": ["x"]}, "x"]}), ALL),
        (
            json!({"$lt": [{"$add": [9223372036854775807i64, 1]}, 0]}),
            ALL,
        ),
        (json!({"$rem": ["&n", 0]}), &[]),
    ]);
    refuses(&[
        (json!({"$div": ["&n", 0]}), 422, "Cannot divide by zero"),
        (json!({"$rem": ["&n", 0]}), 422, "Cannot divide by zero"),
        (
            json!({"$sub": [1]}),
            422,
            "$sub requires exactly two operands",
        ),
        (
            json!({"$abs": [1, 2]}),
            422,
            "$abs requires exactly one operand",
        ),
        (
            json!({"$add": ["&s", 1]}),
            422,
            "Cannot add integer to string",
        ),
    ]);
}

#[test]
fn dates_in_zones() {
    selects(&[
        (json!({"$eq": [{"$hour": "$timestamp"}, 0]}), &[1, 3, 5]),
        (
            json!({"$eq": [{"$hour": ["$timestamp", "Europe/Berlin"]}, 1]}),
            &[1, 3, 5],
        ),
        (
            json!({"$eq": [{"$day": ["$timestamp", "America/New_York"]}, 31]}),
            &[1, 2],
        ),
        (
            json!({"$eq": [{"$year": ["$timestamp", "America/New_York"]}, 2023]}),
            &[1, 2],
        ),
        (json!({"$eq": [{"$weekday": "$timestamp"}, 1]}), &[3, 4]),
        (
            json!({"$lt": [{"$minute": "$timestamp"}, 30]}),
            &[1, 3, 4, 5, 6],
        ),
        (json!({"$eq": [{"$hour": ["$timestamp", "utc"]}, 0]}), &[]),
        (json!({"$eq": [{"$month": "$timestamp"}, "1"]}), &[]),
        (json!({"$eq": [{"$month": "$timestamp"}, 1]}), ALL),
    ]);
    refuses(&[
        (
            json!({"$eq": [{"$hour": ["$timestamp", "utc"]}, 0]}),
            422,
            "Invalid timezone: 'utc'",
        ),
        (
            json!({"$hour": ["$timestamp", 5]}),
            422,
            "$hour requires timezone to be a string",
        ),
        (
            json!({"$hour": []}),
            422,
            "$hour requires one or two operands",
        ),
        (
            json!({"$hour": [9223372036854775807i64]}),
            422,
            "$hour requires a valid timestamp in microseconds, got 9223372036854775807",
        ),
        (
            json!({"$hour": ["&s"]}),
            422,
            "Value 'alpha' could not be parsed as integer",
        ),
    ]);
}

#[test]
fn cast_ref_and_timestamps() {
    selects(&[
        (json!({"$eq": [{"$cast": ["&n", "string"]}, "3"]}), &[3]),
        (json!({"$eq": [{"$cast": ["&s", "int"]}, 10]}), &[2]),
        (json!({"$cast": ["&n", "bogus"]}), &[]),
        (json!({"$eq": [{"$ref": "s"}, "alpha"]}), &[1]),
        (
            json!({"$eq": [{"$ref": [{"$cast": ["s", "string"]}]}, "alpha"]}),
            &[1],
        ),
        (json!({"$eq": [{"$cast": [1.9, "duration"]}, 1]}), ALL),
    ]);
    refuses(&[
        (
            json!({"$cast": ["&n", "bogus"]}),
            422,
            "Unknown type 'bogus'",
        ),
        (
            json!({"$cast": ["&n"]}),
            422,
            "$cast requires exactly two operands",
        ),
        (
            json!({"$ref": ["a", "b"]}),
            422,
            "$ref requires exactly one operand",
        ),
    ]);
}

#[test]
fn aggregates() {
    selects(&[
        (json!({"$each_n": 2}), &[2, 4, 6]),
        (json!({"$each_n": 2.9}), &[2, 4, 6]),
        (json!({"$each_n": "5"}), &[5]),
        (json!({"$each_n": -2}), &[2, 4, 6]),
        (json!({"$each_n": "x"}), &[]),
        (json!({"$each_t": "1d"}), &[3, 5, 6]),
        (json!({"$each_t": 0}), ALL),
        (json!({"$each_t": 86400}), &[3, 5, 6]),
        (json!({"$limit": 2}), &[1, 2]),
        (json!({"$limit": "3"}), &[1, 2, 3]),
        (json!({"$limit": 0}), &[]),
        (json!({"$limit": -1}), &[]),
        (json!({"&flag": {"$eq": true}, "$limit": 2}), &[1, 4]),
        (json!({"$limit": 2, "&flag": {"$eq": true}}), &[1]),
        (json!({"$or": [{"$limit": 3}, true]}), &[1, 2, 3]),
        (json!({"$not": [{"$limit": 3}]}), &[]),
        (json!({"$gate": ["2h", true]}), &[1, 2]),
        (json!({"$gate": ["1d", "&flag"]}), &[1]),
    ]);
    assert_eq!(
        run(&json!({"$each_n": 0}), true),
        Err((
            422,
            "Value '0' is not a valid operand for $each_n".to_string()
        ))
    );
    refuses(&[
        (
            json!({"$each_n": [1, 2]}),
            422,
            "$each_n requires exactly one operand",
        ),
        (
            json!({"$limit": []}),
            422,
            "$limit requires exactly one operand",
        ),
        (
            json!({"$gate": ["1h"]}),
            422,
            "$gate requires exactly two operands",
        ),
        (
            json!({"$limit": "x"}),
            422,
            "Value 'x' could not be parsed as integer",
        ),
    ]);
    // A limit ends the query even in strict mode, without an error.
    assert_eq!(run(&json!({"$limit": 1}), true), Ok(vec![1]));
}

#[test]
fn an_aggregate_evaluates_only_when_reached() {
    // `$each_n` counts only the records that get past the filter before it.
    selects(&[(json!({"&flag": {"$eq": true}, "$each_n": 2}), &[4])]);
    // A fresh matcher starts counting again.
    let c = Condition::parse(&json!({"$limit": 1}), false).expect("parses");
    let data = records();
    for _ in 0..2 {
        let mut m = c.matcher();
        assert_eq!(m.evaluate(&data[0]).ok(), Some(Verdict::Match));
        assert_eq!(m.evaluate(&data[1]).ok(), Some(Verdict::Stop));
    }
}

#[test]
fn directive_values_are_checked_apart_from_the_syntax() {
    let c = Condition::parse(&json!({"#ctx_before": -1, "&n": {"$gt": 1}}), false)
        .expect("syntax is fine");
    assert_eq!(
        c.directives().expect_err("value refused").message(),
        "#ctx_before must be non-negative"
    );
    assert!(c.is_stateful());
    let c = Condition::parse(&json!({"$xx": 1, "#ctx_before": -1}), false)
        .expect_err("expression first");
    assert_eq!(c.message(), "Operator '$xx' not supported");
    let c = Condition::parse(
        &json!({"#select_labels": ["n"], "#batch_records": 7}),
        false,
    )
    .expect("parses");
    let d = c.directives().expect("valid");
    assert_eq!(d.select_labels, Some(vec!["n".to_string()]));
    assert_eq!(d.batch.records, Some(7));
    assert!(!c.is_stateful());
    assert!(
        Condition::parse(&json!({"#ext": {"x": {}}}), false)
            .expect("parses")
            .raw_directives()
            .ext()
            .is_some()
    );
}

#[test]
fn keys_are_evaluated_in_document_order() {
    // The reference's example depends on key order: serde_json keeps it.
    let text = r#"{"$limit": 2, "&flag": {"$eq": true}}"#;
    let c = Condition::parse_str(text, false).expect("parses");
    let mut m = c.matcher();
    let picked: Vec<bool> = records()
        .iter()
        .map_while(|r| match m.evaluate(r).expect("evaluates") {
            Verdict::Stop => None,
            v => Some(v == Verdict::Match),
        })
        .collect();
    assert_eq!(picked, [true, false]);
}

#[test]
fn nesting_is_bounded_by_the_json_parser() {
    let mut text = String::from("true");
    // 40 nested `$not` arrays: 80 JSON levels.
    for _ in 0..20 {
        text = format!(r#"{{"$not": [{{"$not": [{text}]}}]}}"#);
    }
    assert!(
        Condition::parse_str(&text, false).is_ok(),
        "80 levels are accepted"
    );
    let mut deep = String::from("true");
    for _ in 0..200 {
        deep = format!("[{deep}]");
    }
    let e = Condition::parse_str(&format!(r#"{{"$and": {deep}}}"#), false).expect_err("too deep");
    assert!(e.message().contains("recursion limit"), "{}", e.message());
}

#[test]
fn computed_labels_resolve_only_for_an_extensions_step() {
    let mut labels = Labels::new();
    labels.insert("@x".into(), "2".into());
    let meta = RecordMeta {
        timestamp: 1,
        labels,
        content_type: "text/plain".into(),
        size: 0,
    };
    let when = json!({"@x": {"$gt": 1}});
    // A query's own condition: `@x` is never found, even on a stored label so named.
    let plain = Condition::parse(&when, true).unwrap();
    let err = plain.evaluate(&meta).unwrap_err();
    assert_eq!(err.message(), "Reference '@x' not found");
    // A step's condition reads the records' computed labels.
    let step = Condition::parse(&when, true).unwrap().resolving_computed();
    assert!(step.evaluate(&meta).unwrap());
    let missing = Condition::parse(&json!({"@y": {"$gt": 1}}), true)
        .unwrap()
        .resolving_computed();
    assert_eq!(
        missing.evaluate(&meta).unwrap_err().message(),
        "Reference '@y' not found"
    );
}
