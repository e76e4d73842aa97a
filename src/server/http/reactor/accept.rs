//! The accepting side of the poller: new connections are counted against their
//! client's cap (429 past it) and the connection limit (the oldest idle one closed, 503
//! when none is idle), and, out of descriptors, answered 503 with a spare descriptor so
//! the backlog drains instead of the poller spinning on a listener that stays readable.
//! Each kind of refusal is one warning per burst.

use std::io;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use polling::Event;

use super::{LISTENER, Parked, Reactor};
use crate::server::http::connection::Connection;
use crate::server::http::transport::Transport;
use crate::server::http::{Response, write_response};

/// How long the listener is left unwatched when a connection cannot be accepted for want
/// of descriptors and no spare is left.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);
/// Least time between two warnings about a kind of refused connection.
const DESCRIPTOR_WARNING_EVERY: Duration = Duration::from_secs(10);

/// A warning said at most once per [`DESCRIPTOR_WARNING_EVERY`], with the count of
/// occurrences since it was last said, so a flood of refusals is a few log lines.
#[derive(Default)]
pub(super) struct Burst {
    since_warning: usize,
    warned_at: Option<Instant>,
}

impl Burst {
    /// Counts one occurrence; the count to warn with when it is time to warn again.
    pub(super) fn note(&mut self) -> Option<usize> {
        self.since_warning += 1;
        let now = Instant::now();
        if self
            .warned_at
            .is_some_and(|at| now.duration_since(at) < DESCRIPTOR_WARNING_EVERY)
        {
            return None;
        }
        self.warned_at = Some(now);
        Some(std::mem::take(&mut self.since_warning))
    }
}

/// What became of an accept out of descriptors.
enum Refusal {
    /// A waiting connection was answered 503 and closed.
    Refused,
    /// Nobody was waiting after all (or the accept failed otherwise).
    NoneWaiting,
    /// No spare descriptor to accept with.
    NoSpare,
}

/// The spare descriptor (see `Reactor::spare`), when one is free.
pub(super) fn open_spare() -> Option<std::fs::File> {
    std::fs::File::open("/dev/null").ok()
}

/// Whether an accept failed because the process or the system has no descriptor left.
fn out_of_descriptors(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
}

impl Reactor {
    pub(super) fn accept_all(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => self.admit(stream),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // (Linux fails an accept for want of a descriptor even when nobody waits.)
                Err(e) if out_of_descriptors(&e) => match self.refuse_for_descriptors() {
                    Refusal::Refused => {}
                    Refusal::NoneWaiting => break,
                    Refusal::NoSpare => {
                        // Not even the spare: wait a moment, the listener unwatched (it
                        // stays readable, so watching it would spin).
                        self.listener_paused_until = Some(Instant::now() + ACCEPT_PAUSE);
                        return;
                    }
                },
                Err(e) => {
                    log::warn!("accepting a connection: {e}");
                    break;
                }
            }
        }
        let _ = self
            .poller
            .modify(&self.listener, Event::readable(LISTENER));
    }

    /// Out of descriptors: gives up the spare descriptor to accept a waiting connection,
    /// answers it 503 and closes it, and takes the spare again — so the backlog drains
    /// with answers. One warning per burst.
    fn refuse_for_descriptors(&mut self) -> Refusal {
        // A spare lost to an earlier burst (another thread took the descriptor it gave
        // up) is taken again first: from a free descriptor, or else from the connection
        // that went idle last — most likely one of the burst, not a long-standing client;
        // without a spare, every waiting client would hang unanswered.
        let spare = self.spare.take().or_else(open_spare).or_else(|| {
            let (_, newest) = self.idle.pop_last().or_else(|| self.lingering.pop_last())?;
            log::debug!("out of descriptors with no spare: closing the newest idle connection");
            self.close(newest, None);
            open_spare()
        });
        let Some(spare) = spare else {
            return Refusal::NoSpare;
        };
        drop(spare);
        let accepted = self.listener.accept();
        let Ok((mut stream, peer)) = accepted else {
            self.spare = open_spare();
            return Refusal::NoneWaiting;
        };
        let _ = stream.set_nonblocking(true);
        let response = Response::error(
            503,
            "Service Unavailable: the server is out of file descriptors",
        );
        let _ = write_response(&mut stream, &response, false);
        // Closed before the spare is taken again: the spare takes its descriptor.
        drop(stream);
        self.spare = open_spare();
        if let Some(refused) = self.refused_for_descriptors.note() {
            log::warn!(
                "out of file descriptors: new connections are answered 503 and closed ({refused} since the last warning, the last from {peer}); raise `ulimit -n`, or lower --http-max-connections or --max-open-log-files"
            );
        }
        Refusal::Refused
    }

    fn admit(&mut self, stream: TcpStream) {
        // The client's own cap first: a refused newcomer closes nobody else's connection.
        let slot = match stream.peer_addr().map(|a| a.ip()) {
            Ok(ip) => match self.clients.claim(ip) {
                Ok(slot) => slot,
                Err(held) => {
                    if let Some(refused) = self.refused_per_client.note() {
                        log::warn!(
                            "{ip} already holds {held} connections, the most one client may (--http-max-connections-per-client): {refused} refused with 429 since the last warning"
                        );
                    }
                    let mut stream = stream;
                    let _ = stream.set_nonblocking(true);
                    let response = Response::error(
                        429,
                        &format!(
                            "Too many connections from {ip}: at most {} per client",
                            self.clients.cap()
                        ),
                    );
                    let _ = write_response(&mut stream, &response, false);
                    return;
                }
            },
            // Not connected any more.
            Err(_) => return,
        };
        if self.parked.len() + self.in_service >= self.limits.max_connections {
            match self.idle.pop_first().or_else(|| self.lingering.pop_first()) {
                Some((_, oldest)) => {
                    log::debug!("connection limit reached: closing the oldest idle connection");
                    self.close(oldest, None);
                }
                None => {
                    if let Some(refused) = self.refused_at_limit.note() {
                        log::warn!(
                            "connection limit of {} reached with none idle: {refused} connection(s) refused with 503 since the last warning",
                            self.limits.max_connections
                        );
                    }
                    let mut stream = stream;
                    let _ = stream.set_nonblocking(true);
                    let response = Response::error(
                        503,
                        "Too many connections: the server's connection limit is reached",
                    );
                    let _ = write_response(&mut stream, &response, false);
                    return;
                }
            }
        }
        let _ = stream.set_nodelay(true);
        if stream.set_nonblocking(true).is_err() {
            return;
        }
        let stream = match Transport::accept(stream, self.tls.as_ref()) {
            Ok(stream) => stream,
            Err(e) => {
                log::warn!("starting TLS on a connection: {e}");
                return;
            }
        };
        let key = self.next_key;
        self.next_key += 1;
        // SAFETY: every connection is deleted from the poller before its socket is
        // dropped (in `close`, the only place parked connections are dropped, and in
        // `ReturnPath`, when the poller has stopped).
        if let Err(e) = unsafe { self.poller.add(&stream, Event::readable(key)) } {
            log::warn!("watching a connection: {e}");
            return;
        }
        let now = Instant::now();
        self.idle.insert((now, key));
        self.parked
            .insert(key, Parked::new(Connection::new(stream, slot), Some(now)));
    }
}
