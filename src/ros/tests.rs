//! The extraction compared with what an independent implementation decodes (Foxglove's
//! Python `mcap-ros2-support`, `data-fixtures/ros2/generate.py`), message by message, and
//! damaged or hostile MCAP answered with errors, never a panic.

use std::collections::BTreeMap;
use std::io::Cursor;

use serde_json::Value as Json;

use super::cdr::Binary;
use super::extract::{ExtractOptions, Extractor};
use super::mcap_messages::McapMessages;
use crate::storage::record::{Labels, Payload};

const FIXTURES: [&[u8]; 3] = [
    include_bytes!("../../data-fixtures/ros2/robot-zstd.mcap"),
    include_bytes!("../../data-fixtures/ros2/robot-lz4.mcap"),
    include_bytes!("../../data-fixtures/ros2/robot-none.mcap"),
];
const EXPECTED: &str = include_str!("../../data-fixtures/ros2/expected.json");
const TOPICS: [&str; 6] = [
    "/imu",
    "/odom",
    "/joint_states",
    "/camera/image_raw",
    "/diagnostics",
    "/chatter",
];

fn topic_options(topic: &str) -> ExtractOptions {
    ExtractOptions {
        topic: topic.into(),
        binary: Vec::new(),
        labels: Vec::new(),
    }
}

/// Every message of `topic` in `mcap`, extracted: (timestamp, labels, JSON).
fn extract_all(mcap: &[u8], options: ExtractOptions) -> Result<Vec<(u64, Labels, Json)>, String> {
    let mut source = Labels::new();
    source.insert("robot".into(), "r1".into());
    let mut extractor = Extractor::new(options);
    let mut out = Vec::new();
    let mut messages = McapMessages::new(Payload::from_vec(mcap.to_vec()), 1 << 20);
    while let Some(extracted) =
        messages.next_message(|m| extractor.wants(&m).then(|| extractor.extract(&m, &source)))
    {
        if let Some(x) = extracted? {
            let x = x?;
            assert_eq!(x.meta.size as usize, x.json.len());
            assert_eq!(x.meta.content_type, "application/json");
            let json = serde_json::from_slice(&x.json).map_err(|e| format!("not JSON: {e}"))?;
            out.push((x.meta.timestamp, x.meta.labels, json));
        }
    }
    Ok(out)
}

#[test]
fn every_message_decodes_as_the_reference_implementation_decodes_it() {
    let expected: Vec<Json> = serde_json::from_str(EXPECTED).unwrap();
    for (f, mcap) in FIXTURES.iter().enumerate() {
        for topic in TOPICS {
            let want: Vec<&Json> = expected.iter().filter(|m| m["topic"] == topic).collect();
            let got = extract_all(mcap, topic_options(topic)).unwrap();
            assert_eq!(got.len(), want.len(), "file {f}, {topic}");
            assert!(!got.is_empty());
            for ((ts, labels, json), want) in got.iter().zip(&want) {
                assert_eq!(json, &want["message"], "file {f}, {topic}");
                // Stamped from the header where there is one, else the log time.
                let stamp = &want["message"]["header"]["stamp"];
                let expected_ts = match stamp.is_object() {
                    true => {
                        stamp["sec"].as_u64().unwrap() * 1_000_000
                            + stamp["nanosec"].as_u64().unwrap() / 1000
                    }
                    false => want["log_time"].as_u64().unwrap() / 1000,
                };
                assert_eq!(*ts, expected_ts, "{topic}");
                assert_eq!(labels["@topic"], topic);
                assert_eq!(labels["@schema"], want["schema"].as_str().unwrap());
                assert_eq!(labels["@encoding"], "cdr");
                assert_eq!(labels["robot"], "r1", "the source record's labels are kept");
            }
        }
    }
}

