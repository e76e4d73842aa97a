//! Tiering a bucket's window: every local sealed block of the selected entries whose
//! records all lie in `[start, stop)` is handed over to a remote (`entry/tier.rs`).
//!
//! The hand-overs overlap: [`UPLOADERS`] threads upload blocks (and write their stubs)
//! while one thread commits the blocks already uploaded, per entry in batches (one
//! directory sync and one index commit for all the blocks that finished meanwhile). One
//! block at a time, each paid its upload and then its syncs, and the store sat idle
//! during the syncs; with several in flight the store and the disk both stay busy.
//!
//! With a `compression` target the window goes through the compress stream first, whose
//! recompressed blocks are uploaded as they are written instead of being synced and
//! committed locally (one pass); what it leaves local — blocks already at the target,
//! groups it merged, blocks that changed meanwhile — is then handed over as it is.
//!
//! A block whose hand-over failed waits before its next attempt (30 s, doubling up to an
//! hour, kept across restarts in the pending operations), so a failing remote or block is
//! never retried in a loop — with a `compression` target its whole entry waits, since its
//! blocks would otherwise be recompressed again; a remote that cannot be reached stops the
//! run: no new upload starts, and the ones under way finish.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, select};

use super::Bucket;
use crate::error::{Error, ErrorKind, Result};
use crate::storage::compress::{
    CompressPool, CompressRequest, CompressStats, CompressWindow, Finished, FinishedBlock,
    commit_in_place,
};
use crate::storage::entry::{Entry, Outgoing, TierStep, Uploaded};
use crate::storage::format::codec::Codec;
use crate::storage::format::index::BlockEntry;
use crate::storage::remote::manifest::EntryBlocks;
use crate::storage::remote::pending::{Pending, PendingOp, backoff_name};

/// The first wait after a failed hand-over; doubled per failure in a row.
const FIRST_BACKOFF: Duration = Duration::from_secs(30);
/// The longest wait between attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(3600);
/// Blocks uploading at once.
pub const UPLOADERS: usize = 4;
/// Uploaded blocks committed together at most (more wait for the next commit).
const COMMIT_BATCH: usize = 32;

/// What a tier run did (or, dry, would do).
#[derive(Debug, Clone, Default)]
pub struct TierStats {
    /// Local blocks moved (a recompressed block that joined several counts them all).
    pub blocks: u64,
    /// Their records.
    pub records: u64,
    /// Bytes uploaded.
    pub bytes: u64,
    /// The moved blocks' local bytes before.
    pub bytes_before: u64,
    /// Bytes recompression saved (on the way out, or merging blocks locally first).
    pub bytes_saved: u64,
    /// Blocks that changed or went away meanwhile.
    pub skipped: u64,
    /// Blocks waiting out a backoff after failed attempts.
    pub backed_off: u64,
    /// Hand-overs that failed.
    pub failed: u64,
    /// The first failure, the run's error when nothing moved.
    pub first_error: Option<Error>,
}

impl TierStats {
    /// Adds another pass's statistics (the first error stays the first).
    pub fn add(&mut self, other: TierStats) {
        self.blocks += other.blocks;
        self.records += other.records;
        self.bytes += other.bytes;
        self.bytes_before += other.bytes_before;
        self.bytes_saved += other.bytes_saved;
        self.skipped += other.skipped;
        self.backed_off += other.backed_off;
        self.failed += other.failed;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }
}

/// Where a tier run sends blocks.
#[derive(Clone, Copy)]
pub struct TierTarget<'a> {
    /// The remote's name.
    pub remote: &'a str,
    /// A target the blocks of a weaker codec are recompressed to as they go, and the
    /// pool that encodes them.
    pub compression: Option<(Codec, &'a CompressPool)>,
}

/// What a hand-over moves: a local block as it is, or a block the compress stream wrote
/// in place of local ones.
enum Work {
    Local(BlockEntry),
    Recompressed(Finished),
}

/// A block to hand over, and its failures in a row so far.
struct Job {
    entry: Arc<Entry>,
    work: Work,
    failures: u32,
}

