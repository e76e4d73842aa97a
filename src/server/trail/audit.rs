//! The audit: authenticated calls, aggregated in memory by (token, method, path, status,
//! error message, client address) and written as one `audit/<instance>/<token>` event
//! per group 5 s after its last call or 60 s after its first (or at shutdown), as
//! ReductStore 1.21.5 does. Counting a call costs one lock and one hash lookup: no
//! allocation once its group exists.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;

/// A group is written this long after its last call…
pub const QUIET: Duration = Duration::from_secs(5);
/// …or this long after its first, whichever comes first.
pub const MAX_AGE: Duration = Duration::from_secs(60);

/// One call, as the router saw it.
pub struct Call<'a> {
    /// The token's name (`AUTHENTICATION-DISABLED`, `unauthorized` for a 401).
    pub token: &'a str,
    /// The method.
    pub method: &'a str,
    /// The path, without its query.
    pub path: &'a str,
    /// The answer's status.
    pub status: u16,
    /// The answer's error message (empty on success).
    pub message: &'a str,
    /// The client's address (empty when unknown).
    pub client_ip: &'a str,
}

/// A group of equal calls.
#[derive(Debug, Clone)]
pub struct Group {
    /// The token's name.
    pub token: String,
    /// The method.
    pub method: String,
    /// The path.
    pub path: String,
    /// The status.
    pub status: u16,
    /// The error message.
    pub message: String,
    /// The client's address.
    pub client_ip: String,
    /// When the first call came (µs since the epoch): the event's timestamp.
    pub first_at: u64,
    first_seen: Instant,
    last_seen: Instant,
    /// Calls in the group.
    pub call_count: u64,
    /// Their summed handling time.
    pub duration: Duration,
}

impl Group {
    fn is(&self, call: &Call) -> bool {
        self.status == call.status
            && self.token == call.token
            && self.method == call.method
            && self.path == call.path
            && self.message == call.message
            && self.client_ip == call.client_ip
    }

    fn due(&self, now: Instant) -> bool {
        now.duration_since(self.last_seen) >= QUIET
            || now.duration_since(self.first_seen) >= MAX_AGE
    }
}

/// The payload of an audit event, in ReductStore's field order.
#[derive(Serialize)]
pub struct AuditEvent<'a> {
    /// The event's time (µs), the first call's.
    pub timestamp: u64,
    /// The instance name.
    pub instance: &'a str,
    /// The calls' status.
    pub status: u16,
    /// Their error message.
    pub message: &'a str,
    /// The token.
    pub token_name: &'a str,
    /// The method.
    pub method: &'a str,
    /// The path.
    pub path: &'a str,
    /// The client's address.
    pub client_ip: &'a str,
    /// How many calls.
    pub call_count: u64,
    /// Their summed handling time in seconds.
    pub duration: f64,
}

/// Groups of calls not written yet, by a hash of their key (collisions are told apart by
/// comparing the key).
#[derive(Default)]
pub struct Audit {
    groups: Mutex<HashMap<u64, Vec<Group>>>,
    hasher: std::collections::hash_map::RandomState,
}

impl Audit {
    fn key_hash(&self, call: &Call) -> u64 {
        let mut h = self.hasher.build_hasher();
        for part in [
            call.token,
            call.method,
            call.path,
            call.message,
            call.client_ip,
        ] {
            h.write(part.as_bytes());
            h.write_u8(0xff);
        }
        h.write_u16(call.status);
        h.finish()
    }

    /// Counts one call that took `took`, made at `now_us` (µs since the epoch).
    pub fn record(&self, call: &Call, took: Duration, now_us: u64) {
        let hash = self.key_hash(call);
        let now = Instant::now();
        let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        let bucket = groups.entry(hash).or_default();
        if let Some(group) = bucket.iter_mut().find(|g| g.is(call)) {
            group.call_count += 1;
            group.duration += took;
            group.last_seen = now;
            return;
        }
        bucket.push(Group {
            token: call.token.to_string(),
            method: call.method.to_string(),
            path: call.path.to_string(),
            status: call.status,
            message: call.message.to_string(),
            client_ip: call.client_ip.to_string(),
            first_at: now_us,
            first_seen: now,
            last_seen: now,
            call_count: 1,
            duration: took,
        });
    }

    /// Takes the groups due to be written (all of them with `all`), oldest first.
    pub fn take_due(&self, all: bool) -> Vec<Group> {
        let now = Instant::now();
        let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        let mut due = Vec::new();
        groups.retain(|_, bucket| {
            let (go, stay): (Vec<Group>, Vec<Group>) =
                bucket.drain(..).partition(|g| all || g.due(now));
            due.extend(go);
            *bucket = stay;
            !bucket.is_empty()
        });
        due.sort_by_key(|g| g.first_at);
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call<'a>(token: &'a str, status: u16) -> Call<'a> {
        Call {
            token,
            method: "GET",
            path: "/api/v1/info",
            status,
            message: "",
            client_ip: "127.0.0.1",
        }
    }

    #[test]
    fn equal_calls_are_one_group_and_others_their_own() {
        let audit = Audit::default();
        for _ in 0..3 {
            audit.record(&call("a", 200), Duration::from_millis(1), 10);
        }
        audit.record(&call("a", 403), Duration::ZERO, 11);
        audit.record(&call("b", 200), Duration::ZERO, 12);
        // Nothing is due yet, except when everything is asked for.
        assert!(audit.take_due(false).is_empty());
        let groups = audit.take_due(true);
        assert_eq!(groups.len(), 3);
        assert_eq!(
            (
                groups[0].token.as_str(),
                groups[0].call_count,
                groups[0].first_at
            ),
            ("a", 3, 10)
        );
        assert_eq!(groups[0].duration, Duration::from_millis(3));
        assert_eq!((groups[1].status, groups[2].token.as_str()), (403, "b"));
        assert!(audit.take_due(true).is_empty());
    }
}
