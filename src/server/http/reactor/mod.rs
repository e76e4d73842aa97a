//! The poller thread: it accepts connections and keeps every connection that is not in
//! the middle of a request, waiting for readiness with `polling` (epoll/kqueue; no async
//! runtime). A parked connection costs a socket and the bytes of a partial head, never a
//! thread. It reads request heads as they trickle in and hands a connection to the
//! handler pool only once a whole head is there, so slow or idle clients cannot take the
//! handler threads; it gathers the bodies of admitted requests the same way (`gather`).
//! It enforces the edge's clocks and bounds: the head and body deadlines (408), the idle
//! timeout, the connection limit (oldest idle connection closed first), the connections
//! per client (429), the bytes bodies may buffer, and the few threads that may stream
//! a body too large to gather.
//!
//! Files: this one (the loop and its clocks); `accept.rs` (accepting, connection limits);
//! `bodies.rs` (bodies gathered by the poller).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use polling::{Event, Events, Poller};

mod accept;
mod bodies;

use accept::{Burst, open_spare};

use crate::server::http::clients::{ClientCounts, Exempt};
use crate::server::http::connection::Connection;
use crate::server::http::head::MAX_HEAD_BYTES;
use crate::server::http::{After, Limits, Response, too_large_head, write_response};

/// The poller key of the listening socket; connections get the keys after it.
const LISTENER: usize = 0;
/// Bytes read from a parked connection per readiness event at most, so one fast client
/// cannot hold the poller while others wait.
const READ_PER_EVENT: usize = 256 << 10;
/// Longest the poller sleeps without a deadline due (it is woken for everything else).
const MAX_WAIT: Duration = Duration::from_secs(60);
/// How long a closing connection's late bytes are read and dropped after its last
/// response, so the close does not reset the connection before the client has read
/// that response (a "lingering close").
const LINGER: Duration = Duration::from_secs(2);
/// Most bytes dropped while lingering before the connection is cut.
const LINGER_BYTES: usize = 16 << 20;

/// What the handler threads need to give connections back.
#[derive(Clone)]
pub struct ReturnPath {
    poller: Arc<Poller>,
    tx: Sender<After>,
}

impl ReturnPath {
    /// Gives a connection a handler thread is done with back to the poller: to park until
    /// its next request, to gather a body, or to close (lingering).
    pub fn give_back(&self, after: After) {
        if let Err(e) = self.tx.send(after) {
            // The poller has stopped: close the connection here.
            let conn = match e.into_inner() {
                After::Park(conn) | After::Gather(conn) | After::Close(conn) => conn,
            };
            let _ = self.poller.delete(&conn.stream);
            return;
        }
        let _ = self.poller.notify();
    }

    /// Wakes the poller (at shutdown).
    pub fn wake(&self) {
        let _ = self.poller.notify();
    }
}

/// A connection waiting in the poller.
struct Parked {
    conn: Connection,
    /// When it was parked with nothing pending (for the idle timeout and the limit).
    idle_since: Option<Instant>,
    /// Closing: its late bytes are dropped until this deadline.
    linger_until: Option<Instant>,
    /// Bytes dropped while lingering.
    dropped: usize,
    /// Gathering a body: its deadline (the earlier of the progress and total deadlines;
    /// the total one alone while paused), the key of its place in `Reactor::bodies`.
    body_due: Option<Instant>,
    /// Gathering a body: the bytes it holds, as counted in `Reactor::buffered`.
    counted: usize,
    /// Its buffer is full and it waits for a streaming slot (not read meanwhile).
    paused: bool,
}

impl Parked {
    fn new(conn: Connection, idle_since: Option<Instant>) -> Parked {
        Parked {
            conn,
            idle_since,
            linger_until: None,
            dropped: 0,
            body_due: None,
            counted: 0,
            paused: false,
        }
    }
}

