//! Buckets and lifecycle policies provisioned from the environment, as ReductStore reads
//! them:
//! - `RS_BUCKET_<ID>_NAME / _QUOTA_TYPE / _QUOTA_SIZE / _MAX_BLOCK_SIZE /
//!   _MAX_BLOCK_RECORDS` (sizes in bytes or with a unit: `1GB`, `512 MiB`);
//! - `RS_LIFECYCLE_<ID>_NAME / _TYPE / _BUCKET / _ENTRIES / _OLDER_THAN / _INTERVAL / _WHEN /
//!   _PROCESSING_INTERVAL / _MODE` (and ours, `_REMOTE` of a tier policy); the server's own `RS_LIFECYCLE_*` settings
//!   (`WORKERS`, `MIN_INTERVAL`, `MIN_OLDER_THAN`, `CATCH_UP_SHARE`, `MAX_RECORDS_PER_RUN`)
//!   are not IDs.
//!
//! A bucket or policy exists for every `<ID>` with a `_NAME`. Buckets are applied first, so
//! a provisioned policy can name a provisioned bucket on a fresh data directory.
//! Replication tasks are in `replications.rs`, tokens in `auth/provisioned.rs`;
//! `server/env_groups.rs` groups the variables of every family.

pub(crate) mod replications;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use crate::error::ErrorKind;
use crate::lifecycle::LifecycleSettings;
use crate::server::env_groups::group_by_id;
use crate::storage::names::validate_bucket_name;
use crate::storage::{BucketSettings, BucketSettingsUpdate, QuotaType, Store};

/// Everything provisioned from the environment.
#[derive(Debug)]
pub struct Provisioning {
    /// The settings of new buckets (`RS_DEFAULTS_BUCKET_*`), or why they are invalid.
    pub bucket_defaults: Result<BucketSettings, String>,
    /// Buckets, sorted by ID.
    pub buckets: Vec<ProvisionedBucket>,
    /// Lifecycle policies, sorted by ID.
    pub lifecycles: Vec<Provisioned>,
    /// Replication tasks, sorted by ID.
    pub replications: Vec<crate::server::provision::replications::ProvisionedReplication>,
    /// Tokens (`RS_TOKEN_<ID>_*`), sorted by ID; an unusable one is why.
    pub tokens: Vec<Result<crate::server::auth::ProvisionedToken, String>>,
}

impl Default for Provisioning {
    /// Nothing provisioned, built-in bucket defaults.
    fn default() -> Self {
        Provisioning {
            bucket_defaults: Ok(BucketSettings::default()),
            buckets: Vec::new(),
            lifecycles: Vec::new(),
            replications: Vec::new(),
            tokens: Vec::new(),
        }
    }
}

impl Provisioning {
    /// Reads the buckets and policies defined by `vars` (e.g. `std::env::vars()`).
    pub fn from_env(vars: impl IntoIterator<Item = (String, String)>) -> Provisioning {
        let vars: Vec<(String, String)> = vars.into_iter().collect();
        Provisioning {
            bucket_defaults: bucket_defaults_from_env(vars.iter().cloned()),
            buckets: buckets_from_env(vars.iter().cloned()),
            replications: crate::server::provision::replications::replications_from_env(
                vars.iter().cloned(),
            ),
            tokens: crate::server::auth::tokens_from_env(vars.iter().cloned()),
            lifecycles: from_env(vars),
        }
    }
}

/// Creates each provisioned bucket that does not exist and applies the settings it fixes
/// (fields not set keep their value); returns the names provisioned. A bucket that cannot
/// be provisioned is logged and skipped, as a broken policy is.
pub fn provision_buckets(
    store: &Store,
    buckets: Vec<ProvisionedBucket>,
    defaults: &BucketSettings,
) -> BTreeSet<String> {
    let mut provisioned = BTreeSet::new();
    for bucket in buckets {
        let (name, update) = match bucket {
            Ok(bucket) => bucket,
            Err(why) => {
                log::error!("provisioned bucket skipped: {why}");
                continue;
            }
        };
        let applied = validate_bucket_name(&name).and_then(|_| match store.bucket(&name) {
            Ok(bucket) => bucket.set_settings(bucket.settings().merged(&update)),
            Err(e) if e.kind() == ErrorKind::NotFound => store
                .create_bucket(&name, defaults.merged(&update))
                .map(|_| ()),
            Err(e) => Err(e),
        });
        match applied {
            Ok(()) => {
                log::info!("bucket '{name}' provisioned");
                provisioned.insert(name);
            }
            Err(e) => log::error!("provisioned bucket '{name}' skipped: {e}"),
        }
    }
    provisioned
}

/// A provisioned bucket (its name and the settings it fixes), or why an ID could not
/// become one.
pub type ProvisionedBucket = Result<(String, BucketSettingsUpdate), String>;

