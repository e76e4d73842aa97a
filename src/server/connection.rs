//! A client connection as it moves between the poller (parked, between requests) and a
//! handler thread (one request at a time): the socket and the bytes read from it that no
//! request has consumed yet (a head being gathered, the start of a body, a pipelined
//! request).

use std::io::{self, Read};
use std::net::TcpStream;
use std::time::Instant;

/// Bytes read from the socket at once.
const READ_CHUNK: usize = 64 << 10;

/// A client connection and its unconsumed bytes.
pub struct Connection {
    /// The socket (non-blocking while parked, blocking with timeouts while served).
    pub stream: TcpStream,
    /// The peer's address, for logs.
    pub peer: String,
    /// Bytes read but not consumed start at `pos`.
    buf: Vec<u8>,
    pos: usize,
    /// When the first byte of the request head being gathered arrived.
    pub head_started: Option<Instant>,
    /// How far the search for the end of that head got (see `head::head_end`).
    pub head_scanned: usize,
}

impl Connection {
    /// Wraps an accepted socket.
    pub fn new(stream: TcpStream) -> Connection {
        let peer = stream
            .peer_addr()
            .map_or_else(|_| "?".to_string(), |a| a.to_string());
        Connection {
            stream,
            peer,
            buf: Vec::new(),
            pos: 0,
            head_started: None,
            head_scanned: 0,
        }
    }

    /// Bytes read and not consumed yet.
    pub fn pending(&self) -> &[u8] {
        &self.buf[self.pos..]
    }

    /// Marks `n` pending bytes consumed; when none are left the buffer is released, so an
    /// idle connection costs no buffer.
    pub fn consume(&mut self, n: usize) {
        self.pos = (self.pos + n).min(self.buf.len());
        if self.pos == self.buf.len() {
            self.buf = Vec::new();
            self.pos = 0;
        }
    }

    /// Whether a whole request head is pending; the search resumes where the last one
    /// stopped, so a head that trickles in is scanned once.
    pub fn has_whole_head(&mut self) -> bool {
        let mut scanned = self.head_scanned;
        let found = crate::server::head::head_end(&self.buf[self.pos..], &mut scanned).is_some();
        self.head_scanned = scanned;
        found
    }

    /// Appends bytes the poller read for this connection.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Reads once from the socket, appending to the pending bytes: `Ok(0)` at the end of
    /// the stream. On a non-blocking socket this returns `WouldBlock` when nothing is there.
    pub fn fill(&mut self) -> io::Result<usize> {
        if self.pos > 0 && self.pos * 2 >= self.buf.len() {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        let start = self.buf.len();
        self.buf.resize(start + READ_CHUNK, 0);
        let result = self.stream.read(&mut self.buf[start..]);
        self.buf.truncate(start + *result.as_ref().unwrap_or(&0));
        result
    }
}

impl Read for Connection {
    /// Pending bytes first, then the socket — straight into the caller's buffer when it is
    /// large, so a big body is copied once.
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        if self.pending().is_empty() {
            if out.len() >= READ_CHUNK {
                return self.stream.read(out);
            }
            if self.fill()? == 0 {
                return Ok(0);
            }
        }
        let n = out.len().min(self.pending().len());
        out[..n].copy_from_slice(&self.pending()[..n]);
        self.consume(n);
        Ok(n)
    }
}
