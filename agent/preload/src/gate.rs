//! Replay gating: logical thread ids, event naming as the schedule names events,
//! and holding a thread on a futex word before a call the schedule orders after
//! others until those have happened.
//!
//! The plan and the results live in [`Shared`], a memfd the replay driver maps too
//! (layout in [`crate::shm`]). Everything the schedule does not name runs at full
//! speed, in parallel; with an empty plan the wrappers only count calls.

use std::cell::{Cell, UnsafeCell};
use std::ffi::{c_int, c_void};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering::*};

use crate::shm::*;
use crate::{
    die, dl_iterate_phdr, dlsym, dup2, futex, futex_wait_ns, getenv, getpid, pthread_atfork,
    raw_syscall3, tid, unsetenv, DlPhdrInfo, FUTEX_WAKE,
};

const RTLD_DEFAULT: *mut c_void = null_mut();
pub(crate) const NONE: u32 = u32::MAX;

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

/// Where a predecessor stands, for a thread waiting on it.
enum PredState {
    Done,
    /// Taking effect inside another thread's blocking call or exit, not yet surely.
    InProgress,
    NotYet,
}

/// A predecessor's state; an in-progress one that has surely finished is marked
/// done (and the waiters woken).
fn pred_state(sh: &Shared, pred: &PlanEvent) -> PredState {
    match pred.done.load(Acquire) {
        DONE => PredState::Done,
        IN_PROGRESS if in_progress_finished(pred) => {
            if pred
                .done
                .compare_exchange(IN_PROGRESS, DONE, AcqRel, Acquire)
                .is_ok()
            {
                sh.epoch.fetch_add(1, Release);
                // SAFETY: a futex word in the shared mapping.
                unsafe { futex(&sh.epoch, FUTEX_WAKE, i32::MAX as u32) };
            }
            PredState::Done
        }
        IN_PROGRESS => PredState::InProgress,
        _ => PredState::NotYet,
    }
}

/// Whether every predecessor of `e` has happened.
fn preds_done(sh: &Shared, e: &PlanEvent) -> bool {
    sh.preds[e.pred_start as usize..(e.pred_start + e.pred_count) as usize]
        .iter()
        .all(|&p| matches!(pred_state(sh, &sh.events[p as usize]), PredState::Done))
}

pub(crate) static SHARED: AtomicPtr<Shared> = AtomicPtr::new(null_mut());
pub(crate) static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Whether this process replays (gates).
#[inline(always)]
pub(crate) fn on() -> bool {
    ACTIVE.load(Relaxed)
}

/// Per-thread identity and agent state. Only `Copy` fields: no TLS destructor.
pub(crate) struct ThreadState {
    /// Index into `Shared::slots`, `NONE` until the thread has one.
    pub(crate) slot: Cell<u32>,
    /// Index into `Shared::threads` when the schedule names this thread.
    pub(crate) plan: Cell<u32>,
    /// Depth of the logical id, `NONE` when unknown.
    pub(crate) depth: Cell<u32>,
    pub(crate) path: Cell<[u32; MAX_DEPTH]>,
    /// Threads created so far (the next child is `children + 1`).
    pub(crate) children: Cell<u32>,
    /// Inside agent code that may call back into a wrapper (malloc, dlsym).
    pub(crate) busy: Cell<bool>,
    /// The exit event was handled.
    pub(crate) exited: Cell<bool>,
    /// Distinct objects seen per family, for `@K` (capped at the plan's `kmax`).
    pub(crate) nobjects: Cell<[u32; FAMILIES]>,
    /// The first [`INLINE_K`] distinct objects per family, in order of first event.
    pub(crate) objects: UnsafeCell<[[u64; INLINE_K]; FAMILIES]>,
    /// The thread's objects past the first [`INLINE_K`] of a family, up to the
    /// plan's `kmax` (any `@K` a schedule names can be gated).
    pub(crate) more_objects: Cell<ObjectTable>,
    /// Per `*` successor: this thread's matching events so far.
    pub(crate) wild_counts: UnsafeCell<[u32; MAX_WILD]>,
}

