//! Routing: authenticates a request, checks its permission, and hands `/api/v1/...`
//! paths to the handler of each resource. The transport reaches it through the
//! [`Service`] trait, so `http/` never names a handler and no handler names the router.

use std::net::IpAddr;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::server::api::{
    buckets, entry_batch, io, lifecycles, links, records, replications, storage, tokens,
};
use crate::server::auth::{Access, Caller};
use crate::server::browser_guard;
use crate::server::cors::Cors;
use crate::server::http::head::RequestHead;
use crate::server::http::request::{Request, no_route};
use crate::server::http::{Response, ResponseBody, Service};
use crate::server::metrics;
use crate::server::protocol::routes::{EntryRoute, allowed_methods, entry_route};
use crate::server::state::App;
use crate::storage::attachments::{entry_removal_refused, is_attachment_entry};
use crate::storage::fence;
use crate::wire::percent;

impl Service for App {
    fn handle(&self, req: &mut Request) -> Response {
        let started = std::time::Instant::now();
        let bare = req.head.path.split('?').next().unwrap_or_default();
        let api = bare.starts_with("/api/v1/");
        let link = bare.starts_with("/api/v1/links/");
        let change = matches!(
            req.head.method.as_str(),
            "POST" | "PUT" | "PATCH" | "DELETE"
        );
        // A PRIMARY or SECONDARY answers only while it holds the data directory's lease:
        // asked before a request and again before a change is acknowledged, since the
        // lease may have run out while the change ran (a pause past its TTL).
        let alive = bare == "/api/v1/alive";
        let fenced = || {
            (fence::installed() && !alive)
                .then(fence::check)
                .and_then(Result::err)
        };
        let mut response = match (browser_guard::refuse_active_load(&req.head, api), fenced()) {
            (Some(refusal), _) => refusal,
            (None, Some(lost)) => Response::error(503, lost.message()),
            (None, None) => self.answer(req),
        };
        if change && let Some(lost) = fenced() {
            response = Response::error(503, lost.message());
        }
        if api {
            response = browser_guard::harden(response, link, change);
        }
        self.cors.apply(req.head.header("origin"), &mut response);
        self.audit(
            &req.head,
            req.peer_ip,
            req.caller.as_ref(),
            &response,
            started,
        );
        response
    }

    /// The token and the route's permission, on the head alone: a request refused here
    /// has none of its body read.
    fn admit(&self, head: &RequestHead, peer: Option<IpAddr>) -> Option<Response> {
        if !needs_token(self, head) {
            return None;
        }
        let started = std::time::Instant::now();
        let path = head.path.split('?').next().unwrap_or_default();
        let caller = authenticate_head(self, head, peer);
        let admitted = caller.as_ref().map_err(Clone::clone).and_then(|caller| {
            match (caller, path.strip_prefix("/api/v1/")) {
                (Some(caller), Some(rest)) => caller.check(route_need(&head.method, rest).access()),
                _ => Ok(()),
            }
        });
        let e = admitted.err()?;
        let mut refusal = Response::error(e.kind().http_status(), e.message());
        self.cors.apply(head.header("origin"), &mut refusal);
        let caller = caller.ok().flatten();
        self.audit(head, peer, caller.as_ref(), &refusal, started);
        Some(refusal)
    }

    fn observe(&self, method: &str, path: &str, status: u16, elapsed: Duration) {
        self.http_metrics.observe(method, path, status, elapsed);
    }

    fn decorate_refusal(&self, head: &RequestHead, response: &mut Response) {
        self.cors.apply(head.header("origin"), response);
    }

    fn rebase(&self, head: &mut RequestHead) -> Option<Response> {
        if self.base_path == "/" {
            return None;
        }
        let bare = head.path.split('?').next().unwrap_or_default();
        // `/base` alone is `/base/`.
        let inside = head
            .path
            .strip_prefix(&self.base_path[..self.base_path.len() - 1]);
        match inside {
            Some(rest) if rest.is_empty() || rest.starts_with(['/', '?']) => {
                head.path = if rest.starts_with('/') {
                    rest.to_string()
                } else {
                    format!("/{rest}")
                };
                None
            }
            _ => {
                let message = format!(
                    "'{}' is outside this server's base path {} (RS_API_BASE_PATH)",
                    bare.escape_default(),
                    self.base_path
                );
                let mut refusal = Response::error(404, &message);
                self.cors.apply(head.header("origin"), &mut refusal);
                Some(refusal)
            }
        }
    }
}

