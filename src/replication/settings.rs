//! A replication task's settings as users write them (`POST /api/v1/replications/{name}`,
//! as ReductStore 1.21.5 takes them; `docs/replication.md`), how they are shown back, and
//! their validation.

use serde::{Deserialize, Deserializer, Serialize};

use crate::error::{Error, Result};
use crate::storage::condition::Condition;
use crate::storage::pattern::EntryPatterns;

/// Whether a task records and sends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplicationMode {
    /// Records and sends.
    #[default]
    Enabled,
    /// Records, sends nothing until enabled again.
    Paused,
    /// Records nothing (what is pending stays pending).
    Disabled,
}

/// How batches are compressed on the wire (only when the destination supports it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplicationCompression {
    /// Sent as they are.
    #[default]
    None,
    /// `Content-Encoding: zstd`.
    Zstd,
    /// `Content-Encoding: gzip`.
    Gzip,
}

fn null_as_default<'de, D, T>(deserializer: D) -> std::result::Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// A task's settings, fields in the order `GET /replications/{name}` shows them. Unknown
/// fields (1.21.5 has no `each_n`, `each_s`, `include`, `exclude` in JSON) are ignored.
/// Its `Debug` leaves the token out, so no log line or error can carry it.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplicationSettings {
    /// The bucket whose writes are replicated.
    pub src_bucket: String,
    /// The bucket on the destination they go to (created there when missing).
    pub dst_bucket: String,
    /// The destination server's URL.
    pub dst_host: String,
    /// The token for the destination; stored, never shown (`null` in `GET`).
    #[serde(default)]
    pub dst_token: Option<String>,
    /// Entry patterns (exact, `*`, `**`, `cam*`, `!` exclusions); empty means all.
    #[serde(default, deserialize_with = "null_as_default")]
    pub entries: Vec<String>,
    /// Destination entries are named `<prefix>/<entry>` (the prefix without surrounding
    /// `/`); empty keeps the names.
    #[serde(default, deserialize_with = "null_as_default")]
    pub dst_prefix: String,
    /// Only records matching this condition (evaluated strictly) are replicated.
    #[serde(default)]
    pub when: Option<serde_json::Value>,
    /// enabled, paused or disabled.
    #[serde(default, deserialize_with = "null_as_default")]
    pub mode: ReplicationMode,
    /// none, zstd or gzip.
    #[serde(default, deserialize_with = "null_as_default")]
    pub compression: ReplicationCompression,
}

impl std::fmt::Debug for ReplicationSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicationSettings")
            .field("src_bucket", &self.src_bucket)
            .field("dst_bucket", &self.dst_bucket)
            .field("dst_host", &self.dst_host)
            .field("dst_token", &self.dst_token.as_ref().map(|_| "<hidden>"))
            .field("entries", &self.entries)
            .field("dst_prefix", &self.dst_prefix)
            .field("when", &self.when)
            .field("mode", &self.mode)
            .field("compression", &self.compression)
            .finish()
    }
}

/// What validation yields besides the settings: their parsed forms.
#[derive(Debug, Clone)]
pub struct ValidatedReplication {
    /// The parsed `entries`.
    pub entries: EntryPatterns,
    /// The parsed `when`, strict.
    pub when: Option<Condition>,
    /// The destination as scheme, host and port.
    pub destination: Destination,
}

/// A destination URL's parts that matter here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    /// `http` or `https` (other schemes parse but cannot be sent to).
    pub scheme: String,
    /// The host, lower-cased, IPv6 addresses without brackets.
    pub host: String,
    /// The port, the scheme's default when none is given.
    pub port: Option<u16>,
}

/// Whether `host` names this machine, however it is spelt: every address it resolves to
/// (`127.1`, `2130706433`, `[::ffff:127.0.0.1]`, `localhost`, a name of ours) is checked
/// for loopback, unspecified, or one of this machine's interface addresses. A name that
/// does not resolve is not this machine.
pub fn is_this_machine(host: &str, port: u16) -> bool {
    use std::net::{IpAddr, ToSocketAddrs};
    // A name is the same with its root's dot (`localhost.`) and in any case; `localhost`
    // and its subdomains are this machine without asking DNS (RFC 6761), however the
    // resolver here answers them.
    let name = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    if name == "localhost" || name.ends_with(".localhost") {
        return true;
    }
    let Ok(resolved) = (name.as_str(), port).to_socket_addrs() else {
        return false;
    };
    let own = own_addresses();
    resolved.map(|a| a.ip()).any(|ip| {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 => v4,
        };
        ip.is_loopback() || ip.is_unspecified() || own.contains(&ip)
    })
}