thread_local! {
    pub(crate) static ME: ThreadState = const {
        ThreadState {
            slot: Cell::new(NONE),
            plan: Cell::new(NONE),
            depth: Cell::new(NONE),
            path: Cell::new([0; MAX_DEPTH]),
            children: Cell::new(0),
            busy: Cell::new(false),
            exited: Cell::new(false),
            nobjects: Cell::new([0; FAMILIES]),
            objects: UnsafeCell::new([[0; INLINE_K]; FAMILIES]),
            more_objects: Cell::new(ObjectTable::EMPTY),
            wild_counts: UnsafeCell::new([0; MAX_WILD]),
        }
    };
}

const SYS_READ: isize = 0;
const SYS_CLOSE: isize = 3;
const SYS_OPEN: isize = 2;
const SYS_TGKILL: isize = 234;
const SYS_GETPID: isize = 39;
const ESRCH: isize = 3;

fn thread_gone(tid: u32) -> bool {
    // SAFETY: signal 0 only checks that the thread exists.
    unsafe {
        let pid = raw_syscall3(SYS_GETPID, 0, 0, 0);
        raw_syscall3(SYS_TGKILL, pid, tid as isize, 0) == -ESRCH
    }
}

/// Whether thread `tid` of this process is asleep in the kernel (`S` or `D`), or gone.
pub(crate) fn thread_asleep(tid: u32) -> bool {
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

pub(crate) fn shared() -> &'static Shared {
    // SAFETY: only called while ACTIVE, after SHARED was set to a live mapping that is
    // never unmapped.
    unsafe { &*SHARED.load(Relaxed) }
}

/// The process that started the program (`ordo replay`): while a thread is held it
/// checks, every [`DRIVER_CHECK_NS`], that this is still its parent.
static DRIVER: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// How often a held thread checks that the driver is alive.
const DRIVER_CHECK_NS: i64 = 250_000_000;

const SYS_GETPPID: isize = 110;

/// Whether the driver died: the program was reparented (a killed `ordo replay`
/// cannot release its gates; a death signal would not do, since the thread that
/// forked the program exits long before the replay ends).
fn driver_gone() -> bool {
    // SAFETY: getppid has no arguments and cannot fail.
    let parent = unsafe { raw_syscall3(SYS_GETPPID, 0, 0, 0) } as i32;
    parent != DRIVER.load(Relaxed)
}

/// Maps the replay plan (descriptor `fd`) and starts gating in this process.
///
/// # Safety
/// Once, at start-up (before the program's threads run): `fd` must be negative or
/// the agent's own descriptor of the driver's [`Shared`] page, which it takes over
/// and closes.
pub(crate) unsafe fn start(fd: c_int) {
    // SAFETY: the caller's descriptor, of a file holding a `Shared` (its contract).
    let Some(p) = (unsafe { crate::map_shared(fd, std::mem::size_of::<Shared>()) }) else {
        return;
    };
    // SAFETY: the mapping holds a `Shared` (magic and version checked just below)
    // and is never unmapped.
    let sh = unsafe { &*(p as *const Shared) };
    if sh.magic != MAGIC || sh.version != VERSION {
        die("the shared plan has the wrong layout (ordo and its agent differ)");
    }
    // Only the first process to load the agent is the target; children it forks or
    // execs stay untouched.
    if sh
        .target_pid
        // SAFETY: getpid has no preconditions.
        .compare_exchange(0, unsafe { getpid() } as u32, AcqRel, Relaxed)
        .is_err()
    {
        return;
    }
    // `ordo replay --json` keeps its stdout for the JSON outcome: the program's
    // output goes to stderr instead.
    // SAFETY: start-up, one thread: nothing else reads or changes the environment or
    // the descriptors meanwhile; the name is a NUL-terminated literal.
    unsafe {
        if !getenv(c"ORDO_REPLAY_STDOUT_TO_STDERR".as_ptr()).is_null() {
            unsetenv(c"ORDO_REPLAY_STDOUT_TO_STDERR".as_ptr());
            dup2(2, 1);
        }
    }
    SHARED.store(p as *mut Shared, Relaxed);
    // SAFETY: getppid has no arguments and cannot fail.
    DRIVER.store(
        unsafe { raw_syscall3(SYS_GETPPID, 0, 0, 0) } as i32,
        Relaxed,
    );
    let mut base = 0u64;
    // SAFETY: the callback writes one u64 through `data`, which points to `base`.
    unsafe { dl_iterate_phdr(main_base, (&mut base as *mut u64).cast()) };
    sh.main_base.store(base, Relaxed);
    resolve_symbols(sh);
    // SAFETY: registers a child handler that only stores an atomic.
    unsafe { pthread_atfork(None, None, Some(after_fork_in_child)) };
    ACTIVE.store(true, Release);
    sh.attached.store(ATTACHED_STARTED, Release);
    // The main thread is `0`.
    thread_begin(0, [0; MAX_DEPTH]);
}

