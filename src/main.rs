//! The `halflife` command line.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use halflife::storage::Store;
use halflife::{Config, Result};

/// halflife: time-stamped blob storage whose data ages under lifecycle policies.
#[derive(Parser)]
#[command(version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show what halflife does, on real data: builds a store from the fixtures in a
    /// temporary directory, runs a delete policy (with a `when` condition) and a compress
    /// policy, and prints the store before and after and the event trail.
    Demo {
        /// Keep the store in this directory instead of a temporary one.
        #[arg(long)]
        keep: Option<PathBuf>,
    },
    /// Print every bucket and entry of a data directory: records, blocks, size, time range.
    ///
    /// Opening the directory also removes leftovers of interrupted changes, so do not run
    /// this against a directory a server is using.
    Info {
        /// The data directory.
        #[arg(long, env = "RS_DATA_PATH", default_value = "./data")]
        data_path: PathBuf,
    },
}

fn info(data_path: PathBuf) -> Result<()> {
    if !data_path.is_dir() {
        return Err(halflife::Error::not_found(format!(
            "data directory '{}' does not exist",
            data_path.display()
        )));
    }
    let store = Store::open(Config::new(data_path))?;
    println!(
        "{:<40} {:>10} {:>7} {:>14} {:>18} {:>18}",
        "bucket/entry", "records", "blocks", "bytes", "oldest (µs)", "latest (µs)"
    );
    for bucket in store.buckets() {
        for e in bucket.entry_infos()? {
            println!(
                "{:<40} {:>10} {:>7} {:>14} {:>18} {:>18}",
                format!("{}/{}", bucket.name(), e.name),
                e.record_count,
                e.block_count,
                e.size,
                e.oldest_record,
                e.latest_record
            );
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::new().filter_or("RS_LOG_LEVEL", "info")).init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Info { data_path } => info(data_path),
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
