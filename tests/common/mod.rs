//! Helpers for tests that run the real `halflife serve` binary and talk HTTP to it: a
//! server process on a free port in a temporary directory, and a minimal blocking HTTP/1.1
//! client (one request per connection unless a test drives the socket itself).

#![allow(dead_code)]

pub mod garage;
pub mod replication;
pub mod secrets;
pub mod tools;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long tests wait for anything the server does.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// A kept-alive client connection (benches send many requests over one).
pub struct Connection {
    stream: TcpStream,
    reader: BufReader<TcpStream>,
}

impl Connection {
    /// Connects with Nagle off, as clients of a request/response protocol do.
    pub fn open(addr: SocketAddr) -> Self {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        let reader = BufReader::new(stream.try_clone().expect("clone"));
        Connection { stream, reader }
    }

    /// Connects, or reports why not.
    pub fn try_open(addr: SocketAddr) -> std::io::Result<Self> {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        let reader = BufReader::new(stream.try_clone()?);
        Ok(Connection { stream, reader })
    }

    /// [`Connection::call`] that reports a broken connection (a server that went away)
    /// instead of panicking.
    pub fn try_call(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<Resp> {
        try_send(&mut self.stream, method, path, headers, body)?;
        try_read_response(&mut self.reader, method == "HEAD")
    }

    /// Sends a request and reads its whole response on this connection.
    pub fn call(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Resp {
        send(&mut self.stream, method, path, headers, body);
        read_response(&mut self.reader, method == "HEAD")
    }
}

/// A running `halflife serve`.
pub struct ServerProcess {
    child: Child,
    reader: Option<std::thread::JoinHandle<()>>,
    pub addr: SocketAddr,
    pub log: Arc<Mutex<Vec<String>>>,
    pub data: PathBuf,
}

/// Starts `halflife serve` on `data` with extra environment; waits for it to listen.
pub fn start_server(data: &Path, env: &[(&str, &str)]) -> ServerProcess {
    try_start_server(data, env).expect("the server starts")
}

/// Like [`start_server`], but returns the exit status and log when it fails to start.
pub fn try_start_server(
    data: &Path,
    env: &[(&str, &str)],
) -> Result<ServerProcess, (ExitStatus, Vec<String>)> {
    try_start_server_limited(data, env, None)
}

/// Like [`try_start_server`], with the server's descriptor limit (soft and hard) set to
/// `open_files`, as `ulimit -n` does.
pub fn try_start_server_limited(
    data: &Path,
    env: &[(&str, &str)],
    open_files: Option<u64>,
) -> Result<ServerProcess, (ExitStatus, Vec<String>)> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_halflife"));
    launch(&mut cmd, data, env, open_files)
}

/// Like [`start_server`], run as user `uid` (and its group `uid`): what a test needs to
/// make a file unreadable to the server when the tests run as root.
pub fn start_server_as(data: &Path, env: &[(&str, &str)], uid: u32) -> ServerProcess {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_halflife"));
    cmd.uid(uid).gid(uid);
    launch(&mut cmd, data, env, None).expect("the server starts")
}

fn launch(
    cmd: &mut Command,
    data: &Path,
    env: &[(&str, &str)],
    open_files: Option<u64>,
) -> Result<ServerProcess, (ExitStatus, Vec<String>)> {
    if let Some(limit) = open_files {
        use std::os::unix::process::CommandExt;
        // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                let rl = libc::rlimit {
                    rlim_cur: limit as libc::rlim_t,
                    rlim_max: limit as libc::rlim_t,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &rl) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    cmd.args(["serve", "--port", "0", "--data-path"])
        .arg(data)
        .env("RS_LOG_LEVEL", "info")
        .env_remove("RS_API_TOKEN")
        .env_remove("RS_INSTANCE_ROLE")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn halflife serve");
    let (log, reader) = capture_stderr(&mut child);
    let start = Instant::now();
    loop {
        let found = log.lock().unwrap().iter().find_map(|l| {
            l.split("listening on http")
                .nth(1)
                .map(|rest| rest.trim_start_matches('s').trim_start_matches("://"))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|a| a.parse::<SocketAddr>().ok())
        });
        if let Some(addr) = found {
            return Ok(ServerProcess {
                child,
                reader: Some(reader),
                addr,
                log,
                data: data.to_path_buf(),
            });
        }
        if let Some(status) = child.try_wait().expect("try_wait") {
            // The pipe closed with the process: the reader ends after the last line.
            let _ = reader.join();
            let lines = log.lock().unwrap().clone();
            return Err((status, lines));
        }
        assert!(
            start.elapsed() < DEADLINE,
            "server did not start: {:?}",
            log.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Collects a child's stderr lines as they come (what the startup waits read).
fn capture_stderr(child: &mut Child) -> (Arc<Mutex<Vec<String>>>, std::thread::JoinHandle<()>) {
    let stderr = child.stderr.take().expect("piped stderr");
    let log = Arc::new(Mutex::new(Vec::new()));
    let sink = log.clone();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            sink.lock().unwrap().push(line);
        }
    });
    (log, reader)
}

