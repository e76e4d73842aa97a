//! `halflife check`: what opening a data directory would find and do, without opening it.
//!
//! Opening a store repairs what a crash leaves (torn log tails cut, leftovers of
//! interrupted changes removed, a lost index rebuilt) and reports what damage leaves (bad
//! bytes inside a log skipped, an unreadable block, a missing edit log). This walks the
//! same files read-only and says, file by file, what it found and what an open would do
//! about it; every block frame's checksum is verified too (reads check a frame only when
//! they touch it). With `--repair` the store is then opened as the server opens it, and
//! the directory checked again: what is left is what no repair can bring back.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::storage::bucket::{SETTINGS_FILE, TRASH_PREFIX};
use crate::storage::entry::{EntryFiles, holds_entry, seal_renames, unnamed_files};
use crate::storage::format::block::SealedBlock;
use crate::storage::format::edits::BlockEdits;
use crate::storage::format::index::{
    EntryIndex, IndexLoad, RemoteLocation, block_path, edits_path, log_path, stub_path,
};
use crate::storage::format::log::OpenLog;
use crate::storage::format::oplog::{Header, Scan, damaged_copy_path};
use crate::storage::remote::Remote;
use crate::storage::remote::pending::{Pending, PendingOp};
use crate::storage::remote::stub::read_stub;
use crate::storage::store::lock_data_dir;
use crate::storage::sync::fsutil::TMP_SUFFIX;
use std::sync::Arc;

/// How much a finding matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Worth knowing, nothing wrong: files set aside by an earlier repair.
    Note,
    /// What a crash normally leaves; the next open repairs it and loses nothing acknowledged.
    Warning,
    /// Damage: some bytes cannot be read (what is lost is said), or an open would fail.
    Error,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `pad`, so the findings line up in a column (`{:7}`).
        f.pad(match self {
            Severity::Note => "note",
            Severity::Warning => "warning",
            Severity::Error => "ERROR",
        })
    }
}

/// One thing the check found.
#[derive(Debug, Clone)]
pub struct Finding {
    /// How much it matters.
    pub severity: Severity,
    /// The file or directory concerned.
    pub path: PathBuf,
    /// What is wrong, and what it costs.
    pub what: String,
    /// What opening the store does about it, if anything.
    pub repair: Option<String>,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:7} {}: {}",
            self.severity,
            self.path.display(),
            self.what
        )?;
        if let Some(repair) = &self.repair {
            write!(f, " [at open: {repair}]")?;
        }
        Ok(())
    }
}

/// What a check of a data directory found.
#[derive(Debug, Default)]
pub struct CheckReport {
    /// Buckets walked.
    pub buckets: usize,
    /// Entries walked.
    pub entries: usize,
    /// Block files read (every frame checksum verified).
    pub blocks: usize,
    /// The findings, in the order of the walk.
    pub findings: Vec<Finding>,
}

impl CheckReport {
    /// How many findings have this severity.
    pub fn count(&self, severity: Severity) -> usize {
        self.findings
            .iter()
            .filter(|f| f.severity == severity)
            .count()
    }

    /// Whether anything is wrong (notes do not count).
    pub fn is_clean(&self) -> bool {
        self.findings.iter().all(|f| f.severity == Severity::Note)
    }

    fn add(&mut self, severity: Severity, path: &Path, what: String, repair: Option<&str>) {
        self.findings.push(Finding {
            severity,
            path: path.to_path_buf(),
            what,
            repair: repair.map(str::to_string),
        });
    }
}

/// Checks the data directory `data` read-only, holding its lock (a running server holds
/// it: stop the server first).
pub fn check(data: &Path) -> Result<CheckReport> {
    check_with_remotes(data, &[])
}

