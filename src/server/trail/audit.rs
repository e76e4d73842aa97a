//! The audit: authenticated calls, aggregated in memory by (token, method, path, status,
//! error message, client address) and written as one `audit/<instance>/<token>` event
//! per group 5 s after its last call or 60 s after its first (or at shutdown), as
//! ReductStore 1.21.5 does. Counting a call costs one (per-thread) lock and one hash
//! lookup: no allocation and no clock read once its group exists — ages are counted in
//! the writer's one-second ticks.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;

use super::sharded::Sharded;

/// A group is written this many ticks (seconds) after its last call…
pub const QUIET_TICKS: u64 = 5;
/// …or this many after its first, whichever comes first.
pub const MAX_AGE_TICKS: u64 = 60;

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
    /// The client's address, when known.
    pub client_ip: Option<IpAddr>,
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
    /// The client's address, when known.
    pub client_ip: Option<IpAddr>,
    /// When the first call came (µs since the epoch): the event's timestamp.
    pub first_at: u64,
    first_tick: u64,
    last_tick: u64,
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

    fn same_key(&self, other: &Group) -> bool {
        self.is(&Call {
            token: &other.token,
            method: &other.method,
            path: &other.path,
            status: other.status,
            message: &other.message,
            client_ip: other.client_ip,
        })
    }

    fn merge(&mut self, other: Group) {
        self.call_count += other.call_count;
        self.duration += other.duration;
        self.first_at = self.first_at.min(other.first_at);
    }

    fn due(&self, tick: u64) -> bool {
        tick.saturating_sub(self.last_tick) >= QUIET_TICKS
            || tick.saturating_sub(self.first_tick) >= MAX_AGE_TICKS
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
    /// The client's address (empty when unknown).
    pub client_ip: String,
    /// How many calls.
    pub call_count: u64,
    /// Their summed handling time in seconds.
    pub duration: f64,
}

/// Groups of calls not written yet, by a hash of their key (collisions are told apart by
/// comparing the key), in per-thread shards.
#[derive(Default)]
pub struct Audit {
    groups: Sharded<HashMap<u64, Vec<Group>>>,
    hasher: std::collections::hash_map::RandomState,
    /// The writer's clock: one tick a second.
    tick: AtomicU64,
}

impl Audit {
    fn key_hash(&self, call: &Call) -> u64 {
        let mut h = self.hasher.build_hasher();
        for part in [call.token, call.method, call.path, call.message] {
            h.write(part.as_bytes());
            h.write_u8(0xff);
        }
        h.write_u16(call.status);
        call.client_ip.hash(&mut h);
        h.finish()
    }

    /// Advances the clock groups age by (the writer calls it once a second).
    pub fn tick(&self) {
        self.tick.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one call that took `took`; `now_us` gives the time (µs since the epoch)
    /// of a call that starts a group.
    pub fn record(&self, call: &Call, took: Duration, now_us: impl FnOnce() -> u64) {
        let hash = self.key_hash(call);
        let tick = self.tick.load(Ordering::Relaxed);
        let mut groups = self.groups.mine();
        let bucket = groups.entry(hash).or_default();
        if let Some(group) = bucket.iter_mut().find(|g| g.is(call)) {
            group.call_count += 1;
            group.duration += took;
            group.last_tick = tick;
            return;
        }
        bucket.push(Group {
            token: call.token.to_string(),
            method: call.method.to_string(),
            path: call.path.to_string(),
            status: call.status,
            message: call.message.to_string(),
            client_ip: call.client_ip,
            first_at: now_us(),
            first_tick: tick,
            last_tick: tick,
            call_count: 1,
            duration: took,
        });
    }

    /// Takes the groups due to be written (all of them with `all`), oldest first; parts
    /// of one group counted on different threads are merged.
    pub fn take_due(&self, all: bool) -> Vec<Group> {
        let now = self.tick.load(Ordering::Relaxed);
        let mut due: Vec<Group> = Vec::new();
        self.groups.each(|groups| {
            groups.retain(|_, bucket| {
                let (go, stay): (Vec<Group>, Vec<Group>) =
                    bucket.drain(..).partition(|g| all || g.due(now));
                for part in go {
                    match due.iter_mut().find(|g| g.same_key(&part)) {
                        Some(group) => group.merge(part),
                        None => due.push(part),
                    }
                }
                *bucket = stay;
                !bucket.is_empty()
            });
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
            client_ip: Some(IpAddr::from([127, 0, 0, 1])),
        }
    }

    #[test]
    fn equal_calls_are_one_group_written_once_quiet() {
        let audit = Audit::default();
        for _ in 0..3 {
            audit.record(&call("a", 200), Duration::from_millis(1), || 10);
        }
        audit.record(&call("a", 403), Duration::ZERO, || 11);
        assert!(audit.take_due(false).is_empty(), "nothing is quiet yet");
        for _ in 0..QUIET_TICKS {
            audit.tick();
        }
        audit.record(&call("b", 200), Duration::ZERO, || 12);
        let quiet = audit.take_due(false);
        assert_eq!(quiet.len(), 2, "{quiet:?}");
        let (first, second) = (&quiet[0], &quiet[1]);
        assert_eq!(
            (first.token.as_str(), first.call_count, first.first_at),
            ("a", 3, 10)
        );
        assert_eq!(first.duration, Duration::from_millis(3));
        assert_eq!((second.status, second.call_count), (403, 1));
        // The fresh group waits, unless everything is asked for (shutdown).
        let rest = audit.take_due(true);
        assert_eq!((rest.len(), rest[0].token.as_str()), (1, "b"));
        assert!(audit.take_due(true).is_empty());
    }
}
