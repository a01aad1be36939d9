//! Rust's `std::sync::Mutex` in a release binary: where its inlined fast paths
//! are, as software-breakpoint sites the in-process agent records them at.
//!
//! std's futex mutex never calls pthread: `lock()` is inlined into the caller as
//! `lock cmpxchg` of 0 → 1 on the lock word, then a branch to an out-of-line
//! `lock_contended` when the word was not 0; the guard's drop is an inlined `xchg`
//! of 0 into the word, then a call to `wake` when it was 2 (waiters). Both slow
//! paths have symbols and are called through GOT slots (`call *slot(%rip)`, each
//! slot an `R_X86_64_RELATIVE` relocation whose addend is the function), or
//! directly. The planner finds them by their symbols (legacy or v0 mangling),
//! their slots by the relocations, then decodes every function (iced-x86) for:
//!
//! - `lock cmpxchg r32, [m32]` followed by `jne T`, where the code at `T` calls
//!   `lock_contended` within a few instructions (or one `jmp` away), or by `je S`
//!   where the code falling through does: the branch is a
//!   [`SOFT_RUST_LOCK_FAST`] site (the agent emulates it: on success the lock is
//!   held and recorded there; on failure its address waits for the slow path);
//! - the `lock cmpxchg` itself: [`SOFT_RUST_LOCK_GATE`], where a replay gates the
//!   acquisition before it is tried (planted only when replaying);
//! - every `ret` of `lock_contended`: [`SOFT_RUST_LOCK_SLOW`] (the lock is held);
//! - `xchg r32, [m32]`, then `cmp r32, 2`, then `je T` where `T` calls `wake`:
//!   the `xchg` is a [`SOFT_RUST_UNLOCK`] site (recorded before it releases).
//!
//! The fast path's `lock cmpxchg` of `try_lock` (no slow path) and std's own
//! loops inside `lock_contended` match neither pattern.

use std::collections::HashSet;
use std::path::Path;

use anyhow::{anyhow, Context, Result};
use iced_x86::{
    Code, Decoder, DecoderOptions, FlowControl, Instruction, InstructionInfoFactory, Mnemonic,
    OpKind, Register,
};
use object::{Object, ObjectSymbol, RelocationTarget, SymbolKind};
use ordo_probe_common::inproc::{
    SoftSite, SOFT_PL_COND_LEAVE, SOFT_PL_COND_WAIT, SOFT_PL_LOCK_LEAVE, SOFT_PL_NOTIFY_ALL_CHECK,
    SOFT_PL_NOTIFY_ALL_SLOW, SOFT_PL_NOTIFY_ONE_CHECK, SOFT_PL_NOTIFY_ONE_SLOW, SOFT_PL_READ_SLOW,
    SOFT_PL_SLOW_ENTER, SOFT_PL_SLOW_LEAVE, SOFT_PL_TRY_LOCK_CHECK, SOFT_PL_TRY_LOCK_FAST,
    SOFT_PL_TRY_READ_LEAVE, SOFT_PL_TRY_READ_SLOW, SOFT_PL_TRY_WRITE_ONCE, SOFT_PL_WRITE_SLOW,
    SOFT_RUST_BARRIER_LEAVE, SOFT_RUST_BARRIER_WAIT, SOFT_RUST_CHAN_RECEIVED, SOFT_RUST_CHAN_RECV,
    SOFT_RUST_CHAN_SEND, SOFT_RUST_COND_BROADCAST, SOFT_RUST_COND_SIGNAL, SOFT_RUST_COND_WAIT,
    SOFT_RUST_COND_WAIT_TIMED, SOFT_RUST_LOCK_FAST, SOFT_RUST_LOCK_GATE, SOFT_RUST_LOCK_SLOW,
    SOFT_RUST_ONCE_CHECK, SOFT_RUST_ONCE_DONE, SOFT_RUST_ONCE_ENTER, SOFT_RUST_ONCE_LEAVE,
    SOFT_RUST_ONCE_LOAD, SOFT_RUST_PARK_LEAVE, SOFT_RUST_PARK_TOKEN, SOFT_RUST_READ_CONTENDED,
    SOFT_RUST_READ_FAST, SOFT_RUST_READ_GATE, SOFT_RUST_RW_UNLOCK, SOFT_RUST_TRY_FAST,
    SOFT_RUST_TRY_GATE, SOFT_RUST_TRY_READ_CHECK, SOFT_RUST_TRY_READ_FAST,
    SOFT_RUST_TRY_WRITE_CHECK, SOFT_RUST_TRY_WRITE_FAST, SOFT_RUST_UNLOCK, SOFT_RUST_UNPARK,
    SOFT_RUST_WRITE_CONTENDED, SOFT_RUST_WRITE_FAST, SOFT_RUST_WRITE_GATE,
};
use ordo_probe_common::{reg, via};

use crate::discover::{code_at, read_only_ranges, site_of};

/// Parts of the names of std functions whose locks are std's own business (its
/// I/O and reentrant locks): no lock site is planned in them.
const STD_OWN_LOCKING: &[&str] = &[
    "std::io::",
    "std::sync::reentrant_lock::",
    "std::rt::",
    // Recorded as the barrier it is (`barrier_functions`).
    "std::sync::barrier::",
];

/// Instructions from a branch target to the call of a slow path, at most (the
/// block may first spill registers the caller keeps live across the lock).
const BLOCK_REACH: usize = 12;

/// The Rust mutex sites of one executable.
#[derive(Clone, Debug, Default)]
pub struct RustLockPlan {
    /// Sites, in address order.
    pub sites: Vec<SoftSite>,
    /// Inlined acquisitions found (fast-path branches).
    pub locks: usize,
    /// Inlined releases found.
    pub unlocks: usize,
    /// Condvar functions found (waits and notifies).
    pub condvars: usize,
    /// `Barrier::wait` functions found.
    pub barriers: usize,
    /// Inlined `RwLock` acquisitions (read or write) found.
    pub rw_locks: usize,
    /// Inlined `RwLock` releases found.
    pub rw_unlocks: usize,
    /// Inlined `Once` completion checks found (`Once::call_once`, `OnceLock`,
    /// `LazyLock`).
    pub once_checks: usize,
    /// Whether std's `Once::call` was found (its completion and returns).
    pub once_call: bool,
    /// Inlined `Mutex::try_lock`s found.
    pub try_locks: usize,
    /// Inlined `RwLock::try_read`s and `try_write`s found.
    pub rw_tries: usize,
    /// Inlined `parking_lot::Mutex` and `RwLock` acquisitions found.
    pub parking_lot_locks: usize,
    /// Inlined `parking_lot::Mutex` and `RwLock` releases found.
    pub parking_lot_unlocks: usize,
    /// Inlined `parking_lot` `Mutex::try_lock`s and `RwLock::try_write`s found.
    pub parking_lot_tries: usize,
    /// Inlined `parking_lot::Condvar` notifies found.
    pub parking_lot_notifies: usize,
    /// `parking_lot::Condvar` waits found (0 or 1: `wait_until_internal`).
    pub parking_lot_condvars: usize,
    /// Inlined `Thread::unpark`s found.
    pub unparks: usize,
    /// std's `thread::park` functions found.
    pub parks: usize,
    /// Instances of the unbounded channel's `send` found (`mpsc::channel`).
    pub sends: usize,
    /// Instances of the unbounded channel's `recv` found.
    pub receives: usize,
    /// A Rust binary without its symbol table: none of the above can be found.
    pub stripped_rust: bool,
}

/// The slow paths of std's futex mutex in one binary.
struct SlowPaths {
    /// `lock_contended`: address and size.
    contended: (u64, u64),
    /// `wake`'s address.
    wake: u64,
    /// GOT slots holding `lock_contended`'s address.
    contended_slots: HashSet<u64>,
    /// GOT slots holding `wake`'s address.
    wake_slots: HashSet<u64>,
}

/// Whether a demangled symbol is std's futex mutex's `name` (legacy mangling
/// demangles as `std::sys::sync::mutex::futex::Mutex::lock_contended`, v0 as
/// `<std::sys::sync::mutex::futex::Mutex>::lock_contended`).
fn is_mutex_fn(demangled: &str, name: &str) -> bool {
    demangled.contains("sync::mutex::futex::Mutex")
        && demangled.ends_with(&format!("::{name}"))
        && !demangled.contains("RwLock")
}

/// Plans the Rust `Mutex`, `RwLock` and `Condvar` sites of the executable at
/// `path`; an empty plan for a binary without std's futex locks (C, C++, a
/// stripped Rust binary). Kept on disk between runs ([`crate::plan_cache`]).
pub fn plan_rust_locks(path: &Path) -> Result<RustLockPlan> {
    crate::plan_cache::cached(
        "rust-locks",
        path,
        || plan_rust_locks_afresh(path),
        RustLockPlan::to_entry,
        RustLockPlan::from_entry,
    )
}

impl RustLockPlan {
    /// Adds what another pass over the same binary found: its sites after these,
    /// its counts to these.
    fn absorb(&mut self, other: RustLockPlan) {
        // Destructured whole: a count added to the plan must be added here too.
        let RustLockPlan {
            sites,
            locks,
            unlocks,
            condvars,
            barriers,
            rw_locks,
            rw_unlocks,
            once_checks,
            once_call,
            try_locks,
            rw_tries,
            parking_lot_locks,
            parking_lot_unlocks,
            parking_lot_tries,
            parking_lot_notifies,
            parking_lot_condvars,
            unparks,
            parks,
            sends,
            receives,
            stripped_rust,
        } = other;
        self.sites.extend(sites);
        self.locks += locks;
        self.unlocks += unlocks;
        self.condvars += condvars;
        self.barriers += barriers;
        self.rw_locks += rw_locks;
        self.rw_unlocks += rw_unlocks;
        self.once_checks += once_checks;
        self.once_call |= once_call;
        self.try_locks += try_locks;
        self.rw_tries += rw_tries;
        self.parking_lot_locks += parking_lot_locks;
        self.parking_lot_unlocks += parking_lot_unlocks;
        self.parking_lot_tries += parking_lot_tries;
        self.parking_lot_notifies += parking_lot_notifies;
        self.parking_lot_condvars += parking_lot_condvars;
        self.unparks += unparks;
        self.parks += parks;
        self.sends += sends;
        self.receives += receives;
        self.stripped_rust |= stripped_rust;
    }

    /// Number of counts and flags in a kept plan.
    const COUNTS: usize = 22;

    /// The plan as the cache keeps it.
    fn to_entry(&self) -> crate::plan_cache::Entry {
        let counts: [usize; Self::COUNTS] = [
            self.locks,
            self.unlocks,
            self.condvars,
            self.barriers,
            self.rw_locks,
            self.rw_unlocks,
            self.once_checks,
            self.once_call as usize,
            self.try_locks,
            self.rw_tries,
            self.parking_lot_locks,
            self.parking_lot_unlocks,
            self.parking_lot_tries,
            self.parking_lot_notifies,
            self.parking_lot_condvars,
            self.unparks,
            self.parks,
            self.sends,
            self.receives,
            self.stripped_rust as usize,
            // Room for counts to come without a new entry format.
            0,
            0,
        ];
        crate::plan_cache::Entry {
            numbers: counts.iter().map(|&n| n as u64).collect(),
            sites: self.sites.clone(),
            strings: Vec::new(),
        }
    }

    /// The plan a cache entry keeps.
    fn from_entry(entry: crate::plan_cache::Entry) -> Option<RustLockPlan> {
        let counts: [u64; Self::COUNTS] = entry.numbers.try_into().ok()?;
        let n = counts.map(|c| usize::try_from(c).unwrap_or(usize::MAX));
        Some(RustLockPlan {
            sites: entry.sites,
            locks: n[0],
            unlocks: n[1],
            condvars: n[2],
            barriers: n[3],
            rw_locks: n[4],
            rw_unlocks: n[5],
            once_checks: n[6],
            once_call: n[7] != 0,
            try_locks: n[8],
            rw_tries: n[9],
            parking_lot_locks: n[10],
            parking_lot_unlocks: n[11],
            parking_lot_tries: n[12],
            parking_lot_notifies: n[13],
            parking_lot_condvars: n[14],
            unparks: n[15],
            parks: n[16],
            sends: n[17],
            receives: n[18],
            stripped_rust: n[19] != 0,
        })
    }
}

/// The plan one pass over a binary's functions makes (`pass` adds to it).
fn one_pass(pass: impl FnOnce(&mut InstructionInfoFactory, &mut RustLockPlan)) -> RustLockPlan {
    let mut plan = RustLockPlan::default();
    pass(&mut InstructionInfoFactory::new(), &mut plan);
    plan
}

