//! Request heads: found in the connection's bytes, parsed with `httparse` (the parser the
//! Rust HTTP stack fuzzes), and their body framing decided as RFC 9112 asks — one
//! `Content-Length` (repeats must agree), or `Transfer-Encoding: chunked`, never both.

/// Largest request head (request line and headers) accepted; batched writes put one
/// header per record in it, so it is generous.
pub const MAX_HEAD_BYTES: usize = 1 << 20;
/// Most header lines accepted in one request head.
pub const MAX_HEADERS: usize = 10_000;

/// A parsed request line and headers.
#[derive(Debug, Clone, Default)]
pub struct RequestHead {
    /// Method, as sent (`GET`, `POST`, …).
    pub method: String,
    /// The path part of the target, still percent-encoded.
    pub path: String,
    /// The query string (after `?`), still percent-encoded; empty when there is none.
    pub query: String,
    /// Headers with lowercased names, values trimmed, in arrival order.
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

    /// Every header with this (lowercase) name, in arrival order.
    fn all(&self, name: &'static str) -> impl Iterator<Item = &str> {
        self.headers
            .iter()
            .filter(move |(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether the connection may serve another request after this one.
    pub fn keep_alive(&self) -> bool {
        let tokens = || {
            self.all("connection")
                .flat_map(|v| v.split(','))
                .map(|t| t.trim().to_ascii_lowercase())
        };
        if tokens().any(|t| t == "close") {
            false
        } else if tokens().any(|t| t == "keep-alive") {
            true
        } else {
            self.http11
        }
    }

    /// Whether the client waits for `100 Continue` before sending its body.
    pub fn expects_continue(&self) -> bool {
        self.header("expect")
            .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
    }

    /// The query parameter `name`, percent-decoded.
    pub fn query_param(&self, name: &str) -> Option<String> {
        self.query.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (k == name).then(|| crate::wire::percent::decode(v))
        })
    }
}

/// Why a request head was refused; each is answered before the connection closes.
#[derive(Debug, PartialEq, Eq)]
pub enum HeadError {
    /// The head passed [`MAX_HEAD_BYTES`] or [`MAX_HEADERS`] (431).
    TooLarge,
    /// Not HTTP as RFC 9112 writes it (400), with what was wrong.
    Malformed(String),
}

/// Most empty lines' bytes skipped before a request line; past it the bytes are taken
/// as a (malformed) head, so a peer cannot keep the server scanning line feeds.
const MAX_LEADING_EMPTY: usize = 1024;

/// Where the head at the start of `buf` ends (the length including its empty line), or
/// `None` while it is incomplete. Empty lines before the request line are skipped, as
/// RFC 9112 allows between pipelined requests. `scanned` carries how far earlier calls
/// looked (start it at 0 for a new head), so a head arriving byte by byte is scanned once.
pub fn head_end(buf: &[u8], scanned: &mut usize) -> Option<usize> {
    let window = &buf[..buf.len().min(MAX_LEADING_EMPTY)];
    let start = match window.iter().position(|&b| b != b'\r' && b != b'\n') {
        Some(start) => start,
        None if buf.len() >= MAX_LEADING_EMPTY => 0,
        None => return None,
    };
    // The head ends at the first line feed followed by an empty line (CRLF or bare LF);
    // httparse then checks that every line is well formed.
    let mut from = (*scanned).max(start);
    while let Some(i) = buf[from..].iter().position(|&b| b == b'\n') {
        let at = from + i;
        match (buf.get(at + 1), buf.get(at + 2)) {
            (Some(b'\n'), _) => return Some(at + 2),
            (Some(b'\r'), Some(b'\n')) => return Some(at + 3),
            (None, _) | (Some(b'\r'), None) => break,
            _ => from = at + 1,
        }
    }
    // A line feed in the last two bytes may still begin the end of the head.
    *scanned = buf.len().saturating_sub(2).max(start);
    None
}

/// Parses a complete head (`bytes` as [`head_end`] delimited it).
pub fn parse_head(bytes: &[u8]) -> Result<RequestHead, HeadError> {
    if bytes.len() > MAX_HEAD_BYTES {
        return Err(HeadError::TooLarge);
    }
    // One header per line at most: size the table from the line count, so a head of a
    // few headers does not pay for ten thousand slots.
    let lines = bytes.iter().filter(|&&b| b == b'\n').count();
    if lines > MAX_HEADERS + 2 {
        return Err(HeadError::TooLarge);
    }
    let mut slots = vec![httparse::EMPTY_HEADER; lines];
    let mut req = httparse::Request::new(&mut slots);
    match req.parse(bytes) {
        Ok(httparse::Status::Complete(n)) if n == bytes.len() => {}
        Ok(_) => {
            return Err(HeadError::Malformed(
                "the request head is incomplete".into(),
            ));
        }
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooLarge),
        Err(e) => return Err(HeadError::Malformed(format!("{e}"))),
    }
    let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return Err(HeadError::Malformed(
            "the request line is incomplete".into(),
        ));
    };
    if req.headers.len() > MAX_HEADERS {
        return Err(HeadError::TooLarge);
    }
    let mut headers = Vec::with_capacity(req.headers.len());
    for h in req.headers.iter() {
        let value = std::str::from_utf8(h.value).map_err(|_| {
            HeadError::Malformed(format!("the value of header '{}' is not UTF-8", h.name))
        })?;
        // httparse refuses CR, LF and NUL in values already; say so in the code as well,
        // since a value may end up in a stored label and later in a response.
        if value.contains(['\r', '\n', '\0']) {
            return Err(HeadError::Malformed(format!(
                "the value of header '{}' holds a line break or NUL",
                h.name
            )));
        }
        headers.push((h.name.to_ascii_lowercase(), value.trim().to_string()));
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    Ok(RequestHead {
        method: method.to_string(),
        path: path.to_string(),
        query: query.to_string(),
        headers,
        http11: version == 1,
    })
}

