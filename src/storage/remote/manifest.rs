//! The manifest of a remote's tiered blocks, for replicas that share only the object
//! store (`--follow-remote`, `docs/high-availability.md`). For every entry with blocks on
//! a remote, the writer publishes under `<prefix>/.halflife-replica/<bucket>/<entry>/`:
//! - `<seq>.tier`: each tiered block's stub (its record table and footer; the frames
//!   are the block's object), uploaded once — a stub never changes;
//! - `<seq>.edt`: the block's edit log (relabels, tombstones), uploaded again when it grew;
//! - `manifest.json` ([`EntryManifest`]): the bucket's settings, the tiered blocks' index
//!   entries, the edit logs' published lengths, and `complete_until` — every record of the
//!   entry before that instant is in those blocks. Uploaded last, so everything it names
//!   is there before it is.
//!
//! Only remotes with `RS_REMOTE_<NAME>_PUBLISH_MANIFESTS=true` get manifests. The writer
//! publishes after every tier run (the entries it moved) and at each round of
//! the remote collector (every entry, so removals, edits and deletions are published too;
//! the manifests of entries with no tiered block left are deleted).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::storage::format::index::{BlockEntry, edits_path};
use crate::storage::remote::connection::Remote;
use crate::storage::settings::BucketSettings;

/// The folder, under a remote's prefix, of the manifests.
pub const MANIFEST_DIR: &str = ".halflife-replica";
/// The manifest's file name in an entry's folder.
pub const MANIFEST_FILE: &str = "manifest.json";
/// The format this version writes and reads.
const FORMAT: u32 = 1;

/// What a replica needs of one entry's tiered blocks on one remote.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EntryManifest {
    /// The format version (1).
    pub format: u32,
    /// The bucket's settings (a replica's bucket reports them).
    pub settings: BucketSettings,
    /// The index entries of the entry's blocks on this remote, by first timestamp.
    pub blocks: Vec<BlockEntry>,
    /// The published length of each edit log, by block sequence number.
    pub edits: BTreeMap<u64, u64>,
    /// Every record of the entry before this instant (µs) is in `blocks`; from it on,
    /// records may exist only on the writer's disk (`u64::MAX`: all of it is here).
    pub complete_until: u64,
}

/// The key of a file in an entry's manifest folder on `remote`.
pub fn manifest_key(remote: &Remote, bucket: &str, entry: &str, file: &str) -> String {
    format!(
        "{}{MANIFEST_DIR}/{bucket}/{entry}/{file}",
        remote.key_prefix()
    )
}

/// The bucket and entry of a manifest's key, if it is one.
pub fn parse_manifest_key(remote: &Remote, key: &str) -> Option<(String, String)> {
    let path = key
        .strip_prefix(&remote.key_prefix())?
        .strip_prefix(MANIFEST_DIR)?
        .strip_prefix('/')?
        .strip_suffix(MANIFEST_FILE)?
        .strip_suffix('/')?;
    let (bucket, entry) = path.split_once('/')?;
    (!bucket.is_empty() && !entry.is_empty()).then(|| (bucket.to_string(), entry.to_string()))
}

/// The name of a block's stub in a manifest folder.
pub fn stub_file(seq: u64) -> String {
    format!("{seq:016x}.tier")
}

/// The name of a block's edit log in a manifest folder.
pub fn edits_file(seq: u64) -> String {
    format!("{seq:016x}.edt")
}

/// What the publisher needs of one entry: its blocks and where its files are. The
/// bucket gathers it (this layer knows neither buckets nor entries).
pub struct EntryBlocks {
    /// The entry's name.
    pub name: String,
    /// Its folder, where the stubs and edit logs are read from.
    pub dir: PathBuf,
    /// Its blocks, local and tiered, by first timestamp.
    pub blocks: Vec<BlockEntry>,
    /// The first record still in a log, if any.
    pub first_logged: Option<u64>,
}

/// What the writer has published, so an unchanged entry costs no upload.
#[derive(Default)]
pub struct Publisher {
    state: Mutex<Uploaded>,
}

#[derive(Default)]
struct Uploaded {
    /// Manifest key → the manifest as uploaded.
    manifests: HashMap<String, EntryManifest>,
    /// Stub keys uploaded, with the object key of the block each described (a block
    /// number names another block once an entry was removed and made again).
    stubs: HashMap<String, String>,
}

impl Publisher {
    /// Publishes the manifests of `entries` of bucket `bucket` (its `settings`) on every
    /// remote holding blocks of theirs; returns the manifest keys that are current. An
    /// entry that fails is logged and tried again next time.
    pub fn publish(
        &self,
        bucket: &str,
        settings: &BucketSettings,
        entries: &[EntryBlocks],
        remotes: &crate::storage::remote::Remotes,
    ) -> HashSet<String> {
        let mut current = HashSet::new();
        for entry in entries {
            match self.publish_entry(bucket, settings, entry, remotes) {
                Ok(keys) => current.extend(keys),
                Err(e) => log::warn!(
                    "remote manifest of {bucket}/{} not published: {e}",
                    entry.name
                ),
            }
        }
        current
    }

