//! The `$system` trail of a server, as ReductStore 1.21.5 keeps it: the audit of
//! authenticated calls (`audit.rs`), API usage per bucket every minute (`usage.rs`) and
//! log messages at or above a level (`logs.rs`), written as events into `$system`.
//!
//! The request path only counts, in memory (a lock and a hash lookup each for the audit
//! and the usage); one background thread writes the events: audit groups once due, usage
//! every 60 s from start, log messages as they come, and everything left at shutdown.
//!
//! Files: `audit.rs` (the audit), `usage.rs` (usage counts), `logs.rs` (log messages),
//! `redact.rs` (what a log line may not carry), `sharded.rs` (per-thread shards of counts),
//! `forward.rs` (a replica's events, posted to the instance that writes).

pub(crate) mod audit;
pub mod forward;
pub mod logs;
pub(crate) mod redact;
pub(crate) mod sharded;
pub(crate) mod usage;

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use log::LevelFilter;

use crate::error::{Error, Result};
use crate::lifecycle::events::sanitize;
use crate::server::http::Response;
use crate::server::http::head::RequestHead;
use crate::storage::Store;
use crate::storage::system::SystemBucket;
use audit::{Audit, AuditEvent, Call};
use logs::{LogEvent, Message};
use usage::{Traffic, Usage, UsageEvent};

/// Usage is written this often.
pub const USAGE_EVERY: Duration = Duration::from_secs(60);

/// The token name of calls made with authentication off (that carried a header).
pub const AUTH_DISABLED: &str = "AUTHENTICATION-DISABLED";
/// The token name of calls answered 401.
pub const UNAUTHORIZED: &str = "unauthorized";

pub use crate::timefmt::now_micros;

/// The log target of the replication module's lines.
const REPLICATION_TARGET: &str = "halflife::replication";

/// What the trail counts and writes.
pub struct Trail {
    system: SystemBucket,
    /// A replica's: events go to the instance that writes, not into `$system` here.
    forward: Option<forward::Forwarder>,
    /// The instance name (in payloads) and its sanitised form (in entry names).
    instance: String,
    segment: String,
    audit: Audit,
    usage: Usage,
    last_usage: Mutex<Instant>,
}

