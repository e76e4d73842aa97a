//! Ours: `GET /api/v1/b/{bucket}/storage` (and the same at `/api/v1/storage/{bucket}`,
//! which no entry name can shadow): the storage report of one bucket — per entry records,
//! blocks, overlap, bytes per codec tier, time range; the bucket's totals; and, for a
//! caller with full access, the state of the bucket's lifecycle policies. The same report
//! `halflife info` prints offline, so `halflife info --url` renders a live server exactly.

use crate::error::Result;
use crate::report::{self, policies};
use crate::server::auth::{Access, Caller};
use crate::server::http::Response;
use crate::server::state::App;

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