#[test]
fn labels_from_paths_and_binary_fields_as_base64() {
    use base64::Engine;
    let expected: Vec<Json> = serde_json::from_str(EXPECTED).unwrap();
    let options = ExtractOptions::parse(&serde_json::json!({
        "topic": "/camera/image_raw",
        "encode": {"data": "base64"},
        "as_label": {"enc": "encoding", "@frame": "header.frame_id", "height": "height", "missing": "nope.x"}
    }))
    .unwrap();
    assert_eq!(options.binary, vec![("data".to_string(), Binary::Base64)]);
    let got = extract_all(FIXTURES[0], options).unwrap();
    let want: Vec<&Json> = expected
        .iter()
        .filter(|m| m["topic"] == "/camera/image_raw")
        .collect();
    for ((_, labels, json), want) in got.iter().zip(want) {
        let m = &want["message"];
        assert_eq!(labels["@enc"], m["encoding"].as_str().unwrap());
        assert_eq!(labels["@frame"], "camera");
        assert_eq!(labels["@height"], "12");
        assert!(!labels.contains_key("@missing"));
        let data = base64::engine::general_purpose::STANDARD
            .decode(json["data"].as_str().unwrap())
            .unwrap();
        let want_data: Vec<u8> = m["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u8)
            .collect();
        assert_eq!(data, want_data);
        assert_eq!(json["width"], m["width"]);
    }
    // Paths into arrays: `status.0.name` and `status[0].name` are one path.
    let options = ExtractOptions::parse(&serde_json::json!({
        "topic": "/diagnostics", "as_label": {"first": "status.0.name", "key": "status[1].values[0].key"}
    }))
    .unwrap();
    let got = extract_all(FIXTURES[0], options).unwrap();
    let labeled: Vec<(Option<&String>, Option<&String>)> = got
        .iter()
        .map(|(_, l, _)| (l.get("@first"), l.get("@key")))
        .collect();
    assert!(
        labeled
            .iter()
            .any(|(f, k)| f.is_some_and(|f| f == "motor 0") && k.is_some_and(|k| k == "temp"))
    );
    assert!(
        labeled.iter().any(|(f, _)| f.is_none()),
        "an empty status list has no first"
    );
}

#[test]
fn bad_extract_parameters_are_named() {
    for (params, says) in [
        (serde_json::json!({}), "'extract.topic' is required"),
        (
            serde_json::json!({"topic": 1}),
            "'extract.topic' must be a string",
        ),
        (
            serde_json::json!({"topic": "/a", "encode": {"data": "png"}}),
            "'extract.encode.data' must be",
        ),
        (
            serde_json::json!({"topic": "/a", "as_label": {"x": 1}}),
            "'extract.as_label.x' must be",
        ),
        (
            serde_json::json!({"topic": "/a", "topics": 1}),
            "unknown 'extract' parameter 'topics'",
        ),
        (serde_json::json!("x"), "must be an object"),
    ] {
        let err = ExtractOptions::parse(&params).unwrap_err();
        assert!(err.contains(says), "{params}: {err}");
    }
}

#[test]
fn truncated_and_damaged_files_end_in_an_error_never_a_panic() {
    for mcap in FIXTURES {
        for cut in [0, 4, 8, 9, 100, mcap.len() / 3, mcap.len() / 2] {
            let result = extract_all(&mcap[..cut], topic_options("/imu"));
            assert!(
                result.is_err(),
                "cut at {cut} of {} read as whole",
                mcap.len()
            );
        }
        // Cut in its summary: the data section is whole, and read whole (the summary
        // repeats what the data declared).
        let whole = extract_all(mcap, topic_options("/imu")).unwrap();
        let cut = extract_all(&mcap[..mcap.len() - 1], topic_options("/imu")).unwrap();
        assert_eq!(cut, whole);
        // A byte flipped anywhere (every 97th): an error or, where the byte did not
        // matter (padding, an unread summary), the messages; never a panic.
        for at in (0..mcap.len()).step_by(97) {
            let mut damaged = mcap.to_vec();
            damaged[at] ^= 0x55;
            for topic in ["/imu", "/camera/image_raw", "/diagnostics"] {
                let _ = extract_all(&damaged, topic_options(topic));
            }
        }
    }
}

/// An in-memory MCAP of one topic: `schema` (name, encoding, text), messages `data`.
fn recording(
    schema: (&str, &str, &str),
    data: &[&[u8]],
    compression: Option<mcap::Compression>,
) -> Vec<u8> {
    let mut writer = mcap::WriteOptions::new()
        .compression(compression)
        .create(Cursor::new(Vec::new()))
        .unwrap();
    let schema_id = writer
        .add_schema(schema.0, schema.1, schema.2.as_bytes())
        .unwrap();
    let channel = writer
        .add_channel(schema_id, "/t", "cdr", &BTreeMap::new())
        .unwrap();
    for (i, d) in data.iter().enumerate() {
        let header = mcap::records::MessageHeader {
            channel_id: channel,
            sequence: i as u32,
            log_time: 1_000_000 * (i as u64 + 1),
            publish_time: 0,
        };
        writer.write_to_known_channel(&header, d).unwrap();
    }
    writer.finish().unwrap();
    writer.into_inner().into_inner()
}

#[test]
fn schemas_and_messages_that_do_not_decode_are_named() {
    let good: &[u8] = &[0, 1, 0, 0, 7, 0, 0, 0];
    /// A schema as (name, encoding, text).
    type Schema<'s> = (&'s str, &'s str, &'s str);
    let cases: [(Schema, &[u8], &str); 5] = [
        (
            ("p/msg/T", "protobuf", "int32 x"),
            good,
            "only 'ros2msg' is read",
        ),
        (
            ("p/msg/T", "ros2msg", "Unknown x"),
            good,
            "schema 'p/msg/T' does not parse",
        ),
        (
            ("p/msg/T", "ros2msg", "int32 x\nint64 y"),
            good,
            "ends before its schema does",
        ),
        (
            ("p/msg/T", "ros2msg", "int32 x"),
            &[0, 1],
            "shorter than its CDR header",
        ),
        (
            ("p/msg/T", "ros2msg", "int32[] x"),
            &[0, 1, 0, 0, 0xff, 0xff, 0xff, 0x7f],
            "exceeds the",
        ),
    ];
    for (schema, data, says) in cases {
        let mcap = recording(schema, &[data], None);
        let err = extract_all(&mcap, topic_options("/t")).unwrap_err();
        assert!(err.contains(says), "{schema:?}: {err}");
        assert!(
            err.contains("message 0 of topic '/t'") || err.contains("schema"),
            "{err}"
        );
    }
    let mcap = recording(("p/msg/T", "ros2msg", "int32 x"), &[good], None);
    let got = extract_all(&mcap, topic_options("/t")).unwrap();
    assert_eq!(got[0].2, serde_json::json!({"x": 7}));
    assert_eq!(got[0].0, 1_000, "no header: the log time, in microseconds");
}