/// A loopback port nobody listens on (bound, then released): a destination that is down.
pub fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address").port()
}

/// The ReductStore binary named by `REDUCTSTORE_BIN`, for a test that runs with it (see
/// `tests/common/tools.rs`).
pub fn reductstore_bin() -> PathBuf {
    tools::require(tools::Tool::ReductStore).remove(0)
}

/// The ReductStore binary, where `REDUCTSTORE_BIN` names one: for the benches, whose rows
/// for it are optional.
pub fn reductstore_if_set() -> Option<PathBuf> {
    tools::Tool::ReductStore.find().ok()?.into_iter().next()
}

/// Starts the ReductStore binary `bin` on a free loopback port with data in `data` and
/// extra environment; waits until `/api/v1/alive` answers.
pub fn start_reductstore(bin: &Path, data: &Path, env: &[(&str, &str)]) -> ServerProcess {
    let port = closed_port();
    let mut cmd = Command::new(bin);
    cmd.env("RS_DATA_PATH", data)
        .env("RS_HOST", "127.0.0.1")
        .env("RS_PORT", port.to_string())
        .env("RS_LOG_LEVEL", "INFO")
        // 1.21.5 refuses to start with no token unless told that is meant.
        .env("RS_DISABLE_AUTH", "true")
        .env_remove("RS_API_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn reductstore");
    let (log, reader) = capture_stderr(&mut child);
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let server = ServerProcess {
        child,
        reader: Some(reader),
        addr,
        log,
        data: data.to_path_buf(),
    };
    let start = Instant::now();
    while TcpStream::connect(addr).is_err() || server.get("/api/v1/alive").status != 200 {
        assert!(
            start.elapsed() < DEADLINE,
            "reductstore did not start: {:?}",
            server.log.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    server
}

impl ServerProcess {
    /// Sends a request and reads the whole response.
    pub fn request(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
        request(self.addr, method, path, headers, body)
    }

    /// GET with no headers.
    pub fn get(&self, path: &str) -> Resp {
        self.request("GET", path, &[], b"")
    }

    /// How many file descriptors the server has open (`/proc/<pid>/fd`).
    pub fn open_descriptors(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id()))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    /// CPU time the server has used so far, user and system, in clock ticks
    /// (`/proc/<pid>/stat`; 100 a second on Linux).
    pub fn cpu_ticks(&self) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()))
            .expect("the server's /proc stat");
        // Fields after the command name (which may hold spaces) in parentheses.
        let rest = &stat[stat.rfind(')').expect("a stat line") + 2..];
        let fields: Vec<&str> = rest.split(' ').collect();
        fields[11].parse::<u64>().unwrap_or(0) + fields[12].parse::<u64>().unwrap_or(0)
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The bytes the server has caused to be written to the storage device so far, and
    /// those it dirtied but that were dropped before reaching it (a file truncated or
    /// removed first): `write_bytes` and `cancelled_write_bytes` of `/proc/<pid>/io`.
    pub fn device_writes(&self) -> (u64, u64) {
        let io = std::fs::read_to_string(format!("/proc/{}/io", self.child.id()))
            .expect("the server's /proc io");
        let field = |name: &str| {
            io.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse().ok())
                .expect("a field of /proc io")
        };
        (field("write_bytes:"), field("cancelled_write_bytes:"))
    }

    /// The server's resident memory in KiB (`VmRSS` from `/proc/<pid>/status`).
    pub fn resident_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("the server's /proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS in /proc status")
    }

    /// GET with an `Authorization` header.
    pub fn get_with(&self, path: &str, authorization: &str) -> Resp {
        self.request("GET", path, &[("authorization", authorization)], b"")
    }

    /// The names of a bucket's entries, as `GET /b/{bucket}` lists them (no token).
    pub fn entry_names(&self, bucket: &str) -> Vec<String> {
        self.entry_names_with(bucket, "")
    }

    /// The names of a bucket's entries, with an `Authorization` header (empty: none).
    pub fn entry_names_with(&self, bucket: &str, authorization: &str) -> Vec<String> {
        let path = format!("/api/v1/b/{bucket}");
        let r = if authorization.is_empty() {
            self.get(&path)
        } else {
            self.get_with(&path, authorization)
        };
        r.json()["entries"]
            .as_array()
            .expect("a bucket's entries are a list")
            .iter()
            .map(|e| e["name"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// Every record of `bucket/entry`, oldest first, as JSON payloads (a v1 entry query
    /// read to its end); empty when the entry does not exist. `authorization` may be
    /// empty (no header).
    pub fn json_records(
        &self,
        bucket: &str,
        entry: &str,
        authorization: &str,
    ) -> Vec<serde_json::Value> {
        let headers: Vec<(&str, &str)> = if authorization.is_empty() {
            Vec::new()
        } else {
            vec![("authorization", authorization)]
        };
        let r = self.request(
            "POST",
            &format!("/api/v1/b/{bucket}/{entry}/q"),
            &headers,
            br#"{"query_type":"QUERY"}"#,
        );
        if r.status == 404 {
            return Vec::new();
        }
        assert_eq!(r.status, 200, "{entry}: {}", r.error());
        let id = r.json()["id"].as_u64().expect("a query id");
        let mut out = Vec::new();
        loop {
            let path = format!("/api/v1/b/{bucket}/{entry}/batch?q={id}");
            let r = self.request("GET", &path, &headers, b"");
            if r.status == 204 {
                break;
            }
            assert_eq!(r.status, 200, "{}", r.error());
            let mut at = 0;
            for (name, value) in &r.headers {
                if name.starts_with("x-reduct-time-") {
                    let len: usize = value.split(',').next().unwrap_or("0").parse().unwrap_or(0);
                    out.push(serde_json::from_slice(&r.body[at..at + len]).expect("a JSON record"));
                    at += len;
                }
            }
            if r.header("x-reduct-last") == Some("true") {
                break;
            }
        }
        out
    }

    /// The log lines so far that contain `text`.
    pub fn log_lines(&self, text: &str) -> Vec<String> {
        let log = self.log.lock().unwrap();
        log.iter().filter(|l| l.contains(text)).cloned().collect()
    }

    /// Whether the log has a line containing `text`.
    pub fn logged(&self, text: &str) -> bool {
        self.log.lock().unwrap().iter().any(|l| l.contains(text))
    }

    /// Waits until the log has a line containing `text`.
    pub fn wait_for_log(&self, text: &str) {
        wait_until(&format!("log line '{text}'"), || self.logged(text));
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(mut self) -> (ExitStatus, Vec<String>) {
        let pid = self.child.id().to_string();
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill");
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                if let Some(reader) = self.reader.take() {
                    let _ = reader.join();
                }
                let log = self.log.lock().unwrap().clone();
                return (status, log);
            }
            assert!(
                start.elapsed() < DEADLINE * 3,
                "server did not stop after SIGTERM: {:?}",
                self.log.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes one record with labels; returns the status.
pub fn write_record(s: &ServerProcess, path: &str, labels: &[(&str, &str)], body: &[u8]) -> u16 {
    let headers = label_headers(labels);
    s.request("POST", path, &borrowed(&headers), body).status
}

/// `x-reduct-label-<name>: <value>` headers of labels.
pub fn label_headers(labels: &[(&str, &str)]) -> Vec<(String, String)> {
    labels
        .iter()
        .map(|(k, v)| (format!("x-reduct-label-{k}"), v.to_string()))
        .collect()
}

/// Owned header pairs as the `(&str, &str)` pairs requests take.
pub fn borrowed(headers: &[(String, String)]) -> Vec<(&str, &str)> {
    headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// Polls `condition` until it holds, failing after [`DEADLINE`].
pub fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let start = Instant::now();
    while !condition() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A response.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    /// The first header with this (lowercase) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    /// The `x-reduct-error` message.
    pub fn error(&self) -> &str {
        self.header("x-reduct-error").unwrap_or("")
    }
}

/// Writes a request on `stream` (with `Content-Length`).
pub fn send(
    stream: &mut TcpStream,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) {
    try_send(stream, method, path, headers, body).expect("the request is sent");
}

/// [`send`] that reports a broken connection.
pub fn try_send(
    stream: &mut TcpStream,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<()> {
    let mut head = format!("{method} {path} HTTP/1.1\r\nhost: test\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !headers.iter().any(|(k, _)| {
        k.eq_ignore_ascii_case("content-length") || k.eq_ignore_ascii_case("transfer-encoding")
    }) {
        head.push_str(&format!("content-length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)
}

/// Reads one response from `reader` (HEAD responses have no body whatever their length).
pub fn read_response(reader: &mut BufReader<TcpStream>, head_request: bool) -> Resp {
    try_read_response(reader, head_request).expect("a well-formed response")
}

/// [`read_response`] that reports a closed or broken connection instead of panicking.
pub fn try_read_response(
    reader: &mut BufReader<TcpStream>,
    head_request: bool,
) -> std::io::Result<Resp> {
    let broken = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| broken(format!("bad status line {line:?}")))?;
    let mut headers = Vec::new();
    loop {
        let mut l = String::new();
        reader.read_line(&mut l)?;
        let l = l.trim_end();
        if l.is_empty() {
            break;
        }
        let (k, v) = l
            .split_once(':')
            .ok_or_else(|| broken(format!("bad header line {l:?}")))?;
        headers.push((k.to_ascii_lowercase(), v.trim().to_string()));
    }
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .map_or(Ok(0), |(_, v)| v.parse())
        .map_err(|_| broken("bad content-length".into()))?;
    let mut body = vec![
        0;
        if head_request || status == 100 {
            0
        } else {
            len
        }
    ];
    reader.read_exact(&mut body)?;
    Ok(Resp {
        status,
        headers,
        body,
    })
}

/// One request on a new connection.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Resp {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    send(&mut stream, method, path, headers, body);
    let mut reader = BufReader::new(stream);
    read_response(&mut reader, method == "HEAD")
}

/// Checks a raw response head: every CR is part of a CRLF, every LF ends one, no NUL,
/// every header line is `name: value`, and no line is a header the input tried to
/// inject. Returns the head as lowercase text.
pub fn assert_well_formed(head: &[u8], case: &str) -> String {
    assert!(head.ends_with(b"\r\n\r\n"), "{case}: no complete head");
    for (i, b) in head.iter().enumerate() {
        match b {
            b'\r' => assert_eq!(head.get(i + 1), Some(&b'\n'), "{case}: bare CR"),
            b'\n' => assert_eq!(head[i - 1], b'\r', "{case}: bare LF"),
            0 => panic!("{case}: NUL in the response head"),
            _ => {}
        }
    }
    let text = String::from_utf8_lossy(head).to_ascii_lowercase();
    for line in text.split("\r\n").skip(1) {
        assert!(
            !line.starts_with("x-injected") && !line.starts_with("set-cookie"),
            "{case}: injected header line {line:?}"
        );
        if !line.is_empty() {
            assert!(
                line.contains(": "),
                "{case}: malformed header line {line:?}"
            );
        }
    }
    text
}

/// Record metadata with these labels (text/plain, size 0: writes fill the size in).
pub fn meta(ts: u64, labels: &[(&str, &str)]) -> halflife::storage::RecordMeta {
    halflife::storage::RecordMeta {
        timestamp: ts,
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        content_type: "text/plain".into(),
        size: 0,
    }
}

/// Writes a record at each of `stamps` (`size` bytes each) to `bucket/entry` in v1
/// batches of 100, checking every batch is accepted whole.
pub fn write_batches(s: &ServerProcess, bucket: &str, entry: &str, stamps: &[u64], size: usize) {
    for chunk in stamps.chunks(100) {
        let headers: Vec<(String, String)> = chunk
            .iter()
            .map(|ts| {
                (
                    format!("x-reduct-time-{ts}"),
                    format!("{size},application/octet-stream"),
                )
            })
            .collect();
        let headers = borrowed(&headers);
        let body = vec![b'r'; size * chunk.len()];
        let r = s.request(
            "POST",
            &format!("/api/v1/b/{bucket}/{entry}/batch"),
            &headers,
            &body,
        );
        assert_eq!(r.status, 200, "{}", r.error());
        assert!(
            r.headers
                .iter()
                .all(|(k, _)| !k.starts_with("x-reduct-error")),
            "{:?}",
            r.headers
        );
    }
}

/// Now, in µs since the epoch.
pub fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is past 1970")
        .as_micros() as u64
}

/// The events of `$system` entry `<family>/<instance>/<name>`, oldest first (named by
/// the server's instance, sanitised as the server does).
pub fn system_events(s: &ServerProcess, family: &str, name: &str) -> Vec<serde_json::Value> {
    let info = s.get("/api/v1/info").json();
    let instance = info["instance_name"].as_str().unwrap_or_default();
    let segment = halflife::storage::system::sanitize(instance);
    s.json_records("$system", &format!("{family}/{segment}/{name}"), "")
}

/// A policy's `lifecycle_run` events in `$system`, oldest first.
pub fn lifecycle_events(s: &ServerProcess, policy: &str) -> Vec<serde_json::Value> {
    system_events(s, "lifecycle", policy)
}

/// Every file and folder under `dir`, sorted by path, with its length, modification time
/// and bytes: two calls compare equal only when nothing under `dir` changed.
pub fn file_tree(dir: &Path) -> Vec<(String, u64, std::time::SystemTime, Vec<u8>)> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for item in std::fs::read_dir(&at).unwrap().flatten() {
            let meta = item.metadata().unwrap();
            let name = item.path().strip_prefix(dir).unwrap().display().to_string();
            if meta.is_dir() {
                stack.push(item.path());
                files.push((name, 0, meta.modified().unwrap(), Vec::new()));
            } else {
                let bytes = std::fs::read(item.path()).unwrap();
                files.push((name, meta.len(), meta.modified().unwrap(), bytes));
            }
        }
    }
    files.sort();
    files
}

/// Opens a v1 entry query of `bucket` with `body` and reads it to the end, batch by batch:
/// (timestamp, header value, payload).
pub fn read_query_v1(
    s: &ServerProcess,
    bucket: &str,
    entry: &str,
    body: &str,
) -> Vec<(u64, String, Vec<u8>)> {
    let r = s.request(
        "POST",
        &format!("/api/v1/b/{bucket}/{entry}/q"),
        &[],
        body.as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.error());
    let id = r.json()["id"].as_u64().unwrap();
    let mut out = Vec::new();
    loop {
        let r = s.get(&format!("/api/v1/b/{bucket}/{entry}/batch?q={id}"));
        if r.status == 204 {
            assert_eq!(r.header("x-reduct-error"), Some("No content"));
            return out;
        }
        assert_eq!(r.status, 200, "{}", r.error());
        let mut at = 0;
        let mut headers: Vec<(u64, String)> = r
            .headers
            .iter()
            .filter_map(|(k, v)| {
                k.strip_prefix("x-reduct-time-")
                    .map(|ts| (ts.parse().unwrap(), v.clone()))
            })
            .collect();
        headers.sort();
        for (ts, value) in headers {
            let len: usize = value.split(',').next().unwrap().parse().unwrap();
            out.push((ts, value, r.body[at..at + len].to_vec()));
            at += len;
        }
        assert_eq!(at, r.body.len());
        if r.header("x-reduct-last") == Some("true") {
            return out;
        }
    }
}
