//! The belated writes a thinning policy has noted and not judged yet, per entry: in
//! memory, and (on a server) in a backlog file per entry under
//! `<data>/.thinning/<hex policy>/<hex entry>.backlog`, the replication backlogs' format.
//!
//! A note is appended when the write is made and the write's acknowledgement waits for
//! it as the sync mode says (the observer hands back the append's [`Pending`]), so a kill
//! or a power cut after an acknowledged belated write still finds the note at start. Once
//! the run event that saved a run's progress is written, the files are settled: the notes
//! still waiting are appended again, then everything before them is marked done — a
//! crash in between only repeats a note, which the set in memory absorbs. A note judged
//! by a run whose progress was not saved stays on disk, as a restart goes back to the
//! last saved progress and judges it again.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::replication::backlog::{Backlog, BacklogItem, ItemKind};
use crate::replication::task::{dir_name, hex, unhex};
use crate::storage::sync::fsutil::create_dirs_durably;
use crate::storage::sync::{Durability, Pending};

const SUFFIX: &str = ".backlog";
/// Most notes kept per entry; past it the oldest is dropped (logged): that record is
/// then kept, never judged.
const NOTES_PER_ENTRY: usize = 1 << 20;

/// Where notes are kept on disk, when they are.
#[derive(Clone)]
pub struct NotesHome {
    /// `<data>/.thinning`.
    pub dir: PathBuf,
    /// The sync mode appends follow.
    pub durability: Arc<Durability>,
}

/// One policy's notes.
#[derive(Default)]
pub struct BelatedNotes {
    home: Option<(PathBuf, Arc<Durability>)>,
    files: HashMap<String, Backlog>,
    stamps: HashMap<String, BTreeSet<u64>>,
}

impl BelatedNotes {
    /// The notes of `policy`, read back from disk when `home` is given.
    pub fn open(home: Option<&NotesHome>, policy: &str) -> Result<Self> {
        let Some(home) = home else {
            return Ok(BelatedNotes::default());
        };
        let dir = home.dir.join(dir_name(policy));
        let mut notes = BelatedNotes {
            home: Some((dir.clone(), home.durability.clone())),
            ..Default::default()
        };
        if !dir.exists() {
            return Ok(notes);
        }
        let listing = std::fs::read_dir(&dir)
            .map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
        for item in listing.flatten() {
            let file = item.file_name().to_string_lossy().into_owned();
            let Some(entry) = file.strip_suffix(SUFFIX).and_then(unhex) else {
                continue;
            };
            let backlog = Backlog::open(&item.path(), NOTES_PER_ENTRY)?;
            let stamps = backlog.peek(usize::MAX).into_iter().map(|i| i.ts).collect();
            notes.stamps.insert(entry.clone(), stamps);
            notes.files.insert(entry, backlog);
        }
        Ok(notes)
    }

    fn file(&mut self, entry: &str) -> Result<Option<&mut Backlog>> {
        let Some((dir, _)) = &self.home else {
            return Ok(None);
        };
        if !self.files.contains_key(entry) {
            create_dirs_durably(dir)?;
            let path = dir.join(format!("{}{SUFFIX}", hex(entry)));
            self.files
                .insert(entry.to_string(), Backlog::open(&path, NOTES_PER_ENTRY)?);
        }
        Ok(self.files.get_mut(entry))
    }

    /// Notes a belated write; the write waits on the returned [`Pending`].
    pub fn note(&mut self, entry: &str, ts: u64) -> Result<Pending> {
        if !self.stamps.entry(entry.to_string()).or_default().insert(ts) {
            return Ok(Pending::none());
        }
        let durability = self.home.as_ref().map(|(_, d)| d.clone());
        match (self.file(entry)?, durability) {
            (Some(file), Some(durability)) => file.append(item(ts), &durability),
            _ => Ok(Pending::none()),
        }
    }

    /// The notes of `entry` before `before`, taken off the set (the file keeps them
    /// until [`BelatedNotes::settle`]).
    pub fn take(&mut self, entry: &str, before: u64) -> Vec<u64> {
        let Some(set) = self.stamps.get_mut(entry) else {
            return Vec::new();
        };
        let later = set.split_off(&before);
        std::mem::replace(set, later).into_iter().collect()
    }

    /// Notes again what a run could not judge yet.
    pub fn put_back(&mut self, entry: &str, stamps: impl IntoIterator<Item = u64>) {
        self.stamps
            .entry(entry.to_string())
            .or_default()
            .extend(stamps);
    }

    /// Drops the notes of `entry` at or past `to` (a forward pass judges those).
    pub fn drop_from(&mut self, entry: &str, to: u64) {
        if let Some(set) = self.stamps.get_mut(entry) {
            set.split_off(&to);
        }
    }

    /// Makes the entry's file hold what the set holds, durably.
    pub fn settle(&mut self, entry: &str) -> Result<()> {
        let wanted: Vec<u64> = self
            .stamps
            .get(entry)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default();
        let durability = self.home.as_ref().map(|(_, d)| d.clone());
        let (Some(file), Some(durability)) = (self.files.get_mut(entry), durability) else {
            return Ok(());
        };
        let held: Vec<u64> = file.peek(usize::MAX).into_iter().map(|i| i.ts).collect();
        if held == wanted {
            return Ok(());
        }
        let stale = held.len();
        let mut pending = Pending::none();
        for ts in wanted {
            pending.add(file.append(item(ts), &durability)?);
        }
        pending.wait()?;
        file.delivered(stale)
    }

    /// [`BelatedNotes::settle`] for every entry with a file.
    pub fn settle_all(&mut self) -> Result<()> {
        let entries: Vec<String> = self.files.keys().cloned().collect();
        entries.iter().try_for_each(|e| self.settle(e))
    }

    /// Every note, with its files.
    pub fn clear(&mut self) -> Result<()> {
        self.stamps.clear();
        self.files.clear();
        if let Some((dir, _)) = &self.home
            && dir.exists()
        {
            std::fs::remove_dir_all(dir)
                .map_err(|e| Error::io(format!("removing {}", dir.display()), e))?;
        }
        Ok(())
    }

    /// Follows an entry rename.
    pub fn rename(&mut self, from: &str, to: &str) -> Result<()> {
        if let Some(set) = self.stamps.remove(from) {
            self.stamps.insert(to.to_string(), set);
        }
        if let (Some(file), Some((dir, _))) = (self.files.remove(from), &self.home) {
            let source = file.path().to_path_buf();
            drop(file);
            let target = dir.join(format!("{}{SUFFIX}", hex(to)));
            Backlog::move_files(&source, &target)?;
            self.files
                .insert(to.to_string(), Backlog::open(&target, NOTES_PER_ENTRY)?);
        }
        Ok(())
    }

    /// Notes waiting, over all entries.
    pub fn count(&self) -> usize {
        self.stamps.values().map(BTreeSet::len).sum()
    }
}

fn item(ts: u64) -> BacklogItem {
    BacklogItem {
        kind: ItemKind::Write,
        ts,
        removed: Vec::new(),
        origin: None,
    }
}
