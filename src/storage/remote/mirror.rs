//! A replica that shares only the object store (`--follow-remote`,
//! `docs/high-availability.md`): it reads the manifests a writer publishes on a remote
//! (`manifest.rs`) and lays out, in its own data directory, what a store needs to serve
//! the tiered blocks — the bucket's settings, each block's stub and edit log, and an index
//! naming them — so its read-only store serves every tiered record, fetching the frames
//! from the remote as a writer does. Nothing of the writer's disk is needed.
//!
//! Each entry is laid out the way a writer commits: the files first, the index last
//! (an atomic replace); files no index names any more are removed after it.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use crate::error::{Error, Result};
use crate::storage::format::index::{EntryIndex, edits_path};
use crate::storage::names::{validate_bucket_name, validate_entry_name};
use crate::storage::remote::connection::Remote;
use crate::storage::remote::manifest::{
    EntryManifest, MANIFEST_DIR, MANIFEST_FILE, edits_file, manifest_key, parse_manifest_key,
    stub_file,
};
use crate::storage::remote::stub::{parse_header, read_header};
use crate::storage::sync::fsutil::write_atomic;

/// The largest manifest read (an entry of a million tiered blocks takes some 300 MB; a
/// manifest past this is refused, not read into memory).
const MAX_MANIFEST: u64 = 512 << 20;

/// The largest stub or edit log read (a block's record table and footer, or its edits).
const MAX_FILE: u64 = 1 << 30;

/// What one pull changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pulled {
    /// Entries laid out anew or again (their manifest changed).
    pub updated: usize,
    /// Entries removed (their manifest is gone).
    pub removed: usize,
}

/// A bucket and an entry of it.
type EntryName = (String, String);

/// A manifest laid out, with the size and ETag of its object when it was read.
type LaidOut = (EntryManifest, u64, String);

/// A replica's copy of the manifests of one remote.
pub struct Mirror {
    remote: Arc<Remote>,
    data: PathBuf,
    /// Per (bucket, entry): the manifest laid out, and the listing's size and ETag of
    /// its object (an unchanged one is not fetched again).
    seen: Mutex<HashMap<EntryName, LaidOut>>,
    /// Per (bucket, entry): before which instant this replica holds every record.
    held: RwLock<HashMap<EntryName, u64>>,
}

impl Mirror {
    /// A mirror of `remote`'s manifests into the data directory `data`.
    pub fn new(remote: Arc<Remote>, data: &Path) -> Mirror {
        Mirror {
            remote,
            data: data.to_path_buf(),
            seen: Mutex::default(),
            held: RwLock::default(),
        }
    }

    /// The remote followed.
    pub fn remote(&self) -> &Remote {
        &self.remote
    }

