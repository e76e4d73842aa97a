//! Attachments (`<entry>/$meta`) through the real binary, as reduct-py and reduct-cli use
//! them: upsert by `key`, tombstones hidden from queries, the 422 refusals, hidden from
//! listings and globs but counted in the size, moved and removed with their parent, and
//! never evicted by a FIFO quota nor deleted by a delete policy.

use crate::common;

use common::*;

const TOKEN: &str = "attach-init-token";

struct Client {
    s: ServerProcess,
    auth: String,
}

impl Client {
    fn start(dir: &std::path::Path) -> Client {
        let s = start_server(
            dir,
            &[
                ("RS_API_TOKEN", TOKEN),
                ("RS_SYSTEM_EVENTS_ENABLED", "false"),
            ],
        );
        Client {
            s,
            auth: format!("Bearer {TOKEN}"),
        }
    }

    fn call(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
        let mut all = vec![("authorization", self.auth.as_str())];
        all.extend_from_slice(headers);
        self.s.request(method, path, &all, body)
    }

    fn write(&self, entry: &str, ts: u64, labels: &[(&str, &str)], body: &str) -> Resp {
        let headers = label_headers(labels);
        self.call(
            "POST",
            &format!("/api/v1/b/b/{entry}?ts={ts}"),
            &borrowed(&headers),
            body.as_bytes(),
        )
    }

    /// Timestamps a v1 entry query returns (as reduct-cli reads attachments); `None`
    /// when the entry query is refused (its status).
    fn entry_query(&self, entry: &str) -> Result<Vec<u64>, u16> {
        let r = self.call(
            "POST",
            &format!("/api/v1/b/b/{entry}/q"),
            &[],
            br#"{"query_type":"QUERY"}"#,
        );
        if r.status != 200 {
            return Err(r.status);
        }
        let id = r.json()["id"].as_u64().unwrap();
        let mut stamps = Vec::new();
        loop {
            let r = self.call(
                "GET",
                &format!("/api/v1/b/b/{entry}/batch?q={id}"),
                &[],
                b"",
            );
            if r.status == 204 {
                break;
            }
            assert_eq!(r.status, 200, "{}", r.error());
            for (name, _) in &r.headers {
                if let Some(ts) = name.strip_prefix("x-reduct-time-") {
                    stamps.push(ts.parse().unwrap());
                }
            }
            if r.header("x-reduct-last") == Some("true") {
                break;
            }
        }
        stamps.sort();
        Ok(stamps)
    }

