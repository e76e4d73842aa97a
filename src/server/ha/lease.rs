//! The lease that makes one of a PRIMARY and a SECONDARY on a shared data directory its
//! one writer, with fencing (`docs/high-availability.md`).
//!
//! On disk, beside the data:
//! - `.lease`: JSON `{owner, epoch, renewals, renewed_at, url, role}`, replaced atomically
//!   (temp, fsync, rename, fsync of the directory) by the holder every polling interval,
//!   and read past the page cache (`fresh_read.rs`);
//! - `.lease-epoch-<N>`: created exclusively (`O_EXCL`) by the instance that takes epoch
//!   `N`, so of two standbys that see the lease run out at once only one takes it.
//!
//! Both sides judge time by their own monotonic clock, never by a clock of the other
//! host: the holder stops writing once `ttl - margin` has passed since the renewal it
//! last made durable began; a standby takes over once it has seen the lease unchanged for
//! `ttl`. Since the standby saw that renewal only after it began, it takes over at least
//! `margin` after the holder stopped — whatever paused the holder (SIGSTOP, a stalled
//! VM). The holder also fails its check as soon as the next epoch's claim exists.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::fresh_read::read_fresh;
use crate::error::{Error, ErrorKind, Result};
use crate::storage::fence::Fence;
use crate::storage::sync::fsutil::{fsync_dir, replace_atomically};

/// The lease file's name in the data directory.
pub const LEASE_FILE: &str = ".lease";
/// The prefix of an epoch's claim file (`.lease-epoch-<N>`).
const CLAIM_PREFIX: &str = ".lease-epoch-";
/// Claims kept behind the current one (older ones are removed by the holder).
const CLAIMS_KEPT: u64 = 4;
/// How often (ns) the holder looks for the next epoch's claim between renewals.
const CLAIM_LOOK_NS: u64 = 1_000_000;

/// What the lease file says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    /// The holder: its instance name, process and a random part.
    pub owner: String,
    /// Grows by one at every take-over.
    pub epoch: u64,
    /// The holder's wall clock at its last renewal (ms since the epoch): for people and
    /// logs only, never for a decision.
    pub renewed_at: u64,
    /// Where clients reach the holder (its public URL).
    pub url: String,
    /// The holder's role (`PRIMARY` or `SECONDARY`).
    pub role: String,
    /// The holder stopped and let the lease go (a graceful shutdown): a standby takes it
    /// at once instead of after the TTL.
    #[serde(default)]
    pub released: bool,
    /// Grows by one at every renewal of the epoch: what a standby judges a renewal by, so
    /// that neither a file's metadata nor a wall clock set back can hide one.
    #[serde(default)]
    pub renewals: u64,
}

impl LeaseRecord {
    /// The lease file of `dir`, if there is a readable one, read past this host's page
    /// cache where the file system allows it (a renewal made from another host is seen).
    pub fn read(dir: &Path) -> Option<LeaseRecord> {
        let bytes = read_fresh(&dir.join(LEASE_FILE)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }
}

/// The lease's timing, as `RS_LOCK_FILE_*` set it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTiming {
    /// How long a lease lasts without renewal (`RS_LOCK_FILE_TTL`).
    pub ttl: Duration,
    /// How often the holder renews and a standby looks (`RS_LOCK_FILE_POLLING_INTERVAL`).
    pub poll: Duration,
}

impl LeaseTiming {
    /// How long before the TTL the holder stops writing: a tenth of it, at least 100 ms
    /// and at most one polling interval — room for a renewal's own fsyncs.
    pub fn margin(&self) -> Duration {
        (self.ttl / 10)
            .max(Duration::from_millis(100))
            .min(self.poll)
    }

    /// Checks that a renewal can keep the lease: the TTL must leave a margin after two
    /// polling intervals.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.poll.is_zero() || self.ttl.is_zero() {
            return Err(
                "RS_LOCK_FILE_TTL and RS_LOCK_FILE_POLLING_INTERVAL must be positive".into(),
            );
        }
        if self.ttl < self.poll * 2 + self.margin() {
            return Err(format!(
                "RS_LOCK_FILE_TTL ({:?}) must be at least twice RS_LOCK_FILE_POLLING_INTERVAL ({:?}) plus a margin ({:?}), or one slow renewal would lose the lease",
                self.ttl,
                self.poll,
                self.margin()
            ));
        }
        Ok(())
    }
}

/// The lease as its holder keeps it: the fence of its writes.
pub struct Lease {
    dir: PathBuf,
    record: Mutex<LeaseRecord>,
    epoch: AtomicU64,
    timing: LeaseTiming,
    /// The instant the lease's times count from.
    base: Instant,
    /// When the last renewal that became durable began (ns after `base`).
    renewed: AtomicU64,
    /// When the next epoch's claim was last looked for (ns after `base`).
    claim_looked: AtomicU64,
    lost: AtomicBool,
    /// Why it was lost, said once.
    reason: Mutex<Option<String>>,
}

