//! A client connection as it moves between the poller (parked, between requests) and a
//! handler thread (one request at a time): the socket and the bytes read from it that no
//! request has consumed yet (a head being gathered, the start of a body, a pipelined
//! request).

use std::io::{self, Read};
use std::time::{Duration, Instant};

use crate::server::http::clients::ClientSlot;
use crate::server::http::gather::BodyWait;
use crate::server::http::transport::Transport;

/// Bytes read from the socket at once.
const READ_CHUNK: usize = 64 << 10;

/// A client connection and its unconsumed bytes.
pub struct Connection {
    /// The socket, plain or TLS (non-blocking while parked, blocking with timeouts while
    /// served).
    pub stream: Transport,
    /// The peer's address, for logs.
    pub peer: String,
    /// The peer's IP address (token IP allowlists).
    pub peer_ip: Option<std::net::IpAddr>,
    /// Read buffer, initialized to its length: the unconsumed bytes are
    /// `buf[start..end]`; reads land in `buf[end..]`, so a served connection reuses
    /// one buffer from request to request without clearing it.
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// When the first byte of the request head being gathered arrived.
    pub head_started: Option<Instant>,
    /// How far the search for the end of the pending head got (see `head::head_end`).
    head_scanned: usize,
    /// The body the poller gathers (or has gathered) for the request whose head is
    /// pending: set once that request was admitted on its head.
    pub body_wait: Option<BodyWait>,
    /// The poller handed this connection over to stream a body too large to gather: it
    /// holds one of the few streaming slots until it comes back.
    pub streaming: bool,
    /// While a handler reads a body from the socket: when the whole body must be in
    /// (`--http-body-deadline`), and the progress deadline each read may wait.
    body_deadline: Option<(Instant, Duration)>,
    /// This connection's place in its client's connection count (none for a trusted
    /// proxy); given back when the connection is dropped.
    _slot: Option<ClientSlot>,
}

impl Connection {
    /// Wraps an accepted socket, counted in its client's slot.
    pub fn new(stream: Transport, slot: Option<ClientSlot>) -> Connection {
        let addr = stream.socket().peer_addr().ok();
        let peer = addr.map_or_else(|| "?".to_string(), |a| a.to_string());
        Connection {
            stream,
            peer,
            peer_ip: addr.map(|a| a.ip()),
            buf: Vec::new(),
            start: 0,
            end: 0,
            head_started: None,
            head_scanned: 0,
            body_wait: None,
            streaming: false,
            body_deadline: None,
            _slot: slot,
        }
    }

    /// Bounds the body reads that follow: each waits at most `progress` for bytes, and
    /// none goes past `deadline`.
    pub fn set_body_deadline(&mut self, deadline: Instant, progress: Duration) {
        self.body_deadline = Some((deadline, progress));
    }

    /// Ends the bound of [`Connection::set_body_deadline`]; the socket waits `progress`
    /// again.
    pub fn clear_body_deadline(&mut self) -> io::Result<()> {
        match self.body_deadline.take() {
            Some((_, progress)) => self.stream.set_read_timeout(Some(progress)),
            None => Ok(()),
        }
    }

    /// Bytes read and not consumed yet.
    pub fn pending(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// The length of the whole request head at the start of the pending bytes, `None`
    /// while it is incomplete; the search resumes where the last one stopped, so a head
    /// that trickles in is scanned once.
    pub fn head_len(&mut self) -> Option<usize> {
        crate::server::http::head::head_end(&self.buf[self.start..self.end], &mut self.head_scanned)
    }

    /// Marks `n` pending bytes consumed.
    pub fn consume(&mut self, n: usize) {
        // The search for a head's end counts from the first pending byte.
        self.head_scanned = 0;
        self.start = (self.start + n).min(self.end);
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Moves the bytes TLS has decrypted but nobody read into the pending bytes: done
    /// before the poller takes the connection, which only learns of bytes the socket
    /// signals (see `transport.rs`).
    pub fn take_decrypted(&mut self) {
        let mut decrypted = Vec::new();
        self.stream.drain_decrypted(&mut decrypted);
        if !decrypted.is_empty() {
            self.push(&decrypted);
        }
    }

    /// Frees the buffer when nothing is pending, so a parked idle connection costs no
    /// buffer.
    pub fn release_buffer(&mut self) {
        if self.start == self.end {
            self.buf = Vec::new();
            self.start = 0;
            self.end = 0;
        }
    }

    /// Room for at least `n` more bytes after the pending ones.
    fn make_room(&mut self, n: usize) {
        if self.buf.len() - self.end >= n {
            return;
        }
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.buf.len() - self.end < n {
            self.buf.resize(self.end + n, 0);
        }
    }

    /// Appends bytes the poller read for this connection.
    pub fn push(&mut self, bytes: &[u8]) {
        self.make_room(bytes.len());
        self.buf[self.end..self.end + bytes.len()].copy_from_slice(bytes);
        self.end += bytes.len();
    }

    /// Reads once from the socket, appending to the pending bytes: `Ok(0)` at the end of
    /// the stream. On a non-blocking socket this returns `WouldBlock` when nothing is there.
    pub fn fill(&mut self) -> io::Result<usize> {
        self.make_room(READ_CHUNK);
        let n = read_bounded(
            &mut self.stream,
            self.body_deadline,
            &mut self.buf[self.end..],
        )?;
        self.end += n;
        Ok(n)
    }
}

impl Read for Connection {
    /// Pending bytes first, then the socket — straight into the caller's buffer when it is
    /// large, so a big body is copied once.
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        if self.start == self.end {
            if out.len() >= READ_CHUNK {
                return read_bounded(&mut self.stream, self.body_deadline, out);
            }
            if self.fill()? == 0 {
                return Ok(0);
            }
        }
        let n = out.len().min(self.end - self.start);
        out[..n].copy_from_slice(&self.buf[self.start..self.start + n]);
        self.consume(n);
        Ok(n)
    }
}

/// One read from the socket, within the body deadline (and its progress wait) when one
/// is set.
fn read_bounded(
    stream: &mut Transport,
    bound: Option<(Instant, Duration)>,
    out: &mut [u8],
) -> io::Result<usize> {
    if let Some((deadline, progress)) = bound {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the body did not arrive within the total body deadline (--http-body-deadline)",
            ));
        }
        if left < progress {
            stream.set_read_timeout(Some(left))?;
        }
    }
    stream.read(out)
}
