//! Parsing and validation of lifecycle settings, message by message.

use super::*;
use crate::storage::BucketSettings;
use crate::storage::config::Config;

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(Config::new(dir.path())).unwrap();
    store.create_bucket("b", BucketSettings::default()).unwrap();
    (dir, store)
}

fn settings(json: &str) -> LifecycleSettings {
    LifecycleSettings::from_json(json.as_bytes()).unwrap()
}

#[test]
fn nulls_and_missing_fields_take_defaults() {
    let s = settings(
        r#"{"type":"delete","bucket":"b","entries":null,"older_than":"1d","interval":null,"when":null,"processing_interval":null,"mode":null}"#,
    );
    assert_eq!(s.entries, Vec::<String>::new());
    assert_eq!(s.interval, "3600s");
    assert_eq!(s.mode, LifecycleMode::Enabled);
    let s = settings(
        r#"{"type":"compress","bucket":"b","older_than":"1d","mode":"dry_run","extra":1}"#,
    );
    assert_eq!(s.interval, "3600s");
    assert_eq!(s.mode, LifecycleMode::DryRun);
    // Field order on the wire follows the server's.
    let text = serde_json::to_string(&s).unwrap();
    let order: Vec<usize> = [
        "\"type\"",
        "\"bucket\"",
        "\"entries\"",
        "\"older_than\"",
        "\"interval\"",
        "\"when\"",
        "\"processing_interval\"",
        "\"mode\"",
    ]
    .iter()
    .map(|k| text.find(k).unwrap())
    .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{text}");
}

#[test]
fn bad_json_is_a_422_naming_the_problem() {
    for (body, want) in [
        (
            r#"{"bucket":"b","older_than":"1d"}"#,
            "missing field `type`",
        ),
        (
            r#"{"type":"purge","bucket":"b","older_than":"1d"}"#,
            "unknown variant `purge`",
        ),
        (
            r#"{"type":"delete","bucket":"b","older_than":5}"#,
            "invalid type",
        ),
        ("{not json", "Invalid JSON"),
    ] {
        let err = LifecycleSettings::from_json(body.as_bytes()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unprocessable);
        assert!(err.message().starts_with("Invalid JSON: "), "{err}");
        assert!(err.message().contains(want), "{err}");
    }
}

#[test]
fn validation_messages_follow_the_api_reference() {
    let (_dir, store) = store();
    let limits = LifecycleLimits::default();
    let cases = [
        (
            r#"{"type":"delete","bucket":"nope","older_than":"1d"}"#,
            ErrorKind::NotFound,
            "Bucket 'nope' for lifecycle 'p' does not exist",
        ),
        (
            r#"{"type":"delete","bucket":"b","older_than":"1.5d"}"#,
            ErrorKind::Unprocessable,
            "Invalid lifecycle older_than '1.5d'",
        ),
        (
            r#"{"type":"delete","bucket":"b","older_than":"30m"}"#,
            ErrorKind::Unprocessable,
            "Lifecycle older_than '30m' is shorter than minimum allowed value of 1h",
        ),
        (
            r#"{"type":"delete","bucket":"b","older_than":"1d","interval":"P1D"}"#,
            ErrorKind::Unprocessable,
            "Invalid lifecycle interval 'P1D'",
        ),
        (
            r#"{"type":"delete","bucket":"b","older_than":"1d","interval":"5m"}"#,
            ErrorKind::Unprocessable,
            "Lifecycle interval '5m' is shorter than minimum allowed value of 10m",
        ),
        (
            r#"{"type":"delete","bucket":"b","older_than":"1d","processing_interval":"x"}"#,
            ErrorKind::Unprocessable,
            "Invalid lifecycle processing_interval 'x'",
        ),
        (
            r#"{"type":"delete","bucket":"b","older_than":"1d","processing_interval":"0s"}"#,
            ErrorKind::Unprocessable,
            "Lifecycle processing_interval '0s' must be positive",
        ),
        (
            r#"{"type":"compress","bucket":"b","older_than":"1d","when":{"&a":{"$eq":1}}}"#,
            ErrorKind::Unprocessable,
            "Lifecycle type 'compress' does not support 'when' condition",
        ),
        (
            r##"{"type":"delete","bucket":"b","older_than":"1d","when":{"#ext":{}}}"##,
            ErrorKind::Unprocessable,
            "Lifecycle condition cannot use '#ext' directive",
        ),
        (
            r##"{"type":"delete","bucket":"b","older_than":"1d","when":{"#foo":1}}"##,
            ErrorKind::Unprocessable,
            "Invalid lifecycle condition: Directive '#foo' is not supported",
        ),
        (
            r#"{"type":"delete","bucket":"b","older_than":"1d","entries":["a//b"]}"#,
            ErrorKind::Unprocessable,
            "Invalid lifecycle entries",
        ),
        (
            r#"{"type":"delete","bucket":"b","older_than":"1d","compression":{"algorithm":"lz4"}}"#,
            ErrorKind::Unprocessable,
            "does not support 'compression'",
        ),
        (
            r#"{"type":"compress","bucket":"b","older_than":"1d","compression":{"algorithm":"zstd","level":40}}"#,
            ErrorKind::Unprocessable,
            "zstd level 40",
        ),
    ];
    for (json, kind, want) in cases {
        let err = settings(json).validate("p", &store, &limits).unwrap_err();
        assert_eq!(err.kind(), kind, "{json}");
        assert!(err.message().contains(want), "{json}: got '{err}'");
    }
}

#[test]
fn a_valid_policy_is_parsed_once() {
    let (_dir, store) = store();
    let p = settings(r#"{"type":"delete","bucket":"b","entries":["cam/*"],"older_than":"1d","interval":"10m","when":{"&x":{"$gt":1}}}"#)
        .validate("p", &store, &LifecycleLimits::default())
        .unwrap();
    assert_eq!(p.older_than, 86_400_000_000);
    assert_eq!(p.interval, 600_000_000);
    assert_eq!(p.window, 24 * 600_000_000);
    assert!(p.when.is_some());
    let p = settings(r#"{"type":"compress","bucket":"b","older_than":"1h","processing_interval":"2h","compression":{"algorithm":"zstd","level":19}}"#)
        .validate("q", &store, &LifecycleLimits::default())
        .unwrap();
    assert_eq!(p.window, 7_200_000_000);
    assert_eq!(p.target, Codec::Zstd(19));
    // Lower minimums through the limits, as tests and operators do.
    let low = LifecycleLimits {
        min_interval: 1_000_000,
        min_older_than: 1_000_000,
        ..LifecycleLimits::default()
    };
    let p = settings(r#"{"type":"compress","bucket":"b","older_than":"2s","interval":"1s"}"#)
        .validate("r", &store, &low)
        .unwrap();
    assert_eq!(p.target, Codec::Zstd(3));
}