/// Longest chunk-size line (hex size and extensions) a chunked body may have.
pub(crate) const MAX_CHUNK_LINE: usize = 4096;
/// Most trailer bytes accepted after the last chunk of a chunked body.
pub(crate) const MAX_TRAILERS: usize = 64 << 10;

/// How a request's body is delimited.
#[derive(Debug, PartialEq, Eq)]
pub enum Framing {
    /// Exactly this many bytes follow the head (0 when nothing says otherwise).
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// A framing the server refuses: the status (400) and why.
#[derive(Debug, PartialEq, Eq)]
pub struct FramingError {
    /// 400: contradictory or malformed framing, or a transfer coding other than chunked.
    pub status: u16,
    /// What was wrong.
    pub message: String,
}

fn framing_error(status: u16, message: String) -> FramingError {
    FramingError { status, message }
}

/// The body framing of a head, as RFC 9112 §6 decides it. Anything a proxy in front
/// could read differently is refused: several `Content-Length` values that disagree,
/// `Content-Length` beside `Transfer-Encoding`, a length that is not plain digits.
pub fn framing(head: &RequestHead) -> Result<Framing, FramingError> {
    let codings: Vec<String> = head
        .all("transfer-encoding")
        .flat_map(|v| v.split(','))
        .map(|c| c.trim().to_ascii_lowercase())
        .collect();
    let lengths: Vec<&str> = head
        .all("content-length")
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    if !codings.is_empty() {
        if !lengths.is_empty() {
            return Err(framing_error(
                400,
                "Content-Length and Transfer-Encoding must not be sent together".into(),
            ));
        }
        if codings.iter().any(|c| c != "chunked") || codings.len() > 1 {
            // RFC 9112 §6.3: without chunked as the one, final coding the body's length
            // cannot be known, which is a 400; a coding before chunked (which §6.1 would
            // answer 501) is refused the same way, as the client's request to change.
            return Err(framing_error(
                400,
                format!(
                    "Transfer-Encoding '{}' is not supported: send the body with 'chunked' alone or with Content-Length",
                    codings.join(", ").escape_default()
                ),
            ));
        }
        return Ok(Framing::Chunked);
    }
    let mut length = None;
    for text in lengths {
        let value = parse_decimal(text).ok_or_else(|| {
            framing_error(
                400,
                format!("Content-Length '{}' is not a number", text.escape_default()),
            )
        })?;
        if length.is_some_and(|l| l != value) {
            return Err(framing_error(
                400,
                "Content-Length headers disagree".to_string(),
            ));
        }
        length = Some(value);
    }
    Ok(Framing::Length(length.unwrap_or(0)))
}

/// A decimal number as HTTP and the API write them: ASCII digits only (no sign, no spaces,
/// no `0x`), which `str::parse` alone would not enforce (it takes `+5`).
pub fn parse_decimal(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(raw: &[u8]) -> Option<usize> {
        head_end(raw, &mut 0)
    }

    fn parse(raw: &[u8]) -> Result<RequestHead, HeadError> {
        let end = end(raw).expect("a complete head");
        parse_head(&raw[..end])
    }

    #[test]
    fn parses_a_head() {
        let raw = b"\r\nPOST /api/v1/b/x/e%2Fa?ts=10&y=%20 HTTP/1.1\r\nHost: a\r\nX-Reduct-Label-A: b c \r\n\r\nBODY";
        let end = end(raw).unwrap();
        assert_eq!(&raw[end..], b"BODY");
        let head = parse_head(&raw[..end]).unwrap();
        assert_eq!(head.method, "POST");
        assert_eq!(head.path, "/api/v1/b/x/e%2Fa");
        assert_eq!(head.query_param("ts").as_deref(), Some("10"));
        assert_eq!(head.query_param("y").as_deref(), Some(" "));
        assert_eq!(head.header("x-reduct-label-a"), Some("b c"));
        assert!(head.keep_alive());
        assert_eq!(framing(&head), Ok(Framing::Length(0)));
    }

    #[test]
    fn finds_the_end_of_a_head_only_when_it_is_there() {
        assert_eq!(end(b"GET / HTTP/1.1\r\nHost: a\r\n"), None);
        assert_eq!(end(b"GET / HTTP/1.1\r\nHost: a\r\n\r"), None);
        assert_eq!(end(b"GET / HTTP/1.1\n\nX"), Some(16));
        assert_eq!(end(b"\r\n\r\n"), None);
        assert_eq!(end(b""), None);
        // Only empty lines, past the bound: taken as a head (which httparse refuses).
        assert!(end(&b"\r\n".repeat(600)).is_some());
        // Byte by byte, carrying the scan position, finds the same end.
        let raw = b"\r\nGET /x HTTP/1.1\r\nA: b\r\n\r\nrest";
        let mut scanned = 0;
        let found = (1..=raw.len()).find_map(|n| head_end(&raw[..n], &mut scanned));
        assert_eq!(found, end(raw));
        assert_eq!(found, Some(raw.len() - 4));
    }

    #[test]
    fn refuses_bad_and_huge_heads() {
        assert!(matches!(
            parse(b"GARBAGE\r\n\r\n"),
            Err(HeadError::Malformed(_))
        ));
        assert!(matches!(
            parse(b"GET / HTTP/1.1\r\nno-colon\r\n\r\n"),
            Err(HeadError::Malformed(_))
        ));
        assert!(matches!(
            parse(b"GET / HTTP/1.1\r\nHo(st: a\r\n\r\n"),
            Err(HeadError::Malformed(_))
        ));
        assert!(matches!(
            parse(b"GET / HTTP/1.1\r\nx: a\0b\r\n\r\n"),
            Err(HeadError::Malformed(_))
        ));
        assert!(matches!(
            parse(b"GET / HTTP/1.1\r\nx: a\rb\r\n\r\n"),
            Err(HeadError::Malformed(_))
        ));
        assert!(matches!(
            parse(b"GET / HTTP/2.0\r\n\r\n"),
            Err(HeadError::Malformed(_))
        ));
        let many = format!(
            "GET / HTTP/1.1\r\n{}\r\n",
            "a: b\r\n".repeat(MAX_HEADERS + 1)
        );
        assert_eq!(parse(many.as_bytes()).unwrap_err(), HeadError::TooLarge);
    }

    #[test]
    fn framing_follows_rfc_9112() {
        let head = |headers: &[(&str, &str)]| RequestHead {
            method: "POST".into(),
            path: "/".into(),
            query: String::new(),
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            http11: true,
        };
        let f = |h: &[(&str, &str)]| framing(&head(h));
        assert_eq!(f(&[("content-length", "5")]), Ok(Framing::Length(5)));
        assert_eq!(
            f(&[("content-length", "5"), ("content-length", "5")]),
            Ok(Framing::Length(5))
        );
        assert_eq!(f(&[("content-length", "5, 5")]), Ok(Framing::Length(5)));
        assert_eq!(
            f(&[("content-length", "5"), ("content-length", "6")])
                .unwrap_err()
                .status,
            400
        );
        assert_eq!(f(&[("content-length", "+5")]).unwrap_err().status, 400);
        assert_eq!(f(&[("content-length", "")]).unwrap_err().status, 400);
        assert_eq!(f(&[("transfer-encoding", "chunked")]), Ok(Framing::Chunked));
        assert_eq!(f(&[("transfer-encoding", "Chunked")]), Ok(Framing::Chunked));
        assert_eq!(
            f(&[("transfer-encoding", "chunked"), ("content-length", "3")])
                .unwrap_err()
                .status,
            400
        );
        assert_eq!(
            f(&[("transfer-encoding", "gzip, chunked")])
                .unwrap_err()
                .status,
            400
        );
        assert_eq!(f(&[("transfer-encoding", "gzip")]).unwrap_err().status, 400);
        assert_eq!(
            f(&[("transfer-encoding", "chunked, chunked")])
                .unwrap_err()
                .status,
            400
        );
    }

    #[test]
    fn connection_tokens_decide_keep_alive() {
        let mut h = parse(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").unwrap();
        assert!(h.keep_alive());
        h.http11 = true;
        h.headers = vec![("connection".into(), "TE, close".into())];
        assert!(!h.keep_alive());
        h.headers.clear();
        assert!(h.keep_alive());
    }

    mod fuzz {
        use super::super::*;
        use proptest::prelude::*;

        /// Checks whatever a head parses to: no panic, and nothing that could break a
        /// header line survives into a value.
        fn check(bytes: &[u8]) -> Result<(), TestCaseError> {
            let mut scanned = 0;
            if let Some(end) = head_end(bytes, &mut scanned) {
                prop_assert!(end <= bytes.len());
                if let Ok(head) = parse_head(&bytes[..end]) {
                    let _ = framing(&head);
                    let _ = head.keep_alive();
                    let _ = head.query_param("ts");
                    for (_, value) in &head.headers {
                        prop_assert!(!value.contains(['\r', '\n', '\0']));
                    }
                }
            }
            Ok(())
        }

        const VALID: &[u8] = b"POST /api/v1/io/b/write?x=1 HTTP/1.1\r\nhost: a\r\n\
            content-length: 3\r\nx-reduct-entries: a,b\r\nx-reduct-0-0: 3,text/plain\r\n\r\nabc";

        proptest! {
            #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

            #[test]
            fn random_bytes_parse_or_are_refused(
                bytes in proptest::collection::vec(any::<u8>(), 0..1024)
            ) {
                check(&bytes)?;
            }

            #[test]
            fn mutated_requests_parse_or_are_refused(
                edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8)
            ) {
                let mut bytes = VALID.to_vec();
                for (at, byte) in edits {
                    let at = at % bytes.len();
                    bytes[at] = byte;
                }
                check(&bytes)?;
            }
        }
    }
}
