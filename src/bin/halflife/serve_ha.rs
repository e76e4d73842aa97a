//! `halflife serve` as a PRIMARY or SECONDARY: the lease's options, and the loop that
//! waits for the lease (answering as a standby), serves while it holds it, and steps down
//! to waiting when it is lost (`docs/high-availability.md`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::Args;

use halflife::server::ha::lease::{LeaseRecord, LeaseTiming};
use halflife::server::ha::volume::Volume;
use halflife::server::ha::{
    CurrentLease, FailureAction, HaSettings, renew_until_lost, wait_for_lease,
};
use halflife::server::trail::forward::ForwardSettings;
use halflife::server::{InstanceRole, Provisioning, Server, ServerConfig};
use halflife::{Error, Result};

/// The lease of a PRIMARY or SECONDARY, with ReductStore's names and defaults.
#[derive(Args)]
pub(crate) struct LeaseArgs {
    /// PRIMARY/SECONDARY: how long the data directory's lease lasts unrenewed (seconds,
    /// or a duration such as 500ms). The holder stops answering changes a margin before
    /// it runs out by its own clock; a standby takes over once it has seen the lease
    /// unchanged this long. At least twice the polling interval plus a margin.
    #[arg(long, env = "RS_LOCK_FILE_TTL", default_value = "30", value_parser = seconds)]
    lock_file_ttl: Duration,
    /// PRIMARY/SECONDARY: how often the holder renews the lease (an fsynced replace) and a
    /// standby looks at it (seconds, or a duration).
    #[arg(long, env = "RS_LOCK_FILE_POLLING_INTERVAL", default_value = "10", value_parser = seconds)]
    lock_file_polling_interval: Duration,
    /// PRIMARY: how long it waits for a lease another instance holds before
    /// RS_LOCK_FILE_FAILURE_ACTION (seconds, or a duration); 0 waits for good, as
    /// ReductStore reads it. A SECONDARY waits for good whatever it says.
    #[arg(long, env = "RS_LOCK_FILE_TIMEOUT", default_value = "60", value_parser = seconds_or_zero)]
    lock_file_timeout: Duration,
    /// PRIMARY: after RS_LOCK_FILE_TIMEOUT, `abort` exits with an error naming the holder;
    /// `proceed` goes on waiting as a standby (never a second writer).
    #[arg(long, env = "RS_LOCK_FILE_FAILURE_ACTION", default_value = "abort")]
    lock_file_failure_action: FailureAction,
    /// PRIMARY/SECONDARY/REPLICA on a shared data directory: start on these file systems
    /// (comma-separated types as the mount table names them, e.g. `fuse.sshfs`) though
    /// the start's check refuses them. The check accepts local file systems, NFS mounted
    /// with `sync` and close-to-open, and CephFS, GFS2, OCFS2, Lustre and GPFS; it refuses
    /// FUSE network mounts (sshfs, s3fs, gcsfuse), whose caches can hide a renewal of the
    /// lease, and anything unknown. Naming one here accepts that risk.
    #[arg(
        long,
        env = "RS_TRUST_VOLUME",
        value_name = "TYPES",
        value_delimiter = ','
    )]
    trust_volume: Vec<String>,
}

