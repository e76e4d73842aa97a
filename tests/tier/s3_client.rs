//! The S3 client against Garage: what it stores is what it reads back, by range; large
//! bodies go in parts; every refusal is named by kind, and no message carries a secret.

use halflife::storage::remote::s3::{FaultKind, MULTIPART_THRESHOLD, S3Client, md5_hex};

use crate::common::garage::{Garage, garage};

#[test]
#[cfg_attr(
    halflife_missing = "garage",
    ignore = "needs Garage (cargo install garage --version 2.5.0 --locked); HALFLIFE_REQUIRE_GARAGE=1 makes it a failure"
)]
fn puts_reads_ranges_lists_and_deletes() {
    let bin = garage();
    let garage = Garage::single(&bin);
    let client = S3Client::new(&garage.settings("cold", "p")).unwrap();
    let small: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
    let etag = client.put("p/a/small", &small).unwrap();
    assert_eq!(etag, md5_hex(&small));
    assert_eq!(
        client.head("p/a/small").unwrap(),
        Some((small.len() as u64, etag))
    );
    assert_eq!(
        client.get_range("p/a/small", 10, 20).unwrap(),
        small[10..20]
    );

    // Above the threshold: a multipart upload, whose ETag the store confirms too.
    let large: Vec<u8> = (0..MULTIPART_THRESHOLD + 123_456)
        .map(|i| (i % 251) as u8)
        .collect();
    let etag = client.put("p/a/large", &large).unwrap();
    assert!(etag.ends_with("-3"), "{etag}");
    let (size, stored) = client.head("p/a/large").unwrap().unwrap();
    assert_eq!((size, stored), (large.len() as u64, etag));
    let at = 9 << 20;
    assert_eq!(
        client.get_range("p/a/large", at, at + 4096).unwrap(),
        large[at as usize..at as usize + 4096]
    );

    let mut keys: Vec<String> = client
        .list("p/")
        .unwrap()
        .into_iter()
        .map(|o| o.key)
        .collect();
    keys.sort();
    assert_eq!(keys, ["p/a/large", "p/a/small"]);
    client.delete("p/a/small").unwrap();
    client.delete("p/a/small").unwrap(); // already gone: no error
    assert_eq!(client.head("p/a/small").unwrap(), None);
}

#[test]
#[cfg_attr(
    halflife_missing = "garage",
    ignore = "needs Garage (cargo install garage --version 2.5.0 --locked); HALFLIFE_REQUIRE_GARAGE=1 makes it a failure"
)]
fn refusals_are_named_by_kind_without_secrets() {
    let bin = garage();
    let garage = Garage::single(&bin);
    let mut wrong = garage.settings("cold", "");
    wrong.secret_access_key = halflife::storage::remote::settings::Secret::new("0".repeat(64));
    let denied = S3Client::new(&wrong).unwrap().put("k", b"x").unwrap_err();
    let e = &denied;
    assert_eq!(e.kind, FaultKind::Denied, "{}", e.message);
    assert!(
        e.message.contains("remote 'cold'") && e.message.contains("'k'"),
        "{}",
        e.message
    );

    let mut missing = garage.settings("cold", "");
    missing.bucket = "no-such-bucket".into();
    let absent = S3Client::new(&missing).unwrap().put("k", b"x").unwrap_err();
    let e = &absent;
    assert!(
        matches!(e.kind, FaultKind::Missing | FaultKind::Denied),
        "{e:?}"
    );

    let mut away = garage.settings("cold", "");
    away.endpoint = format!("http://127.0.0.1:{}", crate::common::closed_port());
    let e = S3Client::new(&away)
        .unwrap()
        .get_range("k", 0, 1)
        .unwrap_err();
    assert_eq!(e.kind, FaultKind::Unreachable, "{}", e.message);

    for message in [&denied.message, &absent.message, &e.message] {
        assert!(!message.contains(&garage.secret), "{message}");
        assert!(!message.contains("X-Amz-Signature"), "{message}");
        assert!(!message.contains(&garage.key_id), "{message}");
    }
}