impl Job {
    /// The local blocks it moves.
    fn blocks(&self) -> &[BlockEntry] {
        match &self.work {
            Work::Local(b) => std::slice::from_ref(b),
            Work::Recompressed(f) => &f.old,
        }
    }
}

/// A tier run's request: which blocks, where to, and what it tells its caller.
/// [`TierRequest::new`] gives the common case (every entry, from the oldest record, not
/// a dry run, never cancelled, nobody told); the fields change the rest.
#[derive(Clone, Copy)]
pub struct TierRequest<'a> {
    /// The entries (patterns as a policy's); empty: every entry.
    pub entries: &'a [String],
    /// The window's start (µs, inclusive).
    pub start: u64,
    /// The window's stop (µs, exclusive): a block moves when all its records lie before it.
    pub stop: u64,
    /// Where the blocks go.
    pub target: TierTarget<'a>,
    /// Count what would move, move nothing.
    pub dry_run: bool,
    /// Asked before each upload starts.
    pub cancel: &'a dyn Fn() -> bool,
    /// Told the local blocks and bytes each hand-over moved (or would move).
    pub step: &'a (dyn Fn(u64, u64) + Sync),
    /// Told each step of each hand-over, from the uploading threads too.
    pub on_step: &'a (dyn Fn(TierStep) + Sync),
}

impl<'a> TierRequest<'a> {
    /// Every block of every entry before `stop` to `target`, for real, uncancelled, with
    /// nobody told.
    pub fn new(stop: u64, target: TierTarget<'a>) -> TierRequest<'a> {
        TierRequest {
            entries: &[],
            start: 0,
            stop,
            target,
            dry_run: false,
            cancel: &|| false,
            step: &|_, _| {},
            on_step: &|_| {},
        }
    }
}

/// How a hand-over runs: where it goes, what it reports, when it stops.
struct Run<'a> {
    out: Outgoing<'a>,
    /// Told the local blocks and bytes each hand-over moved (a progress bar's steps).
    step: &'a (dyn Fn(u64, u64) + Sync),
    /// Raised when the run stops early (the compress stream feeding it stops too).
    stop: &'a AtomicBool,
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

impl Bucket {
    /// Moves (or with `dry_run` counts) the local blocks of the request's entries whose
    /// records all lie in its window to its target (see [`TierRequest`]).
    ///
    /// What a run moved is published at once for replicas that follow the remote
    /// (`storage/remote/manifest.rs`).
    pub fn tier_blocks(&self, request: &TierRequest) -> Result<TierStats> {
        let stats = self.move_blocks(request)?;
        if !request.dry_run && stats.blocks > 0 {
            self.publish_manifests(&self.select_entries(request.entries)?);
        }
        Ok(stats)
    }

    /// Publishes the manifests of `entries` on the remotes that publish them, for
    /// replicas following the remote (`storage/remote/manifest.rs`); returns the keys
    /// that are current. An entry whose blocks cannot be listed is logged and skipped.
    pub(crate) fn publish_manifests(&self, entries: &[Arc<Entry>]) -> HashSet<String> {
        let listed: Vec<EntryBlocks> = entries
            .iter()
            .filter_map(|entry| match entry.blocks_and_first_logged() {
                Ok((blocks, first_logged)) => Some(EntryBlocks {
                    name: entry.name().to_string(),
                    dir: entry.dir().to_path_buf(),
                    blocks,
                    first_logged,
                }),
                Err(e) => {
                    let (bucket, name) = (self.name(), entry.name());
                    log::warn!("remote manifest of {bucket}/{name} not published: {e}");
                    None
                }
            })
            .collect();
        let remotes = &self.ctx.remotes;
        remotes
            .publisher()
            .publish(self.name(), &self.settings(), &listed, remotes)
    }

