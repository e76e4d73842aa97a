//! The `halflife` command line.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use halflife::duration::parse_duration;
use halflife::maintenance::{self, Action, Job, Progress};
use halflife::report;
use halflife::server::auth::TrustedProxies;
use halflife::server::queries::QueryLimits;
use halflife::server::{InstanceRole, Limits, Provisioning, Server, ServerConfig};
use halflife::storage::{Codec, CompressPool, Store, SyncMode};
use halflife::{Config, Error, Result};

/// halflife: time-stamped blob storage whose data ages under lifecycle policies.
#[derive(Parser)]
#[command(version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the HTTP server (the ReductStore API) on a data directory.
    ///
    /// Every option can also be set by the environment variable shown. Buckets can be
    /// provisioned with RS_BUCKET_<ID>_NAME, _QUOTA_TYPE (NONE, FIFO, HARD), _QUOTA_SIZE
    /// and _MAX_BLOCK_SIZE (bytes, or 64MB, 1GiB...) and _MAX_BLOCK_RECORDS; they are
    /// created or updated at start and cannot be removed or changed over HTTP. Lifecycle
    /// policies can be provisioned with RS_LIFECYCLE_<ID>_NAME, _TYPE, _BUCKET, _ENTRIES
    /// (comma-separated), _OLDER_THAN, _INTERVAL, _WHEN (JSON), _PROCESSING_INTERVAL and
    /// _MODE, after the buckets; an incomplete or invalid bucket or policy is logged and
    /// skipped. SIGINT or SIGTERM stop
    /// the server gracefully. The log level is RS_LOG_LEVEL (TRACE, DEBUG, INFO, WARNING or
    /// ERROR, any case; anything else logs at INFO with a warning).
    Serve(Box<ServeArgs>),
    /// Recompress the sealed blocks of a bucket whose records are all older than a
    /// duration (the server must be stopped).
    ///
    /// A progress bar (bytes and time left) advances per block when stderr is a terminal.
    /// Ctrl-C stops the run cleanly: blocks already written are committed, the rest stay
    /// as they were, and the summary says "cancelled" (exit status 130). A dry run
    /// predicts the size after by compressing a sample of the frames (at most 64 MiB read).
    Compress {
        #[command(flatten)]
        common: MaintenanceArgs,
        /// Target codec: lz4, zstd (level 3) or zstd-<1..22>.
        #[arg(long, default_value = "zstd", value_parser = target_codec)]
        target: Codec,
        /// Compression threads (default: the machine's available parallelism).
        #[arg(long, env = "RS_COMPRESS_THREADS", value_parser = clap::value_parser!(u64).range(1..256))]
        threads: Option<u64>,
    },
    /// Delete the records of a bucket older than a duration (the server must be stopped).
    ///
    /// Ctrl-C stops the run between entries and blocks; what is deleted stays deleted,
    /// the summary says "cancelled" (exit status 130).
    Delete {
        #[command(flatten)]
        common: MaintenanceArgs,
        /// Only records matching this condition (JSON, e.g. '{"&level": {"$eq": "debug"}}').
        #[arg(long, value_parser = when_condition)]
        when: Option<serde_json::Value>,
    },
    /// Show what halflife does, on real data: builds a store from the fixtures in a
    /// temporary directory, runs a delete policy (with a `when` condition) and a compress
    /// policy, and prints the store before and after and the event trail.
    Demo {
        /// Keep the store in this directory instead of a temporary one.
        #[arg(long)]
        keep: Option<PathBuf>,
    },
    /// Print every bucket and entry of a data directory: records, blocks, overlap (the most
    /// sealed blocks covering one instant: 1 when disjoint; belated writes raise it,
    /// `compress` brings it back to 1), size, time range.
    ///
    /// Opening the directory also removes leftovers of interrupted changes, so it is
    /// refused while a server holds the directory's lock.
    Info {
        /// The data directory.
        #[arg(long, env = "RS_DATA_PATH", default_value = "./data")]
        data_path: PathBuf,
        /// Print JSON (sizes in bytes, timestamps in µs) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Check a data directory for damage without opening it: what the server would find
    /// and do at start, file by file (the server must be stopped).
    ///
    /// Reads every index, log, edit log and block file (every frame's checksum) and
    /// reports: damage (ERROR: what cannot be read and what that costs), what a crash
    /// leaves and an open repairs (warning: torn log tails, leftovers of interrupted
    /// changes, a lost or damaged index, rebuilt from the entry's files), and files set
    /// aside by earlier repairs (note). Nothing is changed unless --repair is given, which
    /// then opens the store as the server does (cutting torn tails, removing leftovers,
    /// rebuilding lost indexes; damaged bytes are set aside, never deleted) and checks it
    /// again. Exit status 0 when nothing is wrong (after the repair, with --repair), 1
    /// otherwise.
    Check {
        /// The data directory.
        #[arg(long, env = "RS_DATA_PATH", default_value = "./data")]
        data_path: PathBuf,
        /// Repair what an open repairs, then check again.
        #[arg(long)]
        repair: bool,
    },
}

