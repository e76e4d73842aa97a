//! Log messages into the trail: the process's logger ([`TrailLogger`], installed by
//! `main`) writes every line as before and hands the ones at or above
//! `RS_SYSTEM_EVENTS_LOG_LEVEL` to the running server's trail, which writes them as
//! `logs/<instance>/messages` events. The hand-over never blocks a logging thread: the
//! queue is bounded and a full queue drops the message (counted, and said once drained).
//! Every line is redacted where it is formatted (`redact.rs`): no level lets a credential
//! into either output, and other crates' lines below INFO never reach the trail.

use std::cell::Cell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crossbeam_channel::{Receiver, Sender, TrySendError};
use log::{LevelFilter, Log, Metadata, Record};
use serde::Serialize;

use crate::server::trail::redact;

/// Messages waiting to be written at most; more are dropped.
const QUEUE: usize = 1024;

/// A log message on its way into the trail.
#[derive(Debug, Clone)]
pub struct Message {
    /// When it was logged (µs since the epoch).
    pub at: u64,
    /// `ERROR`, `WARN`, …
    pub level: String,
    /// The module that logged it.
    pub target: String,
    /// Its source file, if known.
    pub file: String,
    /// Its line, if known.
    pub line: u32,
    /// The text.
    pub text: String,
}

/// The payload of a log event, in ReductStore's field order.
#[derive(Serialize)]
pub struct LogEvent<'a> {
    /// The event's time (µs).
    pub timestamp: u64,
    /// The instance name.
    pub instance: &'a str,
    /// Always 200.
    pub status: u16,
    /// The log text.
    pub message: &'a str,
    /// The level.
    pub level: &'a str,
    /// The module.
    pub target: &'a str,
    /// The source file.
    pub file: &'a str,
    /// The line.
    pub line: u32,
}

struct Sink {
    level: LevelFilter,
    queue: Sender<Message>,
}

static SINK: Mutex<Option<Sink>> = Mutex::new(None);
/// The sink's level as a number (0: none), read before taking the lock, so lines below
/// it cost one atomic load.
static SINK_LEVEL: AtomicUsize = AtomicUsize::new(0);
static DROPPED: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Set on the trail's own thread: what it logs is never fed back into the trail.
    static WRITING_TRAIL: Cell<bool> = const { Cell::new(false) };
}

/// Marks the calling thread as the trail's writer.
pub fn mark_trail_thread() {
    WRITING_TRAIL.with(|w| w.set(true));
}

/// Starts handing messages at or above `level` to the returned queue (replacing an
/// earlier server's); `LevelFilter::Off` hands over nothing.
pub fn connect(level: LevelFilter) -> Receiver<Message> {
    let (queue, messages) = crossbeam_channel::bounded(QUEUE);
    if level > log::max_level() {
        log::set_max_level(level);
    }
    *SINK.lock().unwrap_or_else(|p| p.into_inner()) = Some(Sink { level, queue });
    SINK_LEVEL.store(level as usize, Ordering::Relaxed);
    messages
}

/// Messages dropped because the queue was full, since the last call.
pub fn take_dropped() -> u64 {
    DROPPED.swap(0, Ordering::Relaxed)
}

/// Parses `RS_SYSTEM_EVENTS_LOG_LEVEL`: TRACE, DEBUG, INFO, WARN(ING), ERROR or OFF, any
/// case.
pub fn parse_level(text: &str) -> Result<LevelFilter, String> {
    match text.trim().to_ascii_uppercase().as_str() {
        "TRACE" => Ok(LevelFilter::Trace),
        "DEBUG" => Ok(LevelFilter::Debug),
        "INFO" => Ok(LevelFilter::Info),
        "WARN" | "WARNING" => Ok(LevelFilter::Warn),
        "ERROR" => Ok(LevelFilter::Error),
        "OFF" => Ok(LevelFilter::Off),
        _ => Err(format!(
            "log level '{}' is not one of TRACE, DEBUG, INFO, WARN, ERROR, OFF",
            text.escape_default()
        )),
    }
}

/// The process's logger: `inner` (env_logger) writes as configured; lines at the
/// trail's level also go to the trail.
pub struct TrailLogger {
    inner: env_logger::Logger,
}

impl TrailLogger {
    /// Installs `inner` wrapped as the process's logger.
    pub fn install(inner: env_logger::Logger) -> Result<(), log::SetLoggerError> {
        let max = inner.filter();
        log::set_boxed_logger(Box::new(TrailLogger { inner }))?;
        log::set_max_level(max);
        Ok(())
    }
}

impl Log for TrailLogger {
    fn enabled(&self, metadata: &Metadata) -> bool {
        self.inner.enabled(metadata) || metadata.level() <= log::max_level()
    }

    fn log(&self, record: &Record) {
        // Hexdumps and TLS traces cannot be redacted line by line: never written.
        if redact::carries_wire_bytes(record.target(), record.level()) {
            return;
        }
        let to_inner = self.inner.matches(record);
        // Other crates' lines below INFO stay out of the trail: they describe requests
        // (URLs, headers) that a reader of `$system` has no business seeing.
        let to_trail = record.level() as usize <= SINK_LEVEL.load(Ordering::Relaxed)
            && (record.level() <= log::Level::Info || redact::is_ours(record.target()))
            && !WRITING_TRAIL.with(Cell::get);
        if !to_inner && !to_trail {
            return;
        }
        // Formatted once; secrets are cut here, where the line is made, for every output.
        let formatted = record.args().to_string();
        let text = redact::redact(&formatted);
        if to_inner {
            self.inner.log(
                &Record::builder()
                    .args(format_args!("{text}"))
                    .metadata(record.metadata().clone())
                    .module_path(record.module_path())
                    .file(record.file())
                    .line(record.line())
                    .build(),
            );
        }
        if !to_trail {
            return;
        }
        let sink = SINK.lock().unwrap_or_else(|p| p.into_inner());
        let Some(sink) = sink.as_ref().filter(|s| record.level() <= s.level) else {
            return;
        };
        let message = Message {
            at: crate::server::trail::now_micros(),
            level: record.level().to_string(),
            target: record.target().to_string(),
            file: redact::public_file(record.file().unwrap_or_default()).into_owned(),
            line: record.line().unwrap_or(0),
            text: text.into_owned(),
        };
        if let Err(TrySendError::Full(_)) = sink.queue.try_send(message) {
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn flush(&self) {
        self.inner.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_in_any_case() {
        assert_eq!(parse_level("warn"), Ok(LevelFilter::Warn));
        assert_eq!(parse_level("WARNING"), Ok(LevelFilter::Warn));
        assert_eq!(parse_level(" Off "), Ok(LevelFilter::Off));
        assert!(parse_level("loud").unwrap_err().contains("'loud'"));
    }
}