/// The caller a request head's `Authorization` names; `None` with authentication off.
fn authenticate_head(
    app: &App,
    head: &RequestHead,
    peer: Option<IpAddr>,
) -> Result<Option<Caller>> {
    let Some(tokens) = &app.tokens else {
        return Ok(None);
    };
    let client = app.client_of(head, peer);
    tokens
        .authenticate(head.header("authorization"), client)
        .map(Some)
}

/// Whether the route of `head` needs a token: everything under `/api/v1/` but `alive`
/// and `ready`, and `/metrics` unless it is public.
fn needs_token(app: &App, head: &RequestHead) -> bool {
    let path = head.path.split('?').next().unwrap_or_default();
    let reads = matches!(head.method.as_str(), "GET" | "HEAD");
    if head.method == "OPTIONS" {
        // A CORS preflight: browsers send it without credentials.
        return false;
    }
    match path {
        "/metrics" if reads => !app.metrics_public,
        "/api/v1/alive" | "/api/v1/ready" if reads => false,
        _ => app.tokens.is_some() && path.starts_with("/api/v1/"),
    }
}

/// The permission a route needs, decided from its method and path alone (`rest`: the
/// path after `/api/v1/`), so that it is checked on the head before any body byte is read,
/// and before anything is looked up, as ReductStore does.
enum Need {
    Any,
    Read(String),
    Write(String),
    Full,
}

impl Need {
    fn access(&self) -> Access<'_> {
        match self {
            Need::Any => Access::Any,
            Need::Read(bucket) => Access::Read(bucket),
            Need::Write(bucket) => Access::Write(bucket),
            Need::Full => Access::Full,
        }
    }
}

/// The entry of a `b/{bucket}/{entry}` path when it is an attachment entry.
fn attachment_entry_path(rest: &str) -> Option<String> {
    let (_, entry) = rest.strip_prefix("b/")?.split_once('/')?;
    let entry = percent::decode(entry);
    is_attachment_entry(&entry).then_some(entry)
}

fn route_need(method: &str, rest: &str) -> Need {
    let reads = matches!(method, "GET" | "HEAD");
    let (first, tail) = rest.split_once('/').unwrap_or((rest, ""));
    match (first, tail) {
        ("tokens", _) | ("lifecycles", _) | ("replications", _) => Need::Full,
        ("storage", tail) => {
            let bucket = tail.split_once('/').map_or(tail, |(b, _)| b);
            Need::Read(percent::decode(bucket))
        }
        // `/b/{bucket}/` names an entry (an empty one, refused as such), never the bucket.
        ("b", tail) if !tail.is_empty() => match tail.split_once('/') {
            // Whether a bucket exists is for those who may read it.
            None if reads => Need::Read(percent::decode(tail)),
            None => Need::Full,
            // The bucket rename changes what tokens may do: full access.
            Some((_, "rename")) if method == "PUT" => Need::Full,
            Some((bucket, entry)) => {
                let bucket = percent::decode(bucket);
                let entry = percent::decode(entry);
                // A query by POST needs read (QUERY) or write only (REMOVE): the handler
                // checks which, once it knows the type.
                if method == "POST" && matches!(entry_route(method, &entry), EntryRoute::Query(_)) {
                    Need::Any
                } else if reads {
                    Need::Read(bucket)
                } else {
                    Need::Write(bucket)
                }
            }
        },
        ("io", tail) => match tail.split_once('/') {
            // QUERY needs read, REMOVE write only: checked by the handler.
            Some((_, "q")) => Need::Any,
            Some((bucket, "read")) => Need::Read(percent::decode(bucket)),
            Some((bucket, _)) => Need::Write(percent::decode(bucket)),
            None => Need::Any,
        },
        _ => Need::Any,
    }
}

