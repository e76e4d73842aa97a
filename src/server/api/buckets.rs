//! Server and bucket endpoints: `/info`, `/list`, and `/b/{bucket}` (GET, HEAD, POST, PUT,
//! DELETE).

use serde_json::{Value, json};

use crate::error::Result;
use crate::server::auth::{Access, Caller};
use crate::server::http::Response;
use crate::server::http::request::{Request, no_route, read_body};
use crate::server::state::{App, InstanceRole};
use crate::storage::{BucketInfo, BucketSettingsUpdate};

fn bucket_info_json(app: &App, info: &BucketInfo) -> Value {
    json!({
        "name": info.name,
        "entry_count": info.entry_count,
        "size": info.size,
        "oldest_record": info.oldest_record,
        "latest_record": info.latest_record,
        // System buckets are provisioned by the server itself, as in ReductStore.
        "is_provisioned": info.name.starts_with('$') || app.provisioned_buckets.contains(&info.name),
        "status": "READY",
    })
}

/// `GET /info`.
pub fn server_info(app: &App) -> Result<Response> {
    let buckets = app.store.list_buckets()?;
    // As in ReductStore: an empty bucket counts as oldest record 0; u64::MAX only
    // without buckets.
    let oldest = buckets
        .iter()
        .map(|b| {
            if b.latest_record > 0 {
                b.oldest_record
            } else {
                0
            }
        })
        .min()
        .unwrap_or(u64::MAX);
    let mut info = json!({
        // The ReductStore version whose API this is: what the SDKs compare (reduct-py and
        // reduct-js want at least 1.10.0) and what tools gate features on. halflife's own
        // version has a field of its own, and the `server` header.
        "version": REDUCTSTORE_API_VERSION,
        "halflife_version": env!("CARGO_PKG_VERSION"),
        "instance_name": app.instance_name,
        "instance_role": app.role.as_str(),
        "bucket_count": buckets.len(),
        "usage": buckets.iter().map(|b| b.size).sum::<u64>(),
        "uptime": app.started.elapsed().as_secs(),
        "oldest_record": oldest,
        "latest_record": buckets.iter().map(|b| b.latest_record).max().unwrap_or(0),
        "defaults": {"bucket": app.bucket_defaults},
        "license": null,
    });
    // A PRIMARY or SECONDARY that answers holds the lease (a waiting one answers 503
    // from its standby, saying "waiting").
    if matches!(app.role, InstanceRole::Primary | InstanceRole::Secondary) {
        info["instance_state"] = json!("active");
    }
    Ok(Response::json(&info))
}

/// The ReductStore release whose API halflife answers as (`version` in `/info`).
pub const REDUCTSTORE_API_VERSION: &str = "1.21.5";

/// `GET /list`: the buckets the caller may read (all of them with authentication off).
pub fn list(app: &App, caller: Option<&Caller>) -> Result<Response> {
    let buckets: Vec<Value> = app
        .store
        .list_buckets()?
        .iter()
        .filter(|b| caller.is_none_or(|c| c.check(Access::Read(&b.name)).is_ok()))
        .map(|b| bucket_info_json(app, b))
        .collect();
    Ok(Response::json(&json!({ "buckets": buckets })))
}

/// Settings from a POST/PUT body: empty means "no change" (all defaults on create).
fn settings_update(req: &mut Request) -> Result<BucketSettingsUpdate> {
    if req.body.remaining() == 0 {
        return Ok(BucketSettingsUpdate::default());
    }
    let body = read_body(req)?;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(BucketSettingsUpdate::default());
    }
    serde_json::from_slice(&body)
        .map_err(|e| crate::error::Error::unprocessable(format!("Invalid JSON: {e}")))
}

/// `/b/{bucket}`.
pub fn bucket(app: &App, method: &str, name: &str, req: &mut Request) -> Result<Response> {
    match method {
        "GET" => {
            let bucket = app.store.bucket(name)?;
            let entries: Vec<Value> = bucket
                .entry_infos()?
                .into_iter()
                .map(|e| {
                    let mut v = json!(e);
                    v["status"] = json!("READY");
                    v
                })
                .collect();
            Ok(Response::json(&json!({
                "info": bucket_info_json(app, &bucket.info()?),
                "settings": bucket.settings(),
                "entries": entries,
            })))
        }
        "HEAD" => {
            app.store.bucket(name)?;
            Ok(Response::ok())
        }
        "POST" => {
            app.writable("create bucket")?;
            let update = settings_update(req)?;
            app.store
                .create_bucket(name, app.bucket_defaults.merged(&update))?;
            log::info!("bucket '{name}' created");
            Ok(Response::ok())
        }
        "PUT" => {
            app.writable("update bucket")?;
            let bucket = app.store.bucket(name)?;
            // `$system` is provisioned by the server itself, as in ReductStore.
            if name.starts_with('$') || app.provisioned_buckets.contains(name) {
                return Err(crate::error::Error::conflict(format!(
                    "Can't change settings of provisioned bucket '{name}'"
                )));
            }
            let update = settings_update(req)?;
            bucket.set_settings(bucket.settings().merged(&update))?;
            Ok(Response::ok())
        }
        "DELETE" => {
            app.writable("remove bucket")?;
            if name.starts_with('$') || app.provisioned_buckets.contains(name) {
                app.store.bucket(name)?;
                return Err(crate::error::Error::conflict(format!(
                    "Can't remove provisioned bucket '{name}'"
                )));
            }
            app.store.remove_bucket(name)?;
            app.queries.forget_bucket(name);
            log::info!("bucket '{name}' removed");
            Ok(Response::ok())
        }
        _ => Err(no_route(method, &req.head.path)),
    }
}

/// The body of `PUT /b/{bucket}/rename`.
#[derive(serde::Deserialize)]
struct RenameRequest {
    new_name: String,
}

/// A refusal in the words and shape of ReductStore's JSON extractor: plain text, no
/// `x-reduct-error`.
fn extractor_refusal(status: u16, text: String) -> Response {
    Response::status(status)
        .header("content-type", "text/plain; charset=utf-8")
        .with_body(crate::server::http::ResponseBody::Bytes(text.into_bytes()))
}

/// `PUT /b/{bucket}/rename` (full access, checked by the router): renames the bucket;
/// token permission lists and lifecycle policies naming it follow, and the answer's
/// `x-halflife-lifecycles-renamed` header lists the policies that did.
pub fn rename(app: &App, name: &str, req: &mut Request) -> Result<Response> {
    let json = req
        .head
        .header("content-type")
        .and_then(|ct| ct.split(';').next())
        .is_some_and(|ct| ct.trim().eq_ignore_ascii_case("application/json"));
    if !json {
        return Ok(extractor_refusal(
            415,
            "Expected request with `Content-Type: application/json`".into(),
        ));
    }
    let body = read_body(req)?;
    let request: RenameRequest = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(e) => {
            return Ok(extractor_refusal(
                422,
                format!("Failed to deserialize the JSON body into the target type: {e}"),
            ));
        }
    };
    app.writable("rename bucket")?;
    let new = request.new_name;
    if name.starts_with('$') || app.provisioned_buckets.contains(name) {
        app.store.bucket(name)?;
        return Err(crate::error::Error::conflict(format!(
            "Can't rename provisioned bucket '{name}'"
        )));
    }
    crate::storage::names::validate_bucket_name(&new)?;
    let followed = crate::server::bucket_rename::rename_bucket(app, name, &new)?;
    Ok(Response::ok().header(
        "x-halflife-lifecycles-renamed",
        followed.lifecycles.join(","),
    ))
}