/// [`plan_rust_locks`], decoding the binary.
fn plan_rust_locks_afresh(path: &Path) -> Result<RustLockPlan> {
    let data = crate::file_bytes::read(path).with_context(|| format!("read {}", path.display()))?;
    let file = object::File::parse(&data[..])
        .map_err(|e| anyhow!("{}: not an ELF file: {e}", path.display()))?;
    let rw = RwPaths::of(&file);
    let once = OncePaths::of(&file);
    let parking = Parking::of(&file);
    let channels = channel_functions(&file);
    let parking_lot = ParkingLot::of(&file);
    let slow = match slow_paths(&file) {
        Some(slow) => slow,
        None if rw.is_some()
            || once.is_some()
            || parking.is_some()
            || !channels.is_empty()
            || parking_lot.is_some() =>
        {
            SlowPaths::none()
        }
        None => {
            return Ok(RustLockPlan {
                stripped_rust: is_stripped_rust(&file),
                ..RustLockPlan::default()
            })
        }
    };
    let read_only = read_only_ranges(&file);
    let std_statics = std_statics(&file);
    // std's own static locks (stdout's, the stack-overflow handler's) are taken and
    // released at sites some of which compile to other shapes: half-seen, they
    // would look held forever. They are left to std.
    let is_std_static = |site: &SoftSite| {
        site.base == reg::NONE
            && site.index == reg::NONE
            && std_statics
                .iter()
                .any(|&(start, end)| (site.disp as u64) >= start && (site.disp as u64) < end)
    };
    // std's own locked I/O (stdout's reentrant lock, taken in `print!`) locks in
    // shapes of its own: half-seen, it would look held forever. Left to std, as
    // its static locks are.
    let mut functions: Vec<(u64, u64)> = file
        .symbols()
        .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0 && s.address() != 0)
        .filter(|s| {
            !s.name().is_ok_and(|n| {
                let demangled = ordo_trace::symbolize::demangle(n);
                STD_OWN_LOCKING.iter().any(|p| demangled.contains(p))
            })
        })
        .map(|s| (s.address(), s.size()))
        .collect();
    functions.sort_unstable();
    functions.dedup_by_key(|f| f.0);
    // The passes each decode every function (~10 ms apiece for a Rust binary's
    // std): they run on two threads, and their sites are put together in the
    // order one thread would have found them (the sort below keeps the first
    // site of an address).
    let mutexes = || {
        let mut info = InstructionInfoFactory::new();
        let mut plan = RustLockPlan::default();
        for &(start, size) in &functions {
            let Some(code) = code_at(&file, start, size) else {
                continue;
            };
            // A loop that locks hoists the slot's load out of it (`mov r13,
            // [rip+slot]` … `call r13`): the registers this function loads each slow
            // path into.
            let held = Held {
                contended: registers_loaded_from(code, start, &slow.contended_slots),
                wake: registers_loaded_from(code, start, &slow.wake_slots),
            };
            let targets = branch_targets(code, start);
            let mut decoder = Decoder::with_ip(64, code, start, DecoderOptions::NONE);
            let mut window: Vec<(Instruction, usize)> = Vec::with_capacity(3);
            let mut instr = Instruction::default();
            while decoder.can_decode() {
                let offset = (decoder.ip() - start) as usize;
                decoder.decode_out(&mut instr);
                if instr.is_invalid() {
                    break;
                }
                window.push((instr, offset));
                if window.len() > 4 {
                    window.remove(0);
                }
                let n = window.len();
                // `lock cmpxchg [m32], r32` then `jne T` (T the slow path), or `je S`
                // falling through to it (S the critical section).
                if n >= 2 && matches!(instr.mnemonic(), Mnemonic::Jne | Mnemonic::Je) {
                    let (cas, cas_at) = &window[n - 2];
                    let target = if instr.mnemonic() == Mnemonic::Jne {
                        instr.near_branch_target()
                    } else {
                        instr.next_ip()
                    };
                    if cas.mnemonic() == Mnemonic::Cmpxchg
                        && cas.has_lock_prefix()
                        && cas.op0_kind() == OpKind::Memory
                        && cas.memory_size().size() == 4
                        && calls_within(
                            &file,
                            target,
                            &slow.contended_slots,
                            &held.contended,
                            slow.contended.0,
                        )
                    {
                        let offsets =
                            constant_offsets(&code[*cas_at..*cas_at + cas.len()], cas.ip());
                        if let Some(operand) = site_of(
                            cas,
                            &code[*cas_at..*cas_at + cas.len()],
                            &offsets,
                            &read_only,
                            &mut info,
                        ) {
                            if is_std_static(&operand) {
                                continue;
                            }
                            let branch = &code[offset..offset + instr.len()];
                            let mut sites = acquisition_sites(
                                operand,
                                &instr,
                                branch,
                                SOFT_RUST_LOCK_GATE,
                                SOFT_RUST_LOCK_FAST,
                            );
                            sites[1].patch = acquisition_patch(cas, &instr, &targets);
                            plan.sites.extend(sites);
                            plan.locks += 1;
                        }
                    }
                }
                // `xchg [m32], r32`, `cmp r32, 2`, `je T` (T wakes a waiter), or `jne
                // S` falling through to the wake; a register move may sit between the
                // `xchg` and the `cmp` (a result kept for after the unlock).
                if n >= 3 && matches!(instr.mnemonic(), Mnemonic::Je | Mnemonic::Jne) {
                    let (cmp, _) = &window[n - 2];
                    let wake_at = if instr.mnemonic() == Mnemonic::Je {
                        instr.near_branch_target()
                    } else {
                        instr.next_ip()
                    };
                    let swap = window[..n - 2].iter().rev().find(|(w, _)| {
                        w.mnemonic() == Mnemonic::Xchg
                            && w.memory_size().size() == 4
                            && (0..2).any(|i| w.op_kind(i) == OpKind::Memory)
                    });
                    let between_is_plain = swap.is_some_and(|(sw, _)| {
                        window
                            .iter()
                            .filter(|(w, _)| w.ip() > sw.ip() && w.ip() < cmp.ip())
                            .all(|(w, _)| {
                                w.mnemonic() == Mnemonic::Mov
                                    && w.op0_kind() == OpKind::Register
                                    && w.op1_kind() != OpKind::Memory
                            })
                    });
                    if let (Some((swap, swap_at)), true) = (swap, between_is_plain) {
                        if cmp.mnemonic() == Mnemonic::Cmp
                            && cmp.op0_kind() == OpKind::Register
                            && (0..2).any(|i| {
                                swap.op_kind(i) == OpKind::Register
                                    && swap.op_register(i) == cmp.op0_register()
                            })
                            && cmp.op1_kind() == OpKind::Immediate8to32
                            && cmp.immediate(1) == 2
                            && wakes_within(&file, wake_at, &slow.wake_slots, &held.wake, slow.wake)
                        {
                            let bytes = &code[*swap_at..*swap_at + swap.len()];
                            let offsets = constant_offsets(bytes, swap.ip());
                            if let Some(mut site) =
                                site_of(swap, bytes, &offsets, &read_only, &mut info)
                                    .filter(|site| !is_std_static(site))
                            {
                                site.access = SOFT_RUST_UNLOCK;
                                site.via = via::PLAIN;
                                site.patch = release_patch(code, start, swap, &targets);
                                plan.sites.push(site);
                                plan.unlocks += 1;
                            }
                        }
                    }
                }
            }
        }
        if slow.contended.0 != 0 {
            plan_try_locks(
                &file,
                &functions,
                &slow,
                &read_only,
                &is_std_static,
                &mut info,
                &mut plan,
            );
            plan.sites.extend(returns_of(
                &file,
                slow.contended.0,
                slow.contended.1,
                SOFT_RUST_LOCK_SLOW,
            ));
        }
        plan
    };
    let rw_locks = || {
        one_pass(|info, plan| {
            if let Some(rw) = &rw {
                plan_rwlocks(
                    &file,
                    &functions,
                    rw,
                    &read_only,
                    &is_std_static,
                    info,
                    plan,
                );
            }
        })
    };
    let onces = || {
        one_pass(|info, plan| {
            if let Some(once) = &once {
                plan_onces(
                    &file,
                    &functions,
                    once,
                    &read_only,
                    &is_std_static,
                    info,
                    plan,
                );
            }
        })
    };
    let parkings = || {
        one_pass(|info, plan| {
            if let Some(parking) = &parking {
                plan_parking(&file, &functions, parking, &read_only, info, plan);
            }
        })
    };
    let parking_lots = || {
        one_pass(|info, plan| {
            if let Some(parking_lot) = &parking_lot {
                plan_parking_lot(&file, &functions, parking_lot, &read_only, info, plan);
            }
        })
    };
    let (mut plan, [rw_locks, onces, parkings, parking_lots]) = std::thread::scope(|scope| {
        let others = scope.spawn(|| [rw_locks(), onces(), parkings(), parking_lots()]);
        let plan = mutexes();
        let others = others
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e));
        (plan, others)
    });
    plan.absorb(rw_locks);
    plan.absorb(onces);
    plan.absorb(parkings);
    let mut barriers = RustLockPlan::default();
    for (address, size) in barrier_waits(&file) {
        let Some(entry) = entry_site(&file, address, SOFT_RUST_BARRIER_WAIT) else {
            continue;
        };
        barriers.sites.push(entry);
        barriers
            .sites
            .extend(returns_of(&file, address, size, SOFT_RUST_BARRIER_LEAVE));
        barriers.barriers += 1;
    }
    plan.absorb(barriers);
    plan.absorb(parking_lots);
    for &(address, size, send) in &channels {
        let (entry, leave) = if send {
            (SOFT_RUST_CHAN_SEND, None)
        } else {
            (SOFT_RUST_CHAN_RECV, Some(SOFT_RUST_CHAN_RECEIVED))
        };
        let Some(mut site) = entry_site(&file, address, entry) else {
            continue;
        };
        site.base = if returns_its_first_argument(&file, address, size) {
            reg::RSI
        } else {
            reg::RDI
        };
        plan.sites.push(site);
        if let Some(leave) = leave {
            plan.sites.extend(returns_of(&file, address, size, leave));
            plan.receives += 1;
        } else {
            plan.sends += 1;
        }
    }
    for (address, access) in condvar_functions(&file) {
        if let Some(site) = entry_site(&file, address, access) {
            plan.sites.push(site);
            plan.condvars += 1;
        }
    }
    plan.sites.sort_by_key(|s| s.ip);
    plan.sites.dedup_by_key(|s| s.ip);
    Ok(plan)
}

/// `parking_lot`'s out-of-line paths in one binary (an absent one has address
/// 0): `RawMutex::lock_slow` and `unlock_slow`, `RawRwLock`'s
/// `lock_shared_slow`, `lock_exclusive_slow`, `unlock_shared_slow` and
/// `unlock_exclusive_slow`, which the inlined operations branch to, and
/// `Condvar::wait_until_internal`, `notify_one_slow` and `notify_all_slow`.
struct ParkingLot {
    lock_slow: OutOfLine,
    unlock_slow: OutOfLine,
    lock_shared_slow: OutOfLine,
    lock_exclusive_slow: OutOfLine,
    unlock_shared_slow: OutOfLine,
    unlock_exclusive_slow: OutOfLine,
    wait: OutOfLine,
    notify_one_slow: OutOfLine,
    notify_all_slow: OutOfLine,
    try_read_slow: OutOfLine,
}

/// The functions of [`ParkingLot`], in its fields' order: the type each is a
/// method of and its name.
const PARKING_LOT_FUNCTIONS: [(&str, &str); 10] = [
    ("parking_lot::raw_mutex::RawMutex", "lock_slow"),
    ("parking_lot::raw_mutex::RawMutex", "unlock_slow"),
    ("parking_lot::raw_rwlock::RawRwLock", "lock_shared_slow"),
    ("parking_lot::raw_rwlock::RawRwLock", "lock_exclusive_slow"),
    ("parking_lot::raw_rwlock::RawRwLock", "unlock_shared_slow"),
    (
        "parking_lot::raw_rwlock::RawRwLock",
        "unlock_exclusive_slow",
    ),
    ("parking_lot::condvar::Condvar", "wait_until_internal"),
    ("parking_lot::condvar::Condvar", "notify_one_slow"),
    ("parking_lot::condvar::Condvar", "notify_all_slow"),
    ("parking_lot::raw_rwlock::RawRwLock", "try_lock_shared_slow"),
];

impl ParkingLot {
    fn of(file: &object::File<'_>) -> Option<ParkingLot> {
        let mut found: [OutOfLine; 10] = std::array::from_fn(|_| OutOfLine::absent());
        for (s, demangled) in text_symbols_naming(file, "parking_lot") {
            let bare = demangled.split("::h").next().unwrap_or(&demangled);
            // v0 mangling demangles a method as `<Type>::name`.
            let bare = bare.replace(['<', '>'], "");
            let Some(i) = PARKING_LOT_FUNCTIONS
                .iter()
                .position(|(ty, name)| bare == format!("{ty}::{name}"))
            else {
                continue;
            };
            found[i] = OutOfLine {
                address: s.address(),
                size: s.size(),
                slots: HashSet::new(),
            };
        }
        if found.iter().all(|f| f.address == 0) {
            return None;
        }
        OutOfLine::find_slots(file, &mut found.iter_mut().collect::<Vec<_>>());
        let [lock_slow, unlock_slow, lock_shared_slow, lock_exclusive_slow, unlock_shared_slow, unlock_exclusive_slow, wait, notify_one_slow, notify_all_slow, try_read_slow] =
            found;
        Some(ParkingLot {
            lock_slow,
            unlock_slow,
            lock_shared_slow,
            lock_exclusive_slow,
            unlock_shared_slow,
            unlock_exclusive_slow,
            wait,
            notify_one_slow,
            notify_all_slow,
            try_read_slow,
        })
    }
}

