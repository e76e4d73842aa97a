//! A small map from names to definitions (lifecycle policies, replication tasks) kept
//! durable at O(1) per change: a snapshot (a JSON map, replaced atomically) and a journal
//! with one operation per change since the snapshot (the append-only framing of
//! `oplog.rs`).
//!
//! A change costs one append and one `fdatasync`, whatever the number of definitions,
//! where rewriting the whole map made each change O(N) (16.7 ms at 10,000 policies). When
//! the journal holds more operations than there are definitions (and at least
//! [`MIN_COMPACTION_OPS`]), the map is written as the new snapshot and the journal is
//! emptied: O(N) once per N changes, so O(1) per change overall.
//!
//! Crash safety: a kill during an append leaves a torn tail, cut off at the next open, so
//! only that change is lost (it was not acknowledged). Operations hold whole definitions
//! (a put) or a removal, so replaying them onto the snapshot they were written after, or
//! onto the newer snapshot a compaction wrote just before it was killed, gives the same
//! map.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::storage::format::oplog;
use crate::storage::sync::fsutil::{fsync_dir, write_atomic};

/// Fewest journal operations that trigger a compaction (a small map compacts rarely).
pub const MIN_COMPACTION_OPS: usize = 256;

const OP_PUT: u8 = 1;
const OP_REMOVE: u8 = 2;

/// Where a map lives in its directory and what it is called in messages.
#[derive(Debug, Clone, Copy)]
pub struct MapFiles {
    /// The snapshot's file name.
    pub snapshot: &'static str,
    /// The journal's file name.
    pub journal: &'static str,
    /// The journal's first bytes.
    pub magic: &'static [u8; 8],
    /// What the definitions are, for messages ("lifecycle", "replication").
    pub what: &'static str,
}

/// A put operation's body after its kind byte (`definition` is the field name journals
/// written before this type existed use).
#[derive(Serialize, serde::Deserialize)]
struct Put<T> {
    name: String,
    definition: T,
}

/// The definitions in memory and their snapshot + journal on disk.
pub struct JournaledMap<T> {
    files: MapFiles,
    snapshot: PathBuf,
    journal_path: PathBuf,
    journal: File,
    /// Valid length of the journal: where the next operation goes.
    journal_len: u64,
    /// Operations in the journal since the snapshot.
    journal_ops: usize,
    map: BTreeMap<String, T>,
}

impl<T: Serialize + DeserializeOwned> JournaledMap<T> {
    /// Loads the snapshot in `dir` and replays the journal onto it (cutting off a torn
    /// tail). A missing snapshot or journal is an empty one.
    pub fn open(dir: &Path, files: MapFiles) -> Result<Self> {
        let snapshot = dir.join(files.snapshot);
        let journal_path = dir.join(files.journal);
        let mut map = read_snapshot(&snapshot)?;
        let mut journal_ops = 0;
        let (journal, journal_len) = if journal_path.exists() {
            oplog::open(&journal_path, files.magic, |body, _| {
                apply(&mut map, body, &journal_path)?;
                journal_ops += 1;
                Ok(())
            })?
        } else {
            let file = oplog::create(&journal_path, files.magic, true)?;
            fsync_dir(dir)?;
            (file, files.magic.len() as u64)
        };
        Ok(JournaledMap {
            files,
            snapshot,
            journal_path,
            journal,
            journal_len,
            journal_ops,
            map,
        })
    }

    /// The definitions stored in `dir`, read without changing anything (no journal is
    /// created, no torn tail cut): what reports of a stopped server show.
    pub fn read(dir: &Path, files: MapFiles) -> Result<BTreeMap<String, T>> {
        let snapshot = dir.join(files.snapshot);
        let journal_path = dir.join(files.journal);
        let mut map = read_snapshot(&snapshot)?;
        let journal = match std::fs::read(&journal_path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(map),
            Err(e) => return Err(Error::io(format!("reading {}", journal_path.display()), e)),
        };
        for op in oplog::scan(&journal, files.magic).ops {
            let body = &journal[op.start + oplog::OP_HEADER as usize..op.end];
            apply(&mut map, body, &journal_path)?;
        }
        Ok(map)
    }

    /// The definition of `name`.
    pub fn get(&self, name: &str) -> Option<&T> {
        self.map.get(name)
    }

    /// The definition of `name`, to change in memory only (what is not persisted, such
    /// as a validation failure found at load).
    pub fn get_mut_in_memory(&mut self, name: &str) -> Option<&mut T> {
        self.map.get_mut(name)
    }

