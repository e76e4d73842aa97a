//! The connection loop of a handler thread: a connection arrives from the poller with a
//! complete request head in its buffer; the thread serves that request (and the ones
//! that follow at once, while no other connection waits for a thread), then hands the
//! connection back to the poller, so a thread is only ever busy with a request or, for
//! at most two milliseconds and only when it is free anyway, waiting for the next one.
//!
//! A request whose body is not all there is first admitted on its head alone (token,
//! permission, size: nothing of the body is read for a refused one), then waited for
//! for at most the same two milliseconds; a body slower than that goes back to the
//! poller, which gathers it (`gather`) and hands the request over again once it is
//! complete. So a slow body costs buffered bytes, never more than half the threads.
//!
//! Files: `reactor/` (the poller thread: accepting, parking, gathering bodies);
//! `connection.rs`, `transport.rs`, `clients.rs` (a connection, TCP or TLS, counted per
//! client); `head.rs`, `request.rs`, `body.rs`, `encoding.rs`, `gather.rs`, `range.rs`
//! (reading a request); `response.rs` (writing an answer).

use std::io::BufWriter;
use std::net::IpAddr;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::server::http::body::{Body, read_whole};
use crate::server::http::connection::Connection;
use crate::server::http::encoding::Coding;
use crate::server::http::gather::{BodyWait, Gathered};
use crate::server::http::head::{Framing, HeadError, RequestHead};
use crate::server::http::request::Request;

pub(crate) mod body;
pub(crate) mod clients;
pub(crate) mod connection;
pub(crate) mod encoding;
pub(crate) mod gather;
pub mod head;
pub(crate) mod range;
pub(crate) mod reactor;
pub(crate) mod request;
pub(crate) mod response;
pub(crate) mod transport;

pub use response::{Response, ResponseBody, write_response};

/// What the transport serves requests with: the router implements it, so this layer never
/// names a handler.
pub trait Service: Sync {
    /// Answers one request.
    fn handle(&self, req: &mut Request) -> Response;
    /// Checks, on the head alone, whether the request may have its body read (the
    /// token, for routes that need one); the refusal to send instead, without reading it.
    fn admit(&self, head: &RequestHead, peer: Option<IpAddr>) -> Option<Response>;
    /// Counts one answered request (method, raw path, status, time from head to last byte).
    fn observe(&self, method: &str, path: &str, status: u16, elapsed: Duration);
    /// Adds what every answer carries (CORS) to a refusal the transport makes itself.
    fn decorate_refusal(&self, head: &RequestHead, response: &mut Response);
    /// Takes the server's base path off a request's path before anything else looks at
    /// it; a path outside it gets the refusal returned instead.
    fn rebase(&self, _head: &mut RequestHead) -> Option<Response> {
        None
    }
}

/// Requests served back to back on one connection before it goes to the back of the
/// queue (only while nobody else is waiting).
const MAX_IN_A_ROW: usize = 64;
/// How long a handler thread waits for a connection's next request before handing the
/// connection to the poller (only when no other connection waits for a thread): a
/// client that answers at once is served without a hop through the poller.
const NEXT_REQUEST_WAIT: Duration = Duration::from_millis(2);
/// How long writing a response may stall before the connection is dropped.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// Default of [`Limits::idle_timeout`]: idle keep-alive connections cost no thread, so
/// they are kept for minutes, as ReductStore keeps them.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// Default of [`Limits::head_timeout`].
pub const DEFAULT_HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Default of [`Limits::body_timeout`].
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// Default of [`Limits::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;
/// Default of [`Limits::max_body_size`].
pub const DEFAULT_MAX_BODY_SIZE: u64 = 512 << 20;
/// Default of [`Limits::body_deadline`]: a 512 MiB body over a 10 Mbit/s uplink fits.
pub const DEFAULT_BODY_DEADLINE: Duration = Duration::from_secs(600);
/// Default of [`Limits::body_buffer`]: a batch of camera frames fits.
pub const DEFAULT_BODY_BUFFER: usize = 8 << 20;
/// Default of [`Limits::body_buffer_total`].
pub const DEFAULT_BODY_BUFFER_TOTAL: usize = 256 << 20;
/// Default of [`Limits::max_connections_per_client`]: a quarter of the connections.
pub const DEFAULT_MAX_CONNECTIONS_PER_CLIENT: usize = DEFAULT_MAX_CONNECTIONS / 4;

