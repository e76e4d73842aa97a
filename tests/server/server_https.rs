//! HTTPS served by halflife itself (`RS_CERT_PATH` / `RS_CERT_KEY_PATH`, as ReductStore
//! serves it), through a real TLS client (ureq over rustls, trusting the test CA of
//! `tests/fixtures/tls`): small and large requests on kept-alive connections, several
//! connections at once, a plain HTTP client refused, and a certificate that cannot be used
//! stopping the start.

use crate::common;

use std::io::{Read, Write};

use common::{start_server, try_start_server};
use ureq::tls::{Certificate, RootCerts, TlsConfig};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tls");

fn tls_env() -> Vec<(&'static str, String)> {
    vec![
        ("RS_CERT_PATH", format!("{FIXTURES}/server.pem")),
        ("RS_CERT_KEY_PATH", format!("{FIXTURES}/server.key")),
    ]
}

fn client() -> ureq::Agent {
    let ca = std::fs::read(format!("{FIXTURES}/ca.pem")).unwrap();
    let roots: Vec<Certificate<'static>> = ureq::tls::parse_pem(&ca)
        .filter_map(|item| match item {
            Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
            _ => None,
        })
        .collect();
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .tls_config(
            TlsConfig::builder()
                .root_certs(RootCerts::Specific(std::sync::Arc::new(roots)))
                .build(),
        )
        .build()
        .new_agent()
}

#[test]
fn https_serves_the_api_to_a_real_tls_client() {
    let dir = tempfile::tempdir().unwrap();
    let env = tls_env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let server = start_server(dir.path(), &env);
    assert!(
        server
            .log_lines("listening on https://")
            .iter()
            .any(|l| l.contains("public URL https://")),
        "{:?}",
        server.log_lines("listening")
    );
    let base = format!("https://localhost:{}/api/v1", server.addr.port());
    let agent = client();
    let r = agent.post(format!("{base}/b/secure")).send_empty().unwrap();
    assert_eq!(r.status(), 200);
    // Kept-alive requests, small and large (a body the poller gathers over many TLS
    // records, and one larger than the gathering buffer, streamed by a handler).
    for (ts, size) in [(1u64, 10usize), (2, 200 << 10), (3, 8 << 20), (4, 3)] {
        let body: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8).collect();
        let r = agent
            .post(format!("{base}/b/secure/cam?ts={ts}"))
            .header("content-type", "application/octet-stream")
            .send(&body[..])
            .unwrap();
        assert_eq!(r.status(), 200, "write of {size} bytes");
        let mut r = agent
            .get(format!("{base}/b/secure/cam?ts={ts}"))
            .call()
            .unwrap();
        assert_eq!(r.status(), 200);
        let read = r
            .body_mut()
            .with_config()
            .limit(64 << 20)
            .read_to_vec()
            .unwrap();
        assert!(
            read == body,
            "record {ts} ({size} bytes) reads back the same"
        );
    }
    // Several clients at once.
    let threads: Vec<_> = (0..8u64)
        .map(|i| {
            let base = base.clone();
            std::thread::spawn(move || {
                let agent = client();
                for j in 0..20u64 {
                    let ts = 1000 + i * 100 + j;
                    let r = agent
                        .post(format!("{base}/b/secure/many?ts={ts}"))
                        .send(&b"payload"[..])
                        .unwrap();
                    assert_eq!(r.status(), 200);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut r = agent.get(format!("{base}/b/secure")).call().unwrap();
    let info: serde_json::Value =
        serde_json::from_slice(&r.body_mut().read_to_vec().unwrap()).unwrap();
    let many = info["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "many")
        .unwrap()
        .clone();
    assert_eq!(many["record_count"], 160, "{info}");
    // Plain HTTP on the HTTPS port gets no answer it could take for one.
    let mut plain = std::net::TcpStream::connect(server.addr).unwrap();
    plain
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    plain
        .write_all(b"GET /api/v1/info HTTP/1.1\r\nhost: x\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert!(!answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
    server.terminate();
}

#[test]
fn a_certificate_that_cannot_be_used_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let key = format!("{FIXTURES}/server.key");
    let missing = format!("{FIXTURES}/missing.pem");
    let err = try_start_server(
        dir.path(),
        &[("RS_CERT_PATH", &missing), ("RS_CERT_KEY_PATH", &key)],
    )
    .err()
    .expect("the start is refused");
    assert!(
        err.1
            .iter()
            .any(|l| l.contains("RS_CERT_PATH") && l.contains("missing.pem")),
        "{:?}",
        err.1
    );
    // A key without its certificate is refused too (not served as plain HTTP).
    let err = try_start_server(dir.path(), &[("RS_CERT_KEY_PATH", &key)])
        .err()
        .expect("the start is refused");
    assert!(err.1.iter().any(|l| l.contains("cert-path")), "{:?}", err.1);
}
