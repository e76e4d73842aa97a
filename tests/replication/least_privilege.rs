//! A destination token with nothing but `write` on its bucket (the least privilege a user
//! gives a destination) delivers every record, as with ReductStore 1.21.5; a bucket such a
//! token may not create gets an error saying so, and delivery starts once it exists.

use crate::common;

use common::replication::{create, json_of};
use common::*;
use serde_json::json;

const ADMIN: &str = "least-privilege-admin";

/// A token on `dst` that may write `bucket` and read nothing; returns its value.
fn write_only(dst: &ServerProcess, name: &str, bucket: &str) -> String {
    let auth = format!("Bearer {ADMIN}");
    let body = json!({"full_access": false, "read": [], "write": [bucket]});
    let r = dst.request(
        "POST",
        &format!("/api/v1/tokens/{name}"),
        &[("authorization", auth.as_str())],
        body.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.error());
    r.json()["value"].as_str().unwrap().to_string()
}

/// Records in `bucket` on `dst`, as its administrator sees them.
fn delivered(dst: &ServerProcess, bucket: &str) -> u64 {
    let r = dst.get_with(&format!("/api/v1/b/{bucket}"), &format!("Bearer {ADMIN}"));
    if r.status != 200 {
        return 0;
    }
    r.json()["entries"]
        .as_array()
        .map(|all| all.iter().filter_map(|e| e["record_count"].as_u64()).sum())
        .unwrap_or(0)
}

#[test]
fn a_write_only_destination_token_delivers_every_record() {
    let (src_dir, dst_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let dst = start_server(dst_dir.path(), &[("RS_API_TOKEN", ADMIN)]);
    let src = start_server(src_dir.path(), &[]);
    let admin = format!("Bearer {ADMIN}");
    let r = dst.request(
        "POST",
        "/api/v1/b/dst",
        &[("authorization", admin.as_str())],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.error());
    let token = write_only(&dst, "writer", "dst");
    assert_eq!(src.request("POST", "/api/v1/b/src", &[], b"").status, 200);
    let host = format!("http://{}", dst.addr);
    let task =
        json!({"src_bucket": "src", "dst_bucket": "dst", "dst_host": host, "dst_token": token});
    let r = create(&src, "r", &task);
    assert_eq!(r.status, 200, "{}", r.error());
    for ts in 1..=200 {
        let r = src.request("POST", &format!("/api/v1/b/src/cam?ts={ts}"), &[], b"frame");
        assert_eq!(r.status, 200, "{}", r.error());
    }
    wait_until("every record delivered", || delivered(&dst, "dst") == 200);
    // The source counts a record sent once the destination's answer is back: a moment
    // after the destination holds it.
    wait_until("nothing pending at the source", || {
        json_of(&src, "/api/v1/replications/r")["info"]["pending_records"] == 0
    });

    // A bucket that is missing, and the token may not create: the task says why.
    let token = write_only(&dst, "late", "later");
    let task =
        json!({"src_bucket": "src", "dst_bucket": "later", "dst_host": host, "dst_token": token});
    let r = create(&src, "r2", &task);
    assert_eq!(r.status, 200, "{}", r.error());
    assert_eq!(
        src.request("POST", "/api/v1/b/src/cam?ts=201", &[], b"one more")
            .status,
        200
    );
    wait_until("the missing bucket named", || {
        let errors = &json_of(&src, "/api/v1/replications/r2")["diagnostics"]["hourly"]["errors"];
        errors["403"]["last_message"].as_str().is_some_and(|m| {
            m.contains("creating bucket 'later'") && m.contains("may not create it")
        })
    });
    assert_eq!(delivered(&dst, "later"), 0);
    // Made by its administrator, it gets the records.
    let r = dst.request(
        "POST",
        "/api/v1/b/later",
        &[("authorization", admin.as_str())],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.error());
    wait_until("the records delivered once it exists", || {
        delivered(&dst, "later") == 1
    });
}
