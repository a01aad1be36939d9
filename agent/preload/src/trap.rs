//! Memory-access gates: holding a thread *before* an instruction that reads or
//! writes a watched variable, on the same futex gates as the pthread events.
//!
//! A plain load or store calls nothing the agent could interpose, so the agent
//! makes the CPU stop there: each thread the schedule names arms one hardware
//! execute breakpoint per instruction site it needs (`perf_event_open`,
//! `PERF_TYPE_BREAKPOINT`/`HW_BREAKPOINT_X` on itself, with `sigtrap`: the kernel
//! sends the thread a synchronous `SIGTRAP` *before* the instruction runs, the
//! site's index in `si_perf_data`). The handler checks that the access really is to
//! the variable (operands through registers may reach other memory), counts it as
//! the namer counts a recorded access (per thread, kind and variable), and when it
//! is a named occurrence with predecessors, waits on the shared epoch futex exactly
//! like [`Caller::gate`] does for a pthread call. It then returns; the kernel has
//! set the resume flag (RF) in the saved flags, so the instruction runs without
//! trapping again. A named occurrence other events wait for is marked done only
//! *after* the instruction executed: the handler also sets the trap flag (TF), the
//! CPU traps once more after that one instruction (`TRAP_TRACE`), and that trap
//! marks it done and clears TF. An unnamed occurrence costs one trap; a thread's
//! breakpoints are disabled once every access event it names has happened, so the
//! rest of its run is at full speed.
//!
//! Everything here runs in a signal handler: raw syscalls, atomics and the agent's
//! own thread-local `Cell`s only (no allocation, no lock, no libc call).
//!
//! Limits: x86 has four debug registers per thread, so a thread can have at most
//! [`MAX_ARMED_SITES`] sites armed; the driver refuses a plan needing more before
//! the program starts. A breakpoint the kernel refuses (the registers are taken,
//! e.g. by a debugger) makes the agent stop the program with a message: never a
//! silent free run.

use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering::*;

use crate::gate::{enter, shared, GateObject, ME, NONE};
use crate::shm::*;
use crate::{die, raw_syscall3};

const SIGTRAP: c_int = 5;
/// `si_code` of a perf event's synchronous signal.
const TRAP_PERF: i32 = 6;
/// `sig_data` of our breakpoints: this tag in the high half, the site index below.
const COOKIE_TAG: u64 = 0x4f52_444f << 32;

const SYS_IOCTL: isize = 16;
const SYS_CLOSE: isize = 3;
const SYS_PERF_EVENT_OPEN: isize = 298;
const PERF_EVENT_IOC_DISABLE: isize = 0x2401;
const PERF_TYPE_BREAKPOINT: u32 = 5;
const HW_BREAKPOINT_X: u32 = 4;
const PERF_FLAG_FD_CLOEXEC: isize = 8;

/// The x86 trap flag in EFLAGS: one instruction, then a debug trap.
const EFLAGS_TF: i64 = 0x100;

/// `ucontext_t`: the general registers start 40 bytes in (after `uc_flags`,
/// `uc_link` and `uc_stack`).
const GREGS_OFFSET: usize = 40;
const GREG_EFL: usize = 17;
/// `REG_RIP` in the `gregs` array.
pub(crate) const GREG_RIP: usize = 16;
/// `si_code` of an `int3` (a software breakpoint, [`crate::soft`]).
const SI_KERNEL: i32 = 0x80;
/// `ordo_probe_common::reg` number → index in the `gregs` array.
pub(crate) const GREG_OF_REG: [usize; 17] =
    [13, 11, 14, 12, 9, 8, 10, 15, 0, 1, 2, 3, 4, 5, 6, 7, 16];

/// The kernel's `perf_event_attr`, up to `sig_data` (`PERF_ATTR_SIZE_VER7`).
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    bp_addr: u64,
    bp_len: u64,
    branch_sample_type: u64,
    sample_regs_user: u64,
    sample_stack_user: u32,
    clockid: i32,
    sample_regs_intr: u64,
    aux_watermark: u32,
    sample_max_stack: u16,
    reserved_2: u16,
    aux_sample_size: u32,
    aux_action: u32,
    sig_data: u64,
}

const ATTR_EXCLUDE_KERNEL: u64 = 1 << 5;
const ATTR_EXCLUDE_HV: u64 = 1 << 6;
const ATTR_REMOVE_ON_EXEC: u64 = 1 << 36;
const ATTR_SIGTRAP: u64 = 1 << 37;

/// glibc's `struct sigaction`.
#[repr(C)]
struct SigAction {
    handler: usize,
    mask: [u64; 16],
    flags: c_int,
    restorer: usize,
}

const SA_SIGINFO: c_int = 4;
const SA_RESTART: c_int = 0x1000_0000;

