//! The blocking HTTP server: the ReductStore API subset over the storage engine and the
//! lifecycle repository.
//!
//! One acceptor thread hands connections over a channel to `http_threads` handler threads;
//! each serves one connection at a time, request after request (keep-alive), reading
//! bodies from the socket as handlers need them and writing payloads straight from the
//! mapped blocks. A lock file keeps a second server off the same data directory.

pub mod app;
pub mod batch;
pub mod buckets;
pub mod http;
pub mod io;
pub mod lifecycles;
pub mod percent;
pub mod provision;
pub mod queries;
pub mod records;
pub mod response;

use std::io::{BufRead, BufReader, BufWriter};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::Config;
use crate::error::{Error, Result};
use crate::lifecycle::LifecycleRepository;
use crate::storage::Store;

pub use app::{App, InstanceRole};
use http::{BodyError, HeadError, Request, Response};

/// Default of [`ServerConfig::idle_timeout`].
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(5);
/// How often an idle kept-alive connection looks up from its wait: it gives its handler
/// thread up as soon as other connections are queued or the server is stopping, so idle
/// clients cannot starve new ones.
const IDLE_CHECK: Duration = Duration::from_millis(100);
/// How long a body may stall before the request fails.
const BODY_TIMEOUT: Duration = Duration::from_secs(30);

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
    /// How long a connection may wait for its next request head before the server closes
    /// it (a kept-alive connection gives its thread up earlier when others are waiting).
    pub idle_timeout: Duration,
    /// When set, every request needs `Authorization: Bearer <token>`.
    pub api_token: Option<String>,
    /// The instance role; `REPLICA` is read-only.
    pub role: InstanceRole,
}

/// A running server.
pub struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
    handlers: Vec<JoinHandle<()>>,
    app: Arc<App>,
}

