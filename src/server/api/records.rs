//! Single-record endpoints under `/b/{bucket}/{entry}`: write (POST), read (GET, HEAD),
//! label update (PATCH), record removal (DELETE with `ts`) and entry removal (DELETE with
//! no query string).

use crate::error::{Error, Result};
use crate::server::api::forwarded_events;
use crate::server::http::body::body_error;
use crate::server::http::head::RequestHead;
use crate::server::http::request::{Request, no_route, parse_decimal, required_ts, ts_param};
use crate::server::http::{Response, ResponseBody};
use crate::server::queries::{Reader, Scope};
use crate::server::state::App;
use crate::storage::attachments::{
    entry_removal_refused, is_attachment_entry, record_removal_refused,
};
use crate::storage::names::validate_entry_name;
use crate::storage::{DEFAULT_CONTENT_TYPE, Labels, Record, RecordMeta};

const LABEL_PREFIX: &str = "x-reduct-label-";

/// Labels given as `x-reduct-label-<name>` headers (names are lowercase already).
pub fn labels_from_headers(head: &RequestHead) -> Labels {
    head.headers
        .iter()
        .filter_map(|(n, v)| {
            n.strip_prefix(LABEL_PREFIX)
                .map(|k| (k.to_string(), v.clone()))
        })
        .filter(|(k, _)| !k.is_empty())
        .collect()
}

/// Refuses writes into `$` buckets: they hold the server's own records.
pub fn user_bucket(name: &str) -> Result<()> {
    if name.starts_with('$') {
        return Err(Error::forbidden(format!(
            "Bucket '{name}' belongs to the system and is read-only"
        )));
    }
    Ok(())
}

/// A record as `GET|HEAD /b/{bucket}/{entry}` answers it: metadata in headers, the
/// payload as the body.
pub(crate) fn single_record(record: Record, method: &str, entry: &str) -> Response {
    let mut response = Response::ok()
        .header("x-reduct-time", record.meta.timestamp.to_string())
        .header("content-type", record.meta.content_type.clone())
        .header("x-reduct-entry", entry)
        .header("content-disposition", "attachment");
    for (k, v) in &record.meta.labels {
        response = response.header(&format!("{LABEL_PREFIX}{k}"), v.clone());
    }
    let body = match (method, record.payload) {
        ("GET", Some(payload)) => ResponseBody::Payloads(vec![payload]),
        _ => ResponseBody::Head(record.meta.size),
    };
    response.with_body(body)
}

