//! Rebuilding an entry's index from its own files, when the index is missing or damaged.
//!
//! The index is only the commit point: every block file describes itself (frames, record
//! table, footer), every log replays on its own, and an edit log is named after its block.
//! So a lost index costs nothing that is in the files: the blocks are read back, the logs
//! sealed into blocks, and a new index committed — never deleting a file. What cannot be
//! used is set aside under a name that says why (`*.damaged`, `*.superseded`).
//!
//! Copies of the same records (a crash after a rewrite's commit and before its cleanup
//! leaves the old block beside the new one; a seal's log beside its block) are resolved
//! by sequence number, the newer file winning: a file whose live records all appear in
//! newer files is superseded; one that shares only some gets tombstones for them, so each
//! timestamp is live once. What cannot be recovered this way: records a drop or a fold
//! removed just before the index was lost may come back (their old block was still there).

use std::collections::HashSet;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::storage::format::block::{BLOCK_MAGIC, SealedBlock};
use crate::storage::format::edits::{BlockChange, BlockEdits};
use crate::storage::format::index::{
    BlockEntry, EntryFileKind, EntryIndex, INDEX_FILE, RemoteLocation, block_path, edits_path,
    log_path, parse_file_name, stub_path,
};
use crate::storage::format::log::OpenLog;
use crate::storage::format::rewrite::write_log_block;
use crate::storage::remote::stub::read_stub;
use crate::storage::sync::fsutil::{
    DAMAGED_MARK, SUPERSEDED_MARK, is_set_aside, remove_file_if_exists, set_aside,
};

/// The data files of an entry directory by kind, each list sorted by sequence number.
#[derive(Debug, Default)]
pub(crate) struct EntryFiles {
    /// Sealed blocks.
    pub blocks: Vec<u64>,
    /// Open and late logs.
    pub logs: Vec<u64>,
    /// Edit logs.
    pub edits: Vec<u64>,
    /// Stubs of tiered blocks.
    pub stubs: Vec<u64>,
}

impl EntryFiles {
    /// Lists the data files of `dir` (anything else — the index, set-aside files,
    /// subdirectories — is not listed).
    pub(crate) fn list(dir: &Path) -> Result<EntryFiles> {
        let mut files = EntryFiles::default();
        let listing = std::fs::read_dir(dir)
            .map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
        for item in listing {
            let item = item.map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
            if !item.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            match parse_file_name(&item.file_name().to_string_lossy()) {
                Some((EntryFileKind::Block, seq)) => files.blocks.push(seq),
                Some((EntryFileKind::Log, seq)) => files.logs.push(seq),
                Some((EntryFileKind::Edits, seq)) => files.edits.push(seq),
                Some((EntryFileKind::Stub, seq)) => files.stubs.push(seq),
                None => {}
            }
        }
        files.blocks.sort_unstable();
        files.logs.sort_unstable();
        files.edits.sort_unstable();
        Ok(files)
    }

    /// Whether there are blocks (local or tiered) or logs: records an index could be
    /// rebuilt from.
    pub(crate) fn has_records(&self) -> bool {
        !self.blocks.is_empty() || !self.logs.is_empty() || !self.stubs.is_empty()
    }

    /// The largest sequence number in use.
    fn max_seq(&self) -> Option<u64> {
        [&self.blocks, &self.logs, &self.edits, &self.stubs]
            .iter()
            .filter_map(|l| l.last().copied())
            .max()
    }
}

/// The files of an entry directory its index does not account for, by name.
#[derive(Debug, Default)]
pub(crate) struct Unnamed {
    /// Leftovers of interrupted changes (written before a commit that never came, or
    /// replaced by one whose cleanup did not run): removed when the entry opens.
    pub leftovers: Vec<String>,
    /// Files set aside by a recovery, kept for inspection.
    pub set_aside: Vec<String>,
}

/// Sorts the files of `dir` that `index` neither names nor keeps (`EntryIndex::kept_files`)
/// into leftovers and set-aside files: what an open removes and what it keeps.
pub(crate) fn unnamed_files(dir: &Path, index: &EntryIndex) -> Result<Unnamed> {
    let kept = index.kept_files();
    let mut unnamed = Unnamed::default();
    let listing =
        std::fs::read_dir(dir).map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
    for item in listing {
        let item = item.map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
        let name = item.file_name().to_string_lossy().into_owned();
        if !item.file_type().is_ok_and(|t| t.is_file()) || kept.contains(&name) {
            continue;
        }
        if is_set_aside(&name) {
            unnamed.set_aside.push(name);
        } else {
            unnamed.leftovers.push(name);
        }
    }
    unnamed.leftovers.sort();
    unnamed.set_aside.sort();
    Ok(unnamed)
}

