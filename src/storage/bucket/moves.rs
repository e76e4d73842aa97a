//! Moving entries within a bucket: removing an entry with its descendants (renamed away
//! in one step, then deleted) and renaming one (one `rename(2)` of its directory). Both
//! stop the entries' writers first and change the entry map under its write lock.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{Bucket, trash_name};
use crate::error::{Error, Result};
use crate::storage::attachments::is_attachment_entry;
use crate::storage::entry::Entry;
use crate::storage::names::validate_entry_name;
use crate::storage::observer::ChangeObserver;
use crate::storage::sync::fsutil::fsync_dir;

impl Bucket {
    /// Removes an entry and every sub-entry under `name/`, by renaming its directory away
    /// (one atomic step) and then deleting it.
    pub fn remove_entry(&self, name: &str) -> Result<()> {
        validate_entry_name(name)?;
        let mut entries = self.entries_mut();
        let nested = format!("{name}/");
        let doomed: Vec<String> = entries
            .keys()
            .filter(|k| k.as_str() == name || k.starts_with(&nested))
            .cloned()
            .collect();
        if doomed.is_empty() {
            return Err(Error::not_found(format!(
                "Entry '{name}' not found in bucket '{}'",
                self.name
            )));
        }
        // Running merges and recompressions of these entries stop first (at their next
        // step): once the directory is renamed its path may name a re-created entry,
        // and none of them may write or remove anything there.
        let doomed: Vec<Arc<Entry>> = doomed
            .iter()
            .filter_map(|k| entries.get(k).cloned())
            .collect();
        let writers_stopped: Vec<_> = doomed.iter().map(|e| e.begin_removal()).collect();
        // Their tiered blocks' objects, deleted once the removal is durable.
        let objects: Vec<_> = doomed.iter().flat_map(|e| e.remote_objects()).collect();
        let trash = self.dir.join(trash_name());
        if let Err(e) = std::fs::rename(self.dir.join(name), &trash) {
            doomed.iter().for_each(|e| e.abandon_removal());
            return Err(Error::io(format!("removing entry {}/{name}", self.name), e));
        }
        fsync_dir(&self.dir)?;
        for entry in &doomed {
            entries.remove(entry.name());
            entry.mark_removed();
        }
        drop(writers_stopped);
        drop(entries);
        self.ctx.remotes.delete_objects(&objects);
        if let Err(e) = std::fs::remove_dir_all(&trash) {
            log::warn!(
                "removing {}: {e}; it is removed at the next open",
                trash.display()
            );
        }
        Ok(())
    }

    /// Renames an entry and every `old/…` descendant to `new` (and `new/…`), creating the
    /// missing parents of `new`. Crash-safe by construction: the entries move with one
    /// `rename(2)` of the entry's directory (its descendants are subdirectories), made
    /// durable by syncing both parent directories, so a kill or power cut leaves either
    /// the old or the new name, never both or neither. Writers of the moving entries
    /// stop first, as for a removal; the entries are then opened at their new place.
    pub fn rename_entry(&self, old: &str, new: &str) -> Result<()> {
        validate_entry_name(old)?;
        validate_entry_name(new)?;
        // Attachments move with their parent only: renaming one on its own, or a plain
        // entry into one, would turn records into attachments or back.
        for name in [old, new] {
            if is_attachment_entry(name) {
                return Err(Error::unprocessable(format!(
                    "Can't rename system entry '{name}': attachments follow their parent entry"
                )));
            }
        }
        let mut entries = self.entries_mut();
        if self.removed.load(Ordering::Acquire) {
            return Err(Error::not_found(format!(
                "Bucket '{}' is not found",
                self.name
            )));
        }
        let nested = format!("{old}/");
        let moving: Vec<String> = entries
            .keys()
            .filter(|k| k.as_str() == old || k.starts_with(&nested))
            .cloned()
            .collect();
        if moving.is_empty() {
            return Err(Error::not_found(format!(
                "Entry '{old}' not found in bucket '{}'",
                self.name
            )));
        }
        let exists = |name: &str| {
            Error::conflict(format!(
                "Entry '{name}' already exists in bucket '{}'",
                self.name
            ))
        };
        // Onto itself or into itself (ReductStore's words for it).
        if new == old || new.starts_with(&nested) {
            return Err(exists(new));
        }
        let target = |name: &str| format!("{new}{}", &name[old.len()..]);
        for name in &moving {
            let to = target(name);
            if entries.contains_key(&to) || self.dir.join(&to).exists() {
                return Err(exists(&to));
            }
        }
        // The new name's parents are entries (made before the move: a crash between
        // leaves only empty parents).
        for (slash, _) in new.match_indices('/') {
            self.create_entry(&mut entries, &new[..slash])?;
        }
        let moved: Vec<Arc<Entry>> = moving
            .iter()
            .filter_map(|k| entries.get(k).cloned())
            .collect();
        let writers_stopped: Vec<_> = moved.iter().map(|e| e.begin_removal()).collect();
        let (from, to) = (self.dir.join(old), self.dir.join(new));
        if let Err(e) = std::fs::rename(&from, &to) {
            moved.iter().for_each(|e| e.abandon_removal());
            return Err(Error::io(
                format!("renaming entry {}/{old} to {new}", self.name),
                e,
            ));
        }
        let (to_parent, from_parent) = (to.parent(), from.parent());
        if let Some(dir) = to_parent {
            fsync_dir(dir)?;
        }
        if let Some(dir) = from_parent.filter(|&d| Some(d) != to_parent) {
            fsync_dir(dir)?;
        }
        for entry in &moved {
            entries.remove(entry.name());
            entry.mark_removed();
        }
        drop(writers_stopped);
        for name in &moving {
            let to = target(name);
            match Entry::open(&self.name, &to, &self.dir.join(&to), self.ctx.clone()) {
                Ok(entry) => {
                    entries.insert(to, entry.into_shared());
                }
                Err(e) => log::error!(
                    "entry {}/{to} (renamed from {name}) is not available: {e}",
                    self.name
                ),
            }
        }
        log::info!(
            "bucket {}: entry {old} renamed to {new} ({} entries moved)",
            self.name,
            moving.len()
        );
        // Still under the entry map's lock: nothing is written under the new names
        // before the observer has moved what it keeps by name (replication backlogs).
        if let Some(observer) = self.ctx.observer.get() {
            let moves: Vec<(String, String)> = moving
                .iter()
                .map(|name| (name.clone(), target(name)))
                .collect();
            observer.renamed(&self.name, &moves);
        }
        drop(entries);
        Ok(())
    }
}
