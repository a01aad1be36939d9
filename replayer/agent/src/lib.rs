//! ordo's replay agent: a shared library `ordo replay` preloads into the program.
//!
//! It interposes the pthread API (and libc's `syscall` for direct futex calls),
//! gives every thread the logical id the trace would give it, names each call the
//! way `ordo_schedule::EventNamer` names the recorded event, and — before a call
//! whose event the schedule orders after others — sleeps on a futex word in memory
//! shared with the driver until those events have happened. Everything the schedule
//! does not name runs at full speed, in parallel. With an empty plan the wrappers only
//! count calls and forward them.
//!
//! The plan and the results live in [`shm::Shared`], a memfd the driver maps too.
//! The agent never takes a lock of its own: atomics and the raw futex syscall only,
//! so it cannot deadlock with the program or show up in a recording of the replay.
//!
//! `ordo-replayer`'s build script compiles this file with `rustc` directly (it has
//! no dependencies) and embeds the result in the `ordo` binary.
#![allow(clippy::missing_safety_doc)]

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
compile_error!("the replay agent supports x86_64 Linux only");

pub mod shm;

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_long, c_void};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicUsize, Ordering::*};

use shm::*;

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
    fn dup2(old: c_int, new: c_int) -> c_int;
    fn getpid() -> c_int;
    fn gettid() -> c_int;
    fn __errno_location() -> *mut c_int;
    fn abort() -> !;
    fn write(fd: c_int, buf: *const c_void, n: usize) -> isize;
    fn malloc(n: usize) -> *mut c_void;
    fn free(p: *mut c_void);
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

/// The start of glibc's `struct dl_phdr_info`: only the load bias is used.
#[repr(C)]
struct DlPhdrInfo {
    addr: u64,
    name: *const c_char,
}

const RTLD_NEXT: *mut c_void = -1isize as *mut c_void;
const RTLD_DEFAULT: *mut c_void = null_mut();
const SYS_FUTEX: c_long = 202;
const FUTEX_WAIT: i32 = 0;
const FUTEX_WAKE: i32 = 1;
const NONE: u32 = u32::MAX;

/// `PlanEvent::done`: happened.
const DONE: u32 = 1;
/// `PlanEvent::done`: taking effect inside a blocking call or a thread's exit.
const IN_PROGRESS: u32 = 2;

/// Whether an in-progress event has surely taken effect: its thread is gone (an
/// exit) or asleep inside the blocking call (a condvar wait has registered and
/// released its mutex; a barrier arrival has been counted).
fn in_progress_finished(e: &PlanEvent) -> bool {
    let owner = e.done_tid.load(Acquire);
    if e.kind == kind::THREAD_EXIT {
        thread_gone(owner)
    } else {
        thread_asleep(owner)
    }
}

static SHARED: AtomicPtr<Shared> = AtomicPtr::new(null_mut());
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Per-thread identity and agent state. Only `Copy` fields: no TLS destructor.
struct ThreadState {
    /// Index into `Shared::slots`, `NONE` until the thread has one.
    slot: Cell<u32>,
    /// Index into `Shared::threads` when the schedule names this thread.
    plan: Cell<u32>,
    /// Depth of the logical id, `NONE` when unknown.
    depth: Cell<u32>,
    path: Cell<[u32; MAX_DEPTH]>,
    /// Threads created so far (the next child is `children + 1`).
    children: Cell<u32>,
    /// Inside agent code that may call back into a wrapper (malloc, dlsym).
    busy: Cell<bool>,
    /// The exit event was handled.
    exited: Cell<bool>,
}

thread_local! {
    static ME: ThreadState = const {
        ThreadState {
            slot: Cell::new(NONE),
            plan: Cell::new(NONE),
            depth: Cell::new(NONE),
            path: Cell::new([0; MAX_DEPTH]),
            children: Cell::new(0),
            busy: Cell::new(false),
            exited: Cell::new(false),
        }
    };
}

fn die(message: &str) -> ! {
    let prefix = b"ordo replay agent: ";
    // SAFETY: writing our own buffers to stderr.
    unsafe {
        write(2, prefix.as_ptr().cast(), prefix.len());
        write(2, message.as_ptr().cast(), message.len());
        write(2, b"\n".as_ptr().cast(), 1);
        abort()
    }
}

/// The next definition of a libc function after this library's (NUL-terminated name).
fn resolve(name: &'static str, version: Option<&'static str>) -> usize {
    // SAFETY: NUL-terminated names; dlsym/dlvsym are thread-safe.
    let p = unsafe {
        let mut p = null_mut();
        if let Some(v) = version {
            p = dlvsym(RTLD_NEXT, name.as_ptr().cast(), v.as_ptr().cast());
        }
        if p.is_null() {
            p = dlsym(RTLD_NEXT, name.as_ptr().cast());
        }
        p
    };
    if p.is_null() {
        die(&format!(
            "cannot find the real {}",
            name.trim_end_matches('\0')
        ));
    }
    p as usize
}

/// The real function behind a wrapper, resolved once.
macro_rules! real {
    ($name:literal $(@ $version:literal)?, fn($($arg:ty),*) -> $ret:ty) => {{
        static PTR: AtomicUsize = AtomicUsize::new(0);
        let mut p = PTR.load(Relaxed);
        if p == 0 {
            #[allow(unused_mut, unused_assignments)]
            let mut version: Option<&'static str> = None;
            $(version = Some(concat!($version, "\0"));)?
            p = resolve(concat!($name, "\0"), version);
            PTR.store(p, Relaxed);
        }
        // SAFETY: `p` is the address of the libc function with this signature.
        unsafe { std::mem::transmute::<usize, unsafe extern "C-unwind" fn($($arg),*) -> $ret>(p) }
    }};
}

