//! ordo's agent: a shared library `ordo record` and `ordo replay` preload into the
//! program. It interposes the pthread API (and libc's `syscall` for direct futex
//! calls) and, per call, does what the mode asks:
//!
//! - **record** ([`record`]): writes the call as a compact event into the calling
//!   thread's ring in a mapping the recorder owns and drains, with a per-object
//!   sequence number taken at the moment the call takes effect — the in-process path
//!   of `ordo record`, a few tens of nanoseconds instead of a kernel trap.
//! - **replay** ([`gate`]): gives every thread the logical id the trace would give
//!   it, names each call the way `ordo_schedule::EventNamer` names the recorded
//!   event, and holds a thread on a futex word before a call the schedule orders
//!   after others, until those have happened.
//!
//! - **strategies** ([`strategy`]): under `ordo hunt`'s PCT and random-walk
//!   baselines, lets only the highest-priority enabled thread go on at each
//!   synchronization event.
//!
//! [`interpose`] holds the wrappers and finds the real functions. The agent never
//! takes a lock of its own (atomics and the raw futex syscall only), so it cannot
//! deadlock with the program or show up in a recording.
//!
//! `ordo-agent`'s build script compiles this file with `rustc` directly (it has no
//! dependencies) and embeds the result in the `ordo` binary.
#![expect(
    clippy::missing_safety_doc,
    reason = "the exported `extern \"C\"` wrappers (interpose.rs, `__libc_start_main`) stand in \
              for libc functions: each one's contract is the libc function's own (it forwards \
              its arguments to the real function), stated once in interpose.rs's module doc"
)]

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
compile_error!("the ordo agent supports x86_64 Linux only");

pub mod attach;
#[cfg_attr(
    not(ordo_frame_pointers),
    allow(
        dead_code,
        reason = "call sites are only read with frame pointers (`site!`)"
    )
)]
mod frames;
pub mod gate;
pub mod hold;
pub mod interpose;
pub mod record;
pub mod shm;
pub mod soft;
pub mod strategy;
pub mod tramp;
pub mod trap;

pub use shm::probe_common;

use std::ffi::{c_char, c_int, c_long, c_void};
use std::sync::atomic::AtomicU32;

extern "C" {
    fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void;
    fn dlvsym(handle: *mut c_void, name: *const c_char, version: *const c_char) -> *mut c_void;
    fn getenv(name: *const c_char) -> *mut c_char;
    fn setenv(name: *const c_char, value: *const c_char, overwrite: c_int) -> c_int;
    fn unsetenv(name: *const c_char) -> c_int;
    fn mmap(
        addr: *mut c_void,
        len: usize,
        prot: c_int,
        flags: c_int,
        fd: c_int,
        off: i64,
    ) -> *mut c_void;
    fn close(fd: c_int) -> c_int;
    fn madvise(addr: *mut c_void, len: usize, advice: c_int) -> c_int;
    fn dup2(old: c_int, new: c_int) -> c_int;
    fn getpid() -> c_int;
    fn kill(pid: c_int, sig: c_int) -> c_int;
    fn gettid() -> c_int;
    fn __errno_location() -> *mut c_int;
    fn abort() -> !;
    fn write(fd: c_int, buf: *const c_void, n: usize) -> isize;
    fn malloc(n: usize) -> *mut c_void;
    fn free(p: *mut c_void);
    fn clock_gettime(clock: c_int, ts: *mut [i64; 2]) -> c_int;
    fn dl_iterate_phdr(
        callback: unsafe extern "C" fn(*mut DlPhdrInfo, usize, *mut c_void) -> c_int,
        data: *mut c_void,
    ) -> c_int;
    fn pthread_atfork(
        prepare: Option<unsafe extern "C" fn()>,
        parent: Option<unsafe extern "C" fn()>,
        child: Option<unsafe extern "C" fn()>,
    ) -> c_int;
}

/// The start of glibc's `struct dl_phdr_info`.
#[repr(C)]
struct DlPhdrInfo {
    addr: u64,
    name: *const c_char,
    phdr: *const frames::PhdrStart,
    phnum: u16,
}

