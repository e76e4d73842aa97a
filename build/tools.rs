//! The tools outside Rust's toolchain that some tests need, and where each is found.
//!
//! Shared by `build.rs` (which marks a test `ignore`d when its tool is missing, so cargo's
//! summary counts it as not run) and by the tests themselves (which fail, naming the tool,
//! when one they run without cannot be found or started). One probe for both, so the two
//! can never disagree about what "present" means.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// A tool some tests need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    /// Garage, the object store the tier's tests run against.
    Garage,
    /// Headless Chromium and its ChromeDriver.
    Browser,
    /// Firefox ESR and geckodriver.
    Firefox,
    /// Node, for the console's module tests.
    Node,
    /// FUSE (`/dev/fuse` and `fusermount3`), for the power-cut file system.
    Fuse,
    /// Root, for mounting a small tmpfs (the disk-full tests).
    Root,
    /// A ReductStore 1.21.5 binary named by `REDUCTSTORE_BIN`.
    ReductStore,
    /// OpenSSH's server and sshfs over FUSE: a network file system client on loopback.
    Sshfs,
}

/// Every tool, in the order the build script reports them.
pub const ALL: [Tool; 8] = [
    Tool::Garage,
    Tool::Browser,
    Tool::Firefox,
    Tool::Node,
    Tool::Fuse,
    Tool::Root,
    Tool::ReductStore,
    Tool::Sshfs,
];

impl Tool {
    /// Its name in `cfg(halflife_missing = "…")` and, upper-cased, in its switch.
    pub fn key(self) -> &'static str {
        match self {
            Tool::Garage => "garage",
            Tool::Browser => "browser",
            Tool::Firefox => "firefox",
            Tool::Node => "node",
            Tool::Fuse => "fuse",
            Tool::Root => "root",
            Tool::ReductStore => "reductstore",
            Tool::Sshfs => "sshfs",
        }
    }

    /// The switch that turns its absence into a failure: `HALFLIFE_REQUIRE_<TOOL>=1`.
    pub fn switch(self) -> String {
        format!("HALFLIFE_REQUIRE_{}", self.key().to_ascii_uppercase())
    }

    /// Whether the switch is on (exactly `1`; `0` or anything else is off).
    pub fn required(self) -> bool {
        std::env::var(self.switch()).is_ok_and(|v| v.trim() == "1")
    }

    /// How to get it, for the messages.
    pub fn how_to_get(self) -> &'static str {
        match self {
            Tool::Garage => "cargo install garage --version 2.5.0 --locked",
            Tool::Browser => "apt-get install chromium chromium-driver",
            Tool::Firefox => {
                "apt-get install firefox-esr; cargo install geckodriver --version 0.37.1 --locked"
            }
            Tool::Node => "apt-get install nodejs",
            Tool::Fuse => "apt-get install fuse3, and a user who may open /dev/fuse",
            Tool::Root => "run the tests as root",
            Tool::ReductStore => "set REDUCTSTORE_BIN to a ReductStore 1.21.5 binary",
            Tool::Sshfs => {
                "apt-get install openssh-server sshfs fuse3, and run the tests as root (sshd's privilege separation)"
            }
        }
    }

    /// Where it is on this machine: its binaries (empty for root), or why not.
    pub fn find(self) -> Result<Vec<PathBuf>, String> {
        match self {
            Tool::Garage => on_path_or_cargo("garage").map(|g| vec![g]),
            Tool::Browser => Ok(vec![
                first_file(&["/usr/bin/chromium", "/usr/bin/chromium-browser"])?,
                first_file(&["/usr/bin/chromedriver"])?,
            ]),
            Tool::Firefox => Ok(vec![
                first_file(&["/usr/bin/firefox-esr", "/usr/bin/firefox"])?,
                on_path_or_cargo("geckodriver")?,
            ]),
            Tool::Node => on_path_or_cargo("node").map(|n| vec![n]),
            Tool::Fuse => {
                if !Path::new("/dev/fuse").exists() {
                    return Err("no /dev/fuse".into());
                }
                on_path_or_cargo("fusermount3").map(|f| vec![f])
            }
            Tool::Root => is_root()
                .then(Vec::new)
                .ok_or_else(|| "not running as root".into()),
            Tool::Sshfs => {
                if !Path::new("/dev/fuse").exists() {
                    return Err("no /dev/fuse".into());
                }
                Ok(vec![
                    first_file(&["/usr/sbin/sshd"])?,
                    on_path_or_cargo("sshfs")?,
                    on_path_or_cargo("ssh-keygen")?,
                    on_path_or_cargo("fusermount3")?,
                ])
            }
            Tool::ReductStore => {
                let bin = std::env::var_os("REDUCTSTORE_BIN")
                    .ok_or_else(|| "REDUCTSTORE_BIN is not set".to_string())?;
                let bin = PathBuf::from(bin);
                if bin.is_file() {
                    Ok(vec![bin])
                } else {
                    Err(format!("REDUCTSTORE_BIN={} is not a file", bin.display()))
                }
            }
        }
    }
}

fn first_file(candidates: &[&str]) -> Result<PathBuf, String> {
    candidates
        .iter()
        .map(Path::new)
        .find(|p| p.is_file())
        .map(Path::to_path_buf)
        .ok_or_else(|| format!("none of {}", candidates.join(", ")))
}

/// `name` in a `PATH` directory or in cargo's bin folder (where `cargo install` puts it).
fn on_path_or_cargo(name: &str) -> Result<PathBuf, String> {
    let mut places: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    places.extend(cargo_home.map(|c| c.join("bin")));
    places
        .into_iter()
        .map(|dir| dir.join(name))
        .find(|bin| bin.is_file())
        .ok_or_else(|| format!("no {name} on PATH or in cargo's bin folder"))
}

/// Whether this process runs as root (its effective uid, from `/proc/self/status`).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1).map(|e| e == "0"))
            .unwrap_or(false)
    })
}
