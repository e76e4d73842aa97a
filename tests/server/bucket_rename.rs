//! `PUT /b/{bucket}/rename` through the real binary: data, entries and settings move;
//! token permission lists and lifecycle policies follow (the answer lists the policies);
//! ReductStore's refusals; a policy that no longer validates at load is kept with its
//! error; and a rename a crash interrupted is finished (or forgotten) at the next start.

use crate::common;

use common::*;

const TOKEN: &str = "rename-init-token";

fn auth() -> String {
    format!("Bearer {TOKEN}")
}

fn rename(s: &ServerProcess, token: &str, from: &str, body: &str) -> Resp {
    s.request(
        "PUT",
        &format!("/api/v1/b/{from}/rename"),
        &[
            ("authorization", token),
            ("content-type", "application/json"),
        ],
        body.as_bytes(),
    )
}

fn create_token(s: &ServerProcess, name: &str, permissions: &str) -> String {
    let a = auth();
    let r = s.request(
        "POST",
        &format!("/api/v1/tokens/{name}"),
        &[("authorization", &a)],
        permissions.as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.error());
    format!("Bearer {}", r.json()["value"].as_str().unwrap())
}

fn token_lists(s: &ServerProcess, name: &str) -> (serde_json::Value, serde_json::Value) {
    let a = auth();
    let r = s.request(
        "GET",
        &format!("/api/v1/tokens/{name}"),
        &[("authorization", &a)],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.error());
    let p = &r.json()["permissions"];
    (p["read"].clone(), p["write"].clone())
}

fn lifecycle(s: &ServerProcess, name: &str) -> serde_json::Value {
    let a = auth();
    let r = s.request(
        "GET",
        &format!("/api/v1/lifecycles/{name}"),
        &[("authorization", &a)],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.error());
    r.json()
}