/// This machine's interface addresses (`getifaddrs`); empty if they cannot be listed.
fn own_addresses() -> Vec<std::net::IpAddr> {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    let mut out = Vec::new();
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a linked list we only read, then free once.
    unsafe {
        if libc::getifaddrs(&mut list) != 0 {
            return out;
        }
        let mut at = list;
        while !at.is_null() {
            let addr = (*at).ifa_addr;
            if !addr.is_null() {
                match i32::from((*addr).sa_family) {
                    libc::AF_INET => {
                        let sin = &*(addr as *const libc::sockaddr_in);
                        out.push(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                            sin.sin_addr.s_addr,
                        ))));
                    }
                    libc::AF_INET6 => {
                        let sin6 = &*(addr as *const libc::sockaddr_in6);
                        out.push(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)));
                    }
                    _ => {}
                }
            }
            at = (*at).ifa_next;
        }
        libc::freeifaddrs(list);
    }
    out
}

impl ReplicationSettings {
    /// Parses a request body; a body that is not this JSON is `422 Invalid JSON: …`.
    pub fn from_json(body: &[u8]) -> Result<Self> {
        serde_json::from_slice(body).map_err(|e| Error::unprocessable(format!("Invalid JSON: {e}")))
    }

    /// The settings as `GET` shows them: the token is never returned.
    pub fn shown(&self) -> ReplicationSettings {
        ReplicationSettings {
            dst_token: None,
            ..self.clone()
        }
    }

    /// Validates the settings of task `name` in the order ReductStore 1.21.5 reports
    /// failures: the destination URL, the source bucket (`bucket_exists`), the same
    /// bucket on this very server (`own_port`), then the condition and the entries.
    pub fn validate(
        &self,
        name: &str,
        bucket_exists: &dyn Fn(&str) -> bool,
        own_port: u16,
    ) -> Result<ValidatedReplication> {
        let destination = parse_destination(&self.dst_host).ok_or_else(|| {
            Error::unprocessable(format!(
                "Invalid destination host '{}': it must be an http:// or https:// URL with a host (e.g. http://10.0.0.2:8383)",
                self.dst_host
            ))
        })?;
        if !bucket_exists(&self.src_bucket) {
            return Err(Error::not_found(format!(
                "Source bucket '{}' for replication '{name}' does not exist",
                self.src_bucket
            )));
        }
        if self.src_bucket == self.dst_bucket
            && destination.port == Some(own_port)
            && is_this_machine(&destination.host, own_port)
        {
            return Err(Error::unprocessable(
                "Source and destination buckets must be different",
            ));
        }
        let when = match &self.when {
            Some(json) => Some(Condition::parse(json, true).map_err(|e| {
                Error::unprocessable(format!("Invalid replication condition: {}", e.message()))
            })?),
            None => None,
        };
        let entries = EntryPatterns::parse(&self.entries).map_err(|e| {
            Error::unprocessable(format!("Invalid replication entries: {}", e.message()))
        })?;
        Ok(ValidatedReplication {
            entries,
            when,
            destination,
        })
    }

    /// The name an entry gets on the destination: `<prefix>/<entry>`, the prefix without
    /// surrounding `/`, or the entry's own name without a prefix.
    pub fn destination_entry(&self, entry: &str) -> String {
        let prefix = self.dst_prefix.trim_matches('/');
        if prefix.is_empty() {
            entry.to_string()
        } else {
            format!("{prefix}/{entry}")
        }
    }
}