/// The poller's state.
pub struct Reactor {
    poller: Arc<Poller>,
    listener: TcpListener,
    limits: Limits,
    stop: Arc<AtomicBool>,
    work: Sender<Connection>,
    returns: Receiver<After>,
    parked: HashMap<usize, Parked>,
    /// Idle connections by the time they went idle: the idle timeout and the connection
    /// limit take them from the front.
    idle: BTreeSet<(Instant, usize)>,
    /// Connections with part of a head, by head deadline.
    partial: BTreeSet<(Instant, usize)>,
    /// Closing connections, by linger deadline.
    lingering: BTreeSet<(Instant, usize)>,
    /// Connections gathering a body, by body deadline.
    bodies: BTreeSet<(Instant, usize)>,
    /// Bytes held by the connections gathering a body.
    buffered: usize,
    /// Connections streaming a body on a handler thread.
    streaming: usize,
    /// Connections whose buffer is full, waiting for a streaming slot, first come first
    /// served (keys of closed ones are skipped).
    stream_queue: VecDeque<usize>,
    /// Open connections per client address.
    clients: Arc<ClientCounts>,
    /// Connections handed to handler threads and not returned yet.
    in_service: usize,
    /// A descriptor kept in reserve, given up to accept (and refuse) a connection when
    /// the process is out of descriptors.
    spare: Option<std::fs::File>,
    /// Connections refused for want of descriptors, for their client's cap, and at the
    /// connection limit.
    refused_for_descriptors: Burst,
    refused_per_client: Burst,
    refused_at_limit: Burst,
    /// The listener is unwatched until then (out of descriptors, no spare).
    listener_paused_until: Option<Instant>,
    next_key: usize,
    scratch: Vec<u8>,
    /// HTTPS: every accepted connection speaks TLS with this configuration.
    tls: Option<Arc<rustls::ServerConfig>>,
}