/// A REPLICA's settings.
#[derive(Args)]
pub(crate) struct ReplicaArgs {
    /// REPLICA: how often it reads what the writer of the shared data directory changed
    /// (seconds, or a duration such as 500ms): new records, buckets and entries,
    /// removals, policies, tokens. A record is served here at most this long after it
    /// was written.
    #[arg(long, env = "RS_ENGINE_REPLICA_UPDATE_INTERVAL", default_value = "60", value_parser = seconds)]
    pub(crate) replica_update_interval: Duration,
    /// REPLICA: where frames fetched back from a remote tier are kept; in memory when
    /// unset. Never the data directory, which a replica does not write.
    #[arg(long, env = "RS_REPLICA_CACHE_PATH")]
    pub(crate) replica_cache_path: Option<std::path::PathBuf>,
    /// REPLICA: follow remote NAME (configured with RS_REMOTE_<NAME>_*) instead of a
    /// shared data directory: the tiered blocks the writer publishes there are laid out
    /// in this server's own (empty) data directory and served, with no file of the
    /// writer's. Records not tiered yet are not on the remote: their reads answer 503.
    #[arg(long, env = "RS_FOLLOW_REMOTE", value_name = "NAME")]
    pub(crate) follow_remote: Option<String>,
    /// REPLICA: the URL of the instance its audit, usage and log events are posted to
    /// (into that instance's `$system`, with this server's RS_API_TOKEN, which needs full
    /// access there). Unset with RS_SECONDARY_URL: the events are dropped.
    #[arg(long, env = "RS_PRIMARY_URL", value_name = "URL")]
    primary_url: Option<String>,
    /// REPLICA: the other instance of the pair; events go to whichever takes them,
    /// starting with the one that took the last.
    #[arg(long, env = "RS_SECONDARY_URL", value_name = "URL")]
    secondary_url: Option<String>,
    /// REPLICA: check the TLS certificate of an `https://` RS_PRIMARY_URL /
    /// RS_SECONDARY_URL; false still encrypts but accepts any certificate.
    #[arg(long, env = "RS_SYSTEM_EVENTS_REMOTE_VERIFY_SSL", default_value = "true", value_parser = clap::builder::BoolishValueParser::new(), action = clap::ArgAction::Set)]
    system_events_remote_verify_ssl: bool,
    /// REPLICA: a PEM file of the CA certificates those URLs' certificates must chain to;
    /// without it, Mozilla's root certificates.
    #[arg(long, env = "RS_SYSTEM_EVENTS_REMOTE_CA_PATH", value_name = "PEM")]
    system_events_remote_ca_path: Option<std::path::PathBuf>,
    /// REPLICA: how long posting one event may take (seconds, or a duration).
    #[arg(long, env = "RS_SYSTEM_EVENTS_REMOTE_TIMEOUT", default_value = "5", value_parser = seconds)]
    system_events_remote_timeout: Duration,
}

impl ReplicaArgs {
    /// Where the replica's events go, posted with `token`; `None` when no URL is set.
    pub(crate) fn forward_settings(
        &self,
        token: Option<String>,
    ) -> Result<Option<ForwardSettings>> {
        let urls: Vec<String> = [&self.primary_url, &self.secondary_url]
            .into_iter()
            .flatten()
            .map(|url| url.trim().to_string())
            .filter(|url| !url.is_empty())
            .collect();
        if urls.is_empty() {
            return Ok(None);
        }
        for url in &urls {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(Error::unprocessable(format!(
                    "'{}' is not an http:// or https:// URL (RS_PRIMARY_URL / RS_SECONDARY_URL)",
                    url.escape_default()
                )));
            }
        }
        Ok(Some(ForwardSettings {
            urls,
            token,
            timeout: self.system_events_remote_timeout,
            verify_ssl: self.system_events_remote_verify_ssl,
            ca_path: self.system_events_remote_ca_path.clone(),
        }))
    }
}

impl LeaseArgs {
    /// Checks that `dir`'s file system can be shared by `role` (`RS_TRUST_VOLUME` aside).
    pub(crate) fn check_volume(&self, dir: &std::path::Path, role: &str) -> Result<()> {
        let trusted: Vec<String> = self
            .trust_volume
            .iter()
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
            .collect();
        Volume::check_shared(dir, role, &trusted).map(|_| ())
    }

    /// The settings, checked: the TTL must leave room for a slow renewal.
    pub(crate) fn settings(&self) -> Result<HaSettings> {
        let timing = LeaseTiming {
            ttl: self.lock_file_ttl,
            poll: self.lock_file_polling_interval,
        };
        timing.validate().map_err(Error::unprocessable)?;
        Ok(HaSettings {
            timing,
            timeout: Some(self.lock_file_timeout).filter(|t| !t.is_zero()),
            failure_action: self.lock_file_failure_action,
        })
    }
}

/// A number of seconds (`30`, `0.5`) or a duration (`500ms`, `1m`), positive.
fn seconds(text: &str) -> std::result::Result<Duration, String> {
    if let Ok(s) = text.trim().parse::<f64>() {
        return if s > 0.0 && s.is_finite() {
            Ok(Duration::from_secs_f64(s))
        } else {
            Err(format!("'{text}' must be a positive number of seconds"))
        };
    }
    crate::positive_duration(text)
}

/// [`seconds`], or 0 (`RS_LOCK_FILE_TIMEOUT=0`: no limit).
fn seconds_or_zero(text: &str) -> std::result::Result<Duration, String> {
    match text.trim().parse::<f64>() {
        Ok(0.0) => Ok(Duration::ZERO),
        Ok(s) if s > 0.0 && s.is_finite() => Ok(Duration::from_secs_f64(s)),
        Ok(_) => Err(format!(
            "'{text}' must be 0 (wait for good) or a positive number of seconds"
        )),
        Err(_) => crate::positive_duration(text),
    }
}

