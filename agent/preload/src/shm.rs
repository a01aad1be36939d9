//! The replay plan's shared-memory page between `ordo replay` (the driver) and the agent it preloads
//! into the program. One definition, compiled into both: the agent includes it as a
//! module and the driver includes the same file with `#[path]`.
//!
//! The driver fills in the plan (named events, their predecessors, the symbols they
//! use, the threads that own them) before the program starts; the agent fills in
//! what happened (counts, done flags, order stamps) and each thread's state, which
//! the driver polls to tell a deadlock or an infeasible schedule from a slow run.
//! Every field either side writes while the other runs is an atomic.
#![allow(
    dead_code,
    reason = "one layout compiled into both the agent and the driver: each uses part of it"
)]

use std::sync::atomic::{AtomicU32, AtomicU64};

/// "ORDO_REP".
pub const MAGIC: u64 = 0x4f52_444f_5f52_4550;
/// Bumped whenever the layout changes.
pub const VERSION: u32 = 5;

/// Named events a plan can hold (`*` successors included).
pub const MAX_EVENTS: usize = 8192;
/// Predecessor entries a plan can hold.
pub const MAX_PREDS: usize = 32768;
/// Distinct symbols a plan can name.
pub const MAX_SYMBOLS: usize = 256;
/// Distinct threads a plan can name.
pub const MAX_PLAN_THREADS: usize = 4096;
/// Threads of the program the driver can watch (each thread the program creates
/// takes one for the whole run).
pub const MAX_SLOTS: usize = 4096;
/// Deepest logical thread id (`1.2.3` has depth 3).
pub const MAX_DEPTH: usize = 8;
/// `*` successors (orderings `A -> *:KIND(OBJ)#N`) a plan can hold.
pub const MAX_WILD: usize = 32;
/// Object families (see `ordo_schedule::Family::ALL`, same order).
pub const FAMILIES: usize = 10;
/// Instruction sites of watched-variable accesses and program points a plan can list.
pub const MAX_ACCESS_SITES: usize = 256;
/// Access sites one thread can have armed at once: x86 has four debug registers
/// per thread, and each armed site takes one (an execute breakpoint).
pub const MAX_ARMED_SITES: usize = 4;
/// Bytes of a symbol name, NUL included.
pub const SYMBOL_LEN: usize = 120;

/// `flags`: gate nothing, only observe (passive mode).
pub const FLAG_CHECK_ONLY: u32 = 1;
/// `flags`: the driver released every gate (the run continues freely).
pub const FLAG_RELEASED: u32 = 2;

/// `Shared::attached`: the agent attached in the target process.
pub const ATTACHED_STARTED: u32 = 1;
/// `Shared::attached`: the program's `main` was entered (its runtimes started).
pub const ATTACHED_IN_MAIN: u32 = 2;

/// `PlanEvent::object_kind`: no object.
pub const OBJ_NONE: u8 = 0;
/// `PlanEvent::object_kind`: `@K`, `object` = K.
pub const OBJ_NTH: u8 = 1;
/// `PlanEvent::object_kind`: a symbol, `object` = index into `symbols`.
pub const OBJ_SYMBOL: u8 = 2;

/// `Slot::state`: the slot is free.
pub const STATE_FREE: u32 = 0;
/// Running program code (or anything the agent does not know to block).
pub const STATE_RUNNING: u32 = 1;
/// Held at a gate: `detail` = plan event index.
pub const STATE_HELD: u32 = 2;
/// Inside a pthread call that can block forever: `detail` = kind code.
pub const STATE_BLOCKED: u32 = 3;
/// Inside a pthread call with a timeout: will come back by itself.
pub const STATE_TIMED: u32 = 4;
/// The thread finished.
pub const STATE_EXITED: u32 = 5;

/// The event and in-process ring layout shared with the eBPF probes, the recorder
/// and the trace, compiled into the agent as a module: the agent is built by one
/// plain rustc call with no dependencies, and this keeps a single definition of the
/// event kind codes and of the ring records.
#[path = "../../../probe-ebpf/common/src/lib.rs"]
#[allow(
    unused_attributes,
    unexpected_cfgs,
    dead_code,
    missing_docs,
    reason = "probe-common's crate root compiled as a module: its `#![no_std]` does not apply \
              here, its `user` feature is not this crate's, the agent uses part of it, and \
              its documentation is checked in its own crate"
)]
pub mod probe_common;

/// Event kind codes (`ordo_probe_common::kind`).
pub use probe_common::kind;