/// The sites of `parking_lot`'s `Mutex`, `RwLock` and `Condvar`:
/// - each inlined `lock cmpxchg r8, [m8]` (a `RawMutex`, a byte) or `lock
///   cmpxchg r64, [m64]` (a `RawRwLock`, a word) followed by `jne T` (or `je`
///   falling through) where `T` calls a lock's slow path — an acquisition, as
///   std's ([`SOFT_RUST_LOCK_GATE`], [`SOFT_RUST_LOCK_FAST`] and their read and
///   write kinds) — or calls or tail-jumps to an unlock's slow path — a release,
///   recorded at the `cmpxchg` before it runs whichever way it goes
///   ([`SOFT_RUST_UNLOCK`], [`SOFT_RUST_RW_UNLOCK`]);
/// - each `lock xadd r64, [m64]` branching to `unlock_shared_slow` (a read
///   release, [`SOFT_RUST_RW_UNLOCK`]);
/// - each inlined `notify_one`/`notify_all`: the branch after its `test` of the
///   condvar's state ([`SOFT_PL_NOTIFY_ONE_CHECK`]: no waiters is recorded
///   there, a replay gates there);
/// - the slow paths' entries and returns: the lock paths' entries
///   ([`SOFT_PL_SLOW_ENTER`], or [`SOFT_PL_READ_SLOW`]/[`SOFT_PL_WRITE_SLOW`],
///   which a read may reach without trying its `cmpxchg`) and returns
///   ([`SOFT_RUST_LOCK_SLOW`]); the unlock and notify paths' entries
///   ([`SOFT_PL_SLOW_ENTER`], [`SOFT_PL_NOTIFY_ONE_SLOW`]...) and returns
///   ([`SOFT_PL_SLOW_LEAVE`]); the condvar wait's entry
///   ([`SOFT_PL_COND_WAIT`]) and returns ([`SOFT_PL_COND_LEAVE`]).
///
/// Between entry and return the thread's futex calls are the operation's own.
fn plan_parking_lot(
    file: &object::File<'_>,
    functions: &[(u64, u64)],
    pl: &ParkingLot,
    read_only: &[(u64, u64)],
    info: &mut InstructionInfoFactory,
    plan: &mut RustLockPlan,
) {
    for (f, enter, leave) in [
        (&pl.lock_slow, SOFT_PL_SLOW_ENTER, SOFT_PL_LOCK_LEAVE),
        (&pl.unlock_slow, SOFT_PL_SLOW_ENTER, SOFT_PL_SLOW_LEAVE),
        (&pl.lock_shared_slow, SOFT_PL_READ_SLOW, SOFT_PL_LOCK_LEAVE),
        (
            &pl.lock_exclusive_slow,
            SOFT_PL_WRITE_SLOW,
            SOFT_PL_LOCK_LEAVE,
        ),
        (
            &pl.unlock_shared_slow,
            SOFT_PL_SLOW_ENTER,
            SOFT_PL_SLOW_LEAVE,
        ),
        (
            &pl.unlock_exclusive_slow,
            SOFT_PL_SLOW_ENTER,
            SOFT_PL_SLOW_LEAVE,
        ),
        (&pl.wait, SOFT_PL_COND_WAIT, SOFT_PL_COND_LEAVE),
        (
            &pl.notify_one_slow,
            SOFT_PL_NOTIFY_ONE_SLOW,
            SOFT_PL_SLOW_LEAVE,
        ),
        (
            &pl.notify_all_slow,
            SOFT_PL_NOTIFY_ALL_SLOW,
            SOFT_PL_SLOW_LEAVE,
        ),
        (
            &pl.try_read_slow,
            SOFT_PL_TRY_READ_SLOW,
            SOFT_PL_TRY_READ_LEAVE,
        ),
    ] {
        if f.address == 0 {
            continue;
        }
        // A path whose entry cannot be trapped would leave its returns unpaired.
        let Some(entry) = entry_site(file, f.address, enter) else {
            continue;
        };
        plan.sites.push(entry);
        plan.sites
            .extend(returns_of(file, f.address, f.size, leave));
        if f.address == pl.wait.address {
            plan.parking_lot_condvars += 1;
        }
    }
    for &(start, size) in functions {
        let Some(code) = code_at(file, start, size) else {
            continue;
        };
        let loaded = |f: &OutOfLine| registers_loaded_from(code, start, &f.slots);
        let lock_regs = loaded(&pl.lock_slow);
        let unlock_regs = loaded(&pl.unlock_slow);
        let read_regs = loaded(&pl.lock_shared_slow);
        let write_regs = loaded(&pl.lock_exclusive_slow);
        let read_unlock_regs = loaded(&pl.unlock_shared_slow);
        let write_unlock_regs = loaded(&pl.unlock_exclusive_slow);
        let one_regs = loaded(&pl.notify_one_slow);
        let all_regs = loaded(&pl.notify_all_slow);
        let try_read_regs = loaded(&pl.try_read_slow);
        let instructions = decoded(code, start);
        // The `RwLock`s this function locks or unlocks, and its candidate
        // `try_write`s: one is taken only on a lock the function also uses so
        // (its guard's drop is inlined with it), where a bare `cmpxchg` of 0
        // could be any atomic's.
        let mut rw_operands: HashSet<(u8, u8, i64)> = HashSet::new();
        let mut try_writes: Vec<[SoftSite; 2]> = Vec::new();
        for (k, window) in instructions.windows(2).enumerate() {
            let [(first, first_at), (branch, offset)] = window else {
                continue;
            };
            let first_bytes = &code[*first_at..*first_at + first.len()];
            if first.mnemonic() == Mnemonic::Xadd
                && first.has_lock_prefix()
                && first.op0_kind() == OpKind::Memory
                && first.memory_size().size() == 8
                && pl.unlock_shared_slow.address != 0
                && branches_to_wake(
                    file,
                    first.next_ip(),
                    &pl.unlock_shared_slow,
                    &read_unlock_regs,
                )
            {
                let offsets = constant_offsets(first_bytes, first.ip());
                if let Some(site) = site_of(first, first_bytes, &offsets, read_only, info) {
                    rw_operands.insert(operand_key(&site));
                    plan.sites.push(SoftSite {
                        access: SOFT_RUST_RW_UNLOCK,
                        via: via::PLAIN,
                        ..site
                    });
                    plan.parking_lot_unlocks += 1;
                }
                continue;
            }
            if first.mnemonic() == Mnemonic::Test
                && first.op0_kind() == OpKind::Register
                && first.op1_kind() == OpKind::Register
                && first.op0_register() == Register::RSI
                && first.op1_register() == Register::RSI
            {
                plan_notify(
                    file,
                    (branch, &code[*offset..*offset + branch.len()]),
                    pl,
                    (&one_regs, &all_regs),
                    plan,
                );
                continue;
            }
            if first.mnemonic() != Mnemonic::Cmpxchg
                || !first.has_lock_prefix()
                || first.op0_kind() != OpKind::Memory
                || !matches!(first.memory_size().size(), 1 | 8)
            {
                continue;
            }
            let offsets = constant_offsets(first_bytes, first.ip());
            let Some(operand) = site_of(first, first_bytes, &offsets, read_only, info) else {
                continue;
            };
            let slow = match branch.mnemonic() {
                Mnemonic::Jne => branch.near_branch_target(),
                Mnemonic::Je => branch.next_ip(),
                Mnemonic::Sete => {
                    // A try that keeps its outcome: `RwLock::try_write`.
                    let around = &instructions[k.saturating_sub(3)..];
                    try_writes.extend(plan_parking_lot_try(
                        code,
                        start,
                        around,
                        k.min(3),
                        pl,
                        operand,
                        plan,
                    ));
                    continue;
                }
                _ => continue,
            };
            let bytes = &code[*offset..*offset + branch.len()];
            let candidates: Vec<(&OutOfLine, &HashSet<Register>, PlOperation)> =
                if first.memory_size().size() == 1 {
                    vec![
                        (
                            &pl.lock_slow,
                            &lock_regs,
                            Ok((SOFT_RUST_LOCK_GATE, SOFT_RUST_LOCK_FAST)),
                        ),
                        (&pl.unlock_slow, &unlock_regs, Err(SOFT_RUST_UNLOCK)),
                    ]
                } else {
                    vec![
                        (
                            &pl.lock_shared_slow,
                            &read_regs,
                            Ok((SOFT_RUST_READ_GATE, SOFT_RUST_READ_FAST)),
                        ),
                        (
                            &pl.lock_exclusive_slow,
                            &write_regs,
                            Ok((SOFT_RUST_WRITE_GATE, SOFT_RUST_WRITE_FAST)),
                        ),
                        (
                            &pl.unlock_exclusive_slow,
                            &write_unlock_regs,
                            Err(SOFT_RUST_RW_UNLOCK),
                        ),
                        (
                            &pl.try_read_slow,
                            &try_read_regs,
                            Ok((SOFT_RUST_READ_GATE, SOFT_RUST_TRY_READ_FAST)),
                        ),
                    ]
                };
            // Past the deadline's computation of a timed lock (`try_lock_for`).
            let operation = candidates.into_iter().find(|(f, regs, kinds)| {
                f.address != 0
                    && reaches_past_calls(file, slow, f, regs, 2 * kinds.is_ok() as usize)
            });
            match operation.map(|(_, _, kinds)| kinds) {
                Some(Ok((gate, fast))) => {
                    plan.sites
                        .extend(acquisition_sites(operand, branch, bytes, gate, fast));
                    plan.parking_lot_locks += 1;
                    rw_operands.insert(operand_key(&operand));
                }
                Some(Err(release)) => {
                    plan.sites.push(SoftSite {
                        access: release,
                        via: via::PLAIN,
                        ..operand
                    });
                    plan.parking_lot_unlocks += 1;
                    rw_operands.insert(operand_key(&operand));
                }
                None => try_writes.extend(plan_parking_lot_try(
                    code,
                    start,
                    &instructions[k.saturating_sub(3)..],
                    k.min(3),
                    pl,
                    operand,
                    plan,
                )),
            }
        }
        for sites in try_writes {
            if rw_operands.contains(&operand_key(&sites[0])) {
                plan.sites.extend(sites);
                plan.parking_lot_tries += 1;
            }
        }
    }
}

/// What names a lock's word in one function: a site's base and index registers
/// and displacement (for a RIP-relative operand, the address).
fn operand_key(site: &SoftSite) -> (u8, u8, i64) {
    (site.base, site.index, site.disp)
}

/// The sites of an inlined `parking_lot` try whose `lock cmpxchg` (at index `at`
/// of `around`, the instructions from a few before it) reaches no slow path:
/// - `Mutex::try_lock`: `cmpxchg r8, [m8]` and `jne H` back to the loop's head,
///   which within a few moves tests the loaded byte's LOCKED bit (`test r8, 1`)
///   and leaves the loop (`jne F`) when it is set — gated at the `cmpxchg`
///   ([`SOFT_RUST_LOCK_GATE`]), a success at the `jne`
///   ([`SOFT_PL_TRY_LOCK_FAST`]), a failure at the check's exit
///   ([`SOFT_PL_TRY_LOCK_CHECK`]); added to `plan`;
/// - `RwLock::try_write`: `cmpxchg r64, [m64]` into 0 (`rax` zeroed just
///   before), maybe a `sete`, then `jne`/`je` — gated at the `cmpxchg`
///   ([`SOFT_RUST_WRITE_GATE`]), either outcome at the branch
///   ([`SOFT_PL_TRY_WRITE_ONCE`]); returned, for the caller to keep if the
///   function also locks or unlocks that word as an `RwLock`.
fn plan_parking_lot_try(
    code: &[u8],
    start: u64,
    around: &[(Instruction, usize)],
    at: usize,
    pl: &ParkingLot,
    operand: SoftSite,
    plan: &mut RustLockPlan,
) -> Option<[SoftSite; 2]> {
    let &(cas, _) = around.get(at)?;
    let bytes_of = |(instr, offset): &(Instruction, usize)| &code[*offset..*offset + instr.len()];
    if cas.memory_size().size() == 1 && (pl.lock_slow.address != 0 || pl.unlock_slow.address != 0) {
        let branch = around.get(at + 1)?;
        let head = branch.0.near_branch_target();
        if branch.0.mnemonic() != Mnemonic::Jne || head >= cas.ip() || head < start {
            return None;
        }
        let loop_code = code.get((head - start) as usize..)?;
        let mut decoder = Decoder::with_ip(64, loop_code, head, DecoderOptions::NONE);
        let mut previous: Option<Instruction> = None;
        for _ in 0..4 {
            let offset = (decoder.ip() - start) as usize;
            let instr = decoder.decode();
            let tests_locked_bit = previous.is_some_and(|test| {
                test.mnemonic() == Mnemonic::Test
                    && test.op0_kind() == OpKind::Register
                    && test.op0_register().size() == 1
                    && test.op1_kind() == OpKind::Immediate8
                    && test.immediate8() == 1
            });
            if tests_locked_bit {
                let exit = instr.near_branch_target();
                // The exit leaves the loop, forwards or back to a retry.
                if instr.mnemonic() != Mnemonic::Jne || (head..=branch.0.ip()).contains(&exit) {
                    return None;
                }
                let [gate, fast] = acquisition_sites(
                    operand,
                    &branch.0,
                    bytes_of(branch),
                    SOFT_RUST_LOCK_GATE,
                    SOFT_PL_TRY_LOCK_FAST,
                );
                let [_, check] = acquisition_sites(
                    operand,
                    &instr,
                    &code[offset..offset + instr.len()],
                    SOFT_RUST_LOCK_GATE,
                    SOFT_PL_TRY_LOCK_CHECK,
                );
                plan.sites.extend([gate, fast, check]);
                plan.parking_lot_tries += 1;
                return None;
            }
            if !matches!(
                instr.mnemonic(),
                Mnemonic::Mov | Mnemonic::Movzx | Mnemonic::Test
            ) {
                return None;
            }
            previous = Some(instr);
        }
        None
    } else if cas.memory_size().size() == 8 {
        let mut next = at + 1;
        if around.get(next)?.0.mnemonic() == Mnemonic::Sete {
            next += 1;
        }
        let branch = around.get(next)?;
        let expects_zero = around[..at].iter().rev().take(2).any(|(z, _)| {
            z.mnemonic() == Mnemonic::Xor
                && z.op0_kind() == OpKind::Register
                && z.op1_kind() == OpKind::Register
                && z.op0_register() == z.op1_register()
                && z.op0_register().full_register() == Register::RAX
        });
        if !matches!(branch.0.mnemonic(), Mnemonic::Jne | Mnemonic::Je) || !expects_zero {
            return None;
        }
        Some(acquisition_sites(
            operand,
            &branch.0,
            bytes_of(branch),
            SOFT_RUST_WRITE_GATE,
            SOFT_PL_TRY_WRITE_ONCE,
        ))
    } else {
        None
    }
}

