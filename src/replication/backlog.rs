//! The backlog of one (replication, entry): what was written or relabelled in the source
//! entry and is not yet delivered, in the order of the API calls.
//!
//! Appends share the entry's durability: an item is one `pwrite` to an append-only file
//! (the framing of `oplog.rs`), and the caller waits on the [`Pending`] the sync mode gives
//! (`always`: a group-committed `fdatasync` before the write is acknowledged; `interval`:
//! the syncer's next round; `never`: nothing). So in `always` mode an acknowledged write is
//! in the backlog after any crash or power cut.
//!
//! Delivery is recorded separately: once the sender has delivered the items up to some
//! offset, that offset is written to `<file>.pos` (atomically, synced). After a crash the
//! items past the last recorded offset are sent again: at-least-once, which the sender
//! makes exactly-once in effect by counting "already exists" on the destination as
//! delivered. Items are kept in memory (17 bytes on disk, 24 in memory each), bounded by
//! the backlog's limit; when a fully delivered file has grown past a megabyte, it is cut
//! back to its header.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use crate::error::{Error, Result};
use crate::storage::format::binary::BinaryReader;
use crate::storage::format::oplog;
use crate::storage::sync::fsutil::{remove_file_if_exists, write_atomic};
use crate::storage::sync::{Durability, FileSync, LazyFile, Pending};

const BACKLOG_MAGIC: &[u8; 8] = b"HLRPBKL1";
const OP_WRITE: u8 = 1;
const OP_UPDATE: u8 = 2;
/// A write or update that arrived through a replication: its op, then where it began.
const OP_WRITE_FROM: u8 = 3;
const OP_UPDATE_FROM: u8 = 4;
/// A fully delivered backlog file this long is cut back to its header.
const TRUNCATE_PAST: u64 = 1 << 20;

/// What happened to a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemKind {
    /// Written (the record is sent whole).
    Write,
    /// Labels changed (the record's labels are sent).
    Update,
}

/// One pending record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BacklogItem {
    /// Write or label update.
    pub kind: ItemKind,
    /// The record's timestamp.
    pub ts: u64,
    /// An update: the labels it removed (sent as removals, so the destination loses them
    /// too; an update carries the record's labels as they are when it is sent).
    pub removed: Vec<String>,
    /// Where the change began when it arrived through a replication (see
    /// [`crate::replication::origin`]); `None`: made on this server.
    pub origin: Option<Arc<str>>,
}

/// The backlog file of one (replication, entry), replayed into memory.
pub struct Backlog {
    path: PathBuf,
    pos_path: PathBuf,
    file: Arc<LazyFile>,
    sync: Arc<FileSync>,
    len: u64,
    /// Pending items with the file offset where each ends and when it was recorded
    /// (replayed ones: when the backlog was opened), for the replication lag.
    items: VecDeque<(BacklogItem, u64, Instant)>,
    /// The timestamps of the pending items, counted: the oldest one a retention must
    /// keep is the first key.
    stamps: BTreeMap<u64, u32>,
    /// Most items kept; past it the oldest is dropped (and counted).
    limit: usize,
    /// Items dropped because the backlog was full, since it was opened.
    dropped: u64,
}

impl Backlog {
    /// Opens the backlog at `path` (created when missing), replaying the items past its
    /// delivered position; a torn tail is cut off. Keeps at most `limit` items.
    pub fn open(path: &Path, limit: usize) -> Result<Self> {
        let pos_path = position_path(path);
        if !path.exists() {
            // A position without its backlog (a crash while a backlog was moved or
            // removed) belongs to nothing: it must not skip a new backlog's items.
            remove_file_if_exists(&pos_path)?;
        }
        let delivered = read_position(&pos_path)?;
        let what = path.display().to_string();
        let mut items = VecDeque::new();
        let opened = Instant::now();
        let (file, len, durable) = if path.exists() {
            let (file, len) = oplog::open(path, BACKLOG_MAGIC, |body, body_offset| {
                let item = decode(body, &what)?;
                let end = body_offset + body.len() as u64;
                if end > delivered {
                    items.push_back((item, end, opened));
                }
                Ok(())
            })?;
            // What a killed process left in the page cache may not be on disk yet.
            (file, len, false)
        } else {
            let file = oplog::create(path, BACKLOG_MAGIC, true)?;
            (file, BACKLOG_MAGIC.len() as u64, false)
        };
        let file = LazyFile::new(path, file);
        let sync = FileSync::new(file.clone(), path, len, durable);
        let mut stamps = BTreeMap::new();
        for (item, _, _) in &items {
            *stamps.entry(item.ts).or_insert(0) += 1;
        }
        let mut backlog = Backlog {
            stamps,
            path: path.to_path_buf(),
            pos_path,
            file,
            sync,
            len,
            items,
            limit: limit.max(1),
            dropped: 0,
        };
        backlog.enforce_limit();
        Ok(backlog)
    }

