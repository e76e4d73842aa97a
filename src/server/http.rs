//! A small blocking HTTP/1.1 layer: request heads read with hard size limits, bodies
//! streamed from the socket (with `Expect: 100-continue` answered only when the handler
//! actually reads), responses written straight from record payloads, keep-alive.
//!
//! It is hand-written rather than taken from a crate because the server must refuse
//! oversized heads with a 4xx before buffering them, and must not buffer bodies it never
//! reads; the blocking HTTP crates at hand read heads without any bound.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;

pub use crate::server::response::{Response, ResponseBody, write_response};

/// Largest request head (request line and headers) accepted; batched writes put one
/// header per record in it, so it is generous.
pub const MAX_HEAD_BYTES: u64 = 1 << 20;
/// Most header lines accepted in one request head.
pub const MAX_HEADERS: usize = 10_000;

/// A parsed request line and headers.
#[derive(Debug, Clone)]
pub struct RequestHead {
    /// Method, as sent (`GET`, `POST`, …).
    pub method: String,
    /// The path part of the target, still percent-encoded.
    pub path: String,
    /// The query string (after `?`), still percent-encoded; empty when there is none.
    pub query: String,
    /// Headers with lowercased names, in arrival order.
    pub headers: Vec<(String, String)>,
    /// HTTP/1.1 (keep-alive by default) rather than 1.0.
    pub http11: bool,
}

impl RequestHead {
    /// The first header with this (lowercase) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether the connection may serve another request after this one.
    fn keep_alive(&self) -> bool {
        match self.header("connection").map(str::to_ascii_lowercase) {
            Some(v) if v.contains("close") => false,
            Some(v) if v.contains("keep-alive") => true,
            _ => self.http11,
        }
    }

    fn expects_continue(&self) -> bool {
        self.header("expect")
            .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
    }

    /// The query parameter `name`, percent-decoded.
    pub fn query_param(&self, name: &str) -> Option<String> {
        self.query.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (k == name).then(|| crate::server::percent::decode(v))
        })
    }
}

/// Why a request head could not be read.
#[derive(Debug)]
pub enum HeadError {
    /// The peer closed (or went idle) before sending a request: not an error.
    Closed,
    /// The head passed [`MAX_HEAD_BYTES`] or [`MAX_HEADERS`] (answered with 431).
    TooLarge,
    /// Not HTTP (answered with 400), with what was wrong.
    Malformed(String),
}

/// Reads one request head. Every byte read counts against [`MAX_HEAD_BYTES`], so a peer
/// cannot make the server buffer more than that.
pub fn read_head(reader: &mut impl BufRead) -> Result<RequestHead, HeadError> {
    let mut budget = MAX_HEAD_BYTES;
    let mut line = Vec::new();
    // Tolerate empty lines between pipelined requests, as RFC 9112 asks.
    let request_line = loop {
        match read_line(reader, &mut line, &mut budget)? {
            None => return Err(HeadError::Closed),
            Some(l) if l.is_empty() => continue,
            Some(l) => break l,
        }
    };
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HeadError::Malformed(format!(
            "bad request line '{}'",
            request_line.escape_default()
        )));
    };
    let http11 = match version {
        "HTTP/1.1" => true,
        "HTTP/1.0" => false,
        other => {
            return Err(HeadError::Malformed(format!(
                "unsupported HTTP version '{}'",
                other.escape_default()
            )));
        }
    };
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut headers = Vec::new();
    loop {
        let line = match read_line(reader, &mut line, &mut budget)? {
            None => return Err(HeadError::Malformed("connection closed in the head".into())),
            Some(l) => l,
        };
        if line.is_empty() {
            break;
        }
        if headers.len() == MAX_HEADERS {
            return Err(HeadError::TooLarge);
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(HeadError::Malformed(format!(
                "bad header line '{}'",
                line.escape_default()
            )));
        };
        if name.is_empty() || name.contains(|c: char| c.is_ascii_whitespace()) {
            return Err(HeadError::Malformed(format!(
                "bad header name '{}'",
                name.escape_default()
            )));
        }
        headers.push((name.to_ascii_lowercase(), value.trim().to_string()));
    }
    Ok(RequestHead {
        method: method.to_string(),
        path: path.to_string(),
        query: query.to_string(),
        headers,
        http11,
    })
}