/// The edit log of block `seq`, if it has one that can be read (one that cannot is set
/// aside: the block then reads as its file has it).
fn open_edits(
    dir: &Path,
    seq: u64,
    what: &str,
    set_aside_files: &mut Vec<(PathBuf, &str)>,
) -> Option<BlockEdits> {
    let edits_file = edits_path(dir, seq);
    if !edits_file.exists() {
        return None;
    }
    match BlockEdits::open(&edits_file) {
        Ok(log) => Some(log),
        Err(e) => {
            log::error!(
                "{what}: {} cannot be read ({e}); setting it aside, block {seq} reads as its file has it",
                edits_file.display()
            );
            set_aside_files.push((edits_file, DAMAGED_MARK));
            None
        }
    }
}

/// A tiered block's record table, read from its stub: the stub's bytes laid out as the
/// block file has them in a sparse scratch file (its frames absent: none is read), parsed,
/// and the file removed (the mapping outlives it).
fn open_stub_table(path: &Path, what: String) -> Result<(RemoteLocation, SealedBlock)> {
    let (header, tail) = read_stub(path)?;
    let mut scratch = path.as_os_str().to_owned();
    scratch.push(".rebuild");
    let scratch = PathBuf::from(scratch);
    let io = |e| Error::io(format!("writing {}", scratch.display()), e);
    let file = std::fs::File::create(&scratch).map_err(io)?;
    let laid_out = file
        .set_len(header.size)
        .and_then(|()| file.write_all_at(BLOCK_MAGIC, 0))
        .and_then(|()| file.write_all_at(&tail, header.location.meta_offset));
    let block = laid_out
        .map_err(io)
        .and_then(|()| SealedBlock::open(&scratch, what, None));
    let _ = remove_file_if_exists(&scratch);
    Ok((header.location, block?))
}

/// Whether `dir` holds an entry: its index, or data files an index can be rebuilt from.
pub(crate) fn holds_entry(dir: &Path) -> bool {
    dir.join(INDEX_FILE).exists() || EntryFiles::list(dir).is_ok_and(|f| f.has_records())
}

/// A source of records found in the directory, newest first when rebuilding.
enum Source {
    /// A block file, or a tiered block's table (with its object's location).
    Block(
        u64,
        Box<SealedBlock>,
        Option<BlockEdits>,
        Option<RemoteLocation>,
    ),
    Log(u64, OpenLog),
}

impl Source {
    fn seq(&self) -> u64 {
        match self {
            Source::Block(seq, ..) | Source::Log(seq, _) => *seq,
        }
    }
}