    /// Appends an item; the caller waits on the returned [`Pending`] (after releasing
    /// whatever lock it holds) before acknowledging the change it records.
    pub fn append(&mut self, item: BacklogItem, durability: &Durability) -> Result<Pending> {
        let mut op = oplog::start_op(match (item.kind, item.origin.is_some()) {
            (ItemKind::Write, false) => OP_WRITE,
            (ItemKind::Update, false) => OP_UPDATE,
            (ItemKind::Write, true) => OP_WRITE_FROM,
            (ItemKind::Update, true) => OP_UPDATE_FROM,
        });
        op.u64(item.ts);
        if let Some(origin) = &item.origin {
            op.str(origin);
        }
        if item.kind == ItemKind::Update {
            op.varint(item.removed.len() as u64);
            for name in &item.removed {
                op.str(name);
            }
        }
        oplog::append_op(&self.file, &self.path, &mut self.len, &self.sync, op)?;
        *self.stamps.entry(item.ts).or_insert(0) += 1;
        self.items.push_back((item, self.len, Instant::now()));
        self.enforce_limit();
        Ok(durability.after_append(&self.sync, self.len))
    }

    /// Where the backlog file is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Moves the (closed) backlog at `from` with its position to `to`, replacing what is
    /// there: the backlog first, then its position (see [`Backlog::open`]).
    pub fn move_files(from: &Path, to: &Path) -> Result<()> {
        crate::storage::fence::check()?;
        let rename = |a: &Path, b: &Path| {
            std::fs::rename(a, b)
                .map_err(|e| Error::io(format!("moving {} to {}", a.display(), b.display()), e))
        };
        let (from_pos, to_pos) = (position_path(from), position_path(to));
        remove_file_if_exists(&to_pos)?;
        rename(from, to)?;
        if from_pos.exists() {
            rename(&from_pos, &to_pos)?;
        }
        Ok(())
    }

    /// The first `n` pending items, oldest first.
    pub fn peek(&self, n: usize) -> Vec<BacklogItem> {
        self.items
            .iter()
            .take(n)
            .map(|(item, _, _)| item.clone())
            .collect()
    }

    /// Marks the first `n` pending items delivered, durably (the next open does not
    /// replay them); a fully delivered, long file is cut back to its header.
    pub fn delivered(&mut self, n: usize) -> Result<()> {
        let n = n.min(self.items.len());
        if n == 0 {
            return Ok(());
        }
        let end = self.items[n - 1].1;
        // The items must be on disk before a position past them is: otherwise a power cut
        // could keep the position and lose the items before it, and an item appended later
        // at the same offsets would be skipped.
        self.sync.sync_written()?;
        write_atomic(&self.pos_path, &end.to_le_bytes())?;
        for (item, _, _) in self.items.drain(..n) {
            forget(&mut self.stamps, item.ts);
        }
        if self.items.is_empty() && self.len > TRUNCATE_PAST {
            self.truncate()?;
        }
        Ok(())
    }