/// What ends one term of serving.
enum End {
    /// SIGINT or SIGTERM: stop.
    Signal,
    /// The lease was lost: step down and wait again.
    Lost,
}

/// Serves `config` whenever this instance holds the data directory's lease, until a
/// signal.
pub(crate) fn serve_with_lease(
    mut config: ServerConfig,
    ha: HaSettings,
    mut signals: signal_hook::iterator::Signals,
) -> Result<()> {
    config.engine.lease_guarded = true;
    let primary = config.role == InstanceRole::Primary;
    let role = config.role.as_str();
    let current = Arc::new(CurrentLease::default());
    if !halflife::storage::fence::install(current.clone()) {
        return Err(Error::internal("a fence was installed twice"));
    }
    let (ends_tx, ends_rx) = crossbeam_channel::unbounded::<End>();
    let stop = Arc::new(AtomicBool::new(false));
    {
        let (stop, ends_tx) = (stop.clone(), ends_tx.clone());
        std::thread::Builder::new()
            .name("halflife-signals".into())
            .spawn(move || {
                if let Some(signal) = signals.forever().next() {
                    log::info!("received signal {signal}");
                    stop.store(true, Ordering::Release);
                    let _ = ends_tx.send(End::Signal);
                }
            })
            .map_err(|e| Error::io("starting the signal thread", e))?;
    }
    // One port for every term: the one it answers on while it waits is the one it
    // serves on (port 0 picks one, kept from then on).
    let first = std::net::TcpListener::bind((config.host.as_str(), config.port))
        .map_err(|e| Error::io(format!("listening on {}:{}", config.host, config.port), e))?;
    let addr = first
        .local_addr()
        .map_err(|e| Error::io("reading the listening address", e))?;
    config.port = addr.port();
    let mut bound = Some(first);
    let me = LeaseRecord {
        owner: format!(
            "{}#{}-{:08x}",
            config.engine.instance_name,
            std::process::id(),
            random_u32()
        ),
        epoch: 0,
        renewed_at: 0,
        url: config
            .public_url
            .clone()
            .unwrap_or_else(|| format!("http://{}:{}/", config.host, config.port)),
        role: role.to_string(),
        released: false,
        renewals: 0,
    };
    let data_path = config.engine.data_path.clone();
    loop {
        let listener = match bound.take() {
            Some(listener) => listener,
            None => std::net::TcpListener::bind(addr)
                .map_err(|e| Error::io(format!("listening on {addr}"), e))?,
        };
        log::info!(
            "{role}: listening on http://{addr} while it waits for the data directory's lease"
        );
        let stopped = || stop.load(Ordering::Acquire);
        let Some((listener, lease)) =
            wait_for_lease(listener, &data_path, &me, ha, primary, &stopped)?
        else {
            return Ok(());
        };
        let lease = Arc::new(lease);
        current.set(lease.clone());
        let renewing = Arc::new(AtomicBool::new(false));
        let on_lost = {
            let ends_tx = ends_tx.clone();
            Box::new(move || {
                let _ = ends_tx.send(End::Lost);
            })
        };
        let renewer = renew_until_lost(lease.clone(), ha.timing, renewing.clone(), on_lost)
            .map_err(|e| Error::io("starting the lease's renewal", e))?;
        let provisioning = Provisioning::from_env(std::env::vars());
        let server = match Server::start_on(listener, config.clone(), provisioning) {
            Ok(server) => server,
            Err(e) => {
                renewing.store(true, Ordering::Release);
                let _ = renewer.join();
                return Err(e);
            }
        };
        let end = ends_rx.recv().unwrap_or(End::Signal);
        // Renewed while the server stops (a graceful stop finishes what it acknowledged
        // and writes its last events under the lease); a lost lease renews no more anyway.
        server.shutdown();
        renewing.store(true, Ordering::Release);
        let _ = renewer.join();
        match end {
            End::Signal => {
                // Stopped writing: the standby may take over at once.
                match lease.release() {
                    Ok(()) => log::info!("{role}: let the lease of epoch {} go", lease.epoch()),
                    Err(e) => log::warn!("{role}: the lease was not released: {e}"),
                }
                return Ok(());
            }
            End::Lost => log::warn!(
                "{role}: stepped down after losing the lease of epoch {}; waiting for it again",
                lease.epoch()
            ),
        }
    }
}

fn random_u32() -> u32 {
    let mut bytes = [0u8; 4];
    // A collision only makes two owners' names alike; epochs decide, not names.
    let _ = getrandom::fill(&mut bytes);
    u32::from_le_bytes(bytes)
}