/// The raw futex syscall: not through libc's `syscall`, which this library wraps.
unsafe fn futex(word: *const AtomicU32, op: i32, val: u32) -> isize {
    let ret: isize;
    std::arch::asm!(
        "syscall",
        inlateout("rax") SYS_FUTEX as isize => ret,
        in("rdi") word,
        in("rsi") op as isize,
        in("rdx") val as isize,
        in("r10") 0isize,
        in("r8") 0isize,
        in("r9") 0isize,
        lateout("rcx") _,
        lateout("r11") _,
        options(nostack),
    );
    ret
}

/// Futex wait with a timeout in nanoseconds (for the short polls below).
unsafe fn futex_wait_ns(word: *const AtomicU32, val: u32, ns: i64) {
    let ts = [0i64, ns];
    let _ret: isize;
    std::arch::asm!(
        "syscall",
        inlateout("rax") SYS_FUTEX as isize => _ret,
        in("rdi") word,
        in("rsi") FUTEX_WAIT as isize,
        in("rdx") val as isize,
        in("r10") ts.as_ptr(),
        in("r8") 0isize,
        in("r9") 0isize,
        lateout("rcx") _,
        lateout("r11") _,
        options(nostack),
    );
}

/// A raw syscall with up to three arguments.
unsafe fn raw_syscall3(n: isize, a: isize, b: isize, c: isize) -> isize {
    let ret: isize;
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
    ret
}

const SYS_READ: isize = 0;
const SYS_CLOSE: isize = 3;
const SYS_OPEN: isize = 2;
const SYS_TGKILL: isize = 234;
const SYS_GETPID: isize = 39;
const ESRCH: isize = 3;

/// Whether thread `tid` of this process has exited.
fn thread_gone(tid: u32) -> bool {
    // SAFETY: signal 0 only checks that the thread exists.
    unsafe {
        let pid = raw_syscall3(SYS_GETPID, 0, 0, 0);
        raw_syscall3(SYS_TGKILL, pid, tid as isize, 0) == -ESRCH
    }
}

/// Whether thread `tid` of this process is asleep in the kernel (`S` or `D`), or gone.
fn thread_asleep(tid: u32) -> bool {
    let mut path = *b"/proc/self/task/0000000000/stat\0";
    let mut digits = [0u8; 10];
    let mut n = tid;
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let mut out = 16;
    for i in (0..len).rev() {
        path[out] = digits[i];
        out += 1;
    }
    path[out..out + 6].copy_from_slice(b"/stat\0");
    let mut buf = [0u8; 512];
    // SAFETY: raw open/read/close on our own buffers: no libc call the program could see.
    let got = unsafe {
        let fd = raw_syscall3(
            SYS_OPEN,
            path.as_ptr() as isize,
            0o2000000, /* O_CLOEXEC */
            0,
        );
        if fd < 0 {
            return true;
        }
        let got = raw_syscall3(SYS_READ, fd, buf.as_mut_ptr() as isize, buf.len() as isize);
        raw_syscall3(SYS_CLOSE, fd, 0, 0);
        got
    };
    if got <= 0 {
        return true;
    }
    let text = &buf[..got as usize];
    match text.iter().rposition(|&b| b == b')') {
        Some(i) if i + 2 < text.len() => matches!(text[i + 2], b'S' | b'D'),
        _ => false,
    }
}

fn errno() -> c_int {
    // SAFETY: glibc's per-thread errno.
    unsafe { *__errno_location() }
}

fn set_errno(value: c_int) {
    // SAFETY: as above.
    unsafe { *__errno_location() = value }
}

fn shared() -> &'static Shared {
    // SAFETY: only called while ACTIVE, after SHARED was set to a live mapping that is
    // never unmapped.
    unsafe { &*SHARED.load(Relaxed) }
}

