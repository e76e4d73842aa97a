//! Request bodies: `Content-Length` bodies streamed from the connection as the handler
//! reads them (with `Expect: 100-continue` answered only when it does), chunked bodies
//! decoded in full first (under the body size limit), and what is left unread drained
//! so the connection can serve its next request.

use std::io::{self, Read, Write};

use crate::server::http::connection::Connection;
use crate::server::http::head::{Framing, MAX_CHUNK_LINE, MAX_TRAILERS, RequestHead};
use crate::server::http::response::Response;

/// Largest unread body the server reads and discards to keep a connection alive;
/// past it the connection is closed instead.
const MAX_DRAIN: u64 = 64 << 20;

/// Where a body's bytes come from.
enum Source<'a> {
    /// Straight from the connection.
    Wire(&'a mut Connection),
    /// Already decoded (a chunked upload).
    Memory(io::Cursor<Vec<u8>>),
}

/// The body of a request.
pub struct Body<'a> {
    source: Source<'a>,
    remaining: u64,
    /// The interim `100 Continue` still owed to a client that asked for it.
    continue_owed: bool,
    /// A read failed (timeout, reset, early end): the stream position is lost.
    broken: bool,
}

impl<'a> Body<'a> {
    /// A body of `length` bytes that follows on the connection.
    pub fn streamed(conn: &'a mut Connection, length: u64, expects_continue: bool) -> Self {
        Body {
            source: Source::Wire(conn),
            remaining: length,
            continue_owed: expects_continue && length > 0,
            broken: false,
        }
    }

    /// A body already in memory.
    pub fn decoded(bytes: Vec<u8>) -> Body<'static> {
        Body {
            remaining: bytes.len() as u64,
            source: Source::Memory(io::Cursor::new(bytes)),
            continue_owed: false,
            broken: false,
        }
    }

    /// Bytes of the body not read yet.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    fn send_continue(&mut self) -> io::Result<()> {
        if self.continue_owed {
            self.continue_owed = false;
            if let Source::Wire(conn) = &mut self.source {
                conn.stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
            }
        }
        Ok(())
    }

    /// Reads the whole remaining body into one buffer of exactly its size (the only copy a
    /// record's bytes make on the way in). A body shorter than announced is an error.
    pub fn read_all(&mut self) -> io::Result<Vec<u8>> {
        let mut buf = buffer_for(self.remaining)?;
        self.read_to_end(&mut buf)?;
        Ok(buf)
    }

    /// Reads exactly `n` bytes of the body.
    pub fn read_exact_vec(&mut self, n: u64) -> io::Result<Vec<u8>> {
        if n > self.remaining {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the body is shorter than its records say",
            ));
        }
        let mut buf = buffer_for(n)?;
        buf.resize(n as usize, 0);
        self.read_exact(&mut buf)?;
        Ok(buf)
    }

    /// After the handler: reads and discards what it left, so the connection can serve
    /// its next request. False when the connection must close instead (a client still
    /// waiting for `100 Continue` may or may not send the body; too much left to drain; a
    /// body that broke off or stalled).
    pub fn finish(mut self) -> bool {
        if self.continue_owed || self.broken || self.remaining > MAX_DRAIN {
            return false;
        }
        io::copy(&mut self, &mut io::sink()).is_ok() && self.remaining == 0
    }
}

impl Read for Body<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.remaining == 0 || buf.is_empty() {
            return Ok(0);
        }
        if self.broken {
            return Err(io::Error::other("the body already failed"));
        }
        self.send_continue()?;
        let want = buf
            .len()
            .min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
        let result = match &mut self.source {
            Source::Wire(conn) => conn.read(&mut buf[..want]),
            Source::Memory(cursor) => cursor.read(&mut buf[..want]),
        };
        match result {
            Ok(0) => {
                self.broken = true;
                Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("the body ended {} bytes early", self.remaining),
                ))
            }
            Ok(n) => {
                self.remaining -= n as u64;
                Ok(n)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Err(e),
            Err(e) => {
                // A timeout here is the progress deadline: the body stalled.
                self.broken = true;
                Err(e)
            }
        }
    }
}

/// An empty buffer able to hold `n` bytes; a size the machine cannot allocate is an
/// `OutOfMemory` error rather than an abort, so a client announcing a huge body gets an
/// answer instead of killing the server.
fn buffer_for(n: u64) -> io::Result<Vec<u8>> {
    let too_large = || {
        io::Error::new(
            io::ErrorKind::OutOfMemory,
            format!("a body of {n} bytes does not fit in this server's memory"),
        )
    };
    let n = usize::try_from(n).map_err(|_| too_large())?;
    let mut buf = Vec::new();
    buf.try_reserve_exact(n).map_err(|_| too_large())?;
    Ok(buf)
}

