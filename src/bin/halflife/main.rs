//! The `halflife` command line.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::{Args, Parser, Subcommand};

mod serve;
mod serve_ha;
mod server_client;
mod stdout;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serve::{ServeArgs, serve};
use stdout::{emit, emit_line};

use halflife::duration::parse_duration;
use halflife::maintenance::{self, Action, Job, Progress};
use halflife::report;
use halflife::storage::{Codec, CompressPool, Store};
use halflife::{Config, Error, Result};

/// halflife: time-stamped blob storage whose data ages under lifecycle policies.
#[derive(Parser)]
#[command(version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log more on stderr: commands other than `serve` log warnings and errors only;
    /// -v adds what they do (INFO), -vv debugging. `serve` logs at RS_LOG_LEVEL.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
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
    /// Print every bucket and entry of a data directory (or, with --url, of a running
    /// server): records, blocks, overlap (the most sealed blocks covering one instant: 1
    /// when disjoint; belated writes raise it, `compress` brings it back to 1), size, time
    /// range, storage tiers; each bucket's totals and its lifecycle policies.
    ///
    /// Each bucket also gets a totals row and a line per lifecycle policy (its state, last
    /// run and result). Opening the directory also removes leftovers of interrupted
    /// changes, so it is refused while a server holds the directory's lock: with --url,
    /// the same report comes from the running server instead (with its policies' live
    /// state: next run, a run's progress).
    Info {
        /// The data directory.
        #[arg(long, env = "RS_DATA_PATH", default_value = "./data")]
        data_path: PathBuf,
        /// Ask the server at this URL (e.g. http://127.0.0.1:8383; `host:port` means
        /// http) instead of reading a data directory.
        #[arg(long, value_parser = server_client::server_url)]
        url: Option<String>,
        /// API token for --url (full access shows the policies).
        #[arg(long, env = "RS_API_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// Print JSON (sizes in bytes, timestamps in µs) instead of a table.
        #[arg(long)]
        json: bool,
        /// Only this bucket.
        #[arg(long)]
        bucket: Option<String>,
        /// Also the system's buckets (`$system`: events, audit, logs), after the others.
        #[arg(long)]
        all: bool,
    },
    /// Look at and drive a running server's lifecycle policies through its API.
    #[command(subcommand)]
    Policy(server_client::PolicyCommand),
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

