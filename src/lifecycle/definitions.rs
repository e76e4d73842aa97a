//! Where policy definitions live on disk: a snapshot, `.lifecycles` (a JSON map from name
//! to definition, replaced atomically), and a journal, `.lifecycles.journal`, with one
//! operation per change since the snapshot — a `JournaledMap` (`storage/format/
//! journaled_map.rs`: O(1) per change, crash-safe), plus what is particular to policies.

use std::collections::BTreeMap;
use std::ops::Deref;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::lifecycle::settings::LifecycleSettings;
pub use crate::storage::format::journaled_map::MIN_COMPACTION_OPS;
use crate::storage::format::journaled_map::{JournaledMap, MapFiles};

/// The snapshot file in the data directory.
pub const SNAPSHOT_FILE: &str = ".lifecycles";
/// The journal file in the data directory.
pub const JOURNAL_FILE: &str = ".lifecycles.journal";

/// The policy store's files.
const FILES: MapFiles = MapFiles {
    snapshot: SNAPSHOT_FILE,
    journal: JOURNAL_FILE,
    magic: b"HLLCJRN1",
    what: "lifecycle",
};

/// One stored policy.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Definition {
    /// The settings as the user wrote them.
    pub settings: LifecycleSettings,
    /// Defined by the server's startup configuration.
    #[serde(default)]
    pub provisioned: bool,
    /// Why the definition failed validation at load, if it did: kept, not run, and
    /// the reason shown in its info until it is updated.
    #[serde(skip)]
    pub invalid: Option<String>,
}

/// The definitions in memory and their snapshot + journal on disk.
pub struct DefinitionStore {
    map: JournaledMap<Definition>,
    /// Each definition's size as JSON, and their sum: what the cap on all policies
    /// (`--lifecycle-max-definitions-size`) weighs, kept so a change costs O(log n).
    sizes: BTreeMap<String, u64>,
    total: u64,
}

/// A definition's size: its settings as compact JSON, as they are stored.
pub fn definition_size(settings: &LifecycleSettings) -> u64 {
    serde_json::to_vec(settings).map_or(0, |json| json.len() as u64)
}

impl Deref for DefinitionStore {
    type Target = JournaledMap<Definition>;

    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl DefinitionStore {
    /// Loads the snapshot in `dir` and replays the journal onto it (cutting off a torn
    /// tail). A missing snapshot or journal is an empty one.
    pub fn open(dir: &Path) -> Result<Self> {
        let map: JournaledMap<Definition> = JournaledMap::open(dir, FILES)?;
        let sizes: BTreeMap<String, u64> = map
            .iter()
            .map(|(name, def)| (name.clone(), definition_size(&def.settings)))
            .collect();
        let total = sizes.values().sum();
        Ok(DefinitionStore { map, sizes, total })
    }

    /// Stores `def` under `name` (replacing one), durably.
    pub fn put(&mut self, name: &str, def: Definition) -> Result<()> {
        let size = definition_size(&def.settings);
        self.map.put(name, def)?;
        let old = self.sizes.insert(name.to_string(), size).unwrap_or(0);
        self.total = self.total - old + size;
        Ok(())
    }

    /// Removes the definition `name`, durably.
    pub fn remove(&mut self, name: &str) -> Result<()> {
        self.map.remove(name)?;
        self.total -= self.sizes.remove(name).unwrap_or(0);
        Ok(())
    }

    /// Writes a new snapshot and empties the journal.
    pub fn compact(&mut self) -> Result<()> {
        self.map.compact()
    }

    /// The size of the stored definition `name` as JSON (0 when there is none).
    pub fn size_of(&self, name: &str) -> u64 {
        self.sizes.get(name).copied().unwrap_or(0)
    }

    /// The size of all stored definitions as JSON.
    pub fn total_size(&self) -> u64 {
        self.total
    }

    /// The definitions stored in `dir`, read without changing anything (no journal is
    /// created, no torn tail cut): what `halflife info` shows of a stopped server.
    pub fn read(dir: &Path) -> Result<BTreeMap<String, Definition>> {
        JournaledMap::read(dir, FILES)
    }

    /// Marks a loaded definition as failing validation, with why (in memory only).
    pub fn mark_invalid(&mut self, name: &str, why: String) {
        if let Some(def) = self.map.get_mut_in_memory(name) {
            def.invalid = Some(why);
        }
    }

    /// Follows a bucket rename: every definition naming bucket `old` is stored again
    /// naming `new` (one journal operation each). Returns their names, sorted;
    /// idempotent, so a rename finished after a crash can apply it again.
    pub fn rename_bucket(&mut self, old: &str, new: &str) -> Result<Vec<String>> {
        let moving: Vec<String> = self
            .map
            .iter()
            .filter(|(_, def)| def.settings.bucket == old)
            .map(|(name, _)| name.clone())
            .collect();
        for name in &moving {
            if let Some(mut def) = self.map.get(name).cloned() {
                def.settings.bucket = new.to_string();
                def.invalid = None;
                self.put(name, def)?;
            }
        }
        Ok(moving)
    }
}

#[cfg(test)]
mod tests;