impl Server {
    /// Locks and opens the data directory, starts the lifecycle repository (read-only on a
    /// replica), applies the provisioned policies, and starts listening.
    pub fn start(config: ServerConfig, provisioned: Vec<provision::Provisioned>) -> Result<Server> {
        if config.http_threads == 0 {
            return Err(Error::unprocessable("http_threads must be at least 1"));
        }
        // Opening the store takes the data directory's lock.
        let store = Arc::new(Store::open(config.engine.clone())?);
        let lifecycles = if config.role == InstanceRole::Replica {
            LifecycleRepository::read_only()
        } else {
            LifecycleRepository::open(store.clone(), &config.engine)?
        };
        for policy in provisioned {
            match policy {
                Ok((name, settings)) => match lifecycles.provision(&name, settings) {
                    Ok(()) => log::info!("lifecycle '{name}' provisioned"),
                    Err(e) => log::error!("provisioned lifecycle '{name}' skipped: {e}"),
                },
                Err(why) => log::error!("provisioned lifecycle skipped: {why}"),
            }
        }
        let listener = TcpListener::bind((config.host.as_str(), config.port))
            .map_err(|e| Error::io(format!("listening on {}:{}", config.host, config.port), e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::io("reading the listening address", e))?;
        if config
            .api_token
            .as_deref()
            .is_some_and(|t| t.trim().is_empty())
        {
            // As in ReductStore, an empty token means no authentication; say so, since
            // an empty variable is easy to set by mistake.
            log::warn!("RS_API_TOKEN is set but empty: authentication is OFF");
        }
        let app = Arc::new(App {
            store,
            lifecycles,
            queries: Default::default(),
            token: config.api_token.clone().filter(|t| !t.trim().is_empty()),
            role: config.role,
            instance_name: config.engine.instance_name.clone(),
            started: Instant::now(),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = crossbeam_channel::bounded::<TcpStream>(config.http_threads * 4);
        let mut handlers = Vec::new();
        for i in 0..config.http_threads {
            let (rx, app, stop) = (rx.clone(), app.clone(), stop.clone());
            let idle_timeout = config.idle_timeout;
            handlers.push(
                std::thread::Builder::new()
                    .name(format!("halflife-http-{i}"))
                    .spawn(move || {
                        let others_waiting = || !rx.is_empty();
                        for stream in rx.iter() {
                            serve_connection(&app, stream, idle_timeout, &stop, &others_waiting);
                        }
                    })
                    .map_err(|e| Error::io("starting an HTTP thread", e))?,
            );
        }
        let acceptor_stop = stop.clone();
        let acceptor = std::thread::Builder::new()
            .name("halflife-accept".into())
            .spawn(move || {
                for stream in listener.incoming() {
                    if acceptor_stop.load(Ordering::SeqCst) {
                        break;
                    }
                    match stream {
                        Ok(s) => {
                            if tx.send(s).is_err() {
                                break;
                            }
                        }
                        Err(e) => log::warn!("accepting a connection: {e}"),
                    }
                }
            })
            .map_err(|e| Error::io("starting the acceptor thread", e))?;
        log::info!(
            "halflife {} listening on http://{addr} (data {}, {} HTTP threads, role {}, auth {})",
            env!("CARGO_PKG_VERSION"),
            config.engine.data_path.display(),
            config.http_threads,
            config.role.as_str(),
            if app.token.is_some() { "on" } else { "off" },
        );
        Ok(Server {
            addr,
            stop,
            acceptor: Some(acceptor),
            handlers,
            app,
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
        // Wake the acceptor, blocked in accept(), with a connection of our own.
        let _ = TcpStream::connect(self.addr);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        for handler in self.handlers.drain(..) {
            let _ = handler.join();
        }
        log::info!("HTTP stopped; stopping lifecycle policies");
        match Arc::try_unwrap(self.app) {
            Ok(app) => app.lifecycles.shutdown(),
            Err(_) => log::error!("the server state is still shared at shutdown"),
        }
        log::info!("shutdown complete");
    }
}

/// Waits for the next request on a kept-alive connection; false when the connection
/// should close instead (the peer closed or broke it, it idled out, other connections
/// need the thread, or the server is stopping).
fn await_request(
    reader: &mut BufReader<TcpStream>,
    idle_timeout: Duration,
    stop: &AtomicBool,
    others_waiting: &dyn Fn() -> bool,
) -> bool {
    if !reader.buffer().is_empty() {
        return true;
    }
    let _ = reader.get_ref().set_read_timeout(Some(IDLE_CHECK));
    let idle_since = Instant::now();
    loop {
        match reader.fill_buf() {
            Ok(buf) => return !buf.is_empty(),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if stop.load(Ordering::SeqCst)
                    || others_waiting()
                    || idle_since.elapsed() >= idle_timeout
                {
                    return false;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
}

fn serve_connection(
    app: &App,
    stream: TcpStream,
    idle_timeout: Duration,
    stop: &AtomicBool,
    others_waiting: &dyn Fn() -> bool,
) {
    let _ = stream.set_nodelay(true);
    let peer = stream
        .peer_addr()
        .map_or_else(|_| "?".to_string(), |a| a.to_string());
    let Ok(write_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::with_capacity(64 << 10, stream);
    let mut writer = BufWriter::with_capacity(64 << 10, write_half);
    let mut first = true;
    loop {
        // The first request is waited for in full; between requests the connection only
        // keeps its thread while nobody else needs it.
        if !first && !await_request(&mut reader, idle_timeout, stop, others_waiting) {
            return;
        }
        first = false;
        let _ = reader.get_ref().set_read_timeout(Some(idle_timeout));
        let head = match http::read_head(&mut reader) {
            Ok(head) => head,
            Err(HeadError::Closed) => return,
            Err(HeadError::TooLarge) => {
                log::warn!("{peer}: request head too large");
                let response = Response::error(
                    431,
                    &format!(
                        "Request head is larger than {} bytes or has more than {} headers",
                        http::MAX_HEAD_BYTES,
                        http::MAX_HEADERS
                    ),
                );
                let _ = http::write_response(&mut writer, &response, false);
                return;
            }
            Err(HeadError::Malformed(why)) => {
                log::warn!("{peer}: malformed request: {why}");
                let response = Response::error(400, &format!("Malformed request: {why}"));
                let _ = http::write_response(&mut writer, &response, false);
                return;
            }
        };
        let _ = reader.get_ref().set_read_timeout(Some(BODY_TIMEOUT));
        let keep_alive = http::wants_keep_alive(&head) && !stop.load(Ordering::SeqCst);
        let (method, path) = (head.method.clone(), head.path.clone());
        let (response, keep_alive) = match http::body_for(&head, &mut reader) {
            Err(BodyError::Reject(response)) => (response, false),
            Ok(body) => {
                let mut req = Request { head, body };
                let response = catch_unwind(AssertUnwindSafe(|| app.handle(&mut req)))
                    .unwrap_or_else(|_| {
                        log::error!("{method} {path}: the handler panicked");
                        Response::error(
                            500,
                            "Internal error: the request handler failed; see the server log",
                        )
                    });
                let keep_alive = http::finish_body(req.body, keep_alive);
                (response, keep_alive)
            }
        };
        let mut response = response;
        if method == "HEAD" && !matches!(response.body, http::ResponseBody::Head(_)) {
            // A HEAD answer never carries a body, errors included: only its length.
            response.body = http::ResponseBody::Head(response.body.content_length());
        }
        log::debug!("{peer} {method} {path} -> {}", response.status);
        if http::write_response(&mut writer, &response, keep_alive).is_err() || !keep_alive {
            return;
        }
    }
}
