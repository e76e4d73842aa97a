//! Lifecycle policy settings, with the JSON field names of the ReductStore API (plus our
//! `compression` target), and their validation into a ready-to-run [`Policy`].

use serde::{Deserialize, Deserializer, Serialize};

use crate::duration::{format_duration, parse_duration};
use crate::error::{Error, ErrorKind, Result};
use crate::storage::Store;
use crate::storage::compress::validate_target;
use crate::storage::condition::{Condition, MAX_CONDITION_BYTES};
use crate::storage::format::codec::Codec;
use crate::storage::pattern::EntryPatterns;

mod when_json;
pub use when_json::WhenJson;

/// Most entry patterns one policy lists.
pub const MAX_POLICY_ENTRIES: usize = 256;
/// Longest entry pattern a policy accepts, in bytes (an entry path is far shorter).
pub const MAX_POLICY_PATTERN_BYTES: usize = 1024;

/// Default `interval` when the field is missing or null.
pub const DEFAULT_INTERVAL: &str = "3600s";

/// What a policy does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LifecycleType {
    /// Remove old records.
    Delete,
    /// Recompress old blocks.
    Compress,
    /// Move old blocks' payloads to a remote object store (ours).
    Tier,
}

impl LifecycleType {
    /// The name used in JSON and events.
    pub fn as_str(self) -> &'static str {
        match self {
            LifecycleType::Delete => "delete",
            LifecycleType::Compress => "compress",
            LifecycleType::Tier => "tier",
        }
    }
}

/// Whether a policy runs, and whether it changes anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum LifecycleMode {
    /// Runs and changes data.
    #[default]
    Enabled,
    /// Does not run.
    Disabled,
    /// Runs and reports what it would do, changing nothing.
    DryRun,
}

impl LifecycleMode {
    /// The name used in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            LifecycleMode::Enabled => "enabled",
            LifecycleMode::Disabled => "disabled",
            LifecycleMode::DryRun => "dry_run",
        }
    }
}

/// What a delete policy does with records a replication task has not delivered yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum PendingReplication {
    /// Keeps them (and the records after them in their entry) until they are
    /// delivered; the run says so in its event (`kept_pending_replication_from`).
    #[default]
    Keep,
    /// Deletes them like any other: they never reach the destination.
    Delete,
}

impl PendingReplication {
    fn is_keep(&self) -> bool {
        *self == PendingReplication::Keep
    }
}

/// The compression target of a compress policy: `{"algorithm": "zstd", "level": 3}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompressionSetting {
    /// `zstd` or `lz4`.
    pub algorithm: CompressionAlgorithm,
    /// zstd level 1..=22 (default 3); ignored for lz4.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<i32>,
}

/// Algorithms a compress policy can target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CompressionAlgorithm {
    /// Zstandard.
    Zstd,
    /// LZ4.
    Lz4,
}

impl CompressionSetting {
    /// The codec this setting targets.
    pub fn codec(&self) -> Codec {
        match self.algorithm {
            CompressionAlgorithm::Lz4 => Codec::Lz4,
            CompressionAlgorithm::Zstd => Codec::Zstd(self.level.unwrap_or(3)),
        }
    }
}

/// Treats an explicit `null` like a missing field.
fn null_as_default<'de, D, T>(deserializer: D) -> std::result::Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

fn default_interval() -> String {
    DEFAULT_INTERVAL.to_string()
}

fn null_as_default_interval<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> std::result::Result<String, D::Error> {
    Ok(Option::<String>::deserialize(deserializer)?.unwrap_or_else(default_interval))
}

