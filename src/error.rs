//! One error type for the whole crate, carrying a status kind that the HTTP layer maps to
//! a status code and a message that names the offending value.

use std::fmt;

/// What kind of failure an [`Error`] is; decides the HTTP status code a server sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The request itself is malformed (HTTP 400).
    BadRequest,
    /// Authentication is missing or wrong (HTTP 401).
    Unauthorized,
    /// The caller may not do this, e.g. a change on a read-only replica (HTTP 403).
    Forbidden,
    /// A bucket, entry, record, query or policy does not exist (HTTP 404).
    NotFound,
    /// The request body stalled or did not arrive within its deadline (HTTP 408).
    RequestTimeout,
    /// The thing already exists, or a provisioned resource cannot change (HTTP 409).
    Conflict,
    /// A value failed validation: a bad name, duration, JSON or parameter (HTTP 422).
    Unprocessable,
    /// The record is still being written (HTTP 425).
    TooEarly,
    /// A server-wide limit is reached, such as the number of open queries (HTTP 429).
    TooManyRequests,
    /// The disk (or the quota of the file system) is full (HTTP 507).
    InsufficientStorage,
    /// Something broke inside: I/O, a corrupt block, a broken invariant (HTTP 500).
    Internal,
    /// Something the answer needs is elsewhere and cannot be reached now, such as a remote
    /// object store holding a tiered block (HTTP 503).
    Unavailable,
}

impl ErrorKind {
    /// The HTTP status code that corresponds to this kind.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorKind::BadRequest => 400,
            ErrorKind::Unauthorized => 401,
            ErrorKind::Forbidden => 403,
            ErrorKind::NotFound => 404,
            ErrorKind::RequestTimeout => 408,
            ErrorKind::Conflict => 409,
            ErrorKind::Unprocessable => 422,
            ErrorKind::TooEarly => 425,
            ErrorKind::TooManyRequests => 429,
            ErrorKind::InsufficientStorage => 507,
            ErrorKind::Internal => 500,
            ErrorKind::Unavailable => 503,
        }
    }

    /// The kind of an HTTP status another server answered with (what a client of the
    /// API reports); a status of no kind here is internal.
    pub fn from_http_status(status: u16) -> Self {
        match status {
            400 => ErrorKind::BadRequest,
            401 => ErrorKind::Unauthorized,
            403 => ErrorKind::Forbidden,
            404 => ErrorKind::NotFound,
            408 => ErrorKind::RequestTimeout,
            409 => ErrorKind::Conflict,
            422 => ErrorKind::Unprocessable,
            425 => ErrorKind::TooEarly,
            429 => ErrorKind::TooManyRequests,
            507 => ErrorKind::InsufficientStorage,
            503 => ErrorKind::Unavailable,
            _ => ErrorKind::Internal,
        }
    }
}

/// The crate's error: a kind plus a human-readable message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

/// Shorthand for results that fail with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// Builds an error of the given kind.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
        }
    }

    /// A 404-style error.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }

    /// A 409-style error.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Conflict, message)
    }

    /// A 422-style error.
    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unprocessable, message)
    }

    /// A 403-style error.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Forbidden, message)
    }

    /// A 400-style error.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::BadRequest, message)
    }

    /// A 500-style error.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }

    /// Wraps an I/O error with what we were doing and on which path.
    pub fn io(context: impl fmt::Display, err: std::io::Error) -> Self {
        // A full disk is the operator's to fix, not a bug: 507 with the path, so a
        // client can tell it from a server fault.
        let full = matches!(
            err.kind(),
            std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
        );
        let kind = if full {
            ErrorKind::InsufficientStorage
        } else {
            ErrorKind::Internal
        };
        Self::new(kind, format!("{context}: {err}"))
    }

    /// The kind of this error.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message, naming the offending value.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// Input quoted in an error message, with control characters escaped (`\n`, `\r`,
/// `\0`, `\u{1b}`): messages travel in headers and logs, where a raw line break from a
/// client could forge a line of its own.
pub fn quoted(input: &str) -> String {
    let mut out = String::with_capacity(input.len());
    for c in input.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_map_to_http_statuses() {
        assert_eq!(Error::not_found("x").kind().http_status(), 404);
        assert_eq!(Error::conflict("x").kind().http_status(), 409);
        assert_eq!(Error::unprocessable("x").kind().http_status(), 422);
        assert_eq!(Error::forbidden("x").kind().http_status(), 403);
        assert_eq!(Error::internal("x").kind().http_status(), 500);
    }

    #[test]
    fn io_errors_keep_their_context() {
        let err = Error::io("reading /tmp/x", std::io::Error::other("boom"));
        assert_eq!(err.message(), "reading /tmp/x: boom");
        assert_eq!(err.kind(), ErrorKind::Internal);
    }

    #[test]
    fn a_full_disk_is_507_naming_the_path() {
        let full = std::io::Error::from_raw_os_error(28); // ENOSPC
        let e = Error::io("creating block /data/b/e/0001.blk", full);
        assert_eq!(e.kind().http_status(), 507);
        assert!(
            e.message()
                .starts_with("creating block /data/b/e/0001.blk: "),
            "{e}"
        );
        let other = std::io::Error::from_raw_os_error(5); // EIO
        assert_eq!(Error::io("x", other).kind().http_status(), 500);
    }
}