/// What a `parking_lot` `cmpxchg` is, by the slow path its failure reaches: an
/// acquisition (`Ok`: its gate's and its branch's site kinds) or a release
/// (`Err`: its site kind).
type PlOperation = Result<(u8, u8), u8>;

/// The site of an inlined `parking_lot` `notify_one` or `notify_all` whose
/// `test rsi, rsi` of the condvar's state is followed by `branch` (`jne` to, or
/// `je` over, the block that calls the notify's slow path): the condvar is
/// where that block's `rdi` comes from (`mov rdi, r64` or `lea rdi, [m]`), a
/// register or address the branch still has.
fn plan_notify(
    file: &object::File<'_>,
    (branch, branch_bytes): (&Instruction, &[u8]),
    pl: &ParkingLot,
    (one_regs, all_regs): (&HashSet<Register>, &HashSet<Register>),
    plan: &mut RustLockPlan,
) {
    let waiters = match branch.mnemonic() {
        Mnemonic::Jne => branch.near_branch_target(),
        Mnemonic::Je => branch.next_ip(),
        _ => return,
    };
    let check = if pl.notify_one_slow.address != 0
        && reaches(file, waiters, &pl.notify_one_slow, one_regs)
    {
        SOFT_PL_NOTIFY_ONE_CHECK
    } else if pl.notify_all_slow.address != 0
        && reaches(file, waiters, &pl.notify_all_slow, all_regs)
    {
        SOFT_PL_NOTIFY_ALL_CHECK
    } else {
        return;
    };
    let Some(operand) = first_argument_at(file, waiters) else {
        return;
    };
    let [_, site] = acquisition_sites(operand, branch, branch_bytes, check, check);
    plan.sites.push(site);
    plan.parking_lot_notifies += 1;
}

/// Where the first argument the block at `at` passes comes from, as a site's
/// operand fields: its first write of `rdi` (before any change of flow) is `mov
/// rdi, r64` (that register) or `lea rdi, [r64 + disp]` / `[rip + disp]`.
fn first_argument_at(file: &object::File<'_>, at: u64) -> Option<SoftSite> {
    let code = code_at(file, at, 64)?;
    let mut decoder = Decoder::with_ip(64, code, at, DecoderOptions::NONE);
    for _ in 0..BLOCK_REACH {
        let instr = decoder.decode();
        if instr.is_invalid() || instr.flow_control() != FlowControl::Next {
            return None;
        }
        if instr.op0_kind() != OpKind::Register || instr.op0_register() != Register::RDI {
            continue;
        }
        let mut site = SoftSite {
            base: reg::NONE,
            index: reg::NONE,
            size: 8,
            gate: ordo_probe_common::inproc::SOFT_NO_GATE,
            ..SoftSite::default()
        };
        match (instr.mnemonic(), instr.op1_kind()) {
            (Mnemonic::Mov, OpKind::Register) if instr.op1_register().size() == 8 => {
                site.base = crate::watch::sites::gpr_number(instr.op1_register())?;
            }
            (Mnemonic::Lea, OpKind::Memory) if instr.memory_index() == Register::None => {
                if instr.memory_base() == Register::RIP {
                    // Its link-time target, as a RIP-relative operand's.
                    site.disp = instr.memory_displacement64() as i64;
                } else {
                    site.base = crate::watch::sites::gpr_number(instr.memory_base())?;
                    site.disp = instr.memory_displacement64() as i64;
                }
            }
            _ => return None,
        }
        return Some(site);
    }
    None
}

/// Whether the code at `target` calls or jumps to `f` (directly, or through one of
/// its GOT slots, or a register loaded from one) within [`BLOCK_REACH`]
/// instructions, one direct `jmp` followed, before any other change of flow.
fn reaches(
    file: &object::File<'_>,
    target: u64,
    f: &OutOfLine,
    loaded: &HashSet<Register>,
) -> bool {
    reaches_past_calls(file, target, f, loaded, 0)
}

/// As [`reaches`], past up to `calls` calls of other functions on the way (a
/// timed lock computes its deadline, `Instant::now` and `checked_add`, before
/// calling the slow path).
fn reaches_past_calls(
    file: &object::File<'_>,
    target: u64,
    f: &OutOfLine,
    loaded: &HashSet<Register>,
    mut calls: usize,
) -> bool {
    let mut at = target;
    let mut jumps = 1;
    let mut left = BLOCK_REACH;
    'block: while left > 0 {
        let Some(code) = code_at(file, at, 64) else {
            return false;
        };
        let mut decoder = Decoder::with_ip(64, code, at, DecoderOptions::NONE);
        while left > 0 && decoder.can_decode() {
            let instr = decoder.decode();
            left -= 1;
            match instr.flow_control() {
                FlowControl::Next => {}
                FlowControl::Call if instr.near_branch_target() == f.address => return true,
                FlowControl::IndirectCall if through_slot(&instr, &f.slots, loaded) => return true,
                FlowControl::Call | FlowControl::IndirectCall if calls > 0 => calls -= 1,
                FlowControl::Call => return false,
                FlowControl::IndirectCall | FlowControl::IndirectBranch => {
                    return through_slot(&instr, &f.slots, loaded)
                }
                FlowControl::UnconditionalBranch if instr.is_jmp_short_or_near() => {
                    if instr.near_branch_target() == f.address {
                        return true;
                    }
                    if jumps == 0 {
                        return false;
                    }
                    jumps -= 1;
                    at = instr.near_branch_target();
                    continue 'block;
                }
                _ => return false,
            }
        }
        return false;
    }
    false
}

