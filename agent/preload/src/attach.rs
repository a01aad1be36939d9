//! Attaching to a running process (`ordo record --pid`, in process): the recorder
//! loads this library into the target with `dlopen` (its constructor finds no
//! `ORDO_*` descriptor there and leaves it dormant), calls [`ordo_attach`] on a
//! thread it holds under ptrace with every other thread stopped, and redirects
//! the program's GOT slots of the interposed functions to the wrappers itself.
//! Detaching restores the slots and turns the switch [`ordo_attach`] returned
//! off; the library stays loaded, so a thread still inside a wrapper returns
//! through code that is still there, and a wrapper reached after that (through a
//! function pointer copied while attached) forwards to libc without recording.

use std::ffi::c_int;
use std::sync::atomic::AtomicBool;

/// Starts recording into the recorder's mapping `record_fd` (a descriptor of
/// this process, closed once mapped) and returns the recording switch — a byte
/// the recorder clears to detach (`0`: the mapping could not be used).
///
/// # Safety
/// `record_fd` must be the recorder's in-process mapping, sized as the recorder
/// sizes it; to be called once, with the program's other threads stopped.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn ordo_attach(record_fd: c_int) -> *const AtomicBool {
    crate::frames::init();
    // SAFETY: the caller's contract.
    unsafe { crate::record::start(record_fd) };
    if crate::record::on() {
        crate::record::switch()
    } else {
        std::ptr::null()
    }
}
