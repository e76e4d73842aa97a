//! The server's shared state and request routing: authentication, the replica role, and
//! the dispatch of `/api/v1/...` paths to the handlers of each resource.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use crate::error::{Error, Result};
use crate::lifecycle::LifecycleRepository;
use crate::server::auth::{Access, Caller, TokenRepository, client_ip};
use crate::server::entry_batch::{self, EntryRoute};
use crate::server::http::{Response, ResponseBody};
use crate::server::metrics::{self, HttpMetrics};
use crate::server::queries::QueryRegistry;
use crate::server::request::{Request, no_route};
use crate::server::{buckets, io, lifecycles, percent, records, tokens};
use crate::storage::Store;

/// The role of this instance, as `RS_INSTANCE_ROLE` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstanceRole {
    /// A normal server (the default).
    Standalone,
    /// Primary of a pair (behaves as standalone here).
    Primary,
    /// Secondary of a pair (behaves as standalone here).
    Secondary,
    /// Read-only: every change is refused with 403 and no lifecycle policy runs.
    Replica,
}

impl InstanceRole {
    /// The API's name of the role.
    pub fn as_str(self) -> &'static str {
        match self {
            InstanceRole::Standalone => "STANDALONE",
            InstanceRole::Primary => "PRIMARY",
            InstanceRole::Secondary => "SECONDARY",
            InstanceRole::Replica => "REPLICA",
        }
    }
}

impl std::str::FromStr for InstanceRole {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_uppercase().as_str() {
            "STANDALONE" => Ok(InstanceRole::Standalone),
            "PRIMARY" => Ok(InstanceRole::Primary),
            "SECONDARY" => Ok(InstanceRole::Secondary),
            "REPLICA" => Ok(InstanceRole::Replica),
            _ => Err(format!(
                "instance role '{s}' is not one of STANDALONE, PRIMARY, SECONDARY, REPLICA"
            )),
        }
    }
}

/// Everything handlers share.
pub struct App {
    /// The storage engine.
    pub store: Arc<Store>,
    /// Lifecycle policies (read-only on a replica).
    pub lifecycles: LifecycleRepository,
    /// Open batch queries.
    pub queries: QueryRegistry,
    /// The tokens; `None` turns authentication off.
    pub tokens: Option<TokenRepository>,
    /// Buckets provisioned from the environment at start: they cannot be removed or
    /// changed over HTTP.
    pub provisioned_buckets: BTreeSet<String>,
    /// Request counts and latencies for `/metrics`.
    pub http_metrics: HttpMetrics,
    /// `/metrics` needs no token.
    pub metrics_public: bool,
    /// This instance's role.
    pub role: InstanceRole,
    /// Reported by `/info`.
    pub instance_name: String,
    /// When the server started (for `uptime`).
    pub started: Instant,
}

impl App {
    /// Refuses a change on a replica, naming it (`Cannot {action} in read-only mode`).
    pub fn writable(&self, action: &str) -> Result<()> {
        if self.role == InstanceRole::Replica {
            return Err(Error::forbidden(format!(
                "Cannot {action} in read-only mode"
            )));
        }
        Ok(())
    }

    /// The caller a request's `Authorization` names; `None` with authentication off.
    fn authenticate(&self, req: &Request) -> Result<Option<Caller>> {
        let Some(tokens) = &self.tokens else {
            return Ok(None);
        };
        let client = client_ip(
            req.peer_ip,
            req.head.header("forwarded"),
            req.head.header("x-forwarded-for"),
        );
        tokens
            .authenticate(req.head.header("authorization"), client)
            .map(Some)
    }

    /// Answers one request.
    pub fn handle(&self, req: &mut Request) -> Response {
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
        if path.split('?').next() == Some("/metrics") && matches!(method.as_str(), "GET" | "HEAD") {
            if !self.metrics_public {
                // Any valid token may read them, as `/info`.
                self.authenticate(req)?;
            }
            return Ok(Response::ok()
                .header("content-type", metrics::CONTENT_TYPE)
                .with_body(ResponseBody::Bytes(metrics::exposition(self)?.into_bytes())));
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
        let caller = self.authenticate(req)?;
        req.caller = caller.clone();
        // Permissions are checked before anything is looked up, as ReductStore does.
        let need = |access: Access| caller.as_ref().map_or(Ok(()), |c| c.check(access));
        let reads = matches!(method.as_str(), "GET" | "HEAD");
        let (first, tail) = rest.split_once('/').unwrap_or((rest, ""));
        match (method.as_str(), first, tail) {
            ("GET", "info", "") => buckets::server_info(self),
            ("GET", "list", "") => buckets::list(self, caller.as_ref()),
            ("GET", "me", "") => tokens::me(self, caller.as_ref()),
            (_, "tokens", _) => {
                need(Access::Full)?;
                tokens::tokens(self, &method, tail, req)
            }
            (_, "b", tail) if !tail.is_empty() => {
                // `/b/{bucket}/` names an entry (an empty one, refused as such), never
                // the bucket: a stray slash must not turn an entry call into a bucket one.
                match tail.split_once('/') {
                    None => {
                        let bucket = percent::decode(tail);
                        need(match method.as_str() {
                            "HEAD" => Access::Any,
                            "GET" => Access::Read(&bucket),
                            _ => Access::Full,
                        })?;
                        buckets::bucket(self, &method, &bucket, req)
                    }
                    Some((bucket, entry)) => {
                        let bucket = percent::decode(bucket);
                        let entry = percent::decode(entry);
                        let route = entry_batch::entry_route(&method, &entry);
                        // A query by POST reads; a REMOVE query asks for write itself.
                        let read_only =
                            reads || (method == "POST" && matches!(route, EntryRoute::Query(_)));
                        need(if read_only {
                            Access::Read(&bucket)
                        } else {
                            Access::Write(&bucket)
                        })?;
                        match route {
                            EntryRoute::Batch(name) => {
                                entry_batch::batch(self, &method, &bucket, name, req)
                            }
                            EntryRoute::Query(name) => {
                                entry_batch::query(self, &method, &bucket, name, req)
                            }
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
                    need(if matches!(op, "q" | "read") {
                        Access::Read(&bucket)
                    } else {
                        Access::Write(&bucket)
                    })?;
                    io::io(self, &method, &bucket, op, req)
                }
                None => Err(no_route(&method, &path)),
            },
            (_, "lifecycles", _) => {
                need(Access::Full)?;
                match tail {
                    "" if method == "GET" => lifecycles::list(self),
                    "" => Err(no_route(&method, &path)),
                    tail => lifecycles::lifecycle(self, &method, tail, req),
                }
            }
            _ => Err(no_route(&method, &path)),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::server::auth::constant_time_eq;

    #[test]
    fn secrets_compare_by_content_and_length() {
        assert!(constant_time_eq(b"s3cret", b"s3cret"));
        assert!(!constant_time_eq(b"s3cret", b"s3creT"));
        assert!(!constant_time_eq(b"s3cret", b"s3cret2"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(constant_time_eq(b"", b""));
    }
}
