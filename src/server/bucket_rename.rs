//! Renaming a bucket together with everything that names it: the token permission
//! lists, the lifecycle policies and the replication tasks replicating it.
//!
//! Crash safety: the bucket's directory moves in one `rename(2)` (the store's part),
//! but tokens and policies live in other files, so the rename is written down first as
//! an intent, `.bucket-rename` in the data directory (written atomically and synced).
//! Then the directory moves (synced), then tokens and policies follow, then the intent
//! is removed. A server starting with an intent left finishes the rename if the
//! directory moved (following tokens and policies again is idempotent) and forgets it
//! if the directory did not: a kill or power cut at any point leaves the old name or
//! the new one everywhere.

use std::path::Path;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::lifecycle::LifecycleRepository;
use crate::replication::Replications;
use crate::server::auth::TokenRepository;
use crate::server::state::App;
use crate::storage::Store;
use crate::storage::sync::fsutil::{fsync_dir, remove_file_if_exists, write_atomic};

/// The intent file in the data directory, present only while a rename is under way.
pub const INTENT_FILE: &str = ".bucket-rename";

/// What the intent file holds.
#[derive(Serialize, Deserialize)]
struct Intent {
    old: String,
    new: String,
}

/// What followed a bucket rename.
#[derive(Debug, Default)]
pub struct Followed {
    /// Tokens whose permission lists named the old bucket.
    pub tokens: usize,
    /// Policies that named the old bucket and now name the new one, sorted.
    pub lifecycles: Vec<String>,
    /// Replication tasks whose source was the old bucket, sorted.
    pub replications: Vec<String>,
}

/// Renames bucket `old` to `new` (the caller checked permissions and provisioning).
pub fn rename_bucket(app: &App, old: &str, new: &str) -> Result<Followed> {
    // One rename at a time: there is one intent file.
    static RENAMING: Mutex<()> = Mutex::new(());
    let _one = RENAMING.lock().unwrap_or_else(|p| p.into_inner());
    let data = app.store.data_path();
    // Refusals that need no intent, before one is written.
    app.store.bucket(old)?;
    let intent = serde_json::to_vec(&Intent {
        old: old.to_string(),
        new: new.to_string(),
    })
    .map_err(|e| Error::internal(format!("encoding the rename intent: {e}")))?;
    let intent_path = data.join(INTENT_FILE);
    write_atomic(&intent_path, &intent)?;
    if let Err(e) = app.store.rename_bucket(old, new) {
        // Nothing moved: the intent goes (a leftover would only be forgotten at start).
        let _ = remove_file_if_exists(&intent_path);
        return Err(e);
    }
    app.queries.forget_bucket(old);
    let mut followed = follow(data, app.tokens.as_ref(), &app.lifecycles, old, new)?;
    followed.replications = app.replications.rename_source_bucket(old, new)?;
    remove_file_if_exists(&intent_path)?;
    fsync_dir(data)?;
    log::info!(
        "bucket '{old}' renamed to '{new}': {} token(s), {} lifecycle(s) and {} replication(s) follow",
        followed.tokens,
        followed.lifecycles.len(),
        followed.replications.len()
    );
    Ok(followed)
}

/// Points tokens and policies at the new name. With authentication off the token file
/// (tokens made while it was on) follows all the same.
fn follow(
    data: &Path,
    tokens: Option<&TokenRepository>,
    lifecycles: &LifecycleRepository,
    old: &str,
    new: &str,
) -> Result<Followed> {
    let tokens = match tokens {
        Some(repo) => repo.rename_bucket(old, new)?,
        None => TokenRepository::open(data, "")?.rename_bucket(old, new)?,
    };
    let lifecycles = lifecycles.rename_bucket(data, old, new)?;
    Ok(Followed {
        tokens,
        lifecycles,
        replications: Vec::new(),
    })
}

/// At start, before tokens and policies are loaded: finishes a rename a crash
/// interrupted (see the module comment). Token and policy files are rewritten here, so
/// the repositories opened afterwards load the new name.
pub fn recover(store: &Store) -> Result<()> {
    let data = store.data_path();
    let intent_path = data.join(INTENT_FILE);
    let raw = match std::fs::read(&intent_path) {
        Ok(raw) => raw,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(format!("reading {}", intent_path.display()), e)),
    };
    match serde_json::from_slice::<Intent>(&raw) {
        Ok(Intent { old, new }) if data.join(&new).is_dir() && !data.join(&old).exists() => {
            let tokens = TokenRepository::open(data, "")?.rename_bucket(&old, &new)?;
            let lifecycles = LifecycleRepository::read_only().rename_bucket(data, &old, &new)?;
            let replications = Replications::rename_source_bucket_in(data, &old, &new)?;
            log::warn!(
                "finished renaming bucket '{old}' to '{new}' (interrupted): {tokens} token(s), {} lifecycle(s) and {} replication(s) follow",
                lifecycles.len(),
                replications.len()
            );
        }
        Ok(Intent { old, new }) => {
            log::warn!(
                "the interrupted rename of bucket '{old}' to '{new}' had not moved it: it keeps its name"
            );
        }
        // Written atomically, so only damage gets here; nothing can be finished.
        Err(e) => log::error!("{} does not parse ({e}); ignored", intent_path.display()),
    }
    remove_file_if_exists(&intent_path)?;
    fsync_dir(data)
}
