//! `halflife serve`: its options (each with its environment variable) and the run.

use std::path::PathBuf;

use clap::Args;

use halflife::server::auth::TrustedProxies;
use halflife::server::queries::QueryLimits;
use halflife::server::{InstanceRole, Limits, Provisioning, Server, ServerConfig};
use halflife::storage::priority::BackgroundPriority;
use halflife::storage::{CompressPool, SyncMode};
use halflife::{Config, Error, Result};

use crate::{micros, positive_duration};

/// Options of `halflife serve`.
#[derive(Args)]
pub(crate) struct ServeArgs {
    /// The data directory (created when missing).
    #[arg(long, env = "RS_DATA_PATH", default_value = "./data")]
    data_path: PathBuf,
    /// Address to listen on. One other than loopback needs authentication (RS_API_TOKEN,
    /// RS_INIT_API_TOKEN or a provisioned token) or RS_DISABLE_AUTH=true: the start is
    /// refused rather than serve the network open to anyone.
    #[arg(long, env = "RS_HOST", default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0: any free port; the log says which).
    #[arg(long, env = "RS_PORT", default_value_t = 8383)]
    port: u16,
    /// Name of this instance (in /info and in lifecycle event entries); trimmed. Unset or
    /// blank: the host name (`unknown` when it cannot be read), as ReductStore does.
    #[arg(long, env = "RS_INSTANCE_NAME")]
    instance_name: Option<String>,
    /// STANDALONE, PRIMARY, SECONDARY or REPLICA (read-only: changes get 403). A PRIMARY
    /// and a SECONDARY share one data directory: the one holding its lease serves, the
    /// other answers 503 naming it (`/alive` 200) and takes over once the lease runs out.
    #[arg(long, env = "RS_INSTANCE_ROLE", default_value = "STANDALONE")]
    instance_role: InstanceRole,
    #[command(flatten)]
    lease: crate::serve_ha::LeaseArgs,
    #[command(flatten)]
    replica: crate::serve_ha::ReplicaArgs,
    /// Serve `GET /metrics` (Prometheus) without a token even when authentication is on
    /// (true/false, yes/no, 1/0); otherwise any valid token may read it.
    #[arg(long, env = "RS_METRICS_PUBLIC", default_value = "false", value_parser = clap::builder::BoolishValueParser::new(), action = clap::ArgAction::Set)]
    metrics_public: bool,
    /// Serve the web console at /ui/ (and redirect / there) on the API's port
    /// (true/false).
    #[arg(long, env = "RS_WEB_CONSOLE", default_value = "true", value_parser = clap::builder::BoolishValueParser::new(), action = clap::ArgAction::Set)]
    web_console: bool,
    /// Proxies whose `Forwarded` / `X-Forwarded-For` headers name the client (for a
    /// token's `ip_allowlist`): comma-separated addresses or CIDR blocks. The client is
    /// the nearest untrusted hop, read from the right. Empty (the default): forwarding
    /// headers are ignored and the allowlist compares the connection's own peer.
    #[arg(long, env = "RS_TRUSTED_PROXIES", default_value = "", value_parser = TrustedProxies::parse)]
    trusted_proxies: TrustedProxies,
    /// Origins a browser application may call the API from: comma-separated, compared
    /// exactly (`https://console.example:8080`), or `*` for any. Listed origins get
    /// `Access-Control-Allow-Origin` on every answer, and `OPTIONS` preflights on any path
    /// are answered without a token. Empty (the default): no cross-origin calls.
    #[arg(long, env = "RS_CORS_ALLOW_ORIGIN", default_value = "")]
    cors_allow_origin: String,
    /// Where clients reach this server (e.g. `https://store.example/`, behind a proxy): the
    /// base of the query links `POST /api/v1/links/{file}` makes. Unset: the listening
    /// address, `http://<host>:<port>/`.
    #[arg(long, env = "RS_PUBLIC_URL")]
    public_url: Option<String>,
    /// No authentication at all (true/false), even with RS_API_TOKEN or provisioned
    /// tokens set, as ReductStore's RS_DISABLE_AUTH.
    #[arg(long, env = "RS_DISABLE_AUTH", default_value = "false", value_parser = clap::builder::BoolishValueParser::new(), action = clap::ArgAction::Set)]
    disable_auth: bool,
    /// Where the API lives, as ReductStore's base path: with `/reduct`, the API is under
    /// `/reduct/api/v1/` and other paths are answered 404.
    #[arg(long, env = "RS_API_BASE_PATH", default_value = "/")]
    api_base_path: String,
    /// Serve HTTPS with this PEM certificate chain (with --cert-key-path), on the same
    /// port. A certificate or key that cannot be used stops the start.
    #[arg(long, env = "RS_CERT_PATH", requires = "cert_key_path")]
    cert_path: Option<PathBuf>,
    /// The PEM private key of --cert-path.
    #[arg(long, env = "RS_CERT_KEY_PATH", requires = "cert_path")]
    cert_key_path: Option<PathBuf>,
    /// Write events into the `$system` bucket (true/false): lifecycle runs (and policy
    /// progress), the audit of authenticated calls, API usage every minute and log
    /// messages. Off: `$system` is never written, and policies do not keep progress.
    #[arg(long, env = "RS_SYSTEM_EVENTS_ENABLED", default_value = "true", value_parser = clap::builder::BoolishValueParser::new(), action = clap::ArgAction::Set)]
    system_events: bool,
    /// Log messages at or above this level become `logs/<instance>/messages` events in
    /// `$system`: TRACE, DEBUG, INFO, WARN, ERROR or OFF.
    #[arg(long, env = "RS_SYSTEM_EVENTS_LOG_LEVEL", default_value = "WARN", value_parser = halflife::server::trail::logs::parse_level)]
    system_events_log_level: log::LevelFilter,
    /// FIFO quota of `$system` in bytes (`10GB`, `512MiB`; 0: none), applied when it is
    /// created and at every start: its oldest events go first.
    #[arg(long, env = "RS_SYSTEM_EVENTS_QUOTA_SIZE", default_value = "10GB", value_parser = halflife::server::provision::parse_byte_size)]
    system_events_quota_size: u64,
    /// Cap on the bytes all buckets take on the local disk together (`100GB`, `512MiB`;
    /// unset or 0: none). A write that would pass it is refused with 507, as on a full disk;
    /// buckets' own quotas (a FIFO one dropping its oldest blocks) act first.
    #[arg(long, env = "RS_ENGINE_MAX_STORAGE_SIZE", value_parser = halflife::server::provision::parse_byte_size)]
    engine_max_storage_size: Option<u64>,
    /// Turns authentication on: this value is the full-access `init-token`, and every
    /// request needs `Authorization: Bearer <token>` of it or of a token created over the
    /// API (`/tokens`). Empty: no authentication.
    #[arg(long, env = "RS_API_TOKEN", hide_env_values = true)]
    api_token: Option<String>,
    /// Turns authentication on with a full-access `init-token` of this value created once
    /// (stored: it can then be rotated or removed over the API), as ReductStore's
    /// RS_INIT_API_TOKEN. Not together with --api-token.
    #[arg(long, env = "RS_INIT_API_TOKEN", hide_env_values = true)]
    init_api_token: Option<String>,
    /// HTTP handler threads (connections served at once).
    #[arg(long, env = "RS_HTTP_THREADS", default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..4096))]
    http_threads: u64,
    /// How long a kept-alive connection may wait for its next request before it is
    /// closed. Idle connections cost no thread (they wait in the poller), so they are kept
    /// for minutes, as ReductStore keeps them.
    #[arg(long, env = "RS_HTTP_IDLE_TIMEOUT", default_value = "5m", value_parser = positive_duration)]
    http_idle_timeout: std::time::Duration,
    /// How long the whole head of a request (request line and headers) may take to
    /// arrive, from its first byte; slower clients get 408 and are disconnected.
    #[arg(long, env = "RS_HTTP_HEAD_TIMEOUT", default_value = "10s", value_parser = positive_duration)]
    http_head_timeout: std::time::Duration,
    /// How long a request body may stall (no bytes arriving) before the request fails
    /// with 408 and the connection closes.
    #[arg(long, env = "RS_HTTP_BODY_TIMEOUT", default_value = "30s", value_parser = positive_duration)]
    http_body_timeout: std::time::Duration,
    /// How long a whole request body may take to arrive, from the end of its head, however
    /// steadily it trickles; 408 past it.
    #[arg(long, env = "RS_HTTP_BODY_DEADLINE", default_value = "10m", value_parser = positive_duration)]
    http_body_deadline: std::time::Duration,
    /// Bytes of one request body gathered by the connection poller (costing no thread while
    /// it arrives) before a handler thread takes the request; the rest of a larger body is
    /// read from the socket by one of at most half the handler threads.
    #[arg(long, env = "RS_HTTP_BODY_BUFFER", default_value_t = halflife::server::http::DEFAULT_BODY_BUFFER as u64, value_parser = clap::value_parser!(u64).range(1..))]
    http_body_buffer: u64,
    /// Bytes all request bodies being gathered may hold together; past it, bodies are read
    /// from the socket by handler threads instead.
    #[arg(long, env = "RS_HTTP_BODY_BUFFER_TOTAL", default_value_t = halflife::server::http::DEFAULT_BODY_BUFFER_TOTAL as u64, value_parser = clap::value_parser!(u64).range(1..))]
    http_body_buffer_total: u64,
    /// Open connections at most; when reached, the connection idle the longest is closed
    /// to admit a new one (503 when none is idle).
    #[arg(long, env = "RS_HTTP_MAX_CONNECTIONS", default_value_t = halflife::server::http::DEFAULT_MAX_CONNECTIONS as u64, value_parser = clap::value_parser!(u64).range(1..))]
    http_max_connections: u64,
    /// Open connections one client address may hold (trusted proxies are not counted:
    /// their clients share their address); past it, new connections get 429.
    #[arg(long, env = "RS_HTTP_MAX_CONNECTIONS_PER_CLIENT", default_value_t = halflife::server::http::DEFAULT_MAX_CONNECTIONS_PER_CLIENT as u64, value_parser = clap::value_parser!(u64).range(1..))]
    http_max_connections_per_client: u64,
    /// Largest request body in bytes (a record, a batch, a chunked upload); larger ones
    /// get 413 before any byte of them is read.
    #[arg(long, env = "RS_MAX_BODY_SIZE", default_value_t = halflife::server::http::DEFAULT_MAX_BODY_SIZE, value_parser = clap::value_parser!(u64).range(1..))]
    max_body_size: u64,
    /// Queries open at once at most (each holds an iterator and the blocks it reads until
    /// it is read to the end or expires); past it, new queries get 429.
    #[arg(long, env = "RS_MAX_OPEN_QUERIES", default_value_t = halflife::server::queries::DEFAULT_MAX_OPEN_QUERIES as u64, value_parser = clap::value_parser!(u64).range(1..))]
    max_open_queries: u64,
    /// Queries one client may hold open at once (one token with authentication on, one
    /// client address without), so one client cannot take every slot; past it, that
    /// client's new queries get 429.
    #[arg(long, env = "RS_MAX_OPEN_QUERIES_PER_TOKEN", default_value_t = halflife::server::queries::DEFAULT_MAX_OPEN_QUERIES_PER_TOKEN as u64, value_parser = clap::value_parser!(u64).range(1..))]
    max_open_queries_per_token: u64,
    /// Logs (open, late and edit logs) holding a file descriptor at once; the others are
    /// opened again when next used, so the number of entries and edited blocks does not
    /// set the number of open files. Keep it well under the process's descriptor limit
    /// less the connections (the soft limit is raised to the hard one at start).
    #[arg(long, env = "RS_MAX_OPEN_LOG_FILES", default_value_t = halflife::storage::sync::open_files::DEFAULT_OPEN_FILE_LIMIT as u64, value_parser = clap::value_parser!(u64).range(1..))]
    max_open_log_files: u64,
    /// Sealed blocks kept mapped with their record tables parsed, store-wide: what queries
    /// stream from (each holds its parsed table and its mapping). See also
    /// --block-cache-size.
    #[arg(long, env = "RS_BLOCK_CACHE", default_value_t = halflife::config::DEFAULT_BLOCK_CACHE as u64, value_parser = clap::value_parser!(u64).range(1..))]
    block_cache: u64,
    /// Memory the caches take together, split over them: half to the blocks' lookups,
    /// three eighths to parsed blocks, an eighth to decoded frames (each of
    /// --lookup-cache, --block-cache-size and --frame-cache, when given, sets its own share
    /// instead). The rest of the server (the open store, requests, compression) comes on
    /// top. Units: B, KB, MB, GB, KiB, MiB, GiB.
    #[arg(long, env = "RS_MEMORY_BUDGET", default_value = "128MiB", value_parser = halflife::server::provision::parse_byte_size)]
    memory_budget: u64,
    /// Memory for the parsed record tables of those blocks, store-wide (a block of 1,000
    /// records with a handful of labels each takes 0.5-1 MB): whichever of this and
    /// --block-cache is reached first evicts [default: 3/8 of --memory-budget]. Units: B,
    /// KB, MB, GB, KiB, MiB, GiB.
    #[arg(long, env = "RS_BLOCK_CACHE_SIZE", value_parser = halflife::server::provision::parse_byte_size)]
    block_cache_size: Option<u64>,
    /// Memory for the blocks' compact lookups (about 20 bytes per record, plus each
    /// distinct set of labels once a block), store-wide: reads by timestamp and the
    /// duplicate checks of writes go through them, so random reads stay as cheap as cached
    /// ones over this many records' worth of blocks (64MiB: some 3 million records whose
    /// labels repeat, 1.1 million with a label unique to each) [default: 1/2 of
    /// --memory-budget]. Units: B, KB, MB, GB, KiB, MiB, GiB.
    #[arg(long, env = "RS_LOOKUP_CACHE_SIZE", value_parser = halflife::server::provision::parse_byte_size)]
    lookup_cache: Option<u64>,
    /// Memory for decoded frames of compressed blocks kept for the next read of their
    /// block (a frame is about 1 MiB), store-wide [default: 1/8 of --memory-budget].
    #[arg(long, env = "RS_FRAME_CACHE_SIZE", value_parser = halflife::server::provision::parse_byte_size)]
    frame_cache: Option<u64>,
    /// A remote object store tier policies may move old blocks to, as NAME=URL with the
    /// URL http(s)://host:port/bucket[/prefix]; its credentials come from
    /// RS_REMOTE_<NAME>_ACCESS_KEY_ID and RS_REMOTE_<NAME>_SECRET_ACCESS_KEY_FILE, its
    /// other settings from RS_REMOTE_<NAME>_{ENDPOINT, BUCKET, PREFIX, REGION, PATH_STYLE,
    /// CA_FILE} (which can also define a remote alone). Repeatable.
    #[arg(long = "remote", value_name = "NAME=URL")]
    remote: Vec<String>,
    /// Local disk for frames of tiered blocks fetched back from their remote
    /// (<data>/.remote-cache, emptied at start; least recently used blocks dropped first).
    /// Units: B, KB, MB, GB, KiB, MiB, GiB.
    #[arg(long, env = "RS_REMOTE_CACHE_SIZE", default_value = "256MiB", value_parser = halflife::server::provision::parse_byte_size)]
    remote_cache_size: u64,
    /// Keep the fetched frames of tiered blocks in memory (anonymous files, counted in
    /// the same budget) instead of on the local disk: for a disk too slow, too small or
    /// too worn for a cache (true/false).
    #[arg(long, env = "RS_REMOTE_CACHE_IN_MEMORY", default_value = "false", value_parser = clap::builder::BoolishValueParser::new(), action = clap::ArgAction::Set)]
    remote_cache_in_memory: bool,
    /// How old an object under a remote's prefix that no index names must be before the
    /// collector deletes it (an upload a power cut interrupted may still be committing).
    #[arg(long, env = "RS_REMOTE_ORPHAN_GRACE", default_value = "1h", value_parser = positive_duration)]
    remote_orphan_grace: std::time::Duration,
    /// How often the collector lists each remote's prefix for orphans.
    #[arg(long, env = "RS_REMOTE_COLLECT_INTERVAL", default_value = "10m", value_parser = positive_duration)]
    remote_collect_interval: std::time::Duration,
    /// Most records in one batch of a query's answer (a query's `#batch_records`
    /// overrides it).
    #[arg(long, env = "RS_IO_BATCH_MAX_RECORDS", default_value = "85", value_parser = clap::value_parser!(u64).range(1..))]
    io_batch_max_records: u64,
    /// A batch stops growing once its payloads pass this size (`#batch_size`
    /// overrides it).
    #[arg(long, env = "RS_IO_BATCH_MAX_SIZE", default_value = "8MB", value_parser = halflife::server::provision::parse_byte_size)]
    io_batch_max_size: u64,
    /// A batch stops growing once its record headers pass this size
    /// (`#batch_metadata_size` overrides it).
    #[arg(long, env = "RS_IO_BATCH_MAX_METADATA_SIZE", default_value = "512KB", value_parser = halflife::server::provision::parse_byte_size)]
    io_batch_max_metadata_size: u64,
    /// Longest TTL a query may ask for; longer ones are cut to it.
    #[arg(long, env = "RS_MAX_QUERY_TTL", default_value = "1h", value_parser = positive_duration)]
    max_query_ttl: std::time::Duration,
    /// Lifecycle worker threads (policies running at once).
    #[arg(long, env = "RS_LIFECYCLE_WORKERS", default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..1024))]
    lifecycle_workers: u64,
    /// Recompression threads (default: the machine's available parallelism).
    #[arg(long, env = "RS_COMPRESS_THREADS", value_parser = clap::value_parser!(u64).range(1..256))]
    compress_threads: Option<u64>,
    /// Smallest lifecycle interval accepted (a duration such as 10m or 1s).
    #[arg(long, env = "RS_LIFECYCLE_MIN_INTERVAL", default_value = "10m", value_parser = positive_duration)]
    lifecycle_min_interval: std::time::Duration,
    /// Smallest lifecycle older_than accepted.
    #[arg(long, env = "RS_LIFECYCLE_MIN_OLDER_THAN", default_value = "1h", value_parser = positive_duration)]
    lifecycle_min_older_than: std::time::Duration,
    /// Share of a lifecycle worker a policy catching up on a backlog may use (in (0, 1]):
    /// a run that did work and is not caught up is followed by the next after a pause of
    /// its own run time × (1 / share − 1), so old data is processed at a steady rate while
    /// writes keep the rest. Caught up, a policy runs every `interval` again.
    #[arg(long, env = "RS_LIFECYCLE_CATCH_UP_SHARE", default_value_t = 0.5, value_parser = fold_share)]
    lifecycle_catch_up_share: f64,
    /// Most records one lifecycle run takes on after its progress (whole blocks); the
    /// rest waits for the next run, so a dense window cannot make one huge run.
    #[arg(long, env = "RS_LIFECYCLE_MAX_RECORDS_PER_RUN", default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    lifecycle_max_records_per_run: u64,
    /// How lifecycle runs are scheduled beside requests: idle (compress runs at
    /// SCHED_IDLE: only CPU time nothing else wants, so requests are never delayed by them
    /// and under a sustained full load compression waits; delete runs at nice 19, so they
    /// go on freeing space), low (every run at nice 19: a small share even then) or normal
    /// (as requests).
    #[arg(long, env = "RS_LIFECYCLE_PRIORITY", default_value = "idle", value_parser = lifecycle_priority)]
    lifecycle_priority: BackgroundPriority,
    /// How long a lifecycle policy may fall behind at that priority before its runs go at
    /// normal priority, beside the requests, until one catches up: behind means runs that
    /// did not catch up, or one run going on (stopped then, and started again raised;
    /// what it did stays done). A duration such as 5m; 0 never raises them (on a machine
    /// that is always busy, compression may then wait for good). The policy's info and
    /// /metrics show it (`priority_raised`).
    #[arg(long, env = "RS_LIFECYCLE_MAX_BEHIND", default_value = "5m", value_parser = crate::duration_or_zero)]
    lifecycle_max_behind: std::time::Duration,
    /// Most lifecycle policies this server holds; creating one more is refused (422).
    #[arg(long, env = "RS_LIFECYCLE_MAX_POLICIES", default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    lifecycle_max_policies: u64,
    /// Most bytes all lifecycle policy definitions may take as JSON together (a policy
    /// that would pass it is refused, 422); each `when` is also limited to 256 KiB and
    /// each policy to 256 entry patterns.
    #[arg(long, env = "RS_LIFECYCLE_MAX_DEFINITIONS_SIZE", default_value = "8MiB", value_parser = halflife::server::provision::parse_byte_size)]
    lifecycle_max_definitions_size: u64,
    /// Seconds a replication request may take. A destination that was unavailable is
    /// tried again after 1 s, doubling to a minute (its records stay in the backlog).
    #[arg(long, env = "RS_REPLICATION_TIMEOUT", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    replication_timeout: u64,
    /// Most records a replication keeps pending per entry; past it the oldest is dropped,
    /// with an ERROR naming it.
    #[arg(long, env = "RS_REPLICATION_LOG_SIZE", default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    replication_log_size: u64,
    /// Check the TLS certificate of an `https://` replication destination; false still
    /// encrypts but accepts any certificate (anyone in between can read the data).
    #[arg(long, env = "RS_REPLICATION_VERIFY_SSL", default_value = "true", value_parser = clap::builder::BoolishValueParser::new(), action = clap::ArgAction::Set)]
    replication_verify_ssl: bool,
    /// A PEM file of the CA certificates an `https://` replication destination's
    /// certificate must chain to (for a private CA or a self-signed destination); without
    /// it, Mozilla's root certificates.
    #[arg(long, env = "RS_REPLICATION_CA_PATH", value_name = "PEM")]
    replication_ca_path: Option<PathBuf>,
    /// Belated writes seal into blocks that overlap others; when more than this many
    /// blocks cover one instant, a background merge makes them disjoint (reads search
    /// every block covering a timestamp, so this bounds their cost).
    #[arg(long, env = "RS_MAX_BLOCK_OVERLAP", default_value_t = halflife::config::DEFAULT_MAX_BLOCK_OVERLAP as u64, value_parser = clap::value_parser!(u64).range(1..))]
    max_block_overlap: u64,
    /// Removed records of a sealed block are tombstones (a few bytes in its edit log)
    /// until the block is next rewritten; once this share of its records is removed, it
    /// is rewritten without them at once (a number in (0, 1]; 1 waits for the last one).
    #[arg(long, env = "RS_TOMBSTONE_FOLD_SHARE", default_value_t = halflife::config::DEFAULT_TOMBSTONE_FOLD_SHARE, value_parser = fold_share)]
    tombstone_fold_share: f64,
    /// When a change is acknowledged: `always` answers a write, batch, label update or
    /// removal only once its bytes are on stable storage (group commit: concurrent writers
    /// of a file share one fdatasync), so a power cut loses nothing acknowledged;
    /// `interval:<duration>` (e.g. interval:10ms) answers from the page cache and syncs
    /// every written file at that period, so a power cut loses at most about one period;
    /// `never` syncs only when blocks are sealed or committed (a power cut may lose the
    /// open blocks; for throw-away data and benchmarks).
    #[arg(long = "sync", env = "RS_SYNC_MODE", default_value = "always", value_parser = sync_mode)]
    sync: SyncMode,
}