    fn move_blocks(&self, request: &TierRequest) -> Result<TierStats> {
        let TierRequest {
            entries,
            start,
            stop,
            target,
            dry_run,
            cancel,
            step,
            on_step,
        } = *request;
        let remotes = self.ctx.remotes.clone();
        let remote = remotes.get(target.remote).cloned().ok_or_else(|| {
            Error::unprocessable(format!(
                "remote '{}' is not configured on this server",
                target.remote
            ))
        })?;
        let pending = remotes
            .pending()
            .ok_or_else(|| Error::internal("a remote is configured without its journal"))?;
        if !dry_run {
            // A full log waiting for its background seal holds records as old as a
            // block's: sealed first, so a run moves what its window says however far the
            // background thread has got.
            for entry in self.select_entries(entries)? {
                entry.seal_all()?;
            }
        }
        let mut stats = TierStats::default();
        let (jobs, ready) = self.tier_jobs(entries, start, stop, pending, dry_run, &mut stats)?;
        if dry_run {
            for job in &jobs {
                let b = &job.blocks()[0];
                stats.blocks += 1;
                stats.records += b.live_records();
                stats.bytes += b.size;
                stats.bytes_before += b.size;
                step(1, b.size);
            }
            return Ok(stats);
        }
        let stopped = AtomicBool::new(false);
        let run = Run {
            out: Outgoing {
                remote: &remote,
                pending,
                step: on_step,
            },
            step,
            stop: &stopped,
        };
        let Some((codec, pool)) = target.compression else {
            let (tx, rx) = crossbeam_channel::unbounded();
            for job in jobs {
                let _ = tx.send(job);
            }
            drop(tx);
            self.hand_over(rx, Some, &run, cancel, &mut stats);
            return Ok(stats);
        };
        if ready.is_empty() {
            return Ok(stats);
        }
        // One pass: the compress stream's blocks are uploaded as they are written.
        let shared = Mutex::new(TierStats::default());
        let sink = |finished: Receiver<FinishedBlock>, stop: &AtomicBool| {
            let run = Run {
                out: run.out,
                step: run.step,
                stop,
            };
            let mut stats = shared.lock().unwrap_or_else(|p| p.into_inner());
            let to_job = |(entry, finished, _file): FinishedBlock| match finished.path {
                Some(_) => Some(Job {
                    entry,
                    work: Work::Recompressed(finished),
                    failures: 0,
                }),
                None => {
                    // No frame changed: the block keeps its file and goes as it is below.
                    if let Err(e) = commit_in_place(&entry, finished) {
                        log::warn!("{e}");
                    }
                    None
                }
            };
            // The stream asks `cancel` itself, and ends the source when it stops.
            self.hand_over(finished.clone(), to_job, &run, &|| false, &mut stats);
            // What the stream still sends once the run stopped is not uploaded.
            for (entry, finished, _) in finished {
                finished.discard(&entry);
            }
            Ok(CompressStats {
                blocks: stats.blocks,
                records: stats.records,
                bytes_before: stats.bytes_before,
                bytes_after: stats.bytes,
                ..Default::default()
            })
        };
        let compressed = self.compress_into(
            &CompressRequest {
                cancel: &|| cancel() || stopped.load(Ordering::Relaxed),
                ..CompressRequest::new(CompressWindow::new(&ready, start..stop, codec), pool)
            },
            &sink,
        );
        let backed_off = stats.backed_off;
        stats = shared.into_inner().unwrap_or_else(|p| p.into_inner());
        stats.backed_off += backed_off;
        stats.bytes_saved = compressed
            .as_ref()
            .map_or(0, |c| c.bytes_before.saturating_sub(c.bytes_after));
        compressed?;
        // A remote that could not be reached stopped the stream's uploads: the blocks
        // left local would fail the same way.
        let unreachable = stats
            .first_error
            .as_ref()
            .is_some_and(|e| e.kind() == ErrorKind::Unavailable);
        if unreachable || stopped.load(Ordering::Relaxed) || cancel() {
            return Ok(stats);
        }
        // What is still local goes as it is.
        let mut rest = TierStats::default();
        let (jobs, _) = self.tier_jobs(&ready, start, stop, pending, false, &mut rest)?;
        let (tx, rx) = crossbeam_channel::unbounded();
        for job in jobs {
            let _ = tx.send(job);
        }
        drop(tx);
        self.hand_over(rx, Some, &run, cancel, &mut rest);
        stats.add(rest);
        Ok(stats)
    }

