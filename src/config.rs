//! Engine configuration: where the data lives and the limits that shape the on-disk layout.

use std::path::PathBuf;

/// Default raw size of a payload frame: records are grouped into frames of about this many
/// bytes, and each frame is compressed and checksummed on its own.
pub const DEFAULT_FRAME_SIZE: usize = 1 << 20;

/// Default number of sealed blocks kept memory-mapped with their record tables parsed.
pub const DEFAULT_BLOCK_CACHE: usize = 256;

/// Configuration of a [`crate::storage::Store`].
#[derive(Debug, Clone)]
pub struct Config {
    /// The data directory; every bucket lives in a sub-directory of it.
    pub data_path: PathBuf,
    /// Target raw size of a payload frame in bytes (a frame holds at least one record).
    pub frame_size: usize,
    /// How many sealed blocks each bucket keeps mapped and parsed for fast reads.
    pub block_cache: usize,
    /// Threads of the recompression pool; defaults to the machine's available parallelism.
    pub compress_threads: usize,
}

impl Config {
    /// A configuration with default limits for the given data directory.
    pub fn new(data_path: impl Into<PathBuf>) -> Self {
        Config {
            data_path: data_path.into(),
            frame_size: DEFAULT_FRAME_SIZE,
            block_cache: DEFAULT_BLOCK_CACHE,
            compress_threads: crate::storage::CompressPool::default_threads(),
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config::new("./data")
    }
}