/// The scheme, host and port of an absolute URL (`scheme://host[:port][/…]`), or `None`
/// for what is not one (`not a url`, an empty host, a port past 65535, spaces).
pub fn parse_destination(url: &str) -> Option<Destination> {
    let (scheme, rest) = url.split_once("://")?;
    let mut chars = scheme.chars();
    let scheme_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if !scheme_ok || url.chars().any(char::is_whitespace) {
        return None;
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']')?;
        (host, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return None;
    }
    let scheme = scheme.to_ascii_lowercase();
    let port = match port {
        Some("") | None => match scheme.as_str() {
            "http" => Some(80),
            "https" => Some(443),
            _ => None,
        },
        Some(digits) => Some(digits.parse::<u16>().ok()?),
    };
    Some(Destination {
        scheme,
        host: host.to_ascii_lowercase(),
        port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(json: &str) -> ReplicationSettings {
        ReplicationSettings::from_json(json.as_bytes()).expect("settings parse")
    }

    const MINIMAL: &str =
        r#"{"src_bucket":"rs","dst_bucket":"rd","dst_host":"http://127.0.0.1:18383"}"#;

    #[test]
    fn defaults_and_the_shown_form_follow_the_reference() {
        let s = settings(
            r#"{"src_bucket":"rs","dst_bucket":"rd","dst_host":"http://127.0.0.1:18383",
                "dst_token":"secret","each_n":10,"include":{"a":"b"}}"#,
        );
        assert_eq!(s.dst_token.as_deref(), Some("secret"), "stored");
        let shown = serde_json::to_string(&s.shown()).expect("serialises");
        assert_eq!(
            shown,
            r#"{"src_bucket":"rs","dst_bucket":"rd","dst_host":"http://127.0.0.1:18383","dst_token":null,"entries":[],"dst_prefix":"","when":null,"mode":"enabled","compression":"none"}"#
        );
        let nulls = settings(
            r#"{"src_bucket":"rs","dst_bucket":"rd","dst_host":"http://h","entries":null,"dst_prefix":null,"mode":null,"compression":null}"#,
        );
        assert_eq!(nulls.mode, ReplicationMode::Enabled);
        assert_eq!(nulls.compression, ReplicationCompression::None);
    }

    #[test]
    fn bad_json_and_unknown_modes_name_what_is_wrong() {
        let e = ReplicationSettings::from_json(br#"{"src_bucket":"rs"}"#).unwrap_err();
        assert!(
            e.message()
                .starts_with("Invalid JSON: missing field `dst_bucket`"),
            "{e}"
        );
        let e = ReplicationSettings::from_json(
            br#"{"src_bucket":"a","dst_bucket":"b","dst_host":"http://h","mode":"stopped"}"#,
        )
        .unwrap_err();
        assert!(
            e.message().contains(
                "unknown variant `stopped`, expected one of `enabled`, `paused`, `disabled`"
            ),
            "{e}"
        );
    }

    #[test]
    fn validation_reports_in_the_reference_order() {
        let exists = |b: &str| b == "rs";
        let mut s = settings(MINIMAL);
        s.dst_host = "not a url".into();
        s.src_bucket = "nob".into();
        let e = s.validate("repx", &exists, 8383).unwrap_err();
        assert!(
            e.message()
                .starts_with("Invalid destination host 'not a url': it must be an http://"),
            "{}",
            e.message()
        );
        s.dst_host = "http://127.0.0.1:18383".into();
        let e = s.validate("repx", &exists, 8383).unwrap_err();
        assert_eq!(
            e.message(),
            "Source bucket 'nob' for replication 'repx' does not exist"
        );
        s.src_bucket = "rs".into();
        s.dst_bucket = "rs".into();
        for host in [
            "http://127.0.0.1:8383",
            "http://localhost:8383/",
            "http://localhost.:8383/",
            "http://LocalHost.:8383",
            "http://cam.localhost:8383",
            "http://127.0.0.1.:8383",
            "http://0.0.0.0:8383",
            "http://127.1:8383",
            "http://2130706433:8383",
            "http://[::ffff:127.0.0.1]:8383",
            "http://[::1]:8383",
            "http://127.3.4.5:8383",
        ] {
            s.dst_host = host.into();
            let e = s.validate("r", &exists, 8383).unwrap_err();
            assert_eq!(
                e.message(),
                "Source and destination buckets must be different"
            );
        }
        // The same bucket name on another server (or port) is fine.
        s.dst_host = "http://127.0.0.1:9000".into();
        assert!(s.validate("r", &exists, 8383).is_ok());
        s.dst_host = "http://10.0.0.2:8383".into();
        assert!(s.validate("r", &exists, 8383).is_ok());
        s.when = Some(serde_json::json!({"&a": {"$bad": 1}}));
        let e = s.validate("r", &exists, 8383).unwrap_err();
        assert!(
            e.message().starts_with("Invalid replication condition: "),
            "{e}"
        );
    }

    #[test]
    fn destinations_parse_like_urls() {
        let d = parse_destination("https://Example.COM/base").expect("parses");
        assert_eq!(
            (d.scheme.as_str(), d.host.as_str(), d.port),
            ("https", "example.com", Some(443))
        );
        let d = parse_destination("http://[::1]:8383").expect("parses");
        assert_eq!((d.host.as_str(), d.port), ("::1", Some(8383)));
        let d = parse_destination("http://user:pw@h:1").expect("parses");
        assert_eq!((d.host.as_str(), d.port), ("h", Some(1)));
        for bad in [
            "not a url",
            "http://",
            "://h",
            "http://h:99999",
            "1http://h",
            "http://a b",
        ] {
            assert!(
                parse_destination(bad).is_none(),
                "{bad} is not a destination"
            );
        }
    }

    #[test]
    fn destination_entries_take_the_prefix_without_slashes() {
        let mut s = settings(MINIMAL);
        assert_eq!(s.destination_entry("cam1"), "cam1");
        s.dst_prefix = "/from-a/".into();
        assert_eq!(s.destination_entry("cam1"), "from-a/cam1");
    }
}
