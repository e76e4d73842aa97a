//! What a waiting instance answers while another holds the lease: `/alive` 200, and
//! every other request 503 naming the active instance, so a readiness probe (`/ready`)
//! and a client can tell. It parses no more than a request line and closes each
//! connection after its answer; the full server starts on the same listener once this
//! instance takes the lease.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::lease::LeaseRecord;

/// Connections answered at once; more wait in the listener's backlog.
const MAX_AT_ONCE: usize = 32;
/// The most of a request head read to find its request line.
const HEAD_LIMIT: usize = 8 << 10;

/// The waiting instance's responder.
pub struct Standby {
    listener: Arc<TcpListener>,
    stop: Arc<AtomicBool>,
    holder: Arc<Mutex<Option<LeaseRecord>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Standby {
    /// Answers on `listener` as a waiting `role` until [`Standby::stop`].
    pub fn start(listener: TcpListener, role: &'static str) -> std::io::Result<Standby> {
        listener.set_nonblocking(true)?;
        let listener = Arc::new(listener);
        let stop = Arc::new(AtomicBool::new(false));
        let holder = Arc::new(Mutex::new(None));
        let busy = Arc::new(AtomicUsize::new(0));
        let thread = {
            let (listener, stop, holder) = (listener.clone(), stop.clone(), holder.clone());
            std::thread::Builder::new()
                .name("halflife-standby".into())
                .spawn(move || {
                    while !stop.load(Ordering::Acquire) {
                        match listener.accept() {
                            Ok((stream, _)) if busy.load(Ordering::Acquire) < MAX_AT_ONCE => {
                                let shown =
                                    holder.lock().unwrap_or_else(|p| p.into_inner()).clone();
                                let busy = busy.clone();
                                busy.fetch_add(1, Ordering::AcqRel);
                                let spawned = std::thread::Builder::new()
                                    .name("halflife-standby-answer".into())
                                    .spawn({
                                        let busy = busy.clone();
                                        move || {
                                            answer(stream, role, shown.as_ref());
                                            busy.fetch_sub(1, Ordering::AcqRel);
                                        }
                                    });
                                if spawned.is_err() {
                                    busy.fetch_sub(1, Ordering::AcqRel);
                                }
                            }
                            Ok((stream, _)) => drop(stream),
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                                std::thread::sleep(Duration::from_millis(10));
                            }
                            Err(_) => std::thread::sleep(Duration::from_millis(10)),
                        }
                    }
                })?
        };
        Ok(Standby {
            listener,
            stop,
            holder,
            thread: Some(thread),
        })
    }

    /// Shows `holder` as the active instance from now on.
    pub fn show_holder(&self, holder: Option<LeaseRecord>) {
        *self.holder.lock().unwrap_or_else(|p| p.into_inner()) = holder;
    }

    /// Stops answering and gives the listener back (blocking again) for the server.
    pub fn stop(mut self) -> std::io::Result<TcpListener> {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let listener = self.listener.try_clone()?;
        listener.set_nonblocking(false)?;
        Ok(listener)
    }
}

/// Answers one connection: reads up to its request line, writes the answer, closes.
fn answer(mut stream: TcpStream, role: &str, holder: Option<&LeaseRecord>) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(2)));
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < HEAD_LIMIT {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or_default();
    let path = parts.next().unwrap_or_default();
    let path = path.split('?').next().unwrap_or_default();
    let response = respond(method, path, role, holder);
    let _ = stream.write_all(&response);
    let _ = stream.flush();
}

/// The answer of a waiting instance to `method path`.
pub fn respond(method: &str, path: &str, role: &str, holder: Option<&LeaseRecord>) -> Vec<u8> {
    let head_only = method.eq_ignore_ascii_case("HEAD");
    if path.ends_with("api/v1/alive") {
        return http(200, "OK", &[], b"", head_only);
    }
    if path.ends_with("/metrics") {
        let body = format!(
            "# HELP halflife_instance_active Whether this instance holds the data directory's lease (1) or waits (0)\n# TYPE halflife_instance_active gauge\nhalflife_instance_active{{role=\"{role}\"}} 0\n"
        );
        return http(
            200,
            "OK",
            &[("content-type", "text/plain; version=0.0.4; charset=utf-8")],
            body.as_bytes(),
            head_only,
        );
    }
    let active = match holder {
        Some(h) => format!(
            "the active instance is {} at {} (lease epoch {})",
            printable(&h.role, 16),
            printable(&h.url, 200),
            h.epoch
        ),
        None => "no instance holds it yet".to_string(),
    };
    let message =
        format!("This instance is a {role} waiting for the data directory's lease; {active}");
    let body = serde_json::json!({ "detail": message, "instance_role": role, "instance_state": "waiting" })
        .to_string();
    http(
        503,
        "Service Unavailable",
        &[
            ("content-type", "application/json"),
            ("x-reduct-error", &message),
            ("retry-after", "1"),
        ],
        body.as_bytes(),
        head_only,
    )
}

/// `text` with anything but printable ASCII replaced, at most `max` characters: what
/// goes into a header from a file.
fn printable(text: &str, max: usize) -> String {
    text.chars()
        .take(max)
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect()
}

fn http(
    status: u16,
    reason: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    head_only: bool,
) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        out.push_str(name);
        out.push_str(": ");
        out.push_str(value);
        out.push_str("\r\n");
    }
    out.push_str("\r\n");
    let mut out = out.into_bytes();
    if !head_only {
        out.extend_from_slice(body);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alive_says_yes_and_everything_else_names_the_active_instance() {
        let holder = LeaseRecord {
            owner: "a".into(),
            epoch: 3,
            renewed_at: 0,
            url: "http://10.0.0.1:8383/\r\nx-evil: 1".into(),
            role: "PRIMARY".into(),
            released: false,
            renewals: 0,
        };
        let alive =
            String::from_utf8(respond("GET", "/api/v1/alive", "SECONDARY", Some(&holder))).unwrap();
        assert!(alive.starts_with("HTTP/1.1 200"), "{alive}");
        let ready =
            String::from_utf8(respond("GET", "/api/v1/ready", "SECONDARY", Some(&holder))).unwrap();
        assert!(ready.starts_with("HTTP/1.1 503"), "{ready}");
        assert!(
            ready.contains("PRIMARY at http://10.0.0.1:8383/??x-evil: 1 (lease epoch 3)"),
            "{ready}"
        );
        assert!(
            !ready.contains("\r\nx-evil"),
            "nothing from the file breaks a header: {ready}"
        );
        let head = String::from_utf8(respond("HEAD", "/api/v1/info", "SECONDARY", None)).unwrap();
        assert!(
            head.starts_with("HTTP/1.1 503") && head.ends_with("\r\n\r\n"),
            "{head}"
        );
        let metrics = String::from_utf8(respond("GET", "/metrics", "SECONDARY", None)).unwrap();
        assert!(
            metrics.contains("halflife_instance_active{role=\"SECONDARY\"} 0"),
            "{metrics}"
        );
    }
}