fn tid() -> u32 {
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

unsafe extern "C" fn agent_init() {
    let fd_text = getenv(c"ORDO_REPLAY_SHM_FD".as_ptr());
    if fd_text.is_null() {
        return;
    }
    let fd = parse_int(fd_text);
    unsetenv(c"ORDO_REPLAY_SHM_FD".as_ptr());
    // Give the program the environment it would have had without the agent.
    let original = getenv(c"ORDO_REPLAY_ORIGINAL_PRELOAD".as_ptr());
    if original.is_null() {
        unsetenv(c"LD_PRELOAD".as_ptr());
    } else {
        setenv(c"LD_PRELOAD".as_ptr(), original, 1);
        unsetenv(c"ORDO_REPLAY_ORIGINAL_PRELOAD".as_ptr());
    }
    let Some(fd) = fd else { return };
    let size = std::mem::size_of::<Shared>();
    let p = mmap(
        null_mut(),
        size,
        3, /* PROT_READ|PROT_WRITE */
        1, /* MAP_SHARED */
        fd,
        0,
    );
    close(fd);
    if p as isize == -1 {
        return;
    }
    let sh = &*(p as *const Shared);
    if sh.magic != MAGIC || sh.version != VERSION {
        die("the shared plan has the wrong layout (ordo and its agent differ)");
    }
    // Only the first process to load the agent is the target; children it forks or
    // execs stay untouched.
    if sh
        .target_pid
        .compare_exchange(0, getpid() as u32, AcqRel, Relaxed)
        .is_err()
    {
        return;
    }
    // `ordo replay --json` keeps its stdout for the JSON outcome: the program's
    // output goes to stderr instead.
    if !getenv(c"ORDO_REPLAY_STDOUT_TO_STDERR".as_ptr()).is_null() {
        unsetenv(c"ORDO_REPLAY_STDOUT_TO_STDERR".as_ptr());
        dup2(2, 1);
    }
    SHARED.store(p as *mut Shared, Relaxed);
    let mut base = 0u64;
    dl_iterate_phdr(main_base, (&mut base as *mut u64).cast());
    sh.main_base.store(base, Relaxed);
    resolve_symbols(sh);
    pthread_atfork(None, None, Some(after_fork_in_child));
    ACTIVE.store(true, Release);
    sh.attached.store(1, Release);
    // The main thread is `0`.
    thread_begin(0, [0; MAX_DEPTH]);
}

unsafe extern "C" fn agent_fini() {
    if !ACTIVE.load(Relaxed) {
        return;
    }
    // Returning from main: the main thread's exit.
    if ME.with(|me| me.depth.get() == 0) {
        thread_end();
    }
}

unsafe extern "C" fn after_fork_in_child() {
    ACTIVE.store(false, Relaxed);
}

unsafe extern "C" fn main_base(info: *mut DlPhdrInfo, _size: usize, data: *mut c_void) -> c_int {
    // The first object is the main program.
    *(data as *mut u64) = (*info).addr;
    1
}

unsafe fn parse_int(text: *const c_char) -> Option<c_int> {
    let mut n: c_int = 0;
    let mut p = text;
    if *p == 0 {
        return None;
    }
    while *p != 0 {
        let c = *p as u8;
        if !c.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add((c - b'0') as c_int)?;
        p = p.add(1);
    }
    Some(n)
}

/// Runtime addresses of the schedule's symbols: the main executable's load bias plus
/// the address the driver found in its symbol table, or `dlsym` for the others.
fn resolve_symbols(sh: &Shared) {
    let base = sh.main_base.load(Relaxed);
    for s in &sh.symbols[..sh.n_symbols as usize] {
        if s.addr.load(Relaxed) != 0 {
            continue;
        }
        let addr = if s.vaddr != 0 {
            base + s.vaddr
        } else {
            // SAFETY: the name is NUL-terminated (the driver writes it so).
            unsafe { dlsym(RTLD_DEFAULT, s.name.as_ptr().cast()) as u64 }
        };
        if addr != 0 {
            s.addr.store(addr + s.offset, Relaxed);
        }
    }
}

// ---------------------------------------------------------------------------------
// Threads
// ---------------------------------------------------------------------------------

fn take_slot(depth: u32, path: [u32; MAX_DEPTH]) -> u32 {
    let sh = shared();
    let i = sh.n_slots.fetch_add(1, Relaxed);
    if i as usize >= MAX_SLOTS {
        return NONE;
    }
    let slot = &sh.slots[i as usize];
    slot.depth.store(depth, Relaxed);
    for (d, p) in path.iter().enumerate() {
        slot.path[d].store(*p, Relaxed);
    }
    slot.state.store(STATE_RUNNING, Relaxed);
    slot.tid.store(tid(), Release);
    i
}

fn plan_thread_of(depth: u32, path: &[u32; MAX_DEPTH]) -> u32 {
    if depth == NONE {
        return NONE;
    }
    let sh = shared();
    for (i, t) in sh.threads[..sh.n_threads as usize].iter().enumerate() {
        if t.depth == depth && t.path[..depth as usize] == path[..depth as usize] {
            t.tid.store(tid(), Relaxed);
            return i as u32;
        }
    }
    NONE
}

/// A thread starts: take its identity, then its `thread_start` event.
fn thread_begin(depth: u32, path: [u32; MAX_DEPTH]) {
    ME.with(|me| {
        me.depth.set(depth);
        me.path.set(path);
        me.children.set(0);
        me.exited.set(false);
        me.slot.set(take_slot(depth, path));
        me.plan.set(plan_thread_of(depth, &path));
    });
    let sh = shared();
    if (0..sh.n_symbols as usize).any(|i| sh.symbols[i].addr.load(Relaxed) == 0) {
        // A library loaded since start-up may define it now.
        resolve_symbols(sh);
    }
    if let Some(c) = enter() {
        c.gate(kind::THREAD_START, 0, GateObject::Any);
        c.happened(kind::THREAD_START, 0, None);
    }
}

/// A thread ends (its routine returned, it called `pthread_exit`, or main returned).
fn thread_end() {
    let Some(c) = enter() else { return };
    if ME.with(|me| me.exited.replace(true)) {
        return;
    }
    c.gate(kind::THREAD_EXIT, 0, GateObject::Any);
    let stamp = c.stamp_before(kind::THREAD_EXIT);
    // The exit takes effect when the kernel has finished the thread.
    c.begins(kind::THREAD_EXIT, 0, stamp);
    c.set_state(STATE_EXITED, 0);
}

// ---------------------------------------------------------------------------------
// Naming and gating
// ---------------------------------------------------------------------------------

/// How a gate picks the plan events it applies to.
#[derive(Clone, Copy)]
enum GateObject {
    /// Events on this object address.
    Addr,
    /// Any object: used where the object is not known before the call
    /// (`thread_create`'s handle) or there is none.
    Any,
}

/// A wrapper's view of the calling thread.
#[derive(Clone, Copy)]
struct Caller {
    slot: u32,
    plan: u32,
}

/// The calling thread, or `None` when the agent is inactive or re-entered.
fn enter() -> Option<Caller> {
    if !ACTIVE.load(Acquire) {
        return None;
    }
    ME.with(|me| {
        if me.busy.get() {
            return None;
        }
        if me.slot.get() == NONE && me.depth.get() == NONE {
            // A thread the agent did not see start (created before it loaded, or
            // not by pthread_create): watched, never named.
            me.depth.set(NONE - 1);
            me.slot.set(take_slot(NONE, [0; MAX_DEPTH]));
        }
        let c = Caller {
            slot: me.slot.get(),
            plan: me.plan.get(),
        };
        if let Some(slot) = c.slot() {
            slot.progress.fetch_add(1, Relaxed);
        }
        Some(c)
    })
}

impl Caller {
    fn slot(&self) -> Option<&'static Slot> {
        (self.slot != NONE).then(|| &shared().slots[self.slot as usize])
    }

    fn plan(&self) -> Option<&'static PlanThread> {
        (self.plan != NONE).then(|| &shared().threads[self.plan as usize])
    }

    fn set_state(&self, state: u32, detail: u32) {
        if let Some(slot) = self.slot() {
            slot.detail.store(detail, Relaxed);
            slot.state.store(state, Release);
        }
    }

    /// The `@K` of `addr` in its family for this thread, registering it when it is
    /// new (objects count in order of the thread's first event on them).
    fn nth(&self, t: &PlanThread, family: usize, addr: u64) -> Option<u32> {
        let kmax = t.kmax[family] as usize;
        if kmax == 0 {
            return None;
        }
        let n = t.nobjects[family].load(Relaxed) as usize;
        for k in 0..n {
            if t.objects[family][k].load(Relaxed) == addr {
                return Some(k as u32 + 1);
            }
        }
        if n < kmax {
            t.objects[family][n].store(addr, Relaxed);
            t.nobjects[family].store(n as u32 + 1, Relaxed);
            return Some(n as u32 + 1);
        }
        None
    }

    fn matches(&self, e: &PlanEvent, nth: Option<u32>, addr: u64, how: GateObject) -> bool {
        if matches!(how, GateObject::Any) {
            return true;
        }
        match e.object_kind {
            OBJ_NTH => nth == Some(e.object),
            OBJ_SYMBOL => {
                let a = shared().symbols[e.object as usize].addr.load(Relaxed);
                a != 0 && a == addr
            }
            _ => true,
        }
    }

    fn events(&self, t: &PlanThread) -> &'static [PlanEvent] {
        let sh = shared();
        &sh.events[t.first_event as usize..(t.first_event + t.event_count) as usize]
    }

    /// Holds the thread until the predecessors of its next event of `kind` on `addr`
    /// have happened. Call it before the call takes effect, once per kind the call can
    /// turn out to be (a trylock is a lock or a failed lock).
    fn gate(&self, kind: u16, addr: u64, how: GateObject) {
        let Some(t) = self.plan() else { return };
        let nth = match how {
            GateObject::Addr => self.nth(t, family_of(kind), addr),
            GateObject::Any => None,
        };
        let sh = shared();
        let first = t.first_event;
        for (i, e) in self.events(t).iter().enumerate() {
            if e.kind != kind || e.gated == 0 || e.count.load(Relaxed) + 1 != e.occurrence {
                continue;
            }
            if !self.matches(e, nth, addr, how) {
                continue;
            }
            self.wait_for(sh, first + i as u32, e);
        }
    }

    fn wait_for(&self, sh: &Shared, index: u32, e: &PlanEvent) {
        let preds = &sh.preds[e.pred_start as usize..(e.pred_start + e.pred_count) as usize];
        let mut held = false;
        loop {
            if sh.flags.load(Acquire) & (FLAG_CHECK_ONLY | FLAG_RELEASED) != 0 {
                break;
            }
            let epoch = sh.epoch.load(Acquire);
            let mut in_progress = false;
            let mut all_done = true;
            for &p in preds {
                let pred = &sh.events[p as usize];
                match pred.done.load(Acquire) {
                    DONE => {}
                    IN_PROGRESS if in_progress_finished(pred) => {
                        if pred
                            .done
                            .compare_exchange(IN_PROGRESS, DONE, AcqRel, Acquire)
                            .is_ok()
                        {
                            sh.epoch.fetch_add(1, Release);
                            // SAFETY: as below.
                            unsafe { futex(&sh.epoch, FUTEX_WAKE, i32::MAX as u32) };
                        }
                    }
                    IN_PROGRESS => {
                        in_progress = true;
                        all_done = false;
                    }
                    _ => all_done = false,
                }
            }
            if all_done {
                break;
            }
            if !held {
                held = true;
                self.set_state(STATE_HELD, index);
            }
            if in_progress {
                // A predecessor takes effect inside another thread's blocking call
                // (or its exit), which tells nobody when it happened: look again
                // shortly. Only while that call is under way, so briefly.
                // SAFETY: the word lives in the shared mapping.
                unsafe { futex_wait_ns(&sh.epoch, epoch, 200_000) };
            } else {
                // SAFETY: the word lives in the shared mapping; a changed epoch returns at once.
                unsafe { futex(&sh.epoch, FUTEX_WAIT, epoch) };
            }
        }
        if held {
            self.set_state(STATE_RUNNING, 0);
        }
    }

    /// Holds the creating thread until the named start of the child with this id may
    /// happen.
    fn gate_child_start(&self, depth: u32, path: &[u32; MAX_DEPTH]) {
        let sh = shared();
        for t in &sh.threads[..sh.n_threads as usize] {
            if t.depth != depth || t.path[..depth as usize] != path[..depth as usize] {
                continue;
            }
            for (i, e) in self.events(t).iter().enumerate() {
                if e.kind == kind::THREAD_START && e.occurrence == 1 && e.gated != 0 {
                    self.wait_for(sh, t.first_event + i as u32, e);
                }
            }
        }
    }

    /// An order stamp taken before a call, for kinds stamped at entry.
    fn stamp_before(&self, kind: u16) -> Option<u64> {
        (self.plan != NONE && stamps_before(kind)).then(|| shared().stamp.fetch_add(1, AcqRel) + 1)
    }

    /// The event happened: count it and mark named events done, waking held threads.
    fn happened(&self, kind: u16, addr: u64, stamp: Option<u64>) {
        self.mark(kind, addr, stamp, DONE);
    }

    /// The event is taking effect inside the blocking call about to be made (or the
    /// thread's exit): count it, and let waiters see it as done once the call blocks
    /// (or the thread is gone). [`Caller::finish_in_progress`] completes it on return.
    fn begins(&self, kind: u16, addr: u64, stamp: Option<u64>) {
        self.mark(kind, addr, stamp, IN_PROGRESS);
    }

    /// The call returned: whatever it had in progress has certainly happened.
    fn finish_in_progress(&self) {
        let Some(t) = self.plan() else { return };
        let sh = shared();
        let me = tid();
        let mut any = false;
        for e in self.events(t) {
            if e.done_tid.load(Relaxed) == me
                && e.done
                    .compare_exchange(IN_PROGRESS, DONE, AcqRel, Relaxed)
                    .is_ok()
            {
                any = true;
            }
        }
        if any {
            sh.epoch.fetch_add(1, Release);
            // SAFETY: as in wait_for.
            unsafe { futex(&sh.epoch, FUTEX_WAKE, i32::MAX as u32) };
        }
    }

    fn mark(&self, kind: u16, addr: u64, stamp: Option<u64>, state: u32) {
        let Some(t) = self.plan() else { return };
        let nth = self.nth(t, family_of(kind), addr);
        let sh = shared();
        let mut any = false;
        for e in self.events(t) {
            if e.kind != kind || !self.matches(e, nth, addr, GateObject::Addr) {
                continue;
            }
            let n = e.count.load(Relaxed) + 1;
            e.count.store(n, Relaxed);
            if n == e.occurrence {
                let s = stamp.unwrap_or_else(|| sh.stamp.fetch_add(1, AcqRel) + 1);
                e.stamp.store(s, Relaxed);
                e.done_tid.store(tid(), Relaxed);
                e.done.store(state, Release);
                any = true;
            }
        }
        if any {
            sh.epoch.fetch_add(1, Release);
            // SAFETY: as in wait_for.
            unsafe { futex(&sh.epoch, FUTEX_WAKE, i32::MAX as u32) };
        }
    }
}

