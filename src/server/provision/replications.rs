//! Replication tasks provisioned from the environment (`docs/replication.md`):
//! `RS_REPLICATION_<ID>_NAME / _SRC_BUCKET / _DST_BUCKET / _DST_HOST / _DST_TOKEN /
//! _ENTRIES / _DST_PREFIX / _WHEN / _COMPRESSION / _MODE`. The server's own
//! `RS_REPLICATION_TIMEOUT`, `_LOG_SIZE`, `_VERIFY_SSL` and `_CA_PATH` share the prefix
//! and are not tasks.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::replication::ReplicationSettings;
use crate::server::env_groups::group_by_id;

pub(crate) const REPLICATION_PREFIX: &str = "RS_REPLICATION_";
/// Field suffixes, longest first so `_DST_PREFIX` is not read as another field's tail.
pub(crate) const REPLICATION_FIELDS: [&str; 10] = [
    "COMPRESSION",
    "SRC_BUCKET",
    "DST_BUCKET",
    "DST_PREFIX",
    "DST_TOKEN",
    "DST_HOST",
    "ENTRIES",
    "NAME",
    "WHEN",
    "MODE",
];
/// Server settings that share the prefix.
const OWN_SETTINGS: [&str; 4] = [
    "RS_REPLICATION_TIMEOUT",
    "RS_REPLICATION_LOG_SIZE",
    "RS_REPLICATION_VERIFY_SSL",
    "RS_REPLICATION_CA_PATH",
];

/// A provisioned task (its name, settings, and whether `_MODE` was given), or why an ID
/// could not become one.
pub type ProvisionedReplication = Result<(String, ReplicationSettings, bool), String>;

/// Reads the tasks defined by `vars` (e.g. `std::env::vars()`), sorted by ID.
pub fn replications_from_env(
    vars: impl IntoIterator<Item = (String, String)>,
) -> Vec<ProvisionedReplication> {
    let vars: Vec<(String, String)> = vars.into_iter().collect();
    // The deprecated label and sampling fields are not read: said, not dropped silently.
    let deprecated = vars.iter().filter_map(|(k, _)| {
        let rest = k.strip_prefix(REPLICATION_PREFIX)?;
        let old = rest.contains("_INCLUDE_")
            || rest.contains("_EXCLUDE_")
            || rest.ends_with("_EACH_N")
            || rest.ends_with("_EACH_S");
        old.then(|| Err(format!("{k} is not supported: write the filter as _WHEN")))
    });
    let tasks = group_by_id(
        vars.iter().cloned(),
        REPLICATION_PREFIX,
        &REPLICATION_FIELDS,
        &OWN_SETTINGS,
    )
    .into_iter()
    .map(|(id, fields)| settings_for(&id, fields));
    deprecated.chain(tasks).collect()
}

fn settings_for(id: &str, mut fields: BTreeMap<&'static str, String>) -> ProvisionedReplication {
    let name = fields
        .remove("NAME")
        .filter(|n| !n.trim().is_empty())
        .ok_or_else(|| format!("{REPLICATION_PREFIX}{id}_NAME is missing"))?;
    for (field, what) in [
        ("SRC_BUCKET", "source bucket"),
        ("DST_BUCKET", "destination bucket"),
        ("DST_HOST", "destination host"),
    ] {
        if fields.get(field).is_none_or(|v| v.trim().is_empty()) {
            return Err(format!("Replication '{name}' has no {what}. Drop it."));
        }
    }
    let mode_given = fields.contains_key("MODE");
    let mut json = Map::new();
    for (field, value) in fields {
        let key = field.to_ascii_lowercase();
        let value = match field {
            // Comma-split, not trimmed (as 1.21.5).
            "ENTRIES" => Value::Array(
                value
                    .split(',')
                    .filter(|e| !e.is_empty())
                    .map(|e| Value::String(e.to_string()))
                    .collect(),
            ),
            "WHEN" => serde_json::from_str(&value)
                .map_err(|e| format!("{REPLICATION_PREFIX}{id}_WHEN is not JSON: {e}"))?,
            "COMPRESSION" | "MODE" => Value::String(value.trim().to_ascii_lowercase()),
            // Provisioned hosts are normalised with a trailing `/`.
            "DST_HOST" => {
                let host = value.trim();
                Value::String(if host.ends_with('/') {
                    host.to_string()
                } else {
                    format!("{host}/")
                })
            }
            _ => Value::String(value),
        };
        json.insert(key, value);
    }
    let text = Value::Object(json).to_string();
    let settings = ReplicationSettings::from_json(text.as_bytes())
        .map_err(|e| format!("replication '{name}' ({REPLICATION_PREFIX}{id}_*): {e}"))?;
    Ok((name, settings, mode_given))
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
    fn reads_complete_tasks_and_reports_broken_ones() {
        let found = replications_from_env(vars(&[
            ("RS_REPLICATION_A_NAME", "edge"),
            ("RS_REPLICATION_A_SRC_BUCKET", "src"),
            ("RS_REPLICATION_A_DST_BUCKET", "dst"),
            ("RS_REPLICATION_A_DST_HOST", "http://cloud:8383"),
            ("RS_REPLICATION_A_DST_TOKEN", "secret"),
            ("RS_REPLICATION_A_ENTRIES", "cam*, log"),
            ("RS_REPLICATION_A_DST_PREFIX", "site-1"),
            ("RS_REPLICATION_A_WHEN", r#"{"&keep": {"$eq": "yes"}}"#),
            ("RS_REPLICATION_A_COMPRESSION", "ZSTD"),
            ("RS_REPLICATION_B_NAME", "broken"),
            ("RS_REPLICATION_B_SRC_BUCKET", "src"),
            ("RS_REPLICATION_B_DST_HOST", "http://x"),
            ("RS_REPLICATION_TIMEOUT", "3"),
            ("RS_REPLICATION_LOG_SIZE", "10"),
        ]));
        assert_eq!(found.len(), 2, "{found:?}");
        let (name, settings, mode_given) = found[0].clone().expect("task A");
        assert_eq!(name, "edge");
        assert!(!mode_given);
        assert_eq!(settings.dst_host, "http://cloud:8383/");
        assert_eq!(settings.entries, vec!["cam*", " log"]);
        assert_eq!(settings.dst_token.as_deref(), Some("secret"));
        assert_eq!(
            settings.compression,
            crate::replication::ReplicationCompression::Zstd
        );
        assert_eq!(
            found[1].clone().unwrap_err(),
            "Replication 'broken' has no destination bucket. Drop it."
        );
    }
}
