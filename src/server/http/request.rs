//! A request as handlers see it (head and body), and the helpers every handler uses to
//! read it: JSON bodies, the `ts` parameter, decimal numbers, the "no route" error.

use crate::error::{Error, Result};
use crate::server::http::body::{Body, body_error};
use crate::server::http::head::RequestHead;
pub use crate::server::http::head::parse_decimal;

/// A request being handled: its head and its body.
pub struct Request<'a> {
    /// Request line and headers.
    pub head: RequestHead,
    /// The body, streamed from the connection.
    pub body: Body<'a>,
    /// The client's IP address (the TCP peer).
    pub peer_ip: Option<std::net::IpAddr>,
    /// Who is calling, once authenticated (`None` with authentication off).
    pub caller: Option<crate::server::auth::Caller>,
}

/// The error for a method and path no handler serves.
pub fn no_route(method: &str, path: &str) -> Error {
    Error::not_found(format!(
        "No route for {} {}",
        method.escape_default(),
        path.escape_default()
    ))
}

/// Parses a JSON request body, whatever its content type; errors are 422 `Invalid JSON`.
pub fn parse_json<T: serde::de::DeserializeOwned>(req: &mut Request) -> Result<T> {
    let body = read_body(req)?;
    serde_json::from_slice(&body).map_err(|e| Error::unprocessable(format!("Invalid JSON: {e}")))
}

/// Largest JSON document a request may carry (settings, queries, lifecycles).
pub const MAX_JSON: u64 = 16 << 20;

/// Reads a (small) request body; a body that breaks off is 400.
pub fn read_body(req: &mut Request) -> Result<Vec<u8>> {
    read_body_within(req, MAX_JSON)
}

/// Reads a request body of at most `max` bytes (422 past it, nothing read).
pub fn read_body_within(req: &mut Request, max: u64) -> Result<Vec<u8>> {
    if req.body.remaining() > max {
        return Err(Error::unprocessable(format!(
            "request body of {} bytes is too large for this JSON document (at most {max})",
            req.body.remaining()
        )));
    }
    req.body
        .read_all()
        .map_err(|e| body_error("reading the request body", e))
}

/// The `ts` query parameter: `Ok(None)` when absent.
pub fn ts_param(req: &Request) -> Result<Option<u64>> {
    match req.head.query_param("ts") {
        None => Ok(None),
        Some(v) => parse_decimal(&v).map(Some).ok_or_else(|| {
            Error::unprocessable(format!(
                "'ts' must be an unix timestamp in microseconds, not '{}'",
                v.escape_default()
            ))
        }),
    }
}

/// The required `ts` query parameter.
pub fn required_ts(req: &Request) -> Result<u64> {
    ts_param(req)?.ok_or_else(|| Error::unprocessable("'ts' parameter is required"))
}

#[cfg(test)]
mod tests {
    use super::parse_decimal;

    #[test]
    fn decimals_are_digits_only() {
        assert_eq!(parse_decimal("0"), Some(0));
        assert_eq!(parse_decimal("18446744073709551615"), Some(u64::MAX));
        for bad in [
            "",
            "+5",
            "-1",
            " 5",
            "5 ",
            "0x10",
            "18446744073709551616",
            "1e3",
        ] {
            assert_eq!(parse_decimal(bad), None, "{bad}");
        }
    }
}
