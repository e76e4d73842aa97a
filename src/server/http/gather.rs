//! Bodies gathered by the poller. A request whose body is not all there when its head
//! is read is admitted on the head alone (token, permission, size) by a handler thread,
//! which then gives the connection back to the poller with a [`BodyWait`]: the poller
//! reads the body into the connection's buffer as it trickles in, under the body
//! deadlines, and hands the connection to a handler thread again only once the body is
//! complete — or once the buffer for one body is full, to be streamed from the socket
//! by one of the few threads allowed to do that (as is a request waiting for
//! `100 Continue`). So a slow body costs bytes, not a thread.

use std::time::Instant;

use crate::server::http::head::{Framing, MAX_CHUNK_LINE, MAX_TRAILERS};

/// A request whose body the poller gathers: its head stays at the front of the
/// connection's pending bytes (the handler parses it again, unchanged), the body follows.
#[derive(Debug)]
pub struct BodyWait {
    /// Length of the request head at the front of the pending bytes.
    pub head_len: usize,
    /// How the body is framed.
    framing: Framing,
    /// How far a chunked body has been checked.
    chunked: ChunkedScan,
    /// When the body was first waited for: the total body deadline counts from here.
    pub started: Instant,
    /// Not gathered: the request goes to a streaming slot at once (it waits for
    /// `100 Continue`, which only its handler sends).
    pub stream_at_once: bool,
}

/// How far a gathered body has come.
#[derive(Debug, PartialEq, Eq)]
pub enum Gathered {
    /// All of it is in the buffer (or a chunked body is malformed, which the handler's
    /// decoder then reports): the handler can run without touching the socket.
    Complete,
    /// More is to come and there is room for it.
    Waiting,
    /// The buffer for one body is full and more is to come: a handler must stream the rest.
    Full,
}

impl BodyWait {
    /// Starts waiting for the body of a request whose head is `head_len` bytes.
    pub fn new(head_len: usize, framing: Framing) -> BodyWait {
        BodyWait {
            head_len,
            framing,
            chunked: ChunkedScan::default(),
            started: Instant::now(),
            stream_at_once: false,
        }
    }

    /// The same wait, for a body its handler streams from the socket.
    pub fn streamed(self) -> BodyWait {
        BodyWait {
            stream_at_once: true,
            ..self
        }
    }

    /// How far the body is, given the pending bytes after the head and the most one
    /// body may buffer.
    pub fn progress(&mut self, body: &[u8], buffer_limit: usize) -> Gathered {
        let complete = match self.framing {
            Framing::Length(n) => body.len() as u64 >= n,
            Framing::Chunked => self.chunked.scan(body) != Scan::Incomplete,
        };
        if complete {
            Gathered::Complete
        } else if body.len() >= buffer_limit {
            Gathered::Full
        } else {
            Gathered::Waiting
        }
    }
}

/// Whether the chunked body at the front of some bytes is all there.
#[derive(Debug, PartialEq, Eq)]
enum Scan {
    Complete,
    Incomplete,
    /// Not chunked coding: the decoder says why.
    Invalid,
}

/// An incremental check of a chunked body (RFC 9112 §7.1): chunks already seen whole are
/// not looked at again, so a body that trickles in is scanned about once.
#[derive(Debug, Default)]
struct ChunkedScan {
    /// Offset of the next chunk-size line (or, in the trailers, the next trailer line).
    next: usize,
    /// The last chunk was seen: trailer lines follow, up to an empty one.
    in_trailers: bool,
    /// Trailer bytes seen.
    trailer_bytes: usize,
}

impl ChunkedScan {
    fn scan(&mut self, body: &[u8]) -> Scan {
        loop {
            let rest = &body[self.next.min(body.len())..];
            let line_limit = if self.in_trailers {
                MAX_TRAILERS
            } else {
                MAX_CHUNK_LINE
            };
            let Some(newline) = rest.iter().position(|&b| b == b'\n') else {
                return if rest.len() > line_limit + 1 {
                    Scan::Invalid
                } else {
                    Scan::Incomplete
                };
            };
            let line = rest[..newline]
                .strip_suffix(b"\r")
                .unwrap_or(&rest[..newline]);
            if self.in_trailers {
                self.next += newline + 1;
                self.trailer_bytes += newline + 1;
                if line.is_empty() {
                    return Scan::Complete;
                }
                if self.trailer_bytes > MAX_TRAILERS {
                    return Scan::Invalid;
                }
                continue;
            }
            let size_text = line.split(|&b| b == b';').next().unwrap_or_default();
            let size_text = size_text.trim_ascii_end();
            if size_text.is_empty() || !size_text.iter().all(u8::is_ascii_hexdigit) {
                return Scan::Invalid;
            }
            let Some(size) = std::str::from_utf8(size_text)
                .ok()
                .and_then(|t| usize::from_str_radix(t, 16).ok())
            else {
                return Scan::Invalid;
            };
            if size == 0 {
                self.in_trailers = true;
                self.next += newline + 1;
                continue;
            }
            // The size line, the chunk and its CRLF.
            let Some(whole) = (newline + 1)
                .checked_add(size)
                .and_then(|n| n.checked_add(2))
            else {
                return Scan::Invalid;
            };
            if rest.len() < whole {
                return Scan::Incomplete;
            }
            self.next += whole;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress_of(framing: Framing, body: &[u8], limit: usize) -> Gathered {
        BodyWait::new(10, framing).progress(body, limit)
    }

    #[test]
    fn a_length_body_is_complete_with_its_last_byte_and_full_at_the_limit() {
        assert_eq!(
            progress_of(Framing::Length(5), b"abcd", 100),
            Gathered::Waiting
        );
        assert_eq!(
            progress_of(Framing::Length(5), b"abcde", 100),
            Gathered::Complete
        );
        // A pipelined request after it does not matter.
        assert_eq!(
            progress_of(Framing::Length(5), b"abcdeGET", 100),
            Gathered::Complete
        );
        assert_eq!(
            progress_of(Framing::Length(500), b"abcd", 4),
            Gathered::Full
        );
    }

    #[test]
    fn a_chunked_body_is_complete_after_its_trailers_whatever_the_split() {
        let body = b"5\r\nhello\r\n3;ext=1\r\nabc\r\n0\r\nx-trailer: 1\r\n\r\n";
        let mut wait = BodyWait::new(0, Framing::Chunked);
        for end in 0..body.len() {
            assert_eq!(
                wait.progress(&body[..end], 1 << 20),
                Gathered::Waiting,
                "after {end} bytes"
            );
        }
        assert_eq!(wait.progress(body, 1 << 20), Gathered::Complete);
    }

    #[test]
    fn malformed_chunked_bodies_go_to_the_decoder_at_once() {
        // Bad framing is handed to the decoder (which names the fault) as soon as it
        // shows, never waited on for bytes that cannot make it valid.
        for bad in [&b"zz\r\n"[..], b"5\r\nhelloXX0\r\n\r\n", &[b'1'; 5000]] {
            let seen = BodyWait::new(0, Framing::Chunked).progress(bad, 1 << 20);
            assert_eq!(
                seen,
                Gathered::Complete,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert_eq!(
            BodyWait::new(0, Framing::Chunked).progress(b"ffffffffffffffffffff\r\n", 1 << 20),
            Gathered::Complete
        );
    }

    #[test]
    fn a_huge_chunk_fills_the_buffer() {
        let mut body = b"1000000\r\n".to_vec();
        body.resize(4096, b'x');
        assert_eq!(progress_of(Framing::Chunked, &body, 4096), Gathered::Full);
    }
}