    /// The local blocks of the window in the selected entries, each as a job, minus those
    /// waiting out a backoff (counted); and the names of the entries with no block
    /// waiting (those a run with a `compression` target recompresses).
    fn tier_jobs(
        &self,
        entries: &[String],
        start: u64,
        stop: u64,
        pending: &Pending,
        dry_run: bool,
        stats: &mut TierStats,
    ) -> Result<(Vec<Job>, Vec<String>)> {
        let (mut jobs, mut ready) = (Vec::new(), Vec::new());
        for entry in self.select_entries(entries)? {
            let mut waiting = false;
            for b in entry
                .sealed_blocks()?
                .into_iter()
                .filter(|b| b.first_ts >= start && b.last_ts < stop && b.remote.is_none())
            {
                let backoff = backoff_name(self.name(), entry.name(), b.seq);
                let failures = match pending.lock().get(&backoff) {
                    Some(PendingOp::Backoff {
                        failures,
                        not_before_us,
                    }) if !dry_run => {
                        if *not_before_us > now_us() {
                            stats.backed_off += 1;
                            waiting = true;
                            continue;
                        }
                        *failures
                    }
                    _ => 0,
                };
                jobs.push(Job {
                    entry: entry.clone(),
                    work: Work::Local(b),
                    failures,
                });
            }
            if !waiting {
                ready.push(entry.name().to_string());
            }
        }
        Ok((jobs, ready))
    }

    /// Runs the hand-overs of the jobs `source` gives (through `to_job`) until it ends or
    /// the run stops: uploads on [`UPLOADERS`] threads, commits on this one.
    fn hand_over<T>(
        &self,
        source: Receiver<T>,
        to_job: impl Fn(T) -> Option<Job>,
        run: &Run,
        cancel: &dyn Fn() -> bool,
        stats: &mut TierStats,
    ) {
        std::thread::scope(|scope| {
            let (job_tx, job_rx) = crossbeam_channel::unbounded::<Job>();
            let (done_tx, done_rx) = crossbeam_channel::unbounded();
            for _ in 0..UPLOADERS {
                let (job_rx, done_tx) = (job_rx.clone(), done_tx.clone());
                let out = &run.out;
                let stop = run.stop;
                scope.spawn(move || {
                    for job in job_rx {
                        let result = match &job.work {
                            // Stopped meanwhile: no new upload starts.
                            Work::Recompressed(f) if stop.load(Ordering::Relaxed) => {
                                job.entry.drop_recompressed(f.path.as_deref());
                                Ok(None)
                            }
                            _ if stop.load(Ordering::Relaxed) => Ok(None),
                            Work::Local(b) => job.entry.upload_block(b, out),
                            Work::Recompressed(f) => job.entry.upload_recompressed(
                                &f.old,
                                &f.new,
                                f.path.as_deref(),
                                out,
                            ),
                        };
                        if result
                            .as_ref()
                            .is_err_and(|e| e.kind() == ErrorKind::Unavailable)
                        {
                            // The others would fail the same way: none starts another.
                            stop.store(true, Ordering::Relaxed);
                        }
                        if done_tx.send((job, result)).is_err() {
                            break;
                        }
                    }
                });
            }
            drop((job_rx, done_tx));
            let (mut in_flight, mut source_done) = (0, false);
            let mut ready: Vec<(Job, Uploaded)> = Vec::new();
            loop {
                let stopping = run.stop.load(Ordering::Relaxed);
                // One job waits behind each upload, so no uploader idles while this
                // thread commits.
                let take = !stopping && !source_done && in_flight < 2 * UPLOADERS;
                if !take && in_flight == 0 {
                    break;
                }
                if take && cancel() {
                    run.stop.store(true, Ordering::Relaxed);
                    continue;
                }
                let done = if take {
                    select! {
                        recv(source) -> next => {
                            match next {
                                Ok(next) => {
                                    if let Some(job) = to_job(next) {
                                        let _ = job_tx.send(job);
                                        in_flight += 1;
                                    }
                                }
                                Err(_) => source_done = true,
                            }
                            continue;
                        }
                        recv(done_rx) -> done => done,
                    }
                } else {
                    done_rx.recv()
                };
                let Ok((job, result)) = done else {
                    break; // every uploader is gone
                };
                in_flight -= 1;
                match result {
                    Ok(Some(uploaded)) => ready.push((job, uploaded)),
                    Ok(None) => stats.skipped += job.blocks().len() as u64,
                    Err(e) => {
                        if self.failed(&job, e, run.out.pending, stats) {
                            run.stop.store(true, Ordering::Relaxed);
                        }
                    }
                }
                // Commit what is uploaded once nothing else has finished meanwhile, so a
                // batch takes whatever finished during the previous commit.
                if !ready.is_empty()
                    && (done_rx.is_empty() || ready.len() >= COMMIT_BATCH || in_flight == 0)
                    && self.commit_ready(&mut ready, run, stats)
                {
                    run.stop.store(true, Ordering::Relaxed);
                }
            }
            drop(job_tx);
        });
    }

