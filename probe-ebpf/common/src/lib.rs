//! The event layout shared by ordo's eBPF programs and user space.
//!
//! This crate is the one definition of what crosses the kernel/user boundary: the
//! [`RawEvent`] record the probes write into the ring buffer, the event kinds, and
//! the probe cookie that tells the generic uprobe programs what the probed function
//! is. It is `no_std` so the eBPF programs can use it; user space enables the `user`
//! feature to read records with aya.
#![no_std]

/// Event kinds. The numbers are part of the trace format: never reuse one.
///
/// A kind names a completed operation. Blocking operations whose start matters to
/// analysis also have a `*_BEGIN` kind recorded when the call starts.
pub mod kind {
    /// A mutex was acquired (by lock, trylock, timedlock or a condvar wait's reacquire).
    pub const MUTEX_LOCK: u16 = 1;
    /// A trylock or timedlock on a mutex returned without acquiring it.
    pub const MUTEX_LOCK_FAILED: u16 = 2;
    /// A mutex is about to be released (recorded while still held).
    pub const MUTEX_UNLOCK: u16 = 3;
    /// A thread starts waiting on a condition variable (and releases the mutex).
    pub const COND_WAIT_BEGIN: u16 = 4;
    /// A condition-variable wait returned (woken, spuriously or by timeout: see result).
    pub const COND_WAIT: u16 = 5;
    /// `pthread_cond_signal`.
    pub const COND_SIGNAL: u16 = 6;
    /// `pthread_cond_broadcast`.
    pub const COND_BROADCAST: u16 = 7;
    /// A rwlock was acquired for reading.
    pub const RWLOCK_RDLOCK: u16 = 8;
    /// A rwlock was acquired for writing.
    pub const RWLOCK_WRLOCK: u16 = 9;
    /// A try/timed rwlock acquisition failed.
    pub const RWLOCK_LOCK_FAILED: u16 = 10;
    /// A rwlock is about to be released.
    pub const RWLOCK_UNLOCK: u16 = 11;
    /// A semaphore wait succeeded (the count was decremented).
    pub const SEM_WAIT: u16 = 12;
    /// A sem_trywait/sem_timedwait failed.
    pub const SEM_WAIT_FAILED: u16 = 13;
    /// A semaphore is about to be posted.
    pub const SEM_POST: u16 = 14;
    /// A thread arrived at a barrier.
    pub const BARRIER_ARRIVE: u16 = 15;
    /// A thread left a barrier (result: PTHREAD_BARRIER_SERIAL_THREAD for one thread).
    pub const BARRIER_WAIT: u16 = 16;
    /// A thread created another (value: the child's tid; addr: its pthread_t if any).
    pub const THREAD_CREATE: u16 = 17;
    /// A new thread's first event (recorded in the new thread).
    pub const THREAD_START: u16 = 18;
    /// A thread exits (name: its comm at exit).
    pub const THREAD_EXIT: u16 = 19;
    /// pthread_join returned (addr: the joined pthread_t).
    pub const THREAD_JOIN: u16 = 20;
    /// A direct futex wait returned (addr: the futex word; result: 0 or -errno).
    pub const FUTEX_WAIT: u16 = 21;
    /// A direct futex wake returned (result: threads woken).
    pub const FUTEX_WAKE: u16 = 22;
    /// A watched variable was read (value: the value read).
    pub const READ: u16 = 23;
    /// A watched variable was written (value: the value written).
    pub const WRITE: u16 = 24;
    /// A watched variable was atomically read-modify-written.
    pub const RMW: u16 = 25;
    /// A thread did not get a mutex at once and calls the lock-wait routine (it
    /// blocks until the mutex is free). Not sequenced: the `MUTEX_LOCK` that follows
    /// carries the order. Shows who waits for what, e.g. in a real deadlock.
    pub const MUTEX_BLOCK: u16 = 26;
    /// A thread reached a marked instruction (`ordo record --mark`), before it ran
    /// (addr: the instruction). Schedules name it `at(SPEC)`.
    pub const AT: u16 = 27;
    /// A thread was still inside a blocking call when the recording ended (the
    /// program deadlocked or hung and was killed, or exited around it). addr: the
    /// object; value: the kind the call would have recorded on return
    /// (`MUTEX_LOCK`, `RWLOCK_WRLOCK`, `SEM_WAIT`, `COND_WAIT`, `BARRIER_WAIT`,
    /// `THREAD_JOIN`…); site: the call site. Written by the recorder at the end of
    /// an in-process recording, from the agent's per-thread pending slot; never
    /// sequenced, and always the thread's last event.
    pub const BLOCKED: u16 = 28;
    /// One past the largest kind.
    pub const COUNT: u16 = 29;
}

/// Object families: the kinds of object events act on. Schedules number objects
/// (`@K`) within a family; the replay agent and the analysis use the same codes.
pub mod family {
    use super::kind as k;

    /// `mutex_*`.
    pub const MUTEX: u8 = 0;
    /// `cond_*`.
    pub const COND: u8 = 1;
    /// `rwlock_*`.
    pub const RWLOCK: u8 = 2;
    /// `sem_*`.
    pub const SEM: u8 = 3;
    /// `barrier_*`.
    pub const BARRIER: u8 = 4;
    /// `futex_*`.
    pub const FUTEX: u8 = 5;
    /// `read`, `write`, `rmw` of watched variables.
    pub const VAR: u8 = 6;
    /// `thread_create`, `thread_join` (the object is the `pthread_t` handle).
    pub const THREAD: u8 = 7;
    /// `thread_start`, `thread_exit`: no object.
    pub const NONE: u8 = 8;
    /// `at`: marked program points (the object is the instruction).
    pub const MARK: u8 = 9;

    /// The family of a kind code.
    pub const fn of(kind: u16) -> u8 {
        match kind {
            k::MUTEX_LOCK | k::MUTEX_LOCK_FAILED | k::MUTEX_UNLOCK | k::MUTEX_BLOCK => MUTEX,
            k::COND_WAIT_BEGIN | k::COND_WAIT | k::COND_SIGNAL | k::COND_BROADCAST => COND,
            k::RWLOCK_RDLOCK | k::RWLOCK_WRLOCK | k::RWLOCK_LOCK_FAILED | k::RWLOCK_UNLOCK => {
                RWLOCK
            }
            k::SEM_WAIT | k::SEM_WAIT_FAILED | k::SEM_POST => SEM,
            k::BARRIER_ARRIVE | k::BARRIER_WAIT => BARRIER,
            k::FUTEX_WAIT | k::FUTEX_WAKE => FUTEX,
            k::READ | k::WRITE | k::RMW => VAR,
            k::THREAD_CREATE | k::THREAD_JOIN => THREAD,
            k::AT => MARK,
            _ => NONE,
        }
    }
}

/// How an acquisition was requested, in [`RawEvent::via`].
pub mod via {
    /// Plain blocking call.
    pub const PLAIN: u8 = 0;
    /// A `try` variant.
    pub const TRY: u8 = 1;
    /// A `timed` or `clock` variant.
    pub const TIMED: u8 = 2;
    /// Released or reacquired inside a condition-variable wait.
    pub const COND_WAIT: u8 = 3;
    /// A watched access by an atomic instruction (lock-prefixed, or `xchg` with
    /// memory): two of them never race.
    pub const ATOMIC: u8 = 4;
    /// Between the probes and the recorder only, never in a trace: a hardware
    /// watchpoint trapped after an access it cannot classify (the kernel reports
    /// the instruction after it). The recorder decodes that instruction and sets
    /// the kind (read, write, rmw) and the via (PLAIN or ATOMIC).
    pub const TRAP: u8 = 5;
    /// Like [`TRAP`], for a variable whose type is atomic: every access is ATOMIC.
    pub const TRAP_ATOMIC: u8 = 6;
    /// A discovered access (`ordo record --discover`): a plain access the agent's
    /// software breakpoint caught at its instruction. Schedules name it by that
    /// instruction (`T:at(function+OFFSET)#N`); `result` carries N, the thread's
    /// arrivals at the instruction so far.
    pub const POINT: u8 = 7;
    /// Like [`POINT`], by an atomic instruction (lock-prefixed, `xchg`, or a store
    /// followed by `mfence`): two of them never race.
    pub const POINT_ATOMIC: u8 = 8;
}

/// In a `HW_WATCHES` value (the access size in the low byte): the variable's type
/// is atomic.
pub const HW_WATCH_ATOMIC: u64 = 1 << 8;

/// One event, as written by the probes into the ring buffer.
///
/// Fields that do not apply to a kind are zero.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RawEvent {
    /// `bpf_ktime_get_ns()` (CLOCK_MONOTONIC) when the probe ran.
    pub ts_ns: u64,
    /// Per-object sequence number: the order of events on `addr` is exact even when
    /// timestamps from different CPUs are too close to order.
    pub seq: u64,
    /// The synchronization object (mutex, condvar, futex word, watched variable…).
    pub addr: u64,
    /// A second object: the mutex of a condvar wait.
    pub addr2: u64,
    /// The return address into the caller (the call site), or the instruction address.
    pub site: u64,
    /// The function's result where it matters (trylock, timedwait, join, futex).
    pub result: i64,
    /// Kind-specific value: the child tid of THREAD_CREATE, the value of a watched access.
    pub value: u64,
    /// Kernel thread id.
    pub tid: u32,
    /// One of [`kind`].
    pub kind: u16,
    /// One of [`via`].
    pub via: u8,
    /// Access size in bytes for watched variables.
    pub size: u8,
    /// The thread's name (comm), only on THREAD_START and THREAD_EXIT.
    pub name: [u8; 16],
}

// The probes write, and the recorder reads, exactly these 80 bytes (no padding):
// a field added or moved must show here first.
const _: () = assert!(core::mem::size_of::<RawEvent>() == 80);

#[cfg(feature = "user")]
// SAFETY: RawEvent is repr(C), Copy, and every bit pattern is valid.
unsafe impl aya::Pod for RawEvent {}

/// What a probed function does; the low byte of a uprobe cookie.
///
/// The user-space probe table maps each libc function to one of these, so probe
/// placement stays data-driven while one eBPF program serves all functions.
pub mod op {
    /// Acquire a mutex (entry stashes arguments, return emits).
    pub const MUTEX_ACQUIRE: u8 = 1;
    /// Release a mutex (entry emits).
    pub const MUTEX_RELEASE: u8 = 2;
    /// Acquire a rwlock for reading.
    pub const RWLOCK_READ: u8 = 3;
    /// Acquire a rwlock for writing.
    pub const RWLOCK_WRITE: u8 = 4;
    /// Release a rwlock.
    pub const RWLOCK_RELEASE: u8 = 5;
    /// Wait on a condition variable (arg0 cond, arg1 mutex).
    pub const COND_WAIT: u8 = 6;
    /// Signal a condition variable.
    pub const COND_SIGNAL: u8 = 7;
    /// Broadcast a condition variable.
    pub const COND_BROADCAST: u8 = 8;
    /// Wait on a semaphore.
    pub const SEM_WAIT: u8 = 9;
    /// Post a semaphore.
    pub const SEM_POST: u8 = 10;
    /// Wait at a barrier.
    pub const BARRIER_WAIT: u8 = 11;
    /// pthread_create (arg0: pthread_t *).
    pub const THREAD_CREATE: u8 = 12;
    /// pthread_join and its variants (arg0: pthread_t).
    pub const THREAD_JOIN: u8 = 13;
    /// libc's `syscall()`: marks a direct futex call so the futex tracepoint keeps it.
    pub const SYSCALL_FN: u8 = 14;
}

