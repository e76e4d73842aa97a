//! The blocking HTTP server: the ReductStore API subset over the storage engine and the
//! lifecycle repository.
//!
//! One poller thread (`reactor`) accepts connections and keeps every connection between
//! requests, reading request heads as they arrive; a connection with a whole head goes
//! over a channel to one of `http_threads` handler threads, which serves that request
//! (writing payloads straight from the mapped blocks) and gives the connection back. A
//! body still arriving is admitted on the head, then gathered by the poller too, and the
//! request handed over again once it is complete (a body too large to gather is streamed
//! by at most half the threads). Idle and slow clients cost no thread, and every
//! connection waits its turn per request.
//!
//! Its layers, top first (`tests/cli/layout.rs` holds them): this file (the start); `api/`
//! (the handlers and the router); what handlers share (`state.rs`, `bucket_rename.rs`,
//! `provision/`, `unsupported.rs`, `console.rs`, `browser_guard.rs`, `cors.rs`, `links.rs`);
//! the codecs and the records kept of requests (`protocol/`, `metrics/`, `trail/`,
//! `queries.rs`); the transport (`http/`); and who is calling (`auth/`, with the variables'
//! grouping of `env_groups.rs`). A file imports only its own layer and those below, and
//! no two folders import each other.

pub(crate) mod api;
pub mod auth;
pub(crate) mod browser_guard;
pub(crate) mod bucket_rename;
pub(crate) mod console;
pub mod cors;
pub(crate) mod env_groups;
mod follower;
pub mod ha;
pub mod http;
pub(crate) mod links;
pub(crate) mod metrics;
pub(crate) mod protocol;
pub mod provision;
pub mod queries;
pub(crate) mod state;
pub mod trail;
pub mod unsupported;

use crate::replication::{ReplicationOptions, Replications};
use std::collections::BTreeSet;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Instant;

use crate::error::{Error, Result};
use crate::lifecycle::LifecycleRepository;
use crate::storage::Store;
use crate::storage::config::Config;

pub use http::Limits;
use http::reactor::{Reactor, ReturnPath};
pub use provision::Provisioning;
use provision::provision_buckets;
pub use state::{App, InstanceRole};

/// How often expired queries are dropped.
const QUERY_SWEEP: std::time::Duration = std::time::Duration::from_secs(1);

/// Everything the server needs to start.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Engine settings: data path, thread counts, lifecycle minimums, instance name.
    pub engine: Config,
    /// Address to listen on.
    pub host: String,
    /// Port to listen on (0 picks a free one; the log says which).
    pub port: u16,
    /// Handler threads (connections served at once).
    pub http_threads: usize,
    /// Timeouts and sizes of the network edge.
    pub limits: Limits,
    /// How many queries may be open and for how long.
    pub queries: queries::QueryLimits,
    /// When set, every request needs `Authorization: Bearer <token>`.
    pub api_token: Option<String>,
    /// The instance role; `REPLICA` is read-only.
    pub role: InstanceRole,
    /// `GET /metrics` answers without a token even with authentication on.
    pub metrics_public: bool,
    /// The web console is served at `/ui/` (and `/` leads there).
    pub web_console: bool,
    /// Proxies whose forwarding headers are believed (none by default).
    pub trusted_proxies: auth::TrustedProxies,
    /// Origins a browser may call the API from (`RS_CORS_ALLOW_ORIGIN`).
    pub cors: cors::Cors,
    /// Where clients reach this server (`RS_PUBLIC_URL`), the base of query links;
    /// `None`: `http://<host>:<port>/` of the listening address.
    pub public_url: Option<String>,
    /// Log messages at or above this level go into `$system` (`RS_SYSTEM_EVENTS_LOG_LEVEL`,
    /// default WARN) while system events are on.
    pub system_events_log_level: log::LevelFilter,
    /// Where the API lives (`RS_API_BASE_PATH`, e.g. `/reduct`): requests outside it are
    /// answered 404. `/` (the default): at the root.
    pub base_path: String,
    /// `RS_INIT_API_TOKEN`: the value of a full-access `init-token` created once and then
    /// ordinary (rotatable, removable).
    pub init_api_token: Option<String>,
    /// `RS_DISABLE_AUTH`: no authentication, whatever tokens are given.
    pub disable_auth: bool,
    /// HTTPS: the PEM certificate chain and private key (`RS_CERT_PATH`,
    /// `RS_CERT_KEY_PATH`); `None` serves plain HTTP.
    pub tls: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// How often a REPLICA reads what the writer of its directory changed
    /// (`RS_ENGINE_REPLICA_UPDATE_INTERVAL`, default 60 s).
    pub replica_update_interval: std::time::Duration,
    /// Where a REPLICA posts its `$system` events (`RS_PRIMARY_URL`, `RS_SECONDARY_URL`);
    /// `None` or no URL: they are dropped, with a WARN at start.
    pub forward_events: Option<trail::forward::ForwardSettings>,
    /// A REPLICA that shares only the object store: the remote whose manifests it
    /// follows (`--follow-remote`), into its own data directory.
    pub follow_remote: Option<String>,
}