/// Parses a duration that may be 0 (a setting 0 turns off).
fn duration_or_zero(text: &str) -> std::result::Result<std::time::Duration, String> {
    if text.trim() == "0" {
        return Ok(std::time::Duration::ZERO);
    }
    match parse_duration(text) {
        Ok(micros) if micros >= 0 => Ok(std::time::Duration::from_micros(micros as u64)),
        Ok(_) => Err(format!("'{text}' must not be negative")),
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
/// Both refusals list what a target can be (a block can be stored uncompressed, `none`,
/// but nothing recompresses to it).
fn target_codec(text: &str) -> std::result::Result<Codec, String> {
    use halflife::storage::compress::{TARGETS, validate_target};
    let codec: Codec = text
        .parse()
        .map_err(|_: Error| format!("'{text}' is not a compression target: {TARGETS}"))?;
    validate_target(codec).map_err(|e| e.message().to_string())?;
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

/// Exit status of a run stopped by Ctrl-C (128 + SIGINT, as shells report it).
const CANCELLED: u8 = 130;

/// Runs a maintenance job with a progress bar (drawn only when stderr is a terminal) and
/// Ctrl-C as a clean stop; prints the summary. Returns whether it was cancelled.
fn maintain(job: Job) -> Result<bool> {
    // Before anything is printed: a directory that is not a data directory is one line.
    halflife::storage::marker::require_data_dir(&job.data_path)?;
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
    emit(&maintenance::format_summary(&job, &summary));
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

fn info(data_path: PathBuf, shown: &Shown) -> Result<()> {
    halflife::storage::marker::require_data_dir(&data_path)?;
    let mut config = Config::new(data_path);
    // Looking changes nothing: no background merge of overlapping blocks here.
    config.max_block_overlap = usize::MAX;
    let store = Store::open(config).map_err(|e| match e.kind() {
        // A server holds it: its report is a request away.
        halflife::error::ErrorKind::Conflict => Error::conflict(format!(
            "{}, or ask the server that holds it: halflife info --url http://HOST:PORT",
            e.message()
        )),
        _ => e,
    })?;
    print_report(report::collect(&store)?, shown)
}

/// What `info` shows and how.
pub(crate) struct Shown {
    /// JSON instead of the table.
    pub json: bool,
    /// Only this bucket.
    pub bucket: Option<String>,
    /// `$system` too.
    pub all: bool,
}

/// Prints the storage report as JSON or as the table (offline and `--url` alike).
pub(crate) fn print_report(buckets: Vec<report::BucketReport>, shown: &Shown) -> Result<()> {
    let (buckets, hidden) = report::select(buckets, shown.bucket.as_deref(), shown.all)?;
    if shown.json {
        let text = serde_json::to_string_pretty(&buckets)
            .map_err(|e| Error::internal(format!("encoding the report: {e}")))?;
        emit_line(&text);
    } else {
        emit(&report::format_table(&buckets));
        if hidden > 0 {
            emit_line("($system left out: --all shows it)");
        }
    }
    Ok(())
}

/// `halflife check`: prints the findings and a summary; true when nothing is wrong.
fn check(data_path: PathBuf, repair: bool) -> Result<bool> {
    // Remotes defined by RS_REMOTE_<NAME>_* are asked for each tiered block's object.
    let vars: std::collections::BTreeMap<String, String> = std::env::vars().collect();
    let configured = halflife::storage::remote::settings::remotes_from(&[], &vars)?;
    let mut remotes = Vec::new();
    for settings in &configured {
        let client = halflife::storage::remote::s3::S3Client::new(settings)?;
        remotes.push(std::sync::Arc::new(halflife::storage::remote::Remote::new(
            settings, client,
        )));
    }
    let before = halflife::check::check_with_remotes(&data_path, &remotes)?;
    print_check(&before);
    if !repair || before.is_clean() {
        return Ok(before.is_clean());
    }
    emit_line("repairing: opening the store as the server does (the log says what it changes)");
    let mut config = Config::new(&data_path);
    // Only what an open does: no background merge of overlapping blocks.
    config.max_block_overlap = usize::MAX;
    // What only an operator may decide: a missing edit log's changes are given up.
    config.accept_lost_edit_logs = true;
    config.remotes = configured;
    let store = Store::open(config)?;
    // The remote side's share: the deletions left pending and the uploads a stopped run
    // left behind (what the server's collector does at its start).
    let done = store.delete_pending_objects(true);
    if done.deleted + done.still_pending > 0 {
        emit_line(&format!(
            "remote objects no index names: {} deleted, {} still pending",
            done.deleted, done.still_pending
        ));
    }
    drop(store);
    let after = halflife::check::check_with_remotes(&data_path, &remotes)?;
    emit_line("after the repair:");
    print_check(&after);
    Ok(after.is_clean())
}

fn print_check(report: &halflife::check::CheckReport) {
    use halflife::check::Severity;
    for finding in &report.findings {
        emit_line(&finding.to_string());
    }
    emit_line(&format!(
        "checked {} bucket(s), {} entr{}, {} block(s): {} error(s), {} warning(s), {} note(s)",
        report.buckets,
        report.entries,
        if report.entries == 1 { "y" } else { "ies" },
        report.blocks,
        report.count(Severity::Error),
        report.count(Severity::Warning),
        report.count(Severity::Note)
    ));
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

/// Parses the command line; a bad value that came from an environment variable (the
/// flag was not given) is reported under the variable's name, which is what the user set.
fn parse_cli() -> Cli {
    use clap::CommandFactory;
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let err = match Cli::try_parse() {
        Ok(cli) => return cli,
        Err(e) => e,
    };
    let from_env = match (err.kind(), err.get(ContextKind::InvalidArg)) {
        (ErrorKind::ValueValidation | ErrorKind::InvalidValue, Some(ContextValue::String(arg))) => {
            let long = arg.split_whitespace().next().unwrap_or_default();
            let given = std::env::args().any(|a| a == long || a.starts_with(&format!("{long}=")));
            let command = Cli::command();
            let env = command
                .get_subcommands()
                .flat_map(|c| c.get_arguments())
                .chain(command.get_arguments())
                .find(|a| a.get_long().is_some_and(|l| format!("--{l}") == long))
                .and_then(|a| a.get_env())
                .map(|e| e.to_string_lossy().into_owned());
            env.filter(|name| !given && std::env::var_os(name).is_some())
                .map(|name| (name, long.to_string()))
        }
        _ => None,
    };
    match from_env {
        Some((name, long)) => {
            let value = std::env::var(&name).unwrap_or_default();
            let why = err
                .render()
                .to_string()
                .lines()
                .next()
                .and_then(|l| l.split_once("': ").map(|(_, why)| why.to_string()))
                .unwrap_or_default();
            eprintln!(
                "error: invalid value '{}' in the environment variable {name} (the setting {long}): {why}",
                value.escape_default()
            );
            std::process::exit(2);
        }
        None => err.exit(),
    }
}

fn main() -> ExitCode {
    let cli = parse_cli();
    let (level, complaint) = match (&cli.command, cli.verbose) {
        (Command::Serve(_), _) => log_level(std::env::var("RS_LOG_LEVEL").ok().as_deref()),
        // A command's output is its report: the log only says what went wrong.
        (_, 0) => (LogLevel::Named(log::LevelFilter::Warn), None),
        (_, 1) => (LogLevel::Named(log::LevelFilter::Info), None),
        (_, _) => (LogLevel::Named(log::LevelFilter::Debug), None),
    };
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
        Command::Info {
            data_path,
            url,
            token,
            json,
            bucket,
            all,
        } => {
            let shown = Shown { json, bucket, all };
            match url {
                Some(url) => server_client::info(&server_client::ServerArgs { url, token }, &shown),
                None => info(data_path, &shown),
            }
            .map(|()| false)
        }
        Command::Policy(server_client::PolicyCommand::Ls { server, json }) => {
            server_client::ls(&server, json).map(|()| false)
        }
        Command::Policy(server_client::PolicyCommand::Run { name, server }) => {
            return match server_client::run(&server, &name) {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::FAILURE,
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            };
        }
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
