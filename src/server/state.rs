//! The state every handler shares ([`App`]) and the instance role. Routing lives in
//! `api/router.rs`; handlers depend on this file, never on the router.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use crate::error::{Error, Result};
use crate::lifecycle::LifecycleRepository;
use crate::server::auth::{TokenRepository, TrustedProxies, client_ip};
use crate::server::http::head::RequestHead;
use crate::server::metrics::HttpMetrics;
use crate::server::queries::QueryRegistry;
use crate::storage::Store;

/// The role of this instance, as `RS_INSTANCE_ROLE` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstanceRole {
    /// A normal server (the default).
    Standalone,
    /// Primary of a pair on one data directory: serves while it holds the directory's
    /// lease, waits (503) while the other does; takes a directory nobody holds at once.
    Primary,
    /// Secondary of a pair: waits until the lease runs out, then takes over.
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
    /// Replication tasks (none and read-only on a replica).
    pub replications: std::sync::Arc<crate::replication::Replications>,
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
    /// The web console is served at `/ui/`.
    pub web_console: bool,
    /// Proxies whose `Forwarded` / `X-Forwarded-For` headers name the client.
    pub trusted_proxies: TrustedProxies,
    /// Origins a browser may call the API from.
    pub cors: crate::server::cors::Cors,
    /// The settings of a new bucket (`RS_DEFAULTS_BUCKET_*` over the built-in ones).
    pub bucket_defaults: crate::storage::BucketSettings,
    /// This instance's role.
    pub role: InstanceRole,
    /// Where clients reach this server (`RS_PUBLIC_URL`, else the listening address),
    /// ending in `/`: the base of query links.
    pub public_url: String,
    /// Where the API lives (`RS_API_BASE_PATH`): `/` or `/<path>/`, so the API is under
    /// `<base>api/v1/`.
    pub base_path: String,
    /// Reported by `/info`.
    pub instance_name: String,
    /// The `$system` trail (audit, usage, logs); `None` when system events are off.
    pub trail: Option<Arc<crate::server::trail::Trail>>,
    /// When the server started (for `uptime`).
    pub started: Instant,
    /// A replica's looks at its writer's directory so far (`/metrics`).
    pub replica_updates: std::sync::atomic::AtomicU64,
    /// A replica that follows a remote (`--follow-remote`): its copy of the manifests.
    pub mirror: Option<Arc<crate::storage::remote::mirror::Mirror>>,
}

impl App {
    /// A record read's "not found", unless this replica follows a remote and cannot know:
    /// it holds only the records a manifest says it does (those before the entry's
    /// `complete_until`), so for anything else it answers 503 naming what it holds
    /// instead of a 404 that may be wrong.
    pub fn unless_held(&self, bucket: &str, entry: &str, ts: Option<u64>, e: Error) -> Error {
        let Some(mirror) = &self.mirror else {
            return e;
        };
        if e.kind() != crate::error::ErrorKind::NotFound {
            return e;
        }
        let held = mirror.held_until(bucket, entry);
        match (ts, held) {
            (Some(ts), Some(until)) if ts < until => e,
            (None, Some(u64::MAX)) => e,
            _ => {
                let holds = match held {
                    Some(u64::MAX) => format!("every record of {bucket}/{entry}"),
                    Some(until) => format!("the records of {bucket}/{entry} before {until}"),
                    None => format!("no record of {bucket}/{entry}"),
                };
                Error::new(
                    crate::error::ErrorKind::Unavailable,
                    format!(
                        "this replica follows remote '{}' and holds only tiered records ({holds}): ask the instance that writes",
                        mirror.remote().name
                    ),
                )
            }
        }
    }

    /// On a replica that follows a remote, the 503 of a read of an entry's latest record
    /// unless it holds every record of the entry (the latest may be on the writer only).
    pub fn latest_not_held(&self, bucket: &str, entry: &str) -> Option<Error> {
        let mirror = self.mirror.as_ref()?;
        (mirror.held_until(bucket, entry) != Some(u64::MAX)).then(|| {
            let missing = Error::not_found(format!("the latest record of {bucket}/{entry}"));
            self.unless_held(bucket, entry, None, missing)
        })
    }

    /// Refuses a change on a replica, naming it (`Cannot {action} in read-only mode`).
    pub fn writable(&self, action: &str) -> Result<()> {
        if self.role == InstanceRole::Replica {
            return Err(Error::forbidden(format!(
                "Cannot {action} in read-only mode"
            )));
        }
        Ok(())
    }

    /// The client a request comes from: its connection's `peer`, or behind a trusted
    /// proxy the nearest untrusted hop its forwarding headers name.
    pub fn client_of(
        &self,
        head: &RequestHead,
        peer: Option<std::net::IpAddr>,
    ) -> Option<std::net::IpAddr> {
        client_ip(
            peer,
            head.header("forwarded"),
            head.header("x-forwarded-for"),
            &self.trusted_proxies,
        )
    }
}