/// The base of query links: `configured` with a `/` appended when missing, else
/// `http(s)://<host>:<port><base>` (the port left out for 80 or 443), as ReductStore
/// makes it.
fn public_url(
    configured: Option<&str>,
    (host, port): (&str, u16),
    tls: bool,
    base: &str,
) -> String {
    let mut url = match configured.map(str::trim).filter(|u| !u.is_empty()) {
        Some(url) => url.to_string(),
        None if port == 80 && !tls => format!("http://{host}{base}"),
        None if port == 443 && tls => format!("https://{host}{base}"),
        None if tls => format!("https://{host}:{port}{base}"),
        None => format!("http://{host}:{port}{base}"),
    };
    if !url.ends_with('/') {
        url.push('/');
    }
    url
}

/// `RS_API_BASE_PATH` as `/` or `/<path>/`; refused when it could not be a path prefix.
fn normalize_base_path(text: &str) -> Result<String> {
    let trimmed = text.trim().trim_matches('/');
    if trimmed.is_empty() {
        return Ok("/".to_string());
    }
    let fine = trimmed.split('/').all(|segment| {
        !segment.is_empty()
            && segment != "."
            && segment != ".."
            && segment
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
    });
    if !fine {
        return Err(Error::unprocessable(format!(
            "RS_API_BASE_PATH '{}' is not a path of letters, digits, '-', '.', '_' or '~' segments",
            text.escape_default()
        )));
    }
    Ok(format!("/{trimmed}/"))
}

/// A running server.
pub struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    returns: ReturnPath,
    reactor: Option<JoinHandle<()>>,
    /// Dropping it stops the sweeper.
    sweep_stop: Option<crossbeam_channel::Sender<()>>,
    sweeper: Option<JoinHandle<()>>,
    handlers: Vec<JoinHandle<()>>,
    app: Arc<App>,
    /// Writes the `$system` trail; flushed after the last request.
    trail_writer: Option<trail::TrailWriter>,
    /// Deletes remote objects no index names (not on a replica).
    collector: Option<crate::storage::remote_collector::Collector>,
    /// A replica's: reads what the writer changed.
    follower: Option<follower::Follower>,
}

/// Asks each remote, on a thread of its own, whether it answers with these credentials:
/// one that does not is a WARN (tier runs fail and back off until it does), never a
/// refusal to start.
fn probe_remotes(store: &Arc<Store>) {
    for remote in store.remotes().all() {
        let remote = remote.clone();
        let probe = std::thread::Builder::new()
            .name("remote-probe".into())
            .spawn(move || {
                let key = format!("{}.halflife-probe", remote.key_prefix());
                match remote.head(&key) {
                    Ok(_) => log::info!(
                        "remote '{}' answers ({} bucket '{}', prefix '{}')",
                        remote.name,
                        remote.endpoint,
                        remote.bucket,
                        remote.prefix
                    ),
                    Err(f) => log::warn!(
                        "{}; tier policies naming it fail until it answers",
                        f.message
                    ),
                }
            });
        if let Err(e) = probe {
            log::warn!("could not start the probe of a remote: {e}");
        }
    }
}

impl Server {
    /// Locks and opens the data directory, applies the provisioned buckets, starts the
    /// lifecycle repository (read-only on a replica), applies the provisioned policies, and
    /// starts listening.
    pub fn start(config: ServerConfig, provisioning: Provisioning) -> Result<Server> {
        // The port first: a server that cannot listen must not have created or changed
        // its data directory. Connections made meanwhile wait in the backlog until the
        // store is open.
        let listener = TcpListener::bind((config.host.as_str(), config.port))
            .map_err(|e| Error::io(format!("listening on {}:{}", config.host, config.port), e))?;
        Server::start_on(listener, config, provisioning)
    }