fn create_policy(s: &ServerProcess, name: &str, bucket: &str) {
    let a = auth();
    let body = format!(r#"{{"type":"delete","bucket":"{bucket}","older_than":"3650d"}}"#);
    let r = s.request(
        "POST",
        &format!("/api/v1/lifecycles/{name}"),
        &[("authorization", &a)],
        body.as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.error());
}

#[test]
fn a_bucket_rename_moves_data_and_tokens_and_policies_follow() {
    let dir = tempfile::tempdir().unwrap();
    let a = auth();
    let env = [
        ("RS_API_TOKEN", TOKEN),
        ("RS_BUCKET_PROV_NAME", "prov"),
        ("RS_SYSTEM_EVENTS_ENABLED", "false"),
    ];
    {
        let s = start_server(dir.path(), &env);
        let settings = br#"{"max_block_records":7}"#;
        let r = s.request("POST", "/api/v1/b/n1", &[("authorization", &a)], settings);
        assert_eq!(r.status, 200, "{}", r.error());
        for (entry, ts) in [("cam", 1), ("cam", 2), ("cam/left", 5)] {
            let r = s.request(
                "POST",
                &format!("/api/v1/b/n1/{entry}?ts={ts}"),
                &[("authorization", &a), ("x-reduct-label-k", "v")],
                format!("{entry}@{ts}").as_bytes(),
            );
            assert_eq!(r.status, 200, "{}", r.error());
        }
        let reader = create_token(&s, "reader", r#"{"read":["n1","n*","other"]}"#);
        let writer = create_token(&s, "wonly", r#"{"write":["n1"]}"#);
        create_policy(&s, "lc-n1", "n1");
        create_policy(&s, "lc-other", "prov");

        // ReductStore's refusals, in its words (the extractor's without x-reduct-error).
        let r = s.request(
            "PUT",
            "/api/v1/b/n1/rename",
            &[("authorization", &a), ("content-type", "text/plain")],
            br#"{"new_name":"n2"}"#,
        );
        assert_eq!(r.status, 415);
        assert_eq!(
            String::from_utf8_lossy(&r.body),
            "Expected request with `Content-Type: application/json`"
        );
        assert_eq!(r.header("x-reduct-error"), None);
        let r = rename(&s, &a, "n1", "{}");
        assert_eq!(r.status, 422);
        assert!(
            String::from_utf8_lossy(&r.body).contains("missing field `new_name`"),
            "{:?}",
            String::from_utf8_lossy(&r.body)
        );
        let r = rename(&s, &writer, "n1", r#"{"new_name":"n2"}"#);
        assert_eq!(
            (r.status, r.error()),
            (403, "Token 'wonly' doesn't have full access")
        );
        let r = rename(&s, &a, "nob", r#"{"new_name":"n2"}"#);
        assert_eq!((r.status, r.error()), (404, "Bucket 'nob' is not found"));
        let r = rename(&s, &a, "n1", r#"{"new_name":"prov"}"#);
        assert_eq!((r.status, r.error()), (409, "Bucket 'prov' already exists"));
        let r = rename(&s, &a, "prov", r#"{"new_name":"p2"}"#);
        assert_eq!(
            (r.status, r.error()),
            (409, "Can't rename provisioned bucket 'prov'")
        );
        let r = rename(&s, &a, "n1", r#"{"new_name":"bad name"}"#);
        assert_eq!(r.status, 422, "{}", r.error());
        let r = rename(&s, &a, "n1", r#"{"new_name":"$sys"}"#);
        assert_eq!(r.status, 422, "{}", r.error());
        assert_eq!(
            s.request("GET", "/api/v1/b/n1", &[("authorization", &a)], b"")
                .status,
            200
        );

        let r = rename(&s, &a, "n1", r#"{"new_name":"n2"}"#);
        assert_eq!(r.status, 200, "{}", r.error());
        assert_eq!(r.header("x-halflife-lifecycles-renamed"), Some("lc-n1"));
        assert_eq!(
            s.request("GET", "/api/v1/b/n1", &[("authorization", &a)], b"")
                .status,
            404
        );
        let r = s.request("GET", "/api/v1/b/n2", &[("authorization", &a)], b"");
        assert_eq!(r.status, 200);
        assert_eq!(r.json()["settings"]["max_block_records"], 7);
        assert_eq!(s.entry_names_with("n2", &a), vec!["cam", "cam/left"]);
        let r = s.request(
            "GET",
            "/api/v1/b/n2/cam?ts=2",
            &[("authorization", &reader)],
            b"",
        );
        assert_eq!((r.status, r.body.as_slice()), (200, b"cam@2".as_slice()));
        assert_eq!(r.header("x-reduct-label-k"), Some("v"));
        // Exact items follow, patterns stay.
        assert_eq!(
            token_lists(&s, "reader").0,
            serde_json::json!(["n2", "n*", "other"])
        );
        assert_eq!(token_lists(&s, "wonly").1, serde_json::json!(["n2"]));
        assert_eq!(lifecycle(&s, "lc-n1")["settings"]["bucket"], "n2");
        assert_eq!(lifecycle(&s, "lc-other")["settings"]["bucket"], "prov");
        // The renamed bucket takes writes; the old name is free again.
        let r = s.request(
            "POST",
            "/api/v1/b/n2/cam?ts=3",
            &[("authorization", &writer)],
            b"c3",
        );
        assert_eq!(r.status, 200, "{}", r.error());
        assert_eq!(
            s.request("POST", "/api/v1/b/n1", &[("authorization", &a)], b"")
                .status,
            200
        );
        let (status, _) = s.terminate();
        assert!(status.success());
    }
    // Everything holds after a restart: the policy is loaded and runs on the new name.
    let s = start_server(dir.path(), &env);
    let info = lifecycle(&s, "lc-n1");
    assert_eq!(info["settings"]["bucket"], "n2");
    assert_eq!(info["info"]["is_running"], true, "{info}");
    assert_eq!(s.get_with("/api/v1/b/n2/cam?ts=3", &a).body, b"c3");
    assert_eq!(
        s.get_with("/api/v1/b/n2/cam/left?ts=5", &a).body,
        b"cam/left@5"
    );
    assert!(!dir.path().join(".bucket-rename").exists());
}

#[test]
fn a_policy_that_fails_at_load_is_kept_with_its_error() {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("RS_API_TOKEN", TOKEN),
        ("RS_SYSTEM_EVENTS_ENABLED", "false"),
    ];
    let a = auth();
    {
        let s = start_server(dir.path(), &env);
        assert_eq!(
            s.request("POST", "/api/v1/b/gone", &[("authorization", &a)], b"")
                .status,
            200
        );
        create_policy(&s, "orphan", "gone");
        let (status, _) = s.terminate();
        assert!(status.success());
    }
    // The bucket disappears behind the server's back.
    std::fs::remove_dir_all(dir.path().join("gone")).unwrap();
    let s = start_server(dir.path(), &env);
    let info = lifecycle(&s, "orphan");
    assert_eq!(info["info"]["is_running"], false, "{info}");
    let error = info["info"]["last_error"].as_str().unwrap_or_default();
    assert!(
        error.contains("gone"),
        "the error names the bucket: {error}"
    );
    let r = s.request("GET", "/api/v1/lifecycles", &[("authorization", &a)], b"");
    assert!(String::from_utf8_lossy(&r.body).contains("orphan"));
    // Re-creating the bucket and updating the policy starts it again.
    assert_eq!(
        s.request("POST", "/api/v1/b/gone", &[("authorization", &a)], b"")
            .status,
        200
    );
    let r = s.request(
        "PUT",
        "/api/v1/lifecycles/orphan",
        &[("authorization", &a)],
        br#"{"type":"delete","bucket":"gone","older_than":"3650d"}"#,
    );
    assert_eq!(r.status, 200, "{}", r.error());
    assert_eq!(lifecycle(&s, "orphan")["info"]["is_running"], true);
}

#[test]
fn an_interrupted_rename_is_finished_or_forgotten_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("RS_API_TOKEN", TOKEN),
        ("RS_SYSTEM_EVENTS_ENABLED", "false"),
    ];
    let a = auth();
    {
        let s = start_server(dir.path(), &env);
        for bucket in ["moved", "stays"] {
            let r = s.request(
                "POST",
                &format!("/api/v1/b/{bucket}"),
                &[("authorization", &a)],
                b"",
            );
            assert_eq!(r.status, 200);
            let r = s.request(
                "POST",
                &format!("/api/v1/b/{bucket}/e?ts=1"),
                &[("authorization", &a)],
                bucket.as_bytes(),
            );
            assert_eq!(r.status, 200);
            create_policy(&s, &format!("lc-{bucket}"), bucket);
        }
        create_token(&s, "t", r#"{"read":["moved","stays"]}"#);
        let (status, _) = s.terminate();
        assert!(status.success());
    }
    // As a crash leaves it after the directory moved (the tokens and policies not yet).
    std::fs::rename(dir.path().join("moved"), dir.path().join("moved2")).unwrap();
    let intent = dir.path().join(".bucket-rename");
    std::fs::write(&intent, br#"{"old":"moved","new":"moved2"}"#).unwrap();
    {
        let s = start_server(dir.path(), &env);
        assert!(!intent.exists());
        assert_eq!(
            token_lists(&s, "t").0,
            serde_json::json!(["moved2", "stays"])
        );
        let info = lifecycle(&s, "lc-moved");
        assert_eq!(info["settings"]["bucket"], "moved2");
        assert_eq!(info["info"]["is_running"], true, "{info}");
        assert_eq!(s.get_with("/api/v1/b/moved2/e?ts=1", &a).body, b"moved");
        let (status, _) = s.terminate();
        assert!(status.success());
    }
    // As a crash leaves it before the directory moved: nothing changes.
    std::fs::write(&intent, br#"{"old":"stays","new":"elsewhere"}"#).unwrap();
    let s = start_server(dir.path(), &env);
    assert!(!intent.exists());
    assert_eq!(
        token_lists(&s, "t").0,
        serde_json::json!(["moved2", "stays"])
    );
    assert_eq!(lifecycle(&s, "lc-stays")["settings"]["bucket"], "stays");
    assert_eq!(s.get_with("/api/v1/b/stays/e?ts=1", &a).body, b"stays");
}
