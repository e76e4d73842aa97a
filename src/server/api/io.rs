//! The multi-entry batch protocol under `/io/{bucket}/`: `q` (create a query, or run a
//! remove-query), `read` (next batch of a query), `write` (a batch of records), `update`
//! (label changes) and `remove` (a list of records).

use std::collections::HashMap;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value as Json;

use crate::error::{Error, Result};
use crate::ros::ext::{RosStep, ros_step};
use crate::ros::query::RosQuery;
use crate::server::api::records::user_bucket;
use crate::server::auth::{Access, Caller};
use crate::server::http::body::body_error;
use crate::server::http::request::{Request, no_route, parse_decimal, parse_json};
use crate::server::http::response::{error_header, header_message};
use crate::server::http::{Response, ResponseBody};
use crate::server::protocol::batch::{
    BatchRecord, WriteBatch, decode_write_batch, encode_entries, encode_read_batch,
};
use crate::server::protocol::batch_remove::decode_remove_batch;
use crate::server::queries::{Batch, Reader, Scope};
use crate::server::state::App;
use crate::storage::condition::Condition;
use crate::storage::query::RecordSource;
use crate::storage::{Labels, Pending, QueryOptions};

/// Default time a query lives after its last read.
const DEFAULT_TTL_SECS: u64 = 60;

/// The body of `POST /io/{bucket}/q` (and of the v1 entry query, whose `entries` is
/// ignored).
#[derive(Debug, Default, Deserialize)]
pub struct QueryRequest {
    /// QUERY or REMOVE.
    pub query_type: QueryType,
    /// Entry patterns (none: every entry).
    pub entries: Option<Vec<String>>,
    /// Inclusive start, µs.
    pub start: Option<u64>,
    /// Exclusive stop, µs.
    pub stop: Option<u64>,
    /// Seconds the query lives after its last read.
    pub ttl: Option<u64>,
    /// Metadata without payloads.
    pub only_metadata: Option<bool>,
    /// Keep following new records.
    pub continuous: Option<bool>,
    /// The `when` condition, kept as text until its size is checked: a JSON tree takes
    /// many times its text.
    pub when: Option<Box<serde_json::value::RawValue>>,
    /// A missing label is an error instead of false.
    pub strict: Option<bool>,
    /// Extension parameters (this server has no extensions: refused).
    pub ext: Option<serde_json::Value>,
}

/// What a query request does.
#[derive(Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "UPPERCASE")]
pub enum QueryType {
    /// Open a query to read.
    #[default]
    Query,
    /// Remove what it selects.
    Remove,
}

/// `/io/{bucket}/{op}`.
pub fn io(app: &App, method: &str, bucket: &str, op: &str, req: &mut Request) -> Result<Response> {
    match (method, op) {
        ("POST", "q") => query(app, bucket, req),
        ("GET" | "HEAD", "read") => read(app, bucket, method == "GET", req),
        ("POST", "write") => write(app, bucket, req),
        ("DELETE", "remove") => remove(app, bucket, req),
        ("PATCH", "update") => update(app, bucket, req),
        _ => Err(no_route(method, &req.head.path)),
    }
}

fn query(app: &App, bucket_name: &str, req: &mut Request) -> Result<Response> {
    let q: QueryRequest = parse_json(req)?;
    let entries = q.entries.clone().unwrap_or_default();
    let who = (req.caller.clone(), app.client_of(&req.head, req.peer_ip));
    run_query_request(app, bucket_name, q, entries, Scope::Bucket, who)
}

