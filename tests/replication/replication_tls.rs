//! Replication to an `https://` destination: a TLS-terminating proxy (`tls_proxy.py`,
//! Python's `ssl`) in front of a `halflife serve`, with a certificate from a private CA
//! (`tests/fixtures/tls`). The source trusts it with `RS_REPLICATION_CA_PATH`, refuses it
//! without (the records wait, the diagnostics say why), and takes it unverified with
//! `RS_REPLICATION_VERIFY_SSL=false`. A CA file that cannot be used stops the start with
//! its name.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use common::{ServerProcess, start_server, try_start_server, wait_until};
use serde_json::{Value, json};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tls");

/// The proxy, killed when dropped.
struct Proxy {
    child: Child,
    port: u16,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_proxy(target: &ServerProcess) -> Proxy {
    let mut child = Command::new("python3")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/tls_proxy.py"))
        .arg(format!("{FIXTURES}/server.pem"))
        .arg(format!("{FIXTURES}/server.key"))
        .arg(target.addr.port().to_string())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs the TLS proxy");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("its stdout"))
        .read_line(&mut line)
        .expect("the proxy says its port");
    let port = line.trim().parse().expect("a port");
    Proxy { child, port }
}

fn json_of(s: &ServerProcess, path: &str) -> Value {
    let r = s.get(path);
    assert_eq!(r.status, 200, "GET {path}: {}", r.error());
    serde_json::from_slice(&r.body).expect("JSON")
}

/// A source with `env`, a task to `https://127.0.0.1:<port>` and one record written.
fn source_writing(
    dir: &std::path::Path,
    env: &[(&str, &str)],
    port: u16,
    body: &[u8],
) -> ServerProcess {
    let src = start_server(dir, env);
    assert_eq!(src.request("POST", "/api/v1/b/src", &[], b"").status, 200);
    let settings = json!({"src_bucket": "src", "dst_bucket": "dst",
        "dst_host": format!("https://127.0.0.1:{port}")});
    let r = src.request(
        "POST",
        "/api/v1/replications/r",
        &[],
        settings.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.error());
    let r = src.request("POST", "/api/v1/b/src/e?ts=1", &[], body);
    assert_eq!(r.status, 200, "{}", r.error());
    src
}

#[test]
fn records_reach_an_https_destination_that_the_source_trusts() {
    let dst_dir = tempfile::tempdir().expect("tempdir");
    let dst = start_server(dst_dir.path(), &[]);
    let proxy = start_proxy(&dst);
    let ca = format!("{FIXTURES}/ca.pem");

    // Trusted through the private CA.
    let dir = tempfile::tempdir().expect("tempdir");
    let src = source_writing(
        dir.path(),
        &[("RS_REPLICATION_CA_PATH", &ca)],
        proxy.port,
        b"over tls",
    );
    wait_until("the record crosses TLS", || {
        dst.get("/api/v1/b/dst/e?ts=1").body == b"over tls"
    });
    drop(src);

    // Mozilla's roots do not know the private CA: nothing is sent, and the reason shows.
    let dir = tempfile::tempdir().expect("tempdir");
    let src = source_writing(
        dir.path(),
        &[("RS_REPLICATION_TIMEOUT", "1")],
        proxy.port,
        b"unverified",
    );
    wait_until("the certificate refused", || {
        let full = json_of(&src, "/api/v1/replications/r");
        full["info"]["is_active"] == false
            && full["diagnostics"]["hourly"]["errors"]["-3"].is_object()
    });
    let full = json_of(&src, "/api/v1/replications/r");
    assert_eq!(full["info"]["pending_records"], 1);
    let message = full["diagnostics"]["hourly"]["errors"]["-3"]["last_message"]
        .as_str()
        .unwrap_or_default()
        .to_lowercase();
    assert!(
        message.contains("certificate") || message.contains("issuer"),
        "{message}"
    );
    drop(src);

    // Without verification: encrypted, accepted as it is.
    let dst_dir2 = tempfile::tempdir().expect("tempdir");
    let dst2 = start_server(dst_dir2.path(), &[]);
    let proxy2 = start_proxy(&dst2);
    let dir = tempfile::tempdir().expect("tempdir");
    let _src = source_writing(
        dir.path(),
        &[("RS_REPLICATION_VERIFY_SSL", "false")],
        proxy2.port,
        b"any certificate",
    );
    wait_until("the record crosses unverified TLS", || {
        dst2.get("/api/v1/b/dst/e?ts=1").body == b"any certificate"
    });
}

#[test]
fn a_ca_file_that_cannot_be_used_stops_the_start_with_its_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("no-such-ca.pem");
    let missing = missing.to_str().expect("UTF-8 path");
    let Err((status, log)) = try_start_server(
        &dir.path().join("data"),
        &[("RS_REPLICATION_CA_PATH", missing)],
    ) else {
        panic!("the server started with a CA file that does not exist");
    };
    assert!(!status.success());
    assert!(log.iter().any(|l| l.contains("no-such-ca.pem")), "{log:?}");
}