/// The API error for a request body that could not be read: too large to hold is 422,
/// a body that stalled or passed its deadline is 408, one that broke off is 400.
pub fn body_error(what: &str, e: io::Error) -> crate::error::Error {
    match e.kind() {
        io::ErrorKind::OutOfMemory => crate::error::Error::unprocessable(format!("{what}: {e}")),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => crate::error::Error::new(
            crate::error::ErrorKind::RequestTimeout,
            format!("{what}: the body stalled or passed its deadline ({e})"),
        ),
        _ => crate::error::Error::bad_request(format!("{what}: {e}")),
    }
}

/// Why a chunked body could not be decoded.
#[derive(Debug)]
pub enum ChunkedError {
    /// The decoded body passed the limit (413).
    TooLarge,
    /// Not chunked coding as RFC 9112 §7.1 writes it, or the connection broke (400).
    Malformed(String),
}

/// Decodes a `Transfer-Encoding: chunked` body from the connection, at most `limit`
/// bytes of payload; trailers are read and dropped.
pub fn decode_chunked(conn: &mut Connection, limit: u64) -> Result<Vec<u8>, ChunkedError> {
    let mut body = Vec::new();
    loop {
        let line = read_line(conn, MAX_CHUNK_LINE)?;
        // Chunk extensions (`;name=value`) carry nothing this API uses.
        let size_text = line.split(|&b| b == b';').next().unwrap_or(&[]);
        let size_text = std::str::from_utf8(size_text)
            .map_err(|_| ChunkedError::Malformed("chunk size is not text".into()))?
            .trim_end_matches([' ', '\t']);
        if size_text.is_empty() || !size_text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(ChunkedError::Malformed(format!(
                "chunk size '{}' is not hexadecimal",
                size_text.escape_default()
            )));
        }
        let size = u64::from_str_radix(size_text, 16).map_err(|_| ChunkedError::TooLarge)?;
        if size == 0 {
            break;
        }
        if body.len() as u64 + size > limit {
            return Err(ChunkedError::TooLarge);
        }
        let start = body.len();
        body.resize(start + size as usize, 0);
        conn.read_exact(&mut body[start..])
            .map_err(|e| ChunkedError::Malformed(format!("reading a chunk: {e}")))?;
        if !read_line(conn, 2)?.is_empty() {
            return Err(ChunkedError::Malformed(
                "a chunk is longer than its size says".into(),
            ));
        }
    }
    let mut trailer_bytes = 0;
    loop {
        let line = read_line(conn, MAX_TRAILERS)?;
        trailer_bytes += line.len() + 2;
        if line.is_empty() {
            return Ok(body);
        }
        if trailer_bytes > MAX_TRAILERS {
            return Err(ChunkedError::Malformed("trailers are too large".into()));
        }
    }
}

/// One CRLF-terminated line (without it) of at most `limit` bytes.
fn read_line(conn: &mut Connection, limit: usize) -> Result<Vec<u8>, ChunkedError> {
    let mut line = Vec::new();
    loop {
        if let Some(i) = conn.pending().iter().position(|&b| b == b'\n') {
            line.extend_from_slice(&conn.pending()[..i]);
            conn.consume(i + 1);
            if line.pop() != Some(b'\r') {
                return Err(ChunkedError::Malformed(
                    "chunk lines must end with CRLF".into(),
                ));
            }
            return Ok(line);
        }
        let n = conn.pending().len();
        line.extend_from_slice(conn.pending());
        conn.consume(n);
        if line.len() > limit + 1 {
            return Err(ChunkedError::Malformed("a chunk line is too long".into()));
        }
        match conn.fill() {
            Ok(0) => {
                return Err(ChunkedError::Malformed(
                    "the connection closed inside a chunked body".into(),
                ));
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(ChunkedError::Malformed(format!("reading a chunk: {e}"))),
        }
    }
}

/// Reads a whole body into memory (answering `100 Continue` first if the client waits
/// for it): a chunked one decoded, a `Content-Length` one as sent; at most `limit`
/// bytes. The refusal to send instead: 413 past the limit, 400 for broken framing or a
/// body that broke off, 408 for one that stalled.
pub fn read_whole(
    conn: &mut Connection,
    head: &RequestHead,
    framing: Framing,
    limit: u64,
) -> Result<Vec<u8>, Response> {
    if head.expects_continue()
        && conn
            .stream
            .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            .is_err()
    {
        return Err(Response::error(
            400,
            "The connection broke before the body was sent",
        ));
    }
    let too_large = || {
        Response::error(
            413,
            &format!(
                "Request body is larger than this server accepts ({limit} bytes, --max-body-size)"
            ),
        )
    };
    match framing {
        Framing::Length(n) if n > limit => Err(too_large()),
        Framing::Length(n) => Body::streamed(conn, n, false).read_all().map_err(|e| {
            let e = body_error("reading the request body", e);
            Response::error(e.kind().http_status(), e.message())
        }),
        Framing::Chunked => decode_chunked(conn, limit).map_err(|e| match e {
            ChunkedError::TooLarge => too_large(),
            ChunkedError::Malformed(why) => {
                Response::error(400, &format!("Malformed chunked body: {why}"))
            }
        }),
    }
}