/// The extension a query asks for (`#ext` in `when`, else the body's `ext`): `None` for
/// none, the step for `ros` (`ros/`), and for any other the refusal ReductStore without
/// that extension answers (its id is taken first, as there).
fn extension_of(
    app: &App,
    when: Option<&Condition>,
    body_ext: Option<&Json>,
) -> Result<Option<RosStep>> {
    let (ext, directive) = match when.and_then(|w| w.raw_directives().ext()) {
        Some(d) => (d.json.clone(), true),
        None => match body_ext.filter(|e| !e.is_null()) {
            Some(e) => (e.clone(), false),
            None => return Ok(None),
        },
    };
    let id = app.queries.allocate_id();
    let shape = || {
        Error::unprocessable(format!(
            "Extension parameters must be a JSON object or an array of JSON objects in query id={id}"
        ))
    };
    let ext = match ext {
        Json::String(text) if directive => serde_json::from_str::<Json>(&text).map_err(|e| {
            Error::unprocessable(format!(
                "Directive '#ext' must be a JSON object or an array of JSON objects in query id={id}: {e}"
            ))
        })?,
        other => other,
    };
    let steps: Vec<(String, Option<Json>)> = match &ext {
        Json::Object(map) => {
            if let Some(inner) = map.get("when") {
                // A step's own condition is parsed first: its syntax errors surface.
                Condition::parse(inner, true)?;
            }
            map.iter()
                .filter(|(k, _)| k.as_str() != "when")
                .map(|(k, v)| (k.clone(), Some(v.clone())))
                .collect()
        }
        Json::Array(items) if !items.is_empty() => {
            let mut steps = Vec::new();
            for item in items {
                let Json::Object(map) = item else {
                    return Err(shape());
                };
                match map.iter().find(|(k, _)| k.as_str() != "when") {
                    Some((k, v)) => steps.push((k.clone(), Some(v.clone()))),
                    None => steps.push((String::new(), None)),
                }
            }
            steps
        }
        _ => return Err(shape()),
    };
    let several = steps.len() > 1 || matches!(ext, Json::Array(_));
    if let (false, Some((name, Some(params)))) = (several, steps.first())
        && name == "ros"
    {
        let inner_when = match &ext {
            Json::Object(map) => map.get("when"),
            _ => None,
        };
        return ros_step(params, inner_when)
            .map(Some)
            .map_err(|e| Error::unprocessable(format!("{e} in query id={id}")));
    }
    match steps.first() {
        Some((name, Some(_))) if several => Err(Error::unprocessable(format!(
            "Unknown extension '{name}' in query id={id} at step 0"
        ))),
        Some((name, Some(_))) => Err(Error::unprocessable(format!(
            "Unknown extension '{name}' in query id={id}"
        ))),
        _ => Err(Error::unprocessable(format!(
            "Extension name is not found in query id={id}"
        ))),
    }
}