impl App {
    /// Hands an answered request to the trail (when it runs). Audited, as ReductStore
    /// audits: calls naming a valid token, or refused with 401.
    fn audit(
        &self,
        head: &RequestHead,
        peer: Option<IpAddr>,
        caller: Option<&Caller>,
        response: &Response,
        started: std::time::Instant,
    ) {
        let Some(trail) = &self.trail else {
            return;
        };
        let token = match (caller, &self.tokens) {
            (Some(caller), _) => Some(caller.name.as_str()),
            (None, None) if head.header("authorization").is_some() => {
                Some(crate::server::trail::AUTH_DISABLED)
            }
            _ if response.status == 401 => Some(crate::server::trail::UNAUTHORIZED),
            _ => None,
        };
        let client = token.and_then(|_| self.client_of(head, peer));
        trail.observe(head, response, token, client, started.elapsed());
    }
}

/// Routing as methods of the shared state, private to this file.
trait Route {
    fn authenticate(&self, req: &Request) -> Result<Option<Caller>>;
    fn answer(&self, req: &mut Request) -> Response;
    fn route(&self, req: &mut Request) -> Result<Response>;
}

impl Route for App {
    /// The caller a request's `Authorization` names; `None` with authentication off.
    fn authenticate(&self, req: &Request) -> Result<Option<Caller>> {
        authenticate_head(self, &req.head, req.peer_ip)
    }

    /// Answers one request.
    fn answer(&self, req: &mut Request) -> Response {
        let result = self.route(req);
        match result {
            Ok(response) => response,
            Err(e) => {
                let status = e.kind().http_status();
                if status >= 500 {
                    log::error!("{} {}: {e}", req.head.method, req.head.path);
                } else {
                    log::debug!("{} {}: {status} {e}", req.head.method, req.head.path);
                }
                Response::error(status, e.message())
            }
        }
    }

