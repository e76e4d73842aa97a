//! Lifecycle endpoints: `/lifecycles` (list) and `/lifecycles/{name}` (GET, POST, PUT,
//! DELETE), `/lifecycles/{name}/mode` (PATCH), and ours, `/lifecycles/{name}/run` (POST).

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::lifecycle::{LifecycleInfo, LifecycleMode, LifecycleSettings};
use crate::server::http::Response;
use crate::server::http::request::{Request, no_route, parse_json, read_body_within};

/// Largest body of a policy definition: its `when` (256 KiB) and entry patterns (256 of
/// 1 KiB) fit with room, and a `when` somewhat past its limit is still read to be refused
/// by name; anything larger is refused before it is parsed.
const MAX_POLICY_BODY: u64 = 2 << 20;
use crate::server::state::App;
use crate::wire::percent;

#[derive(Deserialize)]
struct ModeBody {
    mode: LifecycleMode,
}

/// The body of `GET /lifecycles`, serialised straight from the infos: a `json!` value
/// would sort every object's keys and cost most of the listing's time at 10,000 policies.
#[derive(Serialize)]
struct List {
    lifecycles: Vec<LifecycleInfo>,
}

/// The body of `GET /lifecycles/{name}`, fields in the API's order.
#[derive(Serialize)]
struct Full {
    info: LifecycleInfo,
    settings: LifecycleSettings,
}

/// `GET /lifecycles`.
pub fn list(app: &App) -> Result<Response> {
    Ok(Response::json(&List {
        lifecycles: app.lifecycles.list()?,
    }))
}

/// `/lifecycles/{name}[/mode|/run]`.
pub fn lifecycle(app: &App, method: &str, tail: &str, req: &mut Request) -> Result<Response> {
    let (name, action) = match tail.rsplit_once('/') {
        Some((name, action @ ("mode" | "run"))) => (percent::decode(name), action),
        _ => (percent::decode(tail), ""),
    };
    let repo = &app.lifecycles;
    match (method, action) {
        ("GET", "") => {
            let (info, settings) = repo.get(&name)?;
            Ok(Response::json(&Full { info, settings }))
        }
        ("POST", "") => {
            let settings = LifecycleSettings::from_json(&read_body_within(req, MAX_POLICY_BODY)?)?;
            repo.create(&name, settings)?;
            log::info!("lifecycle '{name}' created");
            Ok(Response::ok())
        }
        ("PUT", "") => {
            let settings = LifecycleSettings::from_json(&read_body_within(req, MAX_POLICY_BODY)?)?;
            repo.update(&name, settings)?;
            log::info!("lifecycle '{name}' updated");
            Ok(Response::ok())
        }
        ("DELETE", "") => {
            repo.remove(&name)?;
            log::info!("lifecycle '{name}' removed");
            Ok(Response::ok())
        }
        ("PATCH", "mode") => {
            let body: ModeBody = parse_json(req)?;
            repo.set_mode(&name, body.mode)?;
            log::info!("lifecycle '{name}' mode set to {:?}", body.mode);
            Ok(Response::ok())
        }
        ("POST", "run") => {
            repo.run_now(&name)?;
            log::info!("lifecycle '{name}' run requested");
            Ok(Response::ok())
        }
        _ => Err(no_route(method, &req.head.path)),
    }
}
