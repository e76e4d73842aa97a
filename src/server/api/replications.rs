//! Replication endpoints (`docs/replication.md`): `/replications` (list),
//! `/replications/{name}` (GET, POST, PUT, DELETE) and `/replications/{name}/mode` (PATCH).
//! Every route needs full access; on a replica the list is empty and the rest is refused.

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::replication::task::Diagnostics;
use crate::replication::{ReplicationInfo, ReplicationMode, ReplicationSettings};
use crate::server::http::Response;
use crate::server::http::request::{Request, no_route, parse_json, read_body};
use crate::server::state::App;
use crate::wire::percent;

#[derive(Deserialize)]
struct ModeBody {
    mode: ReplicationMode,
}

/// The body of `GET /replications`.
#[derive(Serialize)]
struct List {
    replications: Vec<ReplicationInfo>,
}

/// The body of `GET /replications/{name}`, fields in the API's order.
#[derive(Serialize)]
struct Full {
    info: ReplicationInfo,
    settings: ReplicationSettings,
    diagnostics: Diagnostics,
}

/// `GET /replications`.
pub fn list(app: &App) -> Result<Response> {
    Ok(Response::json(&List {
        replications: app.replications.list(),
    }))
}

/// `/replications/{name}[/mode]`.
pub fn replication(app: &App, method: &str, tail: &str, req: &mut Request) -> Result<Response> {
    let (name, action) = match tail.rsplit_once('/') {
        Some((name, "mode")) => (percent::decode(name), "mode"),
        _ => (percent::decode(tail), ""),
    };
    let repo = &app.replications;
    match (method, action) {
        ("GET", "") => {
            let (info, settings, diagnostics) = repo.get(&name)?;
            Ok(Response::json(&Full {
                info,
                settings,
                diagnostics,
            }))
        }
        ("POST", "") => {
            let settings = ReplicationSettings::from_json(&read_body(req)?)?;
            repo.create(&name, settings)?;
            log::info!("replication '{name}' created");
            Ok(Response::ok())
        }
        ("PUT", "") => {
            let settings = ReplicationSettings::from_json(&read_body(req)?)?;
            repo.update(&name, settings)?;
            log::info!("replication '{name}' updated");
            Ok(Response::ok())
        }
        ("DELETE", "") => {
            repo.remove(&name)?;
            log::info!("replication '{name}' removed");
            Ok(Response::ok())
        }
        ("PATCH", "mode") => {
            let body: ModeBody = parse_json(req)?;
            repo.set_mode(&name, body.mode)?;
            log::info!("replication '{name}' mode set to {:?}", body.mode);
            Ok(Response::ok())
        }
        _ => Err(no_route(method, &req.head.path)),
    }
}
