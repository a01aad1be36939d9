//! ordo's eBPF programs: the kernel side of the recorder.
//!
//! Two generic uprobe programs (entry and return) serve every probed libc function:
//! the attach cookie says which operation the function performs (see
//! `ordo_probe_common::op`), so the probe table lives in user space and probe
//! placement stays data-driven. `task:task_newtask` records thread creation (and
//! counts child processes), the raw `sched_process_exec` and `sched_process_exit`
//! tracepoints count execs and record thread exits, and on the eBPF path only the
//! `syscalls:sys_{enter,exit}_futex` tracepoints record direct futex calls: none of
//! these but the last sends the system's syscalls through the kernel's tracing path.
//! Raw `sys_enter`/`sys_exit` tracepoints, which run on every syscall, are the
//! fallback where tracefs is missing (they read clone and exec there). Every record goes through one ring
//! buffer; a full buffer bumps a per-CPU drop counter instead of losing the event
//! silently.
#![cfg_attr(target_arch = "bpf", no_std, no_main)]
// The bpf target has no AtomicU64::fetch_add; the intrinsic lowers to BPF_ATOMIC|BPF_FETCH.
// It must be SeqCst: LLVM 22's BPF backend lowers a *relaxed* fetch-add to a plain
// `lock +=` and returns the addend instead of the old value (seen here: every
// sequence number came out as 1).
#![cfg_attr(target_arch = "bpf", feature(core_intrinsics))]
#![cfg_attr(target_arch = "bpf", allow(internal_features))]

#[cfg(not(target_arch = "bpf"))]
fn main() {}

#[cfg(target_arch = "bpf")]
mod programs {
    use core::intrinsics::{atomic_xadd, AtomicOrdering};

    use aya_ebpf::{
        bindings::{
            pt_regs, BPF_NOEXIST, BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP,
            BPF_RB_RING_SIZE,
        },
        helpers::{
            bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_ktime_get_ns,
            bpf_probe_read_kernel, bpf_probe_read_user, generated::bpf_get_attach_cookie,
        },
        macros::{map, perf_event, raw_tracepoint, tracepoint, uprobe, uretprobe},
        maps::{Array, HashMap, LruHashMap, PerCpuArray, RingBuf},
        programs::{
            PerfEventContext, ProbeContext, RawTracePointContext, RetProbeContext,
            TracePointContext,
        },
        EbpfContext,
    };
    use ordo_probe_common::{
        config, cookie_op, cookie_via, kind, op, outcome, reg, site_action, stash_key, sysno, via,
        Outcome, ProbeSite, RawEvent, Stash, WatchSite, CLONE_THREAD, CLONE_UNTRACED,
        HW_WATCH_ATOMIC, MAX_PROBE_SITES, MAX_WATCH_SITES, SEQ_COUNTERS, STASH_ENTRIES,
    };

    /// The event stream. User space sets the real size before loading.
    #[map(name = "EVENTS")]
    static EVENTS: RingBuf = RingBuf::with_byte_size(1 << 22, 0);

    /// Events that did not fit in `EVENTS`, per CPU.
    #[map(name = "DROPS")]
    static DROPS: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

    /// Successful execs by the target, per CPU (reported in the summary).
    #[map(name = "EXECS")]
    static EXECS: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

    /// Child processes the target started, per CPU (not followed: the summary says so).
    #[map(name = "FORKS")]
    static FORKS: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

    /// Settings written by user space (see `ordo_probe_common::config`).
    #[map(name = "CONFIG")]
    static CONFIG: Array<u64> = Array::with_max_entries(config::LEN, 0);

    /// Arguments saved at function entry for the return probe.
    #[map(name = "STASH")]
    static STASH: LruHashMap<u64, Stash> = LruHashMap::with_max_entries(STASH_ENTRIES, 0);

    /// Per-object sequence counters.
    #[map(name = "SEQ")]
    static SEQ: LruHashMap<u64, u64> = LruHashMap::with_max_entries(SEQ_COUNTERS, 0);

    /// Counters created in `SEQ`, per CPU: more than it holds means some were evicted.
    #[map(name = "SEQ_CREATED")]
    static SEQ_CREATED: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

    /// Instructions that may access watched variables (index = uprobe cookie), with
    /// link-time addresses: the probe relocates them by its own load bias.
    #[map(name = "WATCH_SITES")]
    static WATCH_SITES: Array<WatchSite> = Array::with_max_entries(MAX_WATCH_SITES, 0);

    /// Probes placed inside acquisition functions (index = uprobe cookie of `ordo_site`).
    #[map(name = "PROBE_SITES")]
    static PROBE_SITES: Array<ProbeSite> = Array::with_max_entries(MAX_PROBE_SITES, 0);