/// Build a uprobe cookie from an [`op`] and a [`via`].
pub const fn cookie(op: u8, via: u8) -> u64 {
    (op as u64) | ((via as u64) << 8)
}

/// The [`op`] of a cookie.
pub const fn cookie_op(cookie: u64) -> u8 {
    cookie as u8
}

/// The [`via`] of a cookie.
pub const fn cookie_via(cookie: u64) -> u8 {
    (cookie >> 8) as u8
}

/// What a placed probe site does (see [`ProbeSite`]).
pub mod site_action {
    /// Emit the function's outcome (acquired or failed, with its result).
    pub const OUTCOME: u8 = 0;
    /// A blocking call into the lock-wait routine: emit `MUTEX_BLOCK`.
    pub const BLOCK: u8 = 1;
    /// A tail call: handled by the entry/return programs, never in `PROBE_SITES`.
    pub const TAIL_CALL: u8 = 2;
}

/// How a site computes the function's result, in [`Outcome::kind`].
pub mod outcome {
    /// This direction records nothing.
    pub const NONE: u8 = 0;
    /// The result is [`super::Outcome::value`].
    pub const CONST: u8 = 1;
    /// The result is the low 32 bits of register `reg` at the probe.
    pub const REG: u8 = 2;
    /// The result is `(reg != 0) << shift`.
    pub const NONZERO_SHL: u8 = 3;
}

/// The result a probe site reports for one direction of its instruction.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// One of [`outcome`].
    pub kind: u8,
    /// Register ([`reg`]) for REG and NONZERO_SHL.
    pub reg: u8,
    /// Shift for NONZERO_SHL.
    pub shift: u8,
    /// Explicit padding.
    pub _pad: u8,
    /// The constant for CONST.
    pub value: i32,
}

/// A probe placed inside a function (not at its entry), as `ordo_site` needs it: the
/// recorder decodes libc and fills the `PROBE_SITES` array; the uprobe's cookie is
/// the index into it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeSite {
    /// Bytes pushed since the function's entry: the return address is at `rsp + depth`.
    pub depth: u32,
    /// Displacement from rsp of the stack slot holding the object, when `arg_reg` is RSP.
    pub arg_disp: i32,
    /// Outcome when the conditional jump is taken (or always, when `cond` is NONE).
    pub taken: Outcome,
    /// Outcome when it falls through.
    pub fallthrough: Outcome,
    /// One of [`op`].
    pub op: u8,
    /// One of [`via`].
    pub via: u8,
    /// One of [`site_action`].
    pub action: u8,
    /// x86 condition code of the probed conditional jump (0 = O … 15 = G), or
    /// [`reg::NONE`] for another instruction.
    pub cond: u8,
    /// Register ([`reg`]) holding the object, or RSP for the slot at `arg_disp`.
    pub arg_reg: u8,
    /// Explicit padding to 8 bytes.
    pub _reserved: [u8; 3],
}

#[cfg(feature = "user")]
// SAFETY: repr(C), Copy, all bit patterns valid.
unsafe impl aya::Pod for ProbeSite {}

/// Name of the probe site array map.
pub const PROBE_SITES_MAP: &str = "PROBE_SITES";
/// Capacity of the probe site array.
pub const MAX_PROBE_SITES: u32 = 256;

/// Arguments saved at a function's entry for its return probe, keyed by
/// `(tid << 8) | op` so nested probed calls (glibc takes its own locks inside
/// pthread_create) do not overwrite each other.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Stash {
    /// First object argument.
    pub addr: u64,
    /// Second object argument.
    pub addr2: u64,
    /// Call site.
    pub site: u64,
    /// Sequence number taken at entry, or a value filled in by a later probe
    /// (the child tid of a pthread_create).
    pub value: u64,
}

#[cfg(feature = "user")]
// SAFETY: repr(C), Copy, all bit patterns valid.
unsafe impl aya::Pod for Stash {}

/// Key of a [`Stash`].
pub const fn stash_key(tid: u32, op: u8) -> u64 {
    ((tid as u64) << 8) | op as u64
}

/// Indexes into the `CONFIG` array map.
pub mod config {
    /// The traced process id (tgid); raw tracepoints keep only its threads.
    pub const TARGET_TGID: u32 = 0;
    /// Nonzero while events are recorded. User space sets it last, once every probe
    /// is attached (so no event reaches the trace from a half-attached set), and
    /// clears it first when stopping (so a live target stops paying for the
    /// programs' work before the slow detach). Every program checks it first.
    pub const ENABLED: u32 = 1;
    /// Nonzero while every record should wake the drain at once. User space sets it
    /// until the drain has read the target's modules: a short program can otherwise
    /// exit (taking its mappings with it) before a lazily woken drain looks.
    pub const WAKE_EACH: u32 = 2;
    /// Number of entries.
    pub const LEN: u32 = 3;
}

/// Syscall numbers the tracepoint programs care about (x86_64).
pub mod sysno {
    /// futex(2).
    pub const FUTEX: u64 = 202;
    /// clone(2).
    pub const CLONE: u64 = 56;
    /// clone3(2).
    pub const CLONE3: u64 = 435;
    /// execve(2).
    pub const EXECVE: u64 = 59;
    /// execveat(2).
    pub const EXECVEAT: u64 = 322;
    /// fork(2).
    pub const FORK: u64 = 57;
    /// vfork(2).
    pub const VFORK: u64 = 58;
}

/// `CLONE_THREAD` from `<linux/sched.h>`.
pub const CLONE_THREAD: u64 = 0x0001_0000;

/// `CLONE_UNTRACED` from `<linux/sched.h>`: set on the threads the kernel makes
/// for a process (io_uring's workers), never by libc's thread creation.
pub const CLONE_UNTRACED: u64 = 0x0080_0000;

/// Name of the ring buffer map.
pub const EVENTS_MAP: &str = "EVENTS";
/// Name of the per-CPU drop counter map.
pub const DROPS_MAP: &str = "DROPS";
/// Name of the per-CPU map counting the target's successful execs.
pub const EXECS_MAP: &str = "EXECS";
/// Name of the per-CPU map counting the child processes the target started (fork,
/// vfork, a clone without `CLONE_THREAD`: not followed).
pub const FORKS_MAP: &str = "FORKS";
/// Name of the configuration array map.
pub const CONFIG_MAP: &str = "CONFIG";
/// Per-object sequence counters the kernel side keeps. The table is an LRU hash:
/// past this many objects the least recently used counter is evicted, and an
/// evicted object used again numbers its events from 0 anew.
pub const SEQ_COUNTERS: u32 = 262_144;
/// Name of the per-CPU map counting the sequence counters the kernel side created
/// (more than [`SEQ_COUNTERS`]: some were evicted; the summary says so).
pub const SEQ_CREATED_MAP: &str = "SEQ_CREATED";
/// Name of the map of per-object sequence counters ([`SEQ_COUNTERS`] entries).
pub const SEQ_MAP: &str = "SEQ";
/// Name of the map of arguments saved at a function's entry for its return probe.
pub const STASH_MAP: &str = "STASH";
/// Entries of [`STASH_MAP`] (an LRU hash: calls in flight at once).
pub const STASH_ENTRIES: u32 = 65_536;

/// Register numbers used in [`WatchSite`], in `pt_regs` order names (x86_64).
pub mod reg {
    /// No register.
    pub const NONE: u8 = 0xff;
    /// General-purpose register `rax`.
    pub const RAX: u8 = 0;
    /// General-purpose register `rbx`.
    pub const RBX: u8 = 1;
    /// General-purpose register `rcx`.
    pub const RCX: u8 = 2;
    /// General-purpose register `rdx`.
    pub const RDX: u8 = 3;
    /// General-purpose register `rsi`.
    pub const RSI: u8 = 4;
    /// General-purpose register `rdi`.
    pub const RDI: u8 = 5;
    /// General-purpose register `rbp` (the frame pointer).
    pub const RBP: u8 = 6;
    /// General-purpose register `rsp` (the stack pointer).
    pub const RSP: u8 = 7;
    /// General-purpose register `r8`.
    pub const R8: u8 = 8;
    /// General-purpose register `r9`.
    pub const R9: u8 = 9;
    /// General-purpose register `r10`.
    pub const R10: u8 = 10;
    /// General-purpose register `r11`.
    pub const R11: u8 = 11;
    /// General-purpose register `r12`.
    pub const R12: u8 = 12;
    /// General-purpose register `r13`.
    pub const R13: u8 = 13;
    /// General-purpose register `r14`.
    pub const R14: u8 = 14;
    /// General-purpose register `r15`.
    pub const R15: u8 = 15;
    /// The address of the next instruction (for RIP-relative operands the decoder
    /// has already folded it into `disp`, so this is rarely needed).
    pub const RIP: u8 = 16;
}

/// One instruction that may access a watched variable, as the watch uprobe needs it.
/// User space decodes the binary and fills the `WATCH_SITES` array; the uprobe's
/// cookie is the index into it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WatchSite {
    /// Runtime address of the watched bytes (start).
    pub watch_addr: u64,
    /// Displacement of the memory operand. For RIP-relative operands, the absolute
    /// runtime address of the operand (base and index are NONE).
    pub disp: i64,
    /// Immediate source value, when `value_reg` is NONE and the access writes an immediate.
    pub imm: u64,
    /// Runtime address of the instruction (reported as the site).
    pub ip: u64,
    /// Length of the watched bytes.
    pub watch_len: u32,
    /// Base register of the memory operand ([`reg`]).
    pub base: u8,
    /// Index register ([`reg`]).
    pub index: u8,
    /// Index scale (1, 2, 4, 8).
    pub scale: u8,
    /// Access size in bytes.
    pub size: u8,
    /// [`kind::READ`], [`kind::WRITE`] or [`kind::RMW`] (as u8).
    pub access: u8,
    /// Register holding the value written (or, for a load probed after it, the
    /// value loaded), or NONE (then `imm`, or read memory).
    pub value_reg: u8,
    /// True when the value written is `imm`.
    pub value_is_imm: u8,
    /// Signed distance from the probed instruction to the accessing one (the kernel
    /// refuses uprobes on lock-prefixed instructions, so those are probed next door).
    pub _pad: u8,
    /// The event's [`via`]: [`via::ATOMIC`] for atomic instructions, else PLAIN.
    pub via: u8,
    /// Non-zero for a field reached through a pointer (`ptr->field`): the watched
    /// bytes are at the value of register `base` plus `watch_addr` (an offset, not
    /// relocated), wherever the pointer pointed when the access ran.
    pub relative: u8,
    /// Explicit padding to the struct's 8-byte alignment.
    pub _reserved: [u8; 2],
}

#[cfg(feature = "user")]
// SAFETY: repr(C), Copy, all bit patterns valid.
unsafe impl aya::Pod for WatchSite {}

/// Name of the watch site array map.
pub const WATCH_SITES_MAP: &str = "WATCH_SITES";
/// Capacity of the watch site array.
pub const MAX_WATCH_SITES: u32 = 4096;

/// The in-process recording's shared mapping: the layout the preloaded agent writes
/// and the recorder drains (the eBPF programs do not use it, so it is left out of
/// their build).
///
/// The recorder owns the mapping (a memfd it creates, sizes and maps before the
/// program starts; the program inherits the descriptor and the agent maps it at
/// start-up), so whatever the program published survives its crash or SIGKILL.
/// It holds a [`inproc::Header`], [`inproc::MAX_RINGS`] per-thread rings (a thread
/// claims one on its first event; one producer, the thread, and one consumer, the
/// recorder's drain), and a table of per-object sequence counters keyed by address
/// (open addressing, claimed with a compare-exchange, bumped with a fetch-add at the
/// moment an event takes effect, like the eBPF `SEQ` map).
#[cfg(not(target_arch = "bpf"))]
pub mod inproc {
    use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