    /// Commits the uploaded blocks per entry; returns whether a commit failed (the run
    /// then stops: the local disk is in trouble).
    fn commit_ready(
        &self,
        ready: &mut Vec<(Job, Uploaded)>,
        run: &Run,
        stats: &mut TierStats,
    ) -> bool {
        let mut failed = false;
        while let Some((first, _)) = ready.first() {
            let entry = first.entry.clone();
            let (batch, rest): (Vec<_>, Vec<_>) = std::mem::take(ready)
                .into_iter()
                .partition(|(job, _)| Arc::ptr_eq(&job.entry, &entry));
            *ready = rest;
            let (jobs, uploads): (Vec<Job>, Vec<Uploaded>) = batch.into_iter().unzip();
            match entry.commit_tiered(&uploads, &run.out) {
                Ok(moved) => {
                    for ((job, u), moved) in jobs.iter().zip(&uploads).zip(moved) {
                        if !moved {
                            stats.skipped += u.old.len() as u64;
                            continue;
                        }
                        stats.blocks += u.old.len() as u64;
                        stats.records += u.old.iter().map(BlockEntry::live_records).sum::<u64>();
                        stats.bytes += u.bytes;
                        let before = u.old.iter().map(|b| b.size).sum::<u64>();
                        stats.bytes_before += before;
                        (run.step)(u.old.len() as u64, before);
                        if job.failures > 0 {
                            let backoff = backoff_name(self.name(), entry.name(), u.old[0].seq);
                            if let Err(e) = run.out.pending.remove(&backoff) {
                                log::warn!("{e}");
                            }
                        }
                    }
                }
                Err(e) => {
                    for job in &jobs {
                        self.failed(job, e.clone(), run.out.pending, stats);
                    }
                    failed = true;
                }
            }
        }
        failed
    }

    /// Records a failed hand-over and the backoff of its blocks; returns whether the run
    /// should stop (the remote is away: the other blocks would fail the same way).
    fn failed(&self, job: &Job, e: Error, pending: &Pending, stats: &mut TierStats) -> bool {
        let failures = job.failures + 1;
        let wait = FIRST_BACKOFF
            .saturating_mul(1 << (failures - 1).min(16))
            .min(MAX_BACKOFF);
        log::warn!(
            "bucket '{}': tiering block {} of entry '{}' failed ({e}); attempt {failures}, the next not before {} s",
            self.name(),
            job.blocks()[0].first_ts,
            job.entry.name(),
            wait.as_secs()
        );
        let mut recorded = Ok(());
        for b in job.blocks() {
            let backoff = backoff_name(self.name(), job.entry.name(), b.seq);
            recorded = recorded.and(pending.put(
                &backoff,
                PendingOp::Backoff {
                    failures,
                    not_before_us: now_us() + wait.as_micros() as u64,
                },
            ));
        }
        stats.failed += 1;
        let unreachable = e.kind() == ErrorKind::Unavailable;
        stats.first_error.get_or_insert(e);
        match recorded {
            Ok(()) => unreachable,
            Err(e) => {
                // Without its backoff the block would be retried at once: stop the run.
                log::warn!("{e}");
                true
            }
        }
    }
}
