//! `RS_*` settings `halflife serve` does not read. Each one set in the environment is
//! named in a warning at start, so a setting copied from a ReductStore deployment (or
//! misspelt) is never dropped silently. The list is derived, not kept by hand: every
//! `RS_*` variable that is neither one of `serve`'s options (their variables come from
//! the command line's definition), nor read by the logger, nor one of the provisioning
//! families' fields (taken from the provisioning code's own lists), is named.

use std::collections::HashSet;

/// ReductStore 1.21 settings this server knowingly ignores: named with that reason.
/// (`tests/cli/settings.rs` checks every variable 1.21.5's documents list is either read
/// or named so.)
const REDUCTSTORE_ONLY: [&str; 21] = [
    "RS_AUDIT_ENABLED",
    "RS_ENGINE_COMPACTION_INTERVAL",
    "RS_ENGINE_ENABLE_INTEGRITY_CHECKS",
    "RS_ENGINE_NUM_IO_THREADS",
    "RS_ENGINE_REPLICATION_INTERVAL",
    "RS_EXT_PATH",
    "RS_IO_BATCH_RECORDS_TIMEOUT",
    "RS_IO_BATCH_TIMEOUT",
    "RS_IO_MAX_WRITERS_IN_FLIGHT",
    "RS_LICENSE_PATH",
    "RS_REMOTE_ACCESS_KEY",
    "RS_REMOTE_BACKEND_TYPE",
    "RS_REMOTE_BUCKET",
    "RS_REMOTE_CACHE_PATH",
    "RS_REMOTE_DEFAULT_STORAGE_CLASS",
    "RS_REMOTE_ENDPOINT",
    "RS_REMOTE_REGION",
    "RS_REMOTE_SECRET_KEY",
    "RS_REMOTE_SESSION_TOKEN",
    "RS_REMOTE_SYNC_INTERVAL",
    "RS_SECONDARY_SYNC_INTERVAL",
];

/// Variables read outside `serve`'s options.
const READ_ELSEWHERE: [&str; 1] = ["RS_LOG_LEVEL"];

/// Whether `name` is one provisioning reads: `<PREFIX><ID>_<FIELD>` with a field that
/// family knows (a misspelt field is named, not swallowed by the prefix), or one of
/// `RS_DEFAULTS_BUCKET_<FIELD>`.
fn provisioned(name: &str) -> bool {
    use crate::server::auth::provisioned::TOKEN_FIELDS;
    use crate::server::provision::replications::{REPLICATION_FIELDS, REPLICATION_PREFIX};
    use crate::server::provision::{
        BUCKET_FIELDS, BUCKET_PREFIX, DEFAULTS_PREFIX, LIFECYCLE_FIELDS, LIFECYCLE_PREFIX,
    };
    use crate::storage::remote::settings::REMOTE_VARIABLES;
    let with_id = |prefix: &str, fields: &[&str]| {
        name.strip_prefix(prefix).is_some_and(|rest| {
            fields.iter().any(|field| {
                rest.strip_suffix(field)
                    .and_then(|id| id.strip_suffix('_'))
                    .is_some_and(|id| !id.is_empty())
            })
        })
    };
    with_id(BUCKET_PREFIX, &BUCKET_FIELDS)
        || name
            .strip_prefix(DEFAULTS_PREFIX)
            .is_some_and(|field| field != "NAME" && BUCKET_FIELDS.contains(&field))
        || with_id("RS_TOKEN_", &TOKEN_FIELDS)
        || with_id(LIFECYCLE_PREFIX, &LIFECYCLE_FIELDS)
        || with_id(REPLICATION_PREFIX, &REPLICATION_FIELDS)
        || with_id("RS_REMOTE_", &REMOTE_VARIABLES)
}

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
                || !(options.contains(k) || READ_ELSEWHERE.contains(&k.as_str()) || provisioned(k))
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
        let options: HashSet<String> = [
            "RS_CERT_PATH",
            "RS_PORT",
            "RS_CORS_ALLOW_ORIGIN",
            "RS_ENGINE_MAX_STORAGE_SIZE",
        ]
        .map(String::from)
        .into();
        let vars = [
            "RS_CERT_PATH",
            "RS_ENGINE_NUM_IO_THREADS",
            "RS_ENGINE_MAX_STORAGE_SIZE",
            "RS_ENGINE_COMPACTION_INTERVAL",
            "RS_RATE_LIMIT_WINDOW",
            "RS_PORT",
            "RS_PROT",
            "RS_BUCKET_1_NAME",
            "RS_BUCKET_1_QUOTA_SIEZ",
            "RS_TOKEN_1_NAME",
            "RS_LIFECYCLE_1_NAME",
            "RS_REMOTE_COLD_ENDPOINT",
            "RS_REMOTE_BUCKET",
            "RS_DEFAULTS_BUCKET_QUOTA_TYPE",
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
                ("RS_BUCKET_1_QUOTA_SIEZ", false),
                ("RS_ENGINE_COMPACTION_INTERVAL", true),
                ("RS_ENGINE_NUM_IO_THREADS", true),
                ("RS_PROT", false),
                ("RS_RATE_LIMIT_WINDOW", true),
                ("RS_REMOTE_BUCKET", true),
            ]
        );
        assert!(found[3].warning().contains("misspelt"));
    }
}
