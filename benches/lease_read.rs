//! What a standby's look at the lease costs, read each way it could be
//! (`src/server/ha/fresh_read.rs`, `docs/high-availability.md#volumes`):
//! - a plain read (`open`, `read`): may be answered from this host's page cache;
//! - after revalidating its attributes (`open`, `fstat`, `read`): what close-to-open
//!   NFS does at every open anyway;
//! - with `O_DIRECT` (what halflife does): past the page cache, to the file system;
//! - `LeaseRecord::read`: the `O_DIRECT` read and the JSON parse, a whole look.
//!
//! Each is printed per read and as a ratio to the plain read measured in the same run.
//! The lease file is written in a temporary directory, or in `HALFLIFE_LEASE_BENCH_DIR`
//! (a network mount, say). Run with `cargo bench --bench lease_read`.

use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

use halflife::server::ha::fresh_read::read_fresh;
use halflife::server::ha::lease::{LEASE_FILE, LeaseRecord};

const READS: u32 = 2_000;

fn main() {
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("a temporary directory");
    let dir = std::env::var_os("HALFLIFE_LEASE_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| tmp.path().to_path_buf());
    let record = LeaseRecord {
        owner: "bench#1-00000000".into(),
        epoch: 7,
        renewed_at: 1_780_000_000_000,
        url: "http://10.0.0.1:8383/".into(),
        role: "PRIMARY".into(),
        released: false,
        renewals: 12_345,
    };
    let path = dir.join(LEASE_FILE);
    std::fs::write(&path, serde_json::to_vec(&record).expect("json")).expect("write the lease");
    println!("lease reads in {} ({READS} each)", dir.display());
    let plain = time(|| {
        let mut bytes = Vec::new();
        std::fs::File::open(&path)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .expect("plain read");
    });
    let revalidated = time(|| {
        let mut bytes = Vec::new();
        let mut file = std::fs::File::open(&path).expect("open");
        file.metadata().expect("fstat");
        file.read_to_end(&mut bytes).expect("read");
    });
    let direct = time(|| {
        read_fresh(&path).expect("O_DIRECT read");
    });
    let look = time(|| {
        LeaseRecord::read(Path::new(&dir)).expect("a lease");
    });
    let row = |name: &str, d: Duration| {
        println!(
            "{name:<28} {:>9.1} µs per read  {:>5.2}x the plain read",
            d.as_secs_f64() * 1e6 / f64::from(READS),
            d.as_secs_f64() / plain.as_secs_f64()
        )
    };
    row("plain read", plain);
    row("fstat, then read", revalidated);
    row("O_DIRECT read", direct);
    row("a look (O_DIRECT + JSON)", look);
    let _ = std::fs::remove_file(&path);
}

fn time(mut read: impl FnMut()) -> Duration {
    for _ in 0..READS / 10 {
        read();
    }
    let began = Instant::now();
    for _ in 0..READS {
        read();
    }
    began.elapsed()
}