/// The instances of std's channels' functions that send or take a message (one
/// per message type and flavor: `list` is `mpsc::channel`'s, `array` and `zero`
/// `sync_channel`'s): `send` and `try_send` send, `recv` and `try_recv` take.
/// Address, size, and whether it sends. Those inlined into their callers are not
/// found (a `try_recv` often is), nor the flavors' `read` and `write`, whose
/// channel argument the optimizer may drop.
fn channel_functions(file: &object::File<'_>) -> Vec<(u64, u64, bool)> {
    let mut out: Vec<(u64, u64, bool)> = text_symbols_naming(file, "Channel")
        .filter(|(s, _)| s.size() > 0)
        .filter_map(|(s, demangled)| {
            let rest = demangled
                .trim_start_matches('<')
                .strip_prefix("std::sync::mpmc::")?;
            let (flavor, rest) = rest.split_once("::Channel<")?;
            if !matches!(flavor, "list" | "array" | "zero") {
                return None;
            }
            // `…>::send`, maybe with the hash a generic instance's name keeps.
            let (_, function) = rest.rsplit_once(">::")?;
            match function.split("::h").next()? {
                "send" | "try_send" => Some((s.address(), s.size(), true)),
                "recv" | "try_recv" => Some((s.address(), s.size(), false)),
                _ => None,
            }
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Whether the function at `address` returns the pointer it was given in `rdi`
/// (the System V rule for a result returned through memory): then its own first
/// argument, `self` for a method, is in `rsi`. Seen as a copy of `rdi` (in a
/// register, or a slot of the frame) made before anything else writes there,
/// moved into `rax` just before a `ret`.
fn returns_its_first_argument(file: &object::File<'_>, address: u64, size: u64) -> bool {
    let Some(code) = code_at(file, address, size) else {
        return false;
    };
    let instructions = decoded(code, address);
    let mut copies: HashSet<Register> = [Register::RDI].into_iter().collect();
    let mut slots: HashSet<i64> = HashSet::new();
    let mut written: HashSet<Register> = HashSet::new();
    for (instr, _) in instructions.iter().take(24) {
        let from_rdi = instr.mnemonic() == Mnemonic::Mov
            && instr.op1_kind() == OpKind::Register
            && instr.op1_register() == Register::RDI;
        match instr.op0_kind() {
            OpKind::Register if from_rdi && !written.contains(&instr.op0_register()) => {
                copies.insert(instr.op0_register());
            }
            OpKind::Memory if from_rdi && instr.memory_base() == Register::RSP => {
                slots.insert(instr.memory_displacement64() as i64);
            }
            _ => {}
        }
        // `push` reads its operand; whatever else names a register first writes it.
        if instr.op0_kind() == OpKind::Register && instr.mnemonic() != Mnemonic::Push {
            written.insert(instr.op0_register());
        }
    }
    copies.remove(&Register::RAX);
    let returns_a_copy = |before: &Instruction| {
        before.mnemonic() == Mnemonic::Mov
            && before.op0_kind() == OpKind::Register
            && before.op0_register() == Register::RAX
            && match before.op1_kind() {
                OpKind::Register => copies.contains(&before.op1_register()),
                OpKind::Memory => {
                    before.memory_base() == Register::RSP
                        && before.memory_index() == Register::None
                        && slots.contains(&(before.memory_displacement64() as i64))
                }
                _ => false,
            }
    };
    // The result written through the copy, the frame released and six pops
    // before the `ret`.
    instructions.iter().enumerate().any(|(k, (instr, _))| {
        instr.code() == Code::Retnq
            && instructions[k.saturating_sub(16)..k]
                .iter()
                .any(|(before, _)| returns_a_copy(before))
    })
}

/// One out-of-line function of std's: where it is, how long, and the GOT slots
/// that hold its address.
struct OutOfLine {
    address: u64,
    size: u64,
    slots: HashSet<u64>,
}

impl OutOfLine {
    /// A function the binary does not have: address 0, no slots.
    fn absent() -> OutOfLine {
        OutOfLine {
            address: 0,
            size: 0,
            slots: HashSet::new(),
        }
    }

    /// Fills each function's GOT slots: the slots that hold its address once
    /// relocated (`R_X86_64_RELATIVE`: load bias + addend). An absent function
    /// (address 0) gets none.
    fn find_slots(file: &object::File<'_>, functions: &mut [&mut OutOfLine]) {
        let Some(relocations) = file.dynamic_relocations() else {
            return;
        };
        for (slot, r) in relocations {
            if r.target() != RelocationTarget::Absolute {
                continue;
            }
            let addend = r.addend() as u64;
            for f in functions.iter_mut() {
                if addend == f.address && addend != 0 {
                    f.slots.insert(slot);
                }
            }
        }
    }

    /// Whether the code at `target` calls it within a few instructions.
    fn called_at(&self, file: &object::File<'_>, target: u64, loaded: &HashSet<Register>) -> bool {
        calls_within(file, target, &self.slots, loaded, self.address)
    }
}

/// The slow paths of std's futex `RwLock` in one binary.
struct RwPaths {
    read: OutOfLine,
    write: OutOfLine,
    wake: OutOfLine,
}

impl RwPaths {
    /// `read_contended`, `write_contended` and `wake_writer_or_readers`, if the
    /// binary has the last (an absent slow path has address 0).
    fn of(file: &object::File<'_>) -> Option<RwPaths> {
        let mut found: [Option<OutOfLine>; 3] = Default::default();
        for (s, demangled) in text_symbols_naming(file, "RwLock") {
            if !demangled.contains("sync::rwlock::futex::RwLock") {
                continue;
            }
            let which = [
                "::read_contended",
                "::write_contended",
                "::wake_writer_or_readers",
            ]
            .iter()
            .position(|f| demangled.ends_with(f));
            if let Some(i) = which {
                found[i] = Some(OutOfLine {
                    address: s.address(),
                    size: s.size(),
                    slots: HashSet::new(),
                });
            }
        }
        // A program may use only some of the lock's operations: an absent slow
        // path is one no call reaches. The release's wake-up is always there when
        // any lock is (std's own panic hook takes one).
        let [read, write, Some(mut wake)] = found else {
            return None;
        };
        let (mut read, mut write) = (
            read.unwrap_or_else(OutOfLine::absent),
            write.unwrap_or_else(OutOfLine::absent),
        );
        OutOfLine::find_slots(file, &mut [&mut read, &mut write, &mut wake]);
        Some(RwPaths { read, write, wake })
    }
}

/// Instructions after a `lock xadd` within which an `RwLock` release branches to
/// its wake-up.
const UNLOCK_REACH: usize = 8;

/// The sites of std's futex `RwLock` (see the module doc of its mutex): each
/// `lock cmpxchg [m32]` followed by `jne T` (or `je` falling through) where `T`
/// calls `read_contended` or `write_contended` (a read or a write acquisition);
/// each `lock xadd [m32]` followed within a few instructions by a conditional
/// branch to a call of `wake_writer_or_readers` (a release; whether of a read or a
/// write the agent tells from the lock word while it is held); the entry and
/// every `ret` of the two slow paths (an acquisition that went the slow way,
/// including a read that found the lock not readable and never tried the fast
/// path).
fn plan_rwlocks(
    file: &object::File<'_>,
    functions: &[(u64, u64)],
    rw: &RwPaths,
    read_only: &[(u64, u64)],
    is_std_static: &dyn Fn(&SoftSite) -> bool,
    info: &mut InstructionInfoFactory,
    plan: &mut RustLockPlan,
) {
    for (f, access) in [
        (&rw.read, SOFT_RUST_READ_CONTENDED),
        (&rw.write, SOFT_RUST_WRITE_CONTENDED),
    ] {
        if let Some(site) = entry_site(file, f.address, access) {
            plan.sites.push(site);
        }
        plan.sites
            .extend(returns_of(file, f.address, f.size, SOFT_RUST_LOCK_SLOW));
    }
    for &(start, size) in functions {
        let Some(code) = code_at(file, start, size) else {
            continue;
        };
        let read_regs = registers_loaded_from(code, start, &rw.read.slots);
        let write_regs = registers_loaded_from(code, start, &rw.write.slots);
        let wake_regs = registers_loaded_from(code, start, &rw.wake.slots);
        let targets = branch_targets(code, start);
        let mut decoder = Decoder::with_ip(64, code, start, DecoderOptions::NONE);
        let mut previous: Option<(Instruction, usize)> = None;
        let mut instr = Instruction::default();
        while decoder.can_decode() {
            let offset = (decoder.ip() - start) as usize;
            decoder.decode_out(&mut instr);
            if instr.is_invalid() {
                break;
            }
            let bytes = &code[offset..offset + instr.len()];
            if let Some((cas, cas_at)) = previous.replace((instr, offset)) {
                if !matches!(instr.mnemonic(), Mnemonic::Jne | Mnemonic::Je)
                    || cas.mnemonic() != Mnemonic::Cmpxchg
                    || !cas.has_lock_prefix()
                    || cas.op0_kind() != OpKind::Memory
                    || cas.memory_size().size() != 4
                {
                    // Not an acquisition: maybe a release.
                } else {
                    let target = if instr.mnemonic() == Mnemonic::Jne {
                        instr.near_branch_target()
                    } else {
                        instr.next_ip()
                    };
                    let kind = if rw.read.called_at(file, target, &read_regs) {
                        Some((SOFT_RUST_READ_GATE, SOFT_RUST_READ_FAST))
                    } else if rw.write.called_at(file, target, &write_regs) {
                        Some((SOFT_RUST_WRITE_GATE, SOFT_RUST_WRITE_FAST))
                    } else {
                        None
                    };
                    let cas_bytes = &code[cas_at..cas_at + cas.len()];
                    let operand = kind.and_then(|_| {
                        let offsets = constant_offsets(cas_bytes, cas.ip());
                        site_of(&cas, cas_bytes, &offsets, read_only, info)
                    });
                    if let (Some((gate, fast)), Some(operand)) = (kind, operand) {
                        if !is_std_static(&operand) {
                            let mut sites = acquisition_sites(operand, &instr, bytes, gate, fast);
                            sites[1].patch = acquisition_patch(&cas, &instr, &targets);
                            plan.sites.extend(sites);
                            plan.rw_locks += 1;
                        }
                    } else if kind.is_none() {
                        plan_try_rw(
                            file,
                            code,
                            start,
                            (&cas, cas_bytes),
                            (&instr, bytes),
                            read_only,
                            is_std_static,
                            info,
                            plan,
                        );
                    }
                }
            }
            if instr.mnemonic() == Mnemonic::Xadd
                && instr.has_lock_prefix()
                && instr.op0_kind() == OpKind::Memory
                && instr.memory_size().size() == 4
                && branches_to_wake(file, instr.next_ip(), &rw.wake, &wake_regs)
            {
                let offsets = constant_offsets(bytes, instr.ip());
                if let Some(mut site) = site_of(&instr, bytes, &offsets, read_only, info)
                    .filter(|site| !is_std_static(site))
                {
                    site.access = SOFT_RUST_RW_UNLOCK;
                    site.via = via::PLAIN;
                    site.patch = release_patch(code, start, &instr, &targets);
                    plan.sites.push(site);
                    plan.rw_unlocks += 1;
                }
            }
        }
    }
}

/// The sites of an inlined `RwLock::try_read` or `try_write` whose `lock cmpxchg`
/// is `cas` and whose next instruction `branch` is a `jne` back to the loop's
/// check: at the check, `cmp r32, imm` and `ja F` (a read: too many readers or a
/// writer) or `test r32, imm` and `jne F` (a write: held by anyone), `F` past the
/// loop; the success side reads the poison flag 8 bytes past the lock word. Sites:
/// the `cmpxchg` (gated in replays, [`SOFT_RUST_READ_GATE`]/`WRITE_GATE`), the
/// `jne` ([`SOFT_RUST_TRY_READ_FAST`]/`WRITE_FAST`) and the check's exit
/// ([`SOFT_RUST_TRY_READ_CHECK`]/`WRITE_CHECK`), all with the `cmpxchg`'s operand.
#[allow(
    clippy::too_many_arguments,
    reason = "the planners share the read-only ranges, the std-static test and the decoder cache"
)]
fn plan_try_rw(
    file: &object::File<'_>,
    code: &[u8],
    start: u64,
    (cas, cas_bytes): (&Instruction, &[u8]),
    (branch, branch_bytes): (&Instruction, &[u8]),
    read_only: &[(u64, u64)],
    is_std_static: &dyn Fn(&SoftSite) -> bool,
    info: &mut InstructionInfoFactory,
    plan: &mut RustLockPlan,
) {
    if branch.mnemonic() != Mnemonic::Jne || branch.near_branch_target() >= cas.ip() {
        return;
    }
    let head = branch.near_branch_target();
    let Some(at) = head.checked_sub(start).map(|o| o as usize) else {
        return;
    };
    let Some(loop_code) = code.get(at..) else {
        return;
    };
    let mut decoder = Decoder::with_ip(64, loop_code, head, DecoderOptions::NONE);
    let check = decoder.decode();
    let exit_at = (decoder.ip() - start) as usize;
    let exit = decoder.decode();
    let reg_imm = check.op0_kind() == OpKind::Register
        && matches!(
            check.op1_kind(),
            OpKind::Immediate32 | OpKind::Immediate8to32
        );
    let (fast, check_kind) = match (check.mnemonic(), exit.mnemonic()) {
        (Mnemonic::Cmp, Mnemonic::Ja) if reg_imm => {
            (SOFT_RUST_TRY_READ_FAST, SOFT_RUST_TRY_READ_CHECK)
        }
        (Mnemonic::Test, Mnemonic::Jne) if reg_imm => {
            (SOFT_RUST_TRY_WRITE_FAST, SOFT_RUST_TRY_WRITE_CHECK)
        }
        _ => return,
    };
    if exit.near_branch_target() <= branch.ip() || !reads_flag_at(file, branch.next_ip(), cas, 8) {
        return;
    }
    let offsets = constant_offsets(cas_bytes, cas.ip());
    let Some(operand) = site_of(cas, cas_bytes, &offsets, read_only, info) else {
        return;
    };
    if is_std_static(&operand) {
        return;
    }
    let gate = if fast == SOFT_RUST_TRY_READ_FAST {
        SOFT_RUST_READ_GATE
    } else {
        SOFT_RUST_WRITE_GATE
    };
    let exit_bytes = &code[exit_at..exit_at + exit.len()];
    let [gate_site, fast_site] = acquisition_sites(operand, branch, branch_bytes, gate, fast);
    let [_, check_site] = acquisition_sites(operand, &exit, exit_bytes, gate, check_kind);
    plan.sites.extend([gate_site, fast_site, check_site]);
    plan.rw_tries += 1;
}

/// The text symbols of `file` whose mangled name contains `part` (a cheap filter
/// before demangling), with their demangled names.
fn text_symbols_naming<'a>(
    file: &'a object::File<'_>,
    part: &'a str,
) -> impl Iterator<Item = (object::Symbol<'a, 'a>, String)> + 'a {
    file.symbols()
        .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0)
        .filter_map(move |s| {
            let name = s.name().ok()?;
            name.contains(part)
                .then(|| (s, ordo_trace::symbolize::demangle(name)))
        })
}

/// std's `Once` in one binary: `std::sys::sync::once::futex::Once::call` (the
/// slow path of `Once::call_once`, `OnceLock` and `LazyLock`, called through a
/// GOT slot or directly) and the local `OnceLock<T>::initialize` instances that
/// call it (the slow path a `get_or_init` branches to).
struct OncePaths {
    call: OutOfLine,
    /// `OnceLock::initialize` instances: their addresses.
    initializers: HashSet<u64>,
}

impl OncePaths {
    fn of(file: &object::File<'_>) -> Option<OncePaths> {
        let mut call = None;
        let mut initializers = HashSet::new();
        for (s, demangled) in text_symbols_naming(file, "Once") {
            let bare = demangled.trim_start_matches('<');
            if bare.starts_with("std::sys::sync::once::futex::Once")
                && demangled.ends_with("::call")
            {
                call = Some(OutOfLine {
                    address: s.address(),
                    size: s.size(),
                    slots: HashSet::new(),
                });
            } else if bare.starts_with("std::sync::once_lock::OnceLock")
                && (demangled.ends_with("::initialize") || demangled.contains(">::initialize::<"))
            {
                initializers.insert(s.address());
            }
        }
        let mut call = call?;
        OutOfLine::find_slots(file, &mut [&mut call]);
        Some(OncePaths { call, initializers })
    }

    /// Whether the code at `target` calls `Once::call` or an `initialize` within a
    /// few instructions.
    fn slow_at(&self, file: &object::File<'_>, target: u64, loaded: &HashSet<Register>) -> bool {
        first_call_within(file, target).is_some_and(|call| match call.flow_control() {
            FlowControl::Call => {
                let to = call.near_branch_target();
                to == self.call.address || self.initializers.contains(&to)
            }
            _ => through_slot(&call, &self.call.slots, loaded),
        })
    }
}

/// The sites of std's `Once`: each inlined completion check — `mov r32, [m32]`
/// (the state word), `test r32, r32` or `cmp r32, imm`, then `jne T` where `T`
/// calls the slow path, or `je S` falling through to it — as the load
/// ([`SOFT_RUST_ONCE_LOAD`], run by the jump patch) and the branch
/// ([`SOFT_RUST_ONCE_CHECK`]: ZF set is complete, whatever value this std gives
/// "complete"); in `Once::call`, each `xchg r32, [m32]` (the completion guard's
/// store: [`SOFT_RUST_ONCE_DONE`]), the entry ([`SOFT_RUST_ONCE_ENTER`]) and every
/// `ret` ([`SOFT_RUST_ONCE_LEAVE`]).
fn plan_onces(
    file: &object::File<'_>,
    functions: &[(u64, u64)],
    once: &OncePaths,
    read_only: &[(u64, u64)],
    is_std_static: &dyn Fn(&SoftSite) -> bool,
    info: &mut InstructionInfoFactory,
    plan: &mut RustLockPlan,
) {
    let call = &once.call;
    if let Some(site) = entry_site(file, call.address, SOFT_RUST_ONCE_ENTER) {
        plan.sites.push(site);
        plan.sites.extend(returns_of(
            file,
            call.address,
            call.size,
            SOFT_RUST_ONCE_LEAVE,
        ));
        plan.once_call = true;
    }
    for &(start, size) in functions {
        let Some(code) = code_at(file, start, size) else {
            continue;
        };
        let inside_call = start == call.address;
        let loaded = registers_loaded_from(code, start, &call.slots);
        let targets = branch_targets(code, start);
        let decoded = decoded(code, start);
        if inside_call {
            for (instr, offset) in &decoded {
                if instr.mnemonic() == Mnemonic::Xchg
                    && instr.memory_size().size() == 4
                    && (0..2).any(|i| instr.op_kind(i) == OpKind::Memory)
                {
                    let bytes = &code[*offset..*offset + instr.len()];
                    let offsets = constant_offsets(bytes, instr.ip());
                    if let Some(mut site) = site_of(instr, bytes, &offsets, read_only, info) {
                        site.access = SOFT_RUST_ONCE_DONE;
                        site.via = via::PLAIN;
                        plan.sites.push(site);
                    }
                }
            }
        }
        for window in decoded.windows(3) {
            let [(load, load_at), (test, _), (instr, offset)] = window else {
                continue;
            };
            if !matches!(instr.mnemonic(), Mnemonic::Jne | Mnemonic::Je)
                || !is_state_load(load)
                || !tests_loaded(test, load.op0_register())
            {
                continue;
            }
            let bytes = &code[*offset..*offset + instr.len()];
            let slow = if instr.mnemonic() == Mnemonic::Jne {
                instr.near_branch_target()
            } else {
                instr.next_ip()
            };
            if !once.slow_at(file, slow, &loaded) {
                continue;
            }
            let load_bytes = &code[*load_at..*load_at + load.len()];
            let offsets = constant_offsets(load_bytes, load.ip());
            let Some(operand) = site_of(load, load_bytes, &offsets, read_only, info) else {
                continue;
            };
            if is_std_static(&operand) {
                continue;
            }
            let mut sites = acquisition_sites(
                operand,
                instr,
                bytes,
                SOFT_RUST_ONCE_LOAD,
                SOFT_RUST_ONCE_CHECK,
            );
            sites[1].patch = once_check_patch(load, test, instr, &targets);
            plan.sites.extend(sites);
            plan.once_checks += 1;
        }
    }
}