/// The limits of the network edge: how long connections may idle or dawdle, how many
/// may be open, how large a body may be.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// How long a kept-alive connection may wait for its next request.
    pub idle_timeout: Duration,
    /// How long the whole head of a request may take to arrive, from its first byte
    /// (408 past it).
    pub head_timeout: Duration,
    /// How long a body read may wait for the next bytes (a progress deadline).
    pub body_timeout: Duration,
    /// Open connections at most; past it the oldest idle one is closed.
    pub max_connections: usize,
    /// Largest request body (a record, a batch, a chunked upload); 413 past it.
    pub max_body_size: u64,
    /// How long a whole request body may take to arrive, from the end of its head
    /// (besides the progress deadline `body_timeout`); 408 past it.
    pub body_deadline: Duration,
    /// Most bytes of one body the poller gathers before a handler thread takes the
    /// request; the rest of a larger body is streamed from the socket.
    pub body_buffer: usize,
    /// Most bytes all bodies being gathered may hold together; past it, bodies are
    /// streamed (or wait for a streaming slot) instead.
    pub body_buffer_total: usize,
    /// Handler threads that may stream a body from the socket at once (the others stay
    /// free for complete requests); the server sets it from its thread count
    /// ([`Limits::streaming_slots`]).
    pub streaming_bodies: usize,
    /// Open connections one client address may hold (trusted proxies excepted); 429 past it.
    pub max_connections_per_client: usize,
}

impl Limits {
    /// The streaming slots for `threads` handler threads: half of them, at least one,
    /// so slow large bodies never hold every thread when there are two or more.
    pub fn streaming_slots(threads: usize) -> usize {
        (threads / 2).max(1)
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            head_timeout: DEFAULT_HEAD_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_body_size: DEFAULT_MAX_BODY_SIZE,
            body_deadline: DEFAULT_BODY_DEADLINE,
            body_buffer: DEFAULT_BODY_BUFFER,
            body_buffer_total: DEFAULT_BODY_BUFFER_TOTAL,
            streaming_bodies: 4,
            max_connections_per_client: DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
        }
    }
}

/// What becomes of a connection a handler thread has served.
pub enum After {
    /// Back to the poller until its next request.
    Park(Connection),
    /// Back to the poller to gather the body of the admitted request whose head is
    /// pending (`Connection::body_wait` says how).
    Gather(Connection),
    /// Close it.
    Close(Connection),
}

