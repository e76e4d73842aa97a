//! A FUSE file system for power-cut tests: it keeps every file in memory, remembers what
//! has not been synced, and on [`PowerFs::cut`] forgets it, as a machine losing power does.
//!
//! File data is written through at once (readers and memory maps see it), but every write
//! since the file's last `fsync`/`fdatasync` keeps an undo record (the bytes it overwrote
//! and the length before it). A directory's entries (creations, renames, unlinks) are
//! durable only once the directory itself is fsynced. A cut undoes every unsynced write,
//! in reverse order, and puts every directory back to its last synced entries; files no
//! directory names any more are gone. A torn cut keeps, per file, a prefix of its unsynced
//! writes in order and a part of the next one — or its length with zeros in it, as when a
//! file's size reached the disk and its data did not.
//!
//! After a cut every operation fails with EIO until the file system is mounted again
//! ([`PowerFs::mount`] on the same state), so the process that was running cannot write
//! anything more, and a restarted one sees only what survived.

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use fuser::{
    BackgroundSession, Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags,
    Generation, INodeNo, LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request,
    TimeOrNow, WriteFlags,
};

const ROOT: u64 = 1;
const TTL: Duration = Duration::from_secs(1);

/// An unsynced change of a file's data: enough to undo it, or to keep part of it.
enum Undo {
    /// A write of `len` bytes at `offset`; `old` are the bytes it overwrote (those below
    /// `old_len`, the length before it).
    Write {
        offset: u64,
        len: u64,
        old: Vec<u8>,
        old_len: u64,
    },
    /// A change of the length to `size`; `cut` are the bytes it cut off.
    Truncate {
        size: u64,
        old_len: u64,
        cut: Vec<u8>,
    },
}

enum Node {
    File {
        data: Vec<u8>,
        undo: Vec<Undo>,
    },
    Dir {
        entries: BTreeMap<OsString, u64>,
        durable: BTreeMap<OsString, u64>,
    },
}

struct Inode {
    node: Node,
    perm: u16,
    mtime: SystemTime,
}

/// How a cut treats the unsynced writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    /// Every unsynced write is gone.
    Clean,
    /// A prefix of each file's unsynced writes survives, the next one in part (or as
    /// zeros), chosen by this seed.
    Torn(u64),
}

struct State {
    inodes: HashMap<u64, Inode>,
    next_ino: u64,
    /// Set by a cut: every operation fails until the next mount.
    dead: bool,
    /// Fsyncs left before an armed cut ([`PowerFs::cut_after_syncs`]), and its kind.
    armed: Option<(u64, Cut)>,
    /// A cut armed on the fsyncs of files whose names end so
    /// ([`PowerFs::cut_at_sync_of`]).
    armed_named: Option<NamedCut>,
    cuts: u64,
}

/// A cut armed on the fsyncs of some files: those whose names end with `suffix` and
/// whose data ends with `ending`; `left` fsyncs of them until the cut, made `how`.
#[derive(Clone)]
struct NamedCut {
    suffix: String,
    ending: Vec<u8>,
    left: u64,
    how: Cut,
}

/// The shared state of the file system; it outlives mounts, as a disk outlives boots.
#[derive(Clone)]
pub struct PowerFs {
    state: Arc<Mutex<State>>,
}

/// One mount of a [`PowerFs`]; unmounted when dropped.
pub struct Mounted {
    session: Option<BackgroundSession>,
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(session) = self.session.take() {
            let _ = session.umount_and_join();
        }
    }
}

/// A small xorshift generator (seeded by the tests, so a failing run can be repeated).
pub struct Rng(pub u64);
impl Rng {
    /// The next number.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
}