/// A policy as users write it (`POST /api/v1/lifecycles/{name}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LifecycleSettings {
    /// `delete`, `compress` or `tier`.
    #[serde(rename = "type")]
    pub kind: LifecycleType,
    /// The bucket it works on.
    pub bucket: String,
    /// Entry patterns; empty means every entry.
    #[serde(default, deserialize_with = "null_as_default")]
    pub entries: Vec<String>,
    /// Records older than this (a duration such as `30d`) are processed.
    pub older_than: String,
    /// How often it runs (a duration; `3600s` when missing or null).
    #[serde(
        default = "default_interval",
        deserialize_with = "null_as_default_interval"
    )]
    pub interval: String,
    /// Delete only: only records matching this condition (held as compact text).
    #[serde(default)]
    pub when: Option<WhenJson>,
    /// How much data one run advances through; null means 24 × interval.
    #[serde(default)]
    pub processing_interval: Option<String>,
    /// enabled, disabled or dry_run.
    #[serde(default, deserialize_with = "null_as_default")]
    pub mode: LifecycleMode,
    /// Compress: the target (default zstd level 3). Tier: recompress to this target
    /// before the upload (none: blocks move as they are).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<CompressionSetting>,
    /// Tier only (ours): the name of the remote object store blocks move to, one the
    /// server configures (`--remote NAME=URL`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<String>,
    /// Ours, delete only: whether records pending replication are kept (the default,
    /// not shown) or deleted.
    /// Omitted (`None`): keep, and an update that omits it keeps what was set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_replication: Option<PendingReplication>,
}

/// The minimums validation enforces and the catch-up bounds policies get (from
/// [`crate::storage::config::Config`], lowered in tests).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LifecycleLimits {
    /// Smallest allowed `interval` in µs (default 10 minutes).
    pub min_interval: i64,
    /// Smallest allowed `older_than` in µs (default 1 hour).
    pub min_older_than: i64,
    /// Share of a worker a policy catching up on a backlog may take (see
    /// [`Policy::catch_up_share`]).
    pub catch_up_share: f64,
    /// Most records one run takes on (see [`Policy::max_records_per_run`]).
    pub max_records_per_run: u64,
    /// Most policies the server holds (`--lifecycle-max-policies`).
    pub max_policies: usize,
    /// Most bytes all policy definitions take as JSON (`--lifecycle-max-definitions-size`).
    pub max_definitions_size: u64,
}

impl LifecycleLimits {
    /// The limits a configuration sets.
    pub fn from_config(config: &crate::storage::config::Config) -> Self {
        LifecycleLimits {
            min_interval: config.lifecycle_min_interval,
            min_older_than: config.lifecycle_min_older_than,
            catch_up_share: config.lifecycle_catch_up_share,
            max_records_per_run: config.lifecycle_max_records_per_run,
            max_policies: config.lifecycle_max_policies,
            max_definitions_size: config.lifecycle_max_definitions_size,
        }
    }
}

impl Default for LifecycleLimits {
    fn default() -> Self {
        Self::from_config(&crate::storage::config::Config::default())
    }
}

/// A validated policy, with everything parsed once.
#[derive(Debug, Clone)]
pub struct Policy {
    /// The policy name.
    pub name: String,
    /// The settings as given (their `when` shares its text with the stored definition's
    /// and with [`Policy::when`]'s source).
    pub settings: LifecycleSettings,
    /// `older_than` in µs.
    pub older_than: u64,
    /// `interval` in µs.
    pub interval: u64,
    /// Data advanced per run in µs: `processing_interval`, else 24 × interval.
    pub window: u64,
    /// The parsed `when` condition.
    pub when: Option<Condition>,
    /// The compression target of a compress policy.
    pub target: Codec,
    /// A run that did work and is not caught up is followed by the next one after a
    /// pause of `duration × (1 / share − 1)`, so a backlog takes this share of a worker
    /// (0.5: as long a pause as the run took) and foreground traffic keeps the rest.
    pub catch_up_share: f64,
    /// A run's window ends early where the records after the progress marker pass this
    /// many (whole blocks), so a dense window cannot make one huge run.
    pub max_records_per_run: u64,
}