extern "C" {
    fn sigaction(sig: c_int, act: *const SigAction, old: *mut SigAction) -> c_int;
}

/// This thread's armed breakpoints, and the access it is single-stepping over.
struct TrapState {
    /// Descriptor per armed breakpoint, -1 when none or disabled.
    fds: Cell<[i32; MAX_ARMED_SITES]>,
    /// Site index per armed breakpoint.
    sites: Cell<[u32; MAX_ARMED_SITES]>,
    /// The site being stepped over (to mark done after it ran), `NONE` when none.
    stepping: Cell<u32>,
}

thread_local! {
    static TRAPS: TrapState = const {
        TrapState {
            fds: Cell::new([-1; MAX_ARMED_SITES]),
            sites: Cell::new([NONE; MAX_ARMED_SITES]),
            stepping: Cell::new(NONE),
        }
    };
}

/// The program's own SIGTRAP handler, called for traps that are not ours.
static mut PREVIOUS: SigAction = SigAction {
    handler: 0,
    mask: [0; 16],
    flags: 0,
    restorer: 0,
};
static INSTALLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Arms the calling thread's access sites (from its plan thread), if it has any.
/// Called when a thread starts, after it took its identity.
pub(crate) fn arm_thread() {
    let plan = ME.with(|me| me.plan.get());
    if plan == NONE {
        return;
    }
    let sh = shared();
    let t = &sh.threads[plan as usize];
    if t.n_arm == 0 {
        return;
    }
    install_handler();
    let bias = sh.main_base.load(Relaxed);
    let mut fds = [-1; MAX_ARMED_SITES];
    let mut sites = [NONE; MAX_ARMED_SITES];
    for (i, &s) in t.arm[..t.n_arm as usize].iter().enumerate() {
        let site = &sh.sites[s as usize];
        let attr = PerfEventAttr {
            kind: PERF_TYPE_BREAKPOINT,
            size: std::mem::size_of::<PerfEventAttr>() as u32,
            sample_period: 1,
            flags: ATTR_EXCLUDE_KERNEL | ATTR_EXCLUDE_HV | ATTR_REMOVE_ON_EXEC | ATTR_SIGTRAP,
            bp_type: HW_BREAKPOINT_X,
            bp_addr: site.site.ip.wrapping_add(bias),
            bp_len: 8,
            sig_data: COOKIE_TAG | s as u64,
            ..PerfEventAttr::default()
        };
        // SAFETY: perf_event_open(attr, pid 0 = this thread, any cpu, no group).
        let fd = unsafe { perf_event_open(&attr) };
        if fd < 0 {
            die_with_errno(
                "cannot arm a hardware breakpoint on a watched access (perf_event_open failed: \
                 the debug registers may be taken, e.g. by a debugger or a --watch-hw recording)",
                -fd,
            );
        }
        fds[i] = fd as i32;
        sites[i] = s;
    }
    TRAPS.with(|tr| {
        tr.fds.set(fds);
        tr.sites.set(sites);
        tr.stepping.set(NONE);
    });
}