/// Rebuilds the index of entry `bucket/name` in `dir` from its files and commits it; `why`
/// says what happened to the old one (logged). A damaged old index is kept as
/// `.index.damaged`. Fails (and changes no index) when a block cannot be accounted for.
pub(super) fn rebuild_index(
    bucket: &str,
    name: &str,
    dir: &Path,
    frame_size: usize,
    why: &str,
) -> Result<EntryIndex> {
    let what = format!("entry {bucket}/{name}");
    log::error!("{what}: {why}; rebuilding the index from the entry's files");
    let files = EntryFiles::list(dir)?;
    let mut index = EntryIndex::new();
    index.next_seq = files.max_seq().map_or(0, |s| s + 1);
    let mut set_aside_files: Vec<(PathBuf, &str)> = Vec::new();
    let mut sources = Vec::new();
    for &seq in &files.blocks {
        let path = block_path(dir, seq);
        match SealedBlock::open(&path, format!("block file {}", path.display()), None) {
            Ok(block) => {
                let edits = open_edits(dir, seq, &what, &mut set_aside_files);
                sources.push(Source::Block(seq, Box::new(block), edits, None));
            }
            Err(e) => {
                log::error!(
                    "{what}: {} cannot be read ({e}); setting it aside",
                    path.display()
                );
                set_aside_files.push((path, DAMAGED_MARK));
                let edits_file = edits_path(dir, seq);
                if edits_file.exists() {
                    set_aside_files.push((edits_file, DAMAGED_MARK));
                }
            }
        }
    }
    for &seq in &files.stubs {
        let path = stub_path(dir, seq);
        if files.blocks.binary_search(&seq).is_ok() {
            // A hand-over cut short before or after its commit left both: the block file
            // is whole and local; the object, named by no index, is collected later.
            log::warn!(
                "{what}: {} and its block file are both here; the block file is kept",
                path.display()
            );
            set_aside_files.push((path, SUPERSEDED_MARK));
            continue;
        }
        match open_stub_table(&path, format!("tiered block {}", path.display())) {
            Ok((location, block)) => {
                let edits = open_edits(dir, seq, &what, &mut set_aside_files);
                sources.push(Source::Block(seq, Box::new(block), edits, Some(location)));
            }
            Err(e) => {
                log::error!(
                    "{what}: {} cannot be read ({e}); setting it aside",
                    path.display()
                );
                set_aside_files.push((path, DAMAGED_MARK));
            }
        }
    }
    for &seq in &files.logs {
        let path = log_path(dir, seq);
        match OpenLog::open(&path) {
            Ok(log) => sources.push(Source::Log(seq, log)),
            Err(e) => {
                log::error!(
                    "{what}: {} cannot be read ({e}); setting it aside",
                    path.display()
                );
                set_aside_files.push((path, DAMAGED_MARK));
            }
        }
    }
    // Newest first: a newer file is the later copy of any record two files share.
    sources.sort_by_key(|s| std::cmp::Reverse(s.seq()));
    let mut seen: HashSet<u64> = HashSet::new();
    let mut sealed_logs = Vec::new();
    let mut records = 0u64;
    for source in sources {
        match source {
            Source::Block(seq, block, mut edits, remote) => {
                let live: Vec<(u64, u64)> = block
                    .records()
                    .iter()
                    .map(|r| (r.meta.timestamp, r.meta.size))
                    .filter(|(ts, _)| !edits.as_ref().is_some_and(|e| e.is_removed(*ts)))
                    .collect();
                let dups: Vec<(u64, u64)> = live
                    .iter()
                    .copied()
                    .filter(|(ts, _)| seen.contains(ts))
                    .collect();
                if dups.len() == live.len() {
                    log::warn!(
                        "{what}: block {} holds no record a newer file does not (a rewrite's leftover); setting it aside",
                        seq
                    );
                    let file = match remote {
                        None => block_path(dir, seq),
                        Some(_) => stub_path(dir, seq),
                    };
                    set_aside_files.push((file, SUPERSEDED_MARK));
                    if edits.is_some() {
                        set_aside_files.push((edits_path(dir, seq), SUPERSEDED_MARK));
                    }
                    continue;
                }
                if !dups.is_empty() {
                    let log = match &mut edits {
                        Some(log) => log,
                        None => edits.insert(BlockEdits::create(&edits_path(dir, seq))?),
                    };
                    log.append(&BlockChange::Remove(dups.clone()))?;
                    log.sync()?;
                    log::warn!(
                        "{what}: block {seq} shares {} record(s) with newer files; the newer copies are kept",
                        dups.len()
                    );
                }
                seen.extend(live.iter().map(|(ts, _)| *ts));
                records += (live.len() - dups.len()) as u64;
                let mut entry = BlockEntry::from_summary(seq, &block.summary());
                entry.in_log = block.is_sealed_log();
                entry.remote = remote;
                if let Some(log) = &edits {
                    entry.edited = true;
                    entry.edits = super::edits::edit_state(log);
                }
                index.blocks.push(entry);
            }
            Source::Log(seq, mut log) => {
                let dups: Vec<u64> = log
                    .records()
                    .keys()
                    .copied()
                    .filter(|ts| seen.contains(ts))
                    .collect();
                for &ts in &dups {
                    log.append_remove(ts)?;
                }
                seen.extend(log.records().keys().copied());
                records += log.records().len() as u64;
                if log.records().is_empty() {
                    sealed_logs.push(seq);
                    continue;
                }
                let block_seq = index.take_seq();
                let path = block_path(dir, block_seq);
                match write_log_block(&log, &path, frame_size) {
                    Ok(summary) => {
                        index
                            .blocks
                            .push(BlockEntry::from_summary(block_seq, &summary));
                        sealed_logs.push(seq);
                    }
                    Err(e) if index.late_log.is_none() => {
                        // Kept as it is: reads check every payload of a log.
                        log::error!(
                            "{what}: log {} could not be sealed ({e}); it stays the entry's late log",
                            log_path(dir, seq).display()
                        );
                        log.file()?
                            .sync_all()
                            .map_err(|e| Error::io(format!("syncing log {seq:016x}"), e))?;
                        index.late_log = Some(seq);
                    }
                    Err(e) => return Err(e),
                }
            }
        }
    }
    index.blocks.sort_by_key(|b| b.first_ts);
    let old_index = dir.join(INDEX_FILE);
    if old_index.exists() {
        set_aside(&old_index, DAMAGED_MARK)?;
    }
    index.save(dir)?;
    let mut aside = Vec::new();
    for (path, mark) in &set_aside_files {
        aside.push(set_aside(path, mark)?.display().to_string());
    }
    for seq in sealed_logs {
        remove_file_if_exists(&log_path(dir, seq))?;
    }
    log::error!(
        "{what}: index rebuilt: {} block(s), {records} record(s){}",
        index.blocks.len(),
        if aside.is_empty() {
            String::new()
        } else {
            format!("; set aside: {}", aside.join(", "))
        }
    );
    Ok(index)
}