/// Runs `call` as one event of `kind` on `addr`: gate, stamp, mark blocked, call,
/// count. `blocking` is the slot state during the call.
#[inline]
fn simple(kind: u16, addr: *mut c_void, blocking: u32, call: impl FnOnce() -> c_int) -> c_int {
    let Some(c) = enter() else { return call() };
    let addr = addr as u64;
    c.gate(kind, addr, GateObject::Addr);
    let stamp = c.stamp_before(kind);
    if blocking != STATE_RUNNING {
        c.set_state(blocking, kind as u32);
    }
    let r = call();
    let saved = errno();
    if blocking != STATE_RUNNING {
        c.set_state(STATE_RUNNING, 0);
    }
    c.happened(kind, addr, stamp);
    set_errno(saved);
    r
}

/// A call that acquires (`ok_kind` on success) or fails (`failed_kind`): gated as
/// either, since which one it will be is known only afterwards.
#[inline]
fn acquire(
    ok_kind: u16,
    failed_kind: u16,
    addr: *mut c_void,
    blocking: u32,
    succeeded: impl FnOnce(c_int) -> bool,
    call: impl FnOnce() -> c_int,
) -> c_int {
    let Some(c) = enter() else { return call() };
    let addr = addr as u64;
    c.gate(ok_kind, addr, GateObject::Addr);
    c.gate(failed_kind, addr, GateObject::Addr);
    if blocking != STATE_RUNNING {
        c.set_state(blocking, ok_kind as u32);
    }
    let r = call();
    let saved = errno();
    if blocking != STATE_RUNNING {
        c.set_state(STATE_RUNNING, 0);
    }
    c.happened(if succeeded(r) { ok_kind } else { failed_kind }, addr, None);
    set_errno(saved);
    r
}