/// Options of `halflife serve`.
#[derive(Args)]
struct ServeArgs {
    /// The data directory (created when missing).
    #[arg(long, env = "RS_DATA_PATH", default_value = "./data")]
    data_path: PathBuf,
    /// Address to listen on.
    #[arg(long, env = "RS_HOST", default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0: any free port; the log says which).
    #[arg(long, env = "RS_PORT", default_value_t = 8383)]
    port: u16,
    /// Name of this instance (in /info and in lifecycle event entries); trimmed. Unset or
    /// blank: the host name (`unknown` when it cannot be read), as ReductStore does.
    #[arg(long, env = "RS_INSTANCE_NAME")]
    instance_name: Option<String>,
    /// STANDALONE, PRIMARY, SECONDARY or REPLICA (read-only: changes get 403).
    #[arg(long, env = "RS_INSTANCE_ROLE", default_value = "STANDALONE")]
    instance_role: InstanceRole,
    /// Serve `GET /metrics` (Prometheus) without a token even when authentication is on
    /// (true/false, yes/no, 1/0); otherwise any valid token may read it.
    #[arg(long, env = "RS_METRICS_PUBLIC", default_value = "false", value_parser = clap::builder::BoolishValueParser::new(), action = clap::ArgAction::Set)]
    metrics_public: bool,
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
    /// Turns authentication on: this value is the full-access `init-token`, and every
    /// request needs `Authorization: Bearer <token>` of it or of a token created over the
    /// API (`/tokens`). Empty: no authentication.
    #[arg(long, env = "RS_API_TOKEN", hide_env_values = true)]
    api_token: Option<String>,
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

/// Parses `--tombstone-fold-share`: a fraction in (0, 1].
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

/// Options shared by `compress` and `delete`.
#[derive(Args)]
struct MaintenanceArgs {
    /// The data directory.
    #[arg(long, env = "RS_DATA_PATH", default_value = "./data")]
    data_path: PathBuf,
    /// The bucket.
    #[arg(long)]
    bucket: String,
    /// Entry patterns, comma-separated (exact names, `*`, `prefix*`, `!exclude`); all
    /// entries when omitted.
    #[arg(long, value_delimiter = ',')]
    entries: Vec<String>,
    /// Process records older than this duration (e.g. 30d, 12h).
    #[arg(long, value_parser = older_than)]
    older_than: String,
    /// Report what would be done, change nothing.
    #[arg(long)]
    dry_run: bool,
}

/// Parses a positive duration (`10m`, `1s`, `30d`) for clap, so a bad one exits 2 with
/// the usage like any other bad flag.
fn positive_duration(text: &str) -> std::result::Result<std::time::Duration, String> {
    match parse_duration(text) {
        Ok(micros) if micros > 0 => Ok(std::time::Duration::from_micros(micros as u64)),
        Ok(_) => Err(format!("'{text}' must be positive")),
        Err(e) => Err(format!("'{text}': {e}")),
    }
}

/// Checks `--older-than`: a duration that is not negative (0 means every record).
fn older_than(text: &str) -> std::result::Result<String, String> {
    match parse_duration(text) {
        Ok(micros) if micros >= 0 => Ok(text.to_string()),
        Ok(_) => Err(format!("'{text}' must not be negative")),
        Err(e) => Err(format!("'{text}': {e}")),
    }
}

/// Parses `--target`: a codec that can be a recompression target.
fn target_codec(text: &str) -> std::result::Result<Codec, String> {
    let codec: Codec = text.parse().map_err(|e: Error| e.message().to_string())?;
    halflife::storage::compress::validate_target(codec).map_err(|e| e.message().to_string())?;
    Ok(codec)
}

/// Parses `--when`: JSON that is a valid condition.
fn when_condition(text: &str) -> std::result::Result<serde_json::Value, String> {
    let json: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    halflife::storage::condition::Condition::parse(&json, false)
        .map_err(|e| e.message().to_string())?;
    Ok(json)
}

/// Microseconds of a duration, as the engine's settings take them.
fn micros(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

fn serve(args: ServeArgs) -> Result<()> {
    for name in halflife::server::unsupported::unsupported_settings(std::env::vars()) {
        log::warn!("{name} is a ReductStore setting halflife does not implement: it is ignored");
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
    engine.instance_name = halflife::config::instance_name(args.instance_name.as_deref());
    engine.worker_threads = args.lifecycle_workers as usize;
    engine.compress_threads = args
        .compress_threads
        .map_or_else(CompressPool::default_threads, |t| t as usize);
    engine.lifecycle_min_interval = micros(args.lifecycle_min_interval);
    engine.lifecycle_min_older_than = micros(args.lifecycle_min_older_than);
    engine.lifecycle_catch_up_share = args.lifecycle_catch_up_share;
    engine.lifecycle_max_records_per_run = args.lifecycle_max_records_per_run;
    engine.max_block_overlap = usize::try_from(args.max_block_overlap).unwrap_or(usize::MAX);
    engine.tombstone_fold_share = args.tombstone_fold_share;
    engine.sync_mode = args.sync;
    engine.system_events = args.system_events;
    engine.system_events_quota = Some(args.system_events_quota_size).filter(|&q| q > 0);
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
        },
        api_token: args.api_token,
        role: args.instance_role,
        metrics_public: args.metrics_public,
        trusted_proxies: args.trusted_proxies,
        cors: halflife::server::cors::Cors::parse(&args.cors_allow_origin),
        public_url: args.public_url,
        system_events_log_level: args.system_events_log_level,
    };
    // Handlers are installed before any thread starts, so no signal is lost; the main
    // thread then just waits for one.
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ])
    .map_err(|e| Error::io("installing signal handlers", e))?;
    let server = Server::start(config, Provisioning::from_env(std::env::vars()))?;
    if let Some(signal) = signals.forever().next() {
        log::info!("received signal {signal}");
    }
    server.shutdown();
    Ok(())
}

