//! The sealer thread of a store: seals the full logs writers took off the write path
//! (`entry/seal.rs`), one entry at a time.
//!
//! A seal that fails (a full disk, a damaged log) is logged and left: the log keeps
//! answering reads, the entry's next full log asks again, and a writer that meets the
//! backlog's bound seals it itself and gets the error.

use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};

use crate::error::{Error, Result};

/// What the sealer seals: an entry (`entry/seal.rs`), seen through this trait so that
/// entries can hold the queue that sends them here.
pub(crate) trait Sealable: Send + Sync {
    /// The entry's name, for the log.
    fn name(&self) -> &str;
    /// Called as the thread starts on the entry: a request from now on is sent again.
    fn started(&self);
    /// Seals every full log waiting for its seal.
    fn catch_up(&self) -> Result<()>;
}

enum SealJob {
    Entry(Arc<dyn Sealable>),
    Stop,
}

/// The handle entries use to ask for the seal of their full logs.
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
    while let Ok(job) = rx.recv() {
        let entry = match job {
            SealJob::Stop => break,
            SealJob::Entry(entry) => entry,
        };
        entry.started();
        if let Err(e) = entry.catch_up() {
            log::warn!(
                "entry {}: sealing its full logs failed: {e}; their records are read from the logs, and the seal is tried again with the entry's next full log",
                entry.name()
            );
        }
    }
    // Jobs sent after the stop hold entries whose queues hold this channel: dropped
    // here, so nothing keeps the other alive.
    while rx.try_recv().is_ok() {}
}
