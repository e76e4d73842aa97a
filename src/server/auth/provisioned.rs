//! Tokens provisioned from the environment, as ReductStore provisions them: the
//! full-access `init-token` (`RS_API_TOKEN`) and `RS_TOKEN_<ID>_NAME`, `_VALUE`,
//! `_FULL_ACCESS`, `_READ` and `_WRITE` (comma-separated bucket names or patterns) and
//! `_EXPIRES_AT` (RFC 3339: refused as expired from then on, as a created token is). They
//! live in memory only, their values as given, re-applied at every start; the API lists
//! them with `is_provisioned`, and refuses to rotate or remove them (409).

use std::collections::BTreeMap;

use super::{
    INIT_TOKEN, Permissions, StoredToken, TokenRepository, TokenView, constant_time_eq, now_micros,
    random_hex, salted_hash, time_text,
};
use crate::error::{Error, Result};
use crate::server::env_groups::group_by_id;

/// A token given by the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProvisionedToken {
    /// Its name.
    pub name: String,
    /// Its value, as given.
    pub value: String,
    /// What it may do.
    pub permissions: Permissions,
    /// When it stops being accepted (µs since the epoch), if ever.
    pub expires_at: Option<u64>,
}

impl ProvisionedToken {
    /// The `init-token` of `RS_API_TOKEN`: full access.
    pub fn init(value: &str) -> ProvisionedToken {
        ProvisionedToken {
            name: INIT_TOKEN.to_string(),
            value: value.to_string(),
            permissions: Permissions {
                full_access: true,
                ..Default::default()
            },
            expires_at: None,
        }
    }
}

/// The fields of a provisioned token: `RS_TOKEN_<ID>_<FIELD>`.
pub(crate) const TOKEN_FIELDS: [&str; 6] = [
    "NAME",
    "VALUE",
    "FULL_ACCESS",
    "READ",
    "WRITE",
    "EXPIRES_AT",
];

/// The `RS_TOKEN_<ID>_*` tokens among `vars`, by ID; each one that cannot be used (no
/// name or value, a bad name or flag) is an error naming its variables instead.
pub fn tokens_from_env(
    vars: impl IntoIterator<Item = (String, String)>,
) -> Vec<std::result::Result<ProvisionedToken, String>> {
    let by_id = group_by_id(vars, "RS_TOKEN_", &TOKEN_FIELDS, &[]);
    by_id
        .into_iter()
        .map(|(id, fields)| token_of(&id, &fields))
        .collect()
}

