//! Engine configuration: where the data lives and the limits that shape the on-disk layout.

use std::path::PathBuf;

use crate::storage::sync::SyncMode;

/// Default raw size of a payload frame: records are grouped into frames of about this many
/// bytes, and each frame is compressed and checksummed on its own.
pub const DEFAULT_FRAME_SIZE: usize = 1 << 20;

/// Default number of sealed blocks kept memory-mapped with their record tables parsed
/// (store-wide).
pub const DEFAULT_BLOCK_CACHE: usize = 512;

/// Default memory the caches take together (`--memory-budget`): 128 MiB, split by
/// [`CacheBudgets::split`]. With the rest of a server under load (the open store, requests,
/// compression), a 10 GB store stays within 300 MiB of anonymous memory.
pub const DEFAULT_MEMORY_BUDGET: u64 = 128 << 20;

/// What each cache may take of a memory budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheBudgets {
    /// The blocks' compact lookups: half (reads by timestamp and the duplicate checks of
    /// writes; about 20 bytes a record, so 64 MiB covers some 3 million records).
    pub lookups: usize,
    /// The parsed record tables of cached blocks: three eighths (what queries stream and
    /// edits change).
    pub parsed_blocks: usize,
    /// Decoded frames kept for the next read of their block: an eighth, at least two
    /// frames' worth when the budget allows.
    pub decoded_frames: usize,
}

impl CacheBudgets {
    /// `total` bytes split over the caches: half to lookups, three eighths to parsed
    /// blocks, an eighth to decoded frames.
    pub fn split(total: u64) -> CacheBudgets {
        let total = usize::try_from(total).unwrap_or(usize::MAX);
        let eighth = total / 8;
        CacheBudgets {
            lookups: total / 2,
            parsed_blocks: eighth * 3,
            decoded_frames: eighth,
        }
    }
}

/// Default bytes of fetched remote frames kept on the local disk: 256 MiB.
pub const DEFAULT_REMOTE_CACHE_BYTES: u64 = 256 << 20;

/// Default bound on how many sealed blocks may overlap one instant before a merge runs.
pub const DEFAULT_MAX_BLOCK_OVERLAP: usize = 4;

/// Default share of tombstoned records at which a block is rewritten without them.
pub const DEFAULT_TOMBSTONE_FOLD_SHARE: f64 = 0.5;

/// Default cap on the number of lifecycle policies.
pub const DEFAULT_MAX_POLICIES: usize = 1_000;

/// Default cap on all lifecycle definitions as JSON: 8 MiB, what an edge device can hold
/// parsed (ordinary policies take a few hundred bytes each).
pub const DEFAULT_MAX_DEFINITIONS_SIZE: u64 = 8 << 20;

