//! Changes to records of sealed blocks: appended to the block's edit log (see
//! `storage::format::edits`), then, for removals, the block dropped when empty, or its
//! range narrowed (and, past the tombstone threshold or once its edit log is larger than
//! the block, a fold asked of the background thread: `fold.rs`).

use std::sync::atomic::Ordering;

use super::{Entry, EntryState};
use crate::error::Result;
use crate::storage::format::edits::{BlockChange, BlockEdits};
use crate::storage::format::index::max_overlap;
use crate::storage::format::index::{EditState, edits_path};
use crate::storage::sync::Pending;

impl Entry {
    /// Changes records of sealed block `pos` by appending to its edit log (created on
    /// the first change): one small `pwrite`, as durable as a write, fsynced with the
    /// entry's next commit. Removals then drop a block left empty or narrow its range,
    /// and ask for the fold of one whose tombstones reached the threshold. A block's first
    /// change also commits the index, which from then on names the block as edited.
    pub(super) fn change_block(
        &self,
        st: &mut EntryState,
        pos: usize,
        change: BlockChange,
    ) -> Result<Pending> {
        let (pending, flag_to_commit) = self.change_block_deferred(st, pos, change)?;
        if flag_to_commit {
            self.commit(st, st.index.clone(), &[], &[])?;
        }
        Ok(pending)
    }

    /// [`Entry::change_block`] without its commit: returns whether the index in memory now
    /// marks a block as edited that the index on disk does not (a bulk removal commits
    /// once for all its blocks).
    pub(super) fn change_block_deferred(
        &self,
        st: &mut EntryState,
        pos: usize,
        change: BlockChange,
    ) -> Result<(Pending, bool)> {
        let seq = st.index.blocks[pos].seq;
        let mut created = false;
        let edits = match st.edits.entry(seq) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                created = true;
                v.insert(BlockEdits::create(&edits_path(&self.dir, seq))?)
            }
        };
        edits.append(&change)?;
        // When a drop below commits, the edit log is retired and this returns at once:
        // the commit made the change durable.
        let pending = self
            .ctx
            .durability
            .after_append(edits.sync_handle(), edits.file_len());
        let b = &mut st.index.blocks[pos];
        b.edits = edit_state(edits);
        // So that a lost edit log is noticed at open rather than its changes silently
        // undone; the next commit (which syncs the log first) persists it.
        b.edited = true;
        self.ctx.cache.edit((self.uid, seq), &change);
        if !matches!(change, BlockChange::Remove(_)) {
            return Ok((pending, created));
        }
        if st.index.blocks[pos].live_records() == 0 {
            let mut next = st.index.clone();
            next.blocks.remove(pos);
            // The unlink of a block file can take milliseconds: the background thread
            // makes it, and no writer of the entry waits for it.
            let files = self.commit_deferred(st, next, &[], &[seq])?;
            self.ctx.seals.later(Box::new(move || files.remove()));
            return Ok((pending, false));
        }
        let b = &st.index.blocks[pos];
        if self.wants_fold(b, st.edits.get(&seq)) {
            // The rewrite is as large as the block: the background thread makes it
            // (`fold.rs`); until then the tombstones answer for it.
            self.request_background();
        }
        self.narrow_range(st, seq)?;
        Ok((pending, created))
    }

    /// Narrows block `seq`'s range to its live records when a tombstone removed its first
    /// or last one (in memory; the next commit persists it), so the entry's oldest and
    /// latest record and the lookups never name a removed record.
    pub(super) fn narrow_range(&self, st: &mut EntryState, seq: u64) -> Result<()> {
        let Some(pos) = st.index.blocks.iter().position(|b| b.seq == seq) else {
            return Ok(());
        };
        let b = &st.index.blocks[pos];
        let edits = st.edits.get(&seq);
        let edge_removed =
            edits.is_some_and(|e| e.is_removed(b.first_ts) || e.is_removed(b.last_ts));
        if !edge_removed {
            return Ok(());
        }
        let view = self.block_in(st, b)?;
        let (Some(first), Some(last)) = (view.records().first(), view.records().last()) else {
            return Ok(());
        };
        let (first, last) = (first.meta.timestamp, last.meta.timestamp);
        let b = &mut st.index.blocks[pos];
        b.first_ts = first;
        b.last_ts = last;
        st.resort();
        self.depth
            .store(max_overlap(&st.index.blocks).0, Ordering::Relaxed);
        Ok(())
    }
}

/// What an edit log changes about its block, for the block's index entry.
pub(super) fn edit_state(edits: &BlockEdits) -> EditState {
    EditState {
        ops: edits.ops(),
        removed: edits.removed_count(),
        removed_bytes: edits.removed_bytes(),
    }
}

/// Opens the edit logs of `index`'s blocks and records what each changes in its block's
/// index entry. An edit log the index names but that is missing stops the entry (its
/// relabels and removals would silently come undone) unless `accept_lost` says to read
/// the blocks as their files have them; the second value says so happened, for the
/// writer to commit. `read_only`: a replica's, nothing is cut or restored in the logs.
pub(super) fn load_edits(
    bucket: &str,
    name: &str,
    dir: &std::path::Path,
    index: &mut crate::storage::format::index::EntryIndex,
    accept_lost: bool,
    read_only: bool,
) -> Result<(std::collections::HashMap<u64, BlockEdits>, bool)> {
    let mut lost = false;
    let mut edits = std::collections::HashMap::new();
    for b in &mut index.blocks {
        let path = edits_path(dir, b.seq);
        if path.exists() {
            let log = if read_only {
                BlockEdits::open_read_only(&path)?
            } else {
                BlockEdits::open(&path)?
            };
            b.edits = edit_state(&log);
            // (An index written before blocks were marked learns it at its next commit.)
            b.edited = true;
            edits.insert(b.seq, log);
        } else if b.edited && !accept_lost {
            return Err(crate::error::Error::internal(format!(
                "the edit log {} of block {} is missing: the relabels and removals made to its records would come undone, so the entry is not opened; restore the file, or run `halflife check --repair` to accept the loss",
                path.display(),
                b.first_ts
            )));
        } else if b.edited {
            log::error!(
                "entry {bucket}/{name}: the edit log {} of block {} is missing: the relabels and removals made to its records since it was written are lost, its records read as the block file has them",
                path.display(),
                b.first_ts
            );
            b.edited = false;
            lost = true;
        }
    }
    Ok((edits, lost))
}