impl Lease {
    /// Takes epoch `epoch` of `dir`'s lease for `record` (its owner, URL and role): claims
    /// the epoch exclusively, then writes the lease file. `None` when another instance
    /// claimed that epoch first.
    pub fn take(dir: &Path, mut record: LeaseRecord, timing: LeaseTiming) -> Result<Option<Lease>> {
        let began = Instant::now();
        let claim = claim_path(dir, record.epoch);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&claim)
        {
            Ok(file) => {
                file.sync_all()
                    .map_err(|e| Error::io(format!("syncing {}", claim.display()), e))?;
                fsync_dir(dir)?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(None),
            Err(e) => return Err(Error::io(format!("claiming {}", claim.display()), e)),
        }
        record.renewed_at = wall_ms();
        write_record(dir, &record)?;
        let lease = Lease {
            dir: dir.to_path_buf(),
            epoch: AtomicU64::new(record.epoch),
            record: Mutex::new(record),
            timing,
            base: began,
            renewed: AtomicU64::new(0),
            claim_looked: AtomicU64::new(0),
            lost: AtomicBool::new(false),
            reason: Mutex::new(None),
        };
        lease.remove_old_claims();
        Ok(Some(lease))
    }

    /// The epoch held.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Relaxed)
    }

    /// What the lease file says of this holder.
    pub fn record(&self) -> LeaseRecord {
        self.record
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Renews the lease (every polling interval): fails, and loses the lease, when the
    /// next epoch has been claimed or the file names a later one. A file naming an
    /// earlier epoch is a renewal the previous holder had begun before it was paused and
    /// finished after: it is replaced by this one (the claims, not the file, say who holds).
    pub fn renew(&self) -> Result<()> {
        self.check()?;
        if let Some(on_disk) = LeaseRecord::read(&self.dir) {
            if on_disk.epoch > self.epoch() {
                return Err(self.lose(format!(
                    "the lease file names epoch {} of {}",
                    on_disk.epoch, on_disk.owner
                )));
            }
            if on_disk.epoch < self.epoch() {
                log::warn!(
                    "the lease file was overwritten by a renewal of epoch {} ({}), which no longer holds; renewing epoch {} over it",
                    on_disk.epoch,
                    on_disk.owner,
                    self.epoch()
                );
            }
        }
        let began = Instant::now();
        let mut record = self.record();
        record.renewed_at = wall_ms();
        record.renewals += 1;
        write_record(&self.dir, &record)?;
        // Durable: the holder's time starts again from when this renewal began.
        self.renewed.fetch_max(self.nanos(began), Ordering::AcqRel);
        *self.record.lock().unwrap_or_else(|p| p.into_inner()) = record;
        self.check()
    }

    /// Lets the lease go at a graceful stop, once the server has stopped writing: a
    /// standby takes it at its next look instead of after the TTL. Nothing is released
    /// when the lease was lost meanwhile.
    pub fn release(&self) -> Result<()> {
        self.check()?;
        let mut record = self.record();
        record.released = true;
        record.renewed_at = wall_ms();
        write_record(&self.dir, &record)?;
        self.lost.store(true, Ordering::Release);
        Ok(())
    }

    /// Whether the lease was lost (it never comes back: a new one is taken).
    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    /// `at` as nanoseconds after the lease's base instant.
    fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Marks the lease lost for `why` (logged once) and gives the error that says so.
    fn lose(&self, why: String) -> Error {
        let first = !self.lost.swap(true, Ordering::AcqRel);
        let mut reason = self.reason.lock().unwrap_or_else(|p| p.into_inner());
        if first {
            log::error!(
                "lease of epoch {} lost: {why}; this instance acknowledges nothing more and steps down",
                self.epoch()
            );
            *reason = Some(why);
        }
        self.lost_error(reason.as_deref().unwrap_or("lost"))
    }

    fn lost_error(&self, why: &str) -> Error {
        Error::new(
            ErrorKind::Unavailable,
            format!(
                "This instance no longer holds the data directory's lease (epoch {}: {why}); the active instance answers",
                self.epoch()
            ),
        )
    }

    fn remove_old_claims(&self) {
        let epoch = self.epoch();
        for (n, path) in claims(&self.dir) {
            if n + CLAIMS_KEPT < epoch {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

impl Fence for Lease {
    fn check(&self) -> Result<()> {
        if self.is_lost() {
            let reason = self.reason.lock().unwrap_or_else(|p| p.into_inner());
            return Err(self.lost_error(reason.as_deref().unwrap_or("lost")));
        }
        // The next epoch's claim (a standby whose TTL is shorter than this holder's
        // would take over early) is looked for at most once a millisecond: a stat per
        // write costs more than the window it would close.
        let now = self.nanos(Instant::now());
        let looked = self.claim_looked.load(Ordering::Acquire);
        if now.saturating_sub(looked) >= CLAIM_LOOK_NS
            && self
                .claim_looked
                .compare_exchange(looked, now, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            && claim_path(&self.dir, self.epoch() + 1).exists()
        {
            return Err(self.lose(format!("epoch {} was taken", self.epoch() + 1)));
        }
        // The clock last, read again: the `stat` above is a system call, at whose end a
        // pause can take effect; what the check answers must be as of its own end, right
        // before the write it guards.
        let now = self.nanos(Instant::now());
        let since = Duration::from_nanos(now.saturating_sub(self.renewed.load(Ordering::Acquire)));
        if since + self.timing.margin() >= self.timing.ttl {
            return Err(self.lose(format!(
                "no renewal for {since:?}, within {:?} of the TTL ({:?})",
                self.timing.margin(),
                self.timing.ttl
            )));
        }
        Ok(())
    }
}

/// What a standby sees of a lease while it waits.
pub struct Watch {
    seen: Option<(Option<LeaseRecord>, Instant)>,
}

/// What a standby should do after a look at the lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Look {
    /// Another instance holds it (as the file says).
    Held(Option<LeaseRecord>),
    /// It ran out (or there is none and this instance may take one): take this epoch.
    Take(u64),
}

impl Watch {
    /// A watch that has seen nothing yet.
    pub fn new() -> Watch {
        Watch { seen: None }
    }

    /// Looks at `dir`'s lease: it may be taken once it has been seen unchanged — the same
    /// epoch, owner and renewal count — for the TTL, or at once when there is none and
    /// `eager` (a PRIMARY starting).
    pub fn look(&mut self, dir: &Path, timing: LeaseTiming, eager: bool) -> Look {
        let now = Instant::now();
        let current = LeaseRecord::read(dir);
        let claimed = claims(dir).into_iter().map(|(n, _)| n).max().unwrap_or(0);
        let next_epoch = current.as_ref().map_or(claimed, |r| r.epoch.max(claimed)) + 1;
        if current.is_none() && eager && claimed == 0 {
            return Look::Take(next_epoch);
        }
        if current.as_ref().is_some_and(|r| r.released) {
            return Look::Take(next_epoch);
        }
        match &self.seen {
            Some((seen, since)) if *seen == current => {
                if now.duration_since(*since) >= timing.ttl {
                    return Look::Take(next_epoch);
                }
            }
            _ => self.seen = Some((current.clone(), now)),
        }
        Look::Held(current)
    }
}

impl Default for Watch {
    fn default() -> Self {
        Watch::new()
    }
}

fn claim_path(dir: &Path, epoch: u64) -> PathBuf {
    dir.join(format!("{CLAIM_PREFIX}{epoch}"))
}

/// The epochs claimed in `dir`, with their claim files (none when it cannot be read).
fn claims(dir: &Path) -> Vec<(u64, PathBuf)> {
    let Ok(read) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    read.flatten()
        .filter_map(|item| {
            let epoch = item
                .file_name()
                .to_str()
                .and_then(|n| n.strip_prefix(CLAIM_PREFIX))
                .and_then(|n| n.parse::<u64>().ok())?;
            Some((epoch, item.path()))
        })
        .collect()
}

fn write_record(dir: &Path, record: &LeaseRecord) -> Result<()> {
    let bytes = serde_json::to_vec(record)
        .map_err(|e| Error::internal(format!("encoding the lease: {e}")))?;
    replace_atomically(&dir.join(LEASE_FILE), &bytes)
}

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Long enough that a busy machine's scheduling never looks like a pause.
    fn timing() -> LeaseTiming {
        LeaseTiming {
            ttl: Duration::from_millis(2000),
            poll: Duration::from_millis(300),
        }
    }

    fn record(owner: &str, epoch: u64) -> LeaseRecord {
        LeaseRecord {
            owner: owner.into(),
            epoch,
            renewed_at: 0,
            url: format!("http://{owner}/"),
            role: "PRIMARY".into(),
            released: false,
            renewals: 0,
        }
    }

    #[test]
    fn one_of_two_takes_an_epoch_and_the_holder_sees_the_next_one_taken() {
        let dir = tempfile::tempdir().unwrap();
        let a = Lease::take(dir.path(), record("a", 1), timing())
            .unwrap()
            .unwrap();
        assert!(
            Lease::take(dir.path(), record("b", 1), timing())
                .unwrap()
                .is_none()
        );
        a.check().unwrap();
        a.renew().unwrap();
        let b = Lease::take(dir.path(), record("b", 2), timing())
            .unwrap()
            .unwrap();
        std::thread::sleep(Duration::from_millis(2));
        assert!(a.check().is_err(), "epoch 2 taken: a is fenced");
        assert!(a.renew().is_err());
        // A renewal the old holder had begun before it lost (paused mid-write) lands
        // after the take-over: the new holder keeps the lease and writes it again.
        write_record(dir.path(), &record("a", 1)).unwrap();
        b.renew().unwrap();
        b.check().unwrap();
        b.check().unwrap();
        assert_eq!(LeaseRecord::read(dir.path()).unwrap().owner, "b");
    }

    #[test]
    fn a_holder_stops_before_its_ttl_by_its_own_clock() {
        let dir = tempfile::tempdir().unwrap();
        let a = Lease::take(dir.path(), record("a", 1), timing())
            .unwrap()
            .unwrap();
        a.check().unwrap();
        // As if the process had been stopped: no renewal for the TTL minus the margin.
        std::thread::sleep(timing().ttl - timing().margin());
        let e = a.check().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
        assert!(a.renew().is_err(), "a lost lease is not renewed");
    }

    #[test]
    fn a_standby_takes_a_lease_seen_unchanged_for_the_ttl() {
        let dir = tempfile::tempdir().unwrap();
        let mut watch = Watch::new();
        // No lease: a SECONDARY waits a TTL; a PRIMARY takes epoch 1 at once.
        assert_eq!(watch.look(dir.path(), timing(), false), Look::Held(None));
        assert_eq!(Watch::new().look(dir.path(), timing(), true), Look::Take(1));
        let a = Lease::take(dir.path(), record("a", 1), timing())
            .unwrap()
            .unwrap();
        let mut watch = Watch::new();
        assert!(matches!(
            watch.look(dir.path(), timing(), false),
            Look::Held(Some(_))
        ));
        // Renewed within the TTL: still held.
        std::thread::sleep(timing().poll);
        a.renew().unwrap();
        assert!(matches!(
            watch.look(dir.path(), timing(), false),
            Look::Held(Some(_))
        ));
        // Unchanged for the TTL: taken, as epoch 2.
        std::thread::sleep(timing().ttl);
        assert_eq!(watch.look(dir.path(), timing(), false), Look::Take(2));
        // And by then the holder's own clock had stopped it.
        assert!(a.check().is_err());
    }

    #[test]
    fn a_renewal_is_told_by_its_count_even_when_the_wall_clock_repeats() {
        let dir = tempfile::tempdir().unwrap();
        let a = Lease::take(dir.path(), record("a", 1), timing())
            .unwrap()
            .unwrap();
        a.renew().unwrap();
        a.renew().unwrap();
        let on_disk = LeaseRecord::read(dir.path()).unwrap();
        assert_eq!(on_disk.renewals, 2);
        let mut watch = Watch::new();
        assert!(matches!(
            watch.look(dir.path(), timing(), false),
            Look::Held(Some(_))
        ));
        // A renewal written with the same wall-clock time (a clock set back): still a
        // renewal, so the TTL counts again from this look.
        std::thread::sleep(timing().ttl);
        write_record(
            dir.path(),
            &LeaseRecord {
                renewals: 3,
                ..on_disk.clone()
            },
        )
        .unwrap();
        assert!(matches!(
            watch.look(dir.path(), timing(), false),
            Look::Held(Some(_))
        ));
        // A file without the count (written by an older halflife) still reads.
        std::fs::write(
            dir.path().join(LEASE_FILE),
            br#"{"owner":"old","epoch":1,"renewed_at":5,"url":"u","role":"PRIMARY"}"#,
        )
        .unwrap();
        assert_eq!(LeaseRecord::read(dir.path()).unwrap().renewals, 0);
    }

    #[test]
    fn a_released_lease_is_taken_at_the_next_look() {
        let dir = tempfile::tempdir().unwrap();
        let a = Lease::take(dir.path(), record("a", 1), timing())
            .unwrap()
            .unwrap();
        let mut watch = Watch::new();
        assert!(matches!(
            watch.look(dir.path(), timing(), false),
            Look::Held(Some(_))
        ));
        a.release().unwrap();
        assert!(a.check().is_err(), "a released lease fences its holder");
        assert_eq!(watch.look(dir.path(), timing(), false), Look::Take(2));
    }

    #[test]
    fn timing_leaves_room_for_a_slow_renewal() {
        assert!(timing().validate().is_ok());
        let tight = LeaseTiming {
            ttl: Duration::from_secs(10),
            poll: Duration::from_secs(10),
        };
        assert!(tight.validate().unwrap_err().contains("RS_LOCK_FILE_TTL"));
        let reductstore = LeaseTiming {
            ttl: Duration::from_secs(30),
            poll: Duration::from_secs(10),
        };
        assert_eq!(reductstore.margin(), Duration::from_secs(3));
        assert!(reductstore.validate().is_ok());
    }
}