    /// Cuts a fully delivered file back to its header, then records position 0. A crash
    /// in between leaves a position past the end, which replays nothing: the same.
    fn truncate(&mut self) -> Result<()> {
        // Cutting a file is a write: not by an instance that lost the directory's lease.
        crate::storage::fence::check()?;
        let header = BACKLOG_MAGIC.len() as u64;
        let file = self
            .file
            .get()
            .map_err(|e| oplog::reopen_error(&self.path, e))?;
        file.set_len(header)
            .and_then(|()| file.sync_all())
            .map_err(|e| Error::io(format!("truncating {}", self.path.display()), e))?;
        write_atomic(&self.pos_path, &0u64.to_le_bytes())?;
        self.len = header;
        // Everything appended was synced before the position moved past it: nobody can
        // be waiting on the old state.
        self.sync.retire();
        self.sync = FileSync::new(self.file.clone(), &self.path, header, true);
        Ok(())
    }

    /// The oldest timestamp among the items not delivered yet.
    pub fn oldest_pending(&self) -> Option<u64> {
        self.stamps.keys().next().copied()
    }

    /// When the oldest item not delivered yet was recorded (an item replayed at open
    /// counts from the open).
    pub fn oldest_recorded(&self) -> Option<Instant> {
        self.items.front().map(|(_, _, at)| *at)
    }

    /// Items not delivered yet.
    pub fn pending(&self) -> u64 {
        self.items.len() as u64
    }

    /// Items dropped because the backlog was full, since it was opened.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Drops the oldest items past the limit, each logged (ReductStore drops the oldest
    /// too; the count is reported, never silent).
    fn enforce_limit(&mut self) {
        while self.items.len() > self.limit {
            if let Some((item, _, _)) = self.items.pop_front() {
                forget(&mut self.stamps, item.ts);
                self.dropped += 1;
                log::error!(
                    "replication backlog {} is full ({} items): dropping the oldest, record {} ({:?})",
                    self.path.display(),
                    self.limit,
                    item.ts,
                    item.kind
                );
            }
        }
    }
}

/// Takes one count of `ts` off `stamps`.
fn forget(stamps: &mut BTreeMap<u64, u32>, ts: u64) {
    if let std::collections::btree_map::Entry::Occupied(mut e) = stamps.entry(ts) {
        *e.get_mut() -= 1;
        if *e.get() == 0 {
            e.remove();
        }
    }
}

/// Where the delivered position of the backlog at `path` is kept.
fn position_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".pos");
    PathBuf::from(name)
}