/// Opens a query (answers `{"id": N}`) or runs a remove-query (answers
/// `{"removed_records": N}`) over `entries` (patterns) of a bucket, for a caller (with
/// authentication on) from a client address. A query needs read access, a remove-query
/// write access only.
pub fn run_query_request(
    app: &App,
    bucket_name: &str,
    q: QueryRequest,
    entries: Vec<String>,
    scope: Scope,
    (caller, client): (Option<Caller>, Option<std::net::IpAddr>),
) -> Result<Response> {
    let caller = caller.as_ref();
    if let Some(caller) = caller {
        caller.check(match q.query_type {
            QueryType::Query => Access::Read(bucket_name),
            QueryType::Remove => Access::Write(bucket_name),
        })?;
    }
    let bucket = app.store.bucket(bucket_name)?;
    if q.continuous != Some(true) && q.start.zip(q.stop).is_some_and(|(a, b)| a > b) {
        return Err(Error::unprocessable("Start time must be before stop time"));
    }
    let strict = q.strict.unwrap_or(false);
    let when = q
        .when
        .as_ref()
        .filter(|w| w.get() != "null")
        .map(|w| Condition::parse_str(w.get(), strict))
        .transpose()?;
    match q.query_type {
        QueryType::Query => {
            let continuous = q.continuous == Some(true);
            let ext_source = when.clone();
            // Building the iterator checks the directive values, which 1.21.5 reports
            // before an extension is refused.
            // An extension reads the records' contents, even for a query of metadata:
            // the storage query is built with them once an extension is asked for.
            let wants_ext = ext_source
                .as_ref()
                .is_some_and(|w| w.raw_directives().ext().is_some())
                || q.ext.as_ref().is_some_and(|e| !e.is_null());
            let with_payload = !q.only_metadata.unwrap_or(false);
            let iter = bucket.query(&QueryOptions {
                entries,
                start: q.start,
                // A continuous query ignores `stop` (start may even be past it).
                stop: if continuous { None } else { q.stop },
                only_metadata: !with_payload && !wants_ext,
                when,
            })?;
            let iter = if continuous { iter.following() } else { iter };
            let iter: Box<dyn RecordSource> =
                match extension_of(app, ext_source.as_ref(), q.ext.as_ref())? {
                    None => Box::new(iter),
                    Some(step) => {
                        Box::new(RosQuery::new(iter, step.action, step.when, with_payload))
                    }
                };
            let ttl = Duration::from_secs(q.ttl.unwrap_or(DEFAULT_TTL_SECS));
            let owner = caller.map(|c| c.name.clone());
            let holder = crate::server::queries::holder_of(owner.as_deref(), client);
            let id = app
                .queries
                .register(bucket_name, scope, (owner, holder), iter, ttl)?;
            Ok(Response::json(&serde_json::json!({ "id": id })))
        }
        QueryType::Remove => {
            app.writable("remove records")?;
            user_bucket(bucket_name)?;
            // Any explicit field counts as a parameter (explicit nulls do not).
            let defaults = q.entries.is_none()
                && q.start.is_none()
                && q.stop.is_none()
                && when.is_none()
                && q.ttl.is_none()
                && q.only_metadata.is_none()
                && q.continuous.is_none()
                && q.strict.is_none()
                && q.ext.as_ref().is_none_or(Json::is_null);
            if defaults {
                return Err(Error::unprocessable(
                    "Define at least one query parameter to delete records",
                ));
            }
            let stats = bucket.remove_records(
                &entries,
                q.start.unwrap_or(0),
                q.stop.unwrap_or(u64::MAX),
                when.as_ref(),
            )?;
            log::info!(
                "remove-query on '{bucket_name}' removed {} record(s)",
                stats.records
            );
            Ok(Response::json(
                &serde_json::json!({ "removed_records": stats.records }),
            ))
        }
    }
}

fn read(app: &App, bucket_name: &str, with_body: bool, req: &mut Request) -> Result<Response> {
    let id_text = req.head.header("x-reduct-query-id").ok_or_else(|| {
        Error::unprocessable("x-reduct-query-id header is required for batched reads")
    })?;
    let id: u64 = parse_decimal(id_text).ok_or_else(|| {
        Error::unprocessable(format!("Invalid query id '{}'", id_text.escape_default()))
    })?;
    app.store.bucket(bucket_name)?;
    let token = req.caller.as_ref().map(|c| c.name.as_str());
    let batch = app.queries.next_batch(
        bucket_name,
        &Scope::Bucket,
        id,
        with_body,
        Reader::Io,
        token,
    )?;
    let Some(batch) = batch else {
        return Ok(Response::status(204));
    };
    let headers = encode_read_batch(&batch.entries, &batch.records);
    Ok(read_batch_response(batch, headers, with_body))
}

/// The answer to a batched read (either protocol version, whose `headers` describe the
/// records): the payloads (or, for HEAD, their length), `x-reduct-last`, the content type.
pub fn read_batch_response(
    batch: Batch,
    headers: Vec<(String, String)>,
    with_body: bool,
) -> Response {
    let total = batch.total_size();
    let mut response = Response::ok();
    response.headers = headers;
    if let Some(first) = batch.damaged.first() {
        // The records of the blocks that could be read, and which could not.
        let more = match batch.damaged.len() {
            1 => String::new(),
            n => format!(" (and {} more damaged block(s))", n - 1),
        };
        response = response.header(
            "x-reduct-error",
            error_header(&format!("{}{more}", first.message())),
        );
    }
    let body = if with_body {
        ResponseBody::Payloads(batch.payloads)
    } else {
        ResponseBody::Head(total)
    };
    response
        .header("x-reduct-last", if batch.last { "true" } else { "false" })
        .header("content-type", "application/octet-stream")
        .with_body(body)
}

