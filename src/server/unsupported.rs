//! `RS_*` settings `halflife serve` does not read. Each one set in the environment is
//! named in a warning at start, so a setting copied from a ReductStore deployment (or
//! misspelt) is never dropped silently. The list is derived, not kept by hand: every
//! `RS_*` variable that is neither one of `serve`'s options (their variables come from
//! the command line's definition), nor read by the logger, nor in a family provisioning
//! reads by prefix, is named.

use std::collections::HashSet;

/// ReductStore 1.21 settings this server knowingly ignores: named with that reason.
const REDUCTSTORE_ONLY: [&str; 13] = [
    "RS_AUDIT_ENABLED",
    "RS_ENGINE_COMPACTION_INTERVAL",
    "RS_ENGINE_MAX_STORAGE_SIZE",
    "RS_ENGINE_NUM_IO_THREADS",
    "RS_ENGINE_REPLICATION_INTERVAL",
    "RS_EXT_PATH",
    "RS_IO_BATCH_RECORDS_TIMEOUT",
    "RS_IO_BATCH_TIMEOUT",
    "RS_IO_MAX_WRITERS_IN_FLIGHT",
    "RS_LICENSE_PATH",
    "RS_RATE_LIMIT_ENABLED",
    "RS_RATE_LIMIT_REQUESTS",
    "RS_SECONDARY_SYNC_INTERVAL",
];

/// Variables read outside `serve`'s options.
const READ_ELSEWHERE: [&str; 1] = ["RS_LOG_LEVEL"];

/// Families of variables provisioning reads by prefix (`RS_BUCKET_<ID>_NAME`, …).
const FAMILIES: [&str; 6] = [
    "RS_BUCKET_",
    "RS_DEFAULTS_BUCKET_",
    "RS_TOKEN_",
    "RS_LIFECYCLE_",
    "RS_REPLICATION_",
    "RS_REMOTE_",
];

/// A setting found in the environment that nothing reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unread {
    /// The variable.
    pub name: String,
    /// Whether it is a ReductStore setting halflife does not implement (else unknown).
    pub reductstore: bool,
}

impl Unread {
    /// The warning that names it.
    pub fn warning(&self) -> String {
        if self.reductstore {
            format!(
                "{} is a ReductStore setting halflife does not implement: it is ignored",
                self.name
            )
        } else {
            format!(
                "{} is not a setting halflife reads (misspelt?): it is ignored; `halflife serve --help` lists every one",
                self.name
            )
        }
    }
}

/// The `RS_*` variables among `vars` (e.g. `std::env::vars()`) that nothing reads, given
/// `options`, the variables of `serve`'s options; sorted.
pub fn unread_settings(
    vars: impl IntoIterator<Item = (String, String)>,
    options: &HashSet<String>,
) -> Vec<Unread> {
    let mut found: Vec<Unread> = vars
        .into_iter()
        .map(|(k, _)| k)
        .filter(|k| k.starts_with("RS_"))
        .filter(|k| {
            REDUCTSTORE_ONLY.contains(&k.as_str())
                || !(options.contains(k)
                    || READ_ELSEWHERE.contains(&k.as_str())
                    || FAMILIES.iter().any(|f| k.starts_with(f)))
        })
        .map(|name| Unread {
            reductstore: REDUCTSTORE_ONLY.contains(&name.as_str())
                || name.starts_with("RS_RATE_LIMIT_"),
            name,
        })
        .collect();
    found.sort_by(|a, b| a.name.cmp(&b.name));
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_nothing_reads_are_named_and_ours_are_not() {
        let options: HashSet<String> = ["RS_CERT_PATH", "RS_PORT", "RS_CORS_ALLOW_ORIGIN"]
            .map(String::from)
            .into();
        let vars = [
            "RS_CERT_PATH",
            "RS_ENGINE_NUM_IO_THREADS",
            "RS_ENGINE_MAX_STORAGE_SIZE",
            "RS_RATE_LIMIT_WINDOW",
            "RS_PORT",
            "RS_PROT",
            "RS_BUCKET_1_NAME",
            "RS_TOKEN_1_NAME",
            "RS_LIFECYCLE_1_NAME",
            "RS_CORS_ALLOW_ORIGIN",
            "RS_LOG_LEVEL",
            "HOME",
        ]
        .map(|k| (k.to_string(), "x".to_string()));
        let found = unread_settings(vars, &options);
        let named: Vec<(&str, bool)> = found
            .iter()
            .map(|u| (u.name.as_str(), u.reductstore))
            .collect();
        assert_eq!(
            named,
            vec![
                ("RS_ENGINE_MAX_STORAGE_SIZE", true),
                ("RS_ENGINE_NUM_IO_THREADS", true),
                ("RS_PROT", false),
                ("RS_RATE_LIMIT_WINDOW", true),
            ]
        );
        assert!(found[2].warning().contains("misspelt"));
    }
}