/// The object family index of a kind code (the order of `ordo_schedule::Family::ALL`).
pub const fn family_of(kind: u16) -> usize {
    probe_common::family::of(kind) as usize
}

/// Kinds whose order stamp is taken before the call, like the recorder's sequence
/// numbers: a release, wake or post must count as earlier than whatever it lets run.
pub const fn stamps_before(kind: u16) -> bool {
    matches!(
        kind,
        kind::MUTEX_UNLOCK
            | kind::RWLOCK_UNLOCK
            | kind::COND_SIGNAL
            | kind::COND_BROADCAST
            | kind::COND_WAIT_BEGIN
            | kind::SEM_POST
            | kind::BARRIER_ARRIVE
            | kind::FUTEX_WAKE
            | kind::THREAD_CREATE
            | kind::THREAD_EXIT
    )
}

/// `PlanEvent::kind` bit: the event is the point right after the call of that kind
/// returned (`T:after(KIND(OBJ)#N)`), held and marked by the wrapper after the call.
pub const AFTER_POINT: u16 = 0x8000;

/// `PlanEvent::plan_thread` of a `*` successor: it applies to every thread but
/// those of its predecessors.
pub const EVERY_OTHER_THREAD: u32 = u32::MAX;

/// One named event of the schedule.
#[repr(C)]
pub struct PlanEvent {
    /// Index into `threads`, or [`EVERY_OTHER_THREAD`].
    pub plan_thread: u32,
    /// Kind code, with [`AFTER_POINT`] set for an `after(…)` point.
    pub kind: u16,
    /// Family index of the kind.
    pub family: u8,
    /// `OBJ_*`.
    pub object_kind: u8,
    /// K for `OBJ_NTH`, symbol index for `OBJ_SYMBOL`.
    pub object: u32,
    /// The occurrence (1-based).
    pub occurrence: u32,
    /// Nonzero when the event has predecessors: the thread waits before it.
    pub gated: u32,
    /// Nonzero when the event is some event's predecessor: when it happens, the
    /// held threads are woken (others' happening wakes nobody).
    pub awaited: u32,
    /// First entry in `preds`.
    pub pred_start: u32,
    /// Number of entries in `preds`.
    pub pred_count: u32,
    /// Matching events the owning thread has had so far (agent); for a `*`
    /// successor, the threads that had it.
    pub count: AtomicU32,
    /// 1 once the event happened (agent).
    pub done: AtomicU32,
    /// Kernel tid of the thread that did it (agent).
    pub done_tid: AtomicU32,
    /// Position in the run's order (agent; from `Shared::stamp`, 1-based).
    pub stamp: AtomicU64,
}

/// A global or static variable named by the schedule.
#[repr(C)]
pub struct PlanSymbol {
    /// Name, NUL-terminated (for `dlsym` and messages).
    pub name: [u8; SYMBOL_LEN],
    /// ELF virtual address in the main executable, 0 when the driver did not find it
    /// there (the agent then asks `dlsym`).
    pub vaddr: u64,
    /// Byte offset into the symbol (`name+offset`).
    pub offset: u64,
    /// Runtime address once resolved (agent), 0 before.
    pub addr: AtomicU64,
}

/// One instruction that accesses a watched variable the schedule names (or a
/// program point, `at(SPEC)`): the agent arms an execute breakpoint on it in the
/// threads whose named events need it, and counts (and gates) the access before the
/// instruction runs.
#[repr(C)]
pub struct PlanAccessSite {
    /// The accessing instruction and its memory operand, with LINK-TIME addresses
    /// of the main executable (`ip`, `watch_addr`, and `disp` of an operand without
    /// registers): the agent adds the load bias.
    pub site: probe_common::WatchSite,
    /// Index into `symbols`: the variable (or point) the schedule names.
    pub symbol: u32,
    /// Kind code of the access (`read`, `write`, `rmw`, or `at`).
    pub kind: u16,
    /// Nonzero when the operand uses registers: the agent checks the effective
    /// address against the variable before counting.
    pub via_register: u16,
}

/// A thread the schedule names, and what the agent tracks for it.
#[repr(C)]
pub struct PlanThread {
    /// Depth of the logical id.
    pub depth: u32,
    /// The logical id's path (`1.2` = [1, 2]); the main thread has depth 0.
    pub path: [u32; MAX_DEPTH],
    /// First plan event of this thread (plan events are grouped by thread).
    pub first_event: u32,
    /// Number of plan events of this thread.
    pub event_count: u32,
    /// Kernel tid of the thread that has this id (agent).
    pub tid: AtomicU32,
    /// Access sites this thread arms when it starts (indices into `sites`).
    pub arm: [u32; MAX_ARMED_SITES],
    /// Used entries of `arm`.
    pub n_arm: u32,
}