/// The instructions of the function whose code is `code` (at `start`), each with
/// its offset in `code`, up to the first that does not decode.
fn decoded(code: &[u8], start: u64) -> Vec<(Instruction, usize)> {
    let mut decoder = Decoder::with_ip(64, code, start, DecoderOptions::NONE);
    let mut out = Vec::new();
    while decoder.can_decode() {
        let offset = (decoder.ip() - start) as usize;
        let instr = decoder.decode();
        if instr.is_invalid() {
            break;
        }
        out.push((instr, offset));
    }
    out
}

/// Instructions from a `try_lock`'s success to its poison check, at most.
const POISON_REACH: usize = 12;

/// The sites of std's `Mutex::try_lock`, inlined: `lock cmpxchg r32, [m32]` and
/// `jne F` (or `je S`) where the failure side does not call `lock_contended`
/// (that is a `lock`) and the success side, within a few instructions, reads the
/// byte 4 past the lock word (the mutex's poison flag, which the guard checks):
/// the `cmpxchg` ([`SOFT_RUST_TRY_GATE`]) and the branch ([`SOFT_RUST_TRY_FAST`]).
fn plan_try_locks(
    file: &object::File<'_>,
    functions: &[(u64, u64)],
    slow: &SlowPaths,
    read_only: &[(u64, u64)],
    is_std_static: &dyn Fn(&SoftSite) -> bool,
    info: &mut InstructionInfoFactory,
    plan: &mut RustLockPlan,
) {
    for &(start, size) in functions {
        let Some(code) = code_at(file, start, size) else {
            continue;
        };
        let loaded = registers_loaded_from(code, start, &slow.contended_slots);
        let targets = branch_targets(code, start);
        for window in decoded(code, start).windows(2) {
            let [(cas, cas_at), (branch, offset)] = window else {
                continue;
            };
            let (success, failure) = match branch.mnemonic() {
                Mnemonic::Jne => (branch.next_ip(), branch.near_branch_target()),
                Mnemonic::Je => (branch.near_branch_target(), branch.next_ip()),
                _ => continue,
            };
            if cas.mnemonic() != Mnemonic::Cmpxchg
                || !cas.has_lock_prefix()
                || cas.op0_kind() != OpKind::Memory
                || cas.memory_size().size() != 4
                || calls_within(
                    file,
                    failure,
                    &slow.contended_slots,
                    &loaded,
                    slow.contended.0,
                )
                || !reads_poison_flag(file, success, cas)
            {
                continue;
            }
            let cas_bytes = &code[*cas_at..*cas_at + cas.len()];
            let offsets = constant_offsets(cas_bytes, cas.ip());
            let Some(operand) = site_of(cas, cas_bytes, &offsets, read_only, info) else {
                continue;
            };
            if is_std_static(&operand) {
                continue;
            }
            let bytes = &code[*offset..*offset + branch.len()];
            let mut sites = acquisition_sites(
                operand,
                branch,
                bytes,
                SOFT_RUST_TRY_GATE,
                SOFT_RUST_TRY_FAST,
            );
            sites[1].patch = acquisition_patch(cas, branch, &targets);
            plan.sites.extend(sites);
            plan.try_locks += 1;
        }
    }
}

/// Whether the code from `from` reads, within [`POISON_REACH`] instructions (over
/// conditional branches, before any other change of flow), the byte 4 past the
/// word `cas` compares and exchanges: a std `Mutex`'s poison flag.
fn reads_poison_flag(file: &object::File<'_>, from: u64, cas: &Instruction) -> bool {
    reads_flag_at(file, from, cas, 4)
}

/// Whether the code from `from` reads, within [`POISON_REACH`] instructions (over
/// conditional branches, before any other change of flow), the byte `offset` past
/// the word `cas` compares and exchanges (a std lock's poison flag: 4 past a
/// `Mutex`'s word, 8 past an `RwLock`'s).
fn reads_flag_at(file: &object::File<'_>, from: u64, cas: &Instruction, offset: u64) -> bool {
    let Some(code) = code_at(file, from, 96) else {
        return false;
    };
    let mut decoder = Decoder::with_ip(64, code, from, DecoderOptions::NONE);
    for _ in 0..POISON_REACH {
        if !decoder.can_decode() {
            return false;
        }
        let instr = decoder.decode();
        if (0..instr.op_count()).any(|i| instr.op_kind(i) == OpKind::Memory)
            && instr.memory_size().size() == 1
        {
            let same = if cas.is_ip_rel_memory_operand() {
                instr.is_ip_rel_memory_operand()
                    && instr.ip_rel_memory_address() == cas.ip_rel_memory_address() + offset
            } else {
                instr.memory_base() == cas.memory_base()
                    && instr.memory_index() == cas.memory_index()
                    && instr.memory_index_scale() == cas.memory_index_scale()
                    && instr.memory_displacement64()
                        == cas.memory_displacement64().wrapping_add(offset)
            };
            if same {
                return true;
            }
        }
        match instr.flow_control() {
            FlowControl::Next | FlowControl::ConditionalBranch => {}
            _ => return false,
        }
    }
    false
}

/// std's thread parking in one binary: `futex_wake` (what an inlined
/// `Thread::unpark` calls when the thread was parked: address and GOT slots) and
/// the `thread::park` functions (address and size).
struct Parking {
    wake: OutOfLine,
    parks: Vec<(u64, u64)>,
}

impl Parking {
    fn of(file: &object::File<'_>) -> Option<Parking> {
        let mut wake = None;
        let mut parks = Vec::new();
        for (s, demangled) in text_symbols_naming(file, "park") {
            let bare = demangled.trim_start_matches('<');
            if bare.starts_with("std::thread::")
                && (demangled.ends_with("::park") || demangled.ends_with("::park_timeout"))
                && s.size() > 0
            {
                parks.push((s.address(), s.size()));
            }
        }
        for (s, demangled) in text_symbols_naming(file, "futex_wake") {
            if demangled.starts_with("std::sys::") && demangled.ends_with("futex::futex_wake") {
                wake = Some(OutOfLine {
                    address: s.address(),
                    size: s.size(),
                    slots: HashSet::new(),
                });
            }
        }
        let mut wake = wake?;
        if parks.is_empty() {
            return None;
        }
        OutOfLine::find_slots(file, &mut [&mut wake]);
        parks.sort_unstable();
        parks.dedup();
        Some(Parking { wake, parks })
    }
}

/// The sites of std's thread parking: each inlined `Thread::unpark` — `xchg r32,
/// [m32]` (the state set to "notified"), `cmp r32, -1` ("was it parked?"), then a
/// branch whose parked side calls `futex_wake` ([`SOFT_RUST_UNPARK`]); in each
/// `thread::park` function, its `lock dec [m32]` taking the token
/// ([`SOFT_RUST_PARK_TOKEN`]) and its `ret`s ([`SOFT_RUST_PARK_LEAVE`]).
fn plan_parking(
    file: &object::File<'_>,
    functions: &[(u64, u64)],
    parking: &Parking,
    read_only: &[(u64, u64)],
    info: &mut InstructionInfoFactory,
    plan: &mut RustLockPlan,
) {
    for &(address, size) in &parking.parks {
        let Some(code) = code_at(file, address, size) else {
            continue;
        };
        let mut tokens = 0;
        for (instr, offset) in decoded(code, address) {
            if instr.mnemonic() == Mnemonic::Dec
                && instr.has_lock_prefix()
                && instr.op0_kind() == OpKind::Memory
                && instr.memory_size().size() == 4
            {
                let bytes = &code[offset..offset + instr.len()];
                let offsets = constant_offsets(bytes, instr.ip());
                if let Some(mut site) = site_of(&instr, bytes, &offsets, read_only, info) {
                    site.access = SOFT_RUST_PARK_TOKEN;
                    site.via = via::PLAIN;
                    plan.sites.push(site);
                    tokens += 1;
                }
            }
        }
        if tokens > 0 {
            plan.sites
                .extend(returns_of(file, address, size, SOFT_RUST_PARK_LEAVE));
            plan.parks += 1;
        }
    }
    for &(start, size) in functions {
        let Some(code) = code_at(file, start, size) else {
            continue;
        };
        let loaded = registers_loaded_from(code, start, &parking.wake.slots);
        let targets = branch_targets(code, start);
        for window in decoded(code, start).windows(3) {
            let [(swap, swap_at), (cmp, _), (branch, _)] = window else {
                continue;
            };
            let parked = match branch.mnemonic() {
                Mnemonic::Je => branch.near_branch_target(),
                Mnemonic::Jne => branch.next_ip(),
                _ => continue,
            };
            if swap.mnemonic() != Mnemonic::Xchg
                || swap.memory_size().size() != 4
                || !(0..2).any(|i| swap.op_kind(i) == OpKind::Memory)
                || cmp.mnemonic() != Mnemonic::Cmp
                || cmp.op0_kind() != OpKind::Register
                || !matches!(cmp.op1_kind(), OpKind::Immediate8to32 | OpKind::Immediate32)
                || cmp.immediate(1) as u32 != u32::MAX
                || !parking.wake.called_at(file, parked, &loaded)
            {
                continue;
            }
            let bytes = &code[*swap_at..*swap_at + swap.len()];
            let offsets = constant_offsets(bytes, swap.ip());
            if let Some(mut site) = site_of(swap, bytes, &offsets, read_only, info) {
                site.access = SOFT_RUST_UNPARK;
                site.via = via::PLAIN;
                site.patch = release_patch(code, start, swap, &targets);
                plan.sites.push(site);
                plan.unparks += 1;
            }
        }
    }
}

/// `mov r32, [m32]` whose destination is none of the address's registers (the
/// agent computes the address from the registers after it).
fn is_state_load(load: &Instruction) -> bool {
    load.mnemonic() == Mnemonic::Mov
        && load.op0_kind() == OpKind::Register
        && load.op0_register().size() == 4
        && load.op1_kind() == OpKind::Memory
        && load.memory_size().size() == 4
        && ![load.memory_base(), load.memory_index()].iter().any(|r| {
            *r != Register::None && r.full_register() == load.op0_register().full_register()
        })
}

/// `test r, r` or `cmp r, imm` on the register `loaded`.
fn tests_loaded(test: &Instruction, loaded: Register) -> bool {
    match test.mnemonic() {
        Mnemonic::Test => {
            test.op0_kind() == OpKind::Register
                && test.op1_kind() == OpKind::Register
                && test.op0_register() == loaded
                && test.op1_register() == loaded
        }
        Mnemonic::Cmp => {
            test.op0_kind() == OpKind::Register
                && test.op0_register() == loaded
                && matches!(
                    test.op1_kind(),
                    OpKind::Immediate8to32 | OpKind::Immediate32
                )
        }
        _ => false,
    }
}

/// [`SoftSite::patch`] of a completion check: the load, the test and the branch,
/// adjacent, replaced together (the test has no memory operand: it runs
/// anywhere), with no branch landing inside.
fn once_check_patch(
    load: &Instruction,
    test: &Instruction,
    branch: &Instruction,
    targets: &HashSet<u64>,
) -> u32 {
    let end = branch.next_ip();
    let len = (end - load.ip()) as usize;
    if test.ip() != load.next_ip()
        || branch.ip() != test.next_ip()
        || len < JMP_LEN
        || !nothing_lands_inside(targets, load.ip(), end)
    {
        return 0;
    }
    len as u32
}

/// Whether the code from `from` reaches, within [`UNLOCK_REACH`] instructions
/// and before any other change of flow, a conditional branch whose target calls
/// `wake`, or the call itself after one (an `RwLock` release waking whoever
/// waits).
fn branches_to_wake(
    file: &object::File<'_>,
    from: u64,
    wake: &OutOfLine,
    loaded: &HashSet<Register>,
) -> bool {
    let Some(code) = code_at(file, from, 64) else {
        return false;
    };
    let mut decoder = Decoder::with_ip(64, code, from, DecoderOptions::NONE);
    for _ in 0..UNLOCK_REACH {
        if !decoder.can_decode() {
            return false;
        }
        let instr = decoder.decode();
        match instr.flow_control() {
            FlowControl::Next => continue,
            // The wake-up is the branch's target (a read release: `jo`), or what
            // it skips (a write release: `jb` over the call).
            FlowControl::ConditionalBranch => {
                if wake.called_at(file, instr.near_branch_target(), loaded) {
                    return true;
                }
            }
            FlowControl::Call => return instr.near_branch_target() == wake.address,
            FlowControl::IndirectCall => return through_slot(&instr, &wake.slots, loaded),
            _ => return false,
        }
    }
    false
}

