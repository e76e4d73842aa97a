//! HTTP responses: status, headers and body, and how they are written — header lines
//! are made in one place so that nothing a request or a stored record carries can break
//! out of a header.

use std::io::{self, Write};

use crate::storage::Payload;

/// What a response sends after its headers.
pub enum ResponseBody {
    /// Nothing (`Content-Length: 0`).
    Empty,
    /// These bytes.
    Bytes(Vec<u8>),
    /// Record payloads back to back, written from where they live (no copy).
    Payloads(Vec<Payload>),
    /// A HEAD answer: `Content-Length` of what a GET would send, and no body.
    Head(u64),
}

impl ResponseBody {
    /// The `Content-Length` this body announces.
    pub fn content_length(&self) -> u64 {
        match self {
            ResponseBody::Empty => 0,
            ResponseBody::Bytes(b) => b.len() as u64,
            ResponseBody::Payloads(p) => p.iter().map(|p| p.len() as u64).sum(),
            ResponseBody::Head(n) => *n,
        }
    }
}

/// A response: status, headers (besides the ones every response gets) and body.
pub struct Response {
    /// HTTP status code.
    pub status: u16,
    /// Headers, names in lowercase.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: ResponseBody,
    /// Leaves out the `server` and `x-reduct-api` headers (CORS preflights, as
    /// ReductStore answers them).
    pub anonymous: bool,
}

impl Response {
    /// An empty 200.
    pub fn ok() -> Self {
        Response::status(200)
    }

    /// An empty response with this status.
    pub fn status(status: u16) -> Self {
        Response {
            status,
            headers: Vec::new(),
            body: ResponseBody::Empty,
            anonymous: false,
        }
    }

    /// A 200 with a JSON body.
    pub fn json(value: &impl serde::Serialize) -> Self {
        match serde_json::to_vec(value) {
            Ok(bytes) => Response::ok()
                .header("content-type", "application/json")
                .with_body(ResponseBody::Bytes(bytes)),
            Err(e) => Response::error(500, &format!("encoding the response: {e}")),
        }
    }

    /// An error in the API's form: `x-reduct-error` and `{"detail": …}`.
    pub fn error(status: u16, message: &str) -> Self {
        let header = error_header(message);
        let detail = bounded(message, MAX_ERROR_DETAIL);
        let body = serde_json::json!({ "detail": detail.replace('"', "'") });
        Response::status(status)
            .header("x-reduct-error", header)
            .header("content-type", "application/json")
            .with_body(ResponseBody::Bytes(body.to_string().into_bytes()))
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: impl Into<String>) -> Self {
        self.headers.push((name.to_string(), value.into()));
        self
    }

    /// Replaces the body.
    pub fn with_body(mut self, body: ResponseBody) -> Self {
        self.body = body;
        self
    }
}

/// Longest `x-reduct-error` value, in bytes.
pub const MAX_ERROR_HEADER: usize = 400;
/// Longest error `detail` in a body, in bytes.
pub const MAX_ERROR_DETAIL: usize = 4096;

/// An `x-reduct-error` value for `message`: a message may quote what a request sent (a
/// name, a token, a content type), so it is cut to a few hundred bytes; and a header
/// value must be visible ASCII, so the API sends a fixed text otherwise.
pub fn error_header(message: &str) -> String {
    let short = bounded(message, MAX_ERROR_HEADER);
    if short.chars().all(|c| c == ' ' || c.is_ascii_graphic()) {
        short
    } else {
        "Unparsable message".to_string()
    }
}

/// A message for a header of its own (a batch's per-record errors): cut as
/// [`error_header`] cuts it, its characters left to the header writer's escaping.
pub fn header_message(message: &str) -> String {
    bounded(message, MAX_ERROR_HEADER)
}

/// `message` cut to at most `max` bytes at a character boundary, saying how much was cut.
fn bounded(message: &str, max: usize) -> String {
    if message.len() <= max {
        return message.to_string();
    }
    let mut end = max.saturating_sub(40);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes cut)", &message[..end], message.len() - end)
}

fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        304 => "Not Modified",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Content Too Large",
        422 => "Unprocessable Entity",
        425 => "Too Early",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        507 => "Insufficient Storage",
        _ => "Unknown",
    }
}

/// Appends `name: value\r\n` to a response head — the one place header lines are made,
/// so nothing a request or a stored record carries can break out of its header: bytes of
/// the name that are not HTTP token characters are percent-encoded, and control
/// characters in the value (CR, LF, NUL and the rest, except tab) are written as `\xNN`.
pub fn push_header(head: &mut String, name: &str, value: &str) {
    let start = head.len();
    for c in name.chars() {
        if c.is_ascii() && is_token_byte(c as u8) {
            head.push(c);
        } else {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                head.push_str(&format!("%{b:02X}"));
            }
        }
    }
    head.push_str(": ");
    for c in value.chars() {
        if c.is_control() && c != '\t' {
            for b in c.to_string().bytes() {
                head.push_str(&format!("\\x{b:02x}"));
            }
        } else {
            head.push(c);
        }
    }
    debug_assert!(
        !head[start..].contains(['\r', '\n', '\0']),
        "a header line must not carry CR, LF or NUL"
    );
    head.push_str("\r\n");
}

/// HTTP token characters (RFC 9110 `tchar`), the only ones a header name may hold.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Writes a response; `keep_alive` chooses the `Connection` header.
pub fn write_response(
    out: &mut impl Write,
    response: &Response,
    keep_alive: bool,
) -> io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {} {}\r\n",
        response.status,
        reason(response.status)
    );
    if !response.anonymous {
        head.push_str("x-reduct-api: 1.21\r\n");
        head.push_str(concat!(
            "server: halflife/",
            env!("CARGO_PKG_VERSION"),
            "\r\n"
        ));
    }
    for (name, value) in &response.headers {
        push_header(&mut head, name, value);
    }
    if response.status != 204 {
        head.push_str(&format!(
            "content-length: {}\r\n",
            response.body.content_length()
        ));
    }
    head.push_str(if keep_alive {
        "connection: keep-alive\r\n\r\n"
    } else {
        "connection: close\r\n\r\n"
    });
    out.write_all(head.as_bytes())?;
    match &response.body {
        ResponseBody::Empty | ResponseBody::Head(_) => {}
        ResponseBody::Bytes(bytes) => out.write_all(bytes)?,
        ResponseBody::Payloads(payloads) => {
            for p in payloads {
                out.write_all(p.as_slice())?;
            }
        }
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_lines_never_carry_input_line_breaks() {
        let mut head = String::new();
        push_header(
            &mut head,
            "x-reduct-label-a\r\nset-cookie",
            "v\rset-cookie: pwn\n\0x",
        );
        assert_eq!(
            head,
            "x-reduct-label-a%0D%0Aset-cookie: v\\x0dset-cookie: pwn\\x0a\\x00x\r\n"
        );
        let mut plain = String::new();
        push_header(&mut plain, "x-reduct-label-city", "Zürich, \"a,b\"\tok");
        assert_eq!(plain, "x-reduct-label-city: Zürich, \"a,b\"\tok\r\n");
    }
}
