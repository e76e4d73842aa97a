//! `#ext.ros` extraction through the HTTP API against the `mcap` crate's own iteration over
//! the same bytes, in one run.
//!
//! The data: MCAP records of one second each of a robot's recording, written with the
//! `mcap` crate in chunks of 1 MiB as rosbag2 writes them (uncompressed, its default): a
//! camera topic (`sensor_msgs/msg/Image`, 640×480 `rgb8`, 10/s) and an IMU topic
//! (`sensor_msgs/msg/Imu`, 200/s), ~9.3 MB a record, 11 records (~100 MB).
//!
//! Printed: for the crate's `MessageStream` over the records' bytes in memory, and for a
//! query extracting the IMU topic from `halflife serve` (read to its end batch by batch),
//! MB/s of MCAP read and messages/s; and the ratio of the two (the goal: ≥ 0.5). The camera
//! topic extracted with its pixels as base64 is printed too.
//!
//! Run: `cargo bench --bench ros_extract`

#[path = "../tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::io::Cursor;
use std::time::Instant;

use common::{ServerProcess, read_query_v1, start_server};

const RECORDS: u64 = 11;
const FIRST_S: u64 = 1_753_341_400;
const WIDTH: u32 = 640;
const HEIGHT: u32 = 480;

const HEADER: &str = "================================================================================\n\
    MSG: std_msgs/Header\nbuiltin_interfaces/Time stamp\nstring frame_id\n\
    ================================================================================\n\
    MSG: builtin_interfaces/Time\nint32 sec\nuint32 nanosec\n";

/// A CDR message being written: little-endian, fields aligned from after the header.
struct Cdr(Vec<u8>);

