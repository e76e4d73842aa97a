//! Which file systems can carry a data directory that two instances share (a PRIMARY and a
//! SECONDARY, or a REPLICA reading a writer's files), and the check each of them makes at
//! start (`docs/high-availability.md#volumes`).
//!
//! The lease and the store assume that what one instance wrote and synced is what the other
//! reads next: a standby must see each renewal of `.lease` within the TTL, a new holder
//! must see every record the old one acknowledged, and nothing the old holder wrote may
//! reach the server after the new one has started writing at the same place. One kernel
//! (two processes on one host) gives that through its one page cache. Across hosts it
//! takes a file system whose caches are kept coherent by the server (CephFS's
//! capabilities, the lock managers of GFS2, OCFS2, Lustre and GPFS), or NFS with
//! close-to-open consistency and synchronous writes. FUSE network mounts (sshfs, s3fs,
//! gcsfuse, rclone) cache attributes, names and data for seconds to minutes with nothing
//! to invalidate them, and queue writes: a standby there reads a stale lease and takes
//! over while the holder still acknowledges. Those are refused unless the operator names
//! the file system in `RS_TRUST_VOLUME`.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The setting that starts an instance on a file system this check refuses, on purpose.
pub const TRUST_SETTING: &str = "RS_TRUST_VOLUME";

/// The file system a data directory is on: what `statfs` and the mount table say of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Volume {
    /// The type as the mount table names it (`ext4`, `nfs4`, `fuse.sshfs`), or a name
    /// derived from `statfs`'s magic number when the mount table does not list it.
    pub fs_type: String,
    /// What is mounted (`/dev/vda`, `server:/export`, `user@host:/dir`).
    pub source: String,
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// The mount's options and its file system's options, together.
    pub options: Vec<String>,
}

/// Whether a volume can carry a shared data directory, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// It can: the reason, for the log.
    Coherent(String),
    /// It cannot: what breaks, and what it would take.
    Refused(String),
}

impl Volume {
    /// The volume `dir` is on: where it does not exist yet, the volume of its nearest
    /// ancestor that does (where it would be made).
    pub fn of(dir: &Path) -> Result<Volume> {
        let existing = dir
            .ancestors()
            .find(|a| !a.as_os_str().is_empty() && a.exists())
            .unwrap_or(Path::new("."));
        let dir = existing
            .canonicalize()
            .map_err(|e| Error::io(format!("resolving {}", existing.display()), e))?;
        let magic = statfs_magic(&dir)?;
        let dev = std::fs::metadata(&dir)
            .map_err(|e| Error::io(format!("reading {}", dir.display()), e))?
            .dev();
        let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let found = parse_mountinfo(&table)
            .into_iter()
            .filter(|m| m.dev == (libc::major(dev), libc::minor(dev)))
            .filter(|m| dir.starts_with(&m.volume.mount_point))
            .max_by_key(|m| m.volume.mount_point.as_os_str().len());
        Ok(match found {
            Some(m) => m.volume,
            None => Volume {
                fs_type: magic_name(magic).to_string(),
                source: String::new(),
                mount_point: PathBuf::new(),
                options: Vec::new(),
            },
        })
    }

    /// Whether the volume is mounted with option `name` (`sync`, `nocto`).
    fn has(&self, name: &str) -> bool {
        self.options.iter().any(|o| o == name)
    }

    /// Judges whether two instances can share a data directory on this volume.
    pub fn verdict(&self) -> Verdict {
        let t = self.fs_type.as_str();
        if LOCAL.contains(&t) {
            return Verdict::Coherent(format!(
                "{t} is a local file system: instances on this host share one page cache"
            ));
        }
        if let Some(reason) = CLUSTER.iter().find(|(name, _)| *name == t).map(|(_, r)| r) {
            return Verdict::Coherent(format!("{t}: {reason}"));
        }
        if t == "nfs" || t == "nfs4" {
            if self.has("nocto") {
                return Verdict::Refused(format!(
                    "{t} is mounted with nocto: an open does not revalidate a file, so a standby can read a renewal of .lease late by up to the attribute cache's timeout; mount it without nocto (close-to-open is NFS's default) and with sync"
                ));
            }
            if !(self.has("sync") || self.has("noac")) {
                return Verdict::Refused(format!(
                    "{t} is mounted without sync: a write stays in this client's page cache until it is flushed, which can be after a paused or killed holder lost the lease, over records the new holder wrote at the same place; mount it with sync (close-to-open on, NFS's default)"
                ));
            }
            return Verdict::Coherent(format!(
                "{t} with close-to-open consistency and synchronous writes: each open revalidates the file with the server, and a write is on the server before the call returns"
            ));
        }
        if t == "fuse" || t.starts_with("fuse.") || t == "fuseblk" {
            return Verdict::Refused(format!(
                "{t} is a FUSE mount: its client may serve cached attributes, names and data for as long as it likes and queue writes, so a standby can read a stale .lease and take over while the holder still acknowledges"
            ));
        }
        Verdict::Refused(format!(
            "{t} is not a file system whose caches are known to be coherent between hosts"
        ))
    }