pub(crate) const BUCKET_PREFIX: &str = "RS_BUCKET_";
/// Bucket field suffixes, longest first.
pub(crate) const BUCKET_FIELDS: [&str; 5] = [
    "MAX_BLOCK_RECORDS",
    "MAX_BLOCK_SIZE",
    "QUOTA_TYPE",
    "QUOTA_SIZE",
    "NAME",
];

/// Reads the buckets defined by `vars`, sorted by ID.
pub fn buckets_from_env(
    vars: impl IntoIterator<Item = (String, String)>,
) -> Vec<ProvisionedBucket> {
    group_by_id(vars, BUCKET_PREFIX, &BUCKET_FIELDS, &[])
        .into_iter()
        .map(|(id, fields)| bucket_for(&id, fields))
        .collect()
}

fn bucket_for(id: &str, mut fields: BTreeMap<&'static str, String>) -> ProvisionedBucket {
    let var = |field: &str| format!("{BUCKET_PREFIX}{id}_{field}");
    let name = fields
        .remove("NAME")
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .ok_or_else(|| format!("{} is missing", var("NAME")))?;
    let settings = settings_of(fields, &var).map_err(|why| format!("bucket '{name}': {why}"))?;
    Ok((name, settings))
}

/// The bucket settings a set of `QUOTA_TYPE` / `QUOTA_SIZE` / `MAX_BLOCK_SIZE` /
/// `MAX_BLOCK_RECORDS` variables fixes (`var` names a field's variable in errors).
fn settings_of(
    fields: BTreeMap<&'static str, String>,
    var: &dyn Fn(&str) -> String,
) -> Result<BucketSettingsUpdate, String> {
    let mut settings = BucketSettingsUpdate::default();
    for (field, value) in fields {
        let value = value.trim();
        let bad = |why: String| format!("{}={value:?} {why}", var(field));
        match field {
            "QUOTA_TYPE" => {
                settings.quota_type = Some(match value.to_ascii_uppercase().as_str() {
                    "NONE" => QuotaType::None,
                    "FIFO" => QuotaType::Fifo,
                    "HARD" => QuotaType::Hard,
                    _ => return Err(bad("is not NONE, FIFO or HARD".into())),
                })
            }
            "QUOTA_SIZE" => settings.quota_size = Some(parse_byte_size(value).map_err(bad)?),
            "MAX_BLOCK_SIZE" => {
                settings.max_block_size = Some(parse_byte_size(value).map_err(bad)?)
            }
            "MAX_BLOCK_RECORDS" => {
                settings.max_block_records = Some(
                    value
                        .parse()
                        .map_err(|_| bad("is not a whole number of records".into()))?,
                )
            }
            _ => {}
        }
    }
    Ok(settings)
}

pub(crate) const DEFAULTS_PREFIX: &str = "RS_DEFAULTS_BUCKET_";

/// The settings of a new bucket: the built-in defaults with what
/// `RS_DEFAULTS_BUCKET_QUOTA_TYPE`, `_QUOTA_SIZE`, `_MAX_BLOCK_SIZE` and
/// `_MAX_BLOCK_RECORDS` in `vars` change, as ReductStore reads them; the error names a bad
/// variable.
pub fn bucket_defaults_from_env(
    vars: impl IntoIterator<Item = (String, String)>,
) -> Result<BucketSettings, String> {
    let mut fields = BTreeMap::new();
    for (key, value) in vars {
        if let Some(field) = key.strip_prefix(DEFAULTS_PREFIX)
            && let Some(&known) = BUCKET_FIELDS.iter().find(|f| **f == field && **f != "NAME")
        {
            fields.insert(known, value);
        }
    }
    let var = |field: &str| format!("{DEFAULTS_PREFIX}{field}");
    Ok(BucketSettings::default().merged(&settings_of(fields, &var)?))
}

/// A size in bytes, plain (`1048576`) or with a unit as ReductStore takes them: `KB`, `MB`,
/// `GB`, `TB`, `PB` are powers of 1000 (`K`, `M`, ... too), `KiB` ... `PiB` powers of 1024;
/// units in any case, a space allowed, a fraction allowed (`1.5GB`).
pub fn parse_byte_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let unit = unit.trim().to_ascii_lowercase();
    let factor: u64 = match unit.as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1_000,
        "m" | "mb" => 1_000_000,
        "g" | "gb" => 1_000_000_000,
        "t" | "tb" => 1_000_000_000_000,
        "p" | "pb" => 1_000_000_000_000_000,
        "ki" | "kib" => 1 << 10,
        "mi" | "mib" => 1 << 20,
        "gi" | "gib" => 1 << 30,
        "ti" | "tib" => 1 << 40,
        "pi" | "pib" => 1 << 50,
        _ => return Err("has an unknown unit (use B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)".into()),
    };
    if number.is_empty() {
        return Err("is not a size (a number of bytes, or e.g. 64MB)".into());
    }
    if let Ok(whole) = number.parse::<u64>() {
        return whole
            .checked_mul(factor)
            .ok_or_else(|| "is larger than 2^64 bytes".to_string());
    }
    let value: f64 = number
        .parse()
        .map_err(|_| "is not a size (a number of bytes, or e.g. 64MB)".to_string())?;
    let bytes = value * factor as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err("is larger than 2^64 bytes".into());
    }
    Ok(bytes.round() as u64)
}