/// What one program thread is doing, for the driver's stall detection. Each slot
/// has its own cache lines: threads bump their `progress` on every call.
#[repr(C, align(128))]
pub struct Slot {
    /// Kernel tid, 0 while the slot is free.
    pub tid: AtomicU32,
    /// `STATE_*`.
    pub state: AtomicU32,
    /// Plan event (held) or kind code (blocked).
    pub detail: AtomicU32,
    /// Depth of the logical id, or `u32::MAX` when deeper than `MAX_DEPTH`.
    pub depth: AtomicU32,
    /// Logical id path.
    pub path: [AtomicU32; MAX_DEPTH],
    /// Calls the agent saw from this thread: changes whenever it makes progress.
    pub progress: AtomicU64,
    /// Per `*` successor (in plan order): the order stamp of this thread's instance
    /// of it, 0 until it happened (agent).
    pub wild_stamp: [AtomicU64; MAX_WILD],
}

/// The whole shared page.
#[repr(C)]
pub struct Shared {
    /// `MAGIC`.
    pub magic: u64,
    /// `VERSION`.
    pub version: u32,
    /// `FLAG_*`.
    pub flags: AtomicU32,
    /// Pid of the process whose agent took the plan (agent; others stay inert).
    pub target_pid: AtomicU32,
    /// Futex word: bumped (and woken) whenever a named event happens or the driver
    /// releases the gates. Held threads sleep on it.
    pub epoch: AtomicU32,
    /// Order stamps handed out so far.
    pub stamp: AtomicU64,
    /// Used entries of `events`.
    pub n_events: u32,
    /// Used entries of `preds`.
    pub n_preds: u32,
    /// Used entries of `symbols`.
    pub n_symbols: u32,
    /// Used entries of `threads`.
    pub n_threads: u32,
    /// First `*` successor in `events` (they come after every thread's events).
    pub wild_first: u32,
    /// Number of `*` successors.
    pub n_wild: u32,
    /// Largest `@K` the plan uses, per family: each thread remembers that many of
    /// its objects.
    pub kmax: [u32; FAMILIES],
    /// Slots handed out (agent).
    pub n_slots: AtomicU32,
    /// How far the program got (agent): 0 the agent never started,
    /// `ATTACHED_STARTED` once it attached in the target, `ATTACHED_IN_MAIN` once
    /// the program's `main` was entered.
    pub attached: AtomicU32,
    /// Load bias of the main executable (agent).
    pub main_base: AtomicU64,
    /// The plan's events.
    pub events: [PlanEvent; MAX_EVENTS],
    /// Predecessor lists: plan event indices.
    pub preds: [u32; MAX_PREDS],
    /// Symbols.
    pub symbols: [PlanSymbol; MAX_SYMBOLS],
    /// Named threads.
    pub threads: [PlanThread; MAX_PLAN_THREADS],
    /// Program threads.
    pub slots: [Slot; MAX_SLOTS],
    /// Used entries of `sites`.
    pub n_sites: u32,
    /// Breakpoint traps the agent handled (counted and gated accesses).
    pub traps: AtomicU64,
    /// Access sites of the variables and program points the schedule names.
    pub sites: [PlanAccessSite; MAX_ACCESS_SITES],
    /// Threads `pthread_create` is making that have not yet begun (agent): counted
    /// before the real call, uncounted when the child enters the agent's start
    /// routine or the call fails. While one is pending the run is not stuck, even
    /// when every thread the driver can see is blocked: a new thread starts with
    /// every signal blocked and no slot, and may not have been scheduled yet.
    pub pending_starts: AtomicU32,
}

/// Environment variable carrying the shared memory's file descriptor to the agent.
pub const ENV_SHM_FD: &str = "ORDO_REPLAY_SHM_FD";
/// Environment variable asking the agent to send the program's stdout to stderr
/// (`ordo replay --json` keeps stdout for the JSON outcome).
pub const ENV_STDOUT_TO_STDERR: &str = "ORDO_REPLAY_STDOUT_TO_STDERR";

/// Environment variable asking the agent to schedule the program's synchronization
/// events by a strategy (`ordo hunt --strategy pct|random`), read and removed at
/// start-up: `pct:SEED:DEPTH:K` (PCT with DEPTH−1 priority change points spread
/// over about K events) or `random:SEED` (a random walk). See `strategy.rs`.
pub const ENV_STRATEGY: &str = "ORDO_REPLAY_STRATEGY";
