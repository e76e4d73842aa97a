//! The single-entry endpoints of batch protocol v1 and entry queries, which reduct-cli and
//! reduct-rs use for every copy and query: `/b/{bucket}/{entry}/batch` (POST write, PATCH
//! labels, DELETE records, GET/HEAD reads of a query) and `/b/{bucket}/{entry}/q` (POST a
//! QueryEntry body, GET/HEAD with parameters, DELETE a time range). Validation and wording
//! follow the v2 paths; per-record failures are `x-reduct-error-<ts>` headers on a 200.

use crate::error::{Error, Result};
use crate::replication::origin::{ORIGIN_HEADER, parse_origin};
use crate::server::api::io::{QueryRequest, QueryType, read_batch_response, run_query_request};
use crate::server::api::records::user_bucket;
use crate::server::auth::Access;
use crate::server::http::Response;
use crate::server::http::body::body_error;
use crate::server::http::head::RequestHead;
use crate::server::http::request::{Request, no_route, parse_decimal, parse_json};
use crate::server::protocol::batch_v1::{decode_v1_batch, decode_v1_timestamps, v1_error_header};
use crate::server::queries::{Reader, Scope};
use crate::server::state::App;
use crate::storage::Pending;
use crate::storage::attachments::{is_attachment_entry, record_removal_refused};
use crate::wire::record_header::encode_v1_record;

/// `/b/{bucket}/{entry}/batch`.
pub fn batch(
    app: &App,
    method: &str,
    bucket: &str,
    entry: &str,
    req: &mut Request,
) -> Result<Response> {
    match method {
        "POST" => write(app, bucket, entry, req),
        "PATCH" => update(app, bucket, entry, req),
        "DELETE" => remove(app, bucket, entry, req),
        "GET" | "HEAD" => read(app, bucket, entry, method == "GET", req),
        _ => Err(no_route(method, &req.head.path)),
    }
}

fn write(app: &App, bucket_name: &str, entry: &str, req: &mut Request) -> Result<Response> {
    app.writable("write records")?;
    user_bucket(bucket_name)?;
    let records = decode_v1_batch(&req.head)?;
    let total: u64 = records.iter().map(|r| r.size).sum();
    // A compressed body names its size in x-reduct-content-length.
    let declared = req
        .head
        .header("x-reduct-content-length")
        .and_then(parse_decimal)
        .unwrap_or_else(|| req.body.remaining());
    if declared != total {
        return Err(Error::unprocessable(
            "content-length header does not match the sum of the content-lengths in the headers",
        ));
    }
    // Even a missing bucket (or a full quota) fails per record, as in ReductStore.
    let bucket = app.store.bucket(bucket_name).and_then(|b| {
        app.store.admit_write(total)?;
        b.make_room(&records)?;
        Ok(b)
    });
    let origin = Origin::of(app, bucket_name, &req.head)?;
    let mut results = Vec::with_capacity(records.len());
    let mut pending = Pending::none();
    for meta in records {
        let payload = req
            .body
            .read_exact_vec(meta.size)
            .map_err(|e| body_error("reading the batch body", e))?;
        let ts = meta.timestamp;
        let result = match &bucket {
            _ if origin.came_home() => Ok(Pending::none()),
            Ok(b) => b.write_deferred_from(entry, meta, &payload, origin.forwarded()),
            Err(e) => Err(e.clone()),
        };
        results.push((ts, result.map(|p| pending.add(p))));
    }
    // One sync per file the batch touched, before any of it is acknowledged.
    pending.wait()?;
    Ok(with_record_errors(results))
}

/// A 200 naming each record that failed: `x-reduct-error-<ts>: <status>,<message>`.
fn with_record_errors(results: impl IntoIterator<Item = (u64, Result<()>)>) -> Response {
    results
        .into_iter()
        .fold(Response::ok(), |response, (ts, result)| match result {
            Ok(()) => response,
            Err(e) => {
                let (name, value) = v1_error_header(ts, &e);
                response.header(&name, value)
            }
        })
}

fn update(app: &App, bucket_name: &str, entry: &str, req: &mut Request) -> Result<Response> {
    app.writable("update records")?;
    user_bucket(bucket_name)?;
    let records = decode_v1_batch(&req.head)?;
    let bucket = app.store.bucket(bucket_name)?;
    bucket.entry(entry)?;
    let origin = Origin::of(app, bucket_name, &req.head)?;
    if origin.came_home() {
        return Ok(Response::ok());
    }
    // Non-empty values set, empty ones remove, other labels stay.
    let mut pending = Pending::none();
    let results: Vec<_> = records
        .into_iter()
        .map(|meta| {
            let (ts, labels, from) = (meta.timestamp, &meta.labels, origin.forwarded());
            let result = bucket.update_labels_deferred_from(entry, ts, labels, from);
            (meta.timestamp, result.map(|p| pending.add(p)))
        })
        .collect();
    pending.wait()?;
    Ok(with_record_errors(results))
}

fn remove(app: &App, bucket_name: &str, entry: &str, req: &mut Request) -> Result<Response> {
    app.writable("remove records")?;
    user_bucket(bucket_name)?;
    if is_attachment_entry(entry) {
        return Err(record_removal_refused(entry));
    }
    let stamps = decode_v1_timestamps(&req.head)?;
    let bucket = app.store.bucket(bucket_name)?;
    bucket.entry(entry)?;
    let mut pending = Pending::none();
    let results: Vec<_> = stamps
        .into_iter()
        .map(|ts| {
            let result = bucket.remove_record_deferred(entry, ts);
            (ts, result.map(|p| pending.add(p)))
        })
        .collect();
    pending.wait()?;
    Ok(with_record_errors(results))
}

