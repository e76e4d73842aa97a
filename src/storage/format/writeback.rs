//! Paced writeback of a large file being written: the kernel is asked to start writing
//! each chunk to the device as soon as it is complete, and the copy waits for the chunk
//! before it, so at most two chunks are dirty at any instant.
//!
//! Why: a block file (64 MB by default) written in one go and fsynced at the end puts
//! all of it in the device's queue at once, and on ext4 a foreground `fdatasync` (a
//! writer's log) whose journal commit meets that data waits behind it: a camera's write
//! took 26 ms instead of 2 while a seal flushed. Written back a chunk at a time, the
//! seal's final fsync has almost nothing left to write, and a foreground sync waits for
//! one chunk at most. The durability of the file is unchanged: the caller still fsyncs
//! it before anything names it (`sync_file_range` alone promises nothing about a power
//! cut), and a failed request here is ignored, since that final fsync reports the error.

use std::fs::File;
use std::os::fd::AsRawFd;

/// Bytes of a file between two writeback requests.
const CHUNK: u64 = 1 << 20;

/// Where the writeback of one file being written stands.
#[derive(Debug, Default)]
pub(crate) struct Writeback {
    /// Writeback was requested up to here.
    requested: u64,
    /// Writeback was waited for up to here.
    waited: u64,
}

impl Writeback {
    /// Whether the file, written up to `pos`, has a complete chunk not yet requested.
    pub(crate) fn due(&self, pos: u64) -> bool {
        pos >= self.requested + CHUNK
    }

    /// Waits for the chunk requested last time and starts the writeback of `file` up to
    /// `pos` (its bytes must have been handed to the kernel: a buffered writer flushed).
    pub(crate) fn start(&mut self, file: &File, pos: u64) {
        let fd = file.as_raw_fd();
        // SAFETY: `fd` is an open descriptor for the whole call; sync_file_range reads
        // only its plain arguments.
        unsafe {
            if self.requested > self.waited {
                libc::sync_file_range(
                    fd,
                    self.waited as libc::off64_t,
                    (self.requested - self.waited) as libc::off64_t,
                    libc::SYNC_FILE_RANGE_WAIT_BEFORE
                        | libc::SYNC_FILE_RANGE_WRITE
                        | libc::SYNC_FILE_RANGE_WAIT_AFTER,
                );
            }
            libc::sync_file_range(
                fd,
                self.requested as libc::off64_t,
                (pos - self.requested) as libc::off64_t,
                libc::SYNC_FILE_RANGE_WRITE,
            );
        }
        self.waited = self.requested;
        self.requested = pos;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn requests_each_complete_chunk_once_and_keeps_the_bytes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        let mut file = File::create(&path).expect("create");
        let mut wb = Writeback::default();
        let mut pos = 0u64;
        let chunk = vec![7u8; 300 << 10];
        let mut starts = 0;
        for _ in 0..10 {
            file.write_all(&chunk).expect("write");
            pos += chunk.len() as u64;
            if wb.due(pos) {
                wb.start(&file, pos);
                starts += 1;
            }
        }
        assert_eq!(starts, 2, "3,000 KiB: two complete 1 MiB chunks");
        assert!(!wb.due(pos));
        file.sync_all().expect("sync");
        assert_eq!(std::fs::read(&path).expect("read").len() as u64, pos);
    }
}