/// Exit status of a run stopped by Ctrl-C (128 + SIGINT, as shells report it).
const CANCELLED: u8 = 130;

/// Runs a maintenance job with a progress bar (drawn only when stderr is a terminal) and
/// Ctrl-C as a clean stop; prints the summary. Returns whether it was cancelled.
fn maintain(job: Job) -> Result<bool> {
    let cancel = Arc::new(AtomicBool::new(false));
    // The flag is raised by the signal and read between blocks, so an interrupted run
    // commits what it wrote and leaves the rest untouched.
    signal_hook::flag::register(signal_hook::consts::SIGINT, cancel.clone())
        .map_err(|e| Error::io("installing the Ctrl-C handler", e))?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, cancel.clone())
        .map_err(|e| Error::io("installing the SIGTERM handler", e))?;
    // Hidden unless stderr is a terminal: logs and pipes get the summary only.
    let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{bar:30}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} eta {eta} {msg}",
        )
        .map(|style| style.progress_chars("#>."))
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    eprintln!(
        "{} bucket '{}' (Ctrl-C stops cleanly)",
        if job.dry_run {
            "estimating"
        } else {
            "working on"
        },
        job.bucket
    );
    let progress = |event: Progress| match event {
        Progress::Start { total_bytes } => bar.set_length(total_bytes),
        Progress::Entry(name) => bar.set_message(name),
        Progress::Bytes(done) => {
            // Logs are counted by their file and then written as blocks: the total is an
            // estimate the bytes done may pass.
            if bar.length().is_some_and(|total| done > total) {
                bar.set_length(done);
            }
            bar.set_position(done)
        }
    };
    let result = maintenance::run(&job, &progress, &|| cancel.load(Ordering::Relaxed));
    bar.finish_and_clear();
    let summary = result?;
    print!("{}", maintenance::format_summary(&job, &summary));
    Ok(summary.cancelled)
}

fn maintenance_job(common: MaintenanceArgs, threads: usize, action: Action) -> Job {
    Job {
        data_path: common.data_path,
        bucket: common.bucket,
        entries: common.entries,
        older_than: common.older_than,
        threads,
        dry_run: common.dry_run,
        action,
    }
}

fn info(data_path: PathBuf, json: bool) -> Result<()> {
    if !data_path.is_dir() {
        return Err(halflife::Error::not_found(format!(
            "data directory '{}' does not exist",
            data_path.display()
        )));
    }
    let mut config = Config::new(data_path);
    // Looking changes nothing: no background merge of overlapping blocks here.
    config.max_block_overlap = usize::MAX;
    let store = Store::open(config)?;
    let buckets = report::collect(&store)?;
    if json {
        let text = serde_json::to_string_pretty(&buckets)
            .map_err(|e| Error::internal(format!("encoding the report: {e}")))?;
        println!("{text}");
    } else {
        print!("{}", report::format_table(&buckets));
    }
    Ok(())
}

