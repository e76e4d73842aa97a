//! API tokens and their permissions, as ReductStore 1.21 has them: a provisioned
//! full-access `init-token` (the `RS_API_TOKEN` value), and tokens created over the API
//! with `{full_access, read: [buckets], write: [buckets]}` (bucket names may end in `*`),
//! an optional expiry date, inactivity TTL and IP allowlist.
//!
//! A token's value (`<name>-<32 hex>`) is shown once, at creation or rotation; the data
//! directory keeps only `sha256:<salt>:<SHA-256(salt ‖ value)>` in `<data>/.tokens`,
//! replaced atomically (write, fsync, rename) like every other definition file. Values are
//! compared in constant time.
//!
//! Files: this one (tokens, permissions, authentication); `provisioned.rs` (tokens from
//! `RS_TOKEN_*`); `beyond_auth.rs` (what the rest of the server asks of tokens); `proxies.rs`
//! (which address a request comes from, behind trusted proxies); `stored_file.rs` (reading
//! `.tokens`, and a replica following it).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::UNIX_EPOCH;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, ErrorKind, Result};
use crate::storage::sync::fsutil::write_atomic;
use crate::timefmt::{parse_rfc3339, rfc3339};

/// File of the created tokens in the data directory.
pub const TOKENS_FILE: &str = ".tokens";
/// Name of the provisioned full-access token whose value is `RS_API_TOKEN`.
pub const INIT_TOKEN: &str = "init-token";

/// What a token may do.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Permissions {
    /// Everything, settings and tokens included.
    #[serde(default)]
    pub full_access: bool,
    /// Buckets it may read (names, `prefix*`, `*`).
    #[serde(default)]
    pub read: Vec<String>,
    /// Buckets it may write.
    #[serde(default)]
    pub write: Vec<String>,
}

/// A token as the API shows it: ReductStore's keys, in its order; the value is always
/// empty (it is shown once, at creation or rotation).
#[derive(Debug, Clone, Serialize)]
pub struct TokenView {
    /// Token name.
    pub name: String,
    /// Always empty here.
    pub value: String,
    /// RFC 3339.
    pub created_at: String,
    /// What it may do.
    pub permissions: Permissions,
    /// Given by the environment (`RS_API_TOKEN`, `RS_TOKEN_<ID>_*`): it cannot be
    /// rotated or removed over the API.
    pub is_provisioned: bool,
    /// RFC 3339, if it expires.
    pub expires_at: Option<String>,
    /// Seconds of inactivity after which it expires.
    pub ttl: Option<u64>,
    /// RFC 3339 of its last use since the server started.
    pub last_access: Option<String>,
    /// Client addresses or CIDR blocks it is limited to.
    pub ip_allowlist: Vec<String>,
    /// Past its expiry date or inactivity TTL.
    pub is_expired: bool,
}

/// What a request needs.
#[derive(Debug, Clone, Copy)]
pub enum Access<'a> {
    /// Any valid token.
    Any,
    /// Read access to this bucket.
    Read(&'a str),
    /// Write access to this bucket.
    Write(&'a str),
    /// Full access.
    Full,
}

/// An authenticated caller.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The token's name.
    pub name: String,
    /// What it may do.
    pub permissions: Permissions,
}

impl Caller {
    /// 403 unless the token allows `access`, worded as ReductStore words it.
    pub fn check(&self, access: Access) -> Result<()> {
        let p = &self.permissions;
        let (allowed, what) = match access {
            Access::Any => (true, String::new()),
            Access::Full => (p.full_access, "full access".to_string()),
            Access::Read(bucket) => (
                p.full_access || p.read.iter().any(|m| bucket_matches(m, bucket)),
                format!("read access to bucket '{bucket}'"),
            ),
            Access::Write(bucket) => (
                p.full_access || p.write.iter().any(|m| bucket_matches(m, bucket)),
                format!("write access to bucket '{bucket}'"),
            ),
        };
        if allowed {
            return Ok(());
        }
        Err(Error::forbidden(format!(
            "Token '{}' doesn't have {what}",
            self.name
        )))
    }
}

/// Whether a permission entry names a bucket: exactly, or as a prefix ending in `*`
/// (`*` alone: every bucket). System buckets (`$…`) only match exactly.
fn bucket_matches(pattern: &str, bucket: &str) -> bool {
    if pattern == bucket {
        return true;
    }
    if bucket.starts_with('$') {
        return false;
    }
    pattern
        .strip_suffix('*')
        .is_some_and(|prefix| bucket.starts_with(prefix))
}

