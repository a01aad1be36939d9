//! Where the in-process drain puts ring units the converter is not ready for: an
//! unnamed file beside the trace, written and read with `O_DIRECT`.
//!
//! While the program keeps every CPU busy the converter defers its work
//! (`recording::inproc_drain`), and the units it has not converted must be kept
//! somewhere. In memory, every 4 KiB of them costs a fresh page — on this VM
//! ~2.5 µs to fault in and zero (`MADV_POPULATE_WRITE`, measured with a 512 MiB
//! buffer) and more under load, half of the drain's CPU time under memcached's
//! load, on the program's CPUs — and the backlog's bound was an eighth of the
//! machine's memory. Written to a file with `O_DIRECT`, the drain's one buffer
//! is reused pass after pass: the kernel pins its pages and the device reads
//! them, no page is allocated and none is copied into the page cache (a 512 MiB
//! write took 0.7–1.6 µs of the writer's CPU a page, in 1 MiB and 128 KiB
//! pieces). The converter reads each extent back when it gets to it and punches
//! it out of the file, so the file holds only what is still to be converted.
//!
//! The file is made with `O_TMPFILE`: nothing is left behind whatever happens to
//! the recorder. A file system that refuses `O_TMPFILE` or `O_DIRECT` (some
//! tmpfs, FUSE and overlay mounts) gets no spill file: the backlog stays in
//! memory, as before.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::prefault::PassBuf;

/// `O_DIRECT`'s alignment of offsets and lengths: the page size covers every
/// logical block size a Linux file system uses for direct I/O.
const ALIGN: usize = 4096;

/// Where one pass's units lie in the spill file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Extent {
    /// Byte offset (a multiple of [`ALIGN`]).
    offset: u64,
    /// Records stored there.
    records: usize,
    /// Bytes the extent takes in the file (the records rounded up to [`ALIGN`]).
    bytes: usize,
}

impl Extent {
    /// Bytes it takes in the file.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }
}

/// The spill file: appended to by the drain, read back by the converter.
pub(crate) struct Spill {
    file: File,
    /// Where the next extent goes.
    end: u64,
}

impl Spill {
    /// An unnamed file for direct I/O in `dir`, or why there cannot be one.
    pub(crate) fn create_in(dir: &Path) -> io::Result<Spill> {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        let path = std::ffi::CString::new(dir.as_os_str().as_bytes())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: a NUL-terminated path; the descriptor is owned by the File below.
        let fd = unsafe {
            libc::open(
                path.as_ptr(),
                libc::O_TMPFILE | libc::O_RDWR | libc::O_DIRECT | libc::O_CLOEXEC,
                0o600,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor just opened and owned by nothing else.
        let file = unsafe { File::from_raw_fd(fd) };
        Ok(Spill { file, end: 0 })
    }

    /// Another handle on the same file, for the converter's reads.
    pub(crate) fn reader(&self) -> io::Result<SpillReader> {
        Ok(SpillReader {
            file: self.file.try_clone()?,
        })
    }

    /// Writes `records` (the whole of `buf`) at the end of the file. The room
    /// between the records' end and the next [`ALIGN`] boundary goes too (it
    /// lies in `buf`'s reservation, see [`PassBuf::aligned_bytes`]); nothing reads
    /// it back. On an error nothing was appended.
    pub(crate) fn write<T: Copy>(&mut self, buf: &PassBuf<T>) -> io::Result<Extent> {
        let (ptr, bytes) = buf.aligned_bytes(ALIGN);
        let extent = Extent {
            offset: self.end,
            records: buf.len(),
            bytes,
        };
        // SAFETY: `ptr..ptr + bytes` lies in `buf`'s mapping (aligned_bytes),
        // which is not written while this call borrows it.
        whole_direct_io("write", extent, |done| unsafe {
            libc::pwrite(
                self.file.as_raw_fd(),
                ptr.add(done).cast(),
                bytes - done,
                (extent.offset + done as u64) as libc::off_t,
            )
        })?;
        self.end += bytes as u64;
        Ok(extent)
    }
}

/// The converter's side of the spill file.
pub(crate) struct SpillReader {
    file: File,
}

impl SpillReader {
    /// Reads `extent` back into `buf` (replacing what it held) and frees its
    /// blocks in the file.
    pub(crate) fn read<T: Copy>(&self, extent: Extent, buf: &mut PassBuf<T>) -> io::Result<()> {
        buf.clear();
        if !buf.reserve_total(extent.bytes / std::mem::size_of::<T>()) {
            return Err(io::Error::from(io::ErrorKind::OutOfMemory));
        }
        let ptr = buf.spare_aligned(extent.bytes, ALIGN);
        // SAFETY: `ptr..ptr + bytes` is reserved room of `buf` (spare_aligned).
        whole_direct_io("read", extent, |done| unsafe {
            libc::pread(
                self.file.as_raw_fd(),
                ptr.add(done).cast(),
                extent.bytes - done,
                (extent.offset + done as u64) as libc::off_t,
            )
        })?;
        // SAFETY: the first `records` records were just read in whole (they were
        // written from initialized records of the same type).
        unsafe { buf.set_len(extent.records) };
        // Freeing the blocks is an economy only: a file system that cannot punch
        // holes keeps them until the file is closed.
        // SAFETY: fallocate on our own descriptor.
        unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                extent.offset as libc::off_t,
                extent.bytes as libc::off_t,
            )
        };
        Ok(())
    }
}