/// One CRLF- (or LF-) terminated line, as text; `None` on a clean end of stream.
fn read_line(
    reader: &mut impl BufRead,
    buf: &mut Vec<u8>,
    budget: &mut u64,
) -> Result<Option<String>, HeadError> {
    buf.clear();
    let n = match reader.take(*budget).read_until(b'\n', buf) {
        Ok(n) => n,
        Err(_) => return Err(HeadError::Closed),
    };
    *budget -= n as u64;
    if n == 0 {
        return if *budget == 0 {
            Err(HeadError::TooLarge)
        } else {
            Ok(None)
        };
    }
    if buf.last() != Some(&b'\n') {
        return if *budget == 0 {
            Err(HeadError::TooLarge)
        } else {
            Err(HeadError::Malformed("connection closed in the head".into()))
        };
    }
    buf.pop();
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    String::from_utf8(std::mem::take(buf))
        .map(Some)
        .map_err(|_| HeadError::Malformed("the head is not valid UTF-8".into()))
}

/// The body of a request, read straight from the connection.
pub struct Body<'a> {
    reader: &'a mut BufReader<TcpStream>,
    remaining: u64,
    /// The interim `100 Continue` still owed to a client that asked for it.
    continue_owed: bool,
    /// The head said 100-continue and the handler never read: the client may not send.
    unread_continue: bool,
}

impl Body<'_> {
    /// Bytes of the body not read yet.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    fn send_continue(&mut self) -> io::Result<()> {
        if self.continue_owed {
            self.continue_owed = false;
            self.unread_continue = false;
            self.reader
                .get_mut()
                .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
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
/// a body that broke off or stalled is 400.
pub fn body_error(what: &str, e: io::Error) -> crate::Error {
    if e.kind() == io::ErrorKind::OutOfMemory {
        crate::Error::unprocessable(format!("{what}: {e}"))
    } else {
        crate::Error::bad_request(format!("{what}: {e}"))
    }
}

impl Read for Body<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.remaining == 0 || buf.is_empty() {
            return Ok(0);
        }
        self.send_continue()?;
        let want = buf.len().min(self.remaining as usize);
        let n = self.reader.read(&mut buf[..want])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("the body ended {} bytes early", self.remaining),
            ));
        }
        self.remaining -= n as u64;
        Ok(n)
    }
}

/// A decimal number as HTTP and the API write them: ASCII digits only (no sign, no spaces,
/// no `0x`), which `str::parse` alone would not enforce (it takes `+5`).
pub fn parse_decimal(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// A request being handled: its head and its body.
pub struct Request<'a> {
    /// Request line and headers.
    pub head: RequestHead,
    /// The body, streamed from the connection.
    pub body: Body<'a>,
}

/// Largest unread body the server reads and discards to keep a connection alive;
/// past it the connection is closed instead.
const MAX_DRAIN: u64 = 64 << 20;

/// Why a request could not get a body reader.
pub enum BodyError {
    /// A response to send before closing the connection.
    Reject(Response),
}

