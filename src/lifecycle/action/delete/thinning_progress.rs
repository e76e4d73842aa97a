//! What a thinning delete policy carries from run to run (see `thinning.rs`): per entry,
//! how far it has judged and the aggregates' state after the last record judged. Its run
//! events hold it as `thinning`, so it is a leaf the event log and the thinning registry
//! both use.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::lifecycle::settings::Policy;
use crate::storage::condition::State;

/// How far a thinning policy has judged one entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryMark {
    /// Every record before this instant (µs) has been judged.
    pub judged_to: u64,
    /// Records judged so far.
    pub judged: u64,
    /// Records selected (removed, or in a dry run counted) so far.
    pub selected: u64,
    /// The aggregates' state after the last record judged.
    pub state: State,
}

/// A thinning policy's progress: what its run events carry as `thinning`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ThinningProgress {
    /// The condition the state belongs to, as compact JSON.
    pub condition: String,
    /// Whether it was made by dry runs.
    pub dry_run: bool,
    /// Per entry.
    pub entries: BTreeMap<String, EntryMark>,
}

impl ThinningProgress {
    /// Fresh progress for `policy` in this mode.
    pub(crate) fn fresh(policy: &Policy, dry_run: bool) -> Self {
        ThinningProgress {
            condition: condition_source(policy).unwrap_or_default().to_string(),
            dry_run,
            entries: BTreeMap::new(),
        }
    }

    /// Whether it can be resumed by `policy` in this mode.
    pub(crate) fn fits(&self, policy: &Policy, dry_run: bool) -> bool {
        self.dry_run == dry_run && Some(self.condition.as_str()) == condition_source(policy)
    }
}

fn condition_source(policy: &Policy) -> Option<&str> {
    policy.when.as_ref().map(|c| c.source())
}
