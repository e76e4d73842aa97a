//! A PRIMARY and a SECONDARY on one data directory (`RS_INSTANCE_ROLE`,
//! `docs/high-availability.md`): one holds the directory's lease and serves; the other
//! answers 503 naming it and takes over once the lease runs out, without two writers.
//!
//! Files: `lease.rs` (the lease, its fence, and what a standby watches), `standby.rs`
//! (the waiting instance's answers), `fresh_read.rs` (reading the lease past this host's
//! caches), `volume.rs` (which file systems can carry a shared directory, checked at
//! start). The binary's `serve` loops over them: wait for the lease, start the server on
//! the same listener, and step down to waiting when the lease is lost.

pub mod fresh_read;
pub mod lease;
pub mod standby;
pub mod volume;

use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind, Result};
use crate::storage::fence::Fence;
use crate::storage::sync::fsutil::create_dirs_durably;
use lease::{Lease, LeaseRecord, LeaseTiming, Look, Watch};
use standby::Standby;

/// What to do when a PRIMARY waits longer than `RS_LOCK_FILE_TIMEOUT` for the lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureAction {
    /// Exit with an error naming the holder (ReductStore's default).
    Abort,
    /// Keep waiting as a standby. ReductStore would start without the lock; halflife
    /// never runs a second writer, so "proceed" means going on waiting.
    Proceed,
}

impl std::str::FromStr for FailureAction {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "abort" => Ok(FailureAction::Abort),
            "proceed" => Ok(FailureAction::Proceed),
            _ => Err(format!(
                "lock file failure action '{s}' is not abort or proceed"
            )),
        }
    }
}

/// The settings of a PRIMARY or SECONDARY.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HaSettings {
    /// The lease's TTL and polling interval.
    pub timing: LeaseTiming,
    /// How long a PRIMARY waits for the lease before `failure_action`; `None`: for good
    /// (`RS_LOCK_FILE_TIMEOUT=0`, as ReductStore reads it).
    pub timeout: Option<Duration>,
    /// What a PRIMARY does after `timeout`.
    pub failure_action: FailureAction,
}

/// The fence the process installs once: the lease it holds now, if any. Between leases
/// (waiting, or after a loss) it refuses every write.
#[derive(Default)]
pub struct CurrentLease {
    lease: RwLock<Option<Arc<Lease>>>,
}

impl CurrentLease {
    /// Holds `lease` from now on.
    pub fn set(&self, lease: Arc<Lease>) {
        *self.lease.write().unwrap_or_else(|p| p.into_inner()) = Some(lease);
    }

    /// The lease held (lost or not), if any.
    pub fn get(&self) -> Option<Arc<Lease>> {
        self.lease.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Fence for CurrentLease {
    fn check(&self) -> Result<()> {
        match &*self.lease.read().unwrap_or_else(|p| p.into_inner()) {
            Some(lease) => lease.check(),
            None => Err(Error::new(
                ErrorKind::Unavailable,
                "This instance does not hold the data directory's lease",
            )),
        }
    }
}

/// Waits, answering as a standby on `listener`, until this instance takes `dir`'s lease
/// as `me` (`primary`: takes a directory nobody leased at once, and is held to
/// `settings.timeout`). Returns the listener, blocking again, and the lease.
pub fn wait_for_lease(
    listener: TcpListener,
    dir: &Path,
    me: &LeaseRecord,
    settings: HaSettings,
    primary: bool,
    stop: &dyn Fn() -> bool,
) -> Result<Option<(TcpListener, Lease)>> {
    let role: &'static str = if primary { "PRIMARY" } else { "SECONDARY" };
    // Durably: a lease claimed in a directory a power cut forgets would be forgotten with
    // everything written under it.
    create_dirs_durably(dir)?;
    let standby = Standby::start(listener, role)
        .map_err(|e| Error::io("answering as a waiting instance", e))?;
    let began = Instant::now();
    let mut watch = Watch::new();
    let mut said_timeout = false;
    let mut last_holder: Option<String> = None;
    loop {
        if stop() {
            let _ = standby.stop();
            return Ok(None);
        }
        match watch.look(dir, settings.timing, primary) {
            Look::Take(epoch) => {
                let record = LeaseRecord {
                    epoch,
                    ..me.clone()
                };
                if let Some(lease) = Lease::take(dir, record, settings.timing)? {
                    log::info!("{role}: took the data directory's lease (epoch {epoch}); serving");
                    let listener = standby
                        .stop()
                        .map_err(|e| Error::io("taking the listener back", e))?;
                    return Ok(Some((listener, lease)));
                }
                log::info!("{role}: another instance took epoch {epoch} first; waiting");
            }
            Look::Held(holder) => {
                let named = holder
                    .as_ref()
                    .map(|h| format!("{} (epoch {})", h.url, h.epoch));
                if named != last_holder {
                    match &named {
                        Some(h) => {
                            log::info!("{role}: waiting; the data directory's lease is held by {h}")
                        }
                        None => log::info!("{role}: waiting for the data directory's lease"),
                    }
                    last_holder = named;
                }
                standby.show_holder(holder);
            }
        }
        if let Some(timeout) = settings
            .timeout
            .filter(|t| primary && began.elapsed() >= *t)
            && !said_timeout
        {
            said_timeout = true;
            match settings.failure_action {
                FailureAction::Abort => {
                    let _ = standby.stop();
                    return Err(Error::conflict(format!(
                        "PRIMARY: the data directory's lease is still held after {timeout:?} (RS_LOCK_FILE_TIMEOUT); RS_LOCK_FILE_FAILURE_ACTION=abort"
                    )));
                }
                FailureAction::Proceed => log::warn!(
                    "PRIMARY: the lease is still held after {timeout:?} (RS_LOCK_FILE_TIMEOUT); waiting on as a standby (RS_LOCK_FILE_FAILURE_ACTION=proceed)"
                ),
            }
        }
        sleep_unless(settings.timing.poll, stop);
    }
}

/// Renews `lease` every polling interval until `stop` or until it is lost; `lost` is
/// called once when it is.
pub fn renew_until_lost(
    lease: Arc<Lease>,
    timing: LeaseTiming,
    stop: Arc<std::sync::atomic::AtomicBool>,
    lost: Box<dyn FnOnce() + Send>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("halflife-lease".into())
        .spawn(move || {
            let stopped = || stop.load(std::sync::atomic::Ordering::Acquire);
            while !stopped() {
                sleep_unless(timing.poll, &stopped);
                if stopped() {
                    break;
                }
                if let Err(e) = lease.renew() {
                    if lease.is_lost() {
                        lost();
                        return;
                    }
                    log::warn!("renewing the data directory's lease: {e}");
                }
                // A pause between renewals shows here too: the clock may have run out.
                if lease.check().is_err() {
                    lost();
                    return;
                }
            }
        })
}

fn sleep_unless(total: Duration, stop: &dyn Fn() -> bool) {
    let step = Duration::from_millis(20);
    let began = Instant::now();
    while began.elapsed() < total && !stop() {
        std::thread::sleep(step.min(total.saturating_sub(began.elapsed())));
    }
}