/// Runs `io(done)` (a `pwrite` or `pread` of what is left of `extent` after
/// `done` bytes) until the whole extent is done, again when interrupted. A
/// direct transfer that stops short off a block boundary cannot be resumed: an
/// error naming `what`, the offset and the extent.
fn whole_direct_io(
    what: &str,
    extent: Extent,
    mut io: impl FnMut(usize) -> isize,
) -> io::Result<()> {
    let mut done = 0;
    while done < extent.bytes {
        let n = io(done);
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 || !(n as usize).is_multiple_of(ALIGN) {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "spill file: direct {what} of {n} bytes at offset {} of an extent of {}",
                    extent.offset + done as u64,
                    extent.bytes
                ),
            ));
        }
        done += n as usize;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks the file takes on disk (`st_blocks` counts 512-byte blocks).
    fn allocated(file: &File) -> u64 {
        use std::os::unix::fs::MetadataExt;
        file.metadata().unwrap().blocks() * 512
    }

    #[test]
    fn extents_come_back_as_written_and_leave_the_file_once_read() {
        let dir = std::env::temp_dir();
        let mut spill = match Spill::create_in(&dir) {
            Ok(s) => s,
            Err(e) => {
                eprintln!(
                    "SKIPPED: no O_TMPFILE with O_DIRECT in {}: {e}",
                    dir.display()
                );
                return;
            }
        };
        let reader = spill.reader().unwrap();
        // Lengths that end inside a block, on one, and a single record.
        let lengths = [1usize, 255, 256, 1000, 70_000];
        let mut extents = Vec::new();
        let mut buf = PassBuf::<[u64; 2]>::default();
        let mut next = 0u64;
        for &n in &lengths {
            buf.clear();
            assert!(buf.reserve_total(n));
            let records: Vec<[u64; 2]> = (0..n as u64).map(|i| [next + i, !(next + i)]).collect();
            buf.extend_from_slice(&records);
            extents.push((spill.write(&buf).unwrap(), next));
            next += n as u64;
        }
        let written = allocated(&spill.file);
        assert!(written >= (70_000 * 16) as u64, "{written} bytes allocated");
        let mut back = PassBuf::<[u64; 2]>::default();
        for (&n, &(extent, first)) in lengths.iter().zip(&extents) {
            assert_eq!(extent.offset % ALIGN as u64, 0);
            reader.read(extent, &mut back).unwrap();
            assert_eq!(back.len(), n);
            for (i, r) in back.iter().enumerate() {
                assert_eq!(
                    *r,
                    [first + i as u64, !(first + i as u64)],
                    "record {i} of {n}"
                );
            }
        }
        // Each extent's blocks were punched out as it was read (where the file
        // system can: ext4, xfs, btrfs and tmpfs can).
        assert!(
            allocated(&spill.file) < written / 4,
            "{} bytes still allocated",
            allocated(&spill.file)
        );
    }
}
