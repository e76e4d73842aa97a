//! A REPLICA on the data directory of a server that tiers blocks to Garage: while the
//! writer writes and moves sealed blocks to the remote (their files replaced by stubs),
//! every read on the replica is the record's bytes or a 404 — never a 5xx — and once it
//! has looked again every record reads back byte-exact, tiered or not.

use serde_json::json;

use crate::common::garage::{Garage, garage};
use crate::common::{Connection, ServerProcess, start_server, wait_until};

/// A payload telling record `i` apart.
pub fn payload(i: u64) -> Vec<u8> {
    let mut p = format!("frame {i} ").into_bytes();
    p.extend((0..1500).map(|k| ((k * 11 + i) % 256) as u8));
    p
}

/// Record `i`'s timestamp.
pub fn ts(i: u64) -> u64 {
    1_000_000 + i
}

/// A server on `data` with remote `cold` on `garage` and `extra` settings.
pub fn serve(
    data: &std::path::Path,
    secrets: &std::path::Path,
    garage: &Garage,
    extra: &[(&str, &str)],
) -> ServerProcess {
    let mut env = garage.remote_env("cold", "srv", secrets);
    env.push(("RS_LIFECYCLE_MIN_INTERVAL".into(), "1s".into()));
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    start_server(data, &refs)
}

