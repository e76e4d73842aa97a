//! What the rest of the server asks of the tokens besides authenticating: the issuer
//! of a query link, the last use the audit trail recorded, a bucket rename to follow.

use super::{Caller, INIT_TOKEN, TokenRepository, now_micros, salted_hash, unauthorized};
use crate::error::{Error, Result};

impl TokenRepository {
    /// Notes that `name` was last used at `at` (µs), unless a later use is known: the
    /// audit trail's newest event of the token, read at start.
    pub fn note_last_access(&self, name: &str, at: u64) {
        let mut st = self.lock();
        if !st.tokens.contains_key(name) {
            return;
        }
        let known = st.last_access.entry(name.to_string()).or_insert(at);
        *known = (*known).max(at);
    }

    /// The issuer of a query link, checked now: its stored secret (what signs its links,
    /// so rotating or removing the token voids them) and what it may do. 404 for a token
    /// that does not exist (any more), 401 for an expired one.
    pub fn link_issuer(&self, name: &str) -> Result<(Vec<u8>, Caller)> {
        if let Some(token) = self.provisioned(name) {
            // Salted with the name, so two provisioned tokens never share a secret.
            let salt = if name == INIT_TOKEN {
                "halflife-init-token-link".to_string()
            } else {
                format!("halflife-provisioned-link-{name}")
            };
            let secret = salted_hash(&salt, &token.value);
            return Ok((
                secret.into_bytes(),
                Caller {
                    name: token.name.clone(),
                    permissions: token.permissions.clone(),
                },
            ));
        }
        let st = self.lock();
        let token = st
            .tokens
            .get(name)
            .ok_or_else(|| Error::not_found(format!("Token '{name}' doesn't exist")))?;
        if Self::is_expired(token, st.last_access.get(name).copied(), now_micros()) {
            return Err(unauthorized("Token has expired"));
        }
        Ok((
            token.hash.clone().into_bytes(),
            Caller {
                name: token.name.clone(),
                permissions: token.permissions.clone(),
            },
        ))
    }

    /// Follows a bucket rename: every permission list item equal to `old` becomes
    /// `new` (patterns such as `old*` are left alone, as ReductStore does), written
    /// atomically before memory changes. Returns how many tokens changed; idempotent, so
    /// a rename finished after a crash can apply it again.
    pub fn rename_bucket(&self, old: &str, new: &str) -> Result<usize> {
        let mut st = self.lock();
        let mut next = st.tokens.clone();
        let mut changed = 0;
        for token in next.values_mut() {
            let lists = [&mut token.permissions.read, &mut token.permissions.write];
            let mut touched = false;
            for item in lists.into_iter().flatten().filter(|i| i.as_str() == old) {
                *item = new.to_string();
                touched = true;
            }
            changed += usize::from(touched);
        }
        if changed > 0 {
            self.save(&next)?;
            st.tokens = next;
        }
        Ok(changed)
    }
}
