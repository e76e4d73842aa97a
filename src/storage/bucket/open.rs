//! Opening a bucket: its settings, then every entry under its directory. An entry that
//! cannot be opened or listed (damage, permissions) is marked unavailable with its
//! reason — listed by the storage report, never written over — and the rest of the
//! bucket works.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::{Bucket, SETTINGS_FILE, TRASH_PREFIX};
use crate::error::{Error, ErrorKind, Result};
use crate::storage::entry::{Entry, EntryContext, holds_entry};
use crate::storage::fan_out::for_each_on_threads;
use crate::storage::merge::MergeQueue;
use crate::storage::names::validate_entry_name;
use crate::storage::settings::BucketSettings;
use crate::storage::sync::fsutil::{TMP_SUFFIX, remove_file_if_exists};

/// Entries opened at once.
const OPEN_THREADS: usize = 4;

impl Bucket {
    /// Opens a bucket directory and every entry under it.
    pub(crate) fn open(
        dir: &Path,
        name: &str,
        ctx: EntryContext,
        merges: MergeQueue,
    ) -> Result<Bucket> {
        let settings = read_settings(dir)?;
        let read_only = ctx.read_only;
        if !read_only {
            remove_trash(dir)?;
        }
        let bucket = Bucket::with_no_entries(name, dir.to_path_buf(), settings, ctx, merges);
        let mut holding = Vec::new();
        bucket.discover(dir, "", &mut holding)?;
        let mut found = bucket.open_entries(holding);
        if read_only {
            // A replica makes no parents and asks for no merges: the writer does both.
            *bucket.entries_mut() = found;
            return Ok(bucket);
        }
        // Entries written before parents were made (or whose parent was removed alone)
        // get their parents now, as a write would make them.
        let children: Vec<String> = found.keys().filter(|n| n.contains('/')).cloned().collect();
        for child in children {
            for (slash, _) in child.match_indices('/') {
                let parent = &child[..slash];
                if found.contains_key(parent) || holds_entry(&dir.join(parent)) {
                    continue;
                }
                match bucket.create_entry(&mut found, parent) {
                    Ok(_) => log::info!("bucket {}: made parent entry {parent}", bucket.name),
                    Err(e) => log::warn!("bucket {}: parent entry {parent}: {e}", bucket.name),
                }
            }
        }
        // A merge interrupted by a crash (or never started) is asked for again.
        let limits = bucket.settings().block_limits();
        for entry in found.values() {
            bucket.merges.request_if_needed(entry, limits);
        }
        *bucket.entries_mut() = found;
        Ok(bucket)
    }

    /// Walks the directory tree; every directory holding an index is an entry, collected
    /// with its path (a directory that fails to be listed is marked unavailable).
    pub(super) fn discover(
        &self,
        dir: &Path,
        prefix: &str,
        holding: &mut Vec<(String, PathBuf)>,
    ) -> Result<()> {
        let listing = std::fs::read_dir(dir)
            .map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
        for item in listing.flatten() {
            let file_name = item.file_name().to_string_lossy().into_owned();
            if file_name.starts_with('.') || !item.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let name = if prefix.is_empty() {
                file_name
            } else {
                format!("{prefix}/{file_name}")
            };
            if validate_entry_name(&name).is_err() {
                log::warn!(
                    "bucket {}: skipping directory {name}: not an entry name",
                    self.name
                );
                continue;
            }
            let path = item.path();
            if holds_entry(&path) {
                holding.push((name.clone(), path.clone()));
            }
            // A directory that cannot be listed costs itself (and what is under it),
            // never the rest of the bucket.
            if let Err(e) = self.discover(&path, &name, holding) {
                log::error!(
                    "entry {}/{name} is not available: {e}; the rest of the bucket is",
                    self.name
                );
                self.mark_unavailable(&name, e.message());
            }
        }
        Ok(())
    }

    /// Opens the entries found, several at once: opening one replays its open logs, and a
    /// bucket of many entries would otherwise wait for each in turn. A damaged entry is
    /// left alone on disk (see `entry_or_create`), marked unavailable, and the rest of the
    /// bucket keeps working.
    fn open_entries(&self, holding: Vec<(String, PathBuf)>) -> BTreeMap<String, Arc<Entry>> {
        let found = Mutex::new(BTreeMap::new());
        for_each_on_threads(&holding, OPEN_THREADS, |(name, path)| {
            match Entry::open(&self.name, name, path, self.ctx.clone()) {
                Ok(entry) => {
                    let mut found = found.lock().unwrap_or_else(|p| p.into_inner());
                    found.insert(name.clone(), entry.into_shared());
                }
                // A replica finds an entry its writer is creating: next time.
                Err(e) if self.ctx.read_only && e.kind() == ErrorKind::NotFound => {}
                Err(e) => {
                    log::error!("entry {}/{name} is not available: {e}", self.name);
                    self.mark_unavailable(name, e.message());
                }
            }
        });
        found.into_inner().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn mark_unavailable(&self, name: &str, why: &str) {
        self.unavailable
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), why.to_string());
    }

    /// Whether some entry failed to open.
    pub(crate) fn has_unavailable_entries(&self) -> bool {
        !self
            .unavailable
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }

    /// Why entry `name` could not be opened, if it could not.
    pub(super) fn unavailable_entry(&self, name: &str) -> Option<String> {
        self.unavailable
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    /// The entries on disk that could not be opened, with why, sorted by name.
    pub fn unavailable_entries(&self) -> Vec<(String, String)> {
        self.unavailable
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(n, why)| (n.clone(), why.clone()))
            .collect()
    }
}

/// A bucket directory's settings file, parsed.
pub(super) fn read_settings(dir: &Path) -> Result<BucketSettings> {
    let path = dir.join(SETTINGS_FILE);
    let raw =
        std::fs::read(&path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    serde_json::from_slice(&raw)
        .map_err(|e| Error::internal(format!("{} does not parse: {e}", path.display())))
}

/// Removes leftovers of interrupted changes in `dir`: `.trash-*` directories (deletions,
/// bucket creations) and `*.tmp` files (atomic replaces of settings or `.lifecycles`).
pub(crate) fn remove_trash(dir: &Path) -> Result<()> {
    let listing =
        std::fs::read_dir(dir).map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
    for item in listing.flatten() {
        let name = item.file_name().to_string_lossy().into_owned();
        if name.ends_with(TMP_SUFFIX) && item.file_type().is_ok_and(|t| t.is_file()) {
            log::info!("removing leftover {}", item.path().display());
            remove_file_if_exists(&item.path())?;
            continue;
        }
        if name.starts_with(TRASH_PREFIX) {
            log::info!("removing leftover {}", item.path().display());
            std::fs::remove_dir_all(item.path())
                .map_err(|e| Error::io(format!("removing {}", item.path().display()), e))?;
        }
    }
    Ok(())
}