const SYS_FUTEX: c_long = 202;
const FUTEX_WAIT: i32 = 0;
const FUTEX_WAKE: i32 = 1;

fn die(message: &str) -> ! {
    let prefix = b"ordo agent: ";
    // SAFETY: writing our own buffers to stderr.
    unsafe {
        write(2, prefix.as_ptr().cast(), prefix.len());
        write(2, message.as_ptr().cast(), message.len());
        write(2, b"\n".as_ptr().cast(), 1);
        abort()
    }
}

/// A raw futex syscall (`op` without a timeout), bypassing libc.
///
/// # Safety
/// `word` must point to a live, aligned futex word for the duration of the call.
unsafe fn futex(word: *const AtomicU32, op: i32, val: u32) -> isize {
    // SAFETY: the caller's contract; no timeout.
    unsafe { futex_timed(word, op, val, std::ptr::null()) }
}

/// Futex wait with a timeout in nanoseconds (for the short polls below).
///
/// # Safety
/// `word` must point to a live, aligned futex word for the duration of the call.
unsafe fn futex_wait_ns(word: *const AtomicU32, val: u32, ns: i64) {
    let ts = [0i64, ns];
    // SAFETY: the caller's contract; `ts` is a timespec that outlives the call.
    unsafe { futex_timed(word, FUTEX_WAIT, val, ts.as_ptr()) };
}

