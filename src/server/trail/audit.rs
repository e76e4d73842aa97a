//! The audit: authenticated calls, aggregated in memory by (token, method, path, status,
//! error message, client address) and written as one `audit/<instance>/<token>` event
//! per group 5 s after its last call or 60 s after its first (or at shutdown), as
//! ReductStore 1.21.5 does. Counting a call costs one (per-thread) lock and one hash
//! lookup: no allocation and no clock read once its group exists — ages are counted in
//! the writer's one-second ticks. Refused calls (401) are grouped by route, not by their
//! raw path, and at most [`MAX_PENDING_GROUPS`] groups wait (the rest counted in an
//! overflow group), so a flood of unique calls costs bounded memory and events.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use serde::Serialize;

use super::sharded::Sharded;

/// A group is written this many ticks (seconds) after its last call…
pub const QUIET_TICKS: u64 = 5;
/// …or this many after its first, whichever comes first.
pub const MAX_AGE_TICKS: u64 = 60;
/// Most groups waiting to be written; past it, calls are counted in one overflow group
/// per (token, status), so a flood of distinct calls costs bounded memory.
pub const MAX_PENDING_GROUPS: usize = 10_000;
/// The path of the overflow groups.
pub const OVERFLOW_PATH: &str = "(other calls: too many distinct calls pending)";

/// The path a call is grouped under: its own, or for a refused one (401), its route
/// (`/api/v1/b/…`): anyone can send refused calls with unique paths, and each would be
/// a group and an event of its own.
pub fn grouped_path(path: &str, status: u16) -> std::borrow::Cow<'_, str> {
    if status != 401 {
        return path.into();
    }
    let Some(rest) = path.strip_prefix("/api/v1/") else {
        return "(not an API path)".into();
    };
    match rest.split_once('/') {
        None if rest.len() <= 32 => path.into(),
        None => "/api/v1/…".into(),
        Some((first, _)) if first.len() <= 32 => format!("/api/v1/{first}/…").into(),
        Some(_) => "/api/v1/…".into(),
    }
}

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
    /// Groups pending, over all shards (bounded by [`MAX_PENDING_GROUPS`]).
    pending: AtomicUsize,
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
        let path = grouped_path(call.path, call.status);
        let grouped = Call {
            path: &path,
            ..*call
        };
        let call = &grouped;
        if self.pending.load(Ordering::Relaxed) >= MAX_PENDING_GROUPS {
            let overflow = Call {
                method: "*",
                path: OVERFLOW_PATH,
                message: "",
                client_ip: None,
                ..*call
            };
            return self.count(&overflow, took, now_us);
        }
        self.count(call, took, now_us);
    }

    fn count(&self, call: &Call, took: Duration, now_us: impl FnOnce() -> u64) {
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
        self.pending.fetch_add(1, Ordering::Relaxed);
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
        // Parts of one group found by their key's hash: linear in the groups taken.
        let mut by_hash: HashMap<u64, Vec<usize>> = HashMap::new();
        let mut taken = 0;
        self.groups.each(|groups| {
            groups.retain(|hash, bucket| {
                let (go, stay): (Vec<Group>, Vec<Group>) =
                    bucket.drain(..).partition(|g| all || g.due(now));
                taken += go.len();
                for part in go {
                    let same = by_hash.entry(*hash).or_default();
                    match same.iter().find(|&&i| due[i].same_key(&part)) {
                        Some(&i) => due[i].merge(part),
                        None => {
                            same.push(due.len());
                            due.push(part);
                        }
                    }
                }
                *bucket = stay;
                !bucket.is_empty()
            });
        });
        self.pending.fetch_sub(taken, Ordering::Relaxed);
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

    #[test]
    fn refused_calls_group_by_route_and_pending_groups_are_bounded() {
        let audit = Audit::default();
        for i in 0..(MAX_PENDING_GROUPS + 500) {
            let path = format!("/api/v1/b/bucket-{i}/entry");
            let refused = Call {
                path: &path,
                ..call("unauthorized", 401)
            };
            audit.record(&refused, Duration::ZERO, || 1);
            let allowed = Call {
                path: &path,
                ..call("reader", 200)
            };
            audit.record(&allowed, Duration::ZERO, || 1);
        }
        let groups = audit.take_due(true);
        // Refused calls group by route (then, past the cap, in their overflow group);
        // allowed ones each in their group up to the cap, the rest in the overflow.
        let refused: Vec<_> = groups.iter().filter(|g| g.status == 401).collect();
        assert!(refused.len() <= 2, "{}", refused.len());
        assert!(refused.iter().any(|g| g.path == "/api/v1/b/…"));
        assert_eq!(
            refused.iter().map(|g| g.call_count).sum::<u64>(),
            (MAX_PENDING_GROUPS + 500) as u64
        );
        assert!(groups.len() <= MAX_PENDING_GROUPS + 2, "{}", groups.len());
        assert!(
            groups
                .iter()
                .any(|g| g.path == OVERFLOW_PATH && g.status == 200)
        );
        assert_eq!(
            groups.iter().map(|g| g.call_count).sum::<u64>(),
            2 * (MAX_PENDING_GROUPS + 500) as u64
        );
        // Taken, they free their places.
        audit.record(&call("reader", 200), Duration::ZERO, || 2);
        assert_eq!(audit.take_due(true)[0].path, "/api/v1/info");
    }
}