impl Reactor {
    /// Sets up the poller on a listening socket; `work` feeds the handler threads;
    /// `exempt` names the addresses not held to the per-client connection cap; with
    /// `tls`, connections speak HTTPS.
    pub fn new(
        listener: TcpListener,
        limits: Limits,
        stop: Arc<AtomicBool>,
        work: Sender<Connection>,
        exempt: Exempt,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> io::Result<(Reactor, ReturnPath)> {
        let poller = Arc::new(Poller::new()?);
        listener.set_nonblocking(true)?;
        // SAFETY: the listener is deleted from the poller before it is dropped (in `run`).
        unsafe { poller.add(&listener, Event::readable(LISTENER))? };
        let (tx, returns) = crossbeam_channel::unbounded();
        let path = ReturnPath {
            poller: poller.clone(),
            tx,
        };
        Ok((
            Reactor {
                poller,
                listener,
                limits,
                stop,
                work,
                returns,
                parked: HashMap::new(),
                idle: BTreeSet::new(),
                partial: BTreeSet::new(),
                lingering: BTreeSet::new(),
                bodies: BTreeSet::new(),
                buffered: 0,
                streaming: 0,
                stream_queue: VecDeque::new(),
                clients: ClientCounts::new(limits.max_connections_per_client, exempt),
                in_service: 0,
                spare: open_spare(),
                refused_for_descriptors: Burst::default(),
                refused_per_client: Burst::default(),
                refused_at_limit: Burst::default(),
                listener_paused_until: None,
                next_key: LISTENER + 1,
                scratch: vec![0; 64 << 10],
                tls,
            },
            path,
        ))
    }

    /// Runs until the stop flag is set (and the poller woken); then closes every parked
    /// connection. Connections in service are closed by their handler threads.
    pub fn run(mut self) {
        let mut events = Events::new();
        while !self.stop.load(Ordering::SeqCst) {
            let timeout = self.next_deadline().map_or(MAX_WAIT, |d| {
                d.saturating_duration_since(Instant::now()).min(MAX_WAIT)
            });
            events.clear();
            if let Err(e) = self.poller.wait(&mut events, Some(timeout)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    log::error!("waiting for connections: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                }
                continue;
            }
            for event in events.iter() {
                if event.key == LISTENER {
                    self.accept_all();
                } else {
                    self.readable(event.key);
                }
            }
            while let Ok(returned) = self.returns.try_recv() {
                self.in_service -= 1;
                match returned {
                    After::Park(conn) => self.park(conn),
                    After::Gather(conn) => self.gather(conn),
                    After::Close(mut conn) => {
                        self.end_streaming(&mut conn);
                        let key = self.insert(conn, None);
                        self.linger(key);
                    }
                }
            }
            let now = Instant::now();
            if self.listener_paused_until.is_some_and(|until| until <= now) {
                self.listener_paused_until = None;
                let _ = self
                    .poller
                    .modify(&self.listener, Event::readable(LISTENER));
            }
            self.expire(now);
        }
        let _ = self.poller.delete(&self.listener);
        for (_, parked) in self.parked.drain() {
            let _ = self.poller.delete(&parked.conn.stream);
        }
        log::debug!("poller stopped");
    }

    fn next_deadline(&self) -> Option<Instant> {
        let idle = self
            .idle
            .first()
            .map(|(since, _)| *since + self.limits.idle_timeout);
        let head = self.partial.first().map(|(deadline, _)| *deadline);
        let linger = self.lingering.first().map(|(deadline, _)| *deadline);
        let body = self.bodies.first().map(|(deadline, _)| *deadline);
        idle.into_iter()
            .chain(head)
            .chain(linger)
            .chain(body)
            .chain(self.listener_paused_until)
            .min()
    }

    /// Parks a connection back from a handler thread under a new key (so a stale event
    /// for its old key finds nothing); `idle_since` when nothing is pending.
    fn insert(&mut self, conn: Connection, idle_since: Option<Instant>) -> usize {
        let key = self.next_key;
        self.next_key += 1;
        if let Some(since) = idle_since {
            self.idle.insert((since, key));
        }
        self.parked.insert(key, Parked::new(conn, idle_since));
        key
    }

    /// Starts the lingering close of a parked connection: no more responses (write side
    /// shut), late bytes dropped until the client closes or [`LINGER`] passes.
    fn linger(&mut self, key: usize) {
        let Some(mut parked) = self.parked.remove(&key) else {
            return;
        };
        let deadline = Instant::now() + LINGER;
        self.forget_timers(key, &mut parked);
        parked.conn.body_wait = None;
        parked.linger_until = Some(deadline);
        self.lingering.insert((deadline, key));
        let _ = parked.conn.stream.set_nonblocking(true);
        let _ = parked.conn.stream.shutdown_write();
        let watched = self
            .poller
            .modify(&parked.conn.stream, Event::readable(key))
            .is_ok();
        self.parked.insert(key, parked);
        if !watched {
            self.close(key, None);
        }
    }

    /// Reads what a parked connection sent; dispatches it once a whole head is there.
    fn readable(&mut self, key: usize) {
        let Some(parked) = self.parked.get_mut(&key) else {
            return;
        };
        if parked.linger_until.is_some() {
            self.drop_late_bytes(key);
            return;
        }
        // A head is read up to its limit; a body up to the buffer for one body.
        let enough = match &parked.conn.body_wait {
            Some(wait) => wait.head_len + self.limits.body_buffer,
            None => MAX_HEAD_BYTES + 1,
        };
        let mut read = 0;
        let open = loop {
            match parked.conn.stream.read(&mut self.scratch) {
                Ok(0) => break false,
                Ok(n) => {
                    parked.conn.push(&self.scratch[..n]);
                    read += n;
                    if parked.conn.pending().len() >= enough {
                        break true;
                    }
                    // Bytes TLS already decrypted get no readiness event of their own.
                    if read >= READ_PER_EVENT && !parked.conn.stream.holds_decrypted() {
                        break true;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break false,
            }
        };
        if !open {
            // The client may send a request and shut its side at once: serve what came.
            let parked = self
                .parked
                .get_mut(&key)
                .expect("the connection was just read");
            if parked.conn.body_wait.is_some() {
                // The client ended its side in the middle of a body: it may still read.
                log::debug!(
                    "{}: the connection closed inside a request body",
                    parked.conn.peer
                );
                let response = Response::error(
                    400,
                    "The connection closed before the whole request body arrived",
                );
                self.close(key, Some(response));
            } else if parked.conn.head_len().is_some() {
                self.dispatch(key);
            } else {
                self.close(key, None);
            }
            return;
        }
        self.settle(key);
    }

    /// Reads and drops what a lingering connection still sends; closes it at its end.
    fn drop_late_bytes(&mut self, key: usize) {
        let Some(parked) = self.parked.get_mut(&key) else {
            return;
        };
        let done = loop {
            match parked.conn.stream.read(&mut self.scratch) {
                Ok(0) => break true,
                Ok(n) => {
                    parked.dropped += n;
                    if parked.dropped > LINGER_BYTES {
                        break true;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break true,
            }
        };
        if done
            || self
                .poller
                .modify(&parked.conn.stream, Event::readable(key))
                .is_err()
        {
            self.close(key, None);
        }
    }

    /// Decides what a parked connection waits for next, from the bytes it has: a whole
    /// head goes to a handler thread, a head past the limit gets 431, a partial head
    /// waits under its deadline, nothing waits as idle.
    fn settle(&mut self, key: usize) {
        let Some(parked) = self.parked.get_mut(&key) else {
            return;
        };
        if parked.conn.body_wait.is_some() {
            self.settle_body(key);
            return;
        }
        let conn = &mut parked.conn;
        let complete = conn.head_len().is_some();
        if complete {
            self.dispatch(key);
            return;
        }
        if conn.pending().len() > MAX_HEAD_BYTES {
            log::warn!("{}: request head too large", conn.peer);
            self.close(key, Some(too_large_head()));
            return;
        }
        if !conn.pending().is_empty() && conn.head_started.is_none() {
            let now = Instant::now();
            conn.head_started = Some(now);
            if let Some(since) = parked.idle_since.take() {
                self.idle.remove(&(since, key));
            }
            self.partial.insert((now + self.limits.head_timeout, key));
        }
        let stream = &self.parked[&key].conn.stream;
        if self.poller.modify(stream, Event::readable(key)).is_err() {
            self.close(key, None);
        }
    }

    fn dispatch(&mut self, key: usize) {
        let Some(mut parked) = self.parked.remove(&key) else {
            return;
        };
        self.forget_timers(key, &mut parked);
        self.in_service += 1;
        if let Err(e) = self.work.send(parked.conn) {
            // No handler threads left (shutting down).
            self.in_service -= 1;
            let conn = e.into_inner();
            let _ = self.poller.delete(&conn.stream);
        }
    }

    /// A connection back from a handler thread, to wait for its next request.
    fn park(&mut self, mut conn: Connection) {
        self.end_streaming(&mut conn);
        if self.stop.load(Ordering::SeqCst) || conn.stream.set_nonblocking(true).is_err() {
            let _ = self.poller.delete(&conn.stream);
            return;
        }
        conn.take_decrypted();
        conn.release_buffer();
        let idle_since = conn.pending().is_empty().then(Instant::now);
        let key = self.insert(conn, idle_since);
        self.settle(key);
    }

    /// Takes a connection out of every clock and count the poller keeps for it.
    fn forget_timers(&mut self, key: usize, parked: &mut Parked) {
        if let Some(since) = parked.idle_since.take() {
            self.idle.remove(&(since, key));
        }
        if let Some(started) = parked.conn.head_started.take() {
            self.partial
                .remove(&(started + self.limits.head_timeout, key));
        }
        if let Some(deadline) = parked.linger_until.take() {
            self.lingering.remove(&(deadline, key));
        }
        if let Some(due) = parked.body_due.take() {
            self.bodies.remove(&(due, key));
        }
        self.buffered -= std::mem::take(&mut parked.counted);
        parked.paused = false;
    }

    /// Closes a parked connection. With a last response to send, it is written (best
    /// effort: the socket is not waited for) and the connection lingers; without one it
    /// is closed at once.
    fn close(&mut self, key: usize, last: Option<Response>) {
        if let Some(response) = last {
            if let Some(parked) = self.parked.get_mut(&key) {
                let mut bytes = Vec::new();
                if write_response(&mut bytes, &response, false).is_ok() {
                    let _ = parked.conn.stream.write_all(&bytes);
                }
                self.linger(key);
            }
            return;
        }
        let Some(mut parked) = self.parked.remove(&key) else {
            return;
        };
        self.forget_timers(key, &mut parked);
        let _ = self.poller.delete(&parked.conn.stream);
    }

    /// Closes connections past their deadlines: 408 for heads and bodies that took too
    /// long, silently for connections idle past the idle timeout.
    fn expire(&mut self, now: Instant) {
        while let Some(&(deadline, key)) = self.bodies.first() {
            if deadline > now {
                break;
            }
            if let Some(parked) = self.parked.get(&key) {
                log::warn!(
                    "{}: request body not complete in time (--http-body-timeout {:?} without progress, --http-body-deadline {:?} in all)",
                    parked.conn.peer,
                    self.limits.body_timeout,
                    self.limits.body_deadline
                );
            }
            self.bodies.pop_first();
            if let Some(parked) = self.parked.get_mut(&key) {
                parked.body_due = None;
            }
            self.close(
                key,
                Some(Response::error(
                    408,
                    "Request Timeout: the request body did not arrive in time",
                )),
            );
        }
        while let Some(&(deadline, key)) = self.partial.first() {
            if deadline > now {
                break;
            }
            if let Some(parked) = self.parked.get(&key) {
                log::warn!(
                    "{}: request head not complete within {:?}",
                    parked.conn.peer,
                    self.limits.head_timeout
                );
            }
            self.partial.pop_first();
            self.close(
                key,
                Some(Response::error(
                    408,
                    "Request Timeout: the request head did not arrive in time",
                )),
            );
        }
        while let Some(&(since, key)) = self.idle.first() {
            if since + self.limits.idle_timeout > now {
                break;
            }
            self.idle.pop_first();
            self.close(key, None);
        }
        while let Some(&(deadline, key)) = self.lingering.first() {
            if deadline > now {
                break;
            }
            self.lingering.pop_first();
            self.close(key, None);
        }
    }
}
