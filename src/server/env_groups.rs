//! The grouping every provisioning family of variables shares: `RS_<FAMILY>_<ID>_<FIELD>`
//! gathered by ID. A leaf below them all, so the families (buckets and policies in `provision/mod.rs`,
//! replications in `provision/replications.rs`, tokens in `auth/provisioned.rs`) each use
//! it without using each other.

use std::collections::BTreeMap;

/// Groups `PREFIX<ID>_<FIELD>` variables by ID, skipping the server's own settings that
/// share the prefix.
pub(crate) fn group_by_id(
    vars: impl IntoIterator<Item = (String, String)>,
    prefix: &str,
    fields: &[&'static str],
    own_settings: &[&str],
) -> BTreeMap<String, BTreeMap<&'static str, String>> {
    let mut by_id: BTreeMap<String, BTreeMap<&'static str, String>> = BTreeMap::new();
    for (key, value) in vars {
        if own_settings.contains(&key.as_str()) {
            continue;
        }
        let Some(rest) = key.strip_prefix(prefix) else {
            continue;
        };
        for &field in fields {
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
}