    /// Checks that `dir` can be shared by `role`: refuses, naming the file system, the
    /// requirement and the setting that overrides the check, unless its type is among
    /// `trusted`.
    pub fn check_shared(dir: &Path, role: &str, trusted: &[String]) -> Result<Volume> {
        let volume = Volume::of(dir)?;
        let shown = volume.describe();
        match volume.verdict() {
            Verdict::Coherent(why) => log::info!("{role}: data directory on {shown}: {why}"),
            Verdict::Refused(why) if trusted.contains(&volume.fs_type) => {
                log::warn!(
                    "{role}: data directory on {shown}: {why}; starting anyway because {TRUST_SETTING} names {}",
                    volume.fs_type
                )
            }
            Verdict::Refused(why) => {
                return Err(Error::unprocessable(format!(
                    "{role}: the data directory {} is on {shown}, which cannot be shared safely: {why}. A {role} needs a local file system (instances on one host), NFS mounted with sync and close-to-open, or a cluster file system (CephFS, GFS2, OCFS2, Lustre, GPFS): see docs/high-availability.md. {TRUST_SETTING}={} starts it anyway, on purpose",
                    dir.display(),
                    volume.fs_type
                )));
            }
        }
        Ok(volume)
    }

    /// The volume for a message: its type, source and mount point.
    fn describe(&self) -> String {
        if self.source.is_empty() {
            return self.fs_type.clone();
        }
        format!(
            "{} ({} at {})",
            self.fs_type,
            self.source,
            self.mount_point.display()
        )
    }
}

/// File systems of one host: two instances on them are two processes of one kernel.
const LOCAL: &[&str] = &[
    "ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "zfs", "bcachefs", "jfs", "reiserfs", "nilfs2",
    "tmpfs", "ramfs", "overlay", "vfat", "exfat", "ntfs3", "hfsplus",
];

/// Cluster file systems whose caches the cluster keeps coherent, and why.
const CLUSTER: &[(&str, &str)] = &[
    (
        "ceph",
        "CephFS's capabilities make a client flush its writes before another reads, and a client that stops answering is evicted and blocklisted",
    ),
    (
        "gfs2",
        "its lock manager keeps the nodes' caches coherent and the cluster fences a node that stops answering",
    ),
    (
        "ocfs2",
        "its lock manager keeps the nodes' caches coherent and the cluster fences a node that stops answering",
    ),
    (
        "lustre",
        "its extent locks make a client flush its writes before another reads, and a client that stops answering is evicted",
    ),
    (
        "gpfs",
        "its token manager keeps the nodes' caches coherent and expels a node that stops answering",
    ),
];

/// One line of the mount table: the device it is, and the volume.
struct Mount {
    dev: (u32, u32),
    volume: Volume,
}

/// The lines of `/proc/self/mountinfo` (proc(5)): `id parent major:minor root mountpoint
/// options [optional fields] - fstype source superoptions`.
fn parse_mountinfo(table: &str) -> Vec<Mount> {
    table
        .lines()
        .filter_map(|line| {
            let (before, after) = line.split_once(" - ")?;
            let fields: Vec<&str> = before.split(' ').collect();
            let (major, minor) = fields.get(2)?.split_once(':')?;
            let mount_point = unescape(fields.get(4)?);
            let mut options: Vec<String> = fields.get(5)?.split(',').map(str::to_string).collect();
            let mut rest = after.split(' ');
            let fs_type = unescape(rest.next()?);
            let source = unescape(rest.next().unwrap_or_default());
            options.extend(
                rest.next()
                    .unwrap_or_default()
                    .split(',')
                    .map(str::to_string),
            );
            Some(Mount {
                dev: (major.parse().ok()?, minor.parse().ok()?),
                volume: Volume {
                    fs_type,
                    source,
                    mount_point: PathBuf::from(mount_point),
                    options,
                },
            })
        })
        .collect()
}

/// The mount table's octal escapes (`\040` for a space) undone.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal.and_then(|d| u8::from_str_radix(std::str::from_utf8(d).ok()?, 8).ok()) {
            Some(b) => {
                out.push(b);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `statfs`'s `f_type` of `dir`.
fn statfs_magic(dir: &Path) -> Result<i64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| Error::unprocessable(format!("{} holds a NUL byte", dir.display())))?;
    // SAFETY: statfs fills the zeroed struct it is given; the path is NUL-terminated.
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statfs(path.as_ptr(), &mut stat) } != 0 {
        return Err(Error::io(
            format!("statfs of {}", dir.display()),
            std::io::Error::last_os_error(),
        ));
    }
    #[allow(clippy::unnecessary_cast)]
    Ok(stat.f_type as i64)
}