/// Serves the requests whose heads are in the connection's buffer (the first always; the
/// next ones only while nobody else waits for a thread).
pub fn serve(
    app: &dyn Service,
    mut conn: Connection,
    limits: &Limits,
    stop: &AtomicBool,
    others_waiting: &dyn Fn() -> bool,
) -> After {
    let ready = conn.stream.set_nonblocking(false).is_ok()
        && conn
            .stream
            .set_read_timeout(Some(limits.body_timeout))
            .is_ok()
        && conn.stream.set_write_timeout(Some(WRITE_TIMEOUT)).is_ok();
    if !ready {
        return After::Close(conn);
    }
    let mut served = 0;
    let mut waited = false;
    loop {
        let Some(end) = conn.head_len() else {
            // Between requests: a client that sends its next request at once is served
            // on this thread while nobody else waits (a hop through the poller costs a
            // wake-up); otherwise, or if it is slow, the poller takes the connection.
            let keep = served > 0
                && !waited
                && served < MAX_IN_A_ROW
                && !others_waiting()
                && !stop.load(Ordering::SeqCst);
            if !keep {
                return After::Park(conn);
            }
            waited = true;
            match await_next(&mut conn, limits) {
                Next::Bytes => continue,
                Next::Quiet => return After::Park(conn),
                Next::Closed => return After::Close(conn),
            }
        };
        if served > 0 && others_waiting() {
            return After::Park(conn);
        }
        waited = false;
        served += 1;
        let head = match head::parse_head(&conn.pending()[..end]) {
            Ok(mut head) => match app.rebase(&mut head) {
                None => head,
                Some(refusal) => {
                    conn.consume(end);
                    conn.head_started = None;
                    refuse_unread(app, &mut conn, &refusal);
                    return After::Close(conn);
                }
            },
            Err(e) => {
                conn.consume(end);
                conn.head_started = None;
                let response = match e {
                    HeadError::TooLarge => {
                        log::warn!("{}: request head too large", conn.peer);
                        too_large_head()
                    }
                    HeadError::Malformed(why) => {
                        log::warn!("{}: malformed request: {why}", conn.peer);
                        Response::error(400, &format!("Malformed request: {why}"))
                    }
                };
                refuse_unread(app, &mut conn, &response);
                return After::Close(conn);
            }
        };
        let admitted = match body_ready(app, &mut conn, &head, end, limits) {
            BodyReady::Now { admitted } => admitted,
            BodyReady::Gather(wait) => {
                conn.body_wait = Some(wait);
                return After::Gather(conn);
            }
            BodyReady::Refused(response) => {
                conn.consume(end);
                let started = Instant::now();
                let (_, status) = refuse(&mut conn, &response);
                app.observe(&head.method, &head.path, status, started.elapsed());
                return After::Close(conn);
            }
            BodyReady::Broken => return After::Close(conn),
        };
        conn.consume(end);
        conn.head_started = None;
        let keep_alive = serve_request(app, &mut conn, head, admitted, limits, stop);
        if conn.clear_body_deadline().is_err() || !keep_alive {
            return After::Close(conn);
        }
    }
}

/// Whether a request's body is there for its handler.
enum BodyReady {
    /// Serve it now: the body is complete in the buffer, empty, refused by its framing
    /// (the answer says why), or, once `admitted` on its head, gathered or to be streamed.
    Now { admitted: bool },
    /// Admitted, and the body is still arriving: the poller gathers it.
    Gather(BodyWait),
    /// Refused on its head, with none of its body read.
    Refused(Response),
    /// The connection failed.
    Broken,
}

/// Decides, before anything of the request is handled, whether its body is ready: a
/// body the poller gathered is; one complete in the buffer is; otherwise the request is
/// admitted on its head, and its body waited for briefly before the poller is asked to
/// gather it (or, for a request that waits for `100 Continue`, to give it a streaming
/// slot).
fn body_ready(
    app: &dyn Service,
    conn: &mut Connection,
    head: &RequestHead,
    head_len: usize,
    limits: &Limits,
) -> BodyReady {
    if let Some(wait) = conn.body_wait.take() {
        // Back from the poller: complete, or to be streamed (the rest from the socket)
        // within what is left of the total deadline.
        conn.set_body_deadline(wait.started + limits.body_deadline, limits.body_timeout);
        return BodyReady::Now { admitted: true };
    }
    let framing = match head::framing(head) {
        Ok(Framing::Length(n)) if n == 0 || n > limits.max_body_size => {
            return BodyReady::Now { admitted: false };
        }
        Ok(framing) => framing,
        Err(_) => return BodyReady::Now { admitted: false },
    };
    let mut wait = BodyWait::new(head_len, framing);
    if wait.progress(&conn.pending()[head_len..], limits.body_buffer) == Gathered::Complete {
        return BodyReady::Now { admitted: false };
    }
    // Not all there: nothing more of it is read for a request that may not send it.
    if let Some(refusal) = app.admit(head, conn.peer_ip) {
        return BodyReady::Refused(refusal);
    }
    if head.expects_continue() {
        // The client sends the body only after `100 Continue`, which the handler sends
        // when it reads the body — so a request it refuses (a missing bucket) is
        // answered before any body is sent, as ReductStore does. Such a request is
        // streamed, on a streaming slot like a body too large to gather.
        return BodyReady::Gather(wait.streamed());
    }
    match await_body(conn, &mut wait, limits) {
        Some(true) => BodyReady::Now { admitted: true },
        Some(false) => BodyReady::Gather(wait),
        None => BodyReady::Broken,
    }
}