    /// [`Server::start`] on a listener bound already (a PRIMARY or SECONDARY that took
    /// the lease serves on the port it answered on while it waited).
    pub fn start_on(
        listener: TcpListener,
        config: ServerConfig,
        provisioning: Provisioning,
    ) -> Result<Server> {
        if config.http_threads == 0 {
            return Err(Error::unprocessable("http_threads must be at least 1"));
        }
        let bucket_defaults = provisioning
            .bucket_defaults
            .clone()
            .map_err(Error::unprocessable)?;
        // A certificate asked for must work: plain HTTP instead would expose every token.
        let tls = match &config.tls {
            Some((cert, key)) => Some(http::transport::server_tls(cert, key)?),
            None => None,
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let base_path = normalize_base_path(&config.base_path)?;
        refuse_open_network(&config, &provisioning)?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::io("reading the listening address", e))?;
        let replica = config.role == InstanceRole::Replica;
        let mut engine = config.engine.clone();
        // A replica opens the directory another instance writes, and writes nothing there.
        engine.read_only |= replica;
        // Opening the store takes the data directory's lock (a replica's takes none).
        let store = Arc::new(Store::open(engine)?);
        if !replica {
            // Before tokens and policies load: they must name a bucket by its final name.
            bucket_rename::recover(&store)?;
        }
        let mirror = follower::open_mirror(config.follow_remote.as_deref(), replica, &store)?;
        probe_remotes(&store);
        let collector = if config.role == InstanceRole::Replica {
            None
        } else {
            Some(crate::storage::remote_collector::Collector::start(
                &store,
                config.engine.remote_collect_interval,
                config.engine.remote_orphan_grace,
            )?)
        };
        // Buckets first: a provisioned policy may name a provisioned bucket.
        let provisioned_buckets = if config.role == InstanceRole::Replica {
            if !provisioning.buckets.is_empty() {
                log::warn!("a replica does not provision buckets: RS_BUCKET_* ignored");
            }
            BTreeSet::new()
        } else {
            provision_buckets(&store, provisioning.buckets, &bucket_defaults)
        };
        let lifecycles = if config.role == InstanceRole::Replica {
            LifecycleRepository::replica(store.data_path())?
        } else {
            LifecycleRepository::open(store.clone(), &config.engine)?
        };
        for policy in provisioning.lifecycles {
            match policy {
                Ok((name, settings)) => match lifecycles.provision(&name, settings) {
                    Ok(()) => log::info!("lifecycle '{name}' provisioned"),
                    Err(e) => log::error!("provisioned lifecycle '{name}' skipped: {e}"),
                },
                Err(why) => log::error!("provisioned lifecycle skipped: {why}"),
            }
        }
        if config
            .api_token
            .as_deref()
            .is_some_and(|t| t.trim().is_empty())
        {
            // As in ReductStore, an empty token means no authentication; say so, since
            // an empty variable is easy to set by mistake.
            log::warn!("RS_API_TOKEN is set but empty: authentication is OFF");
        }
        // The token repository exists only with authentication on: a non-empty
        // RS_API_TOKEN (the provisioned init-token) or tokens provisioned with
        // RS_TOKEN_<ID>_* (restricted tokens mean the server is not open to all) or a
        // RS_INIT_API_TOKEN, unless
        // RS_DISABLE_AUTH says otherwise. Created tokens persist either way.
        let init = config
            .api_token
            .as_deref()
            .map(str::trim)
            .unwrap_or_default();
        let init_once = config
            .init_api_token
            .as_deref()
            .map(str::trim)
            .unwrap_or_default();
        if !init.is_empty() && !init_once.is_empty() && !config.disable_auth {
            return Err(Error::unprocessable(
                "RS_API_TOKEN and RS_INIT_API_TOKEN are both set: set one (RS_API_TOKEN keeps init-token provisioned, RS_INIT_API_TOKEN creates it once)",
            ));
        }
        let mut provisioned_tokens = Vec::new();
        for token in provisioning.tokens {
            match token {
                Ok(token) => provisioned_tokens.push(token),
                Err(why) => log::error!("provisioned token skipped: {why}"),
            }
        }
        let tokens = if config.disable_auth {
            if !init.is_empty() || !init_once.is_empty() || !provisioned_tokens.is_empty() {
                log::warn!(
                    "RS_DISABLE_AUTH is true: authentication is OFF, RS_API_TOKEN and RS_TOKEN_* are not used"
                );
            }
            None
        } else if init.is_empty() && init_once.is_empty() && provisioned_tokens.is_empty() {
            None
        } else {
            let mut repo = if replica {
                auth::TokenRepository::open_read_only(&config.engine.data_path, init)?
            } else {
                auth::TokenRepository::open(&config.engine.data_path, init)?
            };
            if !init_once.is_empty() && replica {
                log::warn!(
                    "a replica does not create tokens: RS_INIT_API_TOKEN ignored (the writer's init-token works here once it made it)"
                );
            } else if !init_once.is_empty() {
                repo = repo.with_init_token(init_once)?;
            }
            Some(repo.with_provisioned(provisioned_tokens)?)
        };
        let trail = trail::Trail::for_instance(
            &store,
            &config.engine,
            replica,
            config.forward_events.clone(),
        )?;
        let trail_writer = match &trail {
            Some(trail) => {
                trail.apply_quota(config.engine.system_events_quota)?;
                if let Some(tokens) = &tokens {
                    // The newest audit event of a token is its last use, across restarts.
                    for token in tokens.list() {
                        if let Some(at) = trail.last_access(&token.name)? {
                            tokens.note_last_access(&token.name, at);
                        }
                    }
                }
                Some(trail.start(config.system_events_log_level)?)
            }
            None => None,
        };
        let replications = if config.role == InstanceRole::Replica {
            Replications::read_only()
        } else {
            Replications::open(
                &store,
                ReplicationOptions {
                    own_port: addr.port(),
                    timeout: config.engine.replication_timeout,
                    log_size: config.engine.replication_log_size,
                    tls: crate::replication::tls::ReplicationTls::new(
                        config.engine.replication_verify_ssl,
                        config.engine.replication_ca_path.as_deref(),
                    )?,
                    events: config.engine.system_events.then(|| {
                        (
                            config.engine.instance_name.clone(),
                            config.engine.system_events_quota,
                        )
                    }),
                },
            )?
        };
        if config.role == InstanceRole::Replica && !provisioning.replications.is_empty() {
            log::warn!("a replica does not replicate: RS_REPLICATION_<ID>_* ignored");
        } else {
            for task in provisioning.replications {
                match task {
                    Ok((name, settings, mode_given)) => {
                        match replications.provision(&name, settings, mode_given) {
                            Ok(()) => log::info!("replication '{name}' provisioned"),
                            Err(e) => log::error!("provisioned replication '{name}' skipped: {e}"),
                        }
                    }
                    Err(why) => log::error!("{why}"),
                }
            }
        }
        let app = Arc::new(App {
            store,
            lifecycles,
            replications,
            queries: queries::QueryRegistry::new(config.queries),
            tokens,
            provisioned_buckets,
            http_metrics: metrics::HttpMetrics::default(),
            metrics_public: config.metrics_public,
            web_console: config.web_console,
            trusted_proxies: config.trusted_proxies.clone(),
            cors: config.cors.clone(),
            bucket_defaults,
            role: config.role,
            public_url: public_url(
                config.public_url.as_deref(),
                (&config.host, addr.port()),
                tls.is_some(),
                &base_path,
            ),
            base_path,
            instance_name: config.engine.instance_name.clone(),
            trail,
            started: Instant::now(),
            replica_updates: Default::default(),
            mirror,
        });
        let stop = Arc::new(AtomicBool::new(false));
        let (work_tx, work_rx) = crossbeam_channel::unbounded::<http::connection::Connection>();
        // Every client behind a trusted proxy shares its address: the per-client
        // connection cap does not hold it.
        let proxies = config.trusted_proxies.clone();
        let exempt: http::clients::Exempt = Arc::new(move |ip| proxies.trusts(ip));
        let limits = Limits {
            streaming_bodies: Limits::streaming_slots(config.http_threads),
            ..config.limits
        };
        let (reactor, returns) = Reactor::new(listener, limits, stop.clone(), work_tx, exempt, tls)
            .map_err(|e| Error::io("setting up the connection poller", e))?;
        let mut handlers = Vec::new();
        for i in 0..config.http_threads {
            let (rx, app, stop, returns) =
                (work_rx.clone(), app.clone(), stop.clone(), returns.clone());
            handlers.push(
                std::thread::Builder::new()
                    .name(format!("halflife-http-{i}"))
                    .spawn(move || {
                        let others_waiting = || !rx.is_empty();
                        for conn in rx.iter() {
                            returns.give_back(http::serve(
                                app.as_ref(),
                                conn,
                                &limits,
                                &stop,
                                &others_waiting,
                            ));
                        }
                    })
                    .map_err(|e| Error::io("starting an HTTP thread", e))?,
            );
        }
        // Expired queries are dropped on a clock, so their mapped blocks go with them even
        // when no new query comes along.
        let (sweep_stop, sweep_rx) = crossbeam_channel::bounded::<()>(0);
        let sweep_app = app.clone();
        let sweeper = std::thread::Builder::new()
            .name("halflife-sweep".into())
            .spawn(move || {
                while let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
                    sweep_rx.recv_timeout(QUERY_SWEEP)
                {
                    sweep_app.queries.purge_expired();
                }
            })
            .map_err(|e| Error::io("starting the query sweeper", e))?;
        let follower = if replica {
            Some(follower::Follower::start(
                app.clone(),
                config.replica_update_interval,
            )?)
        } else {
            None
        };
        let reactor = std::thread::Builder::new()
            .name("halflife-poll".into())
            .spawn(move || reactor.run())
            .map_err(|e| Error::io("starting the connection poller", e))?;
        log::info!(
            "halflife {} listening on {scheme}://{addr} (data {}, {} HTTP threads, role {}, auth {}); public URL {}",
            env!("CARGO_PKG_VERSION"),
            config.engine.data_path.display(),
            config.http_threads,
            config.role.as_str(),
            if app.tokens.is_some() { "on" } else { "off" },
            app.public_url,
        );
        Ok(Server {
            addr,
            stop,
            returns,
            reactor: Some(reactor),
            sweep_stop: Some(sweep_stop),
            sweeper: Some(sweeper),
            handlers,
            app,
            trail_writer,
            collector,
            follower,
        })
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, lets requests in progress finish, cancels and waits for running
    /// policies, and releases the data directory.
    pub fn shutdown(mut self) {
        log::info!("shutting down: no new connections");
        self.stop.store(true, Ordering::SeqCst);
        self.returns.wake();
        // The poller closes the parked connections and drops the handlers' queue, so
        // they end after the requests in progress.
        if let Some(reactor) = self.reactor.take() {
            let _ = reactor.join();
        }
        for handler in self.handlers.drain(..) {
            let _ = handler.join();
        }
        drop(self.sweep_stop.take());
        if let Some(sweeper) = self.sweeper.take() {
            let _ = sweeper.join();
        }
        if let Some(mut writer) = self.trail_writer.take() {
            writer.stop();
        }
        if let Some(mut follower) = self.follower.take() {
            follower.stop();
        }
        if let Some(mut collector) = self.collector.take() {
            collector.stop(&self.app.store);
        }
        log::info!("HTTP stopped; stopping lifecycle policies");
        match Arc::try_unwrap(self.app) {
            Ok(app) => {
                app.replications.shutdown();
                app.lifecycles.shutdown();
            }
            Err(_) => log::error!("the server state is still shared at shutdown"),
        }
        log::info!("shutdown complete");
    }
}

/// Refuses to serve a network without authentication unless told to: with no token at
/// all (no `RS_API_TOKEN`, `RS_INIT_API_TOKEN` or provisioned token) and an address that
/// is not loopback, anyone who can reach the port could read, write and delete
/// everything. ReductStore 1.21 refuses such a start too; a server on loopback (the
/// default) keeps serving without a token, and `RS_DISABLE_AUTH=true` says it is meant.
fn refuse_open_network(config: &ServerConfig, provisioning: &Provisioning) -> Result<()> {
    let given = |t: &Option<String>| t.as_deref().is_some_and(|t| !t.trim().is_empty());
    let tokens = given(&config.api_token)
        || given(&config.init_api_token)
        || provisioning.tokens.iter().any(|t| t.is_ok());
    if config.disable_auth || tokens || is_loopback_host(&config.host, config.port) {
        return Ok(());
    }
    Err(Error::unprocessable(format!(
        "refusing to listen on {} without authentication: anyone who reaches it could read, write and delete every record. Set RS_API_TOKEN (or RS_INIT_API_TOKEN) to require a token, RS_DISABLE_AUTH=true to serve it open on purpose, or RS_HOST=127.0.0.1 to serve this machine only",
        crate::error::quoted(&config.host)
    )))
}

/// Whether `host` names this machine's loopback only (every address it resolves to).
fn is_loopback_host(host: &str, port: u16) -> bool {
    use std::net::ToSocketAddrs;
    let name = host.trim_start_matches('[').trim_end_matches(']');
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    if name == "localhost" {
        return true;
    }
    match (name.as_str(), port).to_socket_addrs() {
        Ok(addrs) => {
            let addrs: Vec<SocketAddr> = addrs.collect();
            !addrs.is_empty() && addrs.iter().all(|a| a.ip().is_loopback())
        }
        Err(_) => false,
    }
}