pub(crate) const LIFECYCLE_PREFIX: &str = "RS_LIFECYCLE_";
/// Field suffixes, longest first so `_PROCESSING_INTERVAL` is not read as `_INTERVAL`.
pub(crate) const LIFECYCLE_FIELDS: [&str; 10] = [
    "PROCESSING_INTERVAL",
    "OLDER_THAN",
    "INTERVAL",
    "ENTRIES",
    "BUCKET",
    "NAME",
    "TYPE",
    "WHEN",
    "MODE",
    "REMOTE",
];
/// Server settings that share the prefix.
const OWN_SETTINGS: [&str; 7] = [
    "RS_LIFECYCLE_WORKERS",
    "RS_LIFECYCLE_MIN_INTERVAL",
    "RS_LIFECYCLE_MIN_OLDER_THAN",
    "RS_LIFECYCLE_CATCH_UP_SHARE",
    "RS_LIFECYCLE_MAX_RECORDS_PER_RUN",
    "RS_LIFECYCLE_PRIORITY",
    "RS_LIFECYCLE_MAX_BEHIND",
];

/// A provisioned policy, or why an ID could not become one.
pub type Provisioned = Result<(String, LifecycleSettings), String>;

/// Reads the policies defined by `vars` (e.g. `std::env::vars()`), sorted by ID.
pub fn from_env(vars: impl IntoIterator<Item = (String, String)>) -> Vec<Provisioned> {
    group_by_id(vars, LIFECYCLE_PREFIX, &LIFECYCLE_FIELDS, &OWN_SETTINGS)
        .into_iter()
        .map(|(id, fields)| settings_for(&id, fields))
        .collect()
}

