//! `POST /b/$system/<family>/<instance>/<name>?ts=…`: the audit, usage and log events a
//! REPLICA posts to the instance that writes its data directory (`server/trail/
//! forward.rs`, `docs/high-availability.md`). Only these three families, only from a
//! full-access token, and written the way the server writes its own events (`$system`
//! created with its quota on the first one, a taken timestamp moved to the next free
//! instant); every other write into a `$` bucket stays refused.

use crate::error::{Error, Result};
use crate::server::auth::Access;
use crate::server::http::Response;
use crate::server::http::body::body_error;
use crate::server::http::request::{Request, required_ts};
use crate::server::state::App;
use crate::storage::system::SYSTEM_BUCKET;

/// Most bytes one forwarded event may take (events are a few hundred bytes of JSON).
const MAX_EVENT: u64 = 64 * 1024;

/// Whether `POST /b/{bucket}/{entry}` is a forwarded event: `$system`, and an entry of
/// the audit, usage or log family with its instance and name.
pub(crate) fn is_forwarded(bucket: &str, entry: &str) -> bool {
    let mut parts = entry.split('/');
    bucket == SYSTEM_BUCKET
        && matches!(parts.next(), Some("audit" | "usage" | "logs"))
        && parts.next().is_some_and(|p| !p.is_empty())
        && parts.next().is_some_and(|p| !p.is_empty())
        && parts.next().is_none()
}

/// Writes a forwarded event, with the labels its headers carry, into this server's
/// `$system`.
pub(crate) fn write(
    app: &App,
    entry: &str,
    labels: crate::storage::Labels,
    req: &mut Request,
) -> Result<Response> {
    app.writable("write record")?;
    if let Some(caller) = &req.caller {
        caller.check(Access::Full)?;
    }
    let Some(trail) = &app.trail else {
        return Err(Error::forbidden(
            "system events are off on this instance: a replica's events are not kept",
        ));
    };
    let ts = required_ts(req)?;
    if req.body.remaining() > MAX_EVENT {
        return Err(Error::unprocessable(format!(
            "an event is at most {MAX_EVENT} bytes"
        )));
    }
    let payload = req
        .body
        .read_all()
        .map_err(|e| body_error("reading the event", e))?;
    trail.write_forwarded(entry, ts, labels, payload)?;
    Ok(Response::ok())
}