/// Parses `--sync`: `always`, `never` or `interval:<duration>`.
fn sync_mode(text: &str) -> std::result::Result<SyncMode, String> {
    text.parse().map_err(|e: Error| e.message().to_string())
}

/// A share in (0, 1] (`--tombstone-fold-share`, `--lifecycle-catch-up-share`).
fn fold_share(text: &str) -> std::result::Result<f64, String> {
    let share: f64 = text
        .parse()
        .map_err(|_| format!("'{text}' is not a number"))?;
    if share > 0.0 && share <= 1.0 {
        Ok(share)
    } else {
        Err(format!("'{text}' is not in (0, 1]"))
    }
}

/// `halflife serve`: runs the server until SIGINT or SIGTERM, then shuts it down.
pub(crate) fn serve(args: ServeArgs) -> Result<()> {
    limit_allocator_arenas();
    // The variables of this command's options, from their definition: a new option is
    // never warned about, a setting nothing reads always is.
    let options: std::collections::HashSet<String> =
        <ServeArgs as clap::Args>::augment_args(clap::Command::new("serve"))
            .get_arguments()
            .filter_map(|a| a.get_env())
            .map(|e| e.to_string_lossy().into_owned())
            .collect();
    for unread in halflife::server::unsupported::unread_settings(std::env::vars(), &options) {
        log::warn!("{}", unread.warning());
    }
    match halflife::storage::sync::open_files::raise_descriptor_limit() {
        Ok((before, after)) if before != after => {
            log::info!("open file limit raised from {before} to {after} (the hard limit)")
        }
        Ok((_, after)) => log::info!("open file limit: {after}"),
        Err(e) => log::warn!("could not read or raise the open file limit: {e}"),
    }
    let mut engine = Config::new(&args.data_path);
    engine.max_open_log_files = usize::try_from(args.max_open_log_files).unwrap_or(usize::MAX);
    engine.block_cache = usize::try_from(args.block_cache).unwrap_or(usize::MAX);
    engine.set_memory_budget(args.memory_budget);
    let bytes = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
    if let Some(v) = args.block_cache_size {
        engine.block_cache_bytes = bytes(v);
    }
    if let Some(v) = args.lookup_cache {
        engine.lookup_cache_bytes = bytes(v);
    }
    if let Some(v) = args.frame_cache {
        engine.frame_cache_bytes = bytes(v);
    }
    log::info!(
        "memory budget {} MiB: lookups {} MiB, parsed blocks {} MiB, decoded frames {} MiB",
        args.memory_budget >> 20,
        engine.lookup_cache_bytes >> 20,
        engine.block_cache_bytes >> 20,
        engine.frame_cache_bytes >> 20
    );
    engine.instance_name = halflife::config::instance_name(args.instance_name.as_deref());
    let vars: std::collections::BTreeMap<String, String> = std::env::vars().collect();
    engine.remotes = halflife::storage::remote::settings::remotes_from(&args.remote, &vars)?;
    engine.remote_cache_bytes = args.remote_cache_size;
    engine.remote_cache_in_memory = args.remote_cache_in_memory;
    engine.remote_orphan_grace = args.remote_orphan_grace;
    engine.remote_collect_interval = args.remote_collect_interval;
    engine.worker_threads = args.lifecycle_workers as usize;
    engine.compress_threads = args
        .compress_threads
        .map_or_else(CompressPool::default_threads, |t| t as usize);
    engine.lifecycle_min_interval = micros(args.lifecycle_min_interval);
    engine.lifecycle_min_older_than = micros(args.lifecycle_min_older_than);
    engine.lifecycle_catch_up_share = args.lifecycle_catch_up_share;
    engine.lifecycle_max_records_per_run = args.lifecycle_max_records_per_run;
    engine.lifecycle_max_policies = args.lifecycle_max_policies as usize;
    engine.lifecycle_max_definitions_size = args.lifecycle_max_definitions_size;
    engine.lifecycle_priority = args.lifecycle_priority;
    engine.lifecycle_max_behind = Some(args.lifecycle_max_behind).filter(|d| !d.is_zero());
    engine.replication_timeout = std::time::Duration::from_secs(args.replication_timeout);
    engine.replication_log_size = usize::try_from(args.replication_log_size).unwrap_or(usize::MAX);
    engine.replication_verify_ssl = args.replication_verify_ssl;
    engine.replication_ca_path = args.replication_ca_path.clone();
    engine.max_block_overlap = usize::try_from(args.max_block_overlap).unwrap_or(usize::MAX);
    engine.tombstone_fold_share = args.tombstone_fold_share;
    engine.sync_mode = args.sync;
    engine.system_events = args.system_events;
    engine.system_events_quota = Some(args.system_events_quota_size).filter(|&q| q > 0);
    engine.max_storage_size = args.engine_max_storage_size.filter(|&m| m > 0);
    engine.replica_cache_path = args.replica.replica_cache_path.clone();
    let shares_directory = matches!(
        args.instance_role,
        InstanceRole::Primary | InstanceRole::Secondary
    ) || (args.instance_role == InstanceRole::Replica
        && args.replica.follow_remote.is_none());
    if shares_directory {
        args.lease
            .check_volume(&args.data_path, args.instance_role.as_str())?;
    }
    if args.instance_role == InstanceRole::Replica && args.replica.follow_remote.is_none() {
        // Guards the directory the writer owns: any write this process would make there
        // fails instead. (A replica that follows a remote lays out its own directory.)
        halflife::storage::fence::forbid_writes();
    }
    let forward_events = args.replica.forward_settings(args.api_token.clone())?;
    let config = ServerConfig {
        engine,
        host: args.host,
        port: args.port,
        http_threads: args.http_threads as usize,
        limits: Limits {
            idle_timeout: args.http_idle_timeout,
            head_timeout: args.http_head_timeout,
            body_timeout: args.http_body_timeout,
            max_connections: usize::try_from(args.http_max_connections).unwrap_or(usize::MAX),
            max_body_size: args.max_body_size,
            body_deadline: args.http_body_deadline,
            body_buffer: usize::try_from(args.http_body_buffer).unwrap_or(usize::MAX),
            body_buffer_total: usize::try_from(args.http_body_buffer_total).unwrap_or(usize::MAX),
            // Set by the server from its thread count.
            streaming_bodies: 1,
            max_connections_per_client: usize::try_from(args.http_max_connections_per_client)
                .unwrap_or(usize::MAX),
        },
        queries: QueryLimits {
            max_open: usize::try_from(args.max_open_queries).unwrap_or(usize::MAX),
            max_open_per_token: usize::try_from(args.max_open_queries_per_token)
                .unwrap_or(usize::MAX),
            max_ttl: args.max_query_ttl,
            batch: halflife::server::queries::BatchLimits {
                records: usize::try_from(args.io_batch_max_records).unwrap_or(usize::MAX),
                bytes: args.io_batch_max_size,
                metadata_bytes: args.io_batch_max_metadata_size,
            },
        },
        api_token: args.api_token,
        init_api_token: args.init_api_token,
        role: args.instance_role,
        metrics_public: args.metrics_public,
        web_console: args.web_console,
        trusted_proxies: args.trusted_proxies,
        cors: halflife::server::cors::Cors::parse(&args.cors_allow_origin),
        public_url: args.public_url,
        system_events_log_level: args.system_events_log_level,
        tls: args.cert_path.zip(args.cert_key_path),
        base_path: args.api_base_path,
        disable_auth: args.disable_auth,
        replica_update_interval: args.replica.replica_update_interval,
        forward_events,
        follow_remote: args.replica.follow_remote.clone(),
    };
    // Handlers are installed before any thread starts, so no signal is lost; the main
    // thread then just waits for one.
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ])
    .map_err(|e| Error::io("installing signal handlers", e))?;
    if matches!(config.role, InstanceRole::Primary | InstanceRole::Secondary) {
        return crate::serve_ha::serve_with_lease(config, args.lease.settings()?, signals);
    }
    let server = Server::start(config, Provisioning::from_env(std::env::vars()))?;
    if let Some(signal) = signals.forever().next() {
        log::info!("received signal {signal}");
    }
    server.shutdown();
    Ok(())
}

/// Parses `--lifecycle-priority` for clap (a bad one exits 2 naming it).
fn lifecycle_priority(text: &str) -> std::result::Result<BackgroundPriority, String> {
    text.parse().map_err(|e: Error| e.message().to_string())
}

/// Keeps the allocator from holding memory the caches' budget does not account for: at
/// most one heap arena per core (glibc's default is eight per core, each keeping what its
/// threads freed), and buffers of 256 KiB and more (batches, decoded frames, compression
/// buffers) mapped on their own and returned when freed (glibc's default threshold grows
/// to 32 MiB after the first such buffer is freed, and then keeps them in the heap). Must
/// run before the server's threads allocate.
fn limit_allocator_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let arenas = libc::c_int::try_from(cores.max(2)).unwrap_or(libc::c_int::MAX);
        // SAFETY: mallopt only sets allocator parameters; called before other threads
        // exist. A refusal (0) leaves glibc's defaults, which are only looser.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, arenas);
            libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 10);
        }
    }
}
