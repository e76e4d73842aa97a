//! A replica's bucket following its writer (`Config::read_only`,
//! `docs/high-availability.md`): the settings, the entries created and removed, and each
//! entry's own changes (`storage/entry/replica.rs`), read from the directory without
//! writing in it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use super::Bucket;
use super::open::read_settings;
use crate::error::{ErrorKind, Result};
use crate::storage::entry::{Entry, Look};

impl Bucket {
    /// Reads what the writer changed since the last look: new settings, entries created
    /// (opened), removed (dropped: their readers get a 404) or created again under their
    /// name (opened anew), and the changes inside each entry. An entry that fails to load
    /// keeps its last state and says why.
    pub(crate) fn follow_writer(&self) -> Result<()> {
        match read_settings(&self.dir) {
            Ok(settings) => {
                *self.settings.write().unwrap_or_else(|p| p.into_inner()) = settings;
            }
            // Gone with the bucket: the store drops it.
            Err(e) => log::debug!("bucket {}: settings not read: {e}", self.name),
        }
        let mut holding = Vec::new();
        self.discover(&self.dir, "", &mut holding)?;
        let on_disk: BTreeMap<String, PathBuf> = holding.into_iter().collect();
        let known: Vec<(String, Arc<Entry>)> = self
            .entries_ref()
            .iter()
            .map(|(n, e)| (n.clone(), e.clone()))
            .collect();
        for (name, entry) in &known {
            if !on_disk.contains_key(name) {
                self.drop_entry(name, entry);
            }
        }
        for (name, path) in on_disk {
            let entry = self.entries_ref().get(&name).cloned();
            match entry.map(|e| (e.follow_writer(true), e)) {
                Some((Ok(Look::Recreated), old)) => {
                    self.drop_entry(&name, &old);
                    self.open_followed(&name, &path);
                }
                Some((Ok(_), _)) => {}
                Some((Err(e), _)) => log::warn!(
                    "replica: entry {}/{name} keeps its last state: {e}",
                    self.name
                ),
                None => self.open_followed(&name, &path),
            }
        }
        Ok(())
    }

    /// Forgets an entry the writer removed (or replaced): its readers get a 404.
    fn drop_entry(&self, name: &str, entry: &Arc<Entry>) {
        let mut entries = self.entries_mut();
        if entries.get(name).is_some_and(|e| Arc::ptr_eq(e, entry)) {
            entries.remove(name);
        }
        drop(entries);
        entry.mark_removed();
    }

    /// Opens an entry the writer created; one it is still creating (no index yet) waits
    /// for the next look.
    fn open_followed(&self, name: &str, path: &std::path::Path) {
        match Entry::open(&self.name, name, path, self.ctx.clone()) {
            Ok(entry) => {
                self.entries_mut()
                    .insert(name.to_string(), entry.into_shared());
                self.unavailable
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(name);
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => {
                if self.unavailable_entry(name).as_deref() != Some(e.message()) {
                    log::error!("replica: entry {}/{name} is not available: {e}", self.name);
                }
                self.mark_unavailable(name, e.message());
            }
        }
    }
}