/// [`check`], also asking `remotes` whether each tiered block's object is there with the
/// size and ETag the index committed.
pub fn check_with_remotes(data: &Path, remotes: &[Arc<Remote>]) -> Result<CheckReport> {
    crate::storage::marker::require_data_dir(data)?;
    let _lock = lock_data_dir(data, crate::storage::store::LOCK_PATIENCE)?;
    let mut report = CheckReport::default();
    for dir in sorted_dirs(data)? {
        let name = file_name(&dir);
        if name.starts_with(TRASH_PREFIX) {
            report.add(
                Severity::Warning,
                &dir,
                "a bucket deletion that was interrupted".into(),
                Some("removed"),
            );
        } else if dir.join(SETTINGS_FILE).exists() {
            report.buckets += 1;
            check_bucket_dir(&dir, &mut report, remotes)?;
        }
    }
    check_pending(data, &mut report)?;
    Ok(report)
}

fn check_bucket_dir(dir: &Path, report: &mut CheckReport, remotes: &[Arc<Remote>]) -> Result<()> {
    if let Err(e) = std::fs::read(dir.join(SETTINGS_FILE))
        .map_err(|e| e.to_string())
        .and_then(|raw| {
            // As `Bucket::open` reads them: a valid JSON of the wrong shape fails too.
            serde_json::from_slice::<crate::storage::BucketSettings>(&raw)
                .map(drop)
                .map_err(|e| e.to_string())
        })
    {
        report.add(
            Severity::Error,
            &dir.join(SETTINGS_FILE),
            format!("the bucket settings cannot be read ({e}): the bucket does not open"),
            None,
        );
    }
    walk_entries(dir, report, remotes)
}

fn walk_entries(dir: &Path, report: &mut CheckReport, remotes: &[Arc<Remote>]) -> Result<()> {
    for sub in sorted_dirs(dir)? {
        let name = file_name(&sub);
        if name.starts_with(TRASH_PREFIX) {
            report.add(
                Severity::Warning,
                &sub,
                "an entry deletion that was interrupted".into(),
                Some("removed"),
            );
            continue;
        }
        if name.starts_with('.') {
            continue;
        }
        if holds_entry(&sub) {
            report.entries += 1;
            check_entry(&sub, report, remotes)?;
        }
        walk_entries(&sub, report, remotes)?;
    }
    Ok(())
}