/// `perf_event_open(attr, 0, -1, -1, FD_CLOEXEC)`: an event on the calling thread,
/// any CPU, no group; the new descriptor or `-errno`.
///
/// # Safety
/// `attr` must describe an event whose signals the thread is ready for (a SIGTRAP
/// handler installed when it asks for `sigtrap`).
unsafe fn perf_event_open(attr: &PerfEventAttr) -> isize {
    let ret: isize;
    // SAFETY: the kernel reads `attr` (a live reference, `size` bytes); rcx/r11,
    // which `syscall` clobbers, are declared.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") SYS_PERF_EVENT_OPEN => ret,
            in("rdi") attr as *const PerfEventAttr,
            in("rsi") 0isize,
            in("rdx") -1isize,
            in("r10") -1isize,
            in("r8") PERF_FLAG_FD_CLOEXEC,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

fn die_with_errno(message: &str, errno: isize) -> ! {
    let mut text = [0u8; 256];
    let mut n = 0;
    for &b in message.as_bytes().iter().take(220) {
        text[n] = b;
        n += 1;
    }
    for &b in b" errno " {
        text[n] = b;
        n += 1;
    }
    let mut digits = [0u8; 8];
    let mut d = 0;
    let mut e = errno.unsigned_abs();
    loop {
        digits[d] = b'0' + (e % 10) as u8;
        d += 1;
        e /= 10;
        if e == 0 || d == digits.len() {
            break;
        }
    }
    while d > 0 {
        d -= 1;
        text[n] = digits[d];
        n += 1;
    }
    die(std::str::from_utf8(&text[..n]).unwrap_or(message))
}

pub(crate) fn install_handler() {
    if INSTALLED.swap(true, AcqRel) {
        return;
    }
    let action = SigAction {
        handler: on_sigtrap as *const () as usize,
        mask: [0; 16],
        flags: SA_SIGINFO | SA_RESTART,
        restorer: 0,
    };
    // SAFETY: installing our handler once; the previous one is kept for traps that
    // are not ours.
    unsafe {
        if sigaction(SIGTRAP, &action, std::ptr::addr_of_mut!(PREVIOUS)) != 0 {
            die("cannot install the SIGTRAP handler for memory-access gates");
        }
    }
}

/// The first fields of the kernel's `siginfo_t` for a perf trap.
#[repr(C)]
struct SigInfo {
    signo: i32,
    errno: i32,
    code: i32,
    _pad: i32,
    addr: u64,
    perf_data: u64,
    perf_type: u32,
    perf_flags: u32,
}

/// `si_perf_flags`: the signal was blocked, so it arrives late (asynchronously).
const TRAP_PERF_FLAG_ASYNC: u32 = 1;

/// The saved general register `index` (`REG_*`) in a signal handler's context.
///
/// # Safety
/// `ctx` must be the `ucontext_t` the kernel passed a signal handler and
/// `index` < 23 (`NGREG`).
pub(crate) unsafe fn greg(ctx: *mut c_void, index: usize) -> *mut i64 {
    // SAFETY: `gregs` lies GREGS_OFFSET bytes into the context, `index` within it.
    unsafe { (ctx as *mut u8).add(GREGS_OFFSET + 8 * index) as *mut i64 }
}

/// The SIGTRAP handler (`SA_SIGINFO`): the agent's breakpoint and single-step traps,
/// anything else passed on to the program's handler.
///
/// # Safety
/// Only the kernel calls it, with the `siginfo_t` and `ucontext_t` of the signal.
unsafe extern "C" fn on_sigtrap(sig: c_int, info: *mut c_void, ctx: *mut c_void) {
    // SAFETY: the kernel's siginfo_t, whose first fields SigInfo mirrors.
    let si = unsafe { &*(info as *const SigInfo) };
    if si.code == TRAP_PERF && si.perf_data & !0xffff_ffff == COOKIE_TAG {
        if si.perf_flags & TRAP_PERF_FLAG_ASYNC != 0 {
            // Past the instruction already: gating now would enforce nothing.
            die("the program blocks SIGTRAP in a thread with memory-access gates: the access ran before its gate");
        }
        // SAFETY: `ctx` is the signal's context.
        unsafe { access_trap((si.perf_data & 0xffff_ffff) as u32, ctx) };
        return;
    }
    // A software breakpoint of discovery: the saved rip is just past its `int3`.
    if si.code == SI_KERNEL {
        // SAFETY: the signal's context; REG_RIP is a general register slot.
        let rip = unsafe { *greg(ctx, GREG_RIP) } as u64;
        // SAFETY: as above.
        if unsafe { crate::soft::trap(rip.wrapping_sub(1), ctx) } {
            return;
        }
    }
    // The single-step trap after a gated access: TRAP_TRACE, or SI_KERNEL when a
    // uprobe on the same instruction (a recording of the replay) stepped it.
    if si.code != TRAP_PERF {
        let stepping = TRAPS.with(|tr| tr.stepping.replace(NONE));
        if stepping != NONE {
            // SAFETY: the signal's context; REG_EFL is a general register slot.
            unsafe { *greg(ctx, GREG_EFL) &= !EFLAGS_TF };
            access_done(stepping);
            return;
        }
    }
    // Not ours: what the program would have had.
    // SAFETY: PREVIOUS is written once, by install_handler's sigaction, before this
    // handler can run; only read after.
    let previous = unsafe { &*std::ptr::addr_of!(PREVIOUS) };
    match previous.handler {
        0 | 1 => {
            // SIG_DFL (a core dump) or SIG_IGN: restore and let it happen again.
            // SAFETY: reinstalls the disposition sigaction gave us; getpid and tgkill
            // (to this thread) take no pointers.
            unsafe {
                sigaction(SIGTRAP, std::ptr::addr_of!(PREVIOUS), std::ptr::null_mut());
                if previous.handler == 0 {
                    let pid = raw_syscall3(39 /* getpid */, 0, 0, 0);
                    raw_syscall3(
                        234, /* tgkill */
                        pid,
                        crate::tid() as isize,
                        SIGTRAP as isize,
                    );
                }
            }
        }
        h if previous.flags & SA_SIGINFO != 0 => {
            // SAFETY: the program installed `h` as an SA_SIGINFO handler: this is its
            // signature, and it gets the signal's own arguments.
            unsafe {
                let f: unsafe extern "C" fn(c_int, *mut c_void, *mut c_void) =
                    std::mem::transmute(h);
                f(sig, info, ctx)
            }
        }
        h => {
            // SAFETY: the program installed `h` as a plain handler: this is its
            // signature.
            unsafe {
                let f: unsafe extern "C" fn(c_int) = std::mem::transmute(h);
                f(sig)
            }
        }
    }
}

/// The runtime address the site's instruction accesses, from the trapped registers.
///
/// # Safety
/// `ctx` must be the `ucontext_t` of the trap.
unsafe fn effective_address(site: &probe_common::WatchSite, bias: u64, ctx: *mut c_void) -> u64 {
    let reg = |r: u8| -> u64 {
        match GREG_OF_REG.get(r as usize) {
            // SAFETY: the trap's context (the caller's contract); `g` is a gregs index.
            Some(&g) => unsafe { *greg(ctx, g) as u64 },
            None => 0,
        }
    };
    if site.base == probe_common::reg::NONE && site.index == probe_common::reg::NONE {
        return (site.disp as u64).wrapping_add(bias);
    }
    let mut ea = site.disp as u64;
    if site.base != probe_common::reg::NONE {
        ea = ea.wrapping_add(reg(site.base));
    }
    if site.index != probe_common::reg::NONE {
        ea = ea.wrapping_add(reg(site.index).wrapping_mul(site.scale.max(1) as u64));
    }
    ea
}

/// A thread is about to execute the instruction of access site `index`.
///
/// # Safety
/// `ctx` must be the `ucontext_t` of the trap.
pub(crate) unsafe fn access_trap(index: u32, ctx: *mut c_void) {
    let sh = shared();
    if index as usize >= sh.n_sites as usize {
        return;
    }
    sh.traps.fetch_add(1, Relaxed);
    let s = &sh.sites[index as usize];
    let var = sh.symbols[s.symbol as usize].addr.load(Relaxed);
    if var == 0 {
        return;
    }
    if s.via_register != 0 {
        let bias = sh.main_base.load(Relaxed);
        // SAFETY: the trap's context (the caller's contract).
        let ea = unsafe { effective_address(&s.site, bias, ctx) };
        let watched = var..var + s.site.watch_len.max(1) as u64;
        if ea >= watched.end || ea + s.site.size.max(1) as u64 <= watched.start {
            return; // the same instruction on other memory
        }
    }
    let Some(c) = enter() else { return };
    c.gate(s.kind, var, GateObject::Addr);
    if c.completes_occurrence(s.kind, var) {
        // Others wait for this access: mark it done once the instruction has run.
        TRAPS.with(|tr| tr.stepping.set(index));
        // SAFETY: the trap's context; REG_EFL is a general register slot.
        unsafe { *greg(ctx, GREG_EFL) |= EFLAGS_TF };
    } else {
        c.happened(s.kind, var, None);
        disarm_finished(s.kind, s.symbol);
    }
}

/// The access of site `index` executed (the single-step trap after it).
fn access_done(index: u32) {
    let sh = shared();
    let s = &sh.sites[index as usize];
    let var = sh.symbols[s.symbol as usize].addr.load(Relaxed);
    if let Some(c) = enter() {
        c.happened(s.kind, var, None);
    }
    disarm_finished(s.kind, s.symbol);
}

/// Closes the calling thread's breakpoints (it is exiting).
pub(crate) fn disarm_thread() {
    TRAPS.with(|tr| {
        for fd in tr.fds.replace([-1; MAX_ARMED_SITES]) {
            if fd >= 0 {
                // SAFETY: our own perf event descriptor.
                unsafe { raw_syscall3(SYS_CLOSE, fd as isize, 0, 0) };
            }
        }
    });
}

/// Disables this thread's breakpoints on sites of `kind` on `symbol` once every
/// event of that kind on it the thread names has happened: its later accesses run
/// at full speed.
fn disarm_finished(kind: u16, symbol: u32) {
    let Some(c) = enter() else { return };
    let Some(t) = c.plan() else { return };
    let pending = c.events(t).iter().any(|e| {
        e.kind == kind
            && e.object_kind == OBJ_SYMBOL
            && e.object == symbol
            && e.count.load(Relaxed) < e.occurrence
    });
    if pending {
        return;
    }
    let sh = shared();
    TRAPS.with(|tr| {
        let mut fds = tr.fds.get();
        let sites = tr.sites.get();
        for (fd, &site) in fds.iter_mut().zip(sites.iter()) {
            if *fd < 0 || site == NONE {
                continue;
            }
            let s = &sh.sites[site as usize];
            if s.kind == kind && s.symbol == symbol {
                // SAFETY: our own perf event descriptor; closing frees the register.
                unsafe {
                    raw_syscall3(SYS_IOCTL, *fd as isize, PERF_EVENT_IOC_DISABLE, 0);
                    raw_syscall3(SYS_CLOSE, *fd as isize, 0, 0);
                }
                *fd = -1;
            }
        }
        tr.fds.set(fds);
    });
}
