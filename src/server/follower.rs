//! A REPLICA's follower thread (`docs/high-availability.md`): every
//! `RS_ENGINE_REPLICA_UPDATE_INTERVAL` it reads what the writer of the shared directory
//! changed — buckets, entries and records (`Store::follow_writer`), lifecycle
//! definitions, tokens — without writing anything there; a replica that follows a
//! remote first lays out what the writer published there (`open_mirror`).

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::server::state::App;
use crate::storage::Store;
use crate::storage::remote::mirror::Mirror;

/// The running follower; [`Follower::stop`] ends it.
pub(super) struct Follower {
    /// Dropping it wakes the thread to end.
    stop: Option<crossbeam_channel::Sender<()>>,
    handle: Option<JoinHandle<()>>,
}

impl Follower {
    /// Starts following every `interval`.
    pub(super) fn start(app: Arc<App>, interval: Duration) -> Result<Follower> {
        let (stop, stopped) = crossbeam_channel::bounded::<()>(0);
        let handle = std::thread::Builder::new()
            .name("halflife-replica".into())
            .spawn(move || {
                while let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(interval)
                {
                    follow_once(&app);
                }
            })
            .map_err(|e| Error::io("starting the replica's follower", e))?;
        log::info!(
            "replica: reading the writer's changes every {} s",
            interval.as_secs_f64()
        );
        Ok(Follower {
            stop: Some(stop),
            handle: Some(handle),
        })
    }

    /// Ends the thread (after the look in progress).
    pub(super) fn stop(&mut self) {
        drop(self.stop.take());
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

/// One look at the writer's files. A failure keeps what was read before and is said; the
/// next look tries again.
fn follow_once(app: &App) {
    if let Some(mirror) = &app.mirror {
        match mirror.pull() {
            Ok(pulled) if pulled.updated + pulled.removed > 0 => log::debug!(
                "replica: {} tiered entr(y/ies) updated, {} removed",
                pulled.updated,
                pulled.removed
            ),
            Ok(_) => {}
            Err(e) => log::warn!(
                "replica: remote '{}' was not read: {e}",
                mirror.remote().name
            ),
        }
    }
    match app.store.follow_writer() {
        Ok(followed) if followed.opened + followed.dropped > 0 => log::info!(
            "replica: {} bucket(s) appeared, {} went",
            followed.opened,
            followed.dropped
        ),
        Ok(_) => {}
        Err(e) => log::warn!("replica: the data directory was not read: {e}"),
    }
    if let Err(e) = app.lifecycles.follow() {
        log::warn!("replica: the lifecycle definitions were not read: {e}");
    }
    if let Some(tokens) = &app.tokens
        && let Err(e) = tokens.follow()
    {
        log::warn!("replica: the tokens were not read: {e}");
    }
    app.replica_updates
        .fetch_add(1, std::sync::atomic::Ordering::Release);
}

/// The mirror of a REPLICA that follows a remote (`--follow-remote NAME`), with what is
/// published already laid out and opened; `None` without the option. Refused on another
/// role: only a replica reads a remote's manifests instead of its own writes.
pub(super) fn open_mirror(
    follow_remote: Option<&str>,
    replica: bool,
    store: &Store,
) -> Result<Option<Arc<Mirror>>> {
    let Some(name) = follow_remote else {
        return Ok(None);
    };
    if !replica {
        return Err(Error::unprocessable(format!(
            "--follow-remote {name}: only a REPLICA follows a remote (RS_INSTANCE_ROLE=REPLICA)"
        )));
    }
    let remote = store.remotes().require(name)?.clone();
    let mirror = Arc::new(Mirror::new(remote, store.data_path()));
    // What is published already is served from the first request on.
    match mirror.pull() {
        Ok(pulled) if pulled.updated == 0 => log::warn!(
            "replica: remote '{name}' has no manifest yet: the writer publishes them with RS_REMOTE_<NAME>_PUBLISH_MANIFESTS=true, at its next tier run or collector round"
        ),
        Ok(pulled) => log::info!(
            "replica: following remote '{name}': {} tiered entr(y/ies)",
            pulled.updated
        ),
        Err(e) => log::warn!("replica: remote '{name}' not read yet: {e}"),
    }
    store.follow_writer()?;
    Ok(Some(mirror))
}
