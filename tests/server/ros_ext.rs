//! `#ext.ros` over real HTTP: MCAP records written as a ROS 2 agent writes them, queried as
//! JSON messages of one topic, compared with what an independent implementation decodes
//! (`data-fixtures/ros2/generate.py`); the step's own `when` filters on computed labels;
//! bad parameters answer 422 naming them; a record that is not MCAP is reported and the
//! query goes on.

use crate::common;

use common::{ServerProcess, read_query_v1, start_server};
use serde_json::{Value, json};

const ZSTD: &[u8] = include_bytes!("../../data-fixtures/ros2/robot-zstd.mcap");
const LZ4: &[u8] = include_bytes!("../../data-fixtures/ros2/robot-lz4.mcap");
const EXPECTED: &str = include_str!("../../data-fixtures/ros2/expected.json");

fn store_recordings(s: &ServerProcess) {
    assert_eq!(s.request("POST", "/api/v1/b/robots", &[], b"").status, 200);
    for (ts, body) in [(1_000u64, ZSTD), (2_000, LZ4)] {
        let r = s.request(
            "POST",
            &format!("/api/v1/b/robots/rec?ts={ts}"),
            &[
                ("content-type", "application/mcap"),
                ("x-reduct-label-robot", "r1"),
            ],
            body,
        );
        assert_eq!(r.status, 200, "{}", r.error());
    }
}

fn labels_of(header: &str) -> Vec<(String, String)> {
    // `size,content-type,k=v,...` (no value of these fixtures holds a comma or a quote).
    header
        .splitn(3, ',')
        .nth(2)
        .unwrap_or_default()
        .split(',')
        .filter_map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect()
}

#[test]
fn a_topic_is_extracted_as_the_reference_decodes_it() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[]);
    store_recordings(&s);
    let expected: Vec<Value> = serde_json::from_str(EXPECTED).unwrap();
    for topic in ["/imu", "/odom", "/diagnostics", "/camera/image_raw"] {
        let body = json!({"query_type": "QUERY", "when": {"#ext": {"ros": {"extract": {"topic": topic}}}}});
        let got = read_query_v1(&s, "robots", "rec", &body.to_string());
        let want: Vec<&Value> = expected.iter().filter(|m| m["topic"] == topic).collect();
        // Both recordings hold the same messages.
        assert_eq!(got.len(), 2 * want.len(), "{topic}");
        for (i, (ts, header, payload)) in got.iter().enumerate() {
            let want = want[i % want.len()];
            let message: Value = serde_json::from_slice(payload).unwrap();
            assert_eq!(message, want["message"], "{topic} #{i}");
            let stamp = &want["message"]["header"]["stamp"];
            assert_eq!(
                *ts,
                stamp["sec"].as_u64().unwrap() * 1_000_000
                    + stamp["nanosec"].as_u64().unwrap() / 1000
            );
            assert!(header.contains(",application/json,"), "{header}");
            let labels = labels_of(header);
            for (k, v) in [("@topic", topic), ("@encoding", "cdr"), ("robot", "r1")] {
                assert!(labels.contains(&(k.to_string(), v.to_string())), "{header}");
            }
        }
    }
}

#[test]
fn the_steps_when_filters_on_computed_labels() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[]);
    store_recordings(&s);
    let expected: Vec<Value> = serde_json::from_str(EXPECTED).unwrap();
    // The outer `when` selects the stored record (one of the two); the step's filters
    // what it makes.
    let body = json!({
        "query_type": "QUERY",
        "when": {
            "&robot": {"$eq": "r1"},
            "$timestamp": {"$lt": 1500},
            "#ext": {
                "ros": {"extract": {"topic": "/imu", "as_label": {"y": "linear_acceleration.y"}}},
                "when": {"@y": {"$lt": -0.1}, "@topic": {"$eq": "/imu"}}
            }
        }
    });
    let got = read_query_v1(&s, "robots", "rec", &body.to_string());
    let want: Vec<&Value> = expected
        .iter()
        .filter(|m| {
            m["topic"] == "/imu"
                && m["message"]["linear_acceleration"]["y"].as_f64().unwrap() < -0.1
        })
        .collect();
    assert!(!want.is_empty() && want.len() < 200);
    assert_eq!(
        got.len(),
        want.len(),
        "one recording, the messages the step selects"
    );
    for ((_, header, payload), want) in got.iter().zip(&want) {
        assert_eq!(
            serde_json::from_slice::<Value>(payload).unwrap(),
            want["message"]
        );
        assert!(labels_of(header).iter().any(|(k, _)| k == "@y"), "{header}");
    }
    // Strict, as ReductStore's step conditions are: a message without the labeled field
    // (a diagnostics array with no status) fails the read, naming the label.
    let body = json!({"query_type": "QUERY", "when": {"#ext": {
        "ros": {"extract": {"topic": "/diagnostics", "as_label": {"level": "status.0.level"}}},
        "when": {"@level": {"$gte": 1}}
    }}});
    let r = s.request(
        "POST",
        "/api/v1/b/robots/rec/q",
        &[],
        body.to_string().as_bytes(),
    );
    let id = r.json()["id"].as_u64().unwrap();
    let r = s.get(&format!("/api/v1/b/robots/rec/batch?q={id}"));
    assert_eq!(r.status, 404, "{}", r.error());
    assert_eq!(r.error(), "Reference '@level' not found");
    // `$limit` in the step's condition counts the records it makes.
    let body = json!({"query_type": "QUERY", "when": {"#ext": {
        "ros": {"extract": {"topic": "/imu"}}, "when": {"$limit": 5}
    }}});
    assert_eq!(
        read_query_v1(&s, "robots", "rec", &body.to_string()).len(),
        5
    );
}

