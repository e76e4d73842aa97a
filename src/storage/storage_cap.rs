//! The whole store's cap on the local disk (`RS_ENGINE_MAX_STORAGE_SIZE`): a write that
//! would take the bytes of every bucket together past it is refused with 507, as a full
//! disk is, before anything of it is written. Buckets' own quotas (a FIFO one dropping its
//! oldest blocks) act first; the cap is the guard behind them all.
//!
//! Summing every entry's size locks each entry, which a write must not do: the total is
//! counted at most once a second and the writes admitted since are added to it, and a
//! write that seems not to fit has the total counted afresh first (space freed by a
//! policy or a quota since the last count is then seen).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind, Result};

/// How old the count may get before a write counts again.
const RECOUNT: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Count {
    /// When the bytes were last summed.
    at: Option<Instant>,
    /// Bytes then, plus the writes admitted since.
    used: u64,
}

/// The cap and its running count.
pub struct StorageCap {
    max: u64,
    count: Mutex<Count>,
}

impl StorageCap {
    /// A cap of `max` bytes.
    pub fn new(max: u64) -> StorageCap {
        StorageCap {
            max,
            count: Mutex::new(Count::default()),
        }
    }

    /// Admits a write of `incoming` bytes, or refuses it (507 naming the cap) when it
    /// would pass the cap; `used` sums the bytes the store takes now.
    pub fn admit(&self, incoming: u64, used: impl Fn() -> Result<u64>) -> Result<()> {
        let mut count = self.count.lock().unwrap_or_else(|p| p.into_inner());
        let fresh = |count: &mut Count| -> Result<()> {
            count.used = used()?;
            count.at = Some(Instant::now());
            Ok(())
        };
        let stale = count.at.is_none_or(|at| at.elapsed() >= RECOUNT);
        if stale {
            fresh(&mut count)?;
        }
        if count.used.saturating_add(incoming) > self.max && !stale {
            fresh(&mut count)?;
        }
        if count.used.saturating_add(incoming) > self.max {
            return Err(Error::new(
                ErrorKind::InsufficientStorage,
                format!(
                    "The storage is limited to {} bytes (RS_ENGINE_MAX_STORAGE_SIZE) and holds {}: a write of {incoming} bytes does not fit",
                    self.max, count.used
                ),
            ));
        }
        count.used += incoming;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn writes_are_admitted_up_to_the_cap_and_space_freed_is_seen() {
        let cap = StorageCap::new(100);
        let on_disk = Cell::new(10u64);
        let counts = Cell::new(0);
        let used = || {
            counts.set(counts.get() + 1);
            Ok(on_disk.get())
        };
        // The writes land on the disk as they are admitted.
        cap.admit(50, used).unwrap();
        on_disk.set(60);
        cap.admit(40, used).unwrap();
        on_disk.set(100);
        assert_eq!(counts.get(), 1, "counted once, the writes added");
        let refused = cap.admit(1, used).unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::InsufficientStorage);
        assert!(
            refused.to_string().contains("limited to 100 bytes")
                && refused.to_string().contains("RS_ENGINE_MAX_STORAGE_SIZE"),
            "{refused}"
        );
        assert_eq!(counts.get(), 2, "a refusal counts afresh first");
        // A policy freed space: the next refusal-to-be counts again and sees it.
        on_disk.set(20);
        cap.admit(80, used).unwrap();
        on_disk.set(100);
        assert!(cap.admit(1, used).is_err());
    }
}