/// Prepares the body reader for a head: `Content-Length` bodies only (chunked uploads get
/// 411, which no ReductStore client sends).
pub fn body_for<'a>(
    head: &RequestHead,
    reader: &'a mut BufReader<TcpStream>,
) -> Result<Body<'a>, BodyError> {
    if head.header("transfer-encoding").is_some() {
        return Err(BodyError::Reject(Response::error(
            411,
            "content-length header is required (chunked bodies are not supported)",
        )));
    }
    let remaining = match head.header("content-length") {
        None => 0,
        Some(v) => parse_decimal(v).ok_or_else(|| {
            BodyError::Reject(Response::error(
                400,
                &format!("content-length '{}' is not a number", v.escape_default()),
            ))
        })?,
    };
    let continue_owed = head.expects_continue() && remaining > 0;
    Ok(Body {
        reader,
        remaining,
        continue_owed,
        unread_continue: continue_owed,
    })
}

/// After the handler: reads and discards what it left of the body, so the connection can
/// serve the next request. Returns false when the connection must close instead (a client
/// still waiting for `100 Continue`, or too much left to drain, or a broken body).
pub fn finish_body(mut body: Body<'_>, keep_alive: bool) -> bool {
    if body.unread_continue {
        // The client never got 100 Continue, so it may or may not send the body: the
        // stream position is unknown, and the connection cannot be reused.
        return false;
    }
    if body.remaining > MAX_DRAIN {
        return false;
    }
    let drained = io::copy(&mut body, &mut io::sink()).is_ok();
    drained && keep_alive && body.remaining == 0
}

/// Whether this head allows keep-alive.
pub fn wants_keep_alive(head: &RequestHead) -> bool {
    head.keep_alive()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_head() {
        let raw = b"POST /api/v1/b/x/e%2Fa?ts=10&y=%20 HTTP/1.1\r\nHost: a\r\nX-Reduct-Label-A: b c \r\n\r\nBODY";
        let mut r = &raw[..];
        let head = read_head(&mut r).unwrap();
        assert_eq!(head.method, "POST");
        assert_eq!(head.path, "/api/v1/b/x/e%2Fa");
        assert_eq!(head.query_param("ts").as_deref(), Some("10"));
        assert_eq!(head.query_param("y").as_deref(), Some(" "));
        assert_eq!(head.header("x-reduct-label-a"), Some("b c"));
        assert!(head.keep_alive());
        assert_eq!(r, b"BODY");
    }

    #[test]
    fn refuses_bad_and_huge_heads() {
        let mut r = &b"GARBAGE\r\n\r\n"[..];
        assert!(matches!(read_head(&mut r), Err(HeadError::Malformed(_))));
        let mut r = &b"GET / HTTP/1.1\r\nno-colon\r\n\r\n"[..];
        assert!(matches!(read_head(&mut r), Err(HeadError::Malformed(_))));
        let huge = format!(
            "GET / HTTP/1.1\r\nx: {}\r\n\r\n",
            "a".repeat(MAX_HEAD_BYTES as usize)
        );
        let mut r = huge.as_bytes();
        assert!(matches!(read_head(&mut r), Err(HeadError::TooLarge)));
        let many = format!(
            "GET / HTTP/1.1\r\n{}\r\n",
            "a: b\r\n".repeat(MAX_HEADERS + 1)
        );
        let mut r = many.as_bytes();
        assert!(matches!(read_head(&mut r), Err(HeadError::TooLarge)));
        let mut r = &b""[..];
        assert!(matches!(read_head(&mut r), Err(HeadError::Closed)));
    }

    #[test]
    fn error_responses_follow_the_api() {
        let r = Response::error(404, "Bucket \"x\" is not found");
        assert_eq!(r.status, 404);
        let mut out = Vec::new();
        write_response(&mut out, &r, false).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("HTTP/1.1 404 Not Found\r\n"));
        assert!(text.contains("x-reduct-api: 1.21\r\n"));
        assert!(text.contains("x-reduct-error: Bucket \"x\" is not found\r\n"));
        assert!(text.ends_with("{\"detail\":\"Bucket 'x' is not found\"}"));
        let r = Response::error(500, "bad \u{e9}");
        assert!(
            r.headers
                .contains(&("x-reduct-error".into(), "Unparsable message".into()))
        );
    }
}