impl Cdr {
    fn new() -> Self {
        Cdr(vec![0, 1, 0, 0])
    }
    fn align(&mut self, n: usize) {
        while !(self.0.len() - 4).is_multiple_of(n) {
            self.0.push(0);
        }
    }
    fn u32(&mut self, v: u32) {
        self.align(4);
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn f64(&mut self, v: f64) {
        self.align(8);
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn string(&mut self, s: &str) {
        self.u32(s.len() as u32 + 1);
        self.0.extend_from_slice(s.as_bytes());
        self.0.push(0);
    }
    fn header(&mut self, ns: u64, frame: &str) {
        self.u32((ns / 1_000_000_000) as u32);
        self.u32((ns % 1_000_000_000) as u32);
        self.string(frame);
    }
}

fn image(ns: u64, pixels: &[u8]) -> Vec<u8> {
    let mut c = Cdr::new();
    c.header(ns, "camera");
    c.u32(HEIGHT);
    c.u32(WIDTH);
    c.string("rgb8");
    c.0.push(0);
    c.u32(WIDTH * 3);
    c.u32(pixels.len() as u32);
    c.0.extend_from_slice(pixels);
    c.0
}

fn imu(ns: u64, i: u64) -> Vec<u8> {
    let mut c = Cdr::new();
    c.header(ns, "imu_link");
    let t = i as f64 / 200.0;
    for v in [0.0, 0.0, (t / 2.0).sin(), (t / 2.0).cos()] {
        c.f64(v);
    }
    for group in 0..3 {
        for k in 0..9 {
            c.f64(0.01 * k as f64 + group as f64);
        }
        if group < 2 {
            for v in [0.001 * i as f64, -0.002, 9.81] {
                c.f64(v);
            }
        }
    }
    c.0
}

/// Record `r`: one second of the recording as an MCAP file.
fn recording(r: u64) -> Vec<u8> {
    let mut w = mcap::WriteOptions::new()
        .compression(None)
        .chunk_size(Some(1 << 20))
        .profile("ros2")
        .create(Cursor::new(Vec::new()))
        .expect("writer");
    let image_schema = format!(
        "std_msgs/Header header\nuint32 height\nuint32 width\nstring encoding\nuint8 is_bigendian\nuint32 step\nuint8[] data\n{HEADER}"
    );
    let imu_schema = format!(
        "std_msgs/Header header\ngeometry_msgs/Quaternion orientation\nfloat64[9] orientation_covariance\n\
         geometry_msgs/Vector3 angular_velocity\nfloat64[9] angular_velocity_covariance\n\
         geometry_msgs/Vector3 linear_acceleration\nfloat64[9] linear_acceleration_covariance\n{HEADER}\
         ================================================================================\n\
         MSG: geometry_msgs/Quaternion\nfloat64 x\nfloat64 y\nfloat64 z\nfloat64 w\n\
         ================================================================================\n\
         MSG: geometry_msgs/Vector3\nfloat64 x\nfloat64 y\nfloat64 z\n"
    );
    let s1 = w
        .add_schema("sensor_msgs/msg/Image", "ros2msg", image_schema.as_bytes())
        .expect("schema");
    let s2 = w
        .add_schema("sensor_msgs/msg/Imu", "ros2msg", imu_schema.as_bytes())
        .expect("schema");
    let cam = w
        .add_channel(s1, "/camera/image_raw", "cdr", &BTreeMap::new())
        .expect("channel");
    let imu_channel = w
        .add_channel(s2, "/imu", "cdr", &BTreeMap::new())
        .expect("channel");
    let base = (FIRST_S + r) * 1_000_000_000;
    let mut pixels = vec![0u8; (WIDTH * HEIGHT * 3) as usize];
    for i in 0..200u64 {
        let ns = base + i * 5_000_000;
        if i % 20 == 0 {
            for (k, p) in pixels.iter_mut().enumerate() {
                *p = ((k as u64 * 7 + i + r) % 251) as u8;
            }
            let header = mcap::records::MessageHeader {
                channel_id: cam,
                sequence: i as u32,
                log_time: ns,
                publish_time: ns,
            };
            w.write_to_known_channel(&header, &image(ns, &pixels))
                .expect("image");
        }
        let header = mcap::records::MessageHeader {
            channel_id: imu_channel,
            sequence: i as u32,
            log_time: ns,
            publish_time: ns,
        };
        w.write_to_known_channel(&header, &imu(ns, i)).expect("imu");
    }
    w.finish().expect("finish");
    w.into_inner().into_inner()
}

fn load(s: &ServerProcess, records: &[Vec<u8>]) {
    assert_eq!(s.request("POST", "/api/v1/b/robots", &[], b"").status, 200);
    for (r, body) in records.iter().enumerate() {
        let path = format!(
            "/api/v1/b/robots/rec?ts={}",
            (FIRST_S + r as u64) * 1_000_000
        );
        let resp = s.request("POST", &path, &[("content-type", "application/mcap")], body);
        assert_eq!(resp.status, 200, "{}", resp.error());
    }
}

fn main() {
    let records: Vec<Vec<u8>> = (0..RECORDS).map(recording).collect();
    let bytes: usize = records.iter().map(Vec::len).sum();
    let mb = bytes as f64 / 1e6;

    // The crate's own iteration, over the bytes in memory (best of three).
    let mut crate_best = f64::MAX;
    let mut messages = 0u64;
    for _ in 0..3 {
        let start = Instant::now();
        messages = 0;
        for r in &records {
            for m in mcap::MessageStream::new(r).expect("stream") {
                std::hint::black_box(m.expect("message").data.len());
                messages += 1;
            }
        }
        crate_best = crate_best.min(start.elapsed().as_secs_f64());
    }

    // The same stream as the server reads it, in memory: the part of the extraction that
    // is not storage or HTTP.
    let mut stream_best = f64::MAX;
    for _ in 0..3 {
        let start = Instant::now();
        for r in &records {
            let payload = halflife::storage::Payload::from_vec(r.clone());
            let mut stream = halflife::ros::mcap_messages::McapMessages::new(payload, 256 << 20);
            while let Some(m) = stream.next_message(|m| m.data.len()) {
                std::hint::black_box(m.expect("message"));
            }
        }
        stream_best = stream_best.min(start.elapsed().as_secs_f64());
    }

    let dir = tempfile::tempdir().expect("tempdir");
    let s = start_server(dir.path(), &[("RS_SYNC_MODE", "never")]);
    load(&s, &records);
    let run = |topic: &str, extract: serde_json::Value| -> (f64, usize) {
        let body = serde_json::json!({"query_type": "QUERY", "when": {"#ext": {"ros": {"extract": extract}}}});
        let mut best = f64::MAX;
        let mut got = 0;
        for _ in 0..3 {
            let start = Instant::now();
            got = read_query_v1(&s, "robots", "rec", &body.to_string()).len();
            best = best.min(start.elapsed().as_secs_f64());
        }
        eprintln!("  {topic}: {got} records");
        (best, got)
    };
    // The records themselves, read by a plain query: what storage and HTTP cost alone.
    let mut plain_best = f64::MAX;
    for _ in 0..3 {
        let start = Instant::now();
        let got = read_query_v1(&s, "robots", "rec", r#"{"query_type":"QUERY"}"#);
        assert_eq!(got.len() as u64, RECORDS);
        plain_best = plain_best.min(start.elapsed().as_secs_f64());
    }
    let (imu_s, imu_n) = run("/imu", serde_json::json!({"topic": "/imu"}));
    let (cam_s, cam_n) = run(
        "/camera/image_raw, pixels as base64",
        serde_json::json!({"topic": "/camera/image_raw", "encode": {"data": "base64"}}),
    );

    eprintln!(
        "\nros extract: {RECORDS} MCAP records, {mb:.1} MB, {messages} messages (camera 640x480 rgb8 10/s, IMU 200/s), best of 3"
    );
    eprintln!(
        "  mcap crate MessageStream, in memory     {:>7.0} MB/s  {:>9.0} messages/s",
        mb / crate_best,
        messages as f64 / crate_best
    );
    eprintln!(
        "  halflife's message stream, in memory    {:>7.0} MB/s  {:>9.0} messages/s  ({:.2} × the crate)",
        mb / stream_best,
        messages as f64 / stream_best,
        crate_best / stream_best
    );
    eprintln!(
        "  halflife, the MCAP records by a plain query {:>3.0} MB/s (storage and HTTP alone)",
        mb / plain_best
    );
    eprintln!(
        "  halflife, /imu through HTTP             {:>7.0} MB/s  {:>9.0} messages/s read, {:>8.0} extracted/s  ({:.2} × the crate)",
        mb / imu_s,
        messages as f64 / imu_s,
        imu_n as f64 / imu_s,
        crate_best / imu_s
    );
    eprintln!(
        "  halflife, camera as base64 through HTTP {:>7.0} MB/s  {:>9.0} messages/s read, {:>8.0} extracted/s  ({:.2} × the crate)",
        mb / cam_s,
        messages as f64 / cam_s,
        cam_n as f64 / cam_s,
        crate_best / cam_s
    );
    eprintln!("  goal: /imu ≥ 0.5 × the crate");
}