    fn route(&self, req: &mut Request) -> Result<Response> {
        let path = req.head.path.clone();
        let method = req.head.method.clone();
        let bare_path = path.split('?').next().unwrap_or_default();
        let reads = matches!(method.as_str(), "GET" | "HEAD");
        let api_rest = bare_path.strip_prefix("/api/v1/");
        let allowed = match (api_rest, bare_path) {
            (Some(rest), _) => allowed_methods(rest),
            (None, "/metrics") => Some("GET,HEAD"),
            (None, _) => None,
        };
        if method == "OPTIONS" {
            return Ok(Cors::preflight(allowed));
        }
        // A method the path does not answer is 405 with the ones it does, as
        // ReductStore's router says; any path but a route's answers GET and HEAD (404).
        let allowed_here = allowed.unwrap_or("GET,HEAD");
        if !allowed_here.split(',').any(|m| m == method) {
            let message = format!(
                "Method {} is not allowed for {}; it answers {allowed_here}",
                method.escape_default(),
                bare_path.escape_default()
            );
            return Ok(Response::error(405, &message).header("allow", allowed_here));
        }
        if allowed.is_none() && api_rest.is_some() {
            // No route: as ReductStore's router, before any token.
            return Err(no_route(&method, &path));
        }
        if bare_path == "/" && reads && self.web_console {
            // Where ReductStore serves its web console.
            let console = format!("{}ui/", self.base_path);
            return Ok(Response::status(302).header("location", console));
        }
        if let Some(rest) = bare_path.strip_prefix("/ui/")
            && reads
            && self.web_console
        {
            return Ok(crate::server::console::answer(rest, &self.base_path));
        }
        if bare_path == "/ui" && reads && self.web_console {
            let console = format!("{}ui/", self.base_path);
            return Ok(Response::status(302).header("location", console));
        }
        if bare_path == "/metrics" && reads {
            // Any valid token may read them, as `/info`, but sees only the buckets it may
            // read (and policies only with full access).
            let caller = if self.metrics_public {
                None
            } else {
                self.authenticate(req)?
            };
            let text = super::metrics::exposition(self, caller.as_ref())?;
            return Ok(Response::ok()
                .header("content-type", metrics::CONTENT_TYPE)
                .with_body(ResponseBody::Bytes(text.into_bytes())));
        }
        let Some(rest) = path.strip_prefix("/api/v1/") else {
            return Err(Error::not_found(format!(
                "'{}' is not an API path (the API lives under /api/v1)",
                path.escape_default()
            )));
        };
        if matches!(rest, "alive" | "ready") && matches!(method.as_str(), "GET" | "HEAD") {
            return Ok(Response::ok());
        }
        if rest.starts_with("links/") && reads {
            // A query link is its own credential: no token (nor audit) for opening one.
            return links::open_link(self, &method, req);
        }
        if method == "DELETE"
            && req.head.query.is_empty()
            && let Some(entry) = attachment_entry_path(rest)
        {
            // As 1.21.5: refused before any token is looked at.
            return Err(entry_removal_refused(&entry));
        }
        let caller = self.authenticate(req)?;
        req.caller = caller.clone();
        if let Some(caller) = &caller {
            // (`admit` checked it on the head already; this serves requests that did
            // not pass through it.)
            caller.check(route_need(&method, rest).access())?;
        }
        let (first, tail) = rest.split_once('/').unwrap_or((rest, ""));
        // Every GET route answers HEAD alike (the transport drops the body); the record
        // and bucket routes tell the two apart themselves.
        let get_or = if method == "HEAD" {
            "GET"
        } else {
            method.as_str()
        };
        match (method.as_str(), first, tail) {
            ("GET" | "HEAD", "info", "") => buckets::server_info(self),
            ("GET" | "HEAD", "list", "") => buckets::list(self, caller.as_ref()),
            ("GET" | "HEAD", "me", "") => tokens::me(self, caller.as_ref()),
            ("GET" | "HEAD", "storage", tail) if !tail.is_empty() => match tail.split_once('/') {
                None => storage::storage(self, &percent::decode(tail), caller.as_ref()),
                Some((bucket, "histogram")) => {
                    storage::histogram(self, &percent::decode(bucket), req)
                }
                Some(_) => Err(no_route(&method, &req.head.path)),
            },
            ("POST", "links", file) if !file.is_empty() => {
                links::create(self, &percent::decode(file), req)
            }
            (_, "tokens", _) => tokens::tokens(self, get_or, tail, req),
            (_, "b", tail) if !tail.is_empty() => {
                // `/b/{bucket}/` names an entry (an empty one, refused as such), never
                // the bucket: a stray slash must not turn an entry call into a bucket one.
                match tail.split_once('/') {
                    None => {
                        let bucket = percent::decode(tail);
                        buckets::bucket(self, &method, &bucket, req)
                    }
                    Some((bucket, "rename")) if method == "PUT" => {
                        buckets::rename(self, &percent::decode(bucket), req)
                    }
                    Some((bucket, storage::STORAGE))
                        if reads && storage::is_report_path(self, &percent::decode(bucket)) =>
                    {
                        storage::storage(self, &percent::decode(bucket), caller.as_ref())
                    }
                    Some((bucket, entry)) => {
                        let bucket = percent::decode(bucket);
                        let entry = percent::decode(entry);
                        match entry_route(&method, &entry) {
                            EntryRoute::Batch(name) => {
                                entry_batch::batch(self, &method, &bucket, name, req)
                            }
                            EntryRoute::Query(name) => {
                                entry_batch::query(self, &method, &bucket, name, req)
                            }
                            EntryRoute::Rename(name) => records::rename(self, &bucket, name, req),
                            EntryRoute::Record => {
                                records::record(self, &method, &bucket, &entry, req)
                            }
                        }
                    }
                }
            }
            (_, "io", tail) => match tail.split_once('/') {
                Some((bucket, op)) => {
                    let bucket = percent::decode(bucket);
                    io::io(self, &method, &bucket, op, req)
                }
                None => Err(no_route(&method, &path)),
            },
            (_, "lifecycles", _) => match tail {
                "" if get_or == "GET" => lifecycles::list(self),
                "" => Err(no_route(&method, &path)),
                tail => lifecycles::lifecycle(self, get_or, tail, req),
            },
            (_, "replications", _) => match tail {
                "" if get_or == "GET" => replications::list(self),
                "" => Err(no_route(&method, &path)),
                tail => replications::replication(self, get_or, tail, req),
            },
            _ => Err(no_route(&method, &path)),
        }
    }
}