fn check_entry(dir: &Path, report: &mut CheckReport, remotes: &[Arc<Remote>]) -> Result<()> {
    let files = EntryFiles::list(dir)?;
    let index_path = dir.join(crate::storage::format::index::INDEX_FILE);
    let rebuild = format!(
        "the index is rebuilt from the {} block file(s) and {} log(s), nothing deleted",
        files.blocks.len(),
        files.logs.len()
    );
    let index = match EntryIndex::try_load(dir) {
        Ok(IndexLoad::Loaded(index)) => index,
        Ok(IndexLoad::Missing) => {
            report.add(
                Severity::Error,
                &index_path,
                "the entry's index is missing".into(),
                Some(&rebuild),
            );
            return Ok(());
        }
        Ok(IndexLoad::Damaged(e)) => {
            report.add(
                Severity::Error,
                &index_path,
                format!("the entry's index is damaged ({e})"),
                Some(&format!("{rebuild}; the old index kept as .index.damaged")),
            );
            return Ok(());
        }
        Err(e) => {
            report.add(
                Severity::Error,
                &index_path,
                format!("{e}: the entry does not open"),
                None,
            );
            return Ok(());
        }
    };
    // A seal cut short between its rename and its commit: the open gives the file the
    // name the index expects; checked under that name's role, from where it is now.
    let renames = seal_renames(dir, &index);
    let renamed_from = |path: &Path| -> PathBuf {
        renames
            .iter()
            .find(|(_, to)| to == path)
            .map_or_else(|| path.to_path_buf(), |(from, _)| from.clone())
    };
    for (from, to) in &renames {
        report.add(
            Severity::Warning,
            from,
            "a seal was cut short between renaming this file and committing the index".into(),
            Some(&format!("renamed {}", file_name(to))),
        );
    }
    let mut unnamed = unnamed_files(dir, &index)?;
    unnamed
        .leftovers
        .retain(|name| !renames.iter().any(|(from, _)| file_name(from) == *name));
    for name in unnamed.set_aside {
        report.add(
            Severity::Note,
            &dir.join(&name),
            "set aside by an earlier repair, kept for inspection".into(),
            None,
        );
    }
    for name in unnamed.leftovers {
        let what = if name.ends_with(TMP_SUFFIX) {
            "a file write that was interrupted"
        } else {
            "a file the index does not name (left by an interrupted change)"
        };
        report.add(
            Severity::Warning,
            &dir.join(&name),
            what.into(),
            Some("removed"),
        );
    }
    for seq in index.log_seqs() {
        let path = renamed_from(&log_path(dir, seq));
        if path.exists() {
            report_scan(report, &path, OpenLog::scan(&path)?);
        } else if index.sealing_logs.contains(&seq) {
            report.add(
                Severity::Error,
                &path,
                "the index names this full log, waiting for its seal, but it is missing: its records are lost".into(),
                Some("dropped from the index"),
            );
        } else {
            report.add(
                Severity::Warning,
                &path,
                "the index names this log but it is missing (its creation did not survive a power loss; nothing acknowledged was in it)".into(),
                Some("created empty"),
            );
        }
    }
    for b in &index.blocks {
        report.blocks += 1;
        if let Some(location) = &b.remote {
            check_tiered(dir, b, location, remotes, report);
            continue;
        }
        let path = renamed_from(&block_path(dir, b.seq));
        let what = format!("block file {}", path.display());
        match SealedBlock::open(&path, what, Some(b.meta_crc)) {
            Ok(block) => {
                for frame in 0..block.frames().len() {
                    if let Err(e) = block.stored_frame(frame) {
                        report.add(
                            Severity::Error,
                            &path,
                            format!("{e}: the records of this frame cannot be read; queries report them and go on"),
                            None,
                        );
                    }
                }
            }
            Err(e) => report.add(
                Severity::Error,
                &path,
                format!(
                    "{e}: the block's {} record(s) from {} to {} cannot be read; queries report it and go on",
                    b.record_count, b.first_ts, b.last_ts
                ),
                None,
            ),
        }
        let edits = edits_path(dir, b.seq);
        if edits.exists() {
            report_scan(report, &edits, BlockEdits::scan(&edits)?);
        } else if b.edited {
            report.add(
                Severity::Error,
                &edits,
                format!(
                    "the edit log of block {} is missing: the entry does not open, since the relabels and removals of its records would come undone; restore the file, or accept the loss with --repair (the block then reads as its file has it)",
                    b.first_ts
                ),
                Some("with --repair only: the loss is accepted, the index no longer expects the edit log"),
            );
        }
    }
    Ok(())
}

/// Reports remote objects waiting to be deleted, and uploads a stopped run left behind.
fn check_pending(data: &Path, report: &mut CheckReport) -> Result<()> {
    if !Pending::exists_in(data) {
        return Ok(());
    }
    let ops = Pending::read(data)?;
    let count = |f: fn(&PendingOp) -> bool| ops.iter().filter(|(_, op)| f(op)).count();
    let deletions = count(|op| matches!(op, PendingOp::Delete { .. }));
    let uploads = count(|op| matches!(op, PendingOp::Upload { .. }));
    if deletions + uploads > 0 {
        report.add(
            Severity::Warning,
            &data.join(".remote-pending"),
            format!(
                "{deletions} remote object(s) no index names wait to be deleted, {uploads} upload(s) were left in flight"
            ),
            Some("with the remotes configured (RS_REMOTE_<NAME>_*): the objects no index names are deleted"),
        );
    }
    Ok(())
}