/// Configuration of a [`crate::storage::Store`].
#[derive(Debug, Clone)]
pub struct Config {
    /// The data directory; every bucket lives in a sub-directory of it.
    pub data_path: PathBuf,
    /// Target raw size of a payload frame in bytes (a frame holds at least one record).
    pub frame_size: usize,
    /// How many sealed blocks the store keeps mapped with their record tables parsed
    /// (what queries stream from; at least one).
    pub block_cache: usize,
    /// Bytes of memory the cached parsed blocks may take (their records and tables; the
    /// mappings are the page cache's).
    pub block_cache_bytes: usize,
    /// Bytes of the blocks' compact lookups the store keeps (reads by timestamp and
    /// duplicate checks; `storage::cache`).
    pub lookup_cache_bytes: usize,
    /// Bytes of decoded frames the store keeps for the next read of their block.
    pub frame_cache_bytes: usize,
    /// The memory budget the three above were split from (for `/metrics`; each may have
    /// been set on its own since).
    pub memory_budget: u64,
    /// The remote object stores tier policies may move blocks to.
    pub remotes: Vec<crate::storage::remote::settings::RemoteSettings>,
    /// Bytes of tiered blocks' frames kept on the local disk once fetched
    /// (`<data>/.remote-cache`).
    pub remote_cache_bytes: u64,
    /// Whether those frames are kept in memory (anonymous files) instead.
    pub remote_cache_in_memory: bool,
    /// How long an object no index names is left before the collector deletes it (an
    /// upload whose intent a power cut lost may still be committing).
    pub remote_orphan_grace: std::time::Duration,
    /// How often the collector lists the remotes for orphans.
    pub remote_collect_interval: std::time::Duration,
    /// Threads of the recompression pool; defaults to the machine's available parallelism.
    pub compress_threads: usize,
    /// How the lifecycle's workers and compression threads are scheduled beside the
    /// request handlers (default: idle, they take only CPU time nothing else wants).
    pub lifecycle_priority: crate::storage::priority::BackgroundPriority,
    /// How long a lifecycle policy may stay behind at `lifecycle_priority` (runs that do
    /// not catch up, or one run going on) before its runs go at normal priority until it
    /// catches up; `None`: never (default 5 minutes).
    pub lifecycle_max_behind: Option<std::time::Duration>,
    /// Lifecycle worker threads (runs of different policies in parallel); default 2.
    pub worker_threads: usize,
    /// Smallest lifecycle `interval` accepted, in µs (default 10 minutes).
    pub lifecycle_min_interval: i64,
    /// Smallest lifecycle `older_than` accepted, in µs (default 1 hour).
    pub lifecycle_min_older_than: i64,
    /// Share of a worker a lifecycle policy catching up on a backlog may take, in
    /// (0, 1] (default 0.5): after a run that did work and is not caught up, the next
    /// one starts after a pause as long as `run time × (1 / share − 1)`.
    pub lifecycle_catch_up_share: f64,
    /// Most records a lifecycle run takes on after its progress marker (whole blocks;
    /// default 100,000): the rest waits for the next run.
    pub lifecycle_max_records_per_run: u64,
    /// Most lifecycle policies the server holds (default [`DEFAULT_MAX_POLICIES`]): each is
    /// kept in memory, scheduled and parsed at every start.
    pub lifecycle_max_policies: usize,
    /// Most bytes all lifecycle policy definitions may take as JSON (default
    /// [`DEFAULT_MAX_DEFINITIONS_SIZE`]); each is held in memory at 2.3 to 4.7 times its
    /// size (its `when` as text, and parsed).
    pub lifecycle_max_definitions_size: u64,
    /// Write events to `$system`: a `lifecycle_run` event per run (and keep progress
    /// there), and on a server the audit, usage and log trail (`RS_SYSTEM_EVENTS_ENABLED`).
    pub system_events: bool,
    /// The directory is shared by a PRIMARY and a SECONDARY, guarded by a lease and its
    /// fence (`storage/fence.rs`): its lock file held by another process (the instance
    /// that lost the lease, paused) does not stop the one that holds the lease now.
    pub lease_guarded: bool,
    /// Open the directory as a replica (`RS_INSTANCE_ROLE=REPLICA`,
    /// `docs/high-availability.md`): without its lock, writing nothing in it (no
    /// recovery, no merges, no cache files), and following what its writer changes with
    /// [`crate::storage::Store::follow_writer`].
    pub read_only: bool,
    /// Where a replica keeps fetched remote frames (`--replica-cache-path`); in memory
    /// when `None`. Never the data directory, which a replica does not write.
    pub replica_cache_path: Option<PathBuf>,
    /// The FIFO quota of `$system` in bytes, applied when it is created and at every
    /// server start (`None`: no quota); default [`DEFAULT_SYSTEM_EVENTS_QUOTA`].
    pub system_events_quota: Option<u64>,
    /// The cap on the bytes every bucket takes on the local disk together
    /// (`RS_ENGINE_MAX_STORAGE_SIZE`; `None`: no cap): writes past it are refused, 507.
    pub max_storage_size: Option<u64>,
    /// Name of this instance in event entries (`lifecycle/<instance>/<policy>`).
    pub instance_name: String,
    /// A replication request's timeout, and the pause after its destination was
    /// unavailable (`RS_REPLICATION_TIMEOUT`, default 5 s).
    pub replication_timeout: std::time::Duration,
    /// Most records one replication backlog (one task, one entry) keeps; past it the
    /// oldest is dropped, logged and counted (`RS_REPLICATION_LOG_SIZE`, default 1,000,000).
    pub replication_log_size: usize,
    /// Check a replication destination's TLS certificate (`RS_REPLICATION_VERIFY_SSL`,
    /// default true); false encrypts without authenticating the destination.
    pub replication_verify_ssl: bool,
    /// A PEM file of the certificates a destination's must chain to, instead of Mozilla's
    /// roots (`RS_REPLICATION_CA_PATH`).
    pub replication_ca_path: Option<std::path::PathBuf>,
    /// When more sealed blocks than this overlap one instant (belated writes seal into
    /// blocks that overlap others), a background merge makes them disjoint (default 4).
    pub max_block_overlap: usize,
    /// Removed records of a sealed block are tombstones in its edit log until the block is
    /// next rewritten (compress, merge) or their share of its records reaches this
    /// fraction, when it is rewritten without them at once (default 0.5; 1.0 waits until
    /// every record is gone, when the block is dropped).
    pub tombstone_fold_share: f64,
    /// Open an entry whose index names an edit log that is missing, its blocks read as
    /// their files have them (`halflife check --repair` accepts the loss so); otherwise
    /// such an entry stays unavailable, so removals never silently come undone.
    pub accept_lost_edit_logs: bool,
    /// When appended changes reach stable storage, and so what an acknowledgement
    /// promises (default [`SyncMode::Always`]: nothing acknowledged is lost to a power cut).
    pub sync_mode: SyncMode,
    /// How many logs (open, late and edit logs) may hold a file descriptor at once; the
    /// others are opened again on their next use (default
    /// [`crate::storage::sync::open_files::DEFAULT_OPEN_FILE_LIMIT`]). The bound is the
    /// process's, set by the last store opened.
    pub max_open_log_files: usize,
}