/// A token as the data directory keeps it (no value, only its salted hash).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredToken {
    name: String,
    hash: String,
    /// µs since the epoch.
    created_at: u64,
    permissions: Permissions,
    /// µs since the epoch.
    expires_at: Option<u64>,
    /// Seconds of inactivity after which it expires.
    ttl: Option<u64>,
    ip_allowlist: Vec<String>,
    /// When it was last used (µs), kept to a quarter of its TTL (at most a minute) so an
    /// inactivity TTL survives a restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_used: Option<u64>,
    /// Its value was chosen by the operator (`RS_INIT_API_TOKEN`), not made by us: it
    /// does not start with the name, so it is found by trying each such token.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    chosen_value: bool,
}

impl StoredToken {
    /// Whether `value` is this token's (in constant time).
    fn value_is(&self, value: &str) -> bool {
        let mut parts = self.hash.splitn(3, ':');
        match (parts.next(), parts.next(), parts.next()) {
            (Some("sha256"), Some(salt), Some(hash)) => {
                constant_time_eq(salted_hash(salt, value).as_bytes(), hash.as_bytes())
            }
            _ => false,
        }
    }
}

/// How stale the kept last use of a token may get before it is written again (less for
/// a TTL under four minutes).
const LAST_USE_GRANULARITY: u64 = 60_000_000;

/// The body of `POST /tokens/{name}`: the 1.21 form, or the bare permissions (legacy).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    #[serde(default)]
    permissions: Permissions,
    expires_at: Option<String>,
    ttl: Option<u64>,
    #[serde(default)]
    ip_allowlist: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LegacyBody {
    #[serde(default)]
    full_access: bool,
    #[serde(default)]
    read: Vec<String>,
    #[serde(default)]
    write: Vec<String>,
    #[serde(default)]
    ip_allowlist: Vec<String>,
}

/// The tokens of a server.
pub struct TokenRepository {
    path: PathBuf,
    /// The tokens the environment gives: the `init-token` (`RS_API_TOKEN`) and the
    /// `RS_TOKEN_<ID>_*` ones.
    provisioned: Vec<ProvisionedToken>,
    started: u64,
    state: Mutex<State>,
    /// Stored tokens that do not load (written by another version, edited by hand):
    /// kept as they are in the file, never accepted.
    unreadable: Vec<serde_json::Value>,
    /// A replica's: the file is only read (a last use is kept in memory).
    read_only: bool,
}

#[derive(Default)]
struct State {
    tokens: BTreeMap<String, StoredToken>,
    /// Last successful use, µs (in memory: a restart starts it over).
    last_access: HashMap<String, u64>,
}

use crate::timefmt::now_micros;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn random_hex(bytes: usize) -> Result<String> {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf)
        .map_err(|e| Error::internal(format!("no randomness for a token: {e}")))?;
    Ok(hex(&buf))
}

fn salted_hash(salt: &str, value: &str) -> String {
    let mut h = Sha256::new();
    h.update(salt.as_bytes());
    h.update(value.as_bytes());
    hex(&h.finalize())
}

/// Compares two secrets in time that depends only on their lengths, not on where they
/// first differ, so a client cannot find a token byte by byte from response times.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for i in 0..a.len().max(b.len()) {
        diff |= a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0);
    }
    std::hint::black_box(diff) == 0
}

fn unauthorized(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Unauthorized, message)
}

fn time_text(micros: u64) -> String {
    rfc3339(UNIX_EPOCH + std::time::Duration::from_micros(micros))
}

impl TokenRepository {
    /// Loads the tokens of a data directory; `init` is the `RS_API_TOKEN` value. A file
    /// that does not parse is set aside (`stored_file.rs`).
    pub fn open(data: &Path, init: &str) -> Result<TokenRepository> {
        Self::load(data, init, true)
    }

    /// [`TokenRepository::open`] for a replica: nothing is written, a damaged file is
    /// only reported; [`TokenRepository::follow`] reads the file again.
    pub fn open_read_only(data: &Path, init: &str) -> Result<TokenRepository> {
        Self::load(data, init, false)
    }