    /// "ORDO_REC".
    pub const MAGIC: u64 = 0x4f52_444f_5f52_4543;
    /// Bumped whenever the layout changes.
    pub const VERSION: u32 = 8;
    /// Rings in the mapping: threads recording at the same time (a ring is reused
    /// once its thread has exited and the ring is drained).
    pub const MAX_RINGS: usize = 1024;
    /// Units ([`Unit`], 16 bytes) per ring (a power of two): 2 MiB. The drain
    /// only copies records out, at high priority, when a ring is half full and
    /// every few milliseconds; 65 536 to 131 072 events cover a thread making
    /// several million a second. Small enough that the pages a thread writes stay
    /// few (allocating them is the expensive part: ~6 µs a page).
    pub const RING_UNITS: usize = 1 << 17;
    /// Units at the start of a ring allocated before a thread writes them (64 KiB):
    /// the agent faults them in when its thread claims the ring, the recorder
    /// allocates them ahead. The rest of a ring is allocated only for a thread
    /// that gets busy: a program's many short threads (60 clients that record a
    /// few accesses each) each cost 64 KiB, not the whole 2 MiB.
    pub const RING_START_UNITS: usize = 1 << 12;
    /// Entries of the sequence counter table (a power of two).
    pub const SEQ_SLOTS: usize = 1 << 20;
    /// A thread whose ring is full waits for the drain as long as the drain makes
    /// passes; when none happened for this long (nanoseconds: the recorder is gone
    /// or stopped) it counts the event as dropped instead.
    pub const FULL_WAIT_NS: u64 = 1_000_000_000;

    /// One 16-byte unit of a ring. An event takes one unit (short), two
    /// (compact) or four (extended); the first unit says which. [`encode`] and
    /// [`decode`] are the only code that knows the packing.
    ///
    /// - short (the ring's [`Codec`] knows the call site and the time stamp is
    ///   close to the thread's previous one): `addr | kind << 48 | via << 53 |
    ///   slot << 56`, `seq | (ts - last_ts) << 32 |` [`SHORT`]; no second
    ///   object, result 0, the kind below 32, `via` below 8, `seq` below 2^32;
    /// - compact (no second object, a result that fits 16 bits, an object and a
    ///   call site below 2^48): `ts`, `seq`; `addr | kind << 48 | via << 56`,
    ///   `site | (result as u16) << 48`;
    /// - extended: `ts`, [`EXTENDED`]; `(result as u32) | kind << 48 | via
    ///   << 56`, `extra`; `ts` again, `seq`; `addr`, `site`.
    ///
    /// Short units halve what the agent stores and the drain copies for the
    /// events a busy program repeats (a lock and unlock at a site it used before);
    /// see docs/ARCHITECTURE.md, "the ring record". A fifth form exists only in
    /// the recorder's copy, never in a ring: a lock and its release, two short
    /// units in a row, folded into one by the drain ([`fold_pair`]).
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct Unit {
        /// First word (see the type's doc).
        pub a: u64,
        /// Second word: the sequence number and the form's flags.
        pub b: u64,
    }

    // Four units to a cache line.
    const _: () = assert!(core::mem::size_of::<Unit>() == 16);

    impl Unit {
        /// Whether this unit, the first of an event, is a whole short event.
        #[inline(always)]
        pub const fn is_short(&self) -> bool {
            self.b & PAIR == SHORT
        }

        /// Whether this unit is a folded pair of events ([`fold_pair`]).
        #[inline(always)]
        pub const fn is_pair(&self) -> bool {
            self.b & PAIR == PAIR
        }
    }

    /// [`Unit::b`] of an extended event's first unit: three more follow.
    pub const EXTENDED: u64 = 1 << 63;
    /// [`Unit::b`] bit of a short event.
    pub const SHORT: u64 = 1 << 62;
    /// [`Unit::b`] bits of a folded pair: both form bits, which no event a ring
    /// holds has (a compact event's sequence number is below 2^62, an extended
    /// one's first unit carries none).
    pub const PAIR: u64 = SHORT | EXTENDED;
    const LOW48: u64 = (1 << 48) - 1;
    /// Bits of a short event's time stamp difference.
    const SHORT_DELTA_BITS: u32 = 30;
    /// Call sites a ring's [`Codec`] remembers: 128 sets of two, by a hash of the
    /// address ([`site_set`]).
    pub const SITE_CACHE: usize = 256;

    /// A ring's encoding state, kept beside the ring: the owner updates it as it
    /// publishes events, and the recorder keeps a copy of its own
    /// ([`DecodeState`]) by applying the same rule to the events it reads, in the
    /// ring's order ([`DecodeState::note`]): the last event's time stamp, and the
    /// call site of each compact event that its set does not hold yet, put first
    /// in the set, the set's first moved second ([`remember_site`]).
    ///
    /// Two ways rather than one place a site: with one (256 places), which of
    /// memcached's ~150 call sites shared a place depended on where ASLR put the
    /// program, and 3 % to 18 % of its events (five placements simulated over a
    /// 3 M-event trace) found another site in theirs and took two units instead
    /// of one; with two, 0.01 %.
    #[repr(C)]
    pub struct Codec {
        /// The time stamp of the ring's last event (in any form; the recorder reads
        /// it for a `blocked` event's time).
        pub last_ts: AtomicU64,
        /// Call sites by [`site_set`]: those of compact events.
        pub sites: [AtomicU64; SITE_CACHE],
    }

    impl Codec {
        /// A ring's state before its first event (the mapping's zeroed pages).
        pub const fn new() -> Codec {
            Codec {
                last_ts: AtomicU64::new(0),
                sites: [const { AtomicU64::new(0) }; SITE_CACHE],
            }
        }

        /// What an event at `site` is encoded against ([`encode`]).
        #[inline(always)]
        pub fn against(&self, site: u64) -> Against {
            let set = site_set(site);
            let slot = if self.sites[set].load(Ordering::Relaxed) == site {
                Some(set as u8)
            } else if self.sites[set + 1].load(Ordering::Relaxed) == site {
                Some(set as u8 + 1)
            } else {
                None
            };
            Against {
                last_ts: self.last_ts.load(Ordering::Relaxed),
                slot,
            }
        }

        /// The owner's update after it published `event` in `units` units, as
        /// [`DecodeState::note`] follows it; without `short_units` only the time
        /// stamp is kept (for a thread found blocked), no site.
        #[inline(always)]
        pub fn note(&self, event: &Event, units: usize, short_units: bool) {
            self.last_ts.store(event.ts, Ordering::Relaxed);
            if short_units && units == 2 {
                let set = site_set(event.site);
                let (first, second) = (
                    self.sites[set].load(Ordering::Relaxed),
                    self.sites[set + 1].load(Ordering::Relaxed),
                );
                if let Some((first, second)) = remember_site([first, second], event.site) {
                    self.sites[set].store(first, Ordering::Relaxed);
                    self.sites[set + 1].store(second, Ordering::Relaxed);
                }
            }
        }
    }

    impl Default for Codec {
        fn default() -> Codec {
            Codec::new()
        }
    }

    /// The first of the two places in a ring's [`Codec::sites`] where a call
    /// site may live.
    #[inline(always)]
    pub const fn site_set(site: u64) -> usize {
        (site.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 57) as usize * 2
    }

    /// The set `[first, second]` after a compact event at `site`: `None` if it
    /// holds the site already, else the site first and the former first second.
    #[inline(always)]
    pub const fn remember_site(set: [u64; 2], site: u64) -> Option<(u64, u64)> {
        if set[0] == site || set[1] == site {
            None
        } else {
            Some((site, set[0]))
        }
    }

    /// The recorder's copy of a ring's [`Codec`].
    #[derive(Clone, Debug)]
    pub struct DecodeState {
        last_ts: u64,
        sites: [u64; SITE_CACHE],
    }

    impl Default for DecodeState {
        fn default() -> DecodeState {
            DecodeState {
                last_ts: 0,
                sites: [0; SITE_CACHE],
            }
        }
    }

    impl DecodeState {
        /// Follows the owner's update after it published `event` in `units` units.
        #[inline(always)]
        pub fn note(&mut self, event: &Event, units: usize) {
            self.last_ts = event.ts;
            if units == 2 {
                let set = site_set(event.site);
                if let Some((first, second)) =
                    remember_site([self.sites[set], self.sites[set + 1]], event.site)
                {
                    self.sites[set] = first;
                    self.sites[set + 1] = second;
                }
            }
        }
    }