    /// Every definition, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &T)> {
        self.map.iter()
    }

    /// Number of definitions.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when there is no definition.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Operations in the journal since the last snapshot.
    pub fn journal_ops(&self) -> usize {
        self.journal_ops
    }

    /// Stores `definition` under `name` durably, then in memory.
    pub fn put(&mut self, name: &str, definition: T) -> Result<()> {
        let put = Put {
            name: name.to_string(),
            definition,
        };
        let body = serde_json::to_vec(&put)
            .map_err(|e| Error::internal(format!("encoding {} '{name}': {e}", self.files.what)))?;
        self.append(OP_PUT, &body)?;
        self.map.insert(put.name, put.definition);
        self.compact_if_due();
        Ok(())
    }

    /// Removes `name` durably, then in memory.
    pub fn remove(&mut self, name: &str) -> Result<()> {
        self.append(OP_REMOVE, name.as_bytes())?;
        self.map.remove(name);
        self.compact_if_due();
        Ok(())
    }

    /// Removes `name` without waiting for the disk: for a definition whose coming back
    /// after a power cut its user recognises as stale (the next durable change, or a
    /// compaction, makes the removal durable too).
    pub fn remove_unsynced(&mut self, name: &str) -> Result<()> {
        self.append_with(OP_REMOVE, name.as_bytes(), false)?;
        self.map.remove(name);
        self.compact_if_due();
        Ok(())
    }

    /// Appends one operation and makes it durable; on failure the journal is cut back and
    /// nothing changed.
    fn append(&mut self, kind: u8, payload: &[u8]) -> Result<()> {
        self.append_with(kind, payload, true)
    }

    /// [`JournaledMap::append`], synced or not.
    fn append_with(&mut self, kind: u8, payload: &[u8], sync: bool) -> Result<()> {
        let mut op = oplog::start_op(kind);
        oplog::finish_op(&mut op, payload)?;
        oplog::append_at(
            &self.journal,
            &self.journal_path,
            self.journal_len,
            &op.buf,
            payload,
        )?;
        let len = op.buf.len() as u64 + payload.len() as u64;
        if let Some(e) = sync.then(|| self.journal.sync_data().err()).flatten() {
            // Not acknowledged: cut it off so a restart does not apply it either.
            oplog::cut_back(&self.journal, self.journal_len);
            return Err(Error::io(
                format!("syncing {}", self.journal_path.display()),
                e,
            ));
        }
        self.journal_len += len;
        self.journal_ops += 1;
        Ok(())
    }

    fn compact_if_due(&mut self) {
        if self.journal_ops < MIN_COMPACTION_OPS.max(self.map.len()) {
            return;
        }
        // The change is already durable in the journal; a failed compaction only means
        // the journal keeps growing until the next attempt.
        if let Err(e) = self.compact() {
            log::warn!(
                "{} definitions: compaction failed, journal kept: {e}",
                self.files.what
            );
        }
    }

    /// Writes the map as the new snapshot, then empties the journal.
    pub fn compact(&mut self) -> Result<()> {
        let body = serde_json::to_vec_pretty(&self.map)
            .map_err(|e| Error::internal(format!("encoding {}s: {e}", self.files.what)))?;
        write_atomic(&self.snapshot, &body)?;
        // A kill here replays the old journal onto the new snapshot: the same map.
        let magic = self.files.magic.len() as u64;
        self.journal
            .set_len(magic)
            .and_then(|_| self.journal.sync_all())
            .map_err(|e| Error::io(format!("emptying {}", self.journal_path.display()), e))?;
        self.journal_len = magic;
        self.journal_ops = 0;
        Ok(())
    }
}

/// The definitions of a snapshot file (none when it is missing).
fn read_snapshot<T: DeserializeOwned>(snapshot: &Path) -> Result<BTreeMap<String, T>> {
    match std::fs::read(snapshot) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map_err(|e| Error::internal(format!("{} does not parse: {e}", snapshot.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(e) => Err(Error::io(format!("reading {}", snapshot.display()), e)),
    }
}

/// Applies one journal operation to `map`.
fn apply<T: DeserializeOwned>(
    map: &mut BTreeMap<String, T>,
    body: &[u8],
    path: &Path,
) -> Result<()> {
    let bad = |what: String| Error::internal(format!("{}: {what}", path.display()));
    match body.split_first() {
        Some((&OP_PUT, json)) => {
            let put: Put<T> = serde_json::from_slice(json)
                .map_err(|e| bad(format!("a stored definition does not parse: {e}")))?;
            map.insert(put.name, put.definition);
        }
        Some((&OP_REMOVE, name)) => {
            let name =
                std::str::from_utf8(name).map_err(|_| bad("a removed name is not UTF-8".into()))?;
            map.remove(name);
        }
        _ => return Err(bad("unknown operation".into())),
    }
    Ok(())
}