/// The program's `main` is about to run: the runtimes it links started.
pub(crate) fn main_entered() {
    if ACTIVE.load(Relaxed) {
        shared().attached.store(ATTACHED_IN_MAIN, Release);
    }
}

/// The program returned from `main` (the agent's destructor runs).
pub(crate) fn main_returned() {
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

/// `dl_iterate_phdr`'s callback: stores the first module's (the main program's) load
/// bias in `*data` and stops.
///
/// # Safety
/// `info` must be glibc's module description and `data` point to a writable `u64`.
unsafe extern "C" fn main_base(info: *mut DlPhdrInfo, _size: usize, data: *mut c_void) -> c_int {
    // The first object is the main program.
    // SAFETY: both pointers are valid for the call (the caller's contract).
    unsafe { *(data as *mut u64) = (*info).addr };
    1
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
pub(crate) fn thread_begin(depth: u32, path: [u32; MAX_DEPTH]) {
    ME.with(|me| {
        me.depth.set(depth);
        me.path.set(path);
        me.children.set(0);
        me.exited.set(false);
        me.nobjects.set([0; FAMILIES]);
        me.more_objects.replace(ObjectTable::EMPTY).free();
        // SAFETY: this thread's own state; no reference to it is live.
        unsafe { *me.wild_counts.get() = [0; MAX_WILD] };
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
    crate::trap::arm_thread();
}

/// A thread ends (its routine returned, it called `pthread_exit`, or main returned).
pub(crate) fn thread_end() {
    let Some(c) = enter() else { return };
    if ME.with(|me| me.exited.replace(true)) {
        return;
    }
    c.gate(kind::THREAD_EXIT, 0, GateObject::Any);
    crate::trap::disarm_thread();
    let stamp = c.stamp_before(kind::THREAD_EXIT);
    // The exit takes effect when the kernel has finished the thread.
    c.begins(kind::THREAD_EXIT, 0, stamp);
    c.set_state(STATE_EXITED, 0);
    // Named events of this thread are over; a later call (a TLS destructor taking
    // a lock) would map a fresh table.
    ME.with(|me| me.more_objects.replace(ObjectTable::EMPTY).free());
}

// ---------------------------------------------------------------------------------
// Naming and gating
// ---------------------------------------------------------------------------------

/// Objects per family a thread keeps in its fixed array (a linear scan, the common
/// case); those past it go to its [`ObjectTable`].
pub(crate) const INLINE_K: usize = 32;

/// One entry of an [`ObjectTable`]: an object's address, family and `@K`
/// (`k == 0`: empty).
#[derive(Clone, Copy)]
#[repr(C)]
struct ObjectEntry {
    addr: u64,
    family: u32,
    k: u32,
}

/// A thread's objects past the first [`INLINE_K`] of their family: an
/// open-addressing hash table from (family, address) to `@K`, in anonymous memory
/// of its own (mmap, not malloc: the agent names objects inside interposed calls
/// and the SIGTRAP handler of memory gates), doubled when half full. `Copy` so it
/// fits the thread's `Cell`s (no TLS destructor): the owner frees it explicitly.
#[derive(Clone, Copy)]
pub(crate) struct ObjectTable {
    entries: *mut ObjectEntry,
    /// Capacity in entries: 0 or a power of two.
    cap: usize,
    len: usize,
}

extern "C" {
    #[link_name = "mmap"]
    fn mmap_anon(
        addr: *mut c_void,
        len: usize,
        prot: c_int,
        flags: c_int,
        fd: c_int,
        off: i64,
    ) -> *mut c_void;
    fn munmap(addr: *mut c_void, len: usize) -> c_int;
}

impl ObjectTable {
    pub(crate) const EMPTY: ObjectTable = ObjectTable {
        entries: null_mut(),
        cap: 0,
        len: 0,
    };

    fn slot_of(&self, family: usize, addr: u64) -> usize {
        // Fibonacci hashing of the address, mixed with the family.
        let h = (addr ^ ((family as u64) << 59)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (h >> 32) as usize & (self.cap - 1)
    }

    /// The `@K` of `addr` in `family`, if the table has it.
    fn find(&self, family: usize, addr: u64) -> Option<u32> {
        if self.cap == 0 {
            return None;
        }
        let mut i = self.slot_of(family, addr);
        loop {
            // SAFETY: i < cap, within the mapping.
            let e = unsafe { *self.entries.add(i) };
            if e.k == 0 {
                return None;
            }
            if e.addr == addr && e.family == family as u32 {
                return Some(e.k);
            }
            i = (i + 1) & (self.cap - 1);
        }
    }

    /// Adds an object not in the table; false when no memory could be mapped.
    fn insert(&mut self, family: usize, addr: u64, k: u32) -> bool {
        if 2 * (self.len + 1) > self.cap && !self.grow() {
            return false;
        }
        let mut i = self.slot_of(family, addr);
        // SAFETY: i < cap; the table is at most half full, so an empty entry exists.
        unsafe {
            while (*self.entries.add(i)).k != 0 {
                i = (i + 1) & (self.cap - 1);
            }
            *self.entries.add(i) = ObjectEntry {
                addr,
                family: family as u32,
                k,
            };
        }
        self.len += 1;
        true
    }

    fn grow(&mut self) -> bool {
        let cap = (self.cap * 2).max(4096 / std::mem::size_of::<ObjectEntry>());
        let bytes = cap * std::mem::size_of::<ObjectEntry>();
        // SAFETY: a fresh private anonymous mapping (zeroed: every entry empty).
        let p = unsafe {
            mmap_anon(
                null_mut(),
                bytes,
                3,    /* PROT_READ|PROT_WRITE */
                0x22, /* MAP_PRIVATE|MAP_ANONYMOUS */
                -1,
                0,
            )
        };
        if p as isize == -1 {
            return false;
        }
        let old = *self;
        *self = ObjectTable {
            entries: p.cast(),
            cap,
            len: 0,
        };
        for i in 0..old.cap {
            // SAFETY: i < old.cap, within the old mapping.
            let e = unsafe { *old.entries.add(i) };
            if e.k != 0 {
                self.insert(e.family as usize, e.addr, e.k);
            }
        }
        old.free();
        true
    }

    /// Unmaps the table's memory.
    fn free(self) {
        if self.cap != 0 {
            // SAFETY: the mapping `grow` made, no longer referenced.
            unsafe {
                munmap(
                    self.entries.cast(),
                    self.cap * std::mem::size_of::<ObjectEntry>(),
                )
            };
        }
    }
}

/// How a gate picks the plan events it applies to.
#[derive(Clone, Copy)]
pub(crate) enum GateObject {
    /// Events on this object address.
    Addr,
    /// Any object: used where the object is not known before the call
    /// (`thread_create`'s handle) or there is none.
    Any,
}

/// A wrapper's view of the calling thread.
#[derive(Clone, Copy)]
pub(crate) struct Caller {
    slot: u32,
    plan: u32,
}

/// The calling thread, or `None` when the agent is inactive or re-entered.
///
/// Inlined to its first check: every wrapper asks, and while recording (gates off)
/// a call per event had been ~1 % of a recorded memcached's CPU.
#[inline(always)]
pub(crate) fn enter() -> Option<Caller> {
    if !ACTIVE.load(Acquire) {
        return None;
    }
    enter_gated()
}

/// [`enter`] once gates are on.
#[inline(never)]
fn enter_gated() -> Option<Caller> {
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
    .inspect(|c| crate::strategy::at_sync_event(shared(), c.slot))
}

impl Caller {
    pub(crate) fn slot(&self) -> Option<&'static Slot> {
        (self.slot != NONE).then(|| &shared().slots[self.slot as usize])
    }

    pub(crate) fn plan(&self) -> Option<&'static PlanThread> {
        (self.plan != NONE).then(|| &shared().threads[self.plan as usize])
    }

    pub(crate) fn set_state(&self, state: u32, detail: u32) {
        if let Some(slot) = self.slot() {
            slot.detail.store(detail, Relaxed);
            slot.state.store(state, Release);
        }
    }

    /// The `@K` of `addr` in its family for this thread, registering it when it is
    /// new (objects count in order of the thread's first event on them). `None` when
    /// the plan names no `@K` that far in this family.
    pub(crate) fn nth(&self, family: usize, addr: u64) -> Option<u32> {
        let kmax = shared().kmax[family] as usize;
        if kmax == 0 {
            return None;
        }
        ME.with(|me| {
            let mut counts = me.nobjects.get();
            let n = counts[family] as usize;
            // SAFETY: this thread's own state; no other reference to it is live.
            let objects = unsafe { &mut (*me.objects.get())[family] };
            if let Some(k) = objects[..n.min(INLINE_K)].iter().position(|&a| a == addr) {
                return Some(k as u32 + 1);
            }
            let mut more = me.more_objects.get();
            if n > INLINE_K {
                if let Some(k) = more.find(family, addr) {
                    return Some(k);
                }
            }
            if n >= kmax {
                return None;
            }
            if n < INLINE_K {
                objects[n] = addr;
            } else {
                // Out of memory for the table: the object stays unnamed (its
                // events are not gated), as past `kmax`.
                if !more.insert(family, addr, n as u32 + 1) {
                    return None;
                }
                me.more_objects.set(more);
            }
            counts[family] = n as u32 + 1;
            me.nobjects.set(counts);
            Some(n as u32 + 1)
        })
    }

    pub(crate) fn matches(
        &self,
        e: &PlanEvent,
        nth: Option<u32>,
        addr: u64,
        how: GateObject,
    ) -> bool {
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

    pub(crate) fn events(&self, t: &PlanThread) -> &'static [PlanEvent] {
        let sh = shared();
        &sh.events[t.first_event as usize..(t.first_event + t.event_count) as usize]
    }

    /// The plan's `*` successors.
    fn wild_events(&self) -> &'static [PlanEvent] {
        let sh = shared();
        &sh.events[sh.wild_first as usize..(sh.wild_first + sh.n_wild) as usize]
    }

    /// Whether a `*` successor leaves this thread out (it owns a predecessor).
    fn excluded(&self, e: &PlanEvent) -> bool {
        let sh = shared();
        self.plan != NONE
            && sh.preds[e.pred_start as usize..(e.pred_start + e.pred_count) as usize]
                .iter()
                .any(|&p| sh.events[p as usize].plan_thread == self.plan)
    }

    /// Calls `f(index, event)` for each gated plan event the thread's next event of
    /// `kind` on `addr` would be: its own named event and the `*` successors that
    /// apply to it. This is the one place deciding which events a call is.
    fn next_gated(
        &self,
        kind: u16,
        addr: u64,
        how: GateObject,
        mut f: impl FnMut(u32, &PlanEvent),
    ) {
        let sh = shared();
        let t = self.plan();
        if t.is_none() && sh.n_wild == 0 {
            return;
        }
        let nth = match how {
            GateObject::Addr => self.nth(family_of(kind), addr),
            GateObject::Any => None,
        };
        if let Some(t) = t {
            for (i, e) in self.events(t).iter().enumerate() {
                if e.kind != kind || e.gated == 0 || e.count.load(Relaxed) + 1 != e.occurrence {
                    continue;
                }
                if self.matches(e, nth, addr, how) {
                    f(t.first_event + i as u32, e);
                }
            }
        }
        if sh.n_wild != 0 {
            // SAFETY: this thread's own counters, copied out.
            let counts = ME.with(|me| unsafe { *me.wild_counts.get() });
            for (w, e) in self.wild_events().iter().enumerate() {
                if e.kind != kind || e.gated == 0 || counts[w] + 1 != e.occurrence {
                    continue;
                }
                if self.matches(e, nth, addr, how) && !self.excluded(e) {
                    f(sh.wild_first + w as u32, e);
                }
            }
        }
    }

    /// Holds the thread until the predecessors of its next event of `kind` on `addr`
    /// have happened. Call it before the call takes effect, once per kind the call can
    /// turn out to be.
    ///
    /// This is the one place where a thread about to perform a synchronization event
    /// decides whether to proceed: every wrapper calls it (a try calls it again after
    /// backing out, a condvar wait after giving its mutex back, a new thread before
    /// its start routine, an ending thread before its exit). A scheduling strategy
    /// that holds threads by other rules (PCT, random walk) hooks in here.
    pub(crate) fn gate(&self, kind: u16, addr: u64, how: GateObject) {
        let sh = shared();
        self.next_gated(kind, addr, how, |index, e| self.wait_for(sh, index, e));
    }

    /// Whether the thread's next event of `kind` on `addr` would be held now (some
    /// predecessor has not happened): a trylock that succeeded too early backs out.
    pub(crate) fn would_wait(&self, kind: u16, addr: u64) -> bool {
        let sh = shared();
        if sh.flags.load(Acquire) & (FLAG_CHECK_ONLY | FLAG_RELEASED) != 0 {
            return false;
        }
        let mut wait = false;
        self.next_gated(kind, addr, GateObject::Addr, |_, e| {
            wait |= !preds_done(sh, e);
        });
        wait
    }

    pub(crate) fn wait_for(&self, sh: &Shared, index: u32, e: &PlanEvent) {
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
                match pred_state(sh, &sh.events[p as usize]) {
                    PredState::Done => {}
                    PredState::InProgress => {
                        in_progress = true;
                        all_done = false;
                    }
                    PredState::NotYet => all_done = false,
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
                unsafe { futex_wait_ns(&sh.epoch, epoch, DRIVER_CHECK_NS) };
                if driver_gone() {
                    // Nobody will ever release this gate (`ordo replay` was killed):
                    // open them all, so the program does not wait forever.
                    sh.flags.fetch_or(FLAG_RELEASED, AcqRel);
                }
            }
        }
        if held {
            self.set_state(STATE_RUNNING, 0);
        }
    }

    /// Whether this thread's next event of `kind` on `addr` (a symbol) is the
    /// occurrence some named event waits for.
    pub(crate) fn completes_occurrence(&self, kind: u16, addr: u64) -> bool {
        let Some(t) = self.plan() else { return false };
        self.events(t).iter().any(|e| {
            e.kind == kind
                && e.count.load(Relaxed) + 1 == e.occurrence
                && self.matches(e, None, addr, GateObject::Addr)
        })
    }

    /// An order stamp taken before a call, for kinds stamped at entry.
    pub(crate) fn stamp_before(&self, kind: u16) -> Option<u64> {
        (self.plan != NONE && stamps_before(kind)).then(|| shared().stamp.fetch_add(1, AcqRel) + 1)
    }

    /// The event happened: count it and mark named events done, waking held threads.
    /// Then, if the schedule names the point right after it (`after(…)`), hold the
    /// thread there until that point's predecessors have happened: the call has
    /// returned, the program's next statement has not run.
    pub(crate) fn happened(&self, kind: u16, addr: u64, stamp: Option<u64>) {
        self.mark(kind, addr, stamp, DONE);
        self.after_point(kind, addr);
    }

    /// The point right after an event of `kind` on `addr` returned: counted like the
    /// event, gated, then marked done (its stamp orders it after whatever it waited
    /// for). Only named threads have such points (`*` cannot name one).
    fn after_point(&self, kind: u16, addr: u64) {
        let Some(t) = self.plan() else { return };
        let sh = shared();
        let point = kind | AFTER_POINT;
        let nth = self.nth(family_of(kind), addr);
        for (i, e) in self.events(t).iter().enumerate() {
            if e.kind != point || !self.matches(e, nth, addr, GateObject::Addr) {
                continue;
            }
            let n = e.count.load(Relaxed) + 1;
            e.count.store(n, Relaxed);
            if n != e.occurrence {
                continue;
            }
            if e.gated != 0 {
                self.wait_for(sh, t.first_event + i as u32, e);
            }
            e.stamp.store(sh.stamp.fetch_add(1, AcqRel) + 1, Relaxed);
            e.done_tid.store(tid(), Relaxed);
            e.done.store(DONE, Release);
            if e.awaited != 0 {
                sh.epoch.fetch_add(1, Release);
                // SAFETY: as in wait_for.
                unsafe { futex(&sh.epoch, FUTEX_WAKE, i32::MAX as u32) };
            }
        }
    }

    /// The event is taking effect inside the blocking call about to be made (or the
    /// thread's exit): count it, and let waiters see it as done once the call blocks
    /// (or the thread is gone). [`Caller::finish_in_progress`] completes it on return.
    pub(crate) fn begins(&self, kind: u16, addr: u64, stamp: Option<u64>) {
        self.mark(kind, addr, stamp, IN_PROGRESS);
    }

    /// The call returned: whatever it had in progress has certainly happened.
    pub(crate) fn finish_in_progress(&self) {
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
                any |= e.awaited != 0;
            }
        }
        if any {
            sh.epoch.fetch_add(1, Release);
            // SAFETY: as in wait_for.
            unsafe { futex(&sh.epoch, FUTEX_WAKE, i32::MAX as u32) };
        }
    }

    pub(crate) fn mark(&self, kind: u16, addr: u64, stamp: Option<u64>, state: u32) {
        let sh = shared();
        let t = self.plan();
        if t.is_none() && sh.n_wild == 0 {
            return;
        }
        let nth = self.nth(family_of(kind), addr);
        let mut any = false;
        let mut stamp = stamp;
        let mut stamp_now = || *stamp.get_or_insert_with(|| sh.stamp.fetch_add(1, AcqRel) + 1);
        if let Some(t) = t {
            for e in self.events(t) {
                if e.kind != kind || !self.matches(e, nth, addr, GateObject::Addr) {
                    continue;
                }
                let n = e.count.load(Relaxed) + 1;
                e.count.store(n, Relaxed);
                if n == e.occurrence {
                    e.stamp.store(stamp_now(), Relaxed);
                    e.done_tid.store(tid(), Relaxed);
                    e.done.store(state, Release);
                    // Only threads held for it need to look: with a thousand held
                    // threads, waking them all for every named event would cost
                    // a million wake-ups.
                    any |= e.awaited != 0;
                }
            }
        }
        if sh.n_wild != 0 {
            for (w, e) in self.wild_events().iter().enumerate() {
                if e.kind != kind
                    || !self.matches(e, nth, addr, GateObject::Addr)
                    || self.excluded(e)
                {
                    continue;
                }
                // SAFETY: this thread's own counters; no other reference is live.
                let n = ME.with(|me| unsafe {
                    let counts = &mut *me.wild_counts.get();
                    counts[w] += 1;
                    counts[w]
                });
                if n == e.occurrence {
                    e.count.fetch_add(1, Relaxed);
                    if let Some(slot) = self.slot() {
                        slot.wild_stamp[w].store(stamp_now(), Release);
                    }
                }
            }
        }
        if any {
            sh.epoch.fetch_add(1, Release);
            // SAFETY: as in wait_for.
            unsafe { futex(&sh.epoch, FUTEX_WAKE, i32::MAX as u32) };
        }
    }
}
