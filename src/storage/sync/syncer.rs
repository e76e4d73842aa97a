//! The interval syncer: one thread that syncs the files written since its last round, at
//! the period of `interval:<d>` mode.

use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{Sender, bounded};

use super::{Durability, SyncMode};
use crate::error::{Error, Result};

/// The running syncer thread (none outside `interval` mode). Dropping it stops the thread
/// after one last round, so a clean shutdown leaves nothing unsynced.
pub struct Syncer {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Syncer {
    /// Starts the syncer for `durability` if its mode is `interval`.
    pub fn start(durability: &Arc<Durability>) -> Result<Syncer> {
        let SyncMode::Interval(period) = durability.mode() else {
            return Ok(Syncer {
                stop: None,
                thread: None,
            });
        };
        let (stop, stopped) = bounded::<()>(1);
        let durability = durability.clone();
        let thread = std::thread::Builder::new()
            .name("halflife-syncer".into())
            .spawn(move || {
                // A message or a closed channel both mean stop; a timeout is a round.
                while let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(period)
                {
                    durability.sync_dirty();
                }
                durability.sync_dirty();
            })
            .map_err(|e| Error::io("starting the syncer thread", e))?;
        Ok(Syncer {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
