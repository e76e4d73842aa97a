//! Entry renames under power cuts (the FUSE file system that drops what was not synced):
//! a cut inside the rename's directory sync, or just after the answer, leaves the entry
//! and its child under the old name or under the new one — never both, never neither —
//! with every acknowledged record, and an acknowledged rename is always the new name.
//! Bucket renames the same, and the token and policy naming the bucket agree with the
//! name that survived.

use crate::common;
use crate::powerfs;

use std::time::{SystemTime, UNIX_EPOCH};

use common::start_server;
use powerfs::{Cut, PowerFs, Rng};

const ENV: [(&str, &str); 2] = [("RS_SYNC_MODE", "always"), ("RS_BUCKET_B_NAME", "b")];

#[test]
#[cfg_attr(
    halflife_missing = "fuse",
    ignore = "needs FUSE (apt-get install fuse3, /dev/fuse); HALFLIFE_REQUIRE_FUSE=1 makes it a failure"
)]
fn a_renamed_entry_survives_power_cuts_under_exactly_one_name() {
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let fs = PowerFs::new();
    let mut mounted = fs.mount_for_test(&mnt);
    let data = mnt.join("data");
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("power-cut rename seed {seed}");
    let mut rng = Rng(seed | 1);
    let (mut kept_old, mut took_new) = (0, 0);
    for round in 0..9u64 {
        let (old, new) = (format!("e{round}"), format!("r{round}"));
        let s = start_server(&data, &ENV);
        for (entry, ts) in [(old.clone(), 1), (old.clone(), 2), (format!("{old}/c"), 1)] {
            let r = s.request("POST", &format!("/api/v1/b/b/{entry}?ts={ts}"), &[], b"x");
            assert_eq!(r.status, 200, "{}", r.error());
        }
        // The cut lands inside the rename's first fsync (1), or later (2, 3: after the
        // rename's sync, or after the answer).
        let how = if rng.below(2) == 0 {
            Cut::Clean
        } else {
            Cut::Torn(rng.next())
        };
        fs.cut_after_syncs(1 + round % 3, how);
        let body = format!(r#"{{"new_name":"{new}"}}"#);
        let status = s
            .request(
                "PUT",
                &format!("/api/v1/b/b/{old}/rename"),
                &[],
                body.as_bytes(),
            )
            .status;
        if !fs.is_cut() {
            fs.cut(how);
        }
        drop(s);
        drop(mounted);
        mounted = fs.mount(&mnt).expect("mount again after the cut");
        let s = start_server(&data, &ENV);
        let names = s.entry_names("b");
        let has = |name: &str| names.iter().any(|n| n == name);
        let (at_old, at_new) = (has(&old), has(&new));
        assert!(
            at_old != at_new,
            "round {round}: old name {at_old}, new name {at_new} in {names:?}"
        );
        if status == 200 {
            assert!(at_new, "round {round}: an acknowledged rename was lost");
        }
        let now = if at_new { &new } else { &old };
        assert!(
            has(&format!("{now}/c")),
            "round {round}: the child moved along"
        );
        for (entry, ts) in [(now.clone(), 1), (now.clone(), 2), (format!("{now}/c"), 1)] {
            let r = s.get(&format!("/api/v1/b/b/{entry}?ts={ts}"));
            assert_eq!(r.body, b"x", "round {round}: {entry} at {ts}");
        }
        if at_new {
            took_new += 1;
        } else {
            kept_old += 1;
        }
    }
    eprintln!("renames: {kept_old} kept the old name, {took_new} the new one");
    drop(mounted);
}

#[test]
#[cfg_attr(
    halflife_missing = "fuse",
    ignore = "needs FUSE (apt-get install fuse3, /dev/fuse); HALFLIFE_REQUIRE_FUSE=1 makes it a failure"
)]
fn a_renamed_bucket_survives_power_cuts_with_its_token_and_policy() {
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let fs = PowerFs::new();
    let mut mounted = fs.mount_for_test(&mnt);
    let data = mnt.join("data");
    let env = [
        ("RS_SYNC_MODE", "always"),
        ("RS_API_TOKEN", "cut-token"),
        ("RS_SYSTEM_EVENTS_ENABLED", "false"),
    ];
    let auth = [("authorization", "Bearer cut-token")];
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("power-cut bucket rename seed {seed}");
    let mut rng = Rng(seed | 1);
    let (mut kept_old, mut took_new) = (0, 0);
    for round in 0..8u64 {
        let (old, new) = (format!("b{round}"), format!("r{round}"));
        let s = start_server(&data, &env);
        let call = |method: &str, path: &str, body: &[u8]| {
            let r = s.request(method, path, &auth, body);
            assert_eq!(r.status, 200, "{method} {path}: {}", r.error());
        };
        call("POST", &format!("/api/v1/b/{old}"), b"");
        call("POST", &format!("/api/v1/b/{old}/e?ts=1"), b"x");
        call("POST", &format!("/api/v1/b/{old}/e/c?ts=2"), b"y");
        let permissions = format!(r#"{{"read":["{old}"]}}"#);
        call(
            "POST",
            &format!("/api/v1/tokens/t{round}"),
            permissions.as_bytes(),
        );
        let policy = format!(r#"{{"type":"delete","bucket":"{old}","older_than":"3650d"}}"#);
        call(
            "POST",
            &format!("/api/v1/lifecycles/p{round}"),
            policy.as_bytes(),
        );
        let task =
            format!(r#"{{"src_bucket":"{old}","dst_bucket":"d","dst_host":"http://127.0.0.1:1"}}"#);
        call(
            "POST",
            &format!("/api/v1/replications/rep{round}"),
            task.as_bytes(),
        );
        // The rename syncs the intent, the directory, the tokens, the policy journal, the
        // replication journal and the intent's removal: the cut lands after any of them,
        // or after the answer.
        let how = if rng.below(2) == 0 {
            Cut::Clean
        } else {
            Cut::Torn(rng.next())
        };
        fs.cut_after_syncs(1 + rng.below(9), how);
        let body = format!(r#"{{"new_name":"{new}"}}"#);
        let status = s
            .request(
                "PUT",
                &format!("/api/v1/b/{old}/rename"),
                &[auth[0], ("content-type", "application/json")],
                body.as_bytes(),
            )
            .status;
        if !fs.is_cut() {
            fs.cut(how);
        }
        drop(s);
        drop(mounted);
        mounted = fs.mount(&mnt).expect("mount again after the cut");
        let s = start_server(&data, &env);
        let exists = |b: &str| {
            s.request("GET", &format!("/api/v1/b/{b}"), &auth, b"")
                .status
                == 200
        };
        let (at_old, at_new) = (exists(&old), exists(&new));
        assert!(
            at_old != at_new,
            "round {round}: old {at_old}, new {at_new}"
        );
        if status == 200 {
            assert!(at_new, "round {round}: an acknowledged rename was lost");
        }
        let now = if at_new { &new } else { &old };
        for (entry, ts, body) in [("e", 1, b"x"), ("e/c", 2, b"y")] {
            let r = s.request(
                "GET",
                &format!("/api/v1/b/{now}/{entry}?ts={ts}"),
                &auth,
                b"",
            );
            assert_eq!(r.body, body, "round {round}: {entry}");
        }
        let token = s.request("GET", &format!("/api/v1/tokens/t{round}"), &auth, b"");
        assert_eq!(
            token.json()["permissions"]["read"],
            serde_json::json!([now]),
            "round {round}: the token follows the surviving name"
        );
        let task = s.request(
            "GET",
            &format!("/api/v1/replications/rep{round}"),
            &auth,
            b"",
        );
        assert_eq!(
            task.json()["settings"]["src_bucket"],
            now.as_str(),
            "round {round}: the replication follows the surviving name"
        );
        let policy = s.request("GET", &format!("/api/v1/lifecycles/p{round}"), &auth, b"");
        let policy = policy.json();
        assert_eq!(policy["settings"]["bucket"], now.as_str(), "round {round}");
        assert_eq!(
            policy["info"]["is_running"], true,
            "round {round}: {policy}"
        );
        if at_new {
            took_new += 1;
        } else {
            kept_old += 1;
        }
    }
    eprintln!("bucket renames: {kept_old} kept the old name, {took_new} the new one");
    drop(mounted);
}
