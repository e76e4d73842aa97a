//! ReductStore settings halflife does not implement. Each one set in the environment is
//! named in a warning at start, so a setting copied from a ReductStore deployment is never
//! dropped silently (TLS or a base path a user relies on would otherwise just not
//! happen).

/// Settings read by ReductStore 1.21 that this server ignores.
const IGNORED: [&str; 9] = [
    "RS_AUDIT_ENABLED",
    "RS_ENGINE_COMPACTION_INTERVAL",
    "RS_ENGINE_NUM_IO_THREADS",
    "RS_ENGINE_REPLICATION_INTERVAL",
    "RS_EXT_PATH",
    "RS_IO_BATCH_RECORDS_TIMEOUT",
    "RS_IO_BATCH_TIMEOUT",
    "RS_LICENSE_PATH",
    "RS_SECONDARY_SYNC_INTERVAL",
];

/// The ignored ReductStore settings among `vars` (e.g. `std::env::vars()`), sorted.
pub fn unsupported_settings(vars: impl IntoIterator<Item = (String, String)>) -> Vec<String> {
    let mut found: Vec<String> = vars
        .into_iter()
        .map(|(k, _)| k)
        .filter(|k| IGNORED.contains(&k.as_str()))
        .collect();
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ignored_settings_are_named_and_ours_are_not() {
        let vars = [
            "RS_CERT_PATH",
            "RS_ENGINE_NUM_IO_THREADS",
            "RS_PORT",
            "RS_BUCKET_1_NAME",
            "RS_TOKEN_1_NAME",
            "RS_LIFECYCLE_1_NAME",
            "RS_CORS_ALLOW_ORIGIN",
            "RS_API_BASE_PATH",
            "HOME",
        ]
        .map(|k| (k.to_string(), "x".to_string()));
        assert_eq!(unsupported_settings(vars), vec!["RS_ENGINE_NUM_IO_THREADS"]);
    }
}
