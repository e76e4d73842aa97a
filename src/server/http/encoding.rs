//! Request bodies sent with `Content-Encoding: gzip` or `zstd` (ReductStore 1.21.5
//! compresses its replication batches so), decoded before the handler sees them, within
//! the body size limit on the decoded bytes.

use std::io::Read;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::server::http::head::RequestHead;
use crate::server::http::response::Response;

/// How a request body is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coding {
    /// As sent (`identity`, or no `Content-Encoding`).
    Identity,
    /// `gzip` (or `x-gzip`).
    Gzip,
    /// `zstd`.
    Zstd,
}

/// The coding a head's `Content-Encoding` names; 415 for one this server cannot decode
/// (several codings at once included).
pub fn coding(head: &RequestHead) -> Result<Coding, Response> {
    let Some(value) = head.header("content-encoding") else {
        return Ok(Coding::Identity);
    };
    match value.trim().to_ascii_lowercase().as_str() {
        "" | "identity" => Ok(Coding::Identity),
        "gzip" | "x-gzip" => Ok(Coding::Gzip),
        "zstd" => Ok(Coding::Zstd),
        other => Err(Response::error(
            415,
            &format!(
                "Content-Encoding '{}' is not supported: send the body as is, gzip or zstd",
                other.escape_default()
            ),
        )),
    }
}

/// Bytes of decoded request bodies held in memory now, over all requests.
static DECODED_IN_USE: AtomicUsize = AtomicUsize::new(0);

/// A share of the decoded-bodies budget, given back when dropped (after the handler).
#[derive(Debug, Default)]
pub struct Reserved(usize);

impl Drop for Reserved {
    fn drop(&mut self) {
        DECODED_IN_USE.fetch_sub(self.0, Ordering::AcqRel);
    }
}

impl Reserved {
    /// Takes `n` more bytes of the `total` budget; false (nothing taken) when they do
    /// not fit.
    fn grow(&mut self, n: usize, total: usize) -> bool {
        let taken = DECODED_IN_USE.fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
            used.checked_add(n).filter(|after| *after <= total)
        });
        if taken.is_ok() {
            self.0 += n;
        }
        taken.is_ok()
    }
}

/// Decoded bytes are counted against the budget this much at a time.
const DECODE_STEP: usize = 1 << 20;

/// Decodes a body: at most `limit` bytes decoded (413 past it), 400 for bytes that are
/// not what the coding says. The decoded bytes also count against `budget`, shared by
/// every request being decoded (`--http-body-buffer-total`): a compression bomb costs
/// its share and a 413, not the server's memory. The returned [`Reserved`] holds the
/// share until it is dropped.
pub fn decode_within(
    coding: Coding,
    raw: Vec<u8>,
    limit: u64,
    budget: usize,
) -> Result<(Vec<u8>, Reserved), Response> {
    let mut reserved = Reserved::default();
    if coding == Coding::Identity {
        return Ok((raw, reserved));
    }
    let mut reader: Box<dyn Read + '_> = match coding {
        Coding::Gzip => Box::new(flate2::read::MultiGzDecoder::new(&raw[..])),
        _ => match zstd::stream::read::Decoder::new(&raw[..]) {
            Ok(decoder) => Box::new(decoder),
            Err(e) => return Err(bad_coding(coding, &e)),
        },
    };
    let mut out: Vec<u8> = Vec::new();
    loop {
        if !reserved.grow(DECODE_STEP, budget) {
            return Err(Response::error(
                413,
                &format!(
                    "Request body decodes to more than the memory left for decoded bodies ({budget} bytes shared by all requests, --http-body-buffer-total)"
                ),
            ));
        }
        let before = out.len();
        let read = (&mut reader)
            .take(DECODE_STEP as u64)
            .read_to_end(&mut out)
            .map_err(|e| bad_coding(coding, &e))?;
        if out.len() as u64 > limit {
            return Err(too_large(limit));
        }
        if read == 0 || out.len() - before < DECODE_STEP {
            return Ok((out, reserved));
        }
    }
}

fn too_large(limit: u64) -> Response {
    Response::error(
        413,
        &format!(
            "Request body decodes to more than this server accepts ({limit} bytes, --max-body-size)"
        ),
    )
}

fn bad_coding(coding: Coding, e: &std::io::Error) -> Response {
    let name = if coding == Coding::Gzip {
        "gzip"
    } else {
        "zstd"
    };
    Response::error(400, &format!("Request body is not valid {name}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    #[test]
    fn gzip_and_zstd_bodies_decode_within_the_limit() {
        let body = b"record one|record two".repeat(100);
        let decoded = |coding, raw, limit| {
            decode_within(coding, raw, limit, usize::MAX)
                .map(|(bytes, _)| bytes)
                .map_err(|r| r.status)
        };
        assert_eq!(
            decoded(Coding::Gzip, gzip(&body), 1 << 20),
            Ok(body.clone())
        );
        let zstd = zstd::encode_all(&body[..], 3).unwrap();
        assert_eq!(decoded(Coding::Zstd, zstd, 1 << 20), Ok(body.clone()));
        assert_eq!(decoded(Coding::Identity, body.clone(), 1), Ok(body));
        // A small body that decodes past the limit (a compression bomb) is 413.
        let bomb = gzip(&vec![0u8; 1 << 20]);
        assert_eq!(decoded(Coding::Gzip, bomb, 1000), Err(413));
        assert_eq!(decoded(Coding::Zstd, b"not zstd".to_vec(), 1000), Err(400));
        assert_eq!(decoded(Coding::Gzip, b"not gzip".to_vec(), 1000), Err(400));
    }
}