    /// One event of a ring: what the recorder expands into a [`super::RawEvent`]
    /// (the thread comes from the ring's owner).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct Event {
        /// The time stamp ([`Header::clock`] says in what unit).
        pub ts: u64,
        /// Per-object sequence number (0 for kinds that take none).
        pub seq: u64,
        /// The object.
        pub addr: u64,
        /// The return address into the caller.
        pub site: u64,
        /// The second object (the mutex of a condvar wait, the condvar of its mutex
        /// release/reacquire); for futex calls the command in the low 8 bits and the
        /// futex value in the high 32; for a `blocked` event the kind it waited in.
        pub extra: u64,
        /// The function's result where it matters (as the eBPF path reports it).
        pub result: i32,
        /// One of [`super::kind`] (all fit in a byte).
        pub kind: u8,
        /// One of [`super::via`].
        pub via: u8,
    }

    /// The ring state an event is encoded against: the ring's last time stamp and
    /// where its [`Codec`] holds the event's call site. `None`: short units
    /// are not used (events the recorder adds, or `ORDO_RING_UNITS=wide`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Against {
        /// [`Codec::last_ts`].
        pub last_ts: u64,
        /// The place in `Codec::sites` that holds the event's site, if one does.
        pub slot: Option<u8>,
    }

    /// `event` as one short unit, when it can be one against `state` (what
    /// [`encode`] tries first): the agent's common case, written straight into
    /// the ring without building [`encode`]'s four units (their zeroing showed
    /// in a `perf` of the recorded lock/unlock pair).
    #[inline(always)]
    pub fn encode_short(event: &Event, state: Against) -> Option<Unit> {
        let delta = event.ts.wrapping_sub(state.last_ts);
        let fits = event.extra == 0
            && event.result == 0
            && event.kind < 32
            && event.via < 8
            && event.addr >> 48 == 0
            && event.seq >> 32 == 0
            && event.ts >= state.last_ts
            && delta >> SHORT_DELTA_BITS == 0;
        let slot = state.slot?;
        if !fits {
            return None;
        }
        Some(Unit {
            a: event.addr
                | (event.kind as u64) << 48
                | (event.via as u64) << 53
                | (slot as u64) << 56,
            b: event.seq | delta << 32 | SHORT,
        })
    }

    /// `event` as ring units and how many it takes (1, 2 or 4). A compact
    /// event's call site is to be remembered in its set ([`remember_site`]; both
    /// sides do so: [`DecodeState::note`]); every event's time stamp becomes the
    /// ring's last.
    /// Any time stamp and any sequence number comes back whole.
    #[inline(always)]
    pub fn encode(event: &Event, against: Option<Against>) -> ([Unit; 4], usize) {
        match against.and_then(|state| encode_short(event, state)) {
            Some(unit) => {
                let mut units = [Unit::default(); 4];
                units[0] = unit;
                (units, 1)
            }
            None => encode_long(event),
        }
    }

    /// `event` as two units, or four for one that does not fit two: what
    /// [`encode`] does once [`encode_short`] did not apply.
    #[inline(always)]
    pub fn encode_long(event: &Event) -> ([Unit; 4], usize) {
        let mut units = [Unit::default(); 4];
        let plain = event.extra == 0;
        let tag = (event.kind as u64) << 48 | (event.via as u64) << 56;
        if plain
            && (event.addr | event.site) >> 48 == 0
            && event.result as i16 as i32 == event.result
            && event.seq & (SHORT | EXTENDED) == 0
        {
            units[0] = Unit {
                a: event.ts,
                b: event.seq,
            };
            units[1] = Unit {
                a: event.addr | tag,
                b: event.site | (event.result as u16 as u64) << 48,
            };
            return (units, 2);
        }
        units[0] = Unit {
            a: event.ts,
            b: EXTENDED,
        };
        units[1] = Unit {
            a: event.result as u32 as u64 | tag,
            b: event.extra,
        };
        units[2] = Unit {
            a: event.ts,
            b: event.seq,
        };
        units[3] = Unit {
            a: event.addr,
            b: event.site,
        };
        (units, 4)
    }

    /// What [`decode`] found at the start of a run of units: one event, or the
    /// two of a folded pair, and the units they took.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Decoded {
        events: [Event; 2],
        count: usize,
        /// Units taken: 1, 2 or 4.
        pub units: usize,
    }

    impl Decoded {
        fn one(event: Event, units: usize) -> Decoded {
            Decoded {
                events: [event, Event::default()],
                count: 1,
                units,
            }
        }

        /// The events, in their ring's order.
        pub fn events(&self) -> &[Event] {
            &self.events[..self.count]
        }
    }

    /// The event starting at `units[0]` (or the two of a folded pair) and the
    /// number of units taken, or `None` when `units` is empty or ends inside an
    /// event. `state` follows the ring the units come from ([`DecodeState::note`]
    /// is applied); without one (a walk that only looks at explicit call sites) a
    /// short event's site and time stamp come back 0.
    #[inline]
    pub fn decode(units: &[Unit], state: Option<&mut DecodeState>) -> Option<Decoded> {
        let first = units.first()?;
        let decoded = if first.is_pair() {
            return Some(unfold_pair(first, state));
        } else if first.is_short() {
            let index = (first.a >> 56) as usize;
            let (ts, site) = match &state {
                Some(s) => (
                    s.last_ts + ((first.b >> 32) & ((1 << SHORT_DELTA_BITS) - 1)),
                    s.sites[index],
                ),
                None => (0, 0),
            };
            let event = Event {
                ts,
                seq: first.b & 0xffff_ffff,
                addr: first.a & LOW48,
                site,
                extra: 0,
                result: 0,
                kind: (first.a >> 48) as u8 & 0x1f,
                via: (first.a >> 53) as u8 & 0x7,
            };
            Decoded::one(event, 1)
        } else if first.b & EXTENDED == 0 {
            let second = units.get(1)?;
            let event = Event {
                ts: first.a,
                seq: first.b,
                addr: second.a & LOW48,
                site: second.b & LOW48,
                extra: 0,
                result: (second.b >> 48) as u16 as i16 as i32,
                kind: (second.a >> 48) as u8,
                via: (second.a >> 56) as u8,
            };
            Decoded::one(event, 2)
        } else {
            let [_, second, third, fourth] = units.get(..4)? else {
                return None;
            };
            let event = Event {
                ts: first.a,
                seq: third.b,
                addr: fourth.a,
                site: fourth.b,
                extra: second.b,
                result: second.a as u32 as i32,
                kind: (second.a >> 48) as u8,
                via: (second.a >> 56) as u8,
            };
            Decoded::one(event, 4)
        };
        if let Some(s) = state {
            s.note(&decoded.events[0], decoded.units);
        }
        Some(decoded)
    }

    /// The acquisitions a folded pair can start with, by their code in the pair
    /// unit, and the release each pairs with.
    const PAIR_KINDS: [(u16, u16); 3] = [
        (super::kind::MUTEX_LOCK, super::kind::MUTEX_UNLOCK),
        (super::kind::RWLOCK_RDLOCK, super::kind::RWLOCK_UNLOCK),
        (super::kind::RWLOCK_WRLOCK, super::kind::RWLOCK_UNLOCK),
    ];
    /// Bits of a folded pair's time from the ring's previous event to the
    /// acquisition, and from the acquisition to the release.
    const PAIR_BEFORE_BITS: u32 = 17;
    const PAIR_HELD_BITS: u32 = 14;

    /// Two short units that follow each other in a ring as one, `first` starting
    /// an event ([`SiteScan::at_event_start`]: a later unit of a longer event can
    /// look like a short one), when they are an
    /// acquisition and the release that ends it: a mutex or rwlock taken (plainly
    /// or by a try) and released at once, at sites the ring knows, its object
    /// 8-byte aligned below 2^47, the release numbered right after the
    /// acquisition, and both short gaps in time (below 2^17 and 2^14 of the
    /// clock's unit). [`decode`] gives back exactly the two events.
    ///
    /// Only the drain folds, as it copies a ring (the agent's rings hold no pairs):
    /// in a server most events are such pairs (72 % of memcached's acquisitions),
    /// and the copy is what the recording keeps in memory until it is converted.
    ///
    /// The layout: `addr >> 3 | si1 << 44 | si2 << 52 | code << 60 | try << 62 |
    /// before >> 16 << 63`, `seq | (before & 0xffff) << 32 | held << 48 |`
    /// [`PAIR`], with `si1`, `si2` the two sites' places in the site cache and `code` the
    /// acquisition's place in `PAIR_KINDS`.
    #[inline(always)]
    pub fn fold_pair(first: &Unit, second: &Unit) -> Option<Unit> {
        let (pair, fits) = fold_pair_parts(first, second);
        fits.then_some(pair)
    }

    /// [`fold_pair`] as the folded unit and whether it applies (the unit is
    /// meaningless where it does not), for the drain's copy to choose between
    /// the pair and `first` with one test.
    ///
    /// Each condition is a mask of whole words, all of them ORed into one
    /// value that is zero when the pair fits, and the kinds and vias are one
    /// look-up of the acquisition's byte ([`PAIR_FIRST`]), where the field-by-field
    /// form (kept as the tests' reference) extracted each field and returned at
    /// the first that did not fit.
    #[inline(always)]
    pub fn fold_pair_parts(first: &Unit, second: &Unit) -> (Unit, bool) {
        /// The form bits, and the bits of a short unit's time difference
        /// above what a pair keeps of the acquisition's (`before`) …
        const FIRST_B: u64 =
            PAIR | ((1 << SHORT_DELTA_BITS) - 1) << (32 + PAIR_BEFORE_BITS) & !PAIR;
        /// … and of the release's (`held`).
        const SECOND_B: u64 = PAIR | ((1 << SHORT_DELTA_BITS) - 1) << (32 + PAIR_HELD_BITS) & !PAIR;
        /// An object below 2^47 and 8-byte aligned.
        const ADDR_FITS: u64 = 1 << 47 | 7;
        let entry = PAIR_FIRST[(first.a >> 48) as u8 as usize];
        // Every condition as bits that are all clear when it holds, so that the
        // test is one OR of them.
        let misfit = ((first.b & FIRST_B) ^ SHORT)
            | ((second.b & SECOND_B) ^ SHORT)
            | ((first.a ^ second.a) & LOW48)
            | (first.a & ADDR_FITS)
            // The release numbered right after (a number of 2^32 − 1 has none).
            | (((first.b & 0xffff_ffff) + 1) ^ (second.b & 0xffff_ffff))
            | ((entry >> 16) ^ ((second.a >> 48) & 0xff));
        let fits = misfit == 0;
        let pair = Unit {
            a: (first.a & LOW48) >> 3
                | (first.a >> 56) << 44
                | (second.a >> 56) << 52
                | (entry & 0xffff) << 60
                | (first.b >> 48) << 63,
            b: first.b & LOW48 | (second.b << 16) & ((1 << PAIR_HELD_BITS) - 1) << 48 | PAIR,
        };
        (pair, fits)
    }

    /// By an acquisition's byte 6 of [`Unit::a`] (its kind, and its via above
    /// bit 5): the byte of the release a folded pair may end with, shifted by 16
    /// (256, which no byte is, where the acquisition folds with none), and the
    /// pair unit's bits 60–62 (the code of [`PAIR_KINDS`], then whether it was
    /// a try) shifted down by 60.
    const PAIR_FIRST: [u64; 256] = {
        let mut table = [256 << 16; 256];
        let mut code = 0;
        while code < PAIR_KINDS.len() {
            let (acquired, released) = PAIR_KINDS[code];
            let release = (released as u64 | (super::via::PLAIN as u64) << 5) << 16;
            let plain = acquired as usize | (super::via::PLAIN as usize) << 5;
            let tried = acquired as usize | (super::via::TRY as usize) << 5;
            table[plain] = release | code as u64;
            table[tried] = release | code as u64 | 4;
            code += 1;
        }
        table
    };

    /// The two events of a folded pair ([`fold_pair`]), as [`decode`] gives them.
    fn unfold_pair(unit: &Unit, state: Option<&mut DecodeState>) -> Decoded {
        let addr = (unit.a & ((1 << 44) - 1)) << 3;
        let index1 = (unit.a >> 44) as usize & 0xff;
        let index2 = (unit.a >> 52) as usize & 0xff;
        let (kind1, kind2) = PAIR_KINDS[(unit.a >> 60) as usize & 3];
        let before = (unit.b >> 32) & 0xffff | (unit.a >> 63) << 16;
        let held = (unit.b >> 48) & ((1 << PAIR_HELD_BITS) - 1);
        let seq = unit.b & 0xffff_ffff;
        let ((ts1, site1), (ts2, site2)) = match &state {
            Some(s) => (
                (s.last_ts + before, s.sites[index1]),
                (s.last_ts + before + held, s.sites[index2]),
            ),
            None => ((0, 0), (0, 0)),
        };
        let acquired = Event {
            ts: ts1,
            seq,
            addr,
            site: site1,
            extra: 0,
            result: 0,
            kind: kind1 as u8,
            via: if (unit.a >> 62) & 1 != 0 {
                super::via::TRY
            } else {
                super::via::PLAIN
            },
        };
        let released = Event {
            ts: ts2,
            seq: seq + 1,
            site: site2,
            kind: kind2 as u8,
            via: super::via::PLAIN,
            ..acquired
        };
        if let Some(s) = state {
            s.note(&acquired, 1);
            s.note(&released, 1);
        }
        Decoded {
            events: [acquired, released],
            count: 2,
            units: 1,
        }
    }

    /// Finds the call sites that units carry in full, one unit at a time and in
    /// a ring's order, without decoding: the drain shows it each unit as it copies
    /// it (a site only a short unit names was carried in full before). A unit run
    /// must start at an event's first unit, as a ring's published units do.
    #[derive(Clone, Copy, Debug, Default)]
    pub struct SiteScan {
        /// Units of the current event still to come.
        left: u8,
        /// The current event is extended (its site is the last unit's whole `b`).
        extended: bool,
    }

    impl SiteScan {
        /// Whether the next unit starts an event (only such a unit may start a
        /// folded pair: [`fold_pair`]).
        #[inline(always)]
        pub fn at_event_start(&self) -> bool {
            self.left == 0
        }

        /// Takes the next unit; returns the call site of the event it completes,
        /// when that event carries one in full (as [`decode`] reads it).
        #[inline(always)]
        pub fn see(&mut self, unit: &Unit) -> Option<u64> {
            if self.left == 0 {
                if !unit.is_short() && !unit.is_pair() {
                    self.extended = unit.b & EXTENDED != 0;
                    self.left = if self.extended { 3 } else { 1 };
                }
                return None;
            }
            self.left -= 1;
            if self.left != 0 {
                return None;
            }
            Some(if self.extended {
                unit.b
            } else {
                unit.b & LOW48
            })
        }
    }

    /// The futex command and value packed into [`Event::extra`].
    pub const fn futex_extra(cmd: u64, value: u32) -> u64 {
        (cmd & 0xff) | ((value as u64) << 32)
    }

    /// `RingHeader::state`: unclaimed.
    pub const RING_FREE: u32 = 0;
    /// `RingHeader::state`: owned by the thread in `tid`.
    pub const RING_OWNED: u32 = 1;

    /// A cache line of its own.
    #[repr(C, align(64))]
    pub struct Line<T>(pub T);

    /// One thread's ring: who owns it, and the producer and consumer positions on
    /// separate cache lines.
    #[repr(C)]
    pub struct RingHeader {
        /// [`RING_FREE`] or [`RING_OWNED`]; the drain frees a ring once its thread
        /// has exited and everything it wrote is drained.
        pub state: Line<AtomicU32>,
        /// The owning thread's kernel tid.
        pub tid: AtomicU32,
        /// Nonzero while the owner waits for room (the drain wakes it on this word).
        pub waiting: AtomicU32,
        /// Events the owner dropped because the ring stayed full.
        pub dropped: AtomicU64,
        /// Records published (written by the owner only).
        pub head: Line<AtomicU64>,
        /// Records consumed (written by the drain only).
        pub tail: Line<AtomicU64>,
        /// The blocking call the owner is inside right now, if any.
        pub pending: Line<Pending>,
        /// The owner's encoding state (see [`Unit`]).
        pub codec: Line<Codec>,
    }

    /// A thread's blocking call in progress (`pthread_mutex_lock`, a rwlock lock,
    /// `sem_wait`, `pthread_cond_wait`, `pthread_barrier_wait`, `pthread_join`):
    /// the owner stores it before the real call and clears `kind` when the call
    /// returns (plain stores, no event). The recorder reads it only when the
    /// recording ends: a slot still set then becomes a [`super::kind::BLOCKED`]
    /// event, so a deadlock or hang shows which thread waited for what.
    #[repr(C)]
    pub struct Pending {
        /// The kind the call records when it returns, 0 when no call is pending.
        pub kind: AtomicU32,
        /// The object waited for.
        pub addr: AtomicU64,
        /// The call site.
        pub site: AtomicU64,
    }
    /// One per-object sequence counter.
    #[repr(C)]
    pub struct SeqSlot {
        /// The object's address, 0 while free.
        pub key: AtomicU64,
        /// Numbers handed out so far.
        pub next: AtomicU64,
    }

    /// The start of the mapping.
    #[repr(C, align(4096))]
    pub struct Header {
        /// [`MAGIC`].
        pub magic: u64,
        /// [`VERSION`].
        pub version: u32,
        /// Pid of the process whose agent took the mapping (others stay inert).
        pub target_pid: AtomicU32,
        /// Futex word the drain sleeps on; agents bump and wake it when a ring
        /// fills up.
        pub doorbell: AtomicU32,
        /// Nonzero while the drain sleeps on `doorbell` (agents wake it only then).
        pub drain_sleeping: AtomicU32,
        /// Rings handed out at least once (a high-water mark the drain scans up to).
        pub rings_used: AtomicU32,
        /// Nonzero once the agent has started recording in the target.
        pub attached: AtomicU32,
        /// Drain passes so far: a waiting thread gives up only when this stops moving.
        pub passes: AtomicU64,
        /// Set (and woken) by the recorder once it has read the program's modules;
        /// the agent's start-up waits for it while the recorder lives, so even a
        /// program that exits at once has its code symbolized.
        pub modules_read: AtomicU32,
        /// Events lost because every ring was taken.
        pub no_ring: AtomicU64,
        /// Events whose object found no free sequence counter (table full): their
        /// `seq` is 0 and their order is only as good as their timestamps.
        pub seq_full: AtomicU64,
        /// Child processes forked by the target, not followed.
        pub forks: AtomicU64,
        /// What [`Event::ts`] counts: [`CLOCK_MONOTONIC_NS`] or [`CLOCK_TSC`],
        /// with [`CLOCK_SPARSE`] when the clock is read sparsely (set by the
        /// recorder before the program starts).
        pub clock: u32,
        /// Pid of the recorder that made the mapping: the agent's start-up stops
        /// waiting for `modules_read` once that process is gone.
        pub recorder_pid: u32,
        /// Milliseconds the agent's start-up waited for `modules_read` and then
        /// went on without it (0: it did not give up): the program's code and data
        /// may then be unsymbolized, which the recorder reports.
        pub modules_waited_out: AtomicU32,
        /// Nonzero: the agent writes short units where it can ([`SHORT`]); 0: only
        /// compact and extended ones (`ORDO_RING_UNITS=wide`, which the tests
        /// and the bench compare against).
        pub short_units: u32,
    }

    /// [`Header::clock`]: records carry CLOCK_MONOTONIC nanoseconds (the vDSO).
    pub const CLOCK_MONOTONIC_NS: u32 = 0;
    /// [`Header::clock`]: records carry the time stamp counter (`rdtsc`), which the
    /// recorder converts to CLOCK_MONOTONIC nanoseconds by calibration points it
    /// takes every drain pass. Used only when the kernel's own clocksource is the
    /// TSC (so the two are one clock, synchronized across CPUs).
    pub const CLOCK_TSC: u32 = 1;
    /// [`Header::clock`] flag (`ordo record --sparse-times`): a thread reads the
    /// clock for an event that may follow a wait (a blocking call, a contended
    /// lock, its first event, a thread creation) and for at least every
    /// [`SPARSE_RUN`]th event; any other event carries the thread's previous time
    /// stamp plus one tick. An event takes longer than a tick, so every time stamp
    /// is at most the true one and a thread's stamps still rise; what the kernel
    /// records of the thread (its start, clones, exit) still falls in place, since
    /// the clock is read again after each.
    pub const CLOCK_SPARSE: u32 = 1 << 8;
    /// The mask of [`Header::clock`]'s unit ([`CLOCK_MONOTONIC_NS`] or [`CLOCK_TSC`]).
    pub const CLOCK_UNIT: u32 = 0xff;
    /// With [`CLOCK_SPARSE`]: at most this many events in a row take the previous
    /// time stamp plus one tick before the clock is read again.
    pub const SPARSE_RUN: u32 = 15;

    /// Byte offset of ring `i`'s header in the mapping.
    pub const fn ring_header_offset(i: usize) -> usize {
        core::mem::size_of::<Header>() + i * core::mem::size_of::<RingHeader>()
    }

    /// Byte offset of the sequence counter table.
    pub const fn seq_table_offset() -> usize {
        ring_header_offset(MAX_RINGS)
    }

    /// Byte offset of ring `i`'s records.
    pub const fn ring_records_offset(i: usize) -> usize {
        seq_table_offset()
            + SEQ_SLOTS * core::mem::size_of::<SeqSlot>()
            + i * RING_UNITS * core::mem::size_of::<Unit>()
    }

    /// Size of the whole mapping (sparse: pages are allocated as rings fill).
    pub const fn mapping_size() -> usize {
        ring_records_offset(MAX_RINGS)
    }

    /// Environment variable carrying the mapping's descriptor number to the agent.
    pub const ENV_FD: &str = "ORDO_RECORD_FD";

    /// Environment variable carrying the descriptor of a software-breakpoint table
    /// ([`SoftHeader`] then [`SoftSite`]s) to the agent: `ordo record --discover`
    /// and the hunt's runs.
    pub const ENV_SOFT_FD: &str = "ORDO_SOFT_SITES_FD";

    /// Environment variable asking the agent to hold the process's end (`main`
    /// returning, `exit`) until every other thread has exited or blocked, at most
    /// this many milliseconds: `ordo record --hold-exit` and the hunt's second
    /// recording of a run that ended before its threads acted.
    pub const ENV_HOLD_EXIT: &str = "ORDO_HOLD_EXIT";

    /// "ORDO_SFT".
    pub const SOFT_MAGIC: u64 = 0x4f52_444f_5f53_4654;
    /// Bumped whenever [`SoftHeader`] or [`SoftSite`] changes.
    pub const SOFT_VERSION: u32 = 14;

    /// The start of a software-breakpoint table.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct SoftHeader {
        /// [`SOFT_MAGIC`].
        pub magic: u64,
        /// [`SOFT_VERSION`].
        pub version: u32,
        /// Sites that follow.
        pub n_sites: u32,
        /// Traps a site takes (all threads together) before its breakpoint is
        /// removed for the rest of the run; 0: never removed.
        pub budget: u32,
        /// Reserved, 0.
        pub flags: u32,
    }

    /// One instruction of the main executable that reads or writes memory other
    /// than the stack, on which the agent plants a software breakpoint (`int3`):
    /// the trap computes the address from the registers, records the access and
    /// resumes at a copy of the instruction placed out of line.
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct SoftSite {
        /// Link-time address of the instruction.
        pub ip: u64,
        /// Displacement of the memory operand; for a RIP-relative operand the
        /// link-time address it reaches (`base`, `index` NONE).
        pub disp: i64,
        /// The instruction's bytes (`len` of them).
        pub bytes: [u8; 16],
        /// Length of the instruction.
        pub len: u8,
        /// Base register ([`super::reg`]).
        pub base: u8,
        /// Index register ([`super::reg`]).
        pub index: u8,
        /// Index scale.
        pub scale: u8,
        /// Access size in bytes.
        pub size: u8,
        /// [`super::kind::READ`], [`super::kind::WRITE`] or [`super::kind::RMW`].
        pub access: u8,
        /// [`super::via::POINT`] or [`super::via::POINT_ATOMIC`].
        pub via: u8,
        /// Offset in `bytes` of a RIP-relative operand's 32-bit displacement (the
        /// out-of-line copy rewrites it), 0 when the operand is not RIP-relative.
        pub disp_at: u8,
        /// A replay gate at this instruction: the index of its access site in the
        /// replay plan ([`SOFT_NO_GATE`]: none). A gated site's breakpoint is never
        /// removed.
        pub gate: u32,
        /// Bytes from the start of a Rust lock operation (a fast path's `lock
        /// cmpxchg` and its branch, or a release's `xchg`/`lock xadd` and the
        /// instructions after it up to 5 bytes) that may be replaced by a `jmp`
        /// to a trampoline: no branch lands inside them and those after the first
        /// run anywhere. 0: keep the breakpoint.
        pub patch: u32,
    }

    /// [`SoftSite::gate`]: the site gates nothing.
    pub const SOFT_NO_GATE: u32 = u32::MAX;

    /// [`SoftSite::access`] of a site that records a Rust `std::sync::Mutex`
    /// acquisition on its inlined fast path: the `jne` (or `je`) right after the
    /// `lock cmpxchg` on the lock word (the operand fields describe that
    /// `cmpxchg`'s memory operand). On success: acquired, recorded; on failure: the
    /// slow path will acquire it, and the address waits for
    /// [`SOFT_RUST_LOCK_SLOW`]. The agent emulates the branch. Never removed.
    pub const SOFT_RUST_LOCK_FAST: u8 = 0xf0;
    /// [`SoftSite::access`]: a `ret` of std's out-of-line `lock_contended` (or of
    /// the `RwLock`'s `read_contended`/`write_contended`): the lock the thread's
    /// fast path failed on is held now. The agent emulates the
    /// `ret`. Never removed.
    pub const SOFT_RUST_LOCK_SLOW: u8 = 0xf1;
    /// [`SoftSite::access`]: the `xchg` that releases a Rust `std::sync::Mutex`
    /// (the inlined unlock; the operand fields are its memory operand): the release
    /// is recorded before it runs out of line. Never removed.
    pub const SOFT_RUST_UNLOCK: u8 = 0xf2;
    /// [`SoftSite::access`]: the `lock cmpxchg` of a Rust mutex's inlined fast
    /// path, where a replay gates the acquisition before it is tried (planted only
    /// when replaying; the instruction runs out of line). Never removed.
    pub const SOFT_RUST_LOCK_GATE: u8 = 0xf3;
    /// [`SoftSite::access`]: the first instruction of std's futex
    /// `Condvar::wait(&self, mutex)` (`rdi` the condvar, `rsi` the mutex, `[rsp]`
    /// the caller): the wait begins and the mutex is released, recorded as a
    /// `pthread_cond_wait`'s are; the mutex's inlined release and reacquisition
    /// inside the wait are this wait's, not `mutex_*` events of their own. The
    /// instruction runs out of line. Never removed.
    pub const SOFT_RUST_COND_WAIT: u8 = 0xf4;
    /// [`SoftSite::access`]: as [`SOFT_RUST_COND_WAIT`], for
    /// `Condvar::wait_timeout` (a wait that comes back by itself).
    pub const SOFT_RUST_COND_WAIT_TIMED: u8 = 0xf5;
    /// [`SoftSite::access`]: the first instruction of `Condvar::notify_one`
    /// (`rdi` the condvar): a `cond_signal`. Never removed.
    pub const SOFT_RUST_COND_SIGNAL: u8 = 0xf6;
    /// [`SoftSite::access`]: the first instruction of `Condvar::notify_all`: a
    /// `cond_broadcast`. Never removed.
    pub const SOFT_RUST_COND_BROADCAST: u8 = 0xf7;
    /// [`SoftSite::access`]: as [`SOFT_RUST_LOCK_FAST`], for the inlined read
    /// lock of std's futex `RwLock` (its slow path `read_contended`).
    pub const SOFT_RUST_READ_FAST: u8 = 0xf8;
    /// [`SoftSite::access`]: as [`SOFT_RUST_LOCK_FAST`], for the inlined write
    /// lock of std's futex `RwLock` (its slow path `write_contended`).
    pub const SOFT_RUST_WRITE_FAST: u8 = 0xf9;
    /// [`SoftSite::access`]: as [`SOFT_RUST_LOCK_GATE`], for an `RwLock` read.
    pub const SOFT_RUST_READ_GATE: u8 = 0xfa;
    /// [`SoftSite::access`]: as [`SOFT_RUST_LOCK_GATE`], for an `RwLock` write.
    pub const SOFT_RUST_WRITE_GATE: u8 = 0xfb;
    /// [`SoftSite::access`]: the `lock xadd` that releases std's futex `RwLock`
    /// (read or write: the lock word says which, while it is still held):
    /// recorded before it runs out of line. Never removed.
    pub const SOFT_RUST_RW_UNLOCK: u8 = 0xfc;
    /// [`SoftSite::access`]: the first instruction of `RwLock::read_contended`
    /// (`rdi` the lock): a read acquisition goes the slow way, and waits for its
    /// [`SOFT_RUST_LOCK_SLOW`] return. Never removed.
    pub const SOFT_RUST_READ_CONTENDED: u8 = 0xfd;
    /// [`SoftSite::access`]: as [`SOFT_RUST_READ_CONTENDED`], for
    /// `RwLock::write_contended`.
    pub const SOFT_RUST_WRITE_CONTENDED: u8 = 0xfe;
    /// [`SoftSite::access`]: the first instruction of std's `Barrier::wait`
    /// (`rdi` the barrier): `barrier_arrive`, as `pthread_barrier_wait`'s
    /// wrapper records it on entry. Never removed.
    pub const SOFT_RUST_BARRIER_WAIT: u8 = 0xe0;
    /// [`SoftSite::access`]: a `ret` of std's `Barrier::wait`: `barrier_wait`
    /// (the thread leaves; `al` says whether it is the leader). The agent
    /// emulates the `ret`. Never removed.
    pub const SOFT_RUST_BARRIER_LEAVE: u8 = 0xe1;

    /// [`SoftSite::access`]: the `mov r32, [m32]` that loads a Rust `Once`'s
    /// state in an inlined completion check (`Once::call_once`, `OnceLock`,
    /// `LazyLock`); never planted: the jump patch of the check's
    /// [`SOFT_RUST_ONCE_CHECK`] runs it out of line.
    pub const SOFT_RUST_ONCE_LOAD: u8 = 0xe2;
    /// [`SoftSite::access`]: the conditional branch of an inlined `Once`
    /// completion check (after the load and a `test`/`cmp`; the operand fields
    /// describe the load's memory operand): when it finds the `Once` complete
    /// (ZF set), the thread's first observation since the last completion anywhere
    /// is recorded as an atomic read of the state word (an acquire). The agent
    /// emulates the branch. Never removed.
    pub const SOFT_RUST_ONCE_CHECK: u8 = 0xe3;
    /// [`SoftSite::access`]: an `xchg r32, [m32]` in std's `Once::call` (the
    /// completion guard storing the final state): recorded as an atomic write of
    /// the state word (a release) before it runs out of line. Never removed.
    pub const SOFT_RUST_ONCE_DONE: u8 = 0xe4;
    /// [`SoftSite::access`]: the first instruction of std's `Once::call` (`rdi`
    /// the state word): remembered until the call returns. Never removed.
    pub const SOFT_RUST_ONCE_ENTER: u8 = 0xe5;
    /// [`SoftSite::access`]: a `ret` of std's `Once::call`: the `Once` is complete
    /// (run here or waited for), recorded as an atomic read of its state word.
    /// The agent emulates the `ret`. Never removed.
    pub const SOFT_RUST_ONCE_LEAVE: u8 = 0xe6;

    /// [`SoftSite::access`]: the `xchg r32, [m32]` of an inlined
    /// `Thread::unpark` (the parker's state set to "notified", then compared with
    /// "parked" to wake it): recorded as an atomic read-modify-write of the state
    /// word (a release) before it runs out of line. Never removed.
    pub const SOFT_RUST_UNPARK: u8 = 0xe7;
    /// [`SoftSite::access`]: the `lock dec [m32]` in std's `thread::park` that
    /// takes the parker's token: its address is remembered until `park` returns.
    /// Runs out of line. Never removed.
    pub const SOFT_RUST_PARK_TOKEN: u8 = 0xe8;
    /// [`SoftSite::access`]: a `ret` of std's `thread::park` (or `park_timeout`,
    /// `Thread::park`): recorded as an atomic read-modify-write of the parker's
    /// state word (an acquire of what the unparking thread released). The agent
    /// emulates the `ret`. Never removed.
    pub const SOFT_RUST_PARK_LEAVE: u8 = 0xe9;

    /// [`SoftSite::access`]: the `lock cmpxchg` of an inlined `Mutex::try_lock`
    /// (no slow path; its success side reads the poison flag next to the lock
    /// word), where a replay gates a named failure before the try (planted only
    /// when replaying; the instruction runs out of line). Never removed.
    pub const SOFT_RUST_TRY_GATE: u8 = 0xea;
    /// [`SoftSite::access`]: the branch after a [`SOFT_RUST_TRY_GATE`]'s
    /// `cmpxchg`: a success is a `mutex_lock` (via `try`), a failure a
    /// `mutex_lock_failed`, as `pthread_mutex_trylock`'s. The agent emulates the
    /// branch. Never removed.
    pub const SOFT_RUST_TRY_FAST: u8 = 0xeb;

    /// [`SoftSite::access`]: the first instruction of std's
    /// `mpmc::list::Channel<T>::send` (the unbounded channel's, `mpsc::channel`),
    /// the channel in the register [`SoftSite::base`] names (`rdi`, or `rsi` when
    /// the instance returns its result through memory): recorded as an atomic
    /// read-modify-write of the channel (a release) before the message is
    /// published. Runs out of line. Never removed.
    pub const SOFT_RUST_CHAN_SEND: u8 = 0xec;
    /// [`SoftSite::access`]: the first instruction of std's
    /// `mpmc::list::Channel<T>::recv` (the channel in [`SoftSite::base`]):
    /// remembered until it returns. Runs out of line. Never removed.
    pub const SOFT_RUST_CHAN_RECV: u8 = 0xed;
    /// [`SoftSite::access`]: a `ret` of std's `mpmc::list::Channel<T>::recv`:
    /// recorded as an atomic read of the channel (an acquire of every send before
    /// it). The agent emulates the `ret`. Never removed.
    pub const SOFT_RUST_CHAN_RECEIVED: u8 = 0xee;

    /// [`SoftSite::access`]: the `jne` back to the loop's check after the `lock
    /// cmpxchg` of an inlined `RwLock::try_read` (a loop whose check leaves with
    /// no slow path; the operand fields describe the `cmpxchg`'s memory operand):
    /// ZF set is a success, an `rwlock_rdlock` via `try`; clear, the loop checks
    /// again. The agent emulates the branch. Never removed.
    pub const SOFT_RUST_TRY_READ_FAST: u8 = 0xef;
    /// [`SoftSite::access`]: as [`SOFT_RUST_TRY_READ_FAST`], for
    /// `RwLock::try_write` (an `rwlock_wrlock` via `try`).
    pub const SOFT_RUST_TRY_WRITE_FAST: u8 = 0xdf;
    /// [`SoftSite::access`]: the branch out of an inlined `RwLock::try_read`'s
    /// loop (`ja`, after `cmp r32, imm` on the loaded state: too many readers or a
    /// writer; the operand fields are the loop's `cmpxchg`'s): taken is a failure,
    /// an `rwlock_lock_failed` via `try`, gated in a replay. The agent emulates the
    /// branch. Never removed.
    pub const SOFT_RUST_TRY_READ_CHECK: u8 = 0xde;
    /// [`SoftSite::access`]: as [`SOFT_RUST_TRY_READ_CHECK`], for
    /// `RwLock::try_write` (`jne` after `test r32, imm`: held by anyone).
    pub const SOFT_RUST_TRY_WRITE_CHECK: u8 = 0xdd;

    /// [`SoftSite::access`]: the first instruction of `parking_lot`'s
    /// `RawMutex::lock_slow` or `unlock_slow`, or `RawRwLock::unlock_shared_slow`
    /// or `unlock_exclusive_slow`: until it returns, the thread's futex calls (on
    /// `parking_lot_core`'s per-thread words, not the lock) are the lock
    /// operation's own, not events. Runs out of line. Never removed.
    pub const SOFT_PL_SLOW_ENTER: u8 = 0xdc;
    /// [`SoftSite::access`]: a `ret` of a `parking_lot` slow path whose operation
    /// was recorded before it (`RawMutex::unlock_slow`, the `RawRwLock` unlocks',
    /// `Condvar::notify_one_slow`, `notify_all_slow`). The agent emulates the
    /// `ret`. Never removed.
    pub const SOFT_PL_SLOW_LEAVE: u8 = 0xdb;

    /// [`SoftSite::access`]: the first instruction of `parking_lot`'s
    /// `RawRwLock::lock_shared_slow` (the lock in `rdi`): a read acquisition goes
    /// the slow way — also one whose inlined check found a writer and never tried
    /// the fast path's `cmpxchg`, so a replay gates it here if the fast path did
    /// not. Its returns are [`SOFT_RUST_LOCK_SLOW`]; until then the thread's futex
    /// calls are the lock's own (as [`SOFT_PL_SLOW_ENTER`]). Runs out of line.
    /// Never removed.
    pub const SOFT_PL_READ_SLOW: u8 = 0xda;
    /// [`SoftSite::access`]: as [`SOFT_PL_READ_SLOW`], for
    /// `RawRwLock::lock_exclusive_slow` (a write acquisition).
    pub const SOFT_PL_WRITE_SLOW: u8 = 0xd9;
    /// [`SoftSite::access`]: the first instruction of `parking_lot`'s
    /// `Condvar::wait_until_internal` (condvar in `rdi`, its `RawMutex` in `rsi`,
    /// the deadline's nanoseconds in `ecx`: 1 000 000 000 is no deadline): a
    /// condvar wait begins, as [`SOFT_RUST_COND_WAIT`] (or `_TIMED`), and its
    /// futex calls are the wait's own. Runs out of line. Never removed.
    pub const SOFT_PL_COND_WAIT: u8 = 0xd8;
    /// [`SoftSite::access`]: a `ret` of `Condvar::wait_until_internal`: a wait
    /// whose mutex was handed over by its releaser (no `cmpxchg` of the waiter's
    /// took it) returns here holding it. The agent emulates the `ret`. Never
    /// removed.
    pub const SOFT_PL_COND_LEAVE: u8 = 0xd7;
    /// [`SoftSite::access`]: the branch (`je` or `jne`) after an inlined
    /// `parking_lot` `notify_one`'s `test rsi, rsi` of the condvar's state, whose
    /// waiters side calls `notify_one_slow` (state in `rsi`); the operand fields
    /// give the condvar's address from the registers at the branch (as that
    /// side passes it in `rdi`). No waiters is a signal that wakes nobody,
    /// recorded here; otherwise `notify_one_slow`'s entry records it. A replay
    /// gates it here, then loads the state again into `rsi` and the zero flag
    /// (the program's relaxed load, done later), so a notify held by its gate
    /// sees the waiters that came meanwhile. The agent emulates the branch.
    /// Never removed.
    pub const SOFT_PL_NOTIFY_ONE_CHECK: u8 = 0xd4;
    /// [`SoftSite::access`]: as [`SOFT_PL_NOTIFY_ONE_CHECK`], for `notify_all`.
    pub const SOFT_PL_NOTIFY_ALL_CHECK: u8 = 0xd3;
    /// [`SoftSite::access`]: the first instruction of `Condvar::notify_one_slow`
    /// (condvar in `rdi`): a signal with waiters, recorded (and gated, unless
    /// its inlined check was). Its returns are [`SOFT_PL_SLOW_LEAVE`].
    /// Runs out of line. Never removed.
    pub const SOFT_PL_NOTIFY_ONE_SLOW: u8 = 0xd2;
    /// [`SoftSite::access`]: as [`SOFT_PL_NOTIFY_ONE_SLOW`], for
    /// `notify_all_slow` (a broadcast).
    pub const SOFT_PL_NOTIFY_ALL_SLOW: u8 = 0xd1;

    /// [`SoftSite::access`]: the `jne` back to the loop's check after the `lock
    /// cmpxchg r8, [m8]` of an inlined `parking_lot` `Mutex::try_lock` (the
    /// operand fields are the `cmpxchg`'s): ZF set is a success, a `mutex_lock`
    /// via `try`; clear, the loop checks again. The agent emulates the branch.
    /// Never removed.
    pub const SOFT_PL_TRY_LOCK_FAST: u8 = 0xd0;
    /// [`SoftSite::access`]: the branch out of that loop (`jne` after `test r8,
    /// 1` on the loaded byte: held; the operand fields are the `cmpxchg`'s):
    /// taken is a failure, a `mutex_lock_failed` via `try`, gated in a replay. The
    /// agent emulates the branch. Never removed.
    pub const SOFT_PL_TRY_LOCK_CHECK: u8 = 0xcf;
    /// [`SoftSite::access`]: the `jne` (or `je`) after an inlined `parking_lot`
    /// `RwLock::try_write`'s one `lock cmpxchg r64, [m64]` (0 → WRITER) and its
    /// `sete`: ZF set is a success, an `rwlock_wrlock` via `try`, clear a
    /// failure, an `rwlock_lock_failed`. The agent emulates the branch. Never
    /// removed.
    pub const SOFT_PL_TRY_WRITE_ONCE: u8 = 0xce;
    /// [`SoftSite::access`]: the first instruction of `parking_lot`'s
    /// `RawRwLock::try_lock_shared_slow` (the lock in `rdi`), which an inlined
    /// `try_read` calls when its check or its `cmpxchg` failed: gated in a replay
    /// unless the fast path's gate was passed; its futex calls are the lock's
    /// own. Runs out of line. Never removed.
    pub const SOFT_PL_TRY_READ_SLOW: u8 = 0xcd;
    /// [`SoftSite::access`]: a `ret` of `try_lock_shared_slow`: `al` set is an
    /// `rwlock_rdlock` via `try`, clear an `rwlock_lock_failed`. The agent
    /// emulates the `ret`. Never removed.
    pub const SOFT_PL_TRY_READ_LEAVE: u8 = 0xcc;

    /// [`SoftSite::access`]: a `ret` of `parking_lot`'s `RawMutex::lock_slow`,
    /// `RawRwLock::lock_shared_slow` or `lock_exclusive_slow`, which return
    /// whether they took the lock (a timed lock, `try_lock_for`, may not): `al`
    /// set records the contended acquisition as [`SOFT_RUST_LOCK_SLOW`] does,
    /// clear a `mutex_lock_failed`/`rwlock_lock_failed` via `timed`
    /// (`ETIMEDOUT`). The agent emulates the `ret`. Never removed.
    pub const SOFT_PL_LOCK_LEAVE: u8 = 0xcb;

    const _: () = assert!(core::mem::size_of::<SoftSite>() == 48);
    const _: () = assert!(core::mem::size_of::<SoftHeader>() == 24);

    #[cfg(all(test, not(target_arch = "bpf")))]
    mod fold_tests {
        extern crate std;
        use super::super::{kind, via};
        use super::*;

        /// What [`fold_pair`] decides, field by field, as its first form did: the
        /// reference its word-wide, branch-free form is checked against.
        fn fold_pair_by_fields(first: &Unit, second: &Unit) -> Option<Unit> {
            if !first.is_short() || !second.is_short() {
                return None;
            }
            let addr = first.a & LOW48;
            let kind1 = (first.a >> 48) as u16 & 0x1f;
            let via1 = (first.a >> 53) as u8 & 0x7;
            let kind2 = (second.a >> 48) as u16 & 0x1f;
            let via2 = (second.a >> 53) as u8 & 0x7;
            let code = PAIR_KINDS
                .iter()
                .position(|&(k1, k2)| k1 == kind1 && k2 == kind2)?;
            let seq = first.b & 0xffff_ffff;
            let before = (first.b >> 32) & ((1 << SHORT_DELTA_BITS) - 1);
            let held = (second.b >> 32) & ((1 << SHORT_DELTA_BITS) - 1);
            let fits = second.a & LOW48 == addr
                && addr & 7 == 0
                && addr >> 47 == 0
                && (via1 == via::PLAIN || via1 == via::TRY)
                && via2 == via::PLAIN
                && second.b & 0xffff_ffff == seq + 1
                && before >> PAIR_BEFORE_BITS == 0
                && held >> PAIR_HELD_BITS == 0;
            fits.then_some(Unit {
                a: addr >> 3
                    | (first.a >> 56) << 44
                    | (second.a >> 56) << 52
                    | (code as u64) << 60
                    | ((via1 == via::TRY) as u64) << 62
                    | (before >> 16) << 63,
                b: seq | (before & 0xffff) << 32 | held << 48 | PAIR,
            })
        }

        /// The fold decides as the field-by-field reference does, on pairs near
        /// every one of its limits and on random words.
        #[test]
        fn the_word_wide_fold_decides_as_the_field_by_field_one() {
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            let mut next = move || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            let short = |addr: u64, kind: u16, via: u8, site: u64, seq: u64, delta: u64| Unit {
                a: addr | (kind as u64) << 48 | (via as u64) << 53 | site << 56,
                b: seq | delta << 32 | SHORT,
            };
            let (mut folded, mut tried) = (0, 0);
            for _ in 0..200_000 {
                let r = next();
                let pick =
                    |values: &[u64], shift: u32| values[(r >> shift) as usize % values.len()];
                let addr = pick(
                    &[
                        0x7fff_0000_1000,
                        0x7fff_0000_2040,
                        0x5555_0000_0010,
                        0x7fff_0000_1004,
                        0x8000_0000_1000,
                        0xffff_ffff_fff8,
                    ],
                    0,
                );
                let kinds = [
                    kind::MUTEX_LOCK,
                    kind::MUTEX_UNLOCK,
                    kind::RWLOCK_RDLOCK,
                    kind::RWLOCK_WRLOCK,
                    kind::RWLOCK_UNLOCK,
                    kind::SEM_POST,
                    31,
                ];
                let (kind1, kind2) = if r >> 4 & 3 != 0 {
                    PAIR_KINDS[(r >> 6) as usize % PAIR_KINDS.len()]
                } else {
                    (
                        kinds[(r >> 6) as usize % kinds.len()],
                        kinds[(r >> 9) as usize % kinds.len()],
                    )
                };
                let via1 = pick(&[0, 0, 0, 1, 1, 2, 7], 12) as u8;
                let via2 = pick(&[0, 0, 0, 0, 0, 1, 5], 16) as u8;
                let seq = pick(&[0, 41, 0xffff_fffe, 0xffff_ffff], 20);
                let step = pick(&[1, 1, 1, 1, 1, 0, 2, 0x1_0000_0001], 24);
                let before = pick(
                    &[0, 5, 0xffff, 1 << 16, (1 << 17) - 1, 1 << 17, (1 << 30) - 1],
                    28,
                );
                let held = pick(&[0, 9, 9, (1 << 14) - 1, 1 << 14, (1 << 30) - 1], 32);
                let other = pick(&[0, 0, 0, 0, 0, 8, 1 << 40], 36);
                let mut first = short(addr & LOW48, kind1, via1, r >> 40 & 0xff, seq, before);
                let mut second = short(
                    (addr + other) & LOW48,
                    kind2,
                    via2,
                    r >> 48 & 0xff,
                    (seq + step) & 0xffff_ffff,
                    held,
                );
                // Now and then a unit of another form, or random words.
                match r >> 56 & 15 {
                    0 => first.b &= !SHORT,
                    1 => second.b |= EXTENDED,
                    2 => {
                        first = Unit {
                            a: next(),
                            b: next(),
                        }
                    }
                    3 => {
                        second = Unit {
                            a: next(),
                            b: next(),
                        }
                    }
                    _ => {}
                }
                let expected = fold_pair_by_fields(&first, &second);
                assert_eq!(
                    fold_pair(&first, &second),
                    expected,
                    "{first:x?} {second:x?}"
                );
                tried += 1;
                folded += expected.is_some() as u32;
            }
            assert!(
                folded > 2_000 && folded < tried / 2,
                "{folded} of {tried} folded"
            );
        }
    }
}

