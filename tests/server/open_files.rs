//! File descriptors are bounded: logs hold a descriptor only while in the LRU of open
//! files, so 5,000 entries (each with an open log) and hundreds of edited blocks are
//! written, restarted and read back by a server whose limit is 512 descriptors — as under
//! a user's `ulimit -n` — and the server never holds more than that.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

const ENTRIES: usize = 5_000;
const EDITED: usize = 600;
const LIMIT: u64 = 512;

/// A tmpfs for the data (fsyncs cost nothing there, so 5,000 entry creations take
/// seconds); where mounting is refused (no root), a plain temporary directory.
struct DataDir {
    _tmp: tempfile::TempDir,
    path: PathBuf,
    mounted: bool,
}

impl DataDir {
    fn new() -> DataDir {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("data");
        std::fs::create_dir_all(&path).expect("mkdir");
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=512m", "tmpfs"])
            .arg(&path)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            eprintln!(
                "tmpfs not mountable here: the data goes to {}",
                path.display()
            );
        }
        DataDir {
            _tmp: tmp,
            path,
            mounted,
        }
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for DataDir {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount").arg(&self.path).status();
        }
    }
}

fn start(data: &Path) -> ServerProcess {
    let env = [
        ("RS_BUCKET_B_NAME", "b"),
        ("RS_BUCKET_B_MAX_BLOCK_RECORDS", "2"),
        ("RS_LOG_LEVEL", "info"),
        // Descriptors are what is tested, not durability: fewer syncs where the data
        // cannot go to a tmpfs.
        ("RS_SYNC_MODE", "never"),
    ];
    try_start_server_limited(data, &env, Some(LIMIT))
        .unwrap_or_else(|(status, log)| panic!("the server starts ({status}): {log:#?}"))
}

#[test]
fn five_thousand_entries_under_a_512_descriptor_limit() {
    let data = DataDir::new();
    let server = start(data.path());
    assert!(server.logged("open file limit: 512"), "the limit is logged");
    let mut conn = Connection::open(server.addr);
    for i in 0..ENTRIES {
        let resp = conn.call("POST", &format!("/api/v1/b/b/e{i}?ts=1"), &[], b"one");
        assert_eq!(resp.status, 200, "entry {i}: {}", resp.error());
    }
    // Edit logs: two records seal a block, a removal in it appends to its edit log.
    for i in 0..EDITED {
        for ts in [2, 3] {
            let resp = conn.call("POST", &format!("/api/v1/b/b/e{i}?ts={ts}"), &[], b"more");
            assert_eq!(resp.status, 200, "entry {i}: {}", resp.error());
        }
        let resp = conn.call("DELETE", &format!("/api/v1/b/b/e{i}?ts=1"), &[], b"");
        assert_eq!(resp.status, 200, "entry {i}: {}", resp.error());
    }
    let open = server.open_descriptors();
    assert!(open <= LIMIT as usize, "{open} descriptors open");
    drop(conn);
    let (status, _) = server.terminate();
    assert!(status.success());

    let server = start(data.path());
    let mut conn = Connection::open(server.addr);
    for i in 0..ENTRIES {
        let ts = if i < EDITED { 2 } else { 1 };
        let resp = conn.call("GET", &format!("/api/v1/b/b/e{i}?ts={ts}"), &[], b"");
        assert_eq!(resp.status, 200, "entry {i}: {}", resp.error());
        if i < EDITED {
            let gone = conn.call("GET", &format!("/api/v1/b/b/e{i}?ts=1"), &[], b"");
            assert_eq!(
                gone.status, 404,
                "entry {i}: the removal survived the restart"
            );
        }
    }
    // Writes into every entry after the restart still work.
    for i in (0..ENTRIES).step_by(7) {
        let resp = conn.call("POST", &format!("/api/v1/b/b/e{i}?ts=10"), &[], b"after");
        assert_eq!(resp.status, 200, "entry {i}: {}", resp.error());
    }
    let open = server.open_descriptors();
    assert!(open <= LIMIT as usize, "{open} descriptors open");
}

#[test]
fn out_of_descriptors_the_server_refuses_connections_instead_of_spinning_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let s = try_start_server_limited(dir.path(), &[("RS_HTTP_THREADS", "2")], Some(64))
        .unwrap_or_else(|(status, log)| panic!("the server did not start ({status}): {log:?}"));
    // One connection kept from before the descriptors run out.
    let mut kept = Connection::open(s.addr);
    assert_eq!(kept.call("GET", "/api/v1/alive", &[], b"").status, 200);
    // Far more connections than descriptors are left: the ones past the limit are
    // answered 503 and closed rather than left in the backlog.
    let mut crowd = Vec::new();
    for _ in 0..120 {
        if let Ok(c) = std::net::TcpStream::connect(s.addr) {
            crowd.push(c);
        }
    }
    // Each asks for /alive: the accepted ones are answered 200, the others were 503.
    let mut refused = 0;
    for c in &mut crowd {
        let _ = std::io::Write::write_all(c, b"GET /api/v1/alive HTTP/1.1\r\nhost: t\r\n\r\n");
    }
    for c in &mut crowd {
        c.set_read_timeout(Some(DEADLINE)).unwrap();
        let mut head = [0u8; 12];
        if std::io::Read::read_exact(c, &mut head).is_ok() && head.starts_with(b"HTTP/1.1 503") {
            refused += 1;
        }
    }
    assert!(
        refused > 0,
        "no connection was refused past the descriptor limit"
    );
    // The kept connection is still served meanwhile.
    assert_eq!(kept.call("GET", "/api/v1/alive", &[], b"").status, 200);
    // Each refusal is not a log line (nor a busy loop): one warning for the burst.
    let warnings = s.log_lines("out of file descriptors").len();
    assert!(
        (1..=5).contains(&warnings),
        "{warnings} warnings for one burst of refusals"
    );
    // Descriptors back: new connections are served again.
    drop(crowd);
    wait_until("a new connection to be served", || {
        Connection::try_open(s.addr)
            .ok()
            .and_then(|mut c| c.try_call("GET", "/api/v1/alive", &[], b"").ok())
            .is_some_and(|r| r.status == 200)
    });
}
