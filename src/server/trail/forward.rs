//! A REPLICA's trail goes to the instance that writes (`docs/high-availability.md`): it
//! writes nothing in the shared directory, so its audit, usage and log events are posted
//! to the `$system` of the active one of `RS_PRIMARY_URL` / `RS_SECONDARY_URL` — tried
//! in turn, starting with the one that took the last event, so a failover of the pair
//! moves the replica's events along with it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::replication::tls::ReplicationTls;
use crate::storage::record::Labels;
use crate::storage::system::SYSTEM_BUCKET;
use crate::wire::percent::path_segment;

/// Where a replica's events go, and how they are sent.
#[derive(Debug, Clone)]
pub struct ForwardSettings {
    /// `RS_PRIMARY_URL`, then `RS_SECONDARY_URL` (those set).
    pub urls: Vec<String>,
    /// The token the events are posted with (the replica's `RS_API_TOKEN`: the pair
    /// shares its tokens with the replica); it needs full access there.
    pub token: Option<String>,
    /// How long one post may take (`RS_SYSTEM_EVENTS_REMOTE_TIMEOUT`, default 5 s).
    pub timeout: Duration,
    /// Check an `https://` target's certificate (`RS_SYSTEM_EVENTS_REMOTE_VERIFY_SSL`).
    pub verify_ssl: bool,
    /// The CA certificates it must chain to (`RS_SYSTEM_EVENTS_REMOTE_CA_PATH`);
    /// Mozilla's roots when `None`.
    pub ca_path: Option<std::path::PathBuf>,
}

/// Posts events to the active target.
pub struct Forwarder {
    settings: ForwardSettings,
    agent: ureq::Agent,
    /// The target that took the last event: asked first.
    active: AtomicUsize,
    /// Set while no target takes events: the outage is logged once, at its start.
    failing: AtomicBool,
}

impl Forwarder {
    /// A forwarder to `settings.urls` (at least one); a CA file that cannot be read is
    /// an error naming it.
    pub fn new(settings: ForwardSettings) -> Result<Forwarder> {
        let tls = ReplicationTls::for_setting(
            settings.verify_ssl,
            settings.ca_path.as_deref(),
            "RS_SYSTEM_EVENTS_REMOTE_CA_PATH",
        )?;
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(settings.timeout))
            .tls_config(tls.config())
            .build()
            .new_agent();
        Ok(Forwarder {
            settings,
            agent,
            active: AtomicUsize::new(0),
            failing: AtomicBool::new(false),
        })
    }

    /// Posts one event to `$system/<entry>` at `ts`. While no target takes events they
    /// are dropped, with a WARN when that starts and an INFO when it ends (not one per
    /// event: a replica whose writers are down would log nothing else).
    pub fn send(&self, entry: &str, ts: u64, labels: &Labels, payload: &[u8]) {
        match self.try_send(entry, ts, labels, payload) {
            Ok(()) => {
                if self.failing.swap(false, Ordering::Relaxed) {
                    log::info!("replica: its events reach {} again", self.target());
                }
            }
            Err(e) => {
                if !self.failing.swap(true, Ordering::Relaxed) {
                    log::warn!("replica: its events are dropped until an instance takes them: {e}");
                }
            }
        }
    }

    fn target(&self) -> &str {
        let urls = &self.settings.urls;
        urls.get(self.active.load(Ordering::Relaxed))
            .map_or("", String::as_str)
    }

    /// One event to the first target that takes it: a target that does not answer, or
    /// answers 503 (a waiting instance of the pair), passes it to the next. A timestamp
    /// taken there already (409) drops the event, as a clash does locally.
    fn try_send(&self, entry: &str, ts: u64, labels: &Labels, payload: &[u8]) -> Result<()> {
        let urls = &self.settings.urls;
        let first = self.active.load(Ordering::Relaxed);
        let mut last_error = String::new();
        for step in 0..urls.len() {
            let at = (first + step) % urls.len();
            let url = format!(
                "{}/api/v1/b/{}/{}?ts={ts}",
                urls[at].trim_end_matches('/'),
                path_segment(SYSTEM_BUCKET),
                path_segment(entry),
            );
            let mut request = self
                .agent
                .post(&url)
                .header("content-type", "application/json");
            if let Some(token) = self.settings.token.as_deref().filter(|t| !t.is_empty()) {
                request = request.header("authorization", &format!("Bearer {token}"));
            }
            for (key, value) in labels {
                request = request.header(&format!("x-reduct-label-{key}"), value);
            }
            match request.send(payload) {
                Ok(answer) => match answer.status().as_u16() {
                    200 | 409 => {
                        self.active.store(at, Ordering::Relaxed);
                        return Ok(());
                    }
                    503 => last_error = format!("{} is waiting (503)", urls[at]),
                    status => {
                        let why = answer
                            .headers()
                            .get("x-reduct-error")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or_default()
                            .chars()
                            .take(200)
                            .collect::<String>();
                        last_error = format!("{} answered {status} {why}", urls[at]);
                    }
                },
                Err(e) => last_error = format!("{} did not answer: {e}", urls[at]),
            }
        }
        Err(Error::internal(format!(
            "no instance took the event: {last_error}"
        )))
    }
}