/// The name of a file system by its `statfs` magic number (linux/magic.h), for a mount
/// the mount table does not list.
fn magic_name(magic: i64) -> &'static str {
    match magic {
        0xEF53 => "ext4",
        0x5846_5342 => "xfs",
        0x9123_683E => "btrfs",
        0x0102_1994 => "tmpfs",
        0x8584_58F6 => "ramfs",
        0x794C_7630 => "overlay",
        0xF2F5_2010 => "f2fs",
        0x2FC1_2FC1 => "zfs",
        0x6969 => "nfs",
        0x6573_5546 => "fuse",
        0x00C3_6400 => "ceph",
        0x0116_1970 => "gfs2",
        0x7461_636F => "ocfs2",
        0x0BD0_0BD0 => "lustre",
        0x4750_4653 => "gpfs",
        0xFE53_4D42 => "smb3",
        0xFF53_4D42 => "cifs",
        0x0102_1997 => "9p",
        _ => "an unknown file system",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn volume(line: &str) -> Volume {
        parse_mountinfo(line).remove(0).volume
    }

    fn refused(line: &str) -> String {
        match volume(line).verdict() {
            Verdict::Refused(why) => why,
            Verdict::Coherent(why) => panic!("{line} was accepted: {why}"),
        }
    }

    fn accepted(line: &str) -> String {
        match volume(line).verdict() {
            Verdict::Coherent(why) => why,
            Verdict::Refused(why) => panic!("{line} was refused: {why}"),
        }
    }

    #[test]
    fn local_and_cluster_file_systems_are_accepted() {
        accepted("27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard");
        accepted("30 25 0:27 / /dev/shm rw,relatime - tmpfs tmpfs rw,size=24683772k");
        accepted("40 1 0:50 / / rw - overlay overlay rw,lowerdir=/a,upperdir=/b");
        let ceph =
            accepted("88 27 0:61 / /mnt/cephfs rw,relatime - ceph 10.0.0.1:6789:/ rw,name=admin");
        assert!(ceph.contains("blocklisted"), "{ceph}");
    }

    #[test]
    fn nfs_needs_close_to_open_and_synchronous_writes() {
        let plain = refused(
            "90 27 0:70 / /mnt/nfs rw,relatime - nfs4 srv:/export rw,vers=4.2,hard,proto=tcp,timeo=600",
        );
        assert!(plain.contains("without sync"), "{plain}");
        let nocto = refused(
            "90 27 0:70 / /mnt/nfs rw,sync,relatime - nfs srv:/export rw,sync,vers=3,nocto,hard",
        );
        assert!(nocto.contains("nocto"), "{nocto}");
        // `sync` shows among the mount's options or the super block's.
        accepted("90 27 0:70 / /mnt/nfs rw,sync,relatime - nfs4 srv:/export rw,vers=4.2,hard");
        accepted("90 27 0:70 / /mnt/nfs rw,relatime - nfs srv:/export rw,sync,vers=3,hard");
        accepted("90 27 0:70 / /mnt/nfs rw,relatime - nfs srv:/export rw,vers=3,noac,hard");
    }

    #[test]
    fn fuse_network_mounts_and_unknown_ones_are_refused() {
        let sshfs = volume(
            "95 27 0:80 / /mnt/a rw,nosuid,nodev,relatime - fuse.sshfs me@127.0.0.1:/srv/x rw,user_id=0,group_id=0",
        );
        assert_eq!(sshfs.fs_type, "fuse.sshfs");
        assert_eq!(sshfs.source, "me@127.0.0.1:/srv/x");
        assert!(matches!(sshfs.verdict(), Verdict::Refused(w) if w.contains("FUSE")));
        refused("96 27 0:81 / /mnt/b rw - fuse.s3fs s3fs rw");
        refused("97 27 0:82 / /mnt/c rw - cifs //srv/share rw,cache=strict");
        refused("98 27 0:83 / /mnt/d rw - 9p share rw,trans=virtio");
    }

    #[test]
    fn escaped_mount_points_are_read_back() {
        let v = volume("95 27 0:80 / /mnt/with\\040space rw - fuse.sshfs a@b:/c rw");
        assert_eq!(v.mount_point, PathBuf::from("/mnt/with space"));
    }

    #[test]
    fn this_machines_temporary_directory_is_found_in_the_mount_table() {
        let dir = tempfile::tempdir().unwrap();
        let v = Volume::of(dir.path()).unwrap();
        assert!(!v.source.is_empty(), "{v:?}");
        assert!(
            dir.path()
                .canonicalize()
                .unwrap()
                .starts_with(&v.mount_point)
        );
    }

    #[test]
    fn a_refusal_names_the_file_system_the_requirement_and_the_override() {
        // The check itself, on a type this machine cannot mount: judged as it would be.
        let v = volume("95 27 0:80 / /mnt/a rw - fuse.sshfs me@h:/x rw");
        let Verdict::Refused(why) = v.verdict() else {
            panic!("accepted")
        };
        assert!(why.contains("fuse.sshfs"), "{why}");
        // On this machine's own temporary directory (local), the check passes for every
        // role, and with nothing trusted.
        let dir = tempfile::tempdir().unwrap();
        for role in ["PRIMARY", "SECONDARY", "REPLICA"] {
            Volume::check_shared(dir.path(), role, &[]).unwrap();
        }
    }
}