    /// Hardware-watched runtime addresses → access size, with `HW_WATCH_ATOMIC`
    /// for variables of atomic type.
    #[map(name = "HW_WATCHES")]
    static HW_WATCHES: HashMap<u64, u64> = HashMap::with_max_entries(8, 0);

    /// Internal stash slot for a thread-creating clone in flight.
    const CLONE_SLOT: u8 = 0xf0;

    /// The next sequence number of `addr`. The atomic add makes concurrent events on
    /// one object (readers, posts, wakes) get distinct numbers in the order they ran.
    #[inline(always)]
    fn next_seq(addr: u64) -> u64 {
        if let Some(counter) = SEQ.get_ptr_mut(&addr) {
            // SAFETY: map values are 8-byte aligned and live while the program runs.
            return unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::SeqCst }>(counter, 1) };
        }
        if SEQ.insert(&addr, &1, BPF_NOEXIST as u64).is_ok() {
            if let Some(created) = SEQ_CREATED.get_ptr_mut(0) {
                // SAFETY: per-CPU slot, only this CPU writes it while the program runs.
                unsafe { *created += 1 };
            }
            return 0;
        }
        // Another CPU created the counter between our lookup and insert.
        match SEQ.get_ptr_mut(&addr) {
            Some(counter) => unsafe {
                atomic_xadd::<u64, u64, { AtomicOrdering::SeqCst }>(counter, 1)
            },
            None => 0,
        }
    }

    /// Whether user space has switched recording on (`config::ENABLED`): every
    /// program returns at once while it is off.
    #[inline(always)]
    fn recording_on() -> bool {
        CONFIG.get(config::ENABLED).is_some_and(|v| *v != 0)
    }

    #[inline(always)]
    fn target_tgid() -> u32 {
        CONFIG.get(config::TARGET_TGID).copied().unwrap_or(0) as u32
    }

    #[inline(always)]
    fn current_tid() -> u32 {
        bpf_get_current_pid_tgid() as u32
    }

    #[inline(always)]
    fn count_drop() {
        if let Some(counter) = DROPS.get_ptr_mut(0) {
            // SAFETY: per-CPU slot, only this CPU writes it while the program runs.
            unsafe { *counter += 1 };
        }
    }

    /// How to submit a record: wake the drain only once the ring buffer is a quarter
    /// full (or at once while user space asks for it, see `config::WAKE_EACH`). The drain polls every 10 ms anyway; waking it for every record that finds
    /// it idle (the kernel's default) cost a context switch per handful of events and
    /// made the recorder's CPU per event several microseconds.
    #[inline(always)]
    fn wakeup_flags() -> u64 {
        if CONFIG.get(config::WAKE_EACH).copied().unwrap_or(0) != 0 {
            return BPF_RB_FORCE_WAKEUP as u64;
        }
        let pending = EVENTS.query(BPF_RB_AVAIL_DATA as u64);
        let size = EVENTS.query(BPF_RB_RING_SIZE as u64);
        if pending >= size / 4 {
            BPF_RB_FORCE_WAKEUP as u64
        } else {
            BPF_RB_NO_WAKEUP as u64
        }
    }

    /// Writes one record; on a full ring buffer, counts a drop.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn emit(
        kind: u16,
        via: u8,
        addr: u64,
        addr2: u64,
        site: u64,
        seq: u64,
        result: i64,
        value: u64,
    ) {
        match EVENTS.reserve::<RawEvent>(0) {
            Some(mut entry) => {
                entry.write(RawEvent {
                    ts_ns: unsafe { bpf_ktime_get_ns() },
                    seq,
                    addr,
                    addr2,
                    site,
                    result,
                    value,
                    tid: current_tid(),
                    kind,
                    via,
                    size: 0,
                    name: [0; 16],
                });
                entry.submit(wakeup_flags());
            }
            None => count_drop(),
        }
    }

    /// Writes a thread lifecycle record of the calling thread, which carries the
    /// thread's name.
    #[inline(always)]
    fn emit_thread(kind: u16, value: u64) {
        emit_thread_of(
            current_tid(),
            kind,
            value,
            bpf_get_current_comm().unwrap_or([0; 16]),
        );
    }

    /// Writes a thread lifecycle record of thread `tid`, named `name`.
    #[inline(always)]
    fn emit_thread_of(tid: u32, kind: u16, value: u64, name: [u8; 16]) {
        match EVENTS.reserve::<RawEvent>(0) {
            Some(mut entry) => {
                entry.write(RawEvent {
                    ts_ns: unsafe { bpf_ktime_get_ns() },
                    value,
                    tid,
                    kind,
                    name,
                    ..RawEvent::default()
                });
                entry.submit(wakeup_flags());
            }
            None => count_drop(),
        }
    }

    #[inline(always)]
    fn stash(tid: u32, op: u8, value: Stash) {
        let _ = STASH.insert(&stash_key(tid, op), &value, 0);
    }

    #[inline(always)]
    fn take_stash(tid: u32, op: u8) -> Option<Stash> {
        let key = stash_key(tid, op);
        // SAFETY: the value is copied out before the entry is removed.
        let value = unsafe { STASH.get(&key) }.copied();
        if value.is_some() {
            let _ = STASH.remove(&key);
        }
        value
    }

    #[uprobe]
    pub fn ordo_entry(ctx: ProbeContext) -> u32 {
        if !recording_on() {
            return 0;
        }
        on_entry(&ctx);
        0
    }

    #[inline(always)]
    fn on_entry(ctx: &ProbeContext) {
        // SAFETY: the context pointer is the program's own.
        let cookie = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) };
        let (op, via_) = (cookie_op(cookie), cookie_via(cookie));
        let tid = current_tid();
        let a0: u64 = ctx.arg(0).unwrap_or(0);
        let a1: u64 = ctx.arg(1).unwrap_or(0);
        // SAFETY: `regs` is the probe's register frame.
        let rsp = unsafe { (*ctx.regs).rsp };
        // At a function's first instruction the return address is on top of the stack.
        let site = unsafe { bpf_probe_read_user(rsp as *const u64) }.unwrap_or(0);
        let saved = Stash {
            addr: a0,
            addr2: a1,
            site,
            value: 0,
        };
        match op {
            op::MUTEX_ACQUIRE
            | op::RWLOCK_READ
            | op::RWLOCK_WRITE
            | op::SEM_WAIT
            | op::THREAD_CREATE
            | op::THREAD_JOIN => stash(tid, op, saved),
            op::MUTEX_RELEASE => emit(kind::MUTEX_UNLOCK, via_, a0, 0, site, next_seq(a0), 0, 0),
            op::RWLOCK_RELEASE => emit(kind::RWLOCK_UNLOCK, via_, a0, 0, site, next_seq(a0), 0, 0),
            op::COND_WAIT => {
                emit(
                    kind::COND_WAIT_BEGIN,
                    via_,
                    a0,
                    a1,
                    site,
                    next_seq(a0),
                    0,
                    0,
                );
                emit(
                    kind::MUTEX_UNLOCK,
                    via::COND_WAIT,
                    a1,
                    a0,
                    site,
                    next_seq(a1),
                    0,
                    0,
                );
                stash(tid, op, saved);
            }
            op::COND_SIGNAL => emit(kind::COND_SIGNAL, via_, a0, 0, site, next_seq(a0), 0, 0),
            op::COND_BROADCAST => emit(kind::COND_BROADCAST, via_, a0, 0, site, next_seq(a0), 0, 0),
            op::SEM_POST => emit(kind::SEM_POST, via_, a0, 0, site, next_seq(a0), 0, 0),
            op::BARRIER_WAIT => {
                emit(kind::BARRIER_ARRIVE, via_, a0, 0, site, next_seq(a0), 0, 0);
                stash(tid, op, saved);
            }
            op::SYSCALL_FN => {
                if a0 == sysno::FUTEX {
                    stash(tid, op, saved);
                }
            }
            _ => {}
        }
    }

    #[uretprobe]
    pub fn ordo_return(ctx: RetProbeContext) -> u32 {
        if !recording_on() {
            return 0;
        }
        on_return(&ctx);
        0
    }

    #[inline(always)]
    fn on_return(ctx: &RetProbeContext) {
        // SAFETY: the context pointer is the program's own.
        let cookie = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) };
        let (op, via_) = (cookie_op(cookie), cookie_via(cookie));
        let tid = current_tid();
        let Some(saved) = take_stash(tid, op) else {
            return;
        };
        // Every probed function returns a C int: sign-extend eax
        // (PTHREAD_BARRIER_SERIAL_THREAD is -1).
        let ret = ctx.ret::<i64>() as i32 as i64;
        report_result(op, via_, &saved, ret);
    }

    /// Emits what a finished call did, given its saved arguments and its result.
    #[inline(always)]
    fn report_result(op: u8, via_: u8, saved: &Stash, ret: i64) {
        let ok = ret == 0;
        let (a, site) = (saved.addr, saved.site);
        match op {
            op::MUTEX_ACQUIRE => {
                if ok {
                    emit(kind::MUTEX_LOCK, via_, a, 0, site, next_seq(a), 0, 0)
                } else {
                    emit(kind::MUTEX_LOCK_FAILED, via_, a, 0, site, 0, ret, 0)
                }
            }
            op::RWLOCK_READ | op::RWLOCK_WRITE => {
                let acquired = if op == op::RWLOCK_READ {
                    kind::RWLOCK_RDLOCK
                } else {
                    kind::RWLOCK_WRLOCK
                };
                if ok {
                    emit(acquired, via_, a, 0, site, next_seq(a), 0, 0)
                } else {
                    emit(kind::RWLOCK_LOCK_FAILED, via_, a, 0, site, 0, ret, 0)
                }
            }
            op::SEM_WAIT => {
                if ok {
                    emit(kind::SEM_WAIT, via_, a, 0, site, next_seq(a), 0, 0)
                } else {
                    emit(kind::SEM_WAIT_FAILED, via_, a, 0, site, 0, ret, 0)
                }
            }
            op::COND_WAIT => {
                emit(
                    kind::COND_WAIT,
                    via_,
                    a,
                    saved.addr2,
                    site,
                    next_seq(a),
                    ret,
                    0,
                );
                let m = saved.addr2;
                emit(
                    kind::MUTEX_LOCK,
                    via::COND_WAIT,
                    m,
                    a,
                    site,
                    next_seq(m),
                    0,
                    0,
                );
            }
            op::BARRIER_WAIT => emit(kind::BARRIER_WAIT, via_, a, 0, site, next_seq(a), ret, 0),
            op::THREAD_CREATE => {
                // arg0 was `pthread_t *`; on success the handle has been stored there.
                let handle = unsafe { bpf_probe_read_user(a as *const u64) }.unwrap_or(0);
                emit(
                    kind::THREAD_CREATE,
                    via_,
                    handle,
                    0,
                    site,
                    0,
                    ret,
                    saved.value,
                )
            }
            op::THREAD_JOIN => emit(kind::THREAD_JOIN, via_, a, 0, site, 0, ret, 0),
            _ => {}
        }
    }

    /// A probe placed inside an acquisition function (see the recorder's
    /// `probes::placement`): at the last conditional jump before a return it reports
    /// the outcome of the direction the jump will take; at a lock-wait call it reports
    /// that the thread blocks. One trap on an emulated instruction, no return probe.
    #[uprobe]
    pub fn ordo_site(ctx: ProbeContext) -> u32 {
        if !recording_on() {
            return 0;
        }
        // SAFETY: the context pointer is the program's own.
        let index = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) } as u32;
        let Some(site) = PROBE_SITES.get(index) else {
            return 0;
        };
        let regs = ctx.regs as *const pt_regs;
        let rsp = gp_register(regs, reg::RSP);
        let addr = if site.arg_reg == reg::RSP {
            unsafe { bpf_probe_read_user((rsp as i64 + site.arg_disp as i64) as *const u64) }
                .unwrap_or(0)
        } else {
            gp_register(regs, site.arg_reg)
        };
        let call_site =
            unsafe { bpf_probe_read_user((rsp + site.depth as u64) as *const u64) }.unwrap_or(0);
        if site.action == site_action::BLOCK {
            emit(kind::MUTEX_BLOCK, site.via, addr, 0, call_site, 0, 0, 0);
            return 0;
        }
        let chosen = if site.cond == reg::NONE {
            &site.taken
        } else {
            // SAFETY: `regs` is the probe's register frame.
            let flags = unsafe { (*regs).eflags };
            if condition_holds(site.cond, flags) {
                &site.taken
            } else {
                &site.fallthrough
            }
        };
        let Some(ret) = outcome_value(chosen, regs) else {
            return 0;
        };
        let saved = Stash {
            addr,
            addr2: 0,
            site: call_site,
            value: 0,
        };
        report_result(site.op, site.via, &saved, ret);
        0
    }

    /// A uprobe that does nothing: the baseline the cost of a probe site is measured
    /// against (`cargo run -p ordo-recorder --example empty_probes`).
    #[uprobe]
    pub fn ordo_empty(_ctx: ProbeContext) -> u32 {
        0
    }

    /// Whether an x86 conditional jump with condition `cc` (0 = O … 15 = G) is taken.
    #[inline(always)]
    fn condition_holds(cc: u8, flags: u64) -> bool {
        let cf = flags & 1 != 0;
        let pf = flags & (1 << 2) != 0;
        let zf = flags & (1 << 6) != 0;
        let sf = flags & (1 << 7) != 0;
        let of = flags & (1 << 11) != 0;
        let base = match cc >> 1 {
            0 => of,
            1 => cf,
            2 => zf,
            3 => cf || zf,
            4 => sf,
            5 => pf,
            6 => sf != of,
            _ => zf || sf != of,
        };
        base != (cc & 1 != 0)
    }

    /// The function's result for a direction, or None when it records nothing.
    #[inline(always)]
    fn outcome_value(o: &Outcome, regs: *const pt_regs) -> Option<i64> {
        match o.kind {
            outcome::CONST => Some(o.value as i64),
            outcome::REG => Some(gp_register(regs, o.reg) as i32 as i64),
            outcome::NONZERO_SHL => {
                let nonzero = (gp_register(regs, o.reg) as u32 != 0) as i64;
                Some(nonzero << (o.shift & 31))
            }
            _ => None,
        }
    }

    /// A general-purpose register of the probed thread by `ordo_probe_common::reg` number.
    #[inline(always)]
    fn gp_register(regs: *const pt_regs, number: u8) -> u64 {
        // SAFETY: `regs` is the probe context; each arm reads one field at a constant offset.
        unsafe {
            (match number {
                reg::RAX => (*regs).rax,
                reg::RBX => (*regs).rbx,
                reg::RCX => (*regs).rcx,
                reg::RDX => (*regs).rdx,
                reg::RSI => (*regs).rsi,
                reg::RDI => (*regs).rdi,
                reg::RBP => (*regs).rbp,
                reg::RSP => (*regs).rsp,
                reg::R8 => (*regs).r8,
                reg::R9 => (*regs).r9,
                reg::R10 => (*regs).r10,
                reg::R11 => (*regs).r11,
                reg::R12 => (*regs).r12,
                reg::R13 => (*regs).r13,
                reg::R14 => (*regs).r14,
                reg::R15 => (*regs).r15,
                reg::RIP => (*regs).rip,
                _ => 0,
            }) as u64
        }
    }

    #[inline(always)]
    fn mask(value: u64, size: u8) -> u64 {
        if size >= 8 {
            value
        } else {
            value & ((1u64 << (size as u64 * 8)) - 1)
        }
    }

    /// Reads `size` (≤ 8) bytes of user memory at `addr`. Each arm reads a constant
    /// size, which the verifier can check against the buffer.
    #[inline(always)]
    fn read_user_value(addr: u64, size: u8) -> u64 {
        // SAFETY: reads of user memory through the checked helper.
        unsafe {
            match size {
                1 => bpf_probe_read_user(addr as *const u8).map(u64::from),
                2 => bpf_probe_read_user(addr as *const u16).map(u64::from),
                4 => bpf_probe_read_user(addr as *const u32).map(u64::from),
                _ => bpf_probe_read_user(addr as *const u64),
            }
        }
        .unwrap_or(0)
    }

    /// An instruction that may touch a watched variable is about to run.
    #[uprobe]
    pub fn ordo_watch(ctx: ProbeContext) -> u32 {
        if !recording_on() {
            return 0;
        }
        // SAFETY: the context pointer is the program's own.
        let index = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) } as u32;
        let Some(site) = WATCH_SITES.get(index) else {
            return 0;
        };
        let regs = ctx.regs as *const pt_regs;
        let ip = gp_register(regs, reg::RIP);
        // The probe sits on the instruction itself, so rip minus its link-time address
        // is the module's load bias.
        let bias = ip.wrapping_sub(site.ip);
        let rip_relative = site.base == reg::NONE && site.index == reg::NONE;
        let ea = if rip_relative {
            (site.disp as u64).wrapping_add(bias)
        } else {
            let base = if site.base == reg::NONE {
                0
            } else {
                gp_register(regs, site.base)
            };
            let index_value = if site.index == reg::NONE {
                0
            } else {
                gp_register(regs, site.index)
            };
            base.wrapping_add(index_value.wrapping_mul(site.scale as u64))
                .wrapping_add(site.disp as u64)
        };
        // `ptr->field`: the watched bytes move with the pointer, whose value the
        // base register holds here.
        let watch = if site.relative != 0 {
            gp_register(regs, site.base).wrapping_add(site.watch_addr)
        } else {
            site.watch_addr.wrapping_add(bias)
        };
        // Confirm the access really reaches the watched bytes.
        if ea >= watch + site.watch_len as u64 || ea + site.size as u64 <= watch {
            return 0;
        }
        let value = if site.access == kind::WRITE as u8 && site.value_is_imm != 0 {
            site.imm
        } else if site.value_reg != reg::NONE {
            // A write's source register, or the register an atomic load (probed
            // after it) loaded into.
            gp_register(regs, site.value_reg)
        } else {
            // Reads and read-modify-writes: the value before the instruction runs.
            read_user_value(ea, site.size)
        };
        let seq = next_seq(watch);
        match EVENTS.reserve::<RawEvent>(0) {
            Some(mut entry) => {
                entry.write(RawEvent {
                    ts_ns: unsafe { bpf_ktime_get_ns() },
                    seq,
                    // The variable (its start), so all accesses to it share one
                    // sequence; addr2 is the exact byte address accessed.
                    addr: watch,
                    addr2: ea,
                    // The probe may sit next to a lock-prefixed access (the kernel
                    // refuses uprobes on those); `_pad` holds the signed distance.
                    site: ip.wrapping_add(site._pad as i8 as i64 as u64),
                    value: mask(value, site.size),
                    tid: current_tid(),
                    kind: site.access as u16,
                    via: site.via,
                    size: site.size,
                    ..RawEvent::default()
                });
                entry.submit(wakeup_flags());
            }
            None => count_drop(),
        }
        0
    }

    /// A hardware data breakpoint fired (after the read or write: x86 breakpoints
    /// trap after the access, with rip at the next instruction). Breakpoints are per
    /// CPU and system-wide, so new threads are covered from their first instruction;
    /// other processes are filtered out here. The kind is left to the recorder
    /// (`via::TRAP`), which decodes the instruction that ends at rip.
    #[perf_event]
    pub fn ordo_hw_watch(ctx: PerfEventContext) -> u32 {
        if !recording_on() {
            return 0;
        }
        if (bpf_get_current_pid_tgid() >> 32) as u32 != target_tgid() {
            return 0;
        }
        // SAFETY: the perf event context is the program's own.
        let (addr, ip) = unsafe { ((*ctx.ctx).addr, (*ctx.ctx).regs.rip as u64) };
        // SAFETY: copied out immediately.
        let Some(entry) = (unsafe { HW_WATCHES.get(&addr) }).copied() else {
            return 0;
        };
        let size = entry & 0xff;
        let trap = if entry & HW_WATCH_ATOMIC != 0 {
            via::TRAP_ATOMIC
        } else {
            via::TRAP
        };
        // Kernel-mode writes to the page (exec loading the binary, a read(2) into the
        // variable) are not the program's accesses.
        if ip >= 0xffff_8000_0000_0000 {
            return 0;
        }
        let value = read_user_value(addr, size as u8);
        let seq = next_seq(addr);
        match EVENTS.reserve::<RawEvent>(0) {
            Some(mut entry) => {
                entry.write(RawEvent {
                    ts_ns: unsafe { bpf_ktime_get_ns() },
                    seq,
                    addr,
                    addr2: addr,
                    site: ip,
                    value: mask(value, size as u8),
                    tid: current_tid(),
                    kind: kind::WRITE,
                    via: trap,
                    size: size as u8,
                    ..RawEvent::default()
                });
                entry.submit(wakeup_flags());
            }
            None => count_drop(),
        }
        0
    }

    #[inline(always)]
    fn read_reg(regs: *const pt_regs, field: fn(*const pt_regs) -> *const u64) -> u64 {
        unsafe { bpf_probe_read_kernel(field(regs)) }.unwrap_or(0)
    }

    fn is_futex_wait(cmd: u64) -> bool {
        // FUTEX_WAIT, FUTEX_LOCK_PI, FUTEX_TRYLOCK_PI, FUTEX_WAIT_BITSET,
        // FUTEX_WAIT_REQUEUE_PI, FUTEX_LOCK_PI2
        matches!(cmd, 0 | 6 | 8 | 9 | 11 | 13)
    }

    /// A syscall's entry as the target's thread `tid` makes it: `arg(i)` reads its
    /// i-th argument (only futex and clone calls are looked at).
    #[inline(always)]
    fn on_sys_enter(tid: u32, id: u64, arg: impl Fn(usize) -> u64) {
        if id == sysno::FUTEX {
            // Only futex calls made through libc's syscall() (Rust std, C++ atomic
            // wait) were marked; glibc's own pthread internals are already covered by
            // the pthread probes.
            let key = stash_key(tid, op::SYSCALL_FN);
            if let Some(saved) = STASH.get_ptr_mut(&key) {
                let uaddr = arg(0);
                let futex_op = arg(1);
                let val = arg(2);
                let cmd = futex_op & 0x7f;
                // SAFETY: the map value lives while the program runs.
                unsafe {
                    (*saved).addr = uaddr;
                    (*saved).addr2 = cmd | (val << 8);
                    // A wake must take its sequence number before it takes effect.
                    (*saved).value = if is_futex_wait(cmd) {
                        0
                    } else {
                        next_seq(uaddr)
                    };
                }
            }
        } else if id == sysno::CLONE || id == sysno::CLONE3 {
            let arg0 = arg(0);
            let flags = if id == sysno::CLONE {
                arg0
            } else {
                unsafe { bpf_probe_read_user(arg0 as *const u64) }.unwrap_or(0)
            };
            if flags & CLONE_THREAD != 0 {
                stash(tid, CLONE_SLOT, Stash::default());
            }
        }
    }

    /// A syscall's return to the target's thread `tid` with `ret` (a new thread's
    /// first return from clone included).
    #[inline(always)]
    fn on_sys_exit(tid: u32, id: u64, ret: i64) {
        if id == sysno::FUTEX {
            let Some(saved) = take_stash(tid, op::SYSCALL_FN) else {
                return;
            };
            let cmd = saved.addr2 & 0xff;
            let val = saved.addr2 >> 8;
            if is_futex_wait(cmd) {
                let seq = next_seq(saved.addr);
                emit(
                    kind::FUTEX_WAIT,
                    0,
                    saved.addr,
                    cmd,
                    saved.site,
                    seq,
                    ret,
                    val,
                );
            } else {
                emit(
                    kind::FUTEX_WAKE,
                    0,
                    saved.addr,
                    cmd,
                    saved.site,
                    saved.value,
                    ret,
                    val,
                );
            }
        } else if (id == sysno::EXECVE || id == sysno::EXECVEAT) && ret == 0 {
            // Returning into the new image (same tgid).
            if let Some(counter) = EXECS.get_ptr_mut(0) {
                // SAFETY: per-CPU slot, only this CPU writes it while the program runs.
                unsafe { *counter += 1 };
            }
        } else if id == sysno::CLONE || id == sysno::CLONE3 {
            if ret == 0 {
                // The new thread's first return to user space.
                emit_thread(kind::THREAD_START, 0);
            } else if ret > 0 && take_stash(tid, CLONE_SLOT).is_some() {
                let key = stash_key(tid, op::THREAD_CREATE);
                match STASH.get_ptr_mut(&key) {
                    // pthread_create's return probe reports it, with the handle.
                    Some(pending) => unsafe { (*pending).value = ret as u64 },
                    None => emit(kind::THREAD_CREATE, 0, 0, 0, 0, 0, 0, ret as u64),
                }
            } else if ret > 0 {
                // A clone without CLONE_THREAD: a child process (fork, posix_spawn).
                count_fork();
            }
        } else if (id == sysno::FORK || id == sysno::VFORK) && ret > 0 {
            count_fork();
        }
    }

    /// The calling thread, when it belongs to the target and recording is on.
    #[inline(always)]
    fn target_thread() -> Option<u32> {
        if !recording_on() {
            return None;
        }
        let pid_tgid = bpf_get_current_pid_tgid();
        ((pid_tgid >> 32) as u32 == target_tgid()).then_some(pid_tgid as u32)
    }

    /// Every syscall's entry (the fallback when the per-syscall tracepoints below
    /// cannot be attached: it runs on every syscall of every process).
    #[raw_tracepoint(tracepoint = "sys_enter")]
    pub fn ordo_sys_enter(ctx: RawTracePointContext) -> i32 {
        let Some(tid) = target_thread() else {
            return 0;
        };
        let regs: *const pt_regs = ctx.arg(0);
        let id: u64 = ctx.arg(1);
        on_sys_enter(tid, id, |i| match i {
            0 => read_reg(regs, |r| unsafe { &raw const (*r).rdi } as *const u64),
            1 => read_reg(regs, |r| unsafe { &raw const (*r).rsi } as *const u64),
            _ => read_reg(regs, |r| unsafe { &raw const (*r).rdx } as *const u64),
        });
        0
    }

    /// Every syscall's exit (fallback, as `ordo_sys_enter`).
    #[raw_tracepoint(tracepoint = "sys_exit")]
    pub fn ordo_sys_exit(ctx: RawTracePointContext) -> i32 {
        let Some(tid) = target_thread() else {
            return 0;
        };
        let regs: *const pt_regs = ctx.arg(0);
        let ret: i64 = ctx.arg(1);
        let id = read_reg(regs, |r| unsafe { &raw const (*r).orig_rax } as *const u64);
        on_sys_exit(tid, id, ret);
        0
    }

    /// The entry of the syscalls ordo looks at, one `syscalls:sys_enter_*`
    /// tracepoint each: other syscalls run no BPF at all (the raw `sys_enter` cost
    /// memcached ~4 % of its CPU). Layout: `__syscall_nr` at 8, arguments from 16.
    #[tracepoint]
    pub fn ordo_syscall_enter(ctx: TracePointContext) -> i32 {
        let Some(tid) = target_thread() else {
            return 0;
        };
        let id = unsafe { ctx.read_at::<i32>(8) }.unwrap_or(-1) as u64;
        on_sys_enter(tid, id, |i| {
            unsafe { ctx.read_at::<u64>(16 + 8 * i) }.unwrap_or(0)
        });
        0
    }

    /// The exit of the syscalls ordo looks at (`syscalls:sys_exit_*`): `ret` at 16.
    #[tracepoint]
    pub fn ordo_syscall_exit(ctx: TracePointContext) -> i32 {
        let Some(tid) = target_thread() else {
            return 0;
        };
        let id = unsafe { ctx.read_at::<i32>(8) }.unwrap_or(-1) as u64;
        let ret = unsafe { ctx.read_at::<i64>(16) }.unwrap_or(0);
        on_sys_exit(tid, id, ret);
        0
    }

    /// A task the target made (`task:task_newtask`, in the creating thread, once
    /// the new task exists and before it runs; layout: `pid` at 8, `comm` at 12,
    /// `clone_flags` at 32). A thread: its creation in the creator's stream and its
    /// start in its own, both stamped now, which precedes anything the new thread
    /// does and anything the creator does after its clone. Anything else (fork,
    /// vfork, posix_spawn): a child process, counted. Threads the kernel makes for
    /// the process (io_uring's workers: `CLONE_UNTRACED`, never passed by libc's
    /// thread creation) are left out, as the clone syscall never saw them: they
    /// come and go with the kernel's load, and would shift the logical ids of
    /// the program's own threads from one run to the next.
    ///
    /// Unlike the syscall tracepoints this sets no per-task flag, so the
    /// system's other syscalls keep their fast path while recording in process.
    #[tracepoint]
    pub fn ordo_task_newtask(ctx: TracePointContext) -> i32 {
        let Some(tid) = target_thread() else {
            return 0;
        };
        let child = unsafe { ctx.read_at::<i32>(8) }.unwrap_or(0) as u32;
        let flags = unsafe { ctx.read_at::<u64>(32) }.unwrap_or(0);
        if flags & CLONE_THREAD == 0 {
            count_fork();
            return 0;
        }
        if flags & CLONE_UNTRACED != 0 || child == 0 {
            return 0;
        }
        let key = stash_key(tid, op::THREAD_CREATE);
        match STASH.get_ptr_mut(&key) {
            // pthread_create's return probe reports it, with the handle.
            Some(pending) => unsafe { (*pending).value = child as u64 },
            None => emit(kind::THREAD_CREATE, 0, 0, 0, 0, 0, 0, child as u64),
        }
        let name = unsafe { ctx.read_at::<[u8; 16]>(12) }.unwrap_or([0; 16]);
        emit_thread_of(child, kind::THREAD_START, 0, name);
        0
    }

    /// A successful exec by the target, in its new image (`sched_process_exec`):
    /// counted for the summary.
    #[raw_tracepoint(tracepoint = "sched_process_exec")]
    pub fn ordo_process_exec(_ctx: RawTracePointContext) -> i32 {
        if target_thread().is_none() {
            return 0;
        }
        if let Some(counter) = EXECS.get_ptr_mut(0) {
            // SAFETY: per-CPU slot, only this CPU writes it while the program runs.
            unsafe { *counter += 1 };
        }
        0
    }

    /// Counts a child process the target started.
    #[inline(always)]
    fn count_fork() {
        if let Some(counter) = FORKS.get_ptr_mut(0) {
            // SAFETY: per-CPU slot, only this CPU writes it while the program runs.
            unsafe { *counter += 1 };
        }
    }

    #[raw_tracepoint(tracepoint = "sched_process_exit")]
    pub fn ordo_thread_exit(_ctx: RawTracePointContext) -> i32 {
        if !recording_on() {
            return 0;
        }
        if (bpf_get_current_pid_tgid() >> 32) as u32 != target_tgid() {
            return 0;
        }
        emit_thread(kind::THREAD_EXIT, 0);
        0
    }

    #[cfg(not(test))]
    #[panic_handler]
    fn panic(_info: &core::panic::PanicInfo) -> ! {
        loop {}
    }
}

#[cfg(target_arch = "bpf")]
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