/// The default quota of `$system`: 10 GB, as in ReductStore.
pub const DEFAULT_SYSTEM_EVENTS_QUOTA: u64 = 10_000_000_000;

impl Config {
    /// A configuration with default limits for the given data directory.
    pub fn new(data_path: impl Into<PathBuf>) -> Self {
        Config {
            data_path: data_path.into(),
            frame_size: DEFAULT_FRAME_SIZE,
            block_cache: DEFAULT_BLOCK_CACHE,
            block_cache_bytes: CacheBudgets::split(DEFAULT_MEMORY_BUDGET).parsed_blocks,
            lookup_cache_bytes: CacheBudgets::split(DEFAULT_MEMORY_BUDGET).lookups,
            frame_cache_bytes: CacheBudgets::split(DEFAULT_MEMORY_BUDGET).decoded_frames,
            memory_budget: DEFAULT_MEMORY_BUDGET,
            remotes: Vec::new(),
            remote_cache_bytes: DEFAULT_REMOTE_CACHE_BYTES,
            remote_cache_in_memory: false,
            remote_orphan_grace: std::time::Duration::from_secs(3600),
            remote_collect_interval: std::time::Duration::from_secs(600),
            compress_threads: crate::storage::compress::CompressPool::default_threads(),
            lifecycle_priority: Default::default(),
            lifecycle_max_behind: Some(std::time::Duration::from_secs(300)),
            worker_threads: 2,
            lifecycle_min_interval: 10 * 60 * 1_000_000,
            lifecycle_min_older_than: 3600 * 1_000_000,
            lifecycle_catch_up_share: 0.5,
            lifecycle_max_records_per_run: 100_000,
            lifecycle_max_policies: DEFAULT_MAX_POLICIES,
            lifecycle_max_definitions_size: DEFAULT_MAX_DEFINITIONS_SIZE,
            system_events: true,
            lease_guarded: false,
            read_only: false,
            replica_cache_path: None,
            system_events_quota: Some(DEFAULT_SYSTEM_EVENTS_QUOTA),
            max_storage_size: None,
            instance_name: "unknown".to_string(),
            replication_timeout: std::time::Duration::from_secs(5),
            replication_log_size: 1_000_000,
            replication_verify_ssl: true,
            replication_ca_path: None,
            max_block_overlap: DEFAULT_MAX_BLOCK_OVERLAP,
            tombstone_fold_share: DEFAULT_TOMBSTONE_FOLD_SHARE,
            accept_lost_edit_logs: false,
            sync_mode: SyncMode::default(),
            max_open_log_files: crate::storage::sync::open_files::DEFAULT_OPEN_FILE_LIMIT,
        }
    }
}

impl Config {
    /// Splits `total` bytes over the caches ([`CacheBudgets::split`]), replacing their
    /// budgets.
    pub fn set_memory_budget(&mut self, total: u64) {
        let budgets = CacheBudgets::split(total);
        self.block_cache_bytes = budgets.parsed_blocks;
        self.lookup_cache_bytes = budgets.lookups;
        self.frame_cache_bytes = budgets.decoded_frames;
        self.memory_budget = total;
    }
}

impl Default for Config {
    fn default() -> Self {
        Config::new("./data")
    }
}

/// The instance name a server runs under: `configured` trimmed, or when it is unset or
/// blank the host name, as ReductStore does (`unknown` when that cannot be read).
pub fn instance_name(configured: Option<&str>) -> String {
    configured
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(str::to_string)
        .or_else(host_name)
        .unwrap_or_else(|| "unknown".to_string())
}

/// This machine's host name, if it can be read.
fn host_name() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that much.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = String::from_utf8_lossy(&buf[..end]).trim().to_string();
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::instance_name;

    #[test]
    fn the_instance_name_is_trimmed_and_blank_means_the_host_name() {
        assert_eq!(instance_name(Some("  edge-7 ")), "edge-7");
        let host = instance_name(None);
        assert!(!host.is_empty());
        assert_eq!(instance_name(Some("   ")), host);
    }
}
