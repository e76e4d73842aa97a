//! Lifecycle policies provisioned from the environment:
//! `RS_LIFECYCLE_<ID>_NAME / _TYPE / _BUCKET / _ENTRIES / _OLDER_THAN / _INTERVAL / _WHEN /
//! _PROCESSING_INTERVAL / _MODE`. A policy exists for every `<ID>` with a `_NAME`; the IDs
//! `MIN` and `WORKERS` are taken by the server's own `RS_LIFECYCLE_*` settings.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::lifecycle::LifecycleSettings;

const PREFIX: &str = "RS_LIFECYCLE_";
/// Field suffixes, longest first so `_PROCESSING_INTERVAL` is not read as `_INTERVAL`.
const FIELDS: [&str; 9] = [
    "PROCESSING_INTERVAL",
    "OLDER_THAN",
    "INTERVAL",
    "ENTRIES",
    "BUCKET",
    "NAME",
    "TYPE",
    "WHEN",
    "MODE",
];
/// Server settings that share the prefix.
const OWN_SETTINGS: [&str; 3] = [
    "RS_LIFECYCLE_WORKERS",
    "RS_LIFECYCLE_MIN_INTERVAL",
    "RS_LIFECYCLE_MIN_OLDER_THAN",
];

/// A provisioned policy, or why an ID could not become one.
pub type Provisioned = Result<(String, LifecycleSettings), String>;

/// Reads the policies defined by `vars` (e.g. `std::env::vars()`), sorted by ID.
pub fn from_env(vars: impl IntoIterator<Item = (String, String)>) -> Vec<Provisioned> {
    let mut by_id: BTreeMap<String, BTreeMap<&'static str, String>> = BTreeMap::new();
    for (key, value) in vars {
        if OWN_SETTINGS.contains(&key.as_str()) {
            continue;
        }
        let Some(rest) = key.strip_prefix(PREFIX) else {
            continue;
        };
        for field in FIELDS {
            if let Some(id) = rest.strip_suffix(field).and_then(|r| r.strip_suffix('_'))
                && !id.is_empty()
            {
                by_id
                    .entry(id.to_string())
                    .or_default()
                    .insert(field, value.clone());
                break;
            }
        }
    }
    by_id
        .into_iter()
        .map(|(id, fields)| settings_for(&id, fields))
        .collect()
}

fn settings_for(id: &str, mut fields: BTreeMap<&'static str, String>) -> Provisioned {
    let name = fields
        .remove("NAME")
        .filter(|n| !n.trim().is_empty())
        .ok_or_else(|| format!("{PREFIX}{id}_NAME is missing"))?;
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
                .map_err(|e| format!("{PREFIX}{id}_WHEN is not JSON: {e}"))?,
            "TYPE" | "MODE" => Value::String(value.trim().to_ascii_lowercase()),
            _ => Value::String(value.trim().to_string()),
        };
        json.insert(key, value);
    }
    let text = Value::Object(json).to_string();
    let settings = LifecycleSettings::from_json(text.as_bytes())
        .map_err(|e| format!("lifecycle '{name}' ({PREFIX}{id}_*): {e}"))?;
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
        assert!(err.contains("bucket"), "{err}");
        let err = out[2].as_ref().unwrap_err();
        assert!(err.contains("RS_LIFECYCLE_C_NAME is missing"), "{err}");
        let err = out[3].as_ref().unwrap_err();
        assert!(err.contains("RS_LIFECYCLE_D_WHEN is not JSON"), "{err}");
    }
}
