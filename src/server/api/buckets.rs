//! Server and bucket endpoints: `/info`, `/list`, and `/b/{bucket}` (GET, HEAD, POST, PUT,
//! DELETE).

use serde_json::{Value, json};

use crate::error::Result;
use crate::server::auth::{Access, Caller};
use crate::server::http::Response;
use crate::server::http::request::{Request, no_route, read_body};
use crate::server::state::App;
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
    Ok(Response::json(&json!({
        "version": env!("CARGO_PKG_VERSION"),
        "instance_name": app.instance_name,
        "instance_role": app.role.as_str(),
        "bucket_count": buckets.len(),
        "usage": buckets.iter().map(|b| b.size).sum::<u64>(),
        "uptime": app.started.elapsed().as_secs(),
        "oldest_record": oldest,
        "latest_record": buckets.iter().map(|b| b.latest_record).max().unwrap_or(0),
        "defaults": {"bucket": app.bucket_defaults},
        "license": null,
    })))
}

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
        .map_err(|e| crate::Error::unprocessable(format!("Invalid JSON: {e}")))
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
            if name.starts_with('$') {
                // A quota there would erase lifecycle progress.
                return Err(crate::Error::forbidden(format!(
                    "Bucket '{name}' belongs to the system and its settings cannot be changed"
                )));
            }
            let bucket = app.store.bucket(name)?;
            if app.provisioned_buckets.contains(name) {
                return Err(crate::Error::conflict(format!(
                    "Can't change settings of provisioned bucket '{name}'"
                )));
            }
            let update = settings_update(req)?;
            bucket.set_settings(bucket.settings().merged(&update))?;
            Ok(Response::ok())
        }
        "DELETE" => {
            app.writable("remove bucket")?;
            if name.starts_with('$') {
                return Err(crate::Error::forbidden(format!(
                    "Bucket '{name}' belongs to the system and cannot be removed"
                )));
            }
            if app.provisioned_buckets.contains(name) {
                app.store.bucket(name)?;
                return Err(crate::Error::conflict(format!(
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