#[test]
fn a_chunk_or_message_larger_than_the_limit_is_refused_before_it_is_buffered() {
    let big = vec![7u8; 3 << 20];
    let mut cdr = vec![0, 1, 0, 0];
    cdr.extend_from_slice(&(big.len() as u32).to_le_bytes());
    cdr.extend_from_slice(&big);
    for compression in [
        None,
        Some(mcap::Compression::Zstd),
        Some(mcap::Compression::Lz4),
    ] {
        let mcap = recording(("p/msg/T", "ros2msg", "uint8[] data"), &[&cdr], compression);
        let err = extract_all(&mcap, topic_options("/t")).unwrap_err();
        assert!(
            err.to_lowercase().contains("length") || err.contains("limit"),
            "{compression:?}: {err}"
        );
    }
    // A chunk that claims 4 GiB uncompressed.
    let mcap = recording(
        ("p/msg/T", "ros2msg", "int32 x"),
        &[&[0, 1, 0, 0, 1, 0, 0, 0]],
        Some(mcap::Compression::Zstd),
    );
    let mut patched = mcap.clone();
    let mut at = 8;
    while at + 9 <= patched.len() {
        let op = patched[at];
        let len = u64::from_le_bytes(patched[at + 1..at + 9].try_into().unwrap()) as usize;
        if op == 0x06 {
            // start time, end time, then the uncompressed size.
            patched[at + 9 + 16..at + 9 + 24].copy_from_slice(&(4u64 << 30).to_le_bytes());
            break;
        }
        at += 9 + len;
    }
    assert_ne!(patched, mcap, "the chunk was found");
    assert!(extract_all(&patched, topic_options("/t")).is_err());
}

