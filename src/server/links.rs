//! Query links (`POST|GET /links/{file}`): a URL that hands one record to someone without
//! a token, until it expires.
//!
//! A link carries its whole request — bucket, query, record, expiry — in its parameters:
//! `ct` (the request JSON, zlib-compressed, base64url), `s` (16 random bytes), `i` (the
//! issuing token's name) and `n` (HMAC-SHA256 over `s` and `ct`, keyed with the issuing
//! token's stored secret). So a link needs no server-side state, survives restarts, and
//! cannot be forged or altered; rotating or removing the issuing token changes or drops
//! its secret, which voids every link it issued, as in ReductStore 1.21.5. (ReductStore
//! encrypts the request instead; clients treat links as opaque either way.)

use std::io::{Read, Write};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use crate::error::{Error, Result};

/// The issuer named by links made with authentication off (as in ReductStore).
pub const AUTH_DISABLED_ISSUER: &str = "AUTHENTICATION-DISABLED";

/// Most bytes a link's request may take decompressed (a `when` is small).
const MAX_REQUEST_BYTES: u64 = 1 << 20;

/// The body of `POST /links/{file}`, kept whole in the link.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LinkRequest {
    /// The bucket the query runs on (read access needed).
    pub bucket: String,
    /// The entry queried when the query names none.
    pub entry: String,
    /// The query (`/io` query JSON; only `QUERY`), kept as sent.
    pub query: Box<serde_json::value::RawValue>,
    /// UNIX seconds after which the link is refused.
    pub expire_at: u64,
    /// The record handed out: its entry…
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record_entry: Option<String>,
    /// …and its timestamp (µs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record_timestamp: Option<u64>,
    /// Where the link points instead of the server's public URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
}

/// A link's parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkParams {
    /// The sealed request.
    pub ct: String,
    /// The salt.
    pub s: String,
    /// The issuing token's name.
    pub i: String,
    /// The signature.
    pub n: String,
}

fn signature(secret: &[u8], salt: &[u8], ct: &[u8]) -> Result<Vec<u8>> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret)
        .map_err(|e| Error::internal(format!("link key: {e}")))?;
    mac.update(b"halflife query link v1\0");
    mac.update(salt);
    mac.update(ct);
    Ok(mac.finalize().into_bytes().to_vec())
}

/// Seals a request into a link's parameters for `issuer`, whose stored secret is
/// `secret`.
pub fn seal(request: &LinkRequest, issuer: &str, secret: &[u8]) -> Result<LinkParams> {
    let json = serde_json::to_vec(request)
        .map_err(|e| Error::internal(format!("encoding a query link: {e}")))?;
    let mut zlib = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    let ct = zlib
        .write_all(&json)
        .and_then(|_| zlib.finish())
        .map_err(|e| Error::internal(format!("compressing a query link: {e}")))?;
    let mut salt = [0u8; 16];
    getrandom::fill(&mut salt)
        .map_err(|e| Error::internal(format!("no randomness for a query link: {e}")))?;
    let n = signature(secret, &salt, &ct)?;
    Ok(LinkParams {
        ct: URL_SAFE_NO_PAD.encode(&ct),
        s: URL_SAFE_NO_PAD.encode(salt),
        i: issuer.to_string(),
        n: URL_SAFE_NO_PAD.encode(n),
    })
}

fn decode_param(name: &str, value: &str) -> Result<Vec<u8>> {
    URL_SAFE_NO_PAD
        .decode(value.trim_end_matches('='))
        .map_err(|e| Error::unprocessable(format!("Invalid base64 in '{name}' parameter: {e}")))
}

/// Opens a link's parameters with the issuer's stored secret: the request it carries,
/// or 422 when the link was altered, made with another secret (a rotated token) or is
/// malformed. Expiry is the caller's to check.
pub fn open(params: &LinkParams, secret: &[u8]) -> Result<LinkRequest> {
    let ct = decode_param("ct", &params.ct)?;
    let salt = decode_param("s", &params.s)?;
    let n = decode_param("n", &params.n)?;
    // Constant time: a forger learns nothing from how long the refusal took.
    if !crate::server::auth::constant_time_eq(&signature(secret, &salt, &ct)?, &n) {
        return Err(Error::unprocessable(
            "Failed to decrypt query: the link does not match its issuing token (altered, or the token was rotated)",
        ));
    }
    let mut json = Vec::new();
    flate2::read::ZlibDecoder::new(ct.as_slice())
        .take(MAX_REQUEST_BYTES)
        .read_to_end(&mut json)
        .map_err(|e| Error::unprocessable(format!("Failed to decrypt query: {e}")))?;
    serde_json::from_slice(&json)
        .map_err(|e| Error::unprocessable(format!("Failed to decrypt query: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> LinkRequest {
        serde_json::from_str(
            r#"{"bucket":"b","entry":"cam","query":{"query_type":"QUERY","when":{"&a":{"$eq":1}}},
                "expire_at":2000000000,"record_entry":"cam","record_timestamp":5}"#,
        )
        .unwrap()
    }

    #[test]
    fn a_sealed_link_opens_with_its_secret_only() {
        let params = seal(&request(), "t", b"secret-1").unwrap();
        let opened = open(&params, b"secret-1").unwrap();
        assert_eq!(opened.bucket, "b");
        assert_eq!(opened.record_timestamp, Some(5));
        assert_eq!(
            opened.query.get(),
            r#"{"query_type":"QUERY","when":{"&a":{"$eq":1}}}"#
        );
        // Another secret (a rotated token) or any altered parameter is refused.
        assert!(open(&params, b"secret-2").is_err());
        let mut altered = params.clone();
        altered.s = seal(&request(), "t", b"secret-1").unwrap().s;
        assert!(open(&altered, b"secret-1").is_err());
        let mut altered = params.clone();
        altered
            .ct
            .replace_range(0..1, if params.ct.starts_with('A') { "B" } else { "A" });
        assert!(open(&altered, b"secret-1").is_err());
        // Two links of one request differ (a fresh salt each).
        assert_ne!(params.s, seal(&request(), "t", b"secret-1").unwrap().s);
    }

    #[test]
    fn bad_base64_names_the_parameter() {
        let mut params = seal(&request(), "t", b"k").unwrap();
        params.s = "a*b".into();
        let e = open(&params, b"k").unwrap_err();
        assert!(
            e.message().starts_with("Invalid base64 in 's' parameter"),
            "{e}"
        );
    }
}
