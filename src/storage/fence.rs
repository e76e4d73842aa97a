//! The fence of a data directory shared by a standby (`RS_INSTANCE_ROLE` PRIMARY or
//! SECONDARY, `docs/high-availability.md`): once this process may have lost the lease that
//! makes it the directory's one writer, nothing more is written there. The server installs
//! its lease here; the write primitives of the engine — an append to a log, a new file, an
//! atomic replace (every commit) — ask before they touch the directory. A process that
//! never installs one (a standalone server, a maintenance command, a library user) is
//! never fenced, and the question costs one atomic read.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use crate::error::Result;

/// What a fence answers: whether this process may still write in the data directory.
pub trait Fence: Send + Sync {
    /// `Ok` while this process holds the directory; the error names why it no longer may.
    fn check(&self) -> Result<()>;
}

static FENCE: OnceLock<Arc<dyn Fence>> = OnceLock::new();

/// Set in a REPLICA's process: it writes nothing in the directory another instance
/// writes, and this makes sure of it (a write primitive reached by mistake fails instead).
static READ_ONLY: AtomicBool = AtomicBool::new(false);

/// Refuses every write into the data directory from now on (a replica's process). The
/// router does not ask this: a replica answers reads, and refuses changes itself (403).
pub fn forbid_writes() {
    READ_ONLY.store(true, Ordering::Release);
}

/// Installs the process's fence (once: a process serves one data directory). Returns
/// false when one was installed before.
pub fn install(fence: Arc<dyn Fence>) -> bool {
    FENCE.set(fence).is_ok()
}

/// Whether this process may write in its data directory now.
pub fn check() -> Result<()> {
    #[cfg(test)]
    if !thread_fence::passes() {
        return Err(crate::error::Error::new(
            crate::error::ErrorKind::Unavailable,
            "this thread's test fence is closed",
        ));
    }
    if READ_ONLY.load(Ordering::Acquire) {
        return Err(crate::error::Error::forbidden(
            "this instance is a replica: it writes nothing in its data directory",
        ));
    }
    match FENCE.get() {
        Some(fence) => fence.check(),
        None => Ok(()),
    }
}

/// Whether a fence is installed (the server answers changes only while it holds).
pub fn installed() -> bool {
    FENCE.get().is_some()
}

/// A fence of one thread, for unit tests of the write primitives: the process's fence is
/// global and once-only, and unit tests run side by side in one process.
#[cfg(test)]
pub(crate) mod thread_fence {
    use std::cell::Cell;

    thread_local! {
        /// How many more checks pass on this thread; `None`: no test fence.
        static LEFT: Cell<Option<usize>> = const { Cell::new(None) };
    }

    /// From now on on this thread, `checks` more checks pass and every later one fails
    /// (`None`: no test fence).
    pub(crate) fn set(checks: Option<usize>) {
        LEFT.with(|left| left.set(checks));
    }

    /// Whether this check passes (and counts it).
    pub(super) fn passes() -> bool {
        LEFT.with(|left| match left.get() {
            None => true,
            Some(0) => false,
            Some(n) => {
                left.set(Some(n - 1));
                true
            }
        })
    }
}