fn token_of(
    id: &str,
    fields: &BTreeMap<&'static str, String>,
) -> std::result::Result<ProvisionedToken, String> {
    let prefix = format!("RS_TOKEN_{id}");
    let name = fields
        .get("NAME")
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .ok_or_else(|| format!("{prefix}_NAME is not set"))?;
    crate::storage::names::validate_bucket_name(&name)
        .map_err(|e| format!("{prefix}_NAME: {}", e.message()))?;
    if name == INIT_TOKEN {
        return Err(format!(
            "{prefix}_NAME: '{INIT_TOKEN}' is RS_API_TOKEN's token"
        ));
    }
    let value = fields
        .get("VALUE")
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .ok_or_else(|| format!("{prefix}_VALUE is not set (token '{name}')"))?;
    let full_access = match fields
        .get("FULL_ACCESS")
        .map(|v| v.trim().to_ascii_lowercase())
    {
        None => false,
        Some(v) if matches!(v.as_str(), "true" | "1" | "yes" | "on") => true,
        Some(v) if matches!(v.as_str(), "false" | "0" | "no" | "off" | "") => false,
        Some(v) => {
            return Err(format!(
                "{prefix}_FULL_ACCESS '{}' is not true or false",
                v.escape_default()
            ));
        }
    };
    let list = |field: &str| -> Vec<String> {
        fields
            .get(field)
            .map(|v| {
                v.split(',')
                    .map(str::trim)
                    .filter(|b| !b.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default()
    };
    let expires_at = match fields.get("EXPIRES_AT").map(|v| v.trim()) {
        None | Some("") => None,
        Some(text) => Some(crate::timefmt::parse_rfc3339(text).ok_or_else(|| {
            format!(
                "{prefix}_EXPIRES_AT '{}' is not an RFC 3339 time (e.g. 2027-01-31T00:00:00Z)",
                text.escape_default()
            )
        })?),
    };
    Ok(ProvisionedToken {
        name,
        value,
        permissions: Permissions {
            full_access,
            read: list("READ"),
            write: list("WRITE"),
        },
        expires_at,
    })
}

impl TokenRepository {
    /// Adds tokens from the environment (a stored token of the same name is hidden
    /// behind it, with a WARN: the environment is what the operator asked for now).
    pub fn with_provisioned(mut self, tokens: Vec<ProvisionedToken>) -> Result<TokenRepository> {
        for token in tokens {
            if self.provisioned(&token.name).is_some() {
                return Err(Error::unprocessable(format!(
                    "token '{}' is provisioned twice",
                    token.name
                )));
            }
            if self.lock().tokens.contains_key(&token.name) {
                log::warn!(
                    "token '{}' is provisioned from the environment: the stored token of that name is not accepted while it is",
                    token.name
                );
            }
            log::info!("token '{}' provisioned", token.name);
            self.provisioned.push(token);
        }
        Ok(self)
    }

    /// The provisioned token `name`.
    pub(super) fn provisioned(&self, name: &str) -> Option<&ProvisionedToken> {
        self.provisioned.iter().find(|t| t.name == name)
    }

    /// The provisioned token whose value is `value`; every one is compared, each in
    /// constant time, so the time taken says nothing about which one matched.
    pub(super) fn provisioned_by_value(&self, value: &str) -> Option<&ProvisionedToken> {
        let mut found = None;
        for token in &self.provisioned {
            if constant_time_eq(value.as_bytes(), token.value.as_bytes()) {
                found = Some(token);
            }
        }
        found
    }

    /// `RS_INIT_API_TOKEN`, as ReductStore 1.21 takes it: a full-access `init-token`
    /// with that value is created (stored, so it can then be rotated or removed like any
    /// other) unless a stored `init-token` exists already.
    pub fn with_init_token(self, value: &str) -> Result<TokenRepository> {
        {
            let mut st = self.lock();
            if st.tokens.contains_key(INIT_TOKEN) {
                log::info!(
                    "RS_INIT_API_TOKEN: '{INIT_TOKEN}' exists already (created earlier): left as it is"
                );
            } else {
                let salt = random_hex(16)?;
                let token = StoredToken {
                    name: INIT_TOKEN.to_string(),
                    hash: format!("sha256:{salt}:{}", salted_hash(&salt, value)),
                    created_at: now_micros(),
                    permissions: ProvisionedToken::init(value).permissions,
                    expires_at: None,
                    ttl: None,
                    ip_allowlist: Vec::new(),
                    last_used: None,
                    chosen_value: true,
                };
                let mut next = st.tokens.clone();
                next.insert(INIT_TOKEN.to_string(), token);
                self.save(&next)?;
                st.tokens = next;
                log::info!("RS_INIT_API_TOKEN: '{INIT_TOKEN}' created");
            }
        }
        Ok(self)
    }

    /// The stored token with an operator-chosen value equal to `value` (each is tried,
    /// in constant time).
    pub(super) fn chosen_value_token<'a>(
        &self,
        tokens: &'a BTreeMap<String, StoredToken>,
        value: &str,
    ) -> Option<&'a StoredToken> {
        let mut found = None;
        for token in tokens.values().filter(|t| t.chosen_value) {
            if token.value_is(value) {
                found = Some(token);
            }
        }
        found
    }

    /// How the API shows a provisioned token.
    pub(super) fn provisioned_view(&self, token: &ProvisionedToken) -> TokenView {
        TokenView {
            name: token.name.clone(),
            value: String::new(),
            created_at: time_text(self.started),
            permissions: token.permissions.clone(),
            is_provisioned: true,
            expires_at: token.expires_at.map(time_text),
            ttl: None,
            last_access: None,
            ip_allowlist: Vec::new(),
            is_expired: token.expires_at.is_some_and(|at| now_micros() >= at),
        }
    }
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
    fn tokens_come_from_their_variables_and_bad_ones_are_named() {
        let found = tokens_from_env(vars(&[
            ("RS_TOKEN_A_NAME", "reader"),
            ("RS_TOKEN_A_VALUE", "secret-a"),
            ("RS_TOKEN_A_READ", "cams, logs*"),
            ("RS_TOKEN_B_NAME", "admin"),
            ("RS_TOKEN_B_VALUE", "secret-b"),
            ("RS_TOKEN_B_FULL_ACCESS", "TRUE"),
            ("RS_TOKEN_C_NAME", "novalue"),
            ("RS_TOKEN_D_NAME", "flag"),
            ("RS_TOKEN_D_VALUE", "v"),
            ("RS_TOKEN_D_FULL_ACCESS", "maybe"),
            ("RS_PORT", "1"),
        ]));
        assert_eq!(found.len(), 4);
        let a = found[0].as_ref().expect("A");
        assert_eq!(a.name, "reader");
        assert_eq!(a.permissions.read, vec!["cams", "logs*"]);
        assert!(!a.permissions.full_access);
        assert!(found[1].as_ref().expect("B").permissions.full_access);
        let c = found[2].as_ref().expect_err("C");
        assert!(c.contains("RS_TOKEN_C_VALUE"), "{c}");
        let d = found[3].as_ref().expect_err("D");
        assert!(d.contains("RS_TOKEN_D_FULL_ACCESS 'maybe'"), "{d}");
    }
}