type P = *mut c_void;

// ---------------------------------------------------------------------------------
// Mutexes
// ---------------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_mutex_lock(m: P) -> c_int {
    let real = real!("pthread_mutex_lock", fn(P) -> c_int);
    acquire(
        kind::MUTEX_LOCK,
        kind::MUTEX_LOCK_FAILED,
        m,
        STATE_BLOCKED,
        |r| r == 0,
        || real(m),
    )
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_mutex_trylock(m: P) -> c_int {
    let real = real!("pthread_mutex_trylock", fn(P) -> c_int);
    acquire(
        kind::MUTEX_LOCK,
        kind::MUTEX_LOCK_FAILED,
        m,
        STATE_RUNNING,
        |r| r == 0,
        || real(m),
    )
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_mutex_timedlock(m: P, ts: P) -> c_int {
    let real = real!("pthread_mutex_timedlock", fn(P, P) -> c_int);
    acquire(
        kind::MUTEX_LOCK,
        kind::MUTEX_LOCK_FAILED,
        m,
        STATE_TIMED,
        |r| r == 0,
        || real(m, ts),
    )
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_mutex_clocklock(m: P, clock: c_int, ts: P) -> c_int {
    let real = real!("pthread_mutex_clocklock", fn(P, c_int, P) -> c_int);
    acquire(
        kind::MUTEX_LOCK,
        kind::MUTEX_LOCK_FAILED,
        m,
        STATE_TIMED,
        |r| r == 0,
        || real(m, clock, ts),
    )
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_mutex_unlock(m: P) -> c_int {
    let real = real!("pthread_mutex_unlock", fn(P) -> c_int);
    simple(kind::MUTEX_UNLOCK, m, STATE_RUNNING, || real(m))
}

// ---------------------------------------------------------------------------------
// Condition variables
// ---------------------------------------------------------------------------------

/// `pthread_cond_*wait`: the release of the mutex and the start of the wait are
/// gated before the call; the wake-up and the reacquisition happen inside it, so
/// their gates can only hold the thread after it returns (with the mutex held).
unsafe fn cond_wait(c: P, m: P, blocking: u32, call: impl FnOnce() -> c_int) -> c_int {
    let Some(me) = enter() else { return call() };
    let (cond, mutex) = (c as u64, m as u64);
    me.gate(kind::COND_WAIT_BEGIN, cond, GateObject::Addr);
    me.gate(kind::MUTEX_UNLOCK, mutex, GateObject::Addr);
    let s1 = me.stamp_before(kind::COND_WAIT_BEGIN);
    let s2 = me.stamp_before(kind::MUTEX_UNLOCK);
    // Both take effect inside the call: done for others once this thread sleeps in it.
    me.begins(kind::COND_WAIT_BEGIN, cond, s1);
    me.begins(kind::MUTEX_UNLOCK, mutex, s2);
    me.set_state(blocking, kind::COND_WAIT as u32);
    let r = call();
    let saved = errno();
    me.set_state(STATE_RUNNING, 0);
    me.finish_in_progress();
    me.gate(kind::COND_WAIT, cond, GateObject::Addr);
    me.happened(kind::COND_WAIT, cond, None);
    me.gate(kind::MUTEX_LOCK, mutex, GateObject::Addr);
    me.happened(kind::MUTEX_LOCK, mutex, None);
    set_errno(saved);
    r
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_cond_wait(c: P, m: P) -> c_int {
    let real = real!("pthread_cond_wait" @ "GLIBC_2.3.2", fn(P, P) -> c_int);
    cond_wait(c, m, STATE_BLOCKED, || real(c, m))
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_cond_timedwait(c: P, m: P, ts: P) -> c_int {
    let real = real!("pthread_cond_timedwait" @ "GLIBC_2.3.2", fn(P, P, P) -> c_int);
    cond_wait(c, m, STATE_TIMED, || real(c, m, ts))
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_cond_clockwait(c: P, m: P, clock: c_int, ts: P) -> c_int {
    let real = real!("pthread_cond_clockwait", fn(P, P, c_int, P) -> c_int);
    cond_wait(c, m, STATE_TIMED, || real(c, m, clock, ts))
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_cond_signal(c: P) -> c_int {
    let real = real!("pthread_cond_signal" @ "GLIBC_2.3.2", fn(P) -> c_int);
    simple(kind::COND_SIGNAL, c, STATE_RUNNING, || real(c))
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_cond_broadcast(c: P) -> c_int {
    let real = real!("pthread_cond_broadcast" @ "GLIBC_2.3.2", fn(P) -> c_int);
    simple(kind::COND_BROADCAST, c, STATE_RUNNING, || real(c))
}

// ---------------------------------------------------------------------------------
// Read-write locks
// ---------------------------------------------------------------------------------

macro_rules! rwlock_acquire {
    ($name:ident, $real:literal, $ok:expr, $state:expr $(, $arg:ident : $ty:ty)*) => {
        #[no_mangle]
        pub unsafe extern "C-unwind" fn $name(l: P $(, $arg: $ty)*) -> c_int {
            let real = real!($real, fn(P $(, $ty)*) -> c_int);
            acquire($ok, kind::RWLOCK_LOCK_FAILED, l, $state, |r| r == 0, || real(l $(, $arg)*))
        }
    };
}

rwlock_acquire!(
    pthread_rwlock_rdlock,
    "pthread_rwlock_rdlock",
    kind::RWLOCK_RDLOCK,
    STATE_BLOCKED
);
rwlock_acquire!(
    pthread_rwlock_tryrdlock,
    "pthread_rwlock_tryrdlock",
    kind::RWLOCK_RDLOCK,
    STATE_RUNNING
);
rwlock_acquire!(pthread_rwlock_timedrdlock, "pthread_rwlock_timedrdlock", kind::RWLOCK_RDLOCK, STATE_TIMED, ts: P);
rwlock_acquire!(pthread_rwlock_clockrdlock, "pthread_rwlock_clockrdlock", kind::RWLOCK_RDLOCK, STATE_TIMED, clock: c_int, ts: P);
rwlock_acquire!(
    pthread_rwlock_wrlock,
    "pthread_rwlock_wrlock",
    kind::RWLOCK_WRLOCK,
    STATE_BLOCKED
);
rwlock_acquire!(
    pthread_rwlock_trywrlock,
    "pthread_rwlock_trywrlock",
    kind::RWLOCK_WRLOCK,
    STATE_RUNNING
);
rwlock_acquire!(pthread_rwlock_timedwrlock, "pthread_rwlock_timedwrlock", kind::RWLOCK_WRLOCK, STATE_TIMED, ts: P);
rwlock_acquire!(pthread_rwlock_clockwrlock, "pthread_rwlock_clockwrlock", kind::RWLOCK_WRLOCK, STATE_TIMED, clock: c_int, ts: P);

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_rwlock_unlock(l: P) -> c_int {
    let real = real!("pthread_rwlock_unlock", fn(P) -> c_int);
    simple(kind::RWLOCK_UNLOCK, l, STATE_RUNNING, || real(l))
}

// ---------------------------------------------------------------------------------
// Semaphores and barriers
// ---------------------------------------------------------------------------------

#[no_mangle]
pub unsafe extern "C-unwind" fn sem_wait(s: P) -> c_int {
    let real = real!("sem_wait", fn(P) -> c_int);
    acquire(
        kind::SEM_WAIT,
        kind::SEM_WAIT_FAILED,
        s,
        STATE_BLOCKED,
        |r| r == 0,
        || real(s),
    )
}

#[no_mangle]
pub unsafe extern "C-unwind" fn sem_trywait(s: P) -> c_int {
    let real = real!("sem_trywait", fn(P) -> c_int);
    acquire(
        kind::SEM_WAIT,
        kind::SEM_WAIT_FAILED,
        s,
        STATE_RUNNING,
        |r| r == 0,
        || real(s),
    )
}

#[no_mangle]
pub unsafe extern "C-unwind" fn sem_timedwait(s: P, ts: P) -> c_int {
    let real = real!("sem_timedwait", fn(P, P) -> c_int);
    acquire(
        kind::SEM_WAIT,
        kind::SEM_WAIT_FAILED,
        s,
        STATE_TIMED,
        |r| r == 0,
        || real(s, ts),
    )
}

#[no_mangle]
pub unsafe extern "C-unwind" fn sem_clockwait(s: P, clock: c_int, ts: P) -> c_int {
    let real = real!("sem_clockwait", fn(P, c_int, P) -> c_int);
    acquire(
        kind::SEM_WAIT,
        kind::SEM_WAIT_FAILED,
        s,
        STATE_TIMED,
        |r| r == 0,
        || real(s, clock, ts),
    )
}

#[no_mangle]
pub unsafe extern "C-unwind" fn sem_post(s: P) -> c_int {
    let real = real!("sem_post", fn(P) -> c_int);
    simple(kind::SEM_POST, s, STATE_RUNNING, || real(s))
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_barrier_wait(b: P) -> c_int {
    let real = real!("pthread_barrier_wait", fn(P) -> c_int);
    let Some(c) = enter() else { return real(b) };
    let addr = b as u64;
    c.gate(kind::BARRIER_ARRIVE, addr, GateObject::Addr);
    let stamp = c.stamp_before(kind::BARRIER_ARRIVE);
    c.begins(kind::BARRIER_ARRIVE, addr, stamp);
    c.set_state(STATE_BLOCKED, kind::BARRIER_WAIT as u32);
    let r = real(b);
    c.set_state(STATE_RUNNING, 0);
    c.finish_in_progress();
    c.gate(kind::BARRIER_WAIT, addr, GateObject::Addr);
    c.happened(kind::BARRIER_WAIT, addr, None);
    r
}

// ---------------------------------------------------------------------------------
// Threads
// ---------------------------------------------------------------------------------

type StartRoutine = unsafe extern "C-unwind" fn(P) -> P;

/// What a new thread needs to know before running the program's routine.
#[derive(Clone, Copy)]
struct StartArgs {
    routine: StartRoutine,
    arg: P,
    depth: u32,
    path: [u32; MAX_DEPTH],
}

/// The routine every thread created through `pthread_create` runs first. `C-unwind`
/// and nothing to drop: `pthread_exit` and cancellation unwind through this frame.
unsafe extern "C-unwind" fn start_thread(p: P) -> P {
    let args = *(p as *const StartArgs);
    free(p);
    thread_begin(args.depth, args.path);
    let result = (args.routine)(args.arg);
    thread_end();
    result
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_create(
    th: *mut u64,
    attr: P,
    routine: StartRoutine,
    arg: P,
) -> c_int {
    let real = real!("pthread_create", fn(*mut u64, P, StartRoutine, P) -> c_int);
    let Some(c) = enter() else {
        return real(th, attr, routine, arg);
    };
    let (depth, mut path, n) = ME.with(|me| (me.depth.get(), me.path.get(), me.children.get() + 1));
    let child_depth = if (depth as usize) < MAX_DEPTH {
        path[depth as usize] = n;
        depth + 1
    } else {
        NONE
    };
    ME.with(|me| me.busy.set(true));
    let block = malloc(std::mem::size_of::<StartArgs>()) as *mut StartArgs;
    ME.with(|me| me.busy.set(false));
    if block.is_null() {
        return real(th, attr, routine, arg);
    }
    block.write(StartArgs {
        routine,
        arg,
        depth: child_depth,
        path,
    });
    // The handle is unknown until the call returns: gate on the occurrence alone.
    c.gate(kind::THREAD_CREATE, 0, GateObject::Any);
    // The child's start takes effect in the kernel as soon as it is created: hold
    // its creation until the child's start may happen.
    if child_depth != NONE {
        c.gate_child_start(child_depth, &path);
    }
    let stamp = c.stamp_before(kind::THREAD_CREATE);
    let r = real(th, attr, start_thread, block.cast());
    let saved = errno();
    if r == 0 {
        ME.with(|me| me.children.set(n));
    } else {
        free(block.cast());
    }
    let handle = if r == 0 && !th.is_null() { *th } else { 0 };
    c.happened(kind::THREAD_CREATE, handle, stamp);
    set_errno(saved);
    r
}

unsafe fn join(th: u64, blocking: u32, call: impl FnOnce() -> c_int) -> c_int {
    let Some(c) = enter() else { return call() };
    c.gate(kind::THREAD_JOIN, th, GateObject::Addr);
    c.set_state(blocking, kind::THREAD_JOIN as u32);
    let r = call();
    c.set_state(STATE_RUNNING, 0);
    c.happened(kind::THREAD_JOIN, th, None);
    r
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_join(th: u64, ret: *mut P) -> c_int {
    let real = real!("pthread_join", fn(u64, *mut P) -> c_int);
    join(th, STATE_BLOCKED, || real(th, ret))
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_tryjoin_np(th: u64, ret: *mut P) -> c_int {
    let real = real!("pthread_tryjoin_np", fn(u64, *mut P) -> c_int);
    join(th, STATE_RUNNING, || real(th, ret))
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_timedjoin_np(th: u64, ret: *mut P, ts: P) -> c_int {
    let real = real!("pthread_timedjoin_np", fn(u64, *mut P, P) -> c_int);
    join(th, STATE_TIMED, || real(th, ret, ts))
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_clockjoin_np(
    th: u64,
    ret: *mut P,
    clock: c_int,
    ts: P,
) -> c_int {
    let real = real!("pthread_clockjoin_np", fn(u64, *mut P, c_int, P) -> c_int);
    join(th, STATE_TIMED, || real(th, ret, clock, ts))
}

#[no_mangle]
pub unsafe extern "C-unwind" fn pthread_exit(ret: P) -> ! {
    let real = real!("pthread_exit", fn(P) -> ());
    thread_end();
    real(ret);
    die("pthread_exit returned")
}

// ---------------------------------------------------------------------------------
// Direct futex calls through libc's syscall()
// ---------------------------------------------------------------------------------

/// FUTEX_WAIT, FUTEX_LOCK_PI, FUTEX_TRYLOCK_PI, FUTEX_WAIT_BITSET,
/// FUTEX_WAIT_REQUEUE_PI, FUTEX_LOCK_PI2: what the recorder calls a futex wait.
fn is_futex_wait(cmd: c_long) -> bool {
    matches!(cmd, 0 | 6 | 8 | 9 | 11 | 13)
}

/// libc's variadic `syscall`. On x86-64 variadic integer arguments travel exactly
/// like fixed ones (six registers, then the stack), so six fixed parameters after the
/// number see every argument a caller can pass.
#[no_mangle]
pub unsafe extern "C-unwind" fn syscall(
    n: c_long,
    a1: c_long,
    a2: c_long,
    a3: c_long,
    a4: c_long,
    a5: c_long,
    a6: c_long,
) -> c_long {
    let real = real!(
        "syscall",
        fn(c_long, c_long, c_long, c_long, c_long, c_long, c_long) -> c_long
    );
    if n != SYS_FUTEX {
        return real(n, a1, a2, a3, a4, a5, a6);
    }
    let Some(c) = enter() else {
        return real(n, a1, a2, a3, a4, a5, a6);
    };
    let addr = a1 as u64;
    let cmd = a2 & 0x7f;
    let result;
    if is_futex_wait(cmd) {
        c.gate(kind::FUTEX_WAIT, addr, GateObject::Addr);
        // A wait with a timeout comes back by itself.
        c.set_state(
            if a4 != 0 { STATE_TIMED } else { STATE_BLOCKED },
            kind::FUTEX_WAIT as u32,
        );
        result = real(n, a1, a2, a3, a4, a5, a6);
        let saved = errno();
        c.set_state(STATE_RUNNING, 0);
        c.happened(kind::FUTEX_WAIT, addr, None);
        set_errno(saved);
    } else {
        c.gate(kind::FUTEX_WAKE, addr, GateObject::Addr);
        let stamp = c.stamp_before(kind::FUTEX_WAKE);
        result = real(n, a1, a2, a3, a4, a5, a6);
        let saved = errno();
        c.happened(kind::FUTEX_WAKE, addr, stamp);
        set_errno(saved);
    }
    result
}
