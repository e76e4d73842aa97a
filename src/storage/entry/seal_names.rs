//! The file names a seal cut short can leave: a seal renames the sealed log `<seq>.log`
//! to `<seq>.blk` just before the index commit that names the block (`seal.rs`), so a
//! crash between the two, or a commit that failed after its own rename, leaves an index
//! that expects the other name for the same bytes. The open restores the expected name
//! before it trusts the index (and removes leftovers); `halflife check` reports it.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::storage::format::index::{EntryIndex, block_path, log_path};
use crate::storage::sync::fsutil::fsync_dir;

/// The renames that restore the file names a crash inside a seal's step 5 can leave in
/// an entry directory `dir`, as (from, to): a log `index` still names that was already
/// renamed to its block's name gets its name back (it is sealed again at open), and a
/// block sealed in place whose rename a failed commit undid gets the block's name. The
/// bytes are the same under either name.
pub(crate) fn seal_renames(dir: &Path, index: &EntryIndex) -> Vec<(PathBuf, PathBuf)> {
    let back = index
        .sealing_logs
        .iter()
        .map(|&seq| (block_path(dir, seq), log_path(dir, seq)));
    let forward = index
        .blocks
        .iter()
        .filter(|b| b.in_log && b.remote.is_none())
        .map(|b| (log_path(dir, b.seq), block_path(dir, b.seq)));
    back.chain(forward)
        .filter(|(from, to)| from.exists() && !to.exists())
        .collect()
}

/// Makes the renames of [`seal_renames`] before the entry's `index` is trusted (before
/// its leftovers are removed).
pub(super) fn restore_seal_names(what: &str, dir: &Path, index: &EntryIndex) -> Result<()> {
    let renames = seal_renames(dir, index);
    for (from, to) in &renames {
        log::warn!(
            "entry {what}: a seal was cut short between its rename and its commit; {} gets back the name {}",
            from.display(),
            to.display()
        );
        std::fs::rename(from, to).map_err(|e| {
            Error::io(
                format!("renaming {} to {}", from.display(), to.display()),
                e,
            )
        })?;
    }
    if !renames.is_empty() {
        fsync_dir(dir)?;
    }
    Ok(())
}