    fn load(data: &Path, init: &str, set_aside: bool) -> Result<TokenRepository> {
        let path = data.join(TOKENS_FILE);
        let (tokens, unreadable) = stored_file::read(&path, set_aside)?;
        Ok(TokenRepository {
            unreadable,
            read_only: !set_aside,
            path,
            provisioned: if init.is_empty() {
                Vec::new()
            } else {
                vec![ProvisionedToken::init(init)]
            },
            started: now_micros(),
            state: Mutex::new(State {
                last_access: tokens
                    .iter()
                    .filter_map(|t| Some((t.name.clone(), t.last_used?)))
                    .collect(),
                tokens: tokens.into_iter().map(|t| (t.name.clone(), t)).collect(),
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Every change is a single map update after the file was written.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn save(&self, tokens: &BTreeMap<String, StoredToken>) -> Result<()> {
        let mut list: Vec<serde_json::Value> = Vec::with_capacity(tokens.len());
        for token in tokens.values() {
            list.push(
                serde_json::to_value(token)
                    .map_err(|e| Error::internal(format!("encoding tokens: {e}")))?,
            );
        }
        list.extend(self.unreadable.iter().cloned());
        let body = serde_json::to_vec_pretty(&list)
            .map_err(|e| Error::internal(format!("encoding tokens: {e}")))?;
        write_atomic(&self.path, &body)
    }

    /// Who the `Authorization` header names, checked against expiry, TTL and the IP
    /// allowlist (`client` is the request's client address).
    pub fn authenticate(&self, header: Option<&str>, client: Option<IpAddr>) -> Result<Caller> {
        let value = header
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or_else(|| unauthorized("No bearer token in request header"))?;
        if let Some(token) = self.provisioned_by_value(value) {
            if token.expires_at.is_some_and(|at| now_micros() >= at) {
                return Err(unauthorized("Token has expired"));
            }
            return Ok(Caller {
                name: token.name.clone(),
                permissions: token.permissions.clone(),
            });
        }
        let mut st = self.lock();
        // Values we make are `<name>-<32 hex>`: the name says which hash to check. A
        // value chosen by the operator (RS_INIT_API_TOKEN) is looked for among those.
        let derived = value
            .len()
            .checked_sub(33)
            .filter(|&i| value.as_bytes().get(i) == Some(&b'-'))
            .map(|i| &value[..i])
            .and_then(|name| st.tokens.get(name))
            .filter(|t| t.value_is(value));
        let token = derived
            .or_else(|| self.chosen_value_token(&st.tokens, value))
            .ok_or_else(|| unauthorized("Invalid token"))?
            .clone();
        let name = token.name.as_str();
        if self.provisioned(name).is_some() {
            // Its stored namesake is hidden behind it.
            return Err(unauthorized("Invalid token"));
        }
        let now = now_micros();
        if Self::is_expired(&token, st.last_access.get(name).copied(), now) {
            return Err(unauthorized("Token has expired"));
        }
        if !token.ip_allowlist.is_empty() {
            let ip = client.ok_or_else(|| unauthorized("Client IP is required for this token"))?;
            if !token.ip_allowlist.iter().any(|entry| ip_in(entry, ip)) {
                return Err(unauthorized(format!(
                    "Token is not allowed for client IP {ip}"
                )));
            }
        }
        st.last_access.insert(name.to_string(), now);
        // Kept to a quarter of the TTL (at most a minute): a token in use does not expire
        // because of a restart, however short its TTL.
        let granularity = token
            .ttl
            .map(|ttl| LAST_USE_GRANULARITY.min(ttl.saturating_mul(1_000_000) / 4));
        if let Some(granularity) = granularity
            && !self.read_only
            && token
                .last_used
                .is_none_or(|at| now.saturating_sub(at) >= granularity)
        {
            let mut next = st.tokens.clone();
            if let Some(t) = next.get_mut(name) {
                t.last_used = Some(now);
            }
            match self.save(&next) {
                Ok(()) => st.tokens = next,
                Err(e) => log::warn!("keeping the last use of token '{name}': {e}"),
            }
        }
        Ok(Caller {
            name: token.name,
            permissions: token.permissions,
        })
    }

    fn is_expired(token: &StoredToken, last_access: Option<u64>, now: u64) -> bool {
        if token.expires_at.is_some_and(|at| now >= at) {
            return true;
        }
        token.ttl.is_some_and(|ttl| {
            let since = last_access.unwrap_or(0).max(token.created_at);
            now.saturating_sub(since) / 1_000_000 > ttl
        })
    }

    fn view(&self, t: &StoredToken, last_access: Option<u64>) -> TokenView {
        TokenView {
            name: t.name.clone(),
            value: String::new(),
            created_at: time_text(t.created_at),
            permissions: t.permissions.clone(),
            is_provisioned: false,
            expires_at: t.expires_at.map(time_text),
            ttl: t.ttl,
            last_access: last_access.map(time_text),
            ip_allowlist: t.ip_allowlist.clone(),
            is_expired: Self::is_expired(t, last_access, now_micros()),
        }
    }

    /// The JSON of one token (its value is never shown again).
    pub fn get(&self, name: &str) -> Result<TokenView> {
        if let Some(token) = self.provisioned(name) {
            return Ok(self.provisioned_view(token));
        }
        let st = self.lock();
        let t = st
            .tokens
            .get(name)
            .ok_or_else(|| Error::not_found(format!("Token '{name}' doesn't exist")))?;
        Ok(self.view(t, st.last_access.get(name).copied()))
    }

    /// Every token, by name.
    pub fn list(&self) -> Vec<TokenView> {
        let st = self.lock();
        let mut out: Vec<TokenView> = st
            .tokens
            .values()
            .filter(|t| self.provisioned(&t.name).is_none())
            .map(|t| self.view(t, st.last_access.get(&t.name).copied()))
            .collect();
        out.extend(self.provisioned.iter().map(|t| self.provisioned_view(t)));
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Creates a token from a request body; returns its value (shown only now) and
    /// creation time.
    pub fn create(&self, name: &str, body: &[u8]) -> Result<(String, String)> {
        let invalid = || Error::unprocessable("Invalid body");
        let request: CreateBody = serde_json::from_slice(body)
            .or_else(|_| {
                serde_json::from_slice::<LegacyBody>(body).map(|l| CreateBody {
                    permissions: Permissions {
                        full_access: l.full_access,
                        read: l.read,
                        write: l.write,
                    },
                    expires_at: None,
                    ttl: None,
                    ip_allowlist: l.ip_allowlist,
                })
            })
            .map_err(|_| invalid())?;
        let expires_at = request
            .expires_at
            .as_deref()
            .map(|t| parse_rfc3339(t).ok_or_else(invalid))
            .transpose()?;
        crate::storage::names::validate_bucket_name(name)
            .map_err(|_| Error::unprocessable(format!("Invalid token name '{name}'")))?;
        let mut st = self.lock();
        if name == INIT_TOKEN || self.provisioned(name).is_some() || st.tokens.contains_key(name) {
            return Err(Error::conflict(format!("Token '{name}' already exists")));
        }
        for bucket in request
            .permissions
            .read
            .iter()
            .chain(&request.permissions.write)
        {
            let ok = bucket.starts_with('$')
                || (!bucket.is_empty()
                    && bucket
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"*_-".contains(&b)));
            if !ok {
                return Err(Error::unprocessable(format!(
                    "Permission can contain only bucket names or wildcard '*', got '{bucket}'"
                )));
            }
        }
        if request.ttl == Some(0) {
            return Err(Error::unprocessable("Token TTL must be greater than zero"));
        }
        let now = now_micros();
        if expires_at.is_some_and(|at| at <= now) {
            return Err(Error::unprocessable(
                "Token expiration date must not be in the past",
            ));
        }
        let (value, hash) = Self::new_secret(name)?;
        let token = StoredToken {
            name: name.to_string(),
            hash,
            created_at: now,
            permissions: request.permissions,
            expires_at,
            ttl: request.ttl,
            ip_allowlist: request.ip_allowlist,
            last_used: None,
            chosen_value: false,
        };
        let mut next = st.tokens.clone();
        next.insert(name.to_string(), token);
        self.save(&next)?;
        st.tokens = next;
        Ok((value, time_text(now)))
    }

    fn new_secret(name: &str) -> Result<(String, String)> {
        let value = format!("{name}-{}", random_hex(16)?);
        let salt = random_hex(16)?;
        let hash = format!("sha256:{salt}:{}", salted_hash(&salt, &value));
        Ok((value, hash))
    }

    /// Gives a token a new value (the old one stops working at once).
    pub fn rotate(&self, name: &str) -> Result<(String, String)> {
        if self.provisioned(name).is_some() {
            return Err(Error::conflict(format!(
                "Can't rotate provisioned token '{name}'"
            )));
        }
        let mut st = self.lock();
        let token = st
            .tokens
            .get(name)
            .ok_or_else(|| Error::not_found(format!("Token '{name}' doesn't exist")))?;
        let now = now_micros();
        if token.expires_at.is_some_and(|at| now >= at) {
            return Err(Error::unprocessable(format!(
                "Can't rotate expired token '{name}'"
            )));
        }
        let (value, hash) = Self::new_secret(name)?;
        let mut next = st.tokens.clone();
        if let Some(t) = next.get_mut(name) {
            t.hash = hash;
            t.created_at = now;
            t.chosen_value = false;
        }
        self.save(&next)?;
        st.tokens = next;
        st.last_access.remove(name);
        Ok((value, time_text(now)))
    }

    /// Removes a token; it is refused at once.
    pub fn remove(&self, name: &str) -> Result<()> {
        if self.provisioned(name).is_some() {
            return Err(Error::conflict(format!(
                "Can't remove provisioned token '{name}'"
            )));
        }
        let mut st = self.lock();
        if !st.tokens.contains_key(name) {
            return Err(Error::not_found(format!("Token '{name}' doesn't exist")));
        }
        let mut next = st.tokens.clone();
        next.remove(name);
        self.save(&next)?;
        st.tokens = next;
        st.last_access.remove(name);
        Ok(())
    }
}

mod beyond_auth;
pub(crate) mod provisioned;
mod proxies;
mod stored_file;

pub use provisioned::{ProvisionedToken, tokens_from_env};

use proxies::ip_in;
pub use proxies::{TrustedProxies, client_ip};

#[cfg(test)]
mod tests;