impl Policy {
    /// The pause after a run of `took` that did work and is not caught up.
    pub fn catch_up_pause(&self, took: std::time::Duration) -> std::time::Duration {
        let share = self.catch_up_share.clamp(0.01, 1.0);
        took.mul_f64(1.0 / share - 1.0)
    }
}

impl LifecycleSettings {
    /// Whether records pending replication are kept (the default).
    pub fn keeps_pending_replication(&self) -> bool {
        self.pending_replication.is_none_or(|p| p.is_keep())
    }

    /// Fills what an update left out from the settings it replaces: our own fields
    /// (`compression`, `pending_replication`), which ReductStore's clients cannot send,
    /// so updating through them never silently resets these. Only within one type.
    pub fn keep_our_fields_of(&mut self, previous: &LifecycleSettings) {
        if self.kind != previous.kind {
            return;
        }
        if self.compression.is_none() {
            self.compression = previous.compression;
        }
        if self.pending_replication.is_none() {
            self.pending_replication = previous.pending_replication;
        }
        if self.remote.is_none() {
            self.remote = previous.remote.clone();
        }
    }

    /// Parses a JSON body; errors are 422 `Invalid JSON: …` as the API specifies.
    pub fn from_json(body: &[u8]) -> Result<Self> {
        serde_json::from_slice(body).map_err(|e| Error::unprocessable(format!("Invalid JSON: {e}")))
    }