/// The futex syscall with a timespec (null: none), bypassing libc.
///
/// # Safety
/// `word` must point to a live, aligned futex word, and `timeout` be null or point
/// to a timespec, for the duration of the call.
unsafe fn futex_timed(word: *const AtomicU32, op: i32, val: u32, timeout: *const i64) -> isize {
    let ret: isize;
    // SAFETY: the futex syscall touches only `word` and `timeout` (valid: the
    // caller's contract); the unused arguments are zero and rcx/r11, which `syscall`
    // clobbers, are declared.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") SYS_FUTEX as isize => ret,
            in("rdi") word,
            in("rsi") op as isize,
            in("rdx") val as isize,
            in("r10") timeout,
            in("r8") 0isize,
            in("r9") 0isize,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// A raw syscall with up to three arguments.
///
/// # Safety
/// Syscall `n` with these arguments must be sound: every pointer among them valid
/// for what the kernel does with it, and no memory or descriptor the rest of the
/// program relies on changed behind its back.
unsafe fn raw_syscall3(n: isize, a: isize, b: isize, c: isize) -> isize {
    let ret: isize;
    // SAFETY: the syscall and its arguments are the caller's to vouch for; rcx/r11,
    // which `syscall` clobbers, are declared.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") n => ret,
            in("rdi") a,
            in("rsi") b,
            in("rdx") c,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

fn errno() -> c_int {
    // SAFETY: glibc's per-thread errno.
    unsafe { *__errno_location() }
}

fn set_errno(value: c_int) {
    // SAFETY: as above.
    unsafe { *__errno_location() = value }
}

pub(crate) fn tid() -> u32 {
    // SAFETY: plain syscall wrapper.
    unsafe { gettid() as u32 }
}

// ---------------------------------------------------------------------------------
// Start-up
// ---------------------------------------------------------------------------------

#[used]
#[link_section = ".init_array"]
static INIT: unsafe extern "C" fn() = agent_init;

#[used]
#[link_section = ".fini_array"]
static FINI: unsafe extern "C" fn() = agent_fini;

/// The environment variable naming the user's own `LD_PRELOAD` (see `ordo-agent`).
const ENV_ORIGINAL_PRELOAD: &std::ffi::CStr = c"ORDO_ORIGINAL_PRELOAD";

/// The agent's constructor (`.init_array`), run once by the dynamic loader before the
/// program's own code, on its only thread.
unsafe extern "C" fn agent_init() {
    // SAFETY: start-up, one thread: nothing reads or changes the environment meanwhile.
    let replay_fd = unsafe { take_fd_env(c"ORDO_REPLAY_SHM_FD") };
    // SAFETY: as above.
    let record_fd = unsafe { take_fd_env(c"ORDO_RECORD_FD") };
    // SAFETY: as above.
    let soft_fd = unsafe { take_fd_env(c"ORDO_SOFT_SITES_FD") };
    if replay_fd.is_none() && record_fd.is_none() {
        return;
    }
    // SAFETY: as above.
    if let Some(ms) = unsafe { take_fd_env(c"ORDO_HOLD_EXIT") } {
        hold::init(ms);
    }
    // Give the program the environment it would have had without the agent: what
    // it runs (exec) does not load the agent again.
    // SAFETY: as above; the names are NUL-terminated literals, and setenv copies
    // `original` (a value getenv returned) before unsetenv removes it.
    unsafe {
        let original = getenv(ENV_ORIGINAL_PRELOAD.as_ptr());
        if original.is_null() {
            unsetenv(c"LD_PRELOAD".as_ptr());
        } else {
            setenv(c"LD_PRELOAD".as_ptr(), original, 1);
            unsetenv(ENV_ORIGINAL_PRELOAD.as_ptr());
        }
    }
    if let Some(fd) = record_fd {
        frames::init();
        // SAFETY: once, at start-up, with the descriptor the recorder passed.
        unsafe { record::start(fd) };
    }
    if let Some(fd) = soft_fd {
        // SAFETY: once, at start-up, with the descriptor the recorder passed.
        unsafe { soft::start(fd, replay_fd.is_some()) };
    }
    if let Some(fd) = replay_fd {
        // SAFETY: once, at start-up, before any other thread runs.
        unsafe { strategy::init() };
        // SAFETY: once, at start-up, with the descriptor the driver passed.
        unsafe { gate::start(fd) };
    }
}

// The condition-variable wrappers also answer to their glibc version: ThreadSanitizer
// finds the functions it wraps with `dlvsym(RTLD_NEXT, name, "GLIBC_2.3.2")`, which
// skips an unversioned definition and would go straight to libc, past the agent.
// Each alias is the wrapper itself (same address), so call sites stay the caller's.
std::arch::global_asm!(
    ".globl ordo_v232_pthread_cond_wait",
    ".set ordo_v232_pthread_cond_wait, pthread_cond_wait",
    ".symver ordo_v232_pthread_cond_wait, pthread_cond_wait@GLIBC_2.3.2",
    ".globl ordo_v232_pthread_cond_timedwait",
    ".set ordo_v232_pthread_cond_timedwait, pthread_cond_timedwait",
    ".symver ordo_v232_pthread_cond_timedwait, pthread_cond_timedwait@GLIBC_2.3.2",
    ".globl ordo_v232_pthread_cond_signal",
    ".set ordo_v232_pthread_cond_signal, pthread_cond_signal",
    ".symver ordo_v232_pthread_cond_signal, pthread_cond_signal@GLIBC_2.3.2",
    ".globl ordo_v232_pthread_cond_broadcast",
    ".set ordo_v232_pthread_cond_broadcast, pthread_cond_broadcast",
    ".symver ordo_v232_pthread_cond_broadcast, pthread_cond_broadcast@GLIBC_2.3.2",
);

/// The signature of a program's `main`.
type MainFn = unsafe extern "C" fn(c_int, *mut *mut c_char, *mut *mut c_char) -> c_int;

/// The program's own `main`, called by [`main_through_agent`].
static PROGRAM_MAIN: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Wraps glibc's `__libc_start_main` (which every dynamically linked C, C++ and Rust
/// program calls from `_start`) to learn that `main` was reached: everything the
/// program links, sanitizer runtimes included, initialized. `ordo replay` tells "the
/// program died before main" (e.g. a runtime refused to start) from a
/// reproduced bug by it.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn __libc_start_main(
    main: MainFn,
    argc: c_int,
    argv: *mut *mut c_char,
    init: *mut c_void,
    fini: *mut c_void,
    rtld_fini: *mut c_void,
    stack_end: *mut c_void,
) -> c_int {
    type StartMain = unsafe extern "C" fn(
        MainFn,
        c_int,
        *mut *mut c_char,
        *mut c_void,
        *mut c_void,
        *mut c_void,
        *mut c_void,
    ) -> c_int;
    const RTLD_NEXT: *mut c_void = -1isize as *mut c_void;
    // SAFETY: a NUL-terminated name; dlsym is thread-safe.
    let real = unsafe { dlsym(RTLD_NEXT, c"__libc_start_main".as_ptr()) };
    if real.is_null() {
        die("cannot find the real __libc_start_main");
    }
    // SAFETY: the next definition of `__libc_start_main` (glibc's) has this signature.
    let real: StartMain = unsafe { std::mem::transmute(real) };
    PROGRAM_MAIN.store(main as usize, std::sync::atomic::Ordering::Relaxed);
    // SAFETY: the caller's arguments, forwarded (the contract is the real function's),
    // with `main` in place of the program's: it calls the program's `main`, stored
    // above, with the same arguments.
    unsafe {
        real(
            main_through_agent,
            argc,
            argv,
            init,
            fini,
            rtld_fini,
            stack_end,
        )
    }
}

unsafe extern "C" fn main_through_agent(
    argc: c_int,
    argv: *mut *mut c_char,
    envp: *mut *mut c_char,
) -> c_int {
    gate::main_entered();
    // SAFETY: `__libc_start_main` stored the program's `main` (a `MainFn`) before it
    // handed this function to the real one, which calls it on the same thread.
    let main: MainFn =
        unsafe { std::mem::transmute(PROGRAM_MAIN.load(std::sync::atomic::Ordering::Relaxed)) };
    // SAFETY: libc's arguments for `main`, forwarded.
    let status = unsafe { main(argc, argv, envp) };
    hold::before_exit();
    status
}

unsafe extern "C" fn agent_fini() {
    gate::main_returned();
}

/// Reads and removes an environment variable holding a descriptor number (or
/// another non-negative number; -1 when it is not one).
///
/// # Safety
/// No other thread may read or change the environment meanwhile (start-up).
unsafe fn take_fd_env(name: &std::ffi::CStr) -> Option<c_int> {
    // SAFETY: a NUL-terminated name; the environment is ours (the caller's contract).
    let text = unsafe { getenv(name.as_ptr()) };
    if text.is_null() {
        return None;
    }
    // SAFETY: getenv returned a NUL-terminated value, still in the environment.
    let fd = unsafe { parse_int(text) };
    // SAFETY: as for getenv; `text` is not used after.
    unsafe { unsetenv(name.as_ptr()) };
    // Present but unreadable: nothing to map.
    Some(fd.unwrap_or(-1))
}

/// Maps `len` bytes of the shared descriptor `fd`, then closes it: an `exec` leaves
/// the new image no descriptor (and no environment variable) to find.
///
/// # Safety
/// `fd` must be negative or a descriptor the agent owns (it is closed here), whose
/// file is at least `len` bytes long.
unsafe fn map_shared(fd: c_int, len: usize) -> Option<*mut c_void> {
    if fd < 0 {
        return None;
    }
    // SAFETY: a new mapping at an address the kernel picks: no existing memory changes.
    let p = unsafe {
        mmap(
            std::ptr::null_mut(),
            len,
            3, /* PROT_READ|PROT_WRITE */
            1, /* MAP_SHARED */
            fd,
            0,
        )
    };
    // SAFETY: the agent's own descriptor (the caller's contract), not used after.
    unsafe { close(fd) };
    (p as isize != -1).then_some(p)
}

/// A non-negative decimal number, `None` when empty, not a number or too large.
///
/// # Safety
/// `text` must point to a NUL-terminated string.
unsafe fn parse_int(text: *const c_char) -> Option<c_int> {
    let mut n: c_int = 0;
    let mut p = text;
    // SAFETY: `p` walks the caller's NUL-terminated string, up to its NUL.
    if unsafe { *p } == 0 {
        return None;
    }
    // SAFETY: as above.
    while unsafe { *p } != 0 {
        // SAFETY: as above.
        let c = unsafe { *p } as u8;
        if !c.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add((c - b'0') as c_int)?;
        // SAFETY: `p` is not at the NUL yet, so the next byte is in the string.
        p = unsafe { p.add(1) };
    }
    Some(n)
}
