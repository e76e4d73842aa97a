//! Ours: `GET /api/v1/b/{bucket}/storage` (and the same at `/api/v1/storage/{bucket}`,
//! which no entry name can shadow): the storage report of one bucket — per entry records,
//! blocks, overlap, bytes per codec tier, time range; the bucket's totals; and, for a
//! caller with full access, the state of the bucket's lifecycle policies. The same report
//! `halflife info` prints offline, so `halflife info --url` renders a live server exactly.

use crate::error::{Error, Result};
use crate::report::{self, policies};
use crate::server::auth::{Access, Caller};
use crate::server::http::Response;
use crate::server::http::head::parse_decimal;
use crate::server::http::request::Request;
use crate::server::state::App;
use crate::storage::entry::Histogram;

/// The path segment after the bucket that asks for the report.
pub const STORAGE: &str = "storage";

/// Whether `GET /b/{bucket}/storage` means the report: unless the bucket has an entry
/// named `storage`, whose latest record that path reads in ReductStore (compatibility
/// first: such a bucket's report is at `/storage/{bucket}`).
pub fn is_report_path(app: &App, bucket: &str) -> bool {
    app.store
        .bucket(bucket)
        .map_or(true, |b| b.entry(STORAGE).is_err())
}

/// `GET /b/{bucket}/storage`: the bucket's report as JSON.
pub fn storage(app: &App, bucket: &str, caller: Option<&Caller>) -> Result<Response> {
    let handle = app.store.bucket(bucket)?;
    // Policies are for those who may manage them, as the lifecycle endpoints.
    let policies = if caller.is_none_or(|c| c.check(Access::Full).is_ok()) {
        app.lifecycles
            .describe(bucket)?
            .iter()
            .map(|(info, settings)| policies::live(info, settings))
            .collect()
    } else {
        Vec::new()
    };
    Ok(Response::json(&report::bucket_report(&handle, policies)))
}

/// Points of a histogram when the request names none.
const DEFAULT_POINTS: usize = 100;

/// `GET /api/v1/storage/{bucket}/histogram?entry=E[&start=µs][&stop=µs][&points=N]`: the
/// records and payload bytes of entry `E` per stretch of `[start, stop)` (default: its
/// oldest record to just after its latest), cut into at most `points` stretches (default
/// 100, at most 1000), counted exactly from the index and the record tables of the
/// blocks that straddle a stretch's edge: what the console charts an entry's data volume
/// from, at any size of entry.
pub fn histogram(app: &App, bucket: &str, req: &Request) -> Result<Response> {
    let number = |name: &str| -> Result<Option<u64>> {
        match req.head.query_param(name) {
            None => Ok(None),
            Some(text) => parse_decimal(&text).map(Some).ok_or_else(|| {
                Error::unprocessable(format!(
                    "'{name}' must be an unsigned integer, not '{}'",
                    text.escape_default()
                ))
            }),
        }
    };
    let name = req
        .head
        .query_param("entry")
        .ok_or_else(|| Error::unprocessable("The query parameter 'entry' is required"))?;
    let points = number("points")?.map_or(DEFAULT_POINTS, |n| n.min(usize::MAX as u64) as usize);
    let (start, stop) = (number("start")?, number("stop")?);
    let entry = app.store.bucket(bucket)?.entry(&name)?;
    let info = entry.info()?;
    let start = start.unwrap_or(info.oldest_record);
    let stop = stop.unwrap_or(info.latest_record.saturating_add(1));
    if info.record_count == 0 && start >= stop {
        // Nothing to chart, and no range asked for: no stretches.
        return Ok(Response::json(&Histogram::empty(start, stop)));
    }
    Ok(Response::json(&entry.histogram(start, stop, points)?))
}
