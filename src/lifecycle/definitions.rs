//! Where policy definitions live on disk: a snapshot, `.lifecycles` (a JSON map from name
//! to definition, replaced atomically), and a journal, `.lifecycles.journal`, with one
//! operation per change since the snapshot — a [`JournaledMap`] (`storage/format/
//! journaled_map.rs`: O(1) per change, crash-safe), plus what is particular to policies.

use std::collections::BTreeMap;
use std::ops::{Deref, DerefMut};
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
}

impl Deref for DefinitionStore {
    type Target = JournaledMap<Definition>;

    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

impl DerefMut for DefinitionStore {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.map
    }
}

impl DefinitionStore {
    /// Loads the snapshot in `dir` and replays the journal onto it (cutting off a torn
    /// tail). A missing snapshot or journal is an empty one.
    pub fn open(dir: &Path) -> Result<Self> {
        Ok(DefinitionStore {
            map: JournaledMap::open(dir, FILES)?,
        })
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
                self.map.put(name, def)?;
            }
        }
        Ok(moving)
    }
}

#[cfg(test)]
mod tests;