fn read(
    app: &App,
    bucket_name: &str,
    entry: &str,
    with_body: bool,
    req: &mut Request,
) -> Result<Response> {
    let id_text = req
        .head
        .query_param("q")
        .ok_or_else(|| Error::unprocessable("'q' parameter is required for batched reads"))?;
    let id =
        parse_decimal(&id_text).ok_or_else(|| Error::unprocessable("'query' must be a number"))?;
    app.store.bucket(bucket_name)?.entry(entry)?;
    let scope = Scope::Entry(entry.to_string());
    let token = req.caller.as_ref().map(|c| c.name.as_str());
    let batch = app
        .queries
        .next_batch(bucket_name, &scope, id, with_body, Reader::Batch, token)?;
    let Some(batch) = batch else {
        return Ok(Response::status(204).header("x-reduct-error", "No content"));
    };
    let headers = batch
        .records
        .iter()
        .map(|(_, m)| encode_v1_record(m))
        .collect();
    Ok(read_batch_response(batch, headers, with_body))
}

/// `/b/{bucket}/{entry}/q`.
pub fn query(
    app: &App,
    method: &str,
    bucket_name: &str,
    entry: &str,
    req: &mut Request,
) -> Result<Response> {
    let q = match method {
        "POST" => {
            let mut q: QueryRequest = parse_json(req)?;
            // The entry comes from the path; `entries` in the body is ignored.
            q.entries = None;
            if q.query_type == QueryType::Query {
                // Permission before existence: a token that may not read the bucket
                // must not learn which entries it holds.
                if let Some(caller) = &req.caller {
                    caller.check(Access::Read(bucket_name))?;
                }
                app.store.bucket(bucket_name)?.entry(entry)?;
            }
            q
        }
        "GET" | "HEAD" => {
            let q = QueryRequest {
                query_type: QueryType::Query,
                start: micros_param(req, "start")?,
                stop: micros_param(req, "stop")?,
                ttl: req
                    .head
                    .query_param("ttl")
                    .map(|v| {
                        parse_decimal(&v).ok_or_else(|| {
                            Error::unprocessable("'ttl' must be in seconds as an unsigned integer")
                        })
                    })
                    .transpose()?,
                continuous: req
                    .head
                    .query_param("continuous")
                    .map(|v| match v.as_str() {
                        "true" => Ok(true),
                        "false" => Ok(false),
                        _ => Err(Error::unprocessable("'continue' must be a bool value")),
                    })
                    .transpose()?,
                ..Default::default()
            };
            app.store.bucket(bucket_name)?.entry(entry)?;
            q
        }
        "DELETE" => QueryRequest {
            query_type: QueryType::Remove,
            start: micros_param(req, "start")?,
            stop: micros_param(req, "stop")?,
            ..Default::default()
        },
        _ => return Err(no_route(method, &req.head.path)),
    };
    // 1.21.5 lets a REMOVE query by POST delete attachments outright; here they go by
    // tombstone only, whichever way the removal is asked for.
    if q.query_type == QueryType::Remove && is_attachment_entry(entry) {
        return Err(record_removal_refused(entry));
    }
    run_query_request(
        app,
        bucket_name,
        q,
        vec![entry.to_string()],
        Scope::Entry(entry.to_string()),
        (req.caller.clone(), app.client_of(&req.head, req.peer_ip)),
    )
}

/// A `start`/`stop` query parameter in µs.
fn micros_param(req: &Request, name: &str) -> Result<Option<u64>> {
    req.head
        .query_param(name)
        .map(|v| {
            parse_decimal(&v).ok_or_else(|| {
                Error::unprocessable(format!(
                    "'{name}' must be an unix timestamp in microseconds"
                ))
            })
        })
        .transpose()
}

/// Where the changes of a replicated batch began ([`ORIGIN_HEADER`]), as this server
/// takes them.
enum Origin<'a> {
    /// Not a replicated batch, or one from a server that does not say.
    Unsaid,
    /// They began in this very bucket and went round a cycle of replications: answered
    /// as delivered and not applied again, so the cycle stops here.
    Home,
    /// They began in another bucket (`<server id>/<bucket>`): applied, and sent on with
    /// it.
    Elsewhere(&'a str),
}

impl<'a> Origin<'a> {
    /// The origin a request names (422 for a malformed one).
    fn of(app: &App, bucket: &str, head: &'a RequestHead) -> Result<Origin<'a>> {
        let Some(value) = head.header(ORIGIN_HEADER) else {
            return Ok(Origin::Unsaid);
        };
        let (server, began_in) = parse_origin(value)?;
        Ok(
            if app.replications.origin() == Some(server) && began_in == bucket {
                Origin::Home
            } else {
                Origin::Elsewhere(value)
            },
        )
    }

    fn came_home(&self) -> bool {
        matches!(self, Origin::Home)
    }

    /// What the store's observers are told.
    fn forwarded(&self) -> Option<&'a str> {
        match self {
            Origin::Elsewhere(origin) => Some(origin),
            _ => None,
        }
    }
}