    /// Before which instant (µs) this replica holds every record of `bucket/entry`, as
    /// of the last manifest read; `None` for an entry no manifest names.
    pub fn held_until(&self, bucket: &str, entry: &str) -> Option<u64> {
        self.held
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(bucket.to_string(), entry.to_string()))
            .copied()
    }

    /// Reads the manifests and lays out what changed.
    pub fn pull(&self) -> Result<Pulled> {
        let mut pulled = Pulled::default();
        let mut listed = BTreeMap::new();
        for object in self.remote.list_under(MANIFEST_DIR)? {
            let Some((bucket, entry)) = parse_manifest_key(&self.remote, &object.key) else {
                continue;
            };
            // Names from the store become paths here: only names a writer accepts.
            if validate_bucket_name(&bucket).is_err() || validate_entry_name(&entry).is_err() {
                log::warn!(
                    "remote '{}': manifest {} names no valid entry; skipped",
                    self.remote.name,
                    object.key
                );
                continue;
            }
            listed.insert((bucket, entry), (object.size, object.etag));
        }
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        for ((bucket, entry), (size, etag)) in &listed {
            let key = (bucket.clone(), entry.clone());
            if seen
                .get(&key)
                .is_some_and(|(_, s, e)| s == size && e == etag)
            {
                continue;
            }
            let manifest_at = manifest_key(&self.remote, bucket, entry, MANIFEST_FILE);
            let manifest: EntryManifest = match self.remote.fetch_all(&manifest_at, MAX_MANIFEST) {
                Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                    Error::internal(format!("manifest {manifest_at} does not parse: {e}"))
                })?,
                // Deleted since the listing: dropped at the next pull.
                Err(e) if e.kind() == crate::error::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            if seen.get(&key).is_some_and(|(m, _, _)| *m == manifest) {
                seen.insert(key, (manifest, *size, etag.clone()));
                continue;
            }
            // One entry that cannot be laid out now waits for the next pull; the others
            // go on.
            if let Err(e) = self.lay_out(bucket, entry, &manifest) {
                log::warn!("replica: {bucket}/{entry} keeps its last state: {e}");
                continue;
            }
            self.held
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .insert(key.clone(), manifest.complete_until);
            seen.insert(key, (manifest, *size, etag.clone()));
            pulled.updated += 1;
        }
        let gone: Vec<(String, String)> = seen
            .keys()
            .filter(|k| !listed.contains_key(*k))
            .cloned()
            .collect();
        for key in gone {
            self.held
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&key);
            seen.remove(&key);
            let bucket_used = seen.keys().any(|(b, _)| *b == key.0);
            self.remove_entry(&key.0, &key.1, bucket_used);
            pulled.removed += 1;
        }
        Ok(pulled)
    }

    /// Lays out one entry: settings, stubs and edit logs, then the index.
    fn lay_out(&self, bucket: &str, entry: &str, manifest: &EntryManifest) -> Result<()> {
        let bucket_dir = self.data.join(bucket);
        let dir = bucket_dir.join(entry);
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        let settings = serde_json::to_vec_pretty(&manifest.settings)
            .map_err(|e| Error::internal(format!("encoding settings: {e}")))?;
        let settings_path = bucket_dir.join(crate::storage::settings::SETTINGS_FILE);
        if std::fs::read(&settings_path).ok().as_deref() != Some(&settings[..]) {
            write_atomic(&settings_path, &settings)?;
        }
        let fetch = |file: &str| {
            self.remote
                .fetch_all(&manifest_key(&self.remote, bucket, entry, file), MAX_FILE)
        };
        let mut fetched = Vec::new();
        for b in &manifest.blocks {
            let stub = dir.join(b.file_name());
            // A sequence number names another block once the writer's entry was removed
            // and made again: the stub's header says which object it describes.
            let current =
                read_header(&stub).is_ok_and(|header| Some(&header.location) == b.remote.as_ref());
            if !current {
                let bytes = fetch(&stub_file(b.seq))?;
                // The writer uploads a stub before the manifest naming it; one that still
                // describes another object is an older upload: this entry waits.
                let fits = parse_header(&bytes, &stub)
                    .is_ok_and(|(header, _)| Some(&header.location) == b.remote.as_ref());
                if !fits {
                    return Err(Error::internal(format!(
                        "the stub of block {} of {bucket}/{entry} on remote '{}' is not the manifest's yet",
                        b.first_ts, self.remote.name
                    )));
                }
                write_atomic(&stub, &bytes)?;
                fetched.push(b.seq);
            }
        }
        for (&seq, &len) in &manifest.edits {
            let path = edits_path(&dir, seq);
            let local = std::fs::metadata(&path).map(|m| m.len()).ok();
            if local != Some(len) || fetched.contains(&seq) {
                write_atomic(&path, &fetch(&edits_file(seq))?)?;
            }
        }
        let mut index = EntryIndex::new();
        index.blocks = manifest.blocks.clone();
        index.blocks.sort_by_key(|b| b.first_ts);
        index.next_seq = index.blocks.iter().map(|b| b.seq + 1).max().unwrap_or(0);
        index.save(&dir)?;
        // What the index no longer names (blocks deleted on the writer).
        let named: Vec<String> = manifest
            .blocks
            .iter()
            .map(|b| b.file_name())
            .chain(manifest.edits.keys().map(|&seq| edits_file(seq)))
            .collect();
        let listing = std::fs::read_dir(&dir)
            .map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
        for item in listing.flatten() {
            let name = item.file_name().to_string_lossy().into_owned();
            let ours = name.ends_with(".tier") || name.ends_with(".edt");
            if ours && !named.contains(&name) {
                let _ = std::fs::remove_file(item.path());
            }
        }
        Ok(())
    }

    /// Removes an entry no manifest names any more (and its bucket once no manifest
    /// names an entry of it: `bucket_used` false).
    fn remove_entry(&self, bucket: &str, entry: &str, bucket_used: bool) {
        let bucket_dir = self.data.join(bucket);
        let dir = bucket_dir.join(entry);
        let trash = self
            .data
            .join(format!(".mirror-removed-{}", crate::timefmt::now_micros()));
        if std::fs::rename(&dir, &trash).is_ok() {
            let _ = std::fs::remove_dir_all(&trash);
        }
        if !bucket_used && has_no_entries(&bucket_dir) {
            let trash = self
                .data
                .join(format!(".mirror-removed-{}", crate::timefmt::now_micros()));
            if std::fs::rename(&bucket_dir, &trash).is_ok() {
                let _ = std::fs::remove_dir_all(&trash);
            }
        }
    }
}

/// Whether a bucket directory holds no entry directory.
fn has_no_entries(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|listing| {
        !listing
            .flatten()
            .any(|item| item.file_type().is_ok_and(|t| t.is_dir()))
    })
}