/// `halflife check`: prints the findings and a summary; true when nothing is wrong.
fn check(data_path: PathBuf, repair: bool) -> Result<bool> {
    let before = halflife::check::check(&data_path)?;
    print_check(&before);
    if !repair || before.is_clean() {
        return Ok(before.is_clean());
    }
    println!("repairing: opening the store as the server does (the log says what it changes)");
    let mut config = Config::new(&data_path);
    // Only what an open does: no background merge of overlapping blocks.
    config.max_block_overlap = usize::MAX;
    drop(Store::open(config)?);
    let after = halflife::check::check(&data_path)?;
    println!("after the repair:");
    print_check(&after);
    Ok(after.is_clean())
}

fn print_check(report: &halflife::check::CheckReport) {
    use halflife::check::Severity;
    for finding in &report.findings {
        println!("{finding}");
    }
    println!(
        "checked {} bucket(s), {} entr{}, {} block(s): {} error(s), {} warning(s), {} note(s)",
        report.buckets,
        report.entries,
        if report.entries == 1 { "y" } else { "ies" },
        report.blocks,
        report.count(Severity::Error),
        report.count(Severity::Warning),
        report.count(Severity::Note)
    );
}

/// What `RS_LOG_LEVEL` asks for.
enum LogLevel {
    /// One of ReductStore's level names.
    Named(log::LevelFilter),
    /// An env_logger filter list (it has `=` or `,`).
    Filters(String),
}

/// The log level `RS_LOG_LEVEL` names: ReductStore's names (TRACE, DEBUG, INFO, WARNING,
/// ERROR) and WARN, in any case; anything else logs at INFO, with the complaint to log once
/// logging runs (never silence: a typo must not turn every log off).
fn log_level(value: Option<&str>) -> (LogLevel, Option<String>) {
    use log::LevelFilter;
    let Some(text) = value.map(str::trim).filter(|t| !t.is_empty()) else {
        return (LogLevel::Named(LevelFilter::Info), None);
    };
    if text.contains(['=', ',']) {
        return (LogLevel::Filters(text.to_string()), None);
    }
    let filter = match text.to_ascii_uppercase().as_str() {
        "TRACE" => LevelFilter::Trace,
        "DEBUG" => LevelFilter::Debug,
        "INFO" => LevelFilter::Info,
        "WARN" | "WARNING" => LevelFilter::Warn,
        "ERROR" => LevelFilter::Error,
        "OFF" => LevelFilter::Off,
        _ => {
            return (
                LogLevel::Named(LevelFilter::Info),
                Some(format!(
                    "RS_LOG_LEVEL '{}' is not one of TRACE, DEBUG, INFO, WARNING, ERROR: logging at INFO",
                    text.escape_default()
                )),
            );
        }
    };
    (LogLevel::Named(filter), None)
}

fn main() -> ExitCode {
    let (level, complaint) = log_level(std::env::var("RS_LOG_LEVEL").ok().as_deref());
    let mut logger = env_logger::Builder::new();
    match level {
        LogLevel::Named(filter) => logger.filter_level(filter),
        // Module filters (`halflife::server=debug,info`) for whoever needs them.
        LogLevel::Filters(spec) => logger.parse_filters(&spec),
    };
    if let Err(e) = halflife::server::trail::logs::TrailLogger::install(logger.build()) {
        eprintln!("warning: logging could not be set up: {e}");
    }
    if let Some(complaint) = complaint {
        log::warn!("{complaint}");
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check { data_path, repair } => {
            return match check(data_path, repair) {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::FAILURE,
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        Command::Info { data_path, json } => info(data_path, json).map(|()| false),
        Command::Serve(args) => serve(*args).map(|()| false),
        Command::Compress {
            common,
            target,
            threads,
        } => {
            let threads = threads.map_or_else(CompressPool::default_threads, |t| t as usize);
            maintain(maintenance_job(common, threads, Action::Compress(target)))
        }
        Command::Delete { common, when } => {
            maintain(maintenance_job(common, 1, Action::Delete(when)))
        }
        Command::Demo { keep } => {
            halflife::demo::run(&mut std::io::stdout(), keep.as_deref()).map(|()| false)
        }
    };
    match result {
        Ok(false) => ExitCode::SUCCESS,
        Ok(true) => ExitCode::from(CANCELLED),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