#[cfg(all(test, not(target_arch = "bpf")))]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use super::inproc::{
        decode, encode, fold_pair, site_set, Codec, DecodeState, Event, SiteScan, Unit, EXTENDED,
    };
    use super::{kind, via};

    /// Encodes `e` without short units, decodes it back, and checks that a cut
    /// inside it gives nothing rather than a wrong event; the units it took.
    fn round_trip(e: Event) -> usize {
        let (units, n) = encode(&e, None);
        let decoded = decode(&units[..n], None).unwrap();
        assert_eq!((decoded.events(), decoded.units), (&[e][..], n), "{e:?}");
        for cut in 1..n {
            assert_eq!(decode(&units[..cut], None), None);
        }
        let mut scan = SiteScan::default();
        let sites: Vec<u64> = units[..n].iter().filter_map(|u| scan.see(u)).collect();
        assert_eq!(sites, [e.site], "{e:?}");
        n
    }

    #[test]
    fn ring_events_round_trip_in_two_units_or_four() {
        let lock = Event {
            ts: (1 << 62) - 5,
            seq: 41,
            addr: 0x7fff_1234_5678,
            site: 0x5555_0000_1234,
            kind: kind::MUTEX_LOCK as u8,
            ..Event::default()
        };
        assert_eq!(round_trip(lock), 2);
        // Results that fit 16 bits, negative ones too, stay compact.
        for result in [0, 16, -1, i16::MIN as i32, i16::MAX as i32] {
            let failed = Event {
                result,
                kind: kind::MUTEX_LOCK_FAILED as u8,
                via: via::TRY,
                ..lock
            };
            assert_eq!(round_trip(failed), 2);
        }
        // Anything that does not fit takes four units and comes back whole.
        let wide = [
            Event {
                result: 70_000,
                ..lock
            },
            Event {
                result: i32::MIN,
                ..lock
            },
            Event {
                extra: 0x7fff_0000_0040,
                kind: kind::COND_WAIT_BEGIN as u8,
                ..lock
            },
            Event {
                addr: 1 << 56 | 8,
                ..lock
            },
            Event {
                site: u64::MAX,
                ..lock
            },
            Event {
                seq: EXTENDED / 2 - 1,
                extra: 1,
                ..lock
            },
            // Sequence numbers with the short unit's bit set, and the extended one's.
            Event {
                seq: EXTENDED / 2 + 5,
                ..lock
            },
            Event {
                seq: u64::MAX,
                ..lock
            },
        ];
        for e in wide {
            assert_eq!(round_trip(e), 4);
        }
    }

    /// Every event of one ring's units, decoded in order as the recorder does;
    /// panics if the units end inside an event.
    fn decode_all(units: &[Unit]) -> Vec<Event> {
        let mut state = DecodeState::default();
        let mut rest = units;
        let mut decoded = Vec::new();
        while let Some(d) = decode(rest, Some(&mut state)) {
            decoded.extend_from_slice(d.events());
            rest = &rest[d.units..];
        }
        assert!(rest.is_empty(), "{} units left over", rest.len());
        decoded
    }

    /// Encodes `e` as a ring's owner does (`agent/preload/src/record.rs`, `emit`)
    /// into `units`; the units it took.
    fn emit(codec: &Codec, e: &Event, units: &mut Vec<Unit>) -> usize {
        let (encoded, n) = encode(e, Some(codec.against(e.site)));
        units.extend_from_slice(&encoded[..n]);
        codec.note(e, n, true);
        n
    }

    #[test]
    fn short_units_decode_to_the_events_the_owner_encoded() {
        let codec = Codec::new();
        let mut units = Vec::new();
        let base = Event {
            ts: 1_000,
            seq: 7,
            addr: 0x7fff_0000_1000,
            site: 0x5555_0000_2000,
            kind: kind::MUTEX_LOCK as u8,
            ..Event::default()
        };
        let mut events = Vec::new();
        let mut sizes = Vec::new();
        let mut ts = base.ts;
        for i in 0..200u64 {
            // Two sites that share an index half the time, a gap too long for a
            // short unit now and then, a result, a time going back, a large
            // sequence number, a second object.
            ts = match i % 37 {
                13 => ts + (1 << 30),
                29 => ts - 3,
                _ => ts + 1 + i % 5,
            };
            let e = Event {
                ts,
                seq: if i % 41 == 40 { 1 << 33 } else { base.seq + i },
                site: base.site + (i % 3) * 0x10 + if i % 7 == 0 { 0x4000 } else { 0 },
                kind: if i % 2 == 0 {
                    kind::MUTEX_LOCK
                } else {
                    kind::MUTEX_UNLOCK
                } as u8,
                result: if i % 53 == 52 { 16 } else { 0 },
                extra: if i % 61 == 60 { 0x7fff_0000_4000 } else { 0 },
                via: (i % 11 == 0) as u8,
                ..base
            };
            sizes.push(emit(&codec, &e, &mut units));
            events.push(e);
        }
        assert!(sizes.iter().filter(|&&n| n == 1).count() > 100, "{sizes:?}");
        assert!(sizes.contains(&2) && sizes.contains(&4));
        assert_eq!(decode_all(&units), events);
        // The scan the drain makes as it copies finds the sites carried in full.
        let mut scan = SiteScan::default();
        let scanned: Vec<u64> = units.iter().filter_map(|u| scan.see(u)).collect();
        let full: Vec<u64> = (events.iter().zip(&sizes))
            .filter(|&(_, &n)| n != 1)
            .map(|(e, _)| e.site)
            .collect();
        assert!(full.len() > 20);
        assert_eq!(scanned, full);
    }

    /// Folds a ring's units as the drain copies them: every pair of short units
    /// that is an acquisition and its release becomes one unit.
    fn fold(units: &[Unit]) -> Vec<Unit> {
        let mut out = Vec::new();
        let mut scan = SiteScan::default();
        let mut i = 0;
        while i < units.len() {
            let start = scan.at_event_start();
            scan.see(&units[i]);
            let pair = units
                .get(i + 1)
                .filter(|_| start)
                .and_then(|next| fold_pair(&units[i], next));
            match pair {
                Some(pair) => {
                    scan.see(&units[i + 1]);
                    out.push(pair);
                    i += 2;
                }
                None => {
                    out.push(units[i]);
                    i += 1;
                }
            }
        }
        out
    }

    #[test]
    fn folded_pairs_decode_to_the_events_the_owner_encoded() {
        let codec = Codec::new();
        let mut units = Vec::new();
        let mut events = Vec::new();
        let mut ts = 5_000u64;
        let object = |i: u64| 0x7fff_0000_1000 + 64 * (i % 3);
        let mut seqs = [0u64; 4];
        for i in 0..400u64 {
            // Lock/unlock pairs on three mutexes (one of them an rwlock, one
            // taken by trylocks now and then); now and then a gap too long to
            // fold, a hold too long, an unlock of another object, a release
            // not numbered right after its acquisition, a misaligned object.
            let k = i % 3;
            let addr = if i % 97 == 50 {
                object(k) + 4
            } else {
                object(k)
            };
            let (acquire, release) = if k == 2 {
                (
                    kind::RWLOCK_WRLOCK - (i % 4 == 0) as u16,
                    kind::RWLOCK_UNLOCK,
                )
            } else {
                (kind::MUTEX_LOCK, kind::MUTEX_UNLOCK)
            };
            ts += if i % 31 == 7 { 1 << 17 } else { 3 + i % 7 };
            let site = 0x5555_0000_2000 + 0x10 * k;
            let seq = &mut seqs[k as usize];
            let lock = Event {
                ts,
                seq: *seq,
                addr,
                site,
                kind: acquire as u8,
                via: if i % 5 == 0 { via::TRY } else { via::PLAIN },
                ..Event::default()
            };
            *seq += if i % 43 == 10 { 2 } else { 1 };
            ts += if i % 29 == 3 { 1 << 14 } else { 1 + i % 4 };
            let unlock = Event {
                ts,
                seq: *seq,
                addr: if i % 53 == 20 { addr + 64 } else { addr },
                site: site + 0x100,
                kind: release as u8,
                via: via::PLAIN,
                ..Event::default()
            };
            *seq += 1;
            for e in [lock, unlock] {
                emit(&codec, &e, &mut units);
                events.push(e);
            }
            if i % 67 == 30 {
                // A compact event whose second unit looks like a short lock
                // (its result sets the short bit), then a short unlock: no pair.
                let odd = Event {
                    ts: ts + 1,
                    seq: *seq,
                    result: 0x4000,
                    kind: kind::MUTEX_LOCK as u8,
                    site: site + 0x2000,
                    ..lock
                };
                // Numbered as the second unit's `b` would number a short lock,
                // so only the event's boundary tells them apart.
                let after = Event {
                    ts: ts + 2,
                    seq: (odd.site & 0xffff_ffff) + 1,
                    ..unlock
                };
                *seq += 2;
                ts += 2;
                let before = units.len();
                emit(&codec, &odd, &mut units);
                assert!(units.len() == before + 2 && units[before + 1].is_short());
                assert_eq!(emit(&codec, &after, &mut units), 1);
                events.extend([odd, after]);
            }
        }
        let folded = fold(&units);
        let pairs = folded.iter().filter(|u| u.is_pair()).count();
        assert!(pairs > 300, "{pairs} pairs of 400");
        assert!(folded.len() > pairs + 100, "some were not folded");
        assert_eq!(decode_all(&folded), events);
        // The scan sees a pair as one unit that carries no site.
        let mut scan = SiteScan::default();
        let scanned: Vec<u64> = units.iter().filter_map(|u| scan.see(u)).collect();
        let mut scan = SiteScan::default();
        let scanned_folded: Vec<u64> = folded.iter().filter_map(|u| scan.see(u)).collect();
        assert_eq!(scanned, scanned_folded);
    }

    /// Sites that share a set: two of them stay known together, a third pushes
    /// out the older; an event that is compact for another reason (a result)
    /// does not push out a site its set holds. The owner's and the recorder's
    /// copies agree throughout.
    #[test]
    fn two_sites_share_a_set_and_a_third_pushes_out_the_older() {
        let base = 0x5555_0000_0000u64;
        let in_set = |set: usize| {
            (0..)
                .map(move |i| base + 16 * i)
                .filter(move |&s| site_set(s) == set)
        };
        let set = site_set(base);
        let [a, b, c]: [u64; 3] = in_set(set).take(3).collect::<Vec<_>>().try_into().unwrap();
        let codec = Codec::new();
        let mut units = Vec::new();
        let mut events = Vec::new();
        let mut sizes = Vec::new();
        let lock = Event {
            ts: 100,
            addr: 0x7fff_0000_1000,
            kind: kind::MUTEX_LOCK as u8,
            ..Event::default()
        };
        // (site, result, units expected)
        let script = [
            (a, 0, 2),
            (b, 0, 2),
            (a, 0, 1),
            (b, 0, 1),
            (a, 16, 2), // a result: compact, a stays
            (b, 0, 1),
            (a, 0, 1),
            (c, 0, 2), // pushes out a (b was first)...
            (b, 0, 1),
            (c, 0, 1),
            (a, 0, 2), // ...so a comes back in full, pushing out b
            (c, 0, 1),
            (b, 0, 2),
        ];
        for (i, &(site, result, expected)) in script.iter().enumerate() {
            let e = Event {
                ts: lock.ts + i as u64,
                seq: i as u64,
                site,
                result,
                kind: if result != 0 {
                    kind::MUTEX_LOCK_FAILED
                } else {
                    kind::MUTEX_LOCK
                } as u8,
                ..lock
            };
            sizes.push(emit(&codec, &e, &mut units));
            events.push(e);
            assert_eq!(sizes[i], expected, "event {i} at {site:#x}");
        }
        assert_eq!(decode_all(&units), events);
    }
}
