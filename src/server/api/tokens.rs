//! `/me` and `/tokens`: who is calling, and the management of tokens (full access; see
//! `server::auth`). With authentication off, `/me` names `AUTHENTICATION-DISABLED`, the list
//! is empty and every other call is 400, as in ReductStore.

use serde_json::json;

use crate::error::{Error, Result};
use crate::server::auth::{Caller, TokenRepository};
use crate::server::http::Response;
use crate::server::http::request::{Request, no_route, read_body};
use crate::server::state::App;

/// `GET /me`.
pub fn me(app: &App, caller: Option<&Caller>) -> Result<Response> {
    match (&app.tokens, caller) {
        (Some(tokens), Some(caller)) => Ok(Response::json(&tokens.get(&caller.name)?)),
        _ => Ok(Response::json(&json!({
            "name": "AUTHENTICATION-DISABLED",
            "value": "",
            "created_at": crate::timefmt::rfc3339(std::time::SystemTime::now()),
            "permissions": {"full_access": true, "read": [], "write": []},
            "is_provisioned": false,
            "expires_at": null,
            "ttl": null,
            "last_access": null,
            "ip_allowlist": [],
            "is_expired": false,
        }))),
    }
}

fn enabled(app: &App) -> Result<&TokenRepository> {
    app.tokens
        .as_ref()
        .ok_or_else(|| Error::bad_request("Authentication is disabled"))
}

/// `/tokens`, `/tokens/{name}`, `/tokens/{name}/rotate`.
pub fn tokens(app: &App, method: &str, tail: &str, req: &mut Request) -> Result<Response> {
    let name = crate::wire::percent::decode(tail);
    match (method, name.as_str()) {
        ("GET", "") => {
            let list = app.tokens.as_ref().map_or_else(Vec::new, |t| t.list());
            Ok(Response::json(&json!({ "tokens": list })))
        }
        ("GET", name) => Ok(Response::json(&enabled(app)?.get(name)?)),
        ("POST", name) if name.ends_with("/rotate") => {
            app.writable("rotate token")?;
            let name = name.trim_end_matches("/rotate");
            let (value, created_at) = enabled(app)?.rotate(name)?;
            log::info!("token '{name}' rotated");
            Ok(Response::json(
                &json!({"value": value, "created_at": created_at}),
            ))
        }
        ("POST", name) if !name.is_empty() => {
            app.writable("create token")?;
            let tokens = enabled(app)?;
            let body = read_body(req)?;
            let (value, created_at) = tokens.create(name, &body)?;
            log::info!("token '{name}' created");
            Ok(Response::json(
                &json!({"value": value, "created_at": created_at}),
            ))
        }
        ("DELETE", name) if !name.is_empty() => {
            app.writable("remove token")?;
            enabled(app)?.remove(name)?;
            log::info!("token '{name}' removed");
            Ok(Response::ok())
        }
        _ => Err(no_route(method, &req.head.path)),
    }
}
