//! The server's shared state and request routing: authentication, the replica role, and
//! the dispatch of `/api/v1/...` paths to the handlers of each resource.

use std::sync::Arc;
use std::time::Instant;

use crate::error::{Error, Result};
use crate::lifecycle::LifecycleRepository;
use crate::server::entry_batch::{self, EntryRoute};
use crate::server::http::Response;
use crate::server::queries::QueryRegistry;
use crate::server::request::{Request, no_route};
use crate::server::{buckets, io, lifecycles, percent, records};
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
    /// The API token; `None` turns authentication off.
    pub token: Option<String>,
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

    fn authenticate(&self, req: &Request) -> Result<()> {
        let Some(token) = &self.token else {
            return Ok(());
        };
        let given = req
            .head
            .header("authorization")
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or_else(|| {
                Error::new(
                    crate::ErrorKind::Unauthorized,
                    "No bearer token in request header",
                )
            })?;
        if !constant_time_eq(given.trim().as_bytes(), token.as_bytes()) {
            return Err(Error::new(crate::ErrorKind::Unauthorized, "Invalid token"));
        }
        Ok(())
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
        let Some(rest) = path.strip_prefix("/api/v1/") else {
            return Err(Error::not_found(format!(
                "'{}' is not an API path (the API lives under /api/v1)",
                path.escape_default()
            )));
        };
        if rest == "alive" && matches!(method.as_str(), "GET" | "HEAD") {
            return Ok(Response::ok());
        }
        self.authenticate(req)?;
        let (first, tail) = rest.split_once('/').unwrap_or((rest, ""));
        match (method.as_str(), first, tail) {
            ("GET", "info", "") => buckets::server_info(self),
            ("GET", "list", "") => buckets::list(self),
            (_, "b", tail) if !tail.is_empty() => {
                // `/b/{bucket}/` names an entry (an empty one, refused as such), never
                // the bucket: a stray slash must not turn an entry call into a bucket one.
                match tail.split_once('/') {
                    None => buckets::bucket(self, &method, &percent::decode(tail), req),
                    Some((bucket, entry)) => {
                        let bucket = percent::decode(bucket);
                        let entry = percent::decode(entry);
                        match entry_batch::entry_route(&method, &entry) {
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
                Some((bucket, op)) => io::io(self, &method, &percent::decode(bucket), op, req),
                None => Err(no_route(&method, &path)),
            },
            ("GET", "lifecycles", "") => lifecycles::list(self),
            (_, "lifecycles", tail) if !tail.is_empty() => {
                lifecycles::lifecycle(self, &method, tail, req)
            }
            _ => Err(no_route(&method, &path)),
        }
    }
}

/// Compares two secrets in time that depends only on their lengths, not on where they
/// first differ, so a client cannot find a token byte by byte from response times.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for i in 0..a.len().max(b.len()) {
        diff |= a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0);
    }
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn secrets_compare_by_content_and_length() {
        assert!(constant_time_eq(b"s3cret", b"s3cret"));
        assert!(!constant_time_eq(b"s3cret", b"s3creT"));
        assert!(!constant_time_eq(b"s3cret", b"s3cret2"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(constant_time_eq(b"", b""));
    }
}