/// The delivered position (0 when none was recorded).
fn read_position(path: &Path) -> Result<u64> {
    match std::fs::read(path) {
        Ok(bytes) => match <[u8; 8]>::try_from(bytes.as_slice()) {
            Ok(raw) => Ok(u64::from_le_bytes(raw)),
            Err(_) => Err(Error::internal(format!(
                "{} is damaged ({} bytes, expected 8)",
                path.display(),
                bytes.len()
            ))),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(Error::io(format!("reading {}", path.display()), e)),
    }
}

fn decode(body: &[u8], what: &str) -> Result<BacklogItem> {
    let bad = || Error::internal(format!("{what}: a backlog item is damaged"));
    let (&kind, rest) = body.split_first().ok_or_else(bad)?;
    let mut r = BinaryReader::new(rest, what);
    let ts = r.u64()?;
    let origin = match kind {
        OP_WRITE_FROM | OP_UPDATE_FROM => Some(Arc::from(r.str()?)),
        _ => None,
    };
    let (kind, removed) = match kind {
        OP_WRITE | OP_WRITE_FROM => (ItemKind::Write, Vec::new()),
        OP_UPDATE | OP_UPDATE_FROM => {
            let n = r.varint()?;
            let mut removed = Vec::new();
            for _ in 0..n {
                removed.push(r.str()?);
            }
            (ItemKind::Update, removed)
        }
        _ => return Err(bad()),
    };
    Ok(BacklogItem {
        kind,
        ts,
        removed,
        origin,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::sync::SyncMode;

    fn write(ts: u64) -> BacklogItem {
        BacklogItem {
            kind: ItemKind::Write,
            ts,
            removed: Vec::new(),
            origin: None,
        }
    }

    #[test]
    fn pending_items_survive_a_reopen_and_delivered_ones_do_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("e.backlog");
        let durability = Durability::new(SyncMode::Always);
        let mut backlog = Backlog::open(&path, 100).expect("open");
        for ts in 1..=5 {
            backlog
                .append(write(ts), &durability)
                .expect("append")
                .wait()
                .expect("synced");
        }
        backlog
            .append(
                BacklogItem {
                    kind: ItemKind::Update,
                    ts: 2,
                    removed: vec!["gone".into()],
                    origin: Some("elsewhere".into()),
                },
                &durability,
            )
            .expect("append")
            .wait()
            .expect("synced");
        assert_eq!(backlog.oldest_pending(), Some(1));
        backlog.delivered(2).expect("delivered");
        assert_eq!(backlog.pending(), 4);
        // The relabel of record 2 (which came from another server) is still pending.
        assert_eq!(backlog.oldest_pending(), Some(2));
        drop(backlog);
        let backlog = Backlog::open(&path, 100).expect("reopen");
        assert_eq!(
            backlog.peek(10),
            vec![
                write(3),
                write(4),
                write(5),
                BacklogItem {
                    kind: ItemKind::Update,
                    ts: 2,
                    removed: vec!["gone".into()],
                    origin: Some("elsewhere".into()),
                }
            ]
        );
    }

    #[test]
    fn a_moved_backlog_keeps_its_position_and_a_stray_position_skips_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (from, to) = (dir.path().join("a.backlog"), dir.path().join("b.backlog"));
        let durability = Durability::new(SyncMode::Never);
        let mut backlog = Backlog::open(&from, 100).expect("open");
        for ts in 1..=3 {
            let _ = backlog.append(write(ts), &durability).expect("append");
        }
        backlog.delivered(1).expect("delivered");
        drop(backlog);
        Backlog::move_files(&from, &to).expect("moved");
        let moved = Backlog::open(&to, 100).expect("open moved");
        assert_eq!(moved.peek(10), vec![write(2), write(3)]);
        // A crash between the two renames leaves the old name's position behind: a new
        // backlog there must not start past its own items.
        std::fs::write(position_path(&from), 1000u64.to_le_bytes()).expect("stray position");
        let mut fresh = Backlog::open(&from, 100).expect("open fresh");
        let _ = fresh.append(write(7), &durability).expect("append");
        drop(fresh);
        let fresh = Backlog::open(&from, 100).expect("reopen fresh");
        assert_eq!(fresh.peek(10), vec![write(7)]);
    }

    #[test]
    fn a_torn_last_item_is_the_only_one_lost() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("e.backlog");
        let durability = Durability::new(SyncMode::Never);
        let mut backlog = Backlog::open(&path, 100).expect("open");
        for ts in 1..=3 {
            let _ = backlog.append(write(ts), &durability).expect("append");
        }
        drop(backlog);
        let len = std::fs::metadata(&path).expect("file").len();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open for tearing");
        file.set_len(len - 3).expect("torn");
        let backlog = Backlog::open(&path, 100).expect("reopen");
        assert_eq!(backlog.peek(10), vec![write(1), write(2)]);
    }

    #[test]
    fn a_full_backlog_drops_its_oldest_items_and_counts_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let durability = Durability::new(SyncMode::Never);
        let mut backlog = Backlog::open(&dir.path().join("e.backlog"), 3).expect("open");
        for ts in 1..=5 {
            let _ = backlog.append(write(ts), &durability).expect("append");
        }
        assert_eq!(backlog.peek(10), vec![write(3), write(4), write(5)]);
        assert_eq!(backlog.dropped(), 2);
    }

    #[test]
    fn a_drained_long_file_is_cut_back_and_keeps_working() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("e.backlog");
        let durability = Durability::new(SyncMode::Never);
        let mut backlog = Backlog::open(&path, usize::MAX).expect("open");
        let items = TRUNCATE_PAST / 17 + 2;
        for ts in 0..items {
            let _ = backlog.append(write(ts), &durability).expect("append");
        }
        backlog.delivered(items as usize).expect("delivered");
        assert_eq!(
            std::fs::metadata(&path).expect("file").len(),
            BACKLOG_MAGIC.len() as u64
        );
        let _ = backlog.append(write(7), &durability).expect("append");
        drop(backlog);
        let backlog = Backlog::open(&path, usize::MAX).expect("reopen");
        assert_eq!(backlog.peek(10), vec![write(7)]);
    }
}