    /// Validates the settings of policy `name` in the order of the API reference and
    /// parses them into a [`Policy`].
    pub fn validate(&self, name: &str, store: &Store, limits: &LifecycleLimits) -> Result<Policy> {
        // `$system` keeps its own retention (its FIFO quota): a policy there could erase
        // the audit trail, which every direct route refuses to change.
        if self.bucket.starts_with('$') {
            return Err(Error::unprocessable(format!(
                "Bucket '{}' belongs to the system and keeps its own retention (its quota, RS_SYSTEM_EVENTS_QUOTA_SIZE): lifecycle '{name}' cannot target it",
                crate::error::quoted(&self.bucket)
            )));
        }
        if store.bucket(&self.bucket).is_err() {
            return Err(Error::not_found(format!(
                "Bucket '{}' for lifecycle '{name}' does not exist",
                self.bucket
            )));
        }
        let older_than = parse_duration(&self.older_than).map_err(|e| {
            Error::unprocessable(format!(
                "Invalid lifecycle older_than '{}': {e}",
                self.older_than
            ))
        })?;
        if older_than < limits.min_older_than {
            return Err(Error::unprocessable(format!(
                "Lifecycle older_than '{}' is shorter than minimum allowed value of {} (the server's --lifecycle-min-older-than, RS_LIFECYCLE_MIN_OLDER_THAN)",
                self.older_than,
                format_duration(limits.min_older_than)
            )));
        }
        let interval = parse_duration(&self.interval).map_err(|e| {
            Error::unprocessable(format!(
                "Invalid lifecycle interval '{}': {e}",
                self.interval
            ))
        })?;
        if interval < limits.min_interval {
            return Err(Error::unprocessable(format!(
                "Lifecycle interval '{}' is shorter than minimum allowed value of {} (the server's --lifecycle-min-interval, RS_LIFECYCLE_MIN_INTERVAL)",
                self.interval,
                format_duration(limits.min_interval)
            )));
        }
        let window = match &self.processing_interval {
            None => interval.saturating_mul(24),
            Some(text) => {
                let value = parse_duration(text).map_err(|e| {
                    Error::unprocessable(format!(
                        "Invalid lifecycle processing_interval '{text}': {e}"
                    ))
                })?;
                if value <= 0 {
                    return Err(Error::unprocessable(format!(
                        "Lifecycle processing_interval '{text}' must be positive"
                    )));
                }
                value
            }
        };
        let kind = self.kind.as_str();
        if self.kind != LifecycleType::Delete && self.when.is_some() {
            return Err(Error::unprocessable(format!(
                "Lifecycle type '{kind}' does not support 'when' condition"
            )));
        }
        if self.kind != LifecycleType::Delete
            && self.pending_replication.is_some_and(|p| !p.is_keep())
        {
            return Err(Error::unprocessable(format!(
                "Lifecycle type '{kind}' does not support 'pending_replication'"
            )));
        }
        match (&self.remote, self.kind) {
            (Some(_), LifecycleType::Delete | LifecycleType::Compress) => {
                return Err(Error::unprocessable(format!(
                    "Lifecycle type '{kind}' does not support 'remote'"
                )));
            }
            (None, LifecycleType::Tier) => {
                return Err(Error::unprocessable(
                    "Lifecycle type 'tier' needs 'remote': the name of a remote the server configures (--remote NAME=URL)",
                ));
            }
            (Some(remote), LifecycleType::Tier) if store.remotes().get(remote).is_none() => {
                let known: Vec<&str> = store.remotes().all().map(|r| r.name.as_str()).collect();
                return Err(Error::unprocessable(format!(
                    "Lifecycle remote '{}' is not configured on this server (configured: {})",
                    crate::error::quoted(remote),
                    if known.is_empty() {
                        "none; start it with --remote NAME=URL".to_string()
                    } else {
                        known.join(", ")
                    }
                )));
            }
            _ => {}
        }
        if self.kind == LifecycleType::Delete && self.compression.is_some() {
            return Err(Error::unprocessable(
                "Lifecycle type 'delete' does not support 'compression'",
            ));
        }
        let when = match &self.when {
            Some(text) => {
                // Bounded as a query's `when` is: a condition is held as long as its
                // policy lives, and parsed again at every start.
                let bytes = text.as_str().len();
                if bytes > MAX_CONDITION_BYTES {
                    return Err(Error::unprocessable(format!(
                        "Lifecycle 'when' is {bytes} bytes of JSON; at most {MAX_CONDITION_BYTES} are accepted"
                    )));
                }
                let condition = Condition::parse_with_source(&text.value()?, false, text.shared())
                    .map_err(|e| {
                        Error::unprocessable(format!(
                            "Invalid lifecycle condition: {}",
                            e.message()
                        ))
                    })?;
                if condition.raw_directives().ext().is_some() {
                    return Err(Error::unprocessable(
                        "Lifecycle condition cannot use '#ext' directive",
                    ));
                }
                Some(condition)
            }
            None => None,
        };
        if self.entries.len() > MAX_POLICY_ENTRIES {
            return Err(Error::unprocessable(format!(
                "Lifecycle 'entries' lists {} patterns; at most {MAX_POLICY_ENTRIES} are accepted",
                self.entries.len()
            )));
        }
        if let Some(long) = self
            .entries
            .iter()
            .find(|p| p.len() > MAX_POLICY_PATTERN_BYTES)
        {
            return Err(Error::unprocessable(format!(
                "Lifecycle entry pattern '{}...' is {} bytes; at most {MAX_POLICY_PATTERN_BYTES} are accepted",
                crate::error::quoted(
                    long.char_indices()
                        .nth(40)
                        .map_or(long.as_str(), |(i, _)| &long[..i])
                ),
                long.len()
            )));
        }
        EntryPatterns::parse(&self.entries).map_err(|e| {
            Error::new(
                ErrorKind::Unprocessable,
                format!("Invalid lifecycle entries: {}", e.message()),
            )
        })?;
        let target = self.compression.map_or(Codec::Zstd(3), |c| c.codec());
        validate_target(target).map_err(|e| {
            Error::unprocessable(format!("Invalid lifecycle compression: {}", e.message()))
        })?;
        Ok(Policy {
            name: name.to_string(),
            settings: self.clone(),
            older_than: older_than as u64,
            interval: interval as u64,
            window: window as u64,
            when,
            target,
            catch_up_share: limits.catch_up_share,
            max_records_per_run: limits.max_records_per_run.max(1),
        })
    }
}

#[cfg(test)]
mod tests;
