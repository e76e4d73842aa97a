//! A blocking S3 client over `ureq`: requests signed by `rusty-s3` (SigV4 presigned URLs,
//! so no signing code of ours), the few calls the tier needs — put (one request, or a
//! multipart upload above a threshold), head, ranged get, delete, list.
//!
//! Every body sent carries its `Content-MD5`, so the store refuses bytes that were damaged
//! on the way; the ETag it answers is the MD5 of what it stored (of each part's MD5s for a
//! multipart upload), which the uploader compares with its own.
//!
//! Errors name the remote, the object key and the store's own error code and message —
//! never a URL, which carries the access key and the signature.

use std::time::Duration;

use base64::Engine as _;
use md5::{Digest, Md5};
use rusty_s3::actions::{
    CompleteMultipartUpload, CreateMultipartUpload, DeleteObject, GetObject, HeadObject,
    ListObjectsV2, PutObject, S3Action, UploadPart,
};
use rusty_s3::{Bucket, Credentials, UrlStyle};
use ureq::tls::{RootCerts, TlsConfig};

use crate::error::{Error, ErrorKind, Result};
use crate::storage::remote::ca::read_ca_certificates;
use crate::storage::remote::settings::RemoteSettings;

/// How long a presigned request stays valid: long enough for the slowest part upload.
const SIGNATURE_LIFETIME: Duration = Duration::from_secs(3600);

/// Objects at least this large are uploaded in parts.
pub const MULTIPART_THRESHOLD: usize = 16 << 20;
/// The size of each part of a multipart upload (S3's minimum is 5 MiB).
pub const PART_SIZE: usize = 8 << 20;

/// How long looking up the store's name may take (the system resolver alone may wait far
/// longer for a name whose server is gone, as a stopped container's is).
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long connecting to the store may take before it counts as unreachable: one bound
/// for all the addresses its name has, not one per address.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a request may wait for its answer, or between bytes of it.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);

/// What went wrong with a remote call, by kind (what `/metrics` counts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// No answer: refused connection, timeout, TLS failure.
    Unreachable,
    /// The store refused the credentials or the permission (401, 403).
    Denied,
    /// The bucket or the object does not exist.
    Missing,
    /// The store is out of space or quota.
    Full,
    /// Any other refusal, or an answer that makes no sense.
    Other,
}

impl FaultKind {
    /// The kind's name in metrics and events.
    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::Unreachable => "unreachable",
            FaultKind::Denied => "denied",
            FaultKind::Missing => "missing",
            FaultKind::Full => "full",
            FaultKind::Other => "other",
        }
    }
}

/// A failed remote call: its kind and a message naming the remote and the object.
#[derive(Debug, Clone)]
pub struct RemoteFault {
    /// What kind of failure.
    pub kind: FaultKind,
    /// What happened, for logs, events and the `x-reduct-error` of a 503.
    pub message: String,
}

impl From<RemoteFault> for Error {
    fn from(f: RemoteFault) -> Error {
        Error::new(ErrorKind::Unavailable, f.message)
    }
}

/// An object as a listing shows it.
#[derive(Debug, Clone)]
pub struct ListedObject {
    /// The object's full key.
    pub key: String,
    /// Its size in bytes.
    pub size: u64,
    /// When it was last written, as the store says (RFC 3339).
    pub last_modified: String,
    /// Its ETag, as the store lists it (changes with every write of other bytes).
    pub etag: String,
}

/// How many times a call the store answered with a server error is asked again (after
/// 100, 200 and 400 ms).
const SERVER_ERROR_RETRIES: u32 = 3;

/// A connection to one remote's bucket.
pub struct S3Client {
    name: String,
    bucket: Bucket,
    credentials: Credentials,
    agent: ureq::Agent,
}