/// Checks a tiered block: its stub names the object the index does and holds the record
/// table the index committed; its object is on its remote with the committed ETag.
fn check_tiered(
    dir: &Path,
    b: &crate::storage::format::index::BlockEntry,
    location: &RemoteLocation,
    remotes: &[Arc<Remote>],
    report: &mut CheckReport,
) {
    let stub = stub_path(dir, b.seq);
    match read_stub(&stub) {
        Err(e) => report.add(
            Severity::Error,
            &stub,
            format!(
                "{e}: the tiered block's {} record(s) from {} to {} cannot be read",
                b.record_count, b.first_ts, b.last_ts
            ),
            None,
        ),
        Ok((header, _)) if header.location != *location => report.add(
            Severity::Error,
            &stub,
            format!(
                "the stub names object '{}', the index '{}'",
                header.location.key, location.key
            ),
            None,
        ),
        Ok(_) => {}
    }
    let Some(remote) = remotes
        .iter()
        .find(|r| r.name.eq_ignore_ascii_case(&location.remote))
    else {
        report.add(
            Severity::Note,
            &stub,
            format!(
                "object '{}' on remote '{}' not checked: the remote is not configured here (RS_REMOTE_{}_*)",
                location.key,
                location.remote,
                location.remote.to_ascii_uppercase()
            ),
            None,
        );
        return;
    };
    match remote.head(&location.key) {
        Ok(Some((size, etag))) if size == b.size && etag == location.etag => {}
        Ok(Some((size, etag))) => report.add(
            Severity::Error,
            &stub,
            format!(
                "object '{}' on remote '{}' is {size} bytes with ETag '{etag}'; the index committed {} bytes with ETag '{}'",
                location.key, remote.name, b.size, location.etag
            ),
            None,
        ),
        Ok(None) => report.add(
            Severity::Error,
            &stub,
            format!(
                "object '{}' is missing on remote '{}': the block's {} record(s) from {} to {} cannot be read",
                location.key, remote.name, b.record_count, b.first_ts, b.last_ts
            ),
            None,
        ),
        Err(f) => report.add(
            Severity::Warning,
            &stub,
            format!("{}: the object could not be checked", f.message),
            None,
        ),
    }
}

/// Turns what a scan of a log or an edit log found into findings.
fn report_scan(report: &mut CheckReport, path: &Path, scan: Scan) {
    match scan.header {
        Header::Bad => report.add(
            Severity::Error,
            path,
            "its header is damaged".into(),
            Some("restored, the operations after it kept"),
        ),
        Header::Interrupted => report.add(
            Severity::Warning,
            path,
            "a creation that was interrupted".into(),
            Some("completed, empty"),
        ),
        Header::Zeros => report.add(
            Severity::Warning,
            path,
            "its header is zeros (a creation cut short by a power loss)".into(),
            Some("restored"),
        ),
        Header::Valid => {}
    }
    for damage in &scan.damaged {
        let copy = damaged_copy_path(path, damage.start);
        if copy.exists() {
            // Reported and set aside by an earlier open; the file works around it.
            report.add(
                Severity::Note,
                path,
                format!(
                    "{} damaged bytes at offset {} are skipped (reported before; a copy is kept as {})",
                    damage.len(),
                    damage.start,
                    file_name(&copy)
                ),
                None,
            );
            continue;
        }
        report.add(
            Severity::Error,
            path,
            format!(
                "{} damaged bytes at offset {}: the operations in them are lost, the {} valid operation(s) of the file are kept",
                damage.len(),
                damage.start,
                scan.ops.len()
            ),
            Some(&format!("skipped, a copy kept as {}", file_name(&copy))),
        );
    }
    if let Some(tail) = &scan.tail {
        report.add(
            Severity::Warning,
            path,
            format!(
                "{} bytes at offset {} are an interrupted write (a crash or power loss mid-append; never acknowledged)",
                tail.len(),
                tail.start
            ),
            Some("cut off"),
        );
    }
}

fn sorted_dirs(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(format!("listing {}", dir.display()), e))?
        .flatten()
        .filter(|item| item.file_type().is_ok_and(|t| t.is_dir()))
        .map(|item| item.path())
        .collect();
    dirs.sort();
    Ok(dirs)
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}