#[test]
fn bad_parameters_answer_422_naming_them_and_other_extensions_stay_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[]);
    store_recordings(&s);
    for (ext, says) in [
        (
            json!({"ros": {"extract": {}}}),
            "'extract.topic' is required",
        ),
        (
            json!({"ros": {"extract": {"topic": "/a", "encode": {"data": "gif"}}}}),
            "'extract.encode.data' must be",
        ),
        (
            json!({"ros": {"transform": {"include": ["("]}}}),
            "is not a regular expression",
        ),
        (
            json!({"ros": {"extract": {"topic": "/a"}, "transform": {}}}),
            "'extract' or 'transform', not both",
        ),
        (
            json!({"ros": {"extract": {"topic": "/a"}}, "when": {"$xx": 1}}),
            "not supported",
        ),
        (json!({"ros": 5}), "must be an object"),
        (
            json!({"video": {}}),
            "Unknown extension 'video' in query id=",
        ),
    ] {
        let body = json!({"query_type": "QUERY", "when": {"#ext": ext}});
        let r = s.request(
            "POST",
            "/api/v1/b/robots/rec/q",
            &[],
            body.to_string().as_bytes(),
        );
        assert_eq!(r.status, 422, "{ext}");
        assert!(r.error().contains(says), "{ext}: {}", r.error());
    }
    // The body's `ext` reads the same way.
    let body = json!({"query_type": "QUERY", "ext": {"ros": {"extract": {"topic": "/chatter"}}}});
    assert_eq!(
        read_query_v1(&s, "robots", "rec", &body.to_string()).len(),
        8
    );
}

#[test]
fn a_record_that_is_not_mcap_is_reported_and_the_query_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[]);
    store_recordings(&s);
    let r = s.request(
        "POST",
        "/api/v1/b/robots/rec?ts=1500",
        &[("content-type", "application/mcap")],
        &ZSTD[..ZSTD.len() / 2],
    );
    assert_eq!(r.status, 200);
    let body = json!({"query_type": "QUERY", "when": {"#ext": {"ros": {"extract": {"topic": "/chatter"}}}}});
    let got = read_query_v1(&s, "robots", "rec", &body.to_string());
    // The cut recording's first messages are read before its damage is met; both whole
    // recordings are read in full.
    let whole: Vec<&(u64, String, Vec<u8>)> = got
        .iter()
        .filter(|(_, h, _)| h.contains("robot=r1"))
        .collect();
    assert_eq!(whole.len(), 8, "{got:?}");
    assert!(
        s.get("/api/v1/b/robots").status == 200,
        "the server keeps serving"
    );
}

#[test]
fn transform_writes_episodes_of_the_topics_kept() {
    use halflife::ros::mcap_messages::McapMessages;
    use halflife::storage::Payload;
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[]);
    store_recordings(&s);
    let body = json!({"query_type": "QUERY", "when": {"#ext": {"ros": {
        "transform": {"include": ["^/imu$", "^/chatter$"], "duration": "1s"}
    }}}});
    let got = read_query_v1(&s, "robots", "rec", &body.to_string());
    // Each recording spans 2 s: two episodes of at most a second each.
    assert_eq!(
        got.len(),
        4,
        "{:?}",
        got.iter().map(|g| &g.1).collect::<Vec<_>>()
    );
    let mut topics = std::collections::BTreeMap::new();
    for (ts, header, mcap) in &got {
        assert!(header.contains(",application/mcap,"), "{header}");
        assert!(
            header.contains("robot=r1"),
            "the source record's labels: {header}"
        );
        let mut stream = McapMessages::new(Payload::from_vec(mcap.clone()), 1 << 20);
        let mut first = None;
        while let Some(m) = stream.next_message(|m| (m.channel.topic.clone(), m.log_time)) {
            let (topic, log_time) = m.unwrap();
            first.get_or_insert(log_time);
            *topics.entry(topic).or_insert(0) += 1;
        }
        assert_eq!(Some(*ts), first.map(|ns| ns / 1000));
    }
    assert_eq!(
        topics,
        [("/chatter".to_string(), 8), ("/imu".to_string(), 400)]
            .into_iter()
            .collect()
    );
}