/// Reads an admitted body for at most [`NEXT_REQUEST_WAIT`]: `Some(true)` when it is
/// complete in the buffer, `Some(false)` when it is still arriving (or fills the buffer,
/// or the client closed: the poller sees to it), `None` when the socket failed.
fn await_body(conn: &mut Connection, wait: &mut BodyWait, limits: &Limits) -> Option<bool> {
    let until = Instant::now() + NEXT_REQUEST_WAIT;
    let complete = loop {
        match wait.progress(&conn.pending()[wait.head_len..], limits.body_buffer) {
            Gathered::Complete => break true,
            Gathered::Full => break false,
            Gathered::Waiting => {}
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() || conn.stream.set_read_timeout(Some(left)).is_err() {
            break false;
        }
        match fill_once(conn) {
            Ok(Next::Bytes) => {}
            Ok(Next::Quiet | Next::Closed) => break false,
            Err(_) => return None,
        }
    };
    conn.stream
        .set_read_timeout(Some(limits.body_timeout))
        .ok()?;
    Some(complete)
}

/// What a short wait for more bytes brought.
enum Next {
    /// Bytes arrived.
    Bytes,
    /// Nothing within the wait.
    Quiet,
    /// The client closed the connection.
    Closed,
}

/// One read into the connection's buffer within the socket's read timeout: bytes,
/// nothing before the timeout, or the end of the stream; an error when the socket failed.
fn fill_once(conn: &mut Connection) -> std::io::Result<Next> {
    loop {
        match conn.fill() {
            Ok(0) => return Ok(Next::Closed),
            Ok(_) => return Ok(Next::Bytes),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Ok(Next::Quiet);
            }
            Err(e) => return Err(e),
        }
    }
}

/// Waits up to [`NEXT_REQUEST_WAIT`] for the next request's bytes.
fn await_next(conn: &mut Connection, limits: &Limits) -> Next {
    if conn
        .stream
        .set_read_timeout(Some(NEXT_REQUEST_WAIT))
        .is_err()
    {
        return Next::Closed;
    }
    let next = fill_once(conn).unwrap_or(Next::Closed);
    if conn
        .stream
        .set_read_timeout(Some(limits.body_timeout))
        .is_err()
    {
        return Next::Closed;
    }
    next
}

/// The 431 answer to a head past the limits.
pub fn too_large_head() -> Response {
    Response::error(
        431,
        &format!(
            "Request head is larger than {} bytes or has more than {} headers",
            head::MAX_HEAD_BYTES,
            head::MAX_HEADERS
        ),
    )
}

/// Sends a response after which the connection closes; returns keep-alive off and the
/// status sent.
/// [`refuse`] for a request whose head was read: the refusal gets the headers every
/// answer carries (CORS) first.
fn refuse_request(
    app: &dyn Service,
    conn: &mut Connection,
    head: &RequestHead,
    mut response: Response,
) -> (bool, u16) {
    app.decorate_refusal(head, &mut response);
    refuse(conn, &response)
}

fn refuse(conn: &mut Connection, response: &Response) -> (bool, u16) {
    let _ = write_response(&mut BufWriter::new(&mut conn.stream), response, false);
    (false, response.status)
}

/// Refuses a request whose head could not be read, counting it for `/metrics` with no
/// route or method (it has none we could trust); returns keep-alive off.
fn refuse_unread(app: &dyn Service, conn: &mut Connection, response: &Response) -> bool {
    let (_, status) = refuse(conn, response);
    app.observe("", "", status, Duration::ZERO);
    false
}

