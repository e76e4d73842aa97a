//! The lifecycle policies of a bucket in a report: their settings, their state and their
//! last result — from a running server's scheduler, or, for a stopped one, from the stored
//! definitions and the latest `lifecycle_run` event in `$system`.

use serde::{Deserialize, Serialize};

use crate::error::{ErrorKind, Result};
use crate::lifecycle::definitions::DefinitionStore;
use crate::lifecycle::events::{RunEvent, SYSTEM_BUCKET, sanitize};
use crate::lifecycle::meter::RunProgress;
use crate::lifecycle::repository::REPLICA_NOTE;
use crate::lifecycle::{LifecycleInfo, LifecycleMode, LifecycleSettings, LifecycleType};
use crate::storage::Store;
use crate::timefmt::rfc3339;

/// One policy of a bucket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyReport {
    /// Policy name.
    pub name: String,
    /// `delete` or `compress`.
    #[serde(rename = "type")]
    pub kind: LifecycleType,
    /// enabled, disabled or dry_run.
    pub mode: LifecycleMode,
    /// Entry patterns (empty: every entry).
    pub entries: Vec<String>,
    /// The age past which records are processed, as written (`30d`).
    pub older_than: String,
    /// How often it runs, as written.
    pub interval: String,
    /// A compress policy's target codec (`zstd-3`, `lz4`); a tier policy's remote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// A delete policy's `when`, as compact JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// What it does now, in words: `running`, `catching up`, `caught up`, `failing`,
    /// `disabled`, `invalid`, `not run yet`, or `read-only (replica)`.
    pub state: String,
    /// When the last run started (RFC 3339).
    pub last_run: Option<String>,
    /// When the next run is due (RFC 3339; a running server only).
    pub next_run: Option<String>,
    /// Where the last run's window ended (µs): the progress the next run starts from.
    pub last_processed_ts: Option<u64>,
    /// Bytes saved by compression since the server started (a running server only).
    pub bytes_saved_total: Option<u64>,
    /// The run in progress: how far through its window.
    pub progress: Option<RunProgress>,
    /// The last run's `lifecycle_run` event.
    pub last_result: Option<RunEvent>,
    /// Why it does not run (it failed validation at load) or why its last run failed.
    pub error: Option<String>,
}

/// The state word of a policy.
fn state(mode: LifecycleMode, invalid: bool, running: bool, last: Option<&RunEvent>) -> String {
    let word = if invalid {
        "invalid"
    } else if running {
        "running"
    } else if mode == LifecycleMode::Disabled {
        "disabled"
    } else {
        match last {
            None => "not run yet",
            Some(e) if e.is_error() => "failing",
            Some(e) if e.caught_up => "caught up",
            Some(_) => "catching up",
        }
    };
    word.to_string()
}

fn target(settings: &LifecycleSettings) -> Option<String> {
    if settings.kind == LifecycleType::Tier {
        return settings.remote.clone();
    }
    (settings.kind == LifecycleType::Compress).then(|| {
        settings
            .compression
            .as_ref()
            .map_or(crate::storage::Codec::Zstd(3), |c| c.codec())
            .to_string()
    })
}

/// What the settings say of a policy in `state`, with nothing known of its runs yet.
fn from_settings(name: &str, settings: &LifecycleSettings, state: String) -> PolicyReport {
    PolicyReport {
        name: name.to_string(),
        kind: settings.kind,
        mode: settings.mode,
        entries: settings.entries.clone(),
        older_than: settings.older_than.clone(),
        interval: settings.interval.clone(),
        target: target(settings),
        when: settings.when.as_ref().map(|w| w.to_string()),
        state,
        last_run: None,
        next_run: None,
        last_processed_ts: None,
        bytes_saved_total: None,
        progress: None,
        last_result: None,
        error: None,
    }
}

/// The report of a policy a running server holds.
pub fn live(info: &LifecycleInfo, settings: &LifecycleSettings) -> PolicyReport {
    let invalid = !info.is_running;
    let state = if info.last_error.as_deref() == Some(REPLICA_NOTE) {
        "read-only (replica)".to_string()
    } else {
        state(
            settings.mode,
            invalid,
            info.running_now,
            info.last_event.as_ref(),
        )
    };
    PolicyReport {
        last_run: info.last_run.clone(),
        next_run: info.next_run.clone(),
        last_processed_ts: info.last_processed_ts,
        bytes_saved_total: Some(info.bytes_saved_total),
        progress: info.progress,
        last_result: info.last_event.clone(),
        error: info.last_error.clone(),
        ..from_settings(&info.name, settings, state)
    }
}

/// The policies stored in a stopped server's data directory, by bucket name: their
/// definitions, and the latest run event of each in `$system` (whatever instance wrote
/// it). Reads only.
pub fn offline(store: &Store) -> Result<Vec<(String, PolicyReport)>> {
    let definitions = DefinitionStore::read(store.data_path())?;
    let system = match store.bucket(SYSTEM_BUCKET) {
        Ok(bucket) => Some(bucket),
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    // Each policy's event entries (`lifecycle/<instance>/<policy>`, one per instance that
    // ran it), found in one pass over `$system`.
    let mut by_policy: std::collections::HashMap<String, Vec<String>> = Default::default();
    if let Some(system) = &system {
        for name in system.entry_names() {
            if let Some(rest) = name.strip_prefix("lifecycle/")
                && let Some((_, policy)) = rest.split_once('/')
            {
                by_policy.entry(policy.to_string()).or_default().push(name);
            }
        }
    }
    let mut out = Vec::new();
    for (name, def) in definitions {
        let last = system.as_ref().and_then(|system| {
            by_policy
                .get(&sanitize(&name))?
                .iter()
                .filter_map(|entry| system.read(entry, None).ok())
                .filter_map(|r| serde_json::from_slice::<RunEvent>(r.payload?.as_slice()).ok())
                .filter(|e| e.policy_name == name)
                .max_by_key(|e| e.timestamp)
        });
        let settings = &def.settings;
        let state = state(settings.mode, def.invalid.is_some(), false, last.as_ref());
        let report = PolicyReport {
            last_run: last.as_ref().map(|e| {
                rfc3339(std::time::UNIX_EPOCH + std::time::Duration::from_micros(e.timestamp))
            }),
            last_processed_ts: last
                .as_ref()
                .and_then(|e| e.last_processed_ts.or(e.resume_ts)),
            error: def.invalid.clone().or_else(|| {
                last.as_ref()
                    .filter(|e| e.is_error())
                    .map(|e| e.message.clone())
            }),
            last_result: last,
            ..from_settings(&name, settings, state)
        };
        out.push((settings.bucket.clone(), report));
    }
    Ok(out)
}