impl PowerFs {
    /// An empty file system (its root directory is durable).
    pub fn new() -> PowerFs {
        let mut inodes = HashMap::new();
        inodes.insert(ROOT, dir_inode());
        PowerFs {
            state: Arc::new(Mutex::new(State {
                inodes,
                next_ino: ROOT + 1,
                dead: false,
                armed: None,
                armed_named: None,
                cuts: 0,
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// [`PowerFs::mount`] for a test that runs with FUSE (see `tests/common/tools.rs`): a
    /// missing FUSE, or a mount it refuses, is the test's failure.
    pub fn mount_for_test(&self, at: &Path) -> Mounted {
        crate::common::tools::require(crate::common::tools::Tool::Fuse);
        self.mount(at).unwrap_or_else(|e| {
            panic!("FUSE is here but mounting the power-cut file system failed: {e}")
        })
    }

    /// Mounts the file system at `at` (an empty directory); operations work again after a
    /// cut. Fails when FUSE is not available here.
    pub fn mount(&self, at: &Path) -> std::io::Result<Mounted> {
        self.lock().dead = false;
        let mut config = Config::default();
        config.mount_options = vec![MountOption::FSName("halflife-powercut".into())];
        config.n_threads = Some(4);
        let session = fuser::spawn_mount(Handler { fs: self.clone() }, at, &config)?;
        Ok(Mounted {
            session: Some(session),
        })
    }

    /// Cuts the power now: unsynced data and directory changes are lost (see [`Cut`]),
    /// and every operation fails until the next mount.
    pub fn cut(&self, how: Cut) {
        self.lock().cut(how);
    }

    /// Arms a cut that happens inside the `n`-th fsync from now (instead of it), so it
    /// lands in the middle of work at an instant the work itself decides.
    pub fn cut_after_syncs(&self, n: u64, how: Cut) {
        self.lock().armed = Some((n.max(1), how));
    }

    /// Arms a cut that happens inside the `n`-th fsync from now of a file whose name ends
    /// with `suffix` (`.blk`: a block being rewritten), instead of it.
    pub fn cut_at_sync_of(&self, suffix: &str, n: u64, how: Cut) {
        self.cut_at_sync_of_ending(suffix, b"", n, how);
    }

    /// [`PowerFs::cut_at_sync_of`], counting only the fsyncs of such files whose data
    /// ends with `ending` (a log whose last bytes are a seal trailer's footer).
    pub fn cut_at_sync_of_ending(&self, suffix: &str, ending: &[u8], n: u64, how: Cut) {
        self.lock().armed_named = Some(NamedCut {
            suffix: suffix.to_string(),
            ending: ending.to_vec(),
            left: n.max(1),
            how,
        });
    }

    /// Whether the power is off (a cut happened since the last mount).
    pub fn is_cut(&self) -> bool {
        self.lock().dead
    }

    /// Cuts made so far.
    pub fn cuts(&self) -> u64 {
        self.lock().cuts
    }
}

impl Default for PowerFs {
    fn default() -> Self {
        PowerFs::new()
    }
}

fn dir_inode() -> Inode {
    Inode {
        node: Node::Dir {
            entries: BTreeMap::new(),
            durable: BTreeMap::new(),
        },
        perm: 0o755,
        mtime: SystemTime::now(),
    }
}

impl State {
    fn cut(&mut self, how: Cut) {
        if self.dead {
            return;
        }
        self.dead = true;
        self.armed = None;
        self.armed_named = None;
        self.cuts += 1;
        let mut rng = match how {
            Cut::Clean => None,
            Cut::Torn(seed) => Some(Rng(seed | 1)),
        };
        for inode in self.inodes.values_mut() {
            match &mut inode.node {
                Node::File { data, undo } => {
                    let undo = std::mem::take(undo);
                    // Writes `..keep` reached the disk, write `keep` in part.
                    let keep = rng.as_mut().map_or(0, |r| r.below(undo.len() as u64 + 1)) as usize;
                    for (i, change) in undo.iter().enumerate().rev() {
                        if i < keep {
                            break;
                        }
                        let part = match (&mut rng, i == keep, change) {
                            (Some(r), true, Undo::Write { len, .. }) => {
                                Some((r.below(len + 1), r.below(2) == 0))
                            }
                            _ => None,
                        };
                        undo_change(data, change, part);
                    }
                }
                Node::Dir { entries, durable } => *entries = durable.clone(),
            }
        }
        // Whatever no durable directory names is gone.
        let mut reachable = HashSet::new();
        let mut todo = vec![ROOT];
        while let Some(ino) = todo.pop() {
            if !reachable.insert(ino) {
                continue;
            }
            if let Some(Inode {
                node: Node::Dir { entries, .. },
                ..
            }) = self.inodes.get(&ino)
            {
                todo.extend(entries.values().copied());
            }
        }
        self.inodes.retain(|ino, _| reachable.contains(ino));
    }

    fn alive(&self) -> Result<(), Errno> {
        if self.dead { Err(Errno::EIO) } else { Ok(()) }
    }

    fn attr(&self, ino: u64) -> Result<FileAttr, Errno> {
        let inode = self.inodes.get(&ino).ok_or(Errno::ENOENT)?;
        let (kind, size, nlink) = match &inode.node {
            Node::File { data, .. } => (FileType::RegularFile, data.len() as u64, 1),
            Node::Dir { .. } => (FileType::Directory, 0, 2),
        };
        Ok(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: inode.mtime,
            mtime: inode.mtime,
            ctime: inode.mtime,
            crtime: inode.mtime,
            kind,
            perm: inode.perm,
            nlink,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        })
    }

    fn dir_mut(&mut self, ino: u64) -> Result<&mut BTreeMap<OsString, u64>, Errno> {
        match self.inodes.get_mut(&ino).map(|i| &mut i.node) {
            Some(Node::Dir { entries, .. }) => Ok(entries),
            Some(_) => Err(Errno::ENOTDIR),
            None => Err(Errno::ENOENT),
        }
    }

    fn lookup(&self, parent: u64, name: &OsStr) -> Result<u64, Errno> {
        match self.inodes.get(&parent).map(|i| &i.node) {
            Some(Node::Dir { entries, .. }) => entries.get(name).copied().ok_or(Errno::ENOENT),
            Some(_) => Err(Errno::ENOTDIR),
            None => Err(Errno::ENOENT),
        }
    }

    fn add(&mut self, parent: u64, name: &OsStr, inode: Inode) -> Result<u64, Errno> {
        self.alive()?;
        if self.lookup(parent, name).is_ok() {
            return Err(Errno::EEXIST);
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        self.inodes.insert(ino, inode);
        self.dir_mut(parent)?.insert(name.to_os_string(), ino);
        Ok(ino)
    }

    fn write(&mut self, ino: u64, offset: u64, bytes: &[u8]) -> Result<(), Errno> {
        self.alive()?;
        let Some(Inode {
            node: Node::File { data, undo },
            mtime,
            ..
        }) = self.inodes.get_mut(&ino)
        else {
            return Err(Errno::EBADF);
        };
        let old_len = data.len() as u64;
        let end = offset + bytes.len() as u64;
        let overwritten = offset.min(old_len) as usize..end.min(old_len) as usize;
        undo.push(Undo::Write {
            offset,
            len: bytes.len() as u64,
            old: data[overwritten].to_vec(),
            old_len,
        });
        if (data.len() as u64) < end {
            data.resize(end as usize, 0);
        }
        data[offset as usize..end as usize].copy_from_slice(bytes);
        *mtime = SystemTime::now();
        Ok(())
    }

    fn truncate(&mut self, ino: u64, size: u64) -> Result<(), Errno> {
        self.alive()?;
        let Some(Inode {
            node: Node::File { data, undo },
            ..
        }) = self.inodes.get_mut(&ino)
        else {
            return Err(Errno::EISDIR);
        };
        let old_len = data.len() as u64;
        let kept = size.min(old_len) as usize;
        undo.push(Undo::Truncate {
            size,
            old_len,
            cut: data[kept..].to_vec(),
        });
        data.resize(size as usize, 0);
        Ok(())
    }

    /// Whether file `ino`'s data ends with `ending`.
    fn ends_with(&self, ino: u64, ending: &[u8]) -> bool {
        match self.inodes.get(&ino).map(|i| &i.node) {
            Some(Node::File { data, .. }) => data.ends_with(ending),
            _ => ending.is_empty(),
        }
    }

    /// Whether a directory names file `ino` with a name ending in `suffix`.
    fn is_named(&self, ino: u64, suffix: &str) -> bool {
        self.inodes.values().any(|inode| match &inode.node {
            Node::Dir { entries, .. } => entries
                .iter()
                .any(|(name, child)| *child == ino && name.to_string_lossy().ends_with(suffix)),
            Node::File { .. } => false,
        })
    }

    /// An fsync of a file (its data and size) or a directory (its entries). An armed cut
    /// happens instead of the sync that brings its count to zero.
    fn sync(&mut self, ino: u64) -> Result<(), Errno> {
        self.alive()?;
        if let Some((left, how)) = self.armed {
            if left <= 1 {
                self.cut(how);
                return Err(Errno::EIO);
            }
            self.armed = Some((left - 1, how));
        }
        if let Some(armed) = self.armed_named.clone()
            && self.is_named(ino, &armed.suffix)
            && self.ends_with(ino, &armed.ending)
        {
            if armed.left <= 1 {
                self.armed_named = None;
                self.cut(armed.how);
                return Err(Errno::EIO);
            }
            self.armed_named = Some(NamedCut {
                left: armed.left - 1,
                ..armed
            });
        }
        match self.inodes.get_mut(&ino).map(|i| &mut i.node) {
            Some(Node::File { undo, .. }) => undo.clear(),
            Some(Node::Dir { entries, durable }) => *durable = entries.clone(),
            None => return Err(Errno::ENOENT),
        }
        Ok(())
    }
}

/// Undoes one change; with `part` = (bytes kept, zero the rest instead of cutting it)
/// keeps a torn prefix of a write.
fn undo_change(data: &mut Vec<u8>, change: &Undo, part: Option<(u64, bool)>) {
    match change {
        Undo::Truncate { size, old_len, cut } => {
            data.resize(*old_len as usize, 0);
            if size < old_len {
                data[*size as usize..*old_len as usize].copy_from_slice(cut);
            }
        }
        Undo::Write {
            offset,
            len,
            old,
            old_len,
        } => {
            let (kept, zero_fill) = part.unwrap_or((0, false));
            let from = offset + kept.min(*len);
            for (i, byte) in old.iter().enumerate() {
                let pos = offset + i as u64;
                if pos >= from {
                    data[pos as usize] = *byte;
                }
            }
            if zero_fill {
                let end = (offset + len).min(data.len() as u64);
                for pos in from.max(*old_len)..end {
                    data[pos as usize] = 0;
                }
            } else {
                data.resize((*old_len).max(from) as usize, 0);
            }
        }
    }
}

/// The FUSE side: every call takes the state lock once.
struct Handler {
    fs: PowerFs,
}

impl Filesystem for Handler {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let st = self.fs.lock();
        let r = st
            .alive()
            .and_then(|_| st.lookup(parent.0, name))
            .and_then(|ino| st.attr(ino));
        match r {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let st = self.fs.lock();
        let r = st.alive().and_then(|_| st.attr(ino.0));
        match r {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut st = self.fs.lock();
        let r = st
            .alive()
            .and_then(|_| match size {
                Some(size) => st.truncate(ino.0, size),
                None => Ok(()),
            })
            .and_then(|_| {
                if let (Some(mode), Some(inode)) = (mode, st.inodes.get_mut(&ino.0)) {
                    inode.perm = (mode & 0o7777) as u16;
                }
                st.attr(ino.0)
            });
        match r {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let mut st = self.fs.lock();
        let r = st
            .add(parent.0, name, dir_inode())
            .and_then(|ino| st.attr(ino));
        match r {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let mut st = self.fs.lock();
        let inode = Inode {
            node: Node::File {
                data: Vec::new(),
                undo: Vec::new(),
            },
            perm: (mode & 0o7777) as u16,
            mtime: SystemTime::now(),
        };
        let r = st.add(parent.0, name, inode).and_then(|ino| st.attr(ino));
        match r {
            Ok(a) => reply.created(&TTL, &a, Generation(0), FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut st = self.fs.lock();
        let r = st.alive().and_then(|_| {
            st.dir_mut(parent.0)?
                .remove(name)
                .map(|_| ())
                .ok_or(Errno::ENOENT)
        });
        match r {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut st = self.fs.lock();
        let r = st.alive().and_then(|_| {
            let ino = st.lookup(parent.0, name)?;
            match st.inodes.get(&ino).map(|i| &i.node) {
                Some(Node::Dir { entries, .. }) if !entries.is_empty() => {
                    return Err(Errno::ENOTEMPTY);
                }
                Some(Node::Dir { .. }) => {}
                _ => return Err(Errno::ENOTDIR),
            }
            st.dir_mut(parent.0)?.remove(name);
            Ok(())
        });
        match r {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        _flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let mut st = self.fs.lock();
        let r = st.alive().and_then(|_| {
            let ino = st.lookup(parent.0, name)?;
            if let Ok(existing) = st.lookup(newparent.0, newname)
                && let Some(Inode {
                    node: Node::Dir { entries, .. },
                    ..
                }) = st.inodes.get(&existing)
                && !entries.is_empty()
            {
                return Err(Errno::ENOTEMPTY);
            }
            st.dir_mut(parent.0)?.remove(name);
            st.dir_mut(newparent.0)?.insert(newname.to_os_string(), ino);
            Ok(())
        });
        match r {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let st = self.fs.lock();
        let r = st.alive().and_then(|_| st.attr(ino.0));
        match r {
            Ok(_) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let st = self.fs.lock();
        if let Err(e) = st.alive() {
            return reply.error(e);
        }
        match st.inodes.get(&ino.0).map(|i| &i.node) {
            Some(Node::File { data, .. }) => {
                let start = (offset as usize).min(data.len());
                let end = (start + size as usize).min(data.len());
                reply.data(&data[start..end]);
            }
            Some(_) => reply.error(Errno::EISDIR),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let r = self.fs.lock().write(ino.0, offset, data);
        match r {
            Ok(_) => reply.written(data.len() as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let r = self.fs.lock().sync(ino.0);
        match r {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let st = self.fs.lock();
        if let Err(e) = st.alive() {
            return reply.error(e);
        }
        let entries = match st.inodes.get(&ino.0).map(|i| &i.node) {
            Some(Node::Dir { entries, .. }) => entries,
            Some(_) => return reply.error(Errno::ENOTDIR),
            None => return reply.error(Errno::ENOENT),
        };
        let mut listing = vec![
            (ino.0, FileType::Directory, OsString::from(".")),
            (ROOT, FileType::Directory, OsString::from("..")),
        ];
        for (name, child) in entries {
            let kind = match st.inodes.get(child).map(|i| &i.node) {
                Some(Node::Dir { .. }) => FileType::Directory,
                _ => FileType::RegularFile,
            };
            listing.push((*child, kind, name.clone()));
        }
        for (i, (child, kind, name)) in listing.into_iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(child), (i + 1) as u64, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let r = self.fs.lock().sync(ino.0);
        match r {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // Plenty of room: 1 TiB in 4 KiB blocks.
        let blocks = 1u64 << 28;
        reply.statfs(blocks, blocks, blocks, 1 << 20, 1 << 20, 4096, 255, 4096);
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        reply.ok();
    }
}
