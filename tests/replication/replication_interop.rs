//! Replication against ReductStore 1.21.5, both ways, plain and with gzip and zstd
//! batches, where a ReductStore binary is available (`REDUCTSTORE_BIN`; otherwise each
//! test is ignored, a failure with `HALFLIFE_REQUIRE_REDUCTSTORE=1`). Between two halflife servers the same runs always. Records are compared byte for byte, with labels and content type.

use crate::common;

use common::{ServerProcess, reductstore_bin, start_reductstore, start_server, wait_until};
use serde_json::json;

fn write(s: &ServerProcess, entry: &str, ts: u64, body: &[u8], labels: &[(&str, &str)]) {
    let mut headers = vec![("content-type".to_string(), "text/csv".to_string())];
    headers.extend(common::label_headers(labels));
    let r = s.request(
        "POST",
        &format!("/api/v1/b/src/{entry}?ts={ts}"),
        &common::borrowed(&headers),
        body,
    );
    assert_eq!(r.status, 200, "{}", r.error());
}

/// Whether `s` has record `ts` of `dst/entry` with this body, content type and labels.
fn arrived(s: &ServerProcess, entry: &str, ts: u64, body: &[u8], labels: &[(&str, &str)]) -> bool {
    let r = s.get(&format!("/api/v1/b/dst/{entry}?ts={ts}"));
    r.status == 200
        && r.body == body
        && r.header("content-type") == Some("text/csv")
        && labels
            .iter()
            .all(|(k, v)| r.header(&format!("x-reduct-label-{k}")) == Some(*v))
}

/// A record to send: entry, timestamp, body, labels.
type Sample<'a> = (&'a str, u64, &'a [u8], Vec<(&'a str, &'a str)>);

fn replicate(from: &ServerProcess, to: &ServerProcess, compression: &str) {
    assert_eq!(from.request("POST", "/api/v1/b/src", &[], b"").status, 200);
    let settings = json!({
        "src_bucket": "src", "dst_bucket": "dst",
        "dst_host": format!("http://127.0.0.1:{}", to.addr.port()),
        "compression": compression,
    });
    let r = from.request(
        "POST",
        "/api/v1/replications/r",
        &[],
        settings.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.error());
    let records: [Sample; 3] = [
        ("cam1", 1, b"a,b\n1,2\n", vec![("foo", "Bar"), ("x", "1,2")]),
        ("cam1", 2, b"second", vec![("foo", "baz")]),
        ("logs/app", 5, b"nested entry", vec![]),
    ];
    for (entry, ts, body, labels) in &records {
        write(from, entry, *ts, body, labels);
    }
    wait_until("the records arrive", || {
        records
            .iter()
            .all(|(entry, ts, body, labels)| arrived(to, entry, *ts, body, labels))
    });
}

#[test]
fn halflife_replicates_to_halflife_compressed() {
    for compression in ["gzip", "zstd"] {
        let dst_dir = tempfile::tempdir().expect("tempdir");
        let dst = start_server(dst_dir.path(), &[]);
        let src_dir = tempfile::tempdir().expect("tempdir");
        let src = start_server(src_dir.path(), &[("RS_REPLICATION_TIMEOUT", "1")]);
        // (That the body went compressed is not observed here; that it decodes to the
        // same records is.)
        replicate(&src, &dst, compression);
    }
}

#[test]
#[cfg_attr(
    halflife_missing = "reductstore",
    ignore = "needs a ReductStore 1.21.5 binary in REDUCTSTORE_BIN; HALFLIFE_REQUIRE_REDUCTSTORE=1 makes it a failure"
)]
fn halflife_replicates_to_reductstore() {
    let bin = reductstore_bin();
    for compression in ["none", "gzip", "zstd"] {
        let rs_dir = tempfile::tempdir().expect("tempdir");
        let rs = start_reductstore(&bin, rs_dir.path(), &[]);
        let hl_dir = tempfile::tempdir().expect("tempdir");
        let hl = start_server(hl_dir.path(), &[("RS_REPLICATION_TIMEOUT", "1")]);
        replicate(&hl, &rs, compression);
    }
}

#[test]
#[cfg_attr(
    halflife_missing = "reductstore",
    ignore = "needs a ReductStore 1.21.5 binary in REDUCTSTORE_BIN; HALFLIFE_REQUIRE_REDUCTSTORE=1 makes it a failure"
)]
fn reductstore_replicates_to_halflife() {
    let bin = reductstore_bin();
    for compression in ["none", "gzip", "zstd"] {
        let hl_dir = tempfile::tempdir().expect("tempdir");
        let hl = start_server(hl_dir.path(), &[]);
        let rs_dir = tempfile::tempdir().expect("tempdir");
        let rs = start_reductstore(&bin, rs_dir.path(), &[]);
        replicate(&rs, &hl, compression);
    }
}