#[test]
fn images_encode_as_jpeg_in_each_pixel_encoding() {
    use base64::Engine;
    let expected: Vec<Json> = serde_json::from_str(EXPECTED).unwrap();
    let want: Vec<&Json> = expected
        .iter()
        .filter(|m| m["topic"] == "/camera/image_raw")
        .collect();
    let options = ExtractOptions::parse(
        &serde_json::json!({"topic": "/camera/image_raw", "encode": {"data": "jpeg"}}),
    )
    .unwrap();
    let got = extract_all(FIXTURES[1], options).unwrap();
    assert_eq!(got.len(), want.len());
    let mut seen = std::collections::BTreeSet::new();
    for ((_, _, json), want) in got.iter().zip(want) {
        let m = &want["message"];
        let encoding = m["encoding"].as_str().unwrap();
        seen.insert(encoding.to_string());
        let jpeg = base64::engine::general_purpose::STANDARD
            .decode(json["data"].as_str().unwrap())
            .unwrap();
        let mut decoder = jpeg_decoder::Decoder::new(&jpeg[..]);
        let pixels = decoder.decode().unwrap();
        let info = decoder.info().unwrap();
        assert_eq!((info.width, info.height), (16, 12));
        let source: Vec<u8> = m["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u8)
            .collect();
        // The decoder gives RGB (or gray): a bgr8 source is compared channel-swapped.
        let source: Vec<u8> = match encoding {
            "bgr8" => source.chunks(3).flat_map(|p| [p[2], p[1], p[0]]).collect(),
            _ => source,
        };
        assert_eq!(pixels.len(), source.len(), "{encoding}");
        let error: u64 = pixels
            .iter()
            .zip(&source)
            .map(|(a, b)| u64::from(a.abs_diff(*b)))
            .sum();
        assert!(
            error / (source.len() as u64) < 24,
            "{encoding}: mean error {}",
            error / source.len() as u64
        );
        assert_eq!(json["width"], 16, "the other fields stay");
    }
    assert_eq!(seen.len(), 3, "rgb8, bgr8 and mono8 were all encoded");

    // An image in another encoding: the message's error names it.
    let mut cdr = vec![0, 1, 0, 0];
    for v in [1u32, 1] {
        cdr.extend_from_slice(&v.to_le_bytes());
    }
    cdr.extend_from_slice(&6u32.to_le_bytes());
    cdr.extend_from_slice(b"rgb16\0");
    cdr.extend_from_slice(&[0, 0]);
    cdr.extend_from_slice(&6u32.to_le_bytes());
    cdr.extend_from_slice(&6u32.to_le_bytes());
    cdr.extend_from_slice(&[1, 2, 3, 4, 5, 6]);
    let schema = "uint32 height\nuint32 width\nstring encoding\nuint32 step\nuint8[] data";
    let mcap = recording(("sensor_msgs/msg/Image", "ros2msg", schema), &[&cdr], None);
    let plain = extract_all(&mcap, topic_options("/t")).unwrap();
    assert_eq!(plain[0].2["encoding"], "rgb16");
    let jpeg =
        ExtractOptions::parse(&serde_json::json!({"topic": "/t", "encode": {"data": "jpeg"}}))
            .unwrap();
    let err = extract_all(&mcap, jpeg).unwrap_err();
    assert!(
        err.contains(
            "field 'data': JPEG encoding needs an image in rgb8, bgr8 or mono8, not 'rgb16'"
        ),
        "{err}"
    );
}

/// The messages of an episode: (topic, sequence, log time, data).
fn episode_messages(mcap: &[u8]) -> Vec<(String, u32, u64, Vec<u8>)> {
    let mut stream = McapMessages::new(Payload::from_vec(mcap.to_vec()), 1 << 20);
    let mut out = Vec::new();
    while let Some(m) = stream.next_message(|m| {
        (
            m.channel.topic.clone(),
            m.sequence,
            m.log_time,
            m.data.to_vec(),
        )
    }) {
        out.push(m.unwrap());
    }
    out
}

/// The episodes `options` make of `mcap`.
fn transform_all(mcap: &[u8], options: &serde_json::Value) -> Vec<super::transform::Episode> {
    let options = super::transform::TransformOptions::parse(options).unwrap();
    let mut transformer = super::transform::Transformer::new(options, Labels::new());
    let mut stream = McapMessages::new(Payload::from_vec(mcap.to_vec()), 1 << 20);
    let mut episodes = Vec::new();
    while let Some(made) = stream.next_message(|m| transformer.add(&m)) {
        episodes.extend(made.unwrap().unwrap());
    }
    episodes.extend(transformer.finish().unwrap());
    episodes
}

#[test]
fn transform_keeps_the_topics_asked_for_in_episodes_cut_by_duration_and_size() {
    let source = episode_messages(FIXTURES[0]);
    let kept = |topics: &[&str]| -> Vec<(String, u32, u64, Vec<u8>)> {
        source
            .iter()
            .filter(|m| topics.contains(&m.0.as_str()))
            .cloned()
            .collect()
    };
    // `include` first, then `exclude`; a search, so `^…$` is exact.
    let episodes = transform_all(
        FIXTURES[1],
        &serde_json::json!({"include": ["^/imu$", "/odom", "/camera/.*"], "exclude": ["image_raw"], "duration": "500ms"}),
    );
    let mut all = Vec::new();
    for e in &episodes {
        let messages = episode_messages(&e.mcap);
        assert_eq!(e.meta.content_type, "application/mcap");
        assert_eq!(e.meta.size as usize, e.mcap.len());
        assert_eq!(
            e.meta.timestamp,
            messages[0].2 / 1000,
            "stamped with its first message"
        );
        let span = messages.last().unwrap().2 - messages[0].2;
        assert!(span < 500_000_000, "{span} ns in one episode");
        all.extend(messages);
    }
    assert_eq!(
        all,
        kept(&["/imu", "/odom"]),
        "every kept message once, byte-exact, in order"
    );
    assert!(
        episodes.len() >= 4,
        "2 s of recording in episodes of 0.5 s: {}",
        episodes.len()
    );

    // Cut by size: no episode holds more than 4 kB of messages unless one message does.
    let episodes = transform_all(
        FIXTURES[2],
        &serde_json::json!({"exclude": ["^/imu$"], "size": "4KB"}),
    );
    let mut all = Vec::new();
    for e in &episodes {
        let messages = episode_messages(&e.mcap);
        let bytes: usize = messages.iter().map(|m| m.3.len()).sum();
        assert!(
            bytes <= 4000 || messages.len() == 1,
            "{bytes} bytes in {} messages",
            messages.len()
        );
        all.extend(messages);
    }
    let others: Vec<&str> = TOPICS.iter().copied().filter(|t| *t != "/imu").collect();
    assert_eq!(all, kept(&others));
    // Nothing kept: no episode.
    assert!(transform_all(FIXTURES[0], &serde_json::json!({"include": ["^/nothing$"]})).is_empty());
}

#[test]
fn bad_transform_parameters_are_named() {
    use super::transform::TransformOptions;
    for (params, says) in [
        (
            serde_json::json!({"include": "/a"}),
            "'transform.include' must be an array",
        ),
        (
            serde_json::json!({"exclude": ["("]}),
            "'transform.exclude': \"(\" is not a regular expression",
        ),
        (
            serde_json::json!({"include": [1]}),
            "'transform.include' holds 1",
        ),
        (
            serde_json::json!({"duration": "soon"}),
            "'transform.duration'",
        ),
        (serde_json::json!({"duration": "0s"}), "must be positive"),
        (
            serde_json::json!({"size": "0"}),
            "'transform.size' must be between",
        ),
        (
            serde_json::json!({"size": "1TB"}),
            "'transform.size' must be between",
        ),
        (
            serde_json::json!({"size": 5}),
            "'transform.size' must be a size",
        ),
        (
            serde_json::json!({"topics": []}),
            "unknown 'transform' parameter 'topics'",
        ),
    ] {
        let err = TransformOptions::parse(&params).unwrap_err();
        assert!(err.contains(says), "{params}: {err}");
    }
}

#[test]
fn a_message_whose_json_passes_the_budget_fails_without_building_it_all() {
    use super::cdr::{Limits, decode};
    use super::msgdef::MsgDefs;
    let defs = MsgDefs::parse("p/msg/T", "uint8[] data").unwrap();
    let mut cdr = vec![0, 1, 0, 0];
    cdr.extend_from_slice(&(1u32 << 20).to_le_bytes());
    cdr.extend(std::iter::repeat_n(200u8, 1 << 20));
    let limits = |max_json| Limits {
        max_json,
        binary: &[],
        capture: &[],
    };
    // A megabyte of 200s is 4 MB of JSON: over a 64 KiB budget, refused; within 8 MiB, read.
    let err = decode(&defs, &cdr, &limits(64 << 10)).unwrap_err();
    assert!(err.contains("more than 65536 bytes of JSON"), "{err}");
    let ok = decode(&defs, &cdr, &limits(8 << 20)).unwrap();
    // `{"data":[` and `]}` around a million "200" and the commas between them.
    assert_eq!(ok.json.len(), 9 + (1 << 20) * 3 + ((1 << 20) - 1) + 2);
}