/// Serves one request and counts it for `/metrics`; true when the connection may serve
/// another.
fn serve_request(
    app: &dyn Service,
    conn: &mut Connection,
    head: head::RequestHead,
    admitted: bool,
    limits: &Limits,
    stop: &AtomicBool,
) -> bool {
    let started = Instant::now();
    let (method, path) = (head.method.clone(), head.path.clone());
    let (keep_alive, status) = answer(app, conn, head, admitted, limits, stop);
    app.observe(&method, &path, status, started.elapsed());
    keep_alive
}

/// Answers one request (`admitted`: its token and permission were checked on the head);
/// returns whether the connection may serve another and
/// the status.
fn answer(
    app: &dyn Service,
    conn: &mut Connection,
    head: head::RequestHead,
    admitted: bool,
    limits: &Limits,
    stop: &AtomicBool,
) -> (bool, u16) {
    let keep_alive = head.keep_alive() && !stop.load(Ordering::SeqCst);
    let (method, path) = (head.method.clone(), head.path.clone());
    let too_large = |n: &dyn std::fmt::Display| {
        Response::error(
            413,
            &format!(
                "Request body of {n} bytes is larger than this server accepts ({} bytes, --max-body-size)",
                limits.max_body_size
            ),
        )
    };
    let coding = match encoding::coding(&head) {
        Ok(coding) => coding,
        Err(refusal) => return refuse_request(app, conn, &head, refusal),
    };
    let (response, keep_alive) = match head::framing(&head) {
        Err(e) => {
            log::debug!("{} {method} {path}: {}", conn.peer, e.message);
            return refuse_request(app, conn, &head, Response::error(e.status, &e.message));
        }
        Ok(Framing::Length(n)) if n > limits.max_body_size => {
            return refuse_request(app, conn, &head, too_large(&n));
        }
        Ok(Framing::Length(n)) if coding == Coding::Identity => {
            let expects_continue = head.expects_continue();
            let peer_ip = conn.peer_ip;
            let mut req = Request {
                head,
                body: Body::streamed(conn, n, expects_continue),
                peer_ip,
                caller: None,
            };
            let response = run_handler(app, &mut req);
            let keep_alive = req.body.finish() && keep_alive;
            (response, keep_alive)
        }
        Ok(framing) => {
            // A chunked or compressed body is decoded before the handler runs:
            // authenticate first, so no byte of it is read (or buffered) for a request
            // without a valid token.
            if !admitted && let Some(refusal) = app.admit(&head, conn.peer_ip) {
                return refuse(conn, &refusal);
            }
            let decoded = read_whole(conn, &head, framing, limits.max_body_size).and_then(|raw| {
                encoding::decode_within(coding, raw, limits.max_body_size, limits.body_buffer_total)
            });
            match decoded {
                Err(refusal) => return refuse_request(app, conn, &head, refusal),
                Ok((bytes, _reserved)) => {
                    let mut req = Request {
                        head,
                        body: Body::decoded(bytes),
                        peer_ip: conn.peer_ip,
                        caller: None,
                    };
                    (run_handler(app, &mut req), keep_alive)
                }
            }
        }
    };
    let mut response = response;
    if method == "HEAD" && !matches!(response.body, ResponseBody::Head(_)) {
        // A HEAD answer never carries a body, errors included: only its length.
        response.body = ResponseBody::Head(response.body.content_length());
    }
    log::debug!("{} {method} {path} -> {}", conn.peer, response.status);
    let mut writer = BufWriter::with_capacity(32 << 10, &mut conn.stream);
    let kept = write_response(&mut writer, &response, keep_alive).is_ok() && keep_alive;
    (kept, response.status)
}

/// Runs the handler; a panic becomes a 500 (the thread and the connection survive).
fn run_handler(app: &dyn Service, req: &mut Request) -> Response {
    catch_unwind(AssertUnwindSafe(|| app.handle(req))).unwrap_or_else(|_| {
        log::error!(
            "{} {}: the handler panicked",
            req.head.method,
            req.head.path
        );
        Response::error(
            500,
            "Internal error: the request handler failed; see the server log",
        )
    })
}
