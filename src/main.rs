//! The `halflife` command line.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use halflife::duration::parse_duration;
use halflife::maintenance::{self, Action, Job};
use halflife::server::queries::QueryLimits;
use halflife::server::{InstanceRole, Limits, Provisioning, Server, ServerConfig};
use halflife::storage::{Codec, CompressPool, Store};
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
    Serve(ServeArgs),
    /// Recompress the sealed blocks of a bucket whose records are all older than a
    /// duration (the server must be stopped).
    Compress {
        #[command(flatten)]
        common: MaintenanceArgs,
        /// Target codec: lz4, zstd (level 3) or zstd-<1..22>.
        #[arg(long, default_value = "zstd")]
        target: String,
        /// Compression threads (default: the machine's available parallelism).
        #[arg(long, env = "RS_COMPRESS_THREADS")]
        threads: Option<usize>,
    },
    /// Delete the records of a bucket older than a duration (the server must be stopped).
    Delete {
        #[command(flatten)]
        common: MaintenanceArgs,
        /// Only records matching this condition (JSON, e.g. '{"&level": {"$eq": "debug"}}').
        #[arg(long)]
        when: Option<String>,
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
    /// Name of this instance (in /info and in lifecycle event entries).
    #[arg(long, env = "RS_INSTANCE_NAME", default_value = "unknown")]
    instance_name: String,
    /// STANDALONE, PRIMARY, SECONDARY or REPLICA (read-only: changes get 403).
    #[arg(long, env = "RS_INSTANCE_ROLE", default_value = "STANDALONE")]
    instance_role: InstanceRole,
    /// Serve `GET /metrics` (Prometheus) without a token even when authentication is on
    /// (true/false, yes/no, 1/0); otherwise any valid token may read it.
    #[arg(long, env = "RS_METRICS_PUBLIC", default_value = "false", value_parser = clap::builder::BoolishValueParser::new(), action = clap::ArgAction::Set)]
    metrics_public: bool,
    /// Turns authentication on: this value is the full-access `init-token`, and every
    /// request needs `Authorization: Bearer <token>` of it or of a token created over the
    /// API (`/tokens`). Empty: no authentication.
    #[arg(long, env = "RS_API_TOKEN", hide_env_values = true)]
    api_token: Option<String>,
    /// HTTP handler threads (connections served at once).
    #[arg(long, env = "RS_HTTP_THREADS", default_value_t = 8)]
    http_threads: usize,
    /// How long a kept-alive connection may wait for its next request before it is
    /// closed. Idle connections cost no thread (they wait in the poller), so they are kept
    /// for minutes, as ReductStore keeps them.
    #[arg(long, env = "RS_HTTP_IDLE_TIMEOUT", default_value = "5m")]
    http_idle_timeout: String,
    /// How long the whole head of a request (request line and headers) may take to
    /// arrive, from its first byte; slower clients get 408 and are disconnected.
    #[arg(long, env = "RS_HTTP_HEAD_TIMEOUT", default_value = "10s")]
    http_head_timeout: String,
    /// How long a request body may stall (no bytes arriving) before the request fails
    /// with 400 and the connection closes.
    #[arg(long, env = "RS_HTTP_BODY_TIMEOUT", default_value = "30s")]
    http_body_timeout: String,
    /// Open connections at most; when reached, the connection idle the longest is closed
    /// to admit a new one (503 when none is idle).
    #[arg(long, env = "RS_HTTP_MAX_CONNECTIONS", default_value_t = halflife::server::http::DEFAULT_MAX_CONNECTIONS as u64, value_parser = clap::value_parser!(u64).range(1..))]
    http_max_connections: u64,
    /// Largest request body in bytes (a record, a batch, a chunked upload); larger ones
    /// get 413 before any byte of them is read.
    #[arg(long, env = "RS_MAX_BODY_SIZE", default_value_t = halflife::server::http::DEFAULT_MAX_BODY_SIZE, value_parser = clap::value_parser!(u64).range(1..))]
    max_body_size: u64,
    /// Queries open at once at most (each holds an iterator and the blocks it reads until
    /// it is read to the end or expires); past it, new queries get 429.
    #[arg(long, env = "RS_MAX_OPEN_QUERIES", default_value_t = halflife::server::queries::DEFAULT_MAX_OPEN_QUERIES as u64, value_parser = clap::value_parser!(u64).range(1..))]
    max_open_queries: u64,
    /// Longest TTL a query may ask for; longer ones are cut to it.
    #[arg(long, env = "RS_MAX_QUERY_TTL", default_value = "1h")]
    max_query_ttl: String,
    /// Lifecycle worker threads (policies running at once).
    #[arg(long, env = "RS_LIFECYCLE_WORKERS", default_value_t = 2)]
    lifecycle_workers: usize,
    /// Recompression threads (default: the machine's available parallelism).
    #[arg(long, env = "RS_COMPRESS_THREADS")]
    compress_threads: Option<usize>,
    /// Smallest lifecycle interval accepted (a duration such as 10m or 1s).
    #[arg(long, env = "RS_LIFECYCLE_MIN_INTERVAL", default_value = "10m")]
    lifecycle_min_interval: String,
    /// Smallest lifecycle older_than accepted.
    #[arg(long, env = "RS_LIFECYCLE_MIN_OLDER_THAN", default_value = "1h")]
    lifecycle_min_older_than: String,
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
}