/// `/b/{bucket}/{entry}`.
pub fn record(
    app: &App,
    method: &str,
    bucket_name: &str,
    entry: &str,
    req: &mut Request,
) -> Result<Response> {
    match method {
        "POST" => write(app, bucket_name, entry, req),
        "GET" | "HEAD" => {
            let ts = ts_param(req)?;
            let bucket = app
                .store
                .bucket(bucket_name)
                .map_err(|e| app.unless_held(bucket_name, entry, ts, e))?;
            // `?q=<id>` reads the next record of an entry query, unless `ts` is given.
            if ts.is_none()
                && let Some(id_text) = req.head.query_param("q")
            {
                bucket.entry(entry)?;
                let id = parse_decimal(&id_text)
                    .ok_or_else(|| Error::unprocessable("'query' must be a number"))?;
                let scope = Scope::Entry(entry.to_string());
                let token = req.caller.as_ref().map(|c| c.name.as_str());
                let batch = app.queries.next_batch(
                    bucket_name,
                    &scope,
                    id,
                    method == "GET",
                    Reader::Single,
                    token,
                )?;
                let Some(mut batch) = batch else {
                    return Ok(Response::status(204)
                        .header("x-reduct-error", "No content")
                        .header("content-type", "application/json"));
                };
                let (_, meta) = batch.records.remove(0);
                let record = Record {
                    entry: entry.to_string(),
                    meta,
                    payload: batch.payloads.pop(),
                };
                return Ok(single_record(record, method, entry));
            }
            if ts.is_none()
                && let Some(not_held) = app.latest_not_held(bucket_name, entry)
            {
                return Err(not_held);
            }
            // An explicit `ts=0` is a timestamp like any other (404 unless written).
            let record = bucket
                .read(entry, ts)
                .map_err(|e| app.unless_held(bucket_name, entry, ts, e))?;
            Ok(single_record(record, method, entry))
        }
        "PATCH" => {
            app.writable("update record")?;
            user_bucket(bucket_name)?;
            let ts = required_ts(req)?;
            let bucket = app.store.bucket(bucket_name)?;
            bucket.update_labels(entry, ts, &labels_from_headers(&req.head))?;
            Ok(Response::ok())
        }
        "DELETE" if req.head.query.is_empty() => {
            app.writable("remove entry")?;
            user_bucket(bucket_name)?;
            if is_attachment_entry(entry) {
                return Err(entry_removal_refused(entry));
            }
            let bucket = app.store.bucket(bucket_name)?;
            bucket.remove_entry(entry)?;
            log::info!("entry '{bucket_name}/{entry}' removed");
            Ok(Response::ok())
        }
        "DELETE" => {
            app.writable("remove record")?;
            user_bucket(bucket_name)?;
            if is_attachment_entry(entry) {
                return Err(record_removal_refused(entry));
            }
            let ts = required_ts(req)?;
            app.store.bucket(bucket_name)?.remove_record(entry, ts)?;
            Ok(Response::ok())
        }
        _ => Err(no_route(method, &req.head.path)),
    }
}

fn write(app: &App, bucket_name: &str, entry: &str, req: &mut Request) -> Result<Response> {
    if forwarded_events::is_forwarded(bucket_name, entry) {
        return forwarded_events::write(app, entry, labels_from_headers(&req.head), req);
    }
    app.writable("write record")?;
    user_bucket(bucket_name)?;
    // Everything that can be checked without the body is checked first, so a refused
    // 100-continue upload is never sent at all.
    let bucket = app.store.bucket(bucket_name)?;
    validate_entry_name(entry)?;
    let ts = required_ts(req)?;
    // A chunked upload was decoded before the handler ran: its size is the body's.
    let size: u64 = match req.head.header("content-length") {
        _ if req.head.header("transfer-encoding").is_some() => req.body.remaining(),
        Some(v) => parse_decimal(v)
            .ok_or_else(|| Error::unprocessable(format!("content-length '{v}' is not a number")))?,
        None => return Err(Error::unprocessable("content-length header is required")),
    };
    app.store.admit_write(size)?;
    let meta = RecordMeta {
        timestamp: ts,
        labels: labels_from_headers(&req.head),
        content_type: req
            .head
            .header("content-type")
            .filter(|ct| !ct.is_empty())
            .unwrap_or(DEFAULT_CONTENT_TYPE)
            .to_string(),
        size,
    };
    bucket.make_room([&meta])?;
    let payload = req
        .body
        .read_all()
        .map_err(|e| body_error("reading the record body", e))?;
    bucket.write(entry, meta, &payload)?;
    Ok(Response::ok())
}

/// The body of `PUT /b/{bucket}/{entry}/rename`.
#[derive(serde::Deserialize)]
struct RenameRequest {
    new_name: String,
}

/// `PUT /b/{bucket}/{entry}/rename`: moves the entry and its descendants to `new_name`
/// (write permission, checked by the router).
pub fn rename(app: &App, bucket: &str, entry: &str, req: &mut Request) -> Result<Response> {
    app.writable("rename entry")?;
    user_bucket(bucket)?;
    let request: RenameRequest = crate::server::http::request::parse_json(req)?;
    validate_entry_name(entry)?;
    validate_entry_name(&request.new_name)?;
    app.store
        .bucket(bucket)?
        .rename_entry(entry, &request.new_name)?;
    Ok(Response::ok())
}
