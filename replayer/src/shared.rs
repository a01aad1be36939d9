//! The shared page: an anonymous memfd, mapped here and inherited by the program,
//! where the agent maps it too (the descriptor number travels in the environment).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::Ordering;

use anyhow::{bail, Result};

use crate::shm::Shared;

/// The driver's mapping of the shared page.
pub struct SharedMemory {
    fd: OwnedFd,
    ptr: *mut Shared,
}

impl SharedMemory {
    /// A zeroed page, its descriptor inheritable (not close-on-exec) so the program
    /// gets it; the agent closes it once mapped.
    pub fn create() -> Result<SharedMemory> {
        let size = std::mem::size_of::<Shared>();
        // SAFETY: plain syscalls on values we own; the mapping is checked.
        unsafe {
            let fd = libc::memfd_create(c"ordo-replay".as_ptr(), 0);
            if fd < 0 {
                bail!("memfd_create: {}", std::io::Error::last_os_error());
            }
            let fd = OwnedFd::from_raw_fd(fd);
            if libc::ftruncate(fd.as_raw_fd(), size as libc::off_t) != 0 {
                bail!("size the shared page: {}", std::io::Error::last_os_error());
            }
            let p = libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            );
            if p == libc::MAP_FAILED {
                bail!("map the shared page: {}", std::io::Error::last_os_error());
            }
            Ok(SharedMemory { fd, ptr: p.cast() })
        }
    }

    /// The descriptor number the program inherits.
    pub fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// The page.
    pub fn get(&self) -> &Shared {
        // SAFETY: mapped for our lifetime; fields shared with the agent are atomics.
        unsafe { &*self.ptr }
    }

    /// The page, for filling in the plan before the program starts.
    pub fn get_mut(&mut self) -> &mut Shared {
        // SAFETY: as above, and no agent runs yet while we hold `&mut self`.
        unsafe { &mut *self.ptr }
    }

    /// Opens every gate: held threads run on, new gates no longer hold.
    pub fn release_all(&self) {
        let sh = self.get();
        sh.flags
            .fetch_or(crate::shm::FLAG_RELEASED, Ordering::AcqRel);
        sh.epoch.fetch_add(1, Ordering::AcqRel);
        // SAFETY: a shared futex wake on a word of our mapping.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                sh.epoch.as_ptr(),
                libc::FUTEX_WAKE,
                i32::MAX,
            );
        }
    }
}

impl Drop for SharedMemory {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping once.
        unsafe { libc::munmap(self.ptr.cast(), std::mem::size_of::<Shared>()) };
    }
}