/// Whether `file` was built by rustc (its `.comment` says so) and has no symbol
/// table: std's inlined locks and its condvar cannot be told from other code.
fn is_stripped_rust(file: &object::File<'_>) -> bool {
    use object::ObjectSection;
    let by_rustc = file
        .section_by_name(".comment")
        .and_then(|s| s.data().ok())
        .is_some_and(|d| d.windows(13).any(|w| w == b"rustc version"));
    by_rustc && file.symbols().next().is_none()
}

/// std's futex condvar functions, each with the site kind its entry records:
/// `wait`/`wait_timeout` of `std::sys::sync::condvar::futex::Condvar` (out of
/// line: they are not `#[inline]`, and std comes compiled) and the public
/// `notify_one`/`notify_all` (`std::sync::poison::condvar::Condvar`, its
/// `nonpoison` twin at the same address, or `std::sync::condvar::Condvar` in older
/// std), whose only field is the futex condvar, so both name it by one address.
/// Where only std's inner notify has a symbol, that one.
fn condvar_functions(file: &object::File<'_>) -> Vec<(u64, u8)> {
    let mut waits = Vec::new();
    let mut public = Vec::new();
    let mut inner = Vec::new();
    for (s, demangled) in text_symbols_naming(file, "Condvar") {
        let Some((owner, function)) = demangled.trim_end_matches('>').rsplit_once("::") else {
            continue;
        };
        let owner = owner.trim_start_matches('<').trim_end_matches('>');
        let futex = owner.ends_with("sync::condvar::futex::Condvar");
        let public_condvar = owner.ends_with("sync::poison::condvar::Condvar")
            || owner.ends_with("sync::nonpoison::condvar::Condvar")
            || owner == "std::sync::condvar::Condvar";
        let access = match function {
            "wait" if futex => SOFT_RUST_COND_WAIT,
            "wait_timeout" if futex => SOFT_RUST_COND_WAIT_TIMED,
            "notify_one" => SOFT_RUST_COND_SIGNAL,
            "notify_all" => SOFT_RUST_COND_BROADCAST,
            _ => continue,
        };
        match access {
            SOFT_RUST_COND_WAIT | SOFT_RUST_COND_WAIT_TIMED => waits.push((s.address(), access)),
            _ if public_condvar => public.push((s.address(), access)),
            _ if futex => inner.push((s.address(), access)),
            _ => {}
        }
    }
    // One notify is seen once: at the public function when it has a symbol (it
    // calls the inner one, or has it inlined).
    let notifies = if public.is_empty() { inner } else { public };
    let mut out: Vec<(u64, u8)> = waits.into_iter().chain(notifies).collect();
    out.sort_unstable();
    out.dedup_by_key(|f| f.0);
    out
}

/// std's `Barrier::wait` (`std::sync::barrier::Barrier::wait`, out of line: not
/// generic, not `#[inline]`): address and size of each.
fn barrier_waits(file: &object::File<'_>) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = text_symbols_naming(file, "Barrier")
        .filter(|(s, demangled)| {
            s.size() != 0
                && demangled
                    .trim_start_matches('<')
                    .starts_with("std::sync::barrier::Barrier")
                && demangled.ends_with("::wait")
        })
        .map(|(s, _)| (s.address(), s.size()))
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// A site recording `access` on every `ret` of the function at `address` (`size`
/// bytes); the agent emulates the `ret`.
fn returns_of(file: &object::File<'_>, address: u64, size: u64, access: u8) -> Vec<SoftSite> {
    let Some(code) = code_at(file, address, size) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut decoder = Decoder::with_ip(64, code, address, DecoderOptions::NONE);
    let mut instr = Instruction::default();
    while decoder.can_decode() {
        decoder.decode_out(&mut instr);
        if instr.code() == Code::Retnq {
            let mut site = SoftSite {
                ip: instr.ip(),
                len: 1,
                access,
                via: via::PLAIN,
                ..SoftSite::default()
            };
            site.bytes[0] = 0xc3;
            out.push(site);
        }
    }
    out
}

/// A site on the first instruction of the function at `address`, recording
/// `access` and running the instruction out of line; `None` when that instruction
/// cannot run elsewhere (a branch, or a memory operand relative to `rip` in a
/// form the copy cannot rewrite).
fn entry_site(file: &object::File<'_>, address: u64, access: u8) -> Option<SoftSite> {
    let code = code_at(file, address, 16)?;
    let mut decoder = Decoder::with_ip(64, code, address, DecoderOptions::NONE);
    let instr = decoder.decode();
    if instr.is_invalid() || instr.flow_control() != FlowControl::Next {
        return None;
    }
    let offsets = decoder.get_constant_offsets(&instr);
    let mut site = SoftSite {
        ip: address,
        len: instr.len() as u8,
        access,
        via: via::PLAIN,
        base: reg::NONE,
        index: reg::NONE,
        gate: ordo_probe_common::inproc::SOFT_NO_GATE,
        ..SoftSite::default()
    };
    site.bytes[..instr.len()].copy_from_slice(&code[..instr.len()]);
    if instr.is_ip_rel_memory_operand() {
        if !offsets.has_displacement() || offsets.displacement_size() != 4 {
            return None;
        }
        site.disp = instr.ip_rel_memory_address() as i64;
        site.disp_at = offsets.displacement_offset() as u8;
    }
    Some(site)
}

/// Bytes a `jmp` to a trampoline takes (`jmp rel32`).
const JMP_LEN: usize = 5;

/// Where the branches of the function whose code is `code` (at `start`) land.
fn branch_targets(code: &[u8], start: u64) -> HashSet<u64> {
    let mut decoder = Decoder::with_ip(64, code, start, DecoderOptions::NONE);
    let mut instr = Instruction::default();
    let mut out = HashSet::new();
    while decoder.can_decode() {
        decoder.decode_out(&mut instr);
        if matches!(
            instr.flow_control(),
            FlowControl::ConditionalBranch | FlowControl::UnconditionalBranch | FlowControl::Call
        ) {
            out.insert(instr.near_branch_target());
        }
    }
    out
}

/// Whether no branch lands strictly inside `[from, to)`: its first byte may be
/// replaced by a `jmp` and the rest left unused.
fn nothing_lands_inside(targets: &HashSet<u64>, from: u64, to: u64) -> bool {
    !targets.iter().any(|&t| t > from && t < to)
}

/// [`SoftSite::patch`] of an acquisition: its `lock cmpxchg` and the branch right
/// after it, replaced together.
fn acquisition_patch(cas: &Instruction, branch: &Instruction, targets: &HashSet<u64>) -> u32 {
    let end = branch.next_ip();
    let len = (end - cas.ip()) as usize;
    if branch.ip() != cas.next_ip()
        || len < JMP_LEN
        || !nothing_lands_inside(targets, cas.ip(), end)
    {
        return 0;
    }
    len as u32
}

/// [`SoftSite::patch`] of a release: its `xchg`/`lock xadd` and the instructions
/// after it until 5 bytes are covered, each of which can run anywhere (no branch,
/// no `rip`-relative operand), with no branch landing inside.
fn release_patch(code: &[u8], start: u64, release: &Instruction, targets: &HashSet<u64>) -> u32 {
    let mut end = release.next_ip();
    let from = (end - start) as usize;
    let mut decoder =
        Decoder::with_ip(64, &code[from.min(code.len())..], end, DecoderOptions::NONE);
    while ((end - release.ip()) as usize) < JMP_LEN {
        if !decoder.can_decode() {
            return 0;
        }
        let next = decoder.decode();
        if next.is_invalid()
            || next.flow_control() != FlowControl::Next
            || next.is_ip_rel_memory_operand()
        {
            return 0;
        }
        end = next.next_ip();
    }
    if !nothing_lands_inside(targets, release.ip(), end) {
        return 0;
    }
    (end - release.ip()) as u32
}

/// The two sites of an inlined acquisition: its `lock cmpxchg` (`operand`), where
/// a replay gates the attempt (`gate`), and the branch after it (`branch`, its
/// bytes `bytes`), where the outcome is recorded (`fast`).
fn acquisition_sites(
    operand: SoftSite,
    branch: &Instruction,
    bytes: &[u8],
    gate: u8,
    fast: u8,
) -> [SoftSite; 2] {
    let mut site = SoftSite {
        ip: branch.ip(),
        len: branch.len() as u8,
        access: fast,
        via: via::PLAIN,
        disp_at: 0,
        bytes: [0; 16],
        ..operand
    };
    site.bytes[..bytes.len()].copy_from_slice(bytes);
    [
        SoftSite {
            access: gate,
            via: via::PLAIN,
            ..operand
        },
        site,
    ]
}

/// `sites` (discovered accesses, in address order) with the Rust mutex sites
/// `locks` in place of any access site at the same instruction (an unlock's `xchg`
/// is both), in address order.
pub fn merge(sites: &mut Vec<SoftSite>, locks: &[SoftSite]) {
    if locks.is_empty() {
        return;
    }
    let taken: HashSet<u64> = locks.iter().map(|s| s.ip).collect();
    sites.retain(|s| !taken.contains(&s.ip));
    sites.extend_from_slice(locks);
    sites.sort_by_key(|s| s.ip);
}

/// The link-time ranges of std's own statics (`std::…` data symbols).
fn std_statics(file: &object::File<'_>) -> Vec<(u64, u64)> {
    file.symbols()
        .filter(|s| s.kind() == SymbolKind::Data && s.address() != 0)
        .filter(|s| {
            s.name().is_ok_and(|n| {
                let demangled = ordo_trace::symbolize::demangle(n);
                demangled.starts_with("std::") || demangled.starts_with("<std::")
            })
        })
        .map(|s| (s.address(), s.address() + s.size().max(1)))
        .collect()
}

/// Where the displacement and immediates of the instruction `bytes` (at `ip`) sit
/// (a decoder reports them for the instruction it decoded last).
fn constant_offsets(bytes: &[u8], ip: u64) -> iced_x86::ConstantOffsets {
    let mut decoder = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE);
    let instr = decoder.decode();
    decoder.get_constant_offsets(&instr)
}

/// std's mutex slow paths and the GOT slots that hold them, if the binary has them.
fn slow_paths(file: &object::File<'_>) -> Option<SlowPaths> {
    let mut contended = None;
    let mut wake = None;
    for s in file.symbols() {
        if s.kind() != SymbolKind::Text || s.address() == 0 {
            continue;
        }
        let Ok(name) = s.name() else { continue };
        if !name.contains("lock_contended") && !name.contains("wake") {
            continue;
        }
        let demangled = ordo_trace::symbolize::demangle(name);
        if is_mutex_fn(&demangled, "lock_contended") {
            contended = Some((s.address(), s.size()));
        } else if is_mutex_fn(&demangled, "wake") {
            wake = Some(s.address());
        }
    }
    // `wake` may be inlined everywhere (the futex call itself), and then has no symbol.
    let (contended, wake) = (contended?, wake.unwrap_or(0));
    let mut contended_slots = HashSet::new();
    let mut wake_slots = HashSet::new();
    if let Some(relocations) = file.dynamic_relocations() {
        for (slot, r) in relocations {
            // R_X86_64_RELATIVE: the slot holds load bias + addend.
            if r.target() != RelocationTarget::Absolute {
                continue;
            }
            let addend = r.addend() as u64;
            if addend == contended.0 {
                contended_slots.insert(slot);
            } else if addend == wake {
                wake_slots.insert(slot);
            }
        }
    }
    Some(SlowPaths {
        contended,
        wake,
        contended_slots,
        wake_slots,
    })
}

impl SlowPaths {
    /// A binary with an `RwLock` but no `Mutex`: nothing matches.
    fn none() -> SlowPaths {
        SlowPaths {
            contended: (0, 0),
            wake: 0,
            contended_slots: HashSet::new(),
            wake_slots: HashSet::new(),
        }
    }
}

/// Registers a function loads a slow path's address into (from its GOT slot).
struct Held {
    contended: HashSet<Register>,
    wake: HashSet<Register>,
}

/// The registers the code at `start` loads from one of `slots` (`mov r64,
/// [rip+slot]`).
fn registers_loaded_from(code: &[u8], start: u64, slots: &HashSet<u64>) -> HashSet<Register> {
    let mut out = HashSet::new();
    if slots.is_empty() {
        return out;
    }
    let mut decoder = Decoder::with_ip(64, code, start, DecoderOptions::NONE);
    let mut instr = Instruction::default();
    while decoder.can_decode() {
        decoder.decode_out(&mut instr);
        if instr.mnemonic() == Mnemonic::Mov
            && instr.op0_kind() == OpKind::Register
            && instr.is_ip_rel_memory_operand()
            && slots.contains(&instr.ip_rel_memory_address())
        {
            out.insert(instr.op0_register());
        }
    }
    out
}