/// The running writer thread; [`TrailWriter::stop`] flushes everything and joins it.
pub struct TrailWriter {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl TrailWriter {
    /// Writes what is left and stops the thread.
    pub fn stop(&mut self) {
        self.stop.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for TrailWriter {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Trail {
    /// The trail of `store`, for instance `instance`; `$system` (FIFO quota `quota`) is
    /// created by the first event.
    pub fn new(store: &Arc<Store>, instance: &str, quota: Option<u64>) -> Arc<Trail> {
        Self::with_sink(store, instance, quota, None)
    }

    /// The trail of an instance with `engine`'s settings: none with system events off;
    /// a replica's events are posted to the instance that writes (`forward`, with at
    /// least one URL), or dropped with a WARN.
    pub fn for_instance(
        store: &Arc<Store>,
        engine: &crate::storage::config::Config,
        replica: bool,
        forward: Option<forward::ForwardSettings>,
    ) -> Result<Option<Arc<Trail>>> {
        let forward = forward.filter(|settings| !settings.urls.is_empty());
        Ok(match (engine.system_events, replica, forward) {
            (false, _, _) => None,
            (true, false, _) => Some(Trail::new(
                store,
                &engine.instance_name,
                engine.system_events_quota,
            )),
            (true, true, Some(settings)) => {
                log::info!(
                    "replica: its audit, usage and log events go to {}",
                    settings.urls.join(" or ")
                );
                Some(Trail::forwarding(
                    store,
                    &engine.instance_name,
                    forward::Forwarder::new(settings)?,
                ))
            }
            (true, true, None) => {
                log::warn!(
                    "replica: its audit, usage and log events are dropped (it writes nothing in the data directory); set RS_PRIMARY_URL / RS_SECONDARY_URL to send them to the instance that writes"
                );
                None
            }
        })
    }

    /// A replica's trail of `store`: its events are posted by `forward` (`forward.rs`).
    pub fn forwarding(
        store: &Arc<Store>,
        instance: &str,
        forward: forward::Forwarder,
    ) -> Arc<Trail> {
        Self::with_sink(store, instance, None, Some(forward))
    }

    fn with_sink(
        store: &Arc<Store>,
        instance: &str,
        quota: Option<u64>,
        forward: Option<forward::Forwarder>,
    ) -> Arc<Trail> {
        Arc::new(Trail {
            forward,
            system: SystemBucket::new(store, quota),
            instance: instance.to_string(),
            segment: sanitize(instance),
            audit: Audit::default(),
            usage: Usage::default(),
            last_usage: Mutex::new(Instant::now()),
        })
    }

    /// Writes an event into `$system` (`observed`: replication tasks may take it), or
    /// on a replica posts it to the instance that writes.
    fn emit(
        &self,
        entry: &str,
        ts: u64,
        labels: crate::storage::Labels,
        observed: bool,
        mut payload: impl FnMut(u64) -> Result<Vec<u8>>,
    ) -> Result<u64> {
        if let Some(forward) = &self.forward {
            forward.send(entry, ts, &labels, &payload(ts)?);
            return Ok(ts);
        }
        if observed {
            self.system.write(entry, ts, labels, payload)
        } else {
            self.system.write_unreplicated(entry, ts, labels, payload)
        }
    }

    /// Writes an event a replica forwarded (`api/forwarded_events.rs`) as this server
    /// writes its own: `$system` made on the first one, a taken instant moved on.
    pub fn write_forwarded(
        &self,
        entry: &str,
        ts: u64,
        labels: crate::storage::Labels,
        payload: Vec<u8>,
    ) -> Result<u64> {
        self.emit(entry, ts, labels, true, |_| Ok(payload.clone()))
    }

    /// The entry of a trail family's events.
    fn entry(&self, family: &str, name: &str) -> String {
        format!("{family}/{}/{}", self.segment, sanitize(name))
    }

    /// Counts one answered request: in the audit when it names a token (`token`), in
    /// the usage when it wrote or read records.
    pub fn observe(
        &self,
        head: &RequestHead,
        response: &Response,
        token: Option<&str>,
        client: Option<std::net::IpAddr>,
        took: Duration,
    ) {
        let path = head.path.split('?').next().unwrap_or_default();
        if path.ends_with("/alive") || path.ends_with("/ready") {
            return;
        }
        if let Some(token) = token {
            let message = response
                .headers
                .iter()
                .find(|(n, _)| n == "x-reduct-error")
                .map_or("", |(_, v)| v.as_str());
            let call = Call {
                token,
                method: &head.method,
                path,
                status: response.status,
                message,
                client_ip: client,
            };
            self.audit.record(&call, took, now_micros);
        }
        if let Some(rest) = path.strip_prefix("/api/v1/") {
            self.usage.account(head, rest, response);
        }
    }

    /// The latest audit event of `token`: when it was last used (µs), if ever.
    pub fn last_access(&self, token: &str) -> Result<Option<u64>> {
        let Some(bucket) = self.system.existing()? else {
            return Ok(None);
        };
        match bucket.read(&self.entry("audit", token), None) {
            Ok(record) => Ok(Some(record.meta.timestamp)),
            Err(e) if e.kind() == crate::error::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Applies the configured quota to an existing `$system` (ReductStore does at every
    /// start).
    pub fn apply_quota(&self, quota: Option<u64>) -> Result<()> {
        if self.forward.is_some() {
            // A replica's `$system` is its writer's.
            return Ok(());
        }
        if let Some(bucket) = self.system.existing()? {
            let mut settings = bucket.settings();
            let wanted = SystemBucket::settings(quota);
            settings.quota_type = wanted.quota_type;
            settings.quota_size = wanted.quota_size;
            if settings != bucket.settings() {
                bucket.set_settings(settings)?;
            }
        }
        Ok(())
    }

    fn write_audit(&self, all: bool) {
        for group in self.audit.take_due(all) {
            let entry = self.entry("audit", &group.token);
            let labels = [("status".to_string(), group.status.to_string())].into();
            let written = self.emit(&entry, group.first_at, labels, true, |at| {
                json(&AuditEvent {
                    timestamp: at,
                    instance: &self.instance,
                    status: group.status,
                    message: &group.message,
                    token_name: &group.token,
                    method: &group.method,
                    path: &group.path,
                    client_ip: group.client_ip.map(|ip| ip.to_string()).unwrap_or_default(),
                    call_count: group.call_count,
                    duration: group.duration.as_secs_f64(),
                })
            });
            if let Err(e) = written {
                log::warn!("audit event of token '{}' not written: {e}", group.token);
            }
        }
    }

    fn write_usage(&self) {
        let now = Instant::now();
        let duration = {
            let mut last = self.last_usage.lock().unwrap_or_else(|p| p.into_inner());
            std::mem::replace(&mut *last, now).elapsed().as_secs_f64()
        };
        let traffic = self.usage.take();
        let store = self.system.store();
        let mut names: Vec<String> = store
            .buckets()
            .iter()
            .map(|b| b.name().to_string())
            .filter(|n| !n.starts_with('$'))
            .collect();
        names.extend(
            traffic
                .keys()
                .filter(|n| !names.contains(n))
                .cloned()
                .collect::<Vec<_>>(),
        );
        names.sort();
        let at = now_micros();
        let mut total_traffic = Traffic::default();
        let mut stored = [0u64; 5];
        let none = Traffic::default();
        for name in &names {
            let seen = traffic.get(name).unwrap_or(&none);
            let mut event = UsageEvent::of(seen, &self.instance, duration);
            if let Ok(bucket) = store.bucket(name) {
                event.bucket_count = 1;
                if let Ok(info) = bucket.info() {
                    event.storage_bytes = info.size;
                    event.entry_count = info.entry_count;
                }
                for entry in bucket.entries() {
                    if let Ok(info) = entry.info() {
                        event.block_count += info.block_count;
                        event.record_count += info.record_count;
                    }
                    if let Ok(tiers) = entry.tiers() {
                        usage::add_tiers(&mut event.tiers, tiers);
                    }
                }
            }
            let figures = [
                event.storage_bytes,
                event.bucket_count,
                event.entry_count,
                event.block_count,
                event.record_count,
            ];
            for (sum, part) in stored.iter_mut().zip(figures) {
                *sum += part;
            }
            total_traffic.add(seen);
            self.write_usage_event(name, at, event);
        }
        let mut total = UsageEvent::of(&total_traffic, &self.instance, duration);
        [
            total.storage_bytes,
            total.bucket_count,
            total.entry_count,
            total.block_count,
            total.record_count,
        ] = stored;
        self.write_usage_event("total", at, total);
    }

    fn write_usage_event(&self, name: &str, at: u64, mut event: UsageEvent) {
        let entry = self.entry("usage", name);
        let labels = [("status".to_string(), "200".to_string())].into();
        let written = self.emit(&entry, at, labels, true, |ts| {
            event.timestamp = ts;
            json(&event)
        });
        if let Err(e) = written {
            log::warn!("usage event '{entry}' not written: {e}");
        }
    }

    fn write_log(&self, message: &Message) {
        let entry = format!("logs/{}/messages", self.segment);
        let labels = [
            ("status".to_string(), "200".to_string()),
            ("level".to_string(), message.level.clone()),
        ]
        .into();
        let event = |at| {
            json(&LogEvent {
                timestamp: at,
                instance: &self.instance,
                status: 200,
                message: &message.text,
                level: &message.level,
                target: &message.target,
                file: &message.file,
                line: message.line,
            })
        };
        // The replication module's own lines are never replicated (as in ReductStore): a
        // task replicating `$system` would otherwise send the log of its own sending.
        let observed = !message.target.starts_with(REPLICATION_TARGET);
        let written = self.emit(&entry, message.at, labels, observed, event);
        if let Err(e) = written {
            log::warn!("log event not written: {e}");
        }
    }

    /// Starts the writer thread; log messages at or above `log_level` become events.
    pub fn start(self: &Arc<Self>, log_level: LevelFilter) -> Result<TrailWriter> {
        let messages = if log_level == LevelFilter::Off {
            crossbeam_channel::never()
        } else {
            logs::connect(log_level)
        };
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let trail = self.clone();
        let thread = std::thread::Builder::new()
            .name("halflife-trail".into())
            .spawn(move || trail.run(&messages, &stopped))
            .map_err(|e| Error::io("starting the trail thread", e))?;
        Ok(TrailWriter {
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    fn run(&self, messages: &Receiver<Message>, stopped: &Receiver<()>) {
        logs::mark_trail_thread();
        let tick = crossbeam_channel::tick(Duration::from_secs(1));
        loop {
            crossbeam_channel::select! {
                recv(stopped) -> _ => break,
                recv(messages) -> message => {
                    if let Ok(message) = message {
                        self.write_log(&message);
                    }
                }
                recv(tick) -> _ => {
                    self.audit.tick();
                    self.write_audit(false);
                    let due = self.last_usage.lock().unwrap_or_else(|p| p.into_inner()).elapsed() >= USAGE_EVERY;
                    if due {
                        self.write_usage();
                    }
                    let dropped = logs::take_dropped();
                    if dropped > 0 {
                        log::warn!("{dropped} log message(s) not written to $system: the queue was full");
                    }
                }
            }
        }
        for message in messages.try_iter() {
            self.write_log(&message);
        }
        self.write_audit(true);
        self.write_usage();
    }
}

fn json(value: &impl serde::Serialize) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| Error::internal(format!("encoding an event: {e}")))
}
