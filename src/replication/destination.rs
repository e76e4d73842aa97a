//! Talking to a replication's destination: the calls every pass makes (is it there, does
//! its bucket exist) and how an answer is read (status, error text, per-record errors).

use crate::replication::settings::ReplicationSettings;
use crate::wire::percent;

/// A pass that could not deliver: the code (an HTTP status, or -3 connection error, -6
/// broken request), why, and how many records it was sending (kept for the next pass).
pub(super) struct Unavailable {
    pub(super) code: i32,
    pub(super) message: String,
    pub(super) records: u64,
}

impl Unavailable {
    pub(super) fn new(code: i32, message: impl Into<String>, records: usize) -> Unavailable {
        Unavailable {
            code,
            message: message.into(),
            records: records as u64,
        }
    }
}

/// Whether the destination answers for its bucket (found, or missing and creatable).
pub(super) fn probe(agent: &ureq::Agent, settings: &ReplicationSettings) -> bool {
    let path = format!("b/{}", path_segment(&settings.dst_bucket));
    status_of(with_auth(agent.get(url(settings, &path)), settings).call())
        .is_ok_and(|(status, _)| status == 200 || status == 404)
}

pub(super) fn url(settings: &ReplicationSettings, path: &str) -> String {
    format!("{}/api/v1/{path}", settings.dst_host.trim_end_matches('/'))
}

pub(super) fn with_auth<B>(
    request: ureq::RequestBuilder<B>,
    settings: &ReplicationSettings,
) -> ureq::RequestBuilder<B> {
    match settings.dst_token.as_deref().filter(|t| !t.is_empty()) {
        Some(token) => request.header("authorization", &format!("Bearer {token}")),
        None => request,
    }
}

/// The status of a response, or why there was none (-6 for a request that timed out,
/// -3 for any other failure to get an answer).
pub(super) fn status_of(
    result: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
) -> Result<(u16, ureq::http::Response<ureq::Body>), (i32, String)> {
    match result {
        Ok(response) => Ok((response.status().as_u16(), response)),
        Err(ureq::Error::Timeout(_)) => Err((-6, "the request timed out".into())),
        Err(e) => Err((-3, e.to_string())),
    }
}

/// What the sender knows of the destination bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Destination {
    /// The destination takes compressed batches (it says `x-reduct-api` 1.21 or later).
    pub compressed_ok: bool,
    /// The bucket was seen (or made); false when the token may write but not read it (a
    /// least-privilege destination token): writes go ahead, and a write answered 404 makes
    /// the sender try to create it ([`create_bucket`]).
    pub verified: bool,
}

/// Makes sure the destination bucket exists: created with its defaults when missing. A
/// token that may not read the bucket (403) is taken as one that may write it, as
/// ReductStore's replication does: the writes say whether it can.
pub(super) fn ensure_bucket(
    agent: &ureq::Agent,
    settings: &ReplicationSettings,
) -> Result<Destination, (i32, String)> {
    let path = format!("b/{}", path_segment(&settings.dst_bucket));
    let (status, response) =
        status_of(with_auth(agent.get(url(settings, &path)), settings).call())?;
    let compressed_ok = response
        .headers()
        .get("x-reduct-api")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once('.'))
        .and_then(|(major, minor)| Some((major.parse::<u32>().ok()?, minor.parse::<u32>().ok()?)))
        .is_some_and(|version| version >= (1, 21));
    let found = |verified| {
        Ok(Destination {
            compressed_ok,
            verified,
        })
    };
    match status {
        200 => found(true),
        403 => found(false),
        404 => {
            create_bucket(agent, settings)?;
            found(true)
        }
        code => Err((
            i32::from(code),
            format!("checking bucket '{}'", settings.dst_bucket),
        )),
    }
}

/// Creates the destination bucket with its defaults (409, made meanwhile, is as good).
pub(super) fn create_bucket(
    agent: &ureq::Agent,
    settings: &ReplicationSettings,
) -> Result<(), (i32, String)> {
    let path = format!("b/{}", path_segment(&settings.dst_bucket));
    let created = with_auth(agent.post(url(settings, &path)), settings).send_empty();
    match status_of(created)?.0 {
        200 | 409 => Ok(()),
        403 => Err((
            403,
            format!(
                "creating bucket '{}': it is missing and the destination token may not create it (create it there, or give the token full access)",
                settings.dst_bucket
            ),
        )),
        code => Err((
            i32::from(code),
            format!("creating bucket '{}'", settings.dst_bucket),
        )),
    }
}

/// Whether a whole-batch refusal leaves the records worth sending again.
pub(super) fn transient(status: u16) -> bool {
    !matches!(status, 400 | 413 | 422)
}

/// The per-record error a v1 batch answered for `ts` (`x-reduct-error-<ts>: <code>,<msg>`).
pub(super) fn record_error(
    response: &ureq::http::Response<ureq::Body>,
    ts: u64,
) -> Option<(i32, String)> {
    let value = response
        .headers()
        .get(format!("x-reduct-error-{ts}"))?
        .to_str()
        .unwrap_or("");
    let (code, message) = value.split_once(',').unwrap_or((value, ""));
    Some((code.trim().parse().unwrap_or(-1), message.to_string()))
}

/// The destination's `x-reduct-error`, or the status line.
pub(super) fn error_message(response: &ureq::http::Response<ureq::Body>) -> String {
    response
        .headers()
        .get("x-reduct-error")
        .and_then(|v| v.to_str().ok())
        .map_or_else(|| response.status().to_string(), str::to_string)
}

pub(super) use percent::path_segment;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_path_text() {
        assert_eq!(path_segment("cam/front"), "cam/front");
        assert_eq!(path_segment("50% $meta"), "50%25%20%24meta");
    }
}