    /// The entries a v2 bucket query over `entries` returns records of.
    fn io_query_entries(&self, entries: &str) -> Vec<String> {
        let body = format!(r#"{{"query_type":"QUERY","entries":{entries}}}"#);
        let r = self.call("POST", "/api/v1/io/b/q", &[], body.as_bytes());
        assert_eq!(r.status, 200, "{}", r.error());
        let id = r.json()["id"].as_u64().unwrap().to_string();
        let mut seen = Vec::new();
        loop {
            let r = self.call(
                "GET",
                "/api/v1/io/b/read",
                &[("x-reduct-query-id", &id)],
                b"",
            );
            if r.status == 204 {
                break;
            }
            assert_eq!(r.status, 200, "{}", r.error());
            for name in r.header("x-reduct-entries").unwrap_or_default().split(',') {
                let name = name.replace("%2F", "/");
                if !seen.contains(&name) {
                    seen.push(name);
                }
            }
            if r.header("x-reduct-last") == Some("true") {
                break;
            }
        }
        seen.sort();
        seen
    }

    fn bucket(&self) -> serde_json::Value {
        let r = self.call("GET", "/api/v1/b/b", &[], b"");
        assert_eq!(r.status, 200, "{}", r.error());
        r.json()
    }
}

#[test]
fn attachments_upsert_hide_tombstones_and_refuse_removals() {
    let dir = tempfile::tempdir().unwrap();
    let c = Client::start(dir.path());
    assert_eq!(c.call("POST", "/api/v1/b/b", &[], b"").status, 200);
    assert_eq!(c.write("cam", 1, &[], "frame").status, 200);
    let size_before = c.bucket()["info"]["size"].as_u64().unwrap();

    // The write rules, in ReductStore's words.
    let r = c.write("cam/$meta", 5, &[], "{}");
    assert_eq!(
        (r.status, r.error()),
        (
            422,
            "System entry 'cam/$meta' records must contain label 'key'"
        )
    );
    let r = c.write("cam/$meta", 5, &[("key", "k"), ("remove", "true")], "{}");
    assert_eq!(r.status, 422);
    assert!(r.error().contains("use record update"), "{}", r.error());
    for bad in ["$meta/x", "cam/$meta/b", "cam/$metax"] {
        assert_eq!(c.write(bad, 5, &[("key", "k")], "{}").status, 422, "{bad}");
    }

    // Upsert by key: the older live value of a key goes, other keys stay.
    assert_eq!(
        c.write("cam/$meta", 10, &[("key", "calib")], r#"{"v":1}"#)
            .status,
        200
    );
    assert_eq!(
        c.write("cam/$meta", 11, &[("key", "schema")], r#"{"s":1}"#)
            .status,
        200
    );
    assert_eq!(
        c.write("cam/$meta", 20, &[("key", "calib")], r#"{"v":2}"#)
            .status,
        200
    );
    assert_eq!(c.entry_query("cam/$meta"), Ok(vec![11, 20]));
    assert_eq!(
        c.call("GET", "/api/v1/b/b/cam/$meta?ts=10", &[], b"")
            .status,
        404
    );
    // A batch write needs the key per record.
    let r = c.call(
        "POST",
        "/api/v1/io/b/write",
        &[
            ("x-reduct-entries", "cam%2F$meta"),
            ("x-reduct-start-ts", "30"),
            ("x-reduct-labels", "key"),
            ("x-reduct-0-0", "2,application/json"),
            ("x-reduct-0-1", "2,application/json,0=lens"),
        ],
        b"{}{}",
    );
    assert_eq!(r.status, 200, "{}", r.error());
    assert_eq!(
        r.header("x-reduct-error-0-0"),
        Some("422,System entry 'cam/$meta' records must contain label 'key'")
    );
    assert_eq!(c.entry_query("cam/$meta"), Ok(vec![11, 20, 31]));

    // Hidden: not listed nor counted, but its bytes are in the size.
    let info = c.bucket();
    assert_eq!(info["info"]["entry_count"], 1, "{info}");
    assert_eq!(info["entries"].as_array().unwrap().len(), 1);
    assert!(info["info"]["size"].as_u64().unwrap() > size_before);
    // Queries: globs and empty lists skip it; the exact name selects it.
    for entries in ["null", "[]", r#"["*"]"#, r#"["cam*"]"#] {
        assert_eq!(c.io_query_entries(entries), vec!["cam"], "{entries}");
    }
    assert!(c.io_query_entries(r#"["cam/*"]"#).is_empty());
    assert_eq!(c.io_query_entries(r#"["cam/$meta"]"#), vec!["cam/$meta"]);

    // A tombstone hides the record from queries, not from a read by timestamp; clearing
    // the label revives it; a later upsert of the key leaves the tombstone alone.
    let r = c.call(
        "PATCH",
        "/api/v1/b/b/cam/$meta?ts=11",
        &[("x-reduct-label-remove", "true")],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.error());
    assert_eq!(c.entry_query("cam/$meta"), Ok(vec![20, 31]));
    assert_eq!(
        c.call("GET", "/api/v1/b/b/cam/$meta?ts=11", &[], b"")
            .status,
        200
    );
    assert_eq!(
        c.write("cam/$meta", 40, &[("key", "schema")], r#"{"s":2}"#)
            .status,
        200
    );
    assert_eq!(c.entry_query("cam/$meta"), Ok(vec![20, 31, 40]));
    let r = c.call(
        "PATCH",
        "/api/v1/b/b/cam/$meta?ts=11",
        &[("x-reduct-label-remove", "")],
        b"",
    );
    assert_eq!(r.status, 200);
    assert_eq!(c.entry_query("cam/$meta"), Ok(vec![11, 20, 31, 40]));

    // Removals are refused every way but with the parent.
    let refused =
        "Can't delete records from system entry 'cam/$meta'; use label update with remove=true";
    for (method, path, headers, body) in [
        ("DELETE", "/api/v1/b/b/cam/$meta?ts=20", vec![], &b""[..]),
        (
            "DELETE",
            "/api/v1/b/b/cam/$meta/batch",
            vec![("x-reduct-time-20", "")],
            b"",
        ),
        ("DELETE", "/api/v1/b/b/cam/$meta/q?start=0", vec![], b""),
        (
            "POST",
            "/api/v1/b/b/cam/$meta/q",
            vec![],
            br#"{"query_type":"REMOVE"}"#,
        ),
        (
            "DELETE",
            "/api/v1/io/b/remove",
            vec![
                ("x-reduct-entries", "cam%2F$meta"),
                ("x-reduct-start-ts", "20"),
                ("x-reduct-0-0", ""),
            ],
            b"",
        ),
    ] {
        let r = c.call(method, path, &headers, body);
        assert_eq!((r.status, r.error()), (422, refused), "{method} {path}");
    }
    // A REMOVE query over the bucket skips attachments even when it names them.
    let r = c.call(
        "POST",
        "/api/v1/io/b/q",
        &[],
        br#"{"query_type":"REMOVE","entries":["cam/$meta","cam"]}"#,
    );
    assert_eq!(r.status, 200, "{}", r.error());
    assert_eq!(r.json()["removed_records"], 1);
    assert_eq!(c.entry_query("cam/$meta"), Ok(vec![11, 20, 31, 40]));
    // The entry itself: refused before the token is looked at.
    let r = c.s.request("DELETE", "/api/v1/b/b/cam/$meta", &[], b"");
    assert_eq!(
        (r.status, r.error()),
        (
            422,
            "Can't delete system entry 'cam/$meta'; remove the parent entry instead"
        )
    );
    // No attachments: the entry query is a 404, as reduct-cli expects.
    assert_eq!(c.write("other", 1, &[], "x").status, 200);
    let r = c.call(
        "POST",
        "/api/v1/b/b/other/$meta/q",
        &[],
        br#"{"query_type":"QUERY"}"#,
    );
    assert_eq!(
        (r.status, r.error()),
        (404, "Entry 'other/$meta' not found in bucket 'b'")
    );

    // They move with their parent only: never on their own, never into a plain entry,
    // and no plain entry becomes one.
    assert_eq!(c.write("plain", 1, &[], "x").status, 200);
    for (from, to) in [
        ("cam/$meta", "leaked"),
        ("plain", "cam2/$meta"),
        ("plain", "$meta"),
    ] {
        let r = c.call(
            "PUT",
            &format!("/api/v1/b/b/{from}/rename"),
            &[],
            format!(r#"{{"new_name":"{to}"}}"#).as_bytes(),
        );
        assert_eq!(r.status, 422, "{from} -> {to}: {}", r.error());
        assert!(
            r.error().contains("attachments follow their parent"),
            "{}",
            r.error()
        );
    }
    assert_eq!(c.entry_query("cam/$meta"), Ok(vec![11, 20, 31, 40]));
    assert_eq!(c.call("DELETE", "/api/v1/b/b/plain", &[], b"").status, 200);
    // They move with their parent and go with it.
    let r = c.call(
        "PUT",
        "/api/v1/b/b/cam/rename",
        &[],
        br#"{"new_name":"cam2"}"#,
    );
    assert_eq!(r.status, 200, "{}", r.error());
    assert_eq!(c.entry_query("cam2/$meta"), Ok(vec![11, 20, 31, 40]));
    assert_eq!(
        c.call("GET", "/api/v1/b/b/cam2/$meta?ts=20", &[], b"").body,
        br#"{"v":2}"#
    );
    assert_eq!(c.call("DELETE", "/api/v1/b/b/cam2", &[], b"").status, 200);
    assert_eq!(c.entry_query("cam2/$meta"), Err(404));
    // A top-level `$meta` is legal; a `$meta` of a new name makes the empty parent.
    assert_eq!(c.write("$meta", 1, &[("key", "k")], "{}").status, 200);
    assert_eq!(c.write("ghost/$meta", 1, &[("key", "k")], "{}").status, 200);
    let names: Vec<String> = c.bucket()["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, vec!["ghost", "other"]);
}

#[test]
fn fifo_quotas_and_delete_policies_leave_attachments() {
    let dir = tempfile::tempdir().unwrap();
    let c = Client::start(dir.path());
    let settings = br#"{"quota_type":"FIFO","quota_size":40000,"max_block_size":4000}"#;
    assert_eq!(c.call("POST", "/api/v1/b/b", &[], settings).status, 200);
    // The attachment is the oldest record of the bucket.
    assert_eq!(
        c.write("cam/$meta", 1, &[("key", "calib")], "{}").status,
        200
    );
    let frame = "x".repeat(1000);
    for ts in 0..120u64 {
        assert_eq!(c.write("cam", 100 + ts, &[], &frame).status, 200);
    }
    let oldest = c.bucket()["entries"][0]["oldest_record"].as_u64().unwrap();
    assert!(oldest > 100, "the quota evicted frames (oldest {oldest})");
    assert_eq!(c.entry_query("cam/$meta"), Ok(vec![1]));
    // A delete policy on everything, even naming the attachments, leaves them.
    for (name, entries) in [("all", "[]"), ("named", r#"["cam/$meta","cam"]"#)] {
        let body = format!(
            r#"{{"type":"delete","bucket":"b","older_than":"1h","entries":{entries},"interval":"1h"}}"#
        );
        let r = c.call(
            "POST",
            &format!("/api/v1/lifecycles/{name}"),
            &[],
            body.as_bytes(),
        );
        assert_eq!(r.status, 200, "{}", r.error());
        let r = c.call("POST", &format!("/api/v1/lifecycles/{name}/run"), &[], b"");
        assert_eq!(r.status, 200, "{}", r.error());
        wait_until("the policy ran", || {
            let r = c.call("GET", &format!("/api/v1/lifecycles/{name}"), &[], b"");
            r.json()["info"]["total_runs"].as_u64().unwrap_or(0) >= 1
        });
    }
    wait_until("the frames are deleted", || {
        c.bucket()["entries"][0]["record_count"] == 0
    });
    assert_eq!(c.entry_query("cam/$meta"), Ok(vec![1]));
    assert_eq!(
        c.call("GET", "/api/v1/b/b/cam/$meta?ts=1", &[], b"").body,
        b"{}"
    );
}
