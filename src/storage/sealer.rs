//! The background thread of a store's entries: the large I/O a write or a removal must
//! not wait for. It seals the full logs writers took off the write path
//! (`entry/seal.rs`), folds the tombstones of blocks past the fold threshold into
//! rewrites (`entry/fold.rs`), one entry at a time, and unlinks the block files a FIFO
//! quota evicted.
//!
//! A seal or fold that fails (a full disk, a damaged log) is logged and left: the log or
//! the tombstones keep answering reads, the entry's next request asks again, and a writer
//! that meets the seal backlog's bound seals it itself and gets the error.

use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};

use crate::error::{Error, Result};
use crate::storage::priority::{BackgroundPriority, run_in_background};

/// What the thread works for: an entry (`entry/seal.rs`), seen through this trait so
/// that entries can hold the queue that sends them here.
pub(crate) trait Sealable: Send + Sync {
    /// The entry's name, for the log.
    fn name(&self) -> &str;
    /// Called as the thread starts on the entry: a request from now on is sent again.
    fn started(&self);
    /// Seals every full log waiting for its seal and folds every block due for a fold.
    fn catch_up(&self) -> Result<()>;
}

enum SealJob {
    Entry(Arc<dyn Sealable>),
    /// Cleanup that must not hold up a writer (unlinking evicted files).
    Later(Box<dyn FnOnce() + Send>),
    Stop,
}

/// The handle entries use to ask for their background work.
#[derive(Clone)]
pub(crate) struct SealQueue {
    tx: Sender<SealJob>,
}

impl SealQueue {
    /// Asks for the seals and folds `entry` waits for.
    pub(crate) fn request(&self, entry: Arc<dyn Sealable>) {
        // A send fails only when the sealer has stopped (the store is closing): the index
        // names the full logs, and the next open seals them.
        let _ = self.tx.send(SealJob::Entry(entry));
    }

    /// Returns once the thread has done every job sent before this call (at once if it
    /// has stopped). Not to be called from the thread itself.
    pub(crate) fn barrier(&self) {
        let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(1);
        let mark = SealJob::Later(Box::new(move || {
            let _ = done_tx.send(());
        }));
        if self.tx.send(mark).is_ok() {
            // An error means the thread stopped and dropped the job: nothing is left.
            let _ = done_rx.recv();
        }
    }

    /// Runs `cleanup` on the thread: work a writer must not wait for, such as unlinking
    /// the files a commit no longer names (an unlink of a large file can take
    /// milliseconds).
    pub(crate) fn later(&self, cleanup: Box<dyn FnOnce() + Send>) {
        if let Err(crossbeam_channel::SendError(SealJob::Later(cleanup))) =
            self.tx.send(SealJob::Later(cleanup))
        {
            // The thread has stopped (the store is closing): done here.
            cleanup();
        }
    }
}

/// The sealer thread; stopped (after the seals already asked for) when dropped.
pub(crate) struct Sealer {
    tx: Sender<SealJob>,
    handle: Option<JoinHandle<()>>,
}

impl Sealer {
    /// Starts the thread.
    pub(crate) fn start() -> Result<Sealer> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let handle = std::thread::Builder::new()
            .name("halflife-seal".into())
            .spawn(move || seal_loop(&rx))
            .map_err(|e| Error::io("starting the seal thread", e))?;
        Ok(Sealer {
            tx,
            handle: Some(handle),
        })
    }

    /// A queue for the entries of the store.
    pub(crate) fn queue(&self) -> SealQueue {
        SealQueue {
            tx: self.tx.clone(),
        }
    }
}

impl Drop for Sealer {
    fn drop(&mut self) {
        let _ = self.tx.send(SealJob::Stop);
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

fn seal_loop(rx: &Receiver<SealJob>) {
    // Behind the request handlers for the CPU (a 64 MB copy on a 2-core machine would
    // otherwise take turns with them), but never idle: a backlog of full logs must
    // drain under a sustained load, or writers end up sealing them.
    run_in_background(BackgroundPriority::Low);
    while let Ok(job) = rx.recv() {
        let entry = match job {
            SealJob::Stop => break,
            SealJob::Later(cleanup) => {
                cleanup();
                continue;
            }
            SealJob::Entry(entry) => entry,
        };
        entry.started();
        if let Err(e) = entry.catch_up() {
            log::warn!(
                "entry {}: sealing its full logs or folding its tombstones failed: {e}; the logs and tombstones keep answering reads, and the work is tried again with the entry's next request",
                entry.name()
            );
        }
    }
    // Jobs sent after the stop hold entries whose queues hold this channel: dropped
    // here, so nothing keeps the other alive.
    while let Ok(job) = rx.try_recv() {
        if let SealJob::Later(cleanup) = job {
            cleanup();
        }
    }
}