#[test]
#[cfg_attr(
    halflife_missing = "garage",
    ignore = "needs Garage (cargo install garage --version 2.5.0 --locked); HALFLIFE_REQUIRE_GARAGE=1 makes it a failure"
)]
fn a_replica_reads_right_while_its_writer_tiers_blocks_away() {
    let bin = garage();
    let garage = Garage::single(&bin);
    let dir = tempfile::tempdir().unwrap();
    let secrets = tempfile::tempdir().unwrap();
    let writer = serve(dir.path(), secrets.path(), &garage, &[]);
    let r = writer.request("POST", "/api/v1/b/b", &[], br#"{"max_block_records": 20}"#);
    assert_eq!(r.status, 200, "{}", r.error());
    let policy =
        json!({"type":"tier","bucket":"b","older_than":"1h","interval":"1h","remote":"cold"});
    let r = writer.request(
        "POST",
        "/api/v1/lifecycles/cold",
        &[],
        policy.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.error());
    let replica = serve(
        dir.path(),
        secrets.path(),
        &garage,
        &[
            ("RS_INSTANCE_ROLE", "REPLICA"),
            ("RS_ENGINE_REPLICA_UPDATE_INTERVAL", "0.1"),
            ("RS_REMOTE_CACHE_SIZE", "64KiB"),
        ],
    );
    let mut w = Connection::open(writer.addr);
    let mut c = Connection::open(replica.addr);
    let (mut found, mut missing) = (0u64, 0u64);
    for round in 0..6u64 {
        for i in round * 60..(round + 1) * 60 {
            let path = format!("/api/v1/b/b/e?ts={}", ts(i));
            assert_eq!(w.call("POST", &path, &[], &payload(i)).status, 200);
        }
        // The replica has looked since (the round's last record shows), then a tier
        // run, and reads on the replica while it moves the blocks.
        let last = format!("/api/v1/b/b/e?ts={}", ts((round + 1) * 60 - 1));
        wait_until("the replica serves the round's records", || {
            c.call("GET", &last, &[], b"").status == 200
        });
        let r = w.call("POST", "/api/v1/lifecycles/cold/run", &[], b"");
        assert!(r.status == 200 || r.status == 409, "{}", r.error());
        for k in 0..200u64 {
            let i = (k * 37) % ((round + 1) * 60);
            let r = c.call("GET", &format!("/api/v1/b/b/e?ts={}", ts(i)), &[], b"");
            match r.status {
                200 => {
                    assert_eq!(r.body, payload(i), "record {i} is not byte-exact");
                    found += 1;
                }
                404 => missing += 1,
                other => panic!("record {i}: {other} {}", r.error()),
            }
        }
    }
    wait_until("the writer's blocks are on the remote", || {
        writer
            .get("/api/v1/b/b/storage")
            .json()
            .to_string()
            .contains("remote cold")
    });
    // The replica sees them as the writer does.
    wait_until("the replica sees the tiered blocks", || {
        replica
            .get("/api/v1/b/b/storage")
            .json()
            .to_string()
            .contains("remote cold")
    });
    // Every record, tiered or not, from the replica once it has looked again.
    wait_until("the replica serves the newest record", || {
        c.call("GET", &format!("/api/v1/b/b/e?ts={}", ts(359)), &[], b"")
            .status
            == 200
    });
    for i in 0..360 {
        let r = c.call("GET", &format!("/api/v1/b/b/e?ts={}", ts(i)), &[], b"");
        assert_eq!(r.status, 200, "record {i}: {}", r.error());
        assert_eq!(r.body, payload(i), "record {i} is not byte-exact");
    }
    assert!(found > 100, "{found} found, {missing} missing");
}

/// A replica's query that has begun reading a tiered block whose records the writer then
/// removes (its object deleted from the remote) goes on: the records it cannot fetch any
/// more are left out, the rest read byte-exact, and no error ends the query.
#[test]
#[cfg_attr(
    halflife_missing = "garage",
    ignore = "needs Garage (cargo install garage --version 2.5.0 --locked); HALFLIFE_REQUIRE_GARAGE=1 makes it a failure"
)]
fn a_replica_query_goes_on_when_the_writer_removes_a_tiered_block_under_it() {
    use super::library::{fill, payload as record_payload, store_with, tier_all};
    use halflife::storage::QueryOptions;
    let bin = garage();
    let garage = Garage::single(&bin);
    let dir = tempfile::tempdir().unwrap();
    // A frame per record: the replica fetches each payload on its own.
    let writer = store_with(dir.path(), garage.settings("cold", "rq"), |c| {
        c.frame_size = 64;
    });
    fill(&writer, 100, 20);
    assert_eq!(tier_all(&writer, u64::MAX).blocks, 4);
    // Caches too small to keep a frame: every payload is fetched when it is read.
    let replica = store_with(dir.path(), garage.settings("cold", "rq"), |c| {
        c.read_only = true;
        c.frame_size = 64;
        c.remote_cache_in_memory = true;
        c.remote_cache_bytes = 0;
        c.frame_cache_bytes = 0;
        c.block_cache = 1;
    });
    let query = QueryOptions {
        entries: vec!["e".to_string()],
        ..Default::default()
    };
    let mut records = replica.bucket("b").unwrap().query(&query).unwrap();
    let first = records.next().unwrap().unwrap();
    assert_eq!(first.meta.timestamp, 1);
    // The writer removes the rest of the first block and deletes its object.
    let bucket = writer.bucket("b").unwrap();
    bucket.remove_records(&["e".into()], 0, 21, None).unwrap();
    assert_eq!(writer.delete_pending_objects(false).deleted, 1);
    let rest: Vec<u64> = records
        .map(|r| {
            let r = r.unwrap();
            let ts = r.meta.timestamp;
            assert_eq!(
                r.payload.unwrap().as_slice(),
                record_payload(ts),
                "record {ts}"
            );
            ts
        })
        .collect();
    // Records 2..=20 fetched before the removal may still come (the replica answers
    // from the state it had); then the rest, in order, each once.
    let split = rest.iter().position(|&ts| ts > 20).unwrap();
    assert!(
        rest[..split].iter().all(|ts| (2..=20).contains(ts)),
        "{rest:?}"
    );
    assert!(rest[..split].windows(2).all(|w| w[0] < w[1]), "{rest:?}");
    assert_eq!(rest[split..], (21..=100).collect::<Vec<u64>>()[..]);
}