/// Parses `--tombstone-fold-share`: a fraction in (0, 1].
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
    #[arg(long)]
    older_than: String,
    /// Report what would be done, change nothing.
    #[arg(long)]
    dry_run: bool,
}

fn duration_setting(name: &str, text: &str) -> Result<i64> {
    let micros =
        parse_duration(text).map_err(|e| Error::unprocessable(format!("{name} '{text}': {e}")))?;
    if micros <= 0 {
        return Err(Error::unprocessable(format!(
            "{name} '{text}' must be positive"
        )));
    }
    Ok(micros)
}

/// A positive duration setting as a `std::time::Duration`.
fn std_duration(name: &str, text: &str) -> Result<std::time::Duration> {
    duration_setting(name, text).map(|micros| std::time::Duration::from_micros(micros as u64))
}

fn serve(args: ServeArgs) -> Result<()> {
    for name in halflife::server::unsupported::unsupported_settings(std::env::vars()) {
        log::warn!("{name} is a ReductStore setting halflife does not implement: it is ignored");
    }
    let mut engine = Config::new(&args.data_path);
    engine.instance_name = args.instance_name;
    engine.worker_threads = args.lifecycle_workers.max(1);
    engine.compress_threads = args
        .compress_threads
        .unwrap_or_else(CompressPool::default_threads);
    engine.lifecycle_min_interval =
        duration_setting("--lifecycle-min-interval", &args.lifecycle_min_interval)?;
    engine.lifecycle_min_older_than =
        duration_setting("--lifecycle-min-older-than", &args.lifecycle_min_older_than)?;
    engine.max_block_overlap = usize::try_from(args.max_block_overlap).unwrap_or(usize::MAX);
    engine.tombstone_fold_share = args.tombstone_fold_share;
    let config = ServerConfig {
        engine,
        host: args.host,
        port: args.port,
        http_threads: args.http_threads,
        limits: Limits {
            idle_timeout: std_duration("--http-idle-timeout", &args.http_idle_timeout)?,
            head_timeout: std_duration("--http-head-timeout", &args.http_head_timeout)?,
            body_timeout: std_duration("--http-body-timeout", &args.http_body_timeout)?,
            max_connections: usize::try_from(args.http_max_connections).unwrap_or(usize::MAX),
            max_body_size: args.max_body_size,
        },
        queries: QueryLimits {
            max_open: usize::try_from(args.max_open_queries).unwrap_or(usize::MAX),
            max_ttl: std_duration("--max-query-ttl", &args.max_query_ttl)?,
        },
        api_token: args.api_token,
        role: args.instance_role,
        metrics_public: args.metrics_public,
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

fn maintain(job: Job) -> Result<()> {
    let interactive = std::io::stderr().is_terminal();
    let mut progress = |done: usize, total: usize, entry: &str| {
        if !interactive || total == 0 {
            return;
        }
        let width = 30;
        let filled = done * width / total;
        eprint!(
            "\r[{}{}] {done}/{total} entries {entry:<30.30}",
            "#".repeat(filled),
            ".".repeat(width - filled)
        );
        if done == total {
            eprintln!();
        }
        let _ = std::io::stderr().flush();
    };
    let summary = maintenance::run(&job, &mut progress)?;
    print!("{}", maintenance::format_summary(&job, &summary));
    Ok(())
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

fn info(data_path: PathBuf) -> Result<()> {
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
    println!(
        "{:<40} {:>10} {:>7} {:>8} {:>14} {:>18} {:>18}",
        "bucket/entry", "records", "blocks", "overlap", "bytes", "oldest (µs)", "latest (µs)"
    );
    for bucket in store.buckets() {
        for entry in bucket.entries() {
            let e = entry.info()?;
            println!(
                "{:<40} {:>10} {:>7} {:>8} {:>14} {:>18} {:>18}",
                format!("{}/{}", bucket.name(), e.name),
                e.record_count,
                e.block_count,
                entry.max_overlap()?,
                e.size,
                e.oldest_record,
                e.latest_record
            );
        }
    }
    Ok(())
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
    logger.init();
    if let Some(complaint) = complaint {
        log::warn!("{complaint}");
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Info { data_path } => info(data_path),
        Command::Serve(args) => serve(args),
        Command::Compress {
            common,
            target,
            threads,
        } => target.parse::<Codec>().and_then(|codec| {
            let threads = threads.unwrap_or_else(CompressPool::default_threads);
            maintain(maintenance_job(common, threads, Action::Compress(codec)))
        }),
        Command::Delete { common, when } => when
            .map(|w| {
                serde_json::from_str(&w)
                    .map_err(|e| Error::unprocessable(format!("--when is not JSON: {e}")))
            })
            .transpose()
            .and_then(|when| maintain(maintenance_job(common, 1, Action::Delete(when)))),
        Command::Demo { keep } => halflife::demo::run(&mut std::io::stdout(), keep.as_deref()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