    fn publish_entry(
        &self,
        bucket: &str,
        settings: &BucketSettings,
        entry: &EntryBlocks,
        remotes: &crate::storage::remote::Remotes,
    ) -> Result<Vec<String>> {
        let blocks = &entry.blocks;
        let mut by_remote: BTreeMap<&str, Vec<&BlockEntry>> = BTreeMap::new();
        for b in blocks {
            if let Some(loc) = &b.remote {
                by_remote.entry(loc.remote.as_str()).or_default().push(b);
            }
        }
        let mut keys = Vec::new();
        for (name, on_remote) in by_remote {
            let Some(remote) = remotes.get(name).filter(|r| r.publishes_manifests) else {
                continue;
            };
            // Before this instant every record is on this remote: the first record kept
            // elsewhere (on the local disk, or on another remote) bounds it.
            let elsewhere = blocks
                .iter()
                .filter(|b| b.remote.as_ref().is_none_or(|l| l.remote != name))
                .map(|b| b.first_ts)
                .chain(entry.first_logged)
                .min()
                .unwrap_or(u64::MAX);
            let key = manifest_key(remote, bucket, &entry.name, MANIFEST_FILE);
            let published = Published {
                bucket,
                settings,
                entry,
            };
            self.publish_on(remote, &published, &on_remote, elsewhere, &key)?;
            keys.push(key);
        }
        Ok(keys)
    }

    fn publish_on(
        &self,
        remote: &Remote,
        of: &Published,
        blocks: &[&BlockEntry],
        complete_until: u64,
        key: &str,
    ) -> Result<()> {
        let upload =
            |key: &str, bytes: &[u8]| remote.upload(key, bytes).map(|_| ()).map_err(Error::from);
        let mut edits = BTreeMap::new();
        for b in blocks {
            let stub_key = manifest_key(remote, of.bucket, &of.entry.name, &stub_file(b.seq));
            let object = b.remote.as_ref().map(|l| l.key.clone()).unwrap_or_default();
            let new_block = self.lock().stubs.get(&stub_key) != Some(&object);
            if new_block {
                upload(&stub_key, &read(&of.entry.dir.join(b.file_name()))?)?;
                self.lock().stubs.insert(stub_key, object);
            }
            if b.edited {
                // An edit log only grows: its size tells whether it changed since it was
                // published, without reading it (unless its block number now names
                // another block).
                let path = edits_path(&of.entry.dir, b.seq);
                let size = std::fs::metadata(&path)
                    .map_err(|e| Error::io(format!("reading {}", path.display()), e))?
                    .len();
                let published = self
                    .lock()
                    .manifests
                    .get(key)
                    .and_then(|m| m.edits.get(&b.seq).copied());
                let size = if published == Some(size) && !new_block {
                    size
                } else {
                    let bytes = read(&path)?;
                    let edt_key =
                        manifest_key(remote, of.bucket, &of.entry.name, &edits_file(b.seq));
                    upload(&edt_key, &bytes)?;
                    bytes.len() as u64
                };
                edits.insert(b.seq, size);
            }
        }
        let manifest = EntryManifest {
            format: FORMAT,
            settings: *of.settings,
            blocks: blocks.iter().map(|b| (*b).clone()).collect(),
            edits,
            complete_until,
        };
        if self.lock().manifests.get(key) == Some(&manifest) {
            return Ok(());
        }
        let body = serde_json::to_vec(&manifest)
            .map_err(|e| Error::internal(format!("encoding a manifest: {e}")))?;
        upload(key, &body)?;
        self.lock().manifests.insert(key.to_string(), manifest);
        Ok(())
    }

    /// Deletes the manifests on `remote` that `current` does not name (entries removed,
    /// or with no block left there), so replicas drop them.
    pub fn delete_stale(&self, remote: &Remote, current: &HashSet<String>) -> Result<usize> {
        let listed = remote.list_under(MANIFEST_DIR)?;
        let mut deleted = 0;
        for object in listed {
            if parse_manifest_key(remote, &object.key).is_some() && !current.contains(&object.key) {
                remote.delete(&object.key)?;
                self.lock().manifests.remove(&object.key);
                deleted += 1;
            }
        }
        Ok(deleted)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Uploaded> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One entry being published, with its bucket.
struct Published<'a> {
    bucket: &'a str,
    settings: &'a BucketSettings,
    entry: &'a EntryBlocks,
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::io(format!("reading {}", path.display()), e))
}