fn write(app: &App, bucket_name: &str, req: &mut Request) -> Result<Response> {
    app.writable("write records")?;
    user_bucket(bucket_name)?;
    let bucket = app.store.bucket(bucket_name)?;
    let batch = decode_write_batch(&req.head)?;
    let total: u64 = batch.records.iter().map(|r| r.meta.size).sum();
    if total != req.body.remaining() {
        return Err(Error::unprocessable(format!(
            "content-length is {} but the records add up to {total} bytes",
            req.body.remaining()
        )));
    }
    app.store.admit_write(total)?;
    bucket.make_room(batch.records.iter().map(|r| &r.meta))?;
    let mut response = batch_response(&batch);
    let mut pending = Pending::none();
    for record in &batch.records {
        let payload = req
            .body
            .read_exact_vec(record.meta.size)
            .map_err(|e| body_error("reading the batch body", e))?;
        let entry = &batch.entries[record.entry];
        let result = bucket.write_deferred(entry, record.meta.clone(), &payload);
        response = with_record_error(response, record, collect(&mut pending, result));
    }
    // One sync per file the batch touched, before any of it is acknowledged.
    pending.wait()?;
    Ok(response)
}

/// Keeps what a successful change of a batch waits for, and its outcome.
fn collect(pending: &mut Pending, result: Result<Pending>) -> Result<()> {
    result.map(|p| pending.add(p))
}

fn remove(app: &App, bucket_name: &str, req: &mut Request) -> Result<Response> {
    app.writable("remove records")?;
    user_bucket(bucket_name)?;
    // Headers first: a malformed delete is refused before the bucket is looked up.
    let batch = decode_remove_batch(&req.head)?;
    let bucket = app.store.bucket(bucket_name)?;
    let mut response = Response::ok().header("x-reduct-entries", encode_entries(&batch.entries));
    // (Only a start the batch decoded reaches here: a timestamp.)
    if let Some(start) = req.head.header("x-reduct-start-ts") {
        response = response.header("x-reduct-start-ts", start);
    }
    let mut pending = Pending::none();
    for record in &batch.records {
        let entry = &batch.entries[record.entry];
        let result = bucket.remove_record_deferred(entry, record.timestamp);
        if let Err(e) = collect(&mut pending, result) {
            response = response.header(
                &format!("x-reduct-error-{}-{}", record.entry, record.delta),
                format!("{},{}", e.kind().http_status(), header_message(e.message())),
            );
        }
    }
    pending.wait()?;
    Ok(response)
}

/// `PATCH /io/{bucket}/update`: label updates of records of several entries. As in
/// ReductStore 1.21, each entry's headers are taken in timestamp order and their label
/// operations accumulate: a record's update is every operation of its entry so far
/// (`k=v` sets, `k=` removes, other labels stay), the order reduct-py's deltas rely on.
fn update(app: &App, bucket_name: &str, req: &mut Request) -> Result<Response> {
    app.writable("update records")?;
    user_bucket(bucket_name)?;
    let batch = decode_write_batch(&req.head)?;
    let bucket = app.store.bucket(bucket_name)?;
    let mut response = batch_response(&batch);
    let mut accumulated: HashMap<usize, Labels> = HashMap::new();
    let mut pending = Pending::none();
    for record in &batch.records {
        let changes = accumulated.entry(record.entry).or_default();
        changes.extend(record.ops.iter().cloned());
        let entry = &batch.entries[record.entry];
        let result = bucket.update_labels_deferred(entry, record.meta.timestamp, changes);
        response = with_record_error(response, record, collect(&mut pending, result));
    }
    pending.wait()?;
    Ok(response)
}

/// The answer to a batched change: it echoes the entries and the start timestamp, which
/// clients need to map the per-record error headers back to records.
fn batch_response(batch: &WriteBatch) -> Response {
    Response::ok()
        .header("x-reduct-entries", encode_entries(&batch.entries))
        .header("x-reduct-start-ts", batch.start.to_string())
}

/// Adds `x-reduct-error-E-D: <status>,<message>` when a record of a batch failed.
fn with_record_error(response: Response, record: &BatchRecord, result: Result<()>) -> Response {
    match result {
        Ok(()) => response,
        Err(e) => response.header(
            &format!("x-reduct-error-{}-{}", record.entry, record.delta),
            format!("{},{}", e.kind().http_status(), header_message(e.message())),
        ),
    }
}