fn settings_for(id: &str, mut fields: BTreeMap<&'static str, String>) -> Provisioned {
    let name = fields
        .remove("NAME")
        .filter(|n| !n.trim().is_empty())
        .ok_or_else(|| format!("{LIFECYCLE_PREFIX}{id}_NAME is missing"))?;
    // Named by the variable the user writes, not by the JSON field it becomes.
    let missing: Vec<String> = ["TYPE", "BUCKET", "OLDER_THAN"]
        .iter()
        .filter(|f| fields.get(*f).is_none_or(|v| v.trim().is_empty()))
        .map(|f| format!("{LIFECYCLE_PREFIX}{id}_{f}"))
        .collect();
    let mut json = Map::new();
    for (field, value) in fields {
        let key = field.to_ascii_lowercase();
        let value = match field {
            "ENTRIES" => Value::Array(
                value
                    .split(',')
                    .map(str::trim)
                    .filter(|e| !e.is_empty())
                    .map(|e| Value::String(e.to_string()))
                    .collect(),
            ),
            "WHEN" => serde_json::from_str(&value)
                .map_err(|e| format!("{LIFECYCLE_PREFIX}{id}_WHEN is not JSON: {e}"))?,
            "TYPE" | "MODE" => Value::String(value.trim().to_ascii_lowercase()),
            _ => Value::String(value.trim().to_string()),
        };
        json.insert(key, value);
    }
    if !missing.is_empty() {
        return Err(format!(
            "lifecycle '{name}': {} {} missing",
            missing.join(", "),
            if missing.len() == 1 { "is" } else { "are" }
        ));
    }
    let text = Value::Object(json).to_string();
    let settings = LifecycleSettings::from_json(text.as_bytes())
        .map_err(|e| format!("lifecycle '{name}' ({LIFECYCLE_PREFIX}{id}_*): {e}"))?;
    Ok((name, settings))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn reads_complete_policies_and_reports_broken_ones() {
        let out = from_env(vars(&[
            ("RS_LIFECYCLE_A_NAME", "old-logs"),
            ("RS_LIFECYCLE_A_TYPE", "DELETE"),
            ("RS_LIFECYCLE_A_BUCKET", "logs"),
            ("RS_LIFECYCLE_A_ENTRIES", "app, sys/*"),
            ("RS_LIFECYCLE_A_OLDER_THAN", "30d"),
            ("RS_LIFECYCLE_A_PROCESSING_INTERVAL", "1h"),
            ("RS_LIFECYCLE_A_WHEN", r#"{"&level": {"$eq": "debug"}}"#),
            ("RS_LIFECYCLE_B_NAME", "no-bucket"),
            ("RS_LIFECYCLE_B_TYPE", "delete"),
            ("RS_LIFECYCLE_B_OLDER_THAN", "1d"),
            ("RS_LIFECYCLE_C_BUCKET", "x"),
            ("RS_LIFECYCLE_D_NAME", "bad-when"),
            ("RS_LIFECYCLE_D_WHEN", "{oops"),
            ("RS_LIFECYCLE_MIN_INTERVAL", "1s"),
            ("RS_LIFECYCLE_WORKERS", "4"),
            ("RS_DATA_PATH", "/x"),
        ]));
        assert_eq!(out.len(), 4, "{out:?}");
        let (name, s) = out[0].as_ref().unwrap();
        assert_eq!(name, "old-logs");
        assert_eq!(s.bucket, "logs");
        assert_eq!(s.entries, vec!["app".to_string(), "sys/*".to_string()]);
        assert_eq!(s.interval, "3600s");
        assert_eq!(s.processing_interval.as_deref(), Some("1h"));
        assert!(s.when.is_some());
        let err = out[1].as_ref().unwrap_err();
        assert_eq!(
            err, "lifecycle 'no-bucket': RS_LIFECYCLE_B_BUCKET is missing",
            "named by its variable"
        );
        let err = out[2].as_ref().unwrap_err();
        assert!(err.contains("RS_LIFECYCLE_C_NAME is missing"), "{err}");
        let err = out[3].as_ref().unwrap_err();
        assert!(err.contains("RS_LIFECYCLE_D_WHEN is not JSON"), "{err}");
    }

    #[test]
    fn reads_buckets_with_sizes_and_names_bad_values() {
        let out = buckets_from_env(vars(&[
            ("RS_BUCKET_1_NAME", "cams"),
            ("RS_BUCKET_1_QUOTA_TYPE", "fifo"),
            ("RS_BUCKET_1_QUOTA_SIZE", "1.5 GB"),
            ("RS_BUCKET_1_MAX_BLOCK_SIZE", "32MiB"),
            ("RS_BUCKET_1_MAX_BLOCK_RECORDS", "4096"),
            ("RS_BUCKET_LOGS_NAME", "logs"),
            ("RS_BUCKET_X_QUOTA_TYPE", "HARD"),
            ("RS_BUCKET_Y_NAME", "y"),
            ("RS_BUCKET_Y_QUOTA_TYPE", "SOFT"),
            ("RS_BUCKET_Z_NAME", "z"),
            ("RS_BUCKET_Z_QUOTA_SIZE", "12 parsecs"),
            ("RS_LIFECYCLE_1_NAME", "not a bucket"),
        ]));
        assert_eq!(out.len(), 5, "{out:?}");
        let (name, s) = out[0].as_ref().expect("bucket 1");
        assert_eq!(name, "cams");
        assert_eq!(
            *s,
            BucketSettingsUpdate {
                quota_type: Some(QuotaType::Fifo),
                quota_size: Some(1_500_000_000),
                max_block_size: Some(32 << 20),
                max_block_records: Some(4096),
            }
        );
        let (name, s) = out[1].as_ref().expect("bucket LOGS");
        assert_eq!(
            (name.as_str(), *s),
            ("logs", BucketSettingsUpdate::default())
        );
        let err = out[2].as_ref().unwrap_err();
        assert_eq!(err, "RS_BUCKET_X_NAME is missing");
        let err = out[3].as_ref().unwrap_err();
        assert!(
            err.contains("RS_BUCKET_Y_QUOTA_TYPE=\"SOFT\" is not NONE"),
            "{err}"
        );
        let err = out[4].as_ref().unwrap_err();
        assert!(
            err.contains("RS_BUCKET_Z_QUOTA_SIZE") && err.contains("unknown unit"),
            "{err}"
        );
    }

    #[test]
    fn byte_sizes_take_the_units_reductstore_takes() {
        for (text, want) in [
            ("0", 0),
            ("1048576", 1_048_576),
            ("1KB", 1_000),
            ("1 kb", 1_000),
            ("64MB", 64_000_000),
            ("2G", 2_000_000_000),
            ("1KiB", 1_024),
            ("512 MiB", 512 << 20),
            ("1.5GiB", 3 << 29),
            ("3TB", 3_000_000_000_000),
            ("7B", 7),
        ] {
            assert_eq!(parse_byte_size(text), Ok(want), "{text}");
        }
        for bad in [
            "",
            "MB",
            "1.2.3MB",
            "-1",
            "1 XB",
            "99999999999999999999",
            "20000PB",
        ] {
            assert!(parse_byte_size(bad).is_err(), "{bad:?}");
        }
    }
}
