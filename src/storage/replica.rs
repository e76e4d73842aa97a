//! A store opened as a replica (`Config::read_only`, `docs/high-availability.md`): the
//! data directory another process writes, read without writing anything in it, and
//! followed — buckets created, removed and renamed, and every entry's changes
//! (`bucket/replica.rs`, `entry/replica.rs`) — each time [`Store::follow_writer`] is
//! called (the server calls it every `RS_ENGINE_REPLICA_UPDATE_INTERVAL`).

use std::sync::Arc;

use crate::error::Result;
use crate::storage::config::Config;
use crate::storage::remote::Remotes;
use crate::storage::store::{Store, bucket_dirs};

/// What one look at the writer's directory found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Followed {
    /// Buckets opened (created by the writer, or renamed to their name).
    pub opened: usize,
    /// Buckets dropped (removed by the writer, or renamed away).
    pub dropped: usize,
    /// Buckets that could not be read; they keep their last state.
    pub failed: usize,
}

impl Store {
    /// Opens a replica's store: no lock, nothing recovered, no frame cache in the data
    /// directory (under `replica_cache_path`, or in memory).
    pub(crate) fn open_read_only(config: Config) -> Result<Store> {
        let remotes = Arc::new(Remotes::open_for_replica(
            &config.remotes,
            config.replica_cache_path.as_deref(),
            config.remote_cache_bytes,
        )?);
        Self::open_buckets(config, remotes, None)
    }

    /// Reads what the writer changed since the last look (a replica's store only; a
    /// writer's store has nothing to follow). Readers are answered meanwhile, each from
    /// the state before or after a change, never a mix.
    pub fn follow_writer(&self) -> Result<Followed> {
        let mut followed = Followed::default();
        if !self.config().read_only {
            return Ok(followed);
        }
        let on_disk = bucket_dirs(self.data_path(), true)?;
        let gone: Vec<String> = self
            .read_map()
            .keys()
            .filter(|name| !on_disk.iter().any(|(n, _)| n == *name))
            .cloned()
            .collect();
        for name in gone {
            if let Some(bucket) = self.write_map().remove(&name) {
                bucket.mark_removed();
                followed.dropped += 1;
            }
        }
        for (name, dir) in on_disk {
            let known = self.read_map().get(&name).cloned();
            match known {
                Some(bucket) => {
                    if let Err(e) = bucket.follow_writer() {
                        log::warn!("replica: bucket '{name}' keeps its last state: {e}");
                        followed.failed += 1;
                    }
                }
                None => match self.open_bucket(&dir, &name) {
                    Ok(bucket) => {
                        self.write_map().insert(name, Arc::new(bucket));
                        followed.opened += 1;
                    }
                    // Its writer is still creating it (no settings yet): next time.
                    Err(e) => {
                        log::debug!("replica: bucket '{name}' not opened yet: {e}");
                        followed.failed += 1;
                    }
                },
            }
        }
        Ok(followed)
    }
}