/// The MD5 of `bytes` as S3 shows it in an ETag (lower-case hex).
pub fn md5_hex(bytes: &[u8]) -> String {
    hex(&Md5::digest(bytes))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The ETag S3 gives a multipart upload of parts with these MD5s: the MD5 of their digests
/// concatenated, then `-` and the number of parts.
pub fn multipart_etag(part_digests: &[[u8; 16]]) -> String {
    let mut all = Md5::new();
    for d in part_digests {
        all.update(d);
    }
    format!("{}-{}", hex(&all.finalize()), part_digests.len())
}

impl S3Client {
    /// A client of the remote `settings` describes. Nothing is sent yet; a CA file that
    /// cannot be read is an error.
    pub fn new(settings: &RemoteSettings) -> Result<Self> {
        let style = if settings.path_style {
            UrlStyle::Path
        } else {
            UrlStyle::VirtualHost
        };
        let endpoint = settings.endpoint.parse().map_err(|e| {
            Error::unprocessable(format!(
                "remote '{}': endpoint '{}' is not a URL: {e}",
                settings.name, settings.endpoint
            ))
        })?;
        let bucket = Bucket::new(
            endpoint,
            style,
            settings.bucket.clone(),
            settings.region.clone(),
        )
        .map_err(|e| {
            Error::unprocessable(format!(
                "remote '{}': bucket '{}' at '{}': {e}",
                settings.name, settings.bucket, settings.endpoint
            ))
        })?;
        let roots = match &settings.ca_file {
            None => RootCerts::WebPki,
            Some(path) => RootCerts::Specific(std::sync::Arc::new(read_ca_certificates(
                path,
                &format!(
                    "RS_REMOTE_{}_CA_FILE",
                    settings.name.to_ascii_uppercase().replace('-', "_")
                ),
            )?)),
        };
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            // A fresh connection per request. On a kept-alive one, a store that writes an
            // answer's head and body apart without TCP_NODELAY (Garage) stalls every GET
            // by the client's delayed ACK: 35-45 ms measured on loopback, against 0.6 ms
            // fresh (a new connection starts in quick-ACK mode).
            .max_idle_connections(0)
            .timeout_resolve(Some(RESOLVE_TIMEOUT))
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .timeout_recv_response(Some(REQUEST_TIMEOUT))
            .timeout_recv_body(Some(REQUEST_TIMEOUT))
            .timeout_send_body(Some(REQUEST_TIMEOUT))
            .tls_config(TlsConfig::builder().root_certs(roots).build())
            .build()
            .new_agent();
        Ok(S3Client {
            name: settings.name.clone(),
            bucket,
            credentials: Credentials::new(
                settings.access_key_id.clone(),
                settings.secret_access_key.expose(),
            ),
            agent,
        })
    }

    /// The remote's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn fault(
        &self,
        kind: FaultKind,
        what: &str,
        key: &str,
        why: impl std::fmt::Display,
    ) -> RemoteFault {
        RemoteFault {
            kind,
            message: format!("remote '{}': {what} '{key}': {why}", self.name),
        }
    }

    /// The fault of a call that got no answer. ureq's error text can quote the URL
    /// (signature included), so only its kind is told.
    fn transport(&self, what: &str, key: &str, e: &ureq::Error) -> RemoteFault {
        let why = match e {
            ureq::Error::Timeout(ureq::Timeout::Resolve) => format!(
                "its name is not resolved within {} s (the resolve timeout)",
                RESOLVE_TIMEOUT.as_secs()
            ),
            ureq::Error::Timeout(ureq::Timeout::Connect) => format!(
                "no connection within {} s (the connect timeout)",
                CONNECT_TIMEOUT.as_secs()
            ),
            ureq::Error::Timeout(t) => format!("timed out ({t})"),
            ureq::Error::Io(io) => format!("cannot be reached: {}", io.kind()),
            ureq::Error::HostNotFound => "the host is not found".into(),
            ureq::Error::ConnectionFailed => "cannot be reached: connection failed".into(),
            ureq::Error::Tls(t) => format!("TLS failed: {t}"),
            ureq::Error::Rustls(t) => format!("TLS failed: {t}"),
            _ => "cannot be reached".into(),
        };
        self.fault(FaultKind::Unreachable, what, key, why)
    }

    /// The fault of an answer with an error status: the store's `<Code>` and `<Message>`.
    fn refusal(
        &self,
        what: &str,
        key: &str,
        response: &mut ureq::http::Response<ureq::Body>,
    ) -> RemoteFault {
        let status = response.status().as_u16();
        let body = response
            .body_mut()
            .with_config()
            .limit(64 * 1024)
            .read_to_string()
            .unwrap_or_default();
        let tag = |name: &str| {
            let open = format!("<{name}>");
            let close = format!("</{name}>");
            let start = body.find(&open)? + open.len();
            let end = body[start..].find(&close)? + start;
            Some(body[start..end].trim().to_string())
        };
        let code = tag("Code").unwrap_or_default();
        let message = tag("Message").unwrap_or_default();
        let kind = match (status, code.as_str()) {
            (401 | 403, _) => FaultKind::Denied,
            (404, _) => FaultKind::Missing,
            (507, _) | (_, "QuotaExceeded" | "EntityTooLarge" | "InsufficientStorage") => {
                FaultKind::Full
            }
            (500..=599, _) if code.is_empty() => FaultKind::Unreachable,
            _ => FaultKind::Other,
        };
        let mut why = format!("{status}");
        for part in [&code, &message] {
            if !part.is_empty() {
                why.push(' ');
                why.push_str(&part.chars().take(300).collect::<String>());
            }
        }
        self.fault(kind, what, key, why)
    }

    /// Sends a signed request: `url` from the action, the signed `headers` sent with it.
    fn send(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, String)],
        body: Option<&[u8]>,
    ) -> std::result::Result<ureq::http::Response<ureq::Body>, ureq::Error> {
        let mut request = ureq::http::Request::builder().method(method).uri(url);
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        match body {
            Some(body) => self
                .agent
                .run(request.body(body).map_err(ureq::Error::from)?),
            None => self.agent.run(request.body(()).map_err(ureq::Error::from)?),
        }
    }

    /// [`S3Client::send`], answered with a success status: a call that got no answer or
    /// an error status is the fault of doing `what` to `key`.
    fn call(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, String)],
        body: Option<&[u8]>,
        what: &str,
        key: &str,
    ) -> std::result::Result<ureq::http::Response<ureq::Body>, RemoteFault> {
        let mut attempt = 0;
        loop {
            let mut response = self
                .send(method, url, headers, body)
                .map_err(|e| self.transport(what, key, &e))?;
            let status = response.status().as_u16();
            if response.status().is_success() {
                return Ok(response);
            }
            // A store that answered "try again" (a busy node: 500, 502, 503, 504) is asked
            // again, as S3's own clients do; every call made here is idempotent. One that
            // did not answer at all is not: its outage is the caller's to handle.
            if matches!(status, 500 | 502 | 503 | 504) && attempt < SERVER_ERROR_RETRIES {
                let fault = self.refusal(what, key, &mut response);
                log::debug!("{}; asking again", fault.message);
                std::thread::sleep(std::time::Duration::from_millis(100 << attempt));
                attempt += 1;
                continue;
            }
            return Err(self.refusal(what, key, &mut response));
        }
    }

    /// The text of a successful answer (an XML document of at most `limit` bytes).
    fn text(
        &self,
        response: &mut ureq::http::Response<ureq::Body>,
        limit: u64,
        what: &str,
        key: &str,
    ) -> std::result::Result<String, RemoteFault> {
        response
            .body_mut()
            .with_config()
            .limit(limit)
            .read_to_string()
            .map_err(|e| self.transport(what, key, &e))
    }

    /// Sends `body` with its `Content-MD5` through `action` (a put or a part of one) and
    /// returns its MD5, once the ETag the store answered matches it.
    fn put_checked<'a>(
        &self,
        mut action: impl S3Action<'a>,
        body: &[u8],
        what: &str,
        key: &str,
    ) -> std::result::Result<[u8; 16], RemoteFault> {
        let digest: [u8; 16] = Md5::digest(body).into();
        let content_md5 = base64::engine::general_purpose::STANDARD.encode(digest);
        action
            .headers_mut()
            .insert("content-md5", content_md5.clone());
        let url = action.sign(SIGNATURE_LIFETIME);
        let response = self.call(
            "PUT",
            url.as_str(),
            &[("content-md5", content_md5)],
            Some(body),
            what,
            key,
        )?;
        self.confirm_etag(key, &response, &hex(&digest))?;
        Ok(digest)
    }

    /// Stores `body` under `key` (in parts when large) and returns the ETag the store
    /// confirmed, already compared with the one the bytes should have.
    pub fn put(&self, key: &str, body: &[u8]) -> std::result::Result<String, RemoteFault> {
        if body.len() >= MULTIPART_THRESHOLD {
            return self.put_multipart(key, body);
        }
        let action = PutObject::new(&self.bucket, Some(&self.credentials), key);
        let digest = self.put_checked(action, body, "uploading", key)?;
        Ok(hex(&digest))
    }

    fn confirm_etag(
        &self,
        key: &str,
        response: &ureq::http::Response<ureq::Body>,
        expected: &str,
    ) -> std::result::Result<String, RemoteFault> {
        let etag = response
            .headers()
            .get("etag")
            .and_then(|v| v.to_str().ok())
            .map(|v| v.trim_matches('"').to_string())
            .unwrap_or_default();
        if etag != expected {
            return Err(self.fault(
                FaultKind::Other,
                "uploading",
                key,
                format!("the store confirmed ETag '{etag}', the bytes sent have '{expected}'"),
            ));
        }
        Ok(etag)
    }

    fn put_multipart(&self, key: &str, body: &[u8]) -> std::result::Result<String, RemoteFault> {
        let create = CreateMultipartUpload::new(&self.bucket, Some(&self.credentials), key);
        let what = "starting the upload of";
        let url = create.sign(SIGNATURE_LIFETIME);
        let mut response = self.call("POST", url.as_str(), &[], None, what, key)?;
        let text = self.text(&mut response, 64 * 1024, what, key)?;
        let created = CreateMultipartUpload::parse_response(&text)
            .map_err(|e| self.fault(FaultKind::Other, what, key, e))?;
        let upload_id = created.upload_id().to_string();
        let result = self.upload_parts(key, &upload_id, body);
        if result.is_err() {
            // Abort, so the store drops the parts already sent; if this fails too, the
            // store's own cleanup of stale uploads is the last resort.
            let abort = rusty_s3::actions::AbortMultipartUpload::new(
                &self.bucket,
                Some(&self.credentials),
                key,
                &upload_id,
            );
            let _ = self.send("DELETE", abort.sign(SIGNATURE_LIFETIME).as_str(), &[], None);
        }
        result
    }

    fn upload_parts(
        &self,
        key: &str,
        upload_id: &str,
        body: &[u8],
    ) -> std::result::Result<String, RemoteFault> {
        let mut digests = Vec::new();
        for (i, part) in body.chunks(PART_SIZE).enumerate() {
            let number = u16::try_from(i + 1).map_err(|_| {
                self.fault(FaultKind::Other, "uploading", key, "more than 65535 parts")
            })?;
            let action = UploadPart::new(
                &self.bucket,
                Some(&self.credentials),
                key,
                number,
                upload_id,
            );
            digests.push(self.put_checked(action, part, "uploading a part of", key)?);
        }
        let etags: Vec<String> = digests.iter().map(|d| hex(d)).collect();
        let complete = CompleteMultipartUpload::new(
            &self.bucket,
            Some(&self.credentials),
            key,
            upload_id,
            etags.iter().map(String::as_str),
        );
        let what = "completing the upload of";
        let url = complete.sign(SIGNATURE_LIFETIME);
        let xml = complete.body();
        let mut response = self.call("POST", url.as_str(), &[], Some(xml.as_bytes()), what, key)?;
        // The answer's body may still be an error (S3 answers 200 and reports a failed
        // completion in the body).
        let text = self.text(&mut response, 64 * 1024, what, key)?;
        if text.contains("<Error>") {
            return Err(self.fault(
                FaultKind::Other,
                what,
                key,
                text.chars().take(300).collect::<String>(),
            ));
        }
        Ok(multipart_etag(&digests))
    }

    /// The size and ETag of the object `key`, or `None` when it does not exist.
    pub fn head(&self, key: &str) -> std::result::Result<Option<(u64, String)>, RemoteFault> {
        let action = HeadObject::new(&self.bucket, Some(&self.credentials), key);
        let url = action.sign(SIGNATURE_LIFETIME);
        let mut response = self
            .send("HEAD", url.as_str(), &[], None)
            .map_err(|e| self.transport("checking", key, &e))?;
        if response.status().as_u16() == 404 {
            return Ok(None);
        }
        if !response.status().is_success() {
            return Err(self.refusal("checking", key, &mut response));
        }
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string()
        };
        let size = header("content-length").parse().map_err(|_| {
            self.fault(
                FaultKind::Other,
                "checking",
                key,
                "no Content-Length in the answer",
            )
        })?;
        Ok(Some((size, header("etag").trim_matches('"').to_string())))
    }

    /// Bytes `start..end` of the object `key`, exactly.
    pub fn get_range(
        &self,
        key: &str,
        start: u64,
        end: u64,
    ) -> std::result::Result<Vec<u8>, RemoteFault> {
        let action = GetObject::new(&self.bucket, Some(&self.credentials), key);
        let url = action.sign(SIGNATURE_LIFETIME);
        let range = format!("bytes={start}-{}", end.saturating_sub(1));
        let mut response = self.call(
            "GET",
            url.as_str(),
            &[("range", range)],
            None,
            "reading",
            key,
        )?;
        let want = (end - start) as usize;
        let bytes = response
            .body_mut()
            .with_config()
            .limit(want as u64 + 1)
            .read_to_vec()
            .map_err(|e| self.transport("reading", key, &e))?;
        if bytes.len() != want {
            return Err(self.fault(
                FaultKind::Other,
                "reading",
                key,
                format!(
                    "asked for {want} bytes at {start}, the store answered {}",
                    bytes.len()
                ),
            ));
        }
        Ok(bytes)
    }

    /// Removes the object `key`; one already gone is no error.
    pub fn delete(&self, key: &str) -> std::result::Result<(), RemoteFault> {
        let action = DeleteObject::new(&self.bucket, Some(&self.credentials), key);
        let url = action.sign(SIGNATURE_LIFETIME);
        let mut response = self
            .send("DELETE", url.as_str(), &[], None)
            .map_err(|e| self.transport("deleting", key, &e))?;
        if response.status().is_success() || response.status().as_u16() == 404 {
            return Ok(());
        }
        Err(self.refusal("deleting", key, &mut response))
    }

    /// Every object whose key starts with `prefix`.
    pub fn list(&self, prefix: &str) -> std::result::Result<Vec<ListedObject>, RemoteFault> {
        let mut objects = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut action = ListObjectsV2::new(&self.bucket, Some(&self.credentials));
            action.with_prefix(prefix);
            if let Some(t) = &token {
                action.with_continuation_token(t.clone());
            }
            let url = action.sign(SIGNATURE_LIFETIME);
            let mut response = self.call("GET", url.as_str(), &[], None, "listing", prefix)?;
            let text = self.text(&mut response, 16 << 20, "listing", prefix)?;
            let page = ListObjectsV2::parse_response(&text)
                .map_err(|e| self.fault(FaultKind::Other, "listing", prefix, e))?;
            // Keys are listed URL-encoded (rusty-s3 asks for `encoding-type=url`).
            objects.extend(page.contents.into_iter().map(|c| {
                ListedObject {
                    key: percent_encoding::percent_decode_str(&c.key)
                        .decode_utf8_lossy()
                        .into_owned(),
                    size: c.size,
                    last_modified: c.last_modified,
                    etag: c.etag.trim_matches('"').to_string(),
                }
            }));
            match page.next_continuation_token {
                Some(t) if !t.is_empty() => token = Some(t),
                _ => return Ok(objects),
            }
        }
    }
}