/// Whether an indirect call or jump goes to one of `slots` (through the slot, or
/// a register of `loaded` the function filled from one).
fn through_slot(instr: &Instruction, slots: &HashSet<u64>, loaded: &HashSet<Register>) -> bool {
    (instr.is_ip_rel_memory_operand() && slots.contains(&instr.ip_rel_memory_address()))
        || (instr.op0_kind() == OpKind::Register && loaded.contains(&instr.op0_register()))
}

/// Whether the code at `target` calls `function` (directly, or through one of
/// `slots`) within [`BLOCK_REACH`] instructions, before any other change of flow.
fn calls_within(
    file: &object::File<'_>,
    target: u64,
    slots: &HashSet<u64>,
    loaded: &HashSet<Register>,
    function: u64,
) -> bool {
    first_call_within(file, target).is_some_and(|call| match call.flow_control() {
        FlowControl::Call => call.near_branch_target() == function,
        _ => through_slot(&call, slots, loaded),
    })
}

/// The first call (direct or indirect) the code at `target` makes within
/// [`BLOCK_REACH`] instructions, one `jmp` followed, before any other change of
/// flow.
fn first_call_within(file: &object::File<'_>, target: u64) -> Option<Instruction> {
    let mut at = target;
    let mut left = BLOCK_REACH;
    // One `jmp` may lead there (a fall-through into a jump to a shared slow-path
    // block).
    let mut jumps = 1;
    'block: while left > 0 {
        let code = code_at(file, at, 64)?;
        let mut decoder = Decoder::with_ip(64, code, at, DecoderOptions::NONE);
        while left > 0 {
            if !decoder.can_decode() {
                return None;
            }
            let instr = decoder.decode();
            left -= 1;
            match instr.flow_control() {
                FlowControl::Next => continue,
                FlowControl::Call | FlowControl::IndirectCall => return Some(instr),
                FlowControl::UnconditionalBranch if jumps > 0 && instr.is_jmp_short_or_near() => {
                    jumps -= 1;
                    at = instr.near_branch_target();
                    continue 'block;
                }
                _ => return None,
            }
        }
    }
    None
}

/// Whether the code at `target` wakes a waiter of the lock within a few
/// instructions: calls or tail-jumps to `wake` (directly or through one of
/// `slots`), or makes the `futex` system call itself with `FUTEX_WAKE_PRIVATE`
/// (`wake` inlined: `mov edi, 202` … `mov edx, 0x81` … `call syscall`).
fn wakes_within(
    file: &object::File<'_>,
    target: u64,
    slots: &HashSet<u64>,
    loaded: &HashSet<Register>,
    wake: u64,
) -> bool {
    const SYS_FUTEX: u64 = 202;
    const FUTEX_WAKE_PRIVATE: u64 = 0x81;
    let Some(code) = code_at(file, target, 96) else {
        return false;
    };
    let mut decoder = Decoder::with_ip(64, code, target, DecoderOptions::NONE);
    let (mut futex, mut wake_op) = (false, false);
    for _ in 0..3 * BLOCK_REACH {
        if !decoder.can_decode() {
            return false;
        }
        let instr = decoder.decode();
        if instr.mnemonic() == Mnemonic::Mov && instr.op1_kind() == OpKind::Immediate32 {
            match (instr.op0_register(), instr.immediate(1)) {
                (Register::EDI, SYS_FUTEX) => futex = true,
                (Register::EDX, FUTEX_WAKE_PRIVATE) => wake_op = true,
                _ => {}
            }
        }
        let to_slot = through_slot(&instr, slots, loaded);
        match instr.flow_control() {
            FlowControl::Next => continue,
            FlowControl::Call | FlowControl::UnconditionalBranch => {
                return instr.near_branch_target() == wake;
            }
            // A call of `syscall`, or a tail jump to it.
            FlowControl::IndirectCall | FlowControl::IndirectBranch => {
                return to_slot || (futex && wake_op)
            }
            _ => return false,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `tests/programs/NAME.rs` built as a release binary with debug info in `dir`.
    fn release_build(dir: &Path, name: &str) -> std::path::PathBuf {
        let bin = dir.join(name);
        let status = std::process::Command::new("rustc")
            .args(["-O", "-g", "--edition", "2021", "-o"])
            .arg(&bin)
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../tests/programs/{name}.rs")))
            .status()
            .expect("run rustc");
        assert!(status.success());
        bin
    }

    #[test]
    fn a_release_build_gets_its_inlined_locks_unlocks_and_slow_return() {
        let dir = tempfile::tempdir().unwrap();
        let bin = release_build(dir.path(), "rust_locked_counter");
        let plan = plan_rust_locks(&bin).unwrap();
        // The worker's and main's `LOCK.lock()`, their guards' drops.
        assert!(plan.locks >= 2, "{plan:?}");
        assert!(plan.unlocks >= 2, "{plan:?}");
        let slow = plan
            .sites
            .iter()
            .filter(|s| s.access == SOFT_RUST_LOCK_SLOW)
            .count();
        // `lock_contended` returns once; `read_contended` (std's panic hook's
        // lock is an `RwLock`) may add its own.
        assert!((1..=2).contains(&slow), "{slow} slow-path returns");
        // A C program has none.
        let c = dir.path().join("c");
        std::fs::write(dir.path().join("c.c"), "int main(void) { return 0; }\n").unwrap();
        let status = std::process::Command::new("cc")
            .arg("-o")
            .arg(&c)
            .arg(dir.path().join("c.c"))
            .status()
            .unwrap();
        assert!(status.success());
        assert!(plan_rust_locks(&c).unwrap().sites.is_empty());
    }

    /// The condvar test program's `wait` and both notifies get one entry site
    /// each (std's inner notify is not seen twice), and its consumer loop's
    /// `je`-shaped acquisitions are found beside the `jne` ones; stripped of its
    /// symbols, the binary is told apart as a Rust one with nothing to find.
    #[test]
    fn condvar_functions_and_je_shaped_locks_of_a_release_build() {
        let dir = tempfile::tempdir().unwrap();
        let bin = release_build(dir.path(), "record_rust_condvar");
        let plan = plan_rust_locks(&bin).unwrap();
        let of = |access: u8| plan.sites.iter().filter(|s| s.access == access).count();
        assert_eq!(of(SOFT_RUST_COND_WAIT), 1, "{plan:?}");
        assert_eq!(of(SOFT_RUST_COND_SIGNAL), 1, "{plan:?}");
        assert_eq!(of(SOFT_RUST_COND_BROADCAST), 1, "{plan:?}");
        assert_eq!(plan.condvars, 3);
        let je = plan
            .sites
            .iter()
            .filter(|s| s.access == SOFT_RUST_LOCK_FAST)
            .filter(|s| s.bytes[0] == 0x74 || s.bytes[..2] == [0x0f, 0x84])
            .count();
        assert!(je >= 1, "no je-shaped acquisition: {plan:?}");
        assert!(!plan.stripped_rust);
        let stripped = dir.path().join("stripped");
        let status = std::process::Command::new("strip")
            .arg("-o")
            .arg(&stripped)
            .arg(&bin)
            .status()
            .unwrap();
        assert!(status.success());
        let plan = plan_rust_locks(&stripped).unwrap();
        assert!(plan.sites.is_empty() && plan.stripped_rust, "{plan:?}");
    }

    #[test]
    fn once_checks_completion_and_returns_of_a_release_build() {
        let dir = tempfile::tempdir().unwrap();
        let bin = release_build(dir.path(), "rust_once_init");
        let plan = plan_rust_locks(&bin).unwrap();
        let of = |access: u8| plan.sites.iter().filter(|s| s.access == access).count();
        // `call_once`, `get_or_init` and the `LazyLock`'s dereference, each inlined
        // once per loop body at least.
        assert!(plan.once_checks >= 3, "{plan:?}");
        assert_eq!(of(SOFT_RUST_ONCE_LOAD), of(SOFT_RUST_ONCE_CHECK));
        assert!(plan.once_call, "{plan:?}");
        assert_eq!(of(SOFT_RUST_ONCE_ENTER), 1);
        assert!(of(SOFT_RUST_ONCE_LEAVE) >= 1);
        assert!(of(SOFT_RUST_ONCE_DONE) >= 1, "the completion guard's store");
        // Checks the jump patch can replace: the load, the test and the branch.
        let patched = plan
            .sites
            .iter()
            .filter(|s| s.access == SOFT_RUST_ONCE_CHECK && s.patch >= 5)
            .count();
        assert!(patched >= 3, "{plan:?}");
    }

    #[test]
    fn unpark_and_park_of_a_release_build() {
        let dir = tempfile::tempdir().unwrap();
        let bin = release_build(dir.path(), "rust_park_handoff");
        let plan = plan_rust_locks(&bin).unwrap();
        let of = |access: u8| plan.sites.iter().filter(|s| s.access == access).count();
        // `worker.thread().unpark()` in `main`, inlined.
        assert!(plan.unparks >= 1, "{plan:?}");
        assert!(plan.parks >= 1, "{plan:?}");
        assert!(of(SOFT_RUST_PARK_TOKEN) >= 1, "{plan:?}");
        assert!(of(SOFT_RUST_PARK_LEAVE) >= 1, "{plan:?}");
        assert!(
            plan.sites
                .iter()
                .any(|s| s.access == SOFT_RUST_UNPARK && s.patch >= 5),
            "an unpark the jump patch can replace: {plan:?}"
        );
    }

    #[test]
    fn try_read_and_try_write_of_a_release_build() {
        let dir = tempfile::tempdir().unwrap();
        let bin = release_build(dir.path(), "rust_try_rwlock");
        let plan = plan_rust_locks(&bin).unwrap();
        let of = |access: u8| plan.sites.iter().filter(|s| s.access == access).count();
        // `attempt_read`'s `try_read` and `attempt_write`'s `try_write`.
        assert_eq!(plan.rw_tries, 2, "{plan:?}");
        for access in [
            SOFT_RUST_TRY_READ_FAST,
            SOFT_RUST_TRY_READ_CHECK,
            SOFT_RUST_TRY_WRITE_FAST,
            SOFT_RUST_TRY_WRITE_CHECK,
        ] {
            assert_eq!(of(access), 1, "{access:#x}: {plan:?}");
        }
        // A check's site names the loop's lock word, as its `cmpxchg`'s does.
        let check = plan
            .sites
            .iter()
            .find(|s| s.access == SOFT_RUST_TRY_READ_CHECK)
            .unwrap();
        let fast = plan
            .sites
            .iter()
            .find(|s| s.access == SOFT_RUST_TRY_READ_FAST)
            .unwrap();
        assert_eq!((check.base, check.disp), (fast.base, fast.disp));
        // Their releases, though no blocking `write()` is inlined anywhere but main.
        assert!(plan.rw_unlocks >= 2, "{plan:?}");
    }

    #[test]
    fn channel_sends_and_receives_of_a_release_build() {
        let dir = tempfile::tempdir().unwrap();
        let bin = release_build(dir.path(), "rust_channel_handoff");
        let plan = plan_rust_locks(&bin).unwrap();
        // A `send` and a `recv` of each flavor used: `list` for u8 and [u64; 16],
        // `array` and `zero` for usize (and some `try_send`s, `try_recv`s).
        assert!(plan.sends >= 4 && plan.receives >= 4, "{plan:?}");
        let entries = |access: u8| -> Vec<u8> {
            plan.sites
                .iter()
                .filter(|s| s.access == access)
                .map(|s| s.base)
                .collect()
        };
        let sends = entries(SOFT_RUST_CHAN_SEND);
        let receives = entries(SOFT_RUST_CHAN_RECV);
        // The large message's `send` returns its result through memory: its
        // channel is in `rsi`; the small ones' in `rdi`.
        assert!(
            sends.contains(&reg::RDI) && sends.contains(&reg::RSI),
            "{sends:?}"
        );
        assert!(receives.contains(&reg::RSI), "{receives:?}");
        assert!(
            plan.sites
                .iter()
                .filter(|s| s.access == SOFT_RUST_CHAN_RECEIVED)
                .count()
                >= 4
        );
    }

    #[test]
    fn try_lock_and_its_unlock_of_a_release_build() {
        let dir = tempfile::tempdir().unwrap();
        let bin = release_build(dir.path(), "rust_try_locked_counter");
        let plan = plan_rust_locks(&bin).unwrap();
        let of = |access: u8| plan.sites.iter().filter(|s| s.access == access).count();
        // `attempt`'s `LOCK.try_lock()`; main's `LOCK.lock()` is no try.
        assert_eq!(plan.try_locks, 1, "{plan:?}");
        assert_eq!(of(SOFT_RUST_TRY_GATE), 1);
        assert_eq!(of(SOFT_RUST_TRY_FAST), 1);
        // The guard's drops in `attempt` (one keeps a result in a register
        // between the `xchg` and the `cmp`) and main's.
        assert!(plan.unlocks >= 3, "{plan:?}");
    }

    #[test]
    fn the_mutex_slow_paths_are_named_by_either_mangling() {
        assert!(is_mutex_fn(
            "<std::sys::sync::mutex::futex::Mutex>::lock_contended",
            "lock_contended"
        ));
        assert!(is_mutex_fn(
            "std::sys::sync::mutex::futex::Mutex::wake",
            "wake"
        ));
        assert!(!is_mutex_fn(
            "<std::sys::sync::rwlock::futex::RwLock>::wake_writer_or_readers",
            "wake"
        ));
    }
}
