//! The bytes of the program's files, read once per recording: launching a
//! program asks of its executable whether it is dynamic, PIE or a sanitizer
//! build, which libraries it needs, where its Rust locks and its memory
//! accesses are — each a whole read of the file (a Rust binary is ~5 MB, and
//! five reads of it were ~8 ms of a 60-ms recording's start).
//!
//! The bytes go into anonymous memory of their own, in huge pages when the file
//! is large: on this kind of VM a first touch of a 4-KiB page costs ~4 µs, so
//! `std::fs::read` of a 4.6-MB Rust binary took ~4.5 ms and its copy into an
//! `Arc<[u8]>` as much again; in 2-MiB pages the read is ~1.8 ms. Mapping the
//! file itself would be cheaper still, but a file truncated while mapped (a
//! `cp` over the program during a hunt) would kill the recorder with `SIGBUS`.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// A file as read, and what says it is still the same file.
struct Read {
    path: PathBuf,
    identity: (u64, u64, u64, Option<SystemTime>),
    bytes: Arc<FileBytes>,
}

/// The last few files read (a hunt reads the same program run after run).
static RECENT: Mutex<Vec<Read>> = Mutex::new(Vec::new());
const KEPT: usize = 4;

/// The whole of the file at `path`, as `std::fs::read` gives it, from memory
/// when it was read before and its device, inode, size and modification time
/// are unchanged (a program rebuilt in place is read again).
pub fn read(path: &Path) -> io::Result<Arc<FileBytes>> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path)?;
    let identity = (meta.dev(), meta.ino(), meta.len(), meta.modified().ok());
    if let Ok(recent) = RECENT.lock() {
        if let Some(read) = recent
            .iter()
            .find(|r| r.path == path && r.identity == identity)
        {
            return Ok(read.bytes.clone());
        }
    }
    let bytes = Arc::new(FileBytes::read(path, meta.len() as usize)?);
    if let Ok(mut recent) = RECENT.lock() {
        recent.retain(|r| r.path != path);
        if recent.len() >= KEPT {
            recent.remove(0);
        }
        recent.push(Read {
            path: path.to_path_buf(),
            identity,
            bytes: bytes.clone(),
        });
    }
    Ok(bytes)
}

/// A file's bytes, in memory mapped for them alone (see the module doc).
pub struct FileBytes {
    start: std::ptr::NonNull<u8>,
    len: usize,
    mapped: usize,
}

// SAFETY: the mapping is owned, written only while it is made, and read-only after.
unsafe impl Send for FileBytes {}
// SAFETY: as above: shared references only read.
unsafe impl Sync for FileBytes {}

/// Files from this size on are read into huge pages.
const HUGE_FROM: usize = 1 << 20;
const HUGE_PAGE: usize = 2 << 20;

impl FileBytes {
    /// Reads the file at `path`, `expected` bytes long by its metadata (a file
    /// that shrank since is read to its end; one that grew, to `expected`).
    fn read(path: &Path, expected: usize) -> io::Result<FileBytes> {
        use std::io::Read;
        let mut file = std::fs::File::open(path)?;
        let round = if expected >= HUGE_FROM {
            HUGE_PAGE
        } else {
            4096
        };
        let mapped = expected.max(1).div_ceil(round) * round;
        // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
        let start = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if start == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let mut bytes = FileBytes {
            start: std::ptr::NonNull::new(start.cast()).expect("mmap gives non-null"),
            len: 0,
            mapped,
        };
        if round == HUGE_PAGE {
            // SAFETY: advice on our own mapping; failure only loses the speed-up.
            unsafe { libc::madvise(start, mapped, libc::MADV_HUGEPAGE) };
        }
        // SAFETY: the mapping is `mapped` >= `expected` bytes, ours alone until returned.
        let buffer = unsafe { std::slice::from_raw_parts_mut(bytes.start.as_ptr(), expected) };
        while bytes.len < expected {
            match file.read(&mut buffer[bytes.len..]) {
                Ok(0) => break,
                Ok(n) => bytes.len += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(bytes)
    }
}

impl std::ops::Deref for FileBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the first `len` bytes of the mapping were written by `read`.
        unsafe { std::slice::from_raw_parts(self.start.as_ptr(), self.len) }
    }
}

impl Drop for FileBytes {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once; no reference outlives `self`.
        unsafe { libc::munmap(self.start.as_ptr().cast(), self.mapped) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file changed in place is read again; an unchanged one comes from memory.
    #[test]
    fn a_changed_file_is_read_again() {
        let dir = std::env::temp_dir().join(format!("ordo-file-bytes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        std::fs::write(&path, b"first").unwrap();
        let first = read(&path).unwrap();
        assert_eq!(&first[..], b"first");
        assert!(Arc::ptr_eq(&first, &read(&path).unwrap()));
        std::fs::write(&path, b"second, longer").unwrap();
        assert_eq!(&read(&path).unwrap()[..], b"second, longer");
        std::fs::write(&path, b"").unwrap();
        assert!(read(&path).unwrap().is_empty());
        // A large file, in huge pages, byte for byte.
        let large: Vec<u8> = (0..5_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &large).unwrap();
        assert!(read(&path).unwrap()[..] == large[..]);
        assert!(read(&dir.join("missing")).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
