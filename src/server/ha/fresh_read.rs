//! Reading a small file another host rewrites (the lease) past this host's caches.
//!
//! A plain read may be answered from the page cache, which a network file system keeps for
//! as long as its attribute cache says the file did not change (seconds to a minute): a
//! standby would go on reading a renewal it already saw while the holder renews. Opened
//! with `O_DIRECT`, the read bypasses the page cache and asks the file system (the server,
//! for NFS and FUSE); where `O_DIRECT` is not supported, the plain read is all there is.
//! `benches/lease_read.rs` measures what each costs.

use std::fs::OpenOptions;
use std::io::Read;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

/// The most read of such a file: a lease is a few hundred bytes.
pub const MAX_FRESH_READ: usize = 64 << 10;

/// `O_DIRECT` wants its buffer, offset and length aligned to the device's block size; a
/// page is aligned enough for every block size Linux supports.
const ALIGN: usize = 4096;

/// The bytes of `path`, read past the page cache where the file system allows it (at most
/// [`MAX_FRESH_READ`]; a larger file is an `InvalidData` error).
pub fn read_fresh(path: &Path) -> std::io::Result<Vec<u8>> {
    match read_direct(path) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => read_plain(path),
        answer => answer,
    }
}

/// One aligned `pread` of a file opened with `O_DIRECT`.
fn read_direct(path: &Path) -> std::io::Result<Vec<u8>> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)?;
    let mut buffer = vec![0u8; MAX_FRESH_READ + ALIGN];
    let start = buffer.as_ptr().align_offset(ALIGN);
    let window = buffer
        .get_mut(start..start + MAX_FRESH_READ)
        .ok_or_else(|| std::io::Error::other("aligning the read buffer"))?;
    // One read of the whole window: a second one would start at an unaligned offset.
    let read = file.read_at(window, 0)?;
    if read == MAX_FRESH_READ {
        return Err(too_large(path));
    }
    Ok(window[..read].to_vec())
}

fn read_plain(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(MAX_FRESH_READ as u64)
        .read_to_end(&mut bytes)?;
    if bytes.len() == MAX_FRESH_READ {
        return Err(too_large(path));
    }
    Ok(bytes)
}

fn too_large(path: &Path) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!(
            "{} is larger than {MAX_FRESH_READ} bytes, more than a lease",
            path.display()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_latest_bytes_and_bounds_the_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"first").unwrap();
        assert_eq!(read_fresh(&path).unwrap(), b"first");
        std::fs::write(&path, b"second, longer").unwrap();
        assert_eq!(read_fresh(&path).unwrap(), b"second, longer");
        std::fs::write(&path, vec![7u8; MAX_FRESH_READ + 1]).unwrap();
        let e = read_fresh(&path).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData, "{e}");
        assert_eq!(
            read_fresh(&dir.path().join("missing")).unwrap_err().kind(),
            std::io::ErrorKind::NotFound
        );
        // The fallback on its own (tmpfs refused O_DIRECT before Linux 6.6).
        std::fs::write(&path, b"plain").unwrap();
        assert_eq!(read_plain(&path).unwrap(), b"plain");
    }
}
