//! Running code inside an already running process with ptrace: the foundation of
//! attaching in process (`ordo record --pid PID` will load ordo's agent, a cdylib,
//! into the target with [`load_and_call`] and call its entry function).
//!
//! [`StoppedProcess::stop`] seizes every thread of the target (`PTRACE_SEIZE` +
//! `PTRACE_INTERRUPT`, re-listing `/proc/PID/task` until no new thread appears: no
//! thread can be created while all existing ones are stopped). [`StoppedProcess::call`]
//! then runs one function on one of those threads: it saves the thread's registers,
//! extended FP state (`NT_X86_XSTATE`) and signal mask, points `rip` at the function
//! with the arguments in `rdi, rsi, rdx, rcx, r8, r9`, a fresh 16-byte aligned frame
//! below the red zone whose return address is 0, and `orig_rax = -1` (so the kernel
//! does not restart an interrupted system call into the function), lets it run, and
//! catches the `SIGSEGV` of the return to address 0. [`symbol_in_target`] finds
//! `dlopen`/`dlsym`/`dlerror` in the target's `libc.so.6` from `/proc/PID/maps` and the
//! file's `.dynsym`.
//!
//! # Why the target survives (the safety argument)
//!
//! - Registers are restored byte for byte, including `orig_rax` and the syscall return
//!   code: a thread stopped inside a blocking system call (`rax` = `-ERESTARTSYS`,
//!   `-ERESTARTNOHAND`, `-ERESTART_RESTARTBLOCK`) restarts it on resume exactly as after
//!   any ptrace stop. The xstate (x87, SSE, AVX, ...) and the signal mask (the `SIGSEGV`
//!   that ends a call unblocks `SIGSEGV`) are restored too; the `SIGSEGV` itself is
//!   suppressed.
//! - The injected frame lies below the thread's red zone (and below any scratch data
//!   written with [`StoppedProcess::write_scratch`]), memory the ABI lets a signal handler
//!   clobber at any time, so nothing the thread relies on is overwritten.
//! - Signals that arrive while we hold the threads are recorded and re-delivered on
//!   detach (from the signal-delivery stop that ends a call, with their original
//!   `siginfo`; otherwise with `tgkill`), never lost.
//! - Every path, errors and panics included, ends in `Drop`, which restores a modified
//!   thread and detaches every thread.
//! - The called code may need a lock held by a stopped thread (malloc's, the loader's):
//!   if a call has not returned after [`CALL_GRACE`], the other threads are resumed so
//!   they can release it, and stopped again once it returns. A call still running after
//!   [`CALL_TIMEOUT`] (or on any error) is abandoned: the thread is stopped and restored,
//!   never left to run into address 0. The calling thread is
//!   chosen to hold no lock where possible: first a thread running outside libc and the
//!   loader, then one blocked in a system call, then any.
//!
//! ptrace requests only work from the thread that seized the target, so a
//! [`StoppedProcess`] is neither `Send` nor `Sync`.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::marker::PhantomData;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

/// How long a remote call may run with every other thread stopped before the others
/// are resumed (the call may be waiting for a lock one of them holds).
pub const CALL_GRACE: Duration = Duration::from_secs(1);
/// How long a remote call may run at all; after that it is abandoned (the thread's
/// registers are restored) and reported.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a thread may take to reach a ptrace stop after `PTRACE_INTERRUPT`.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// The x86-64 red zone below `rsp` that leaf code may use without moving `rsp`.
const RED_ZONE: u64 = 128;
/// Gap between the scratch data (or the red zone) and the injected call frame.
const CALL_GAP: u64 = 128;
/// Most scratch bytes one [`StoppedProcess`] may write below the calling thread's stack.
const MAX_SCRATCH: u64 = 64 * 1024;
/// Large enough for any x86 xstate (AMX included); the kernel says how much it used.
const XSTATE_MAX: usize = 64 * 1024;
const NT_X86_XSTATE: libc::c_int = 0x202;
const RTLD_NOW: u64 = 2;
const EFLAGS_TF: u64 = 1 << 8;
const EFLAGS_DF: u64 = 1 << 10;

/// Every thread of a process stopped under ptrace (`PTRACE_SEIZE` + `PTRACE_INTERRUPT`,
/// re-listing `/proc/PID/task` until no new thread appears); restored, resumed and
/// detached on drop. Must stay on the thread that created it (ptrace is per tracer thread).
pub struct StoppedProcess {
    pid: i32,
    threads: Vec<Thread>,
    tids: Vec<i32>,
    mem: Option<File>,
    caller: Option<Caller>,
    released: bool,
    _tracer_thread_only: PhantomData<*const ()>,
}

struct Thread {
    tid: i32,
    /// In a ptrace stop (false while resumed during a long call, or before it stopped).
    stopped: bool,
    /// In a signal-delivery stop, whose signal detaching can replace.
    signal_stop: bool,
    /// Signals taken from the thread while we held it, to deliver on detach.
    pending: Vec<libc::siginfo_t>,
}

/// The thread remote calls run on, its state as found, and the scratch area below its stack.
struct Caller {
    tid: i32,
    regs: libc::user_regs_struct,
    fp: FpState,
    sigmask: u64,
    /// Lowest address used below the thread's stack pointer (red zone, then scratch data).
    low: u64,
    /// The stack pointer of the call whose registers the thread holds, if one does.
    call_sp: Option<u64>,
}

struct FpState {
    note: libc::c_int,
    bytes: Vec<u8>,
}

enum Stop {
    /// `PTRACE_EVENT_STOP`: the interrupt trap or a group stop.
    Event,
    /// Signal-delivery stop for this signal.
    Signal(i32),
    /// The thread is gone (exited, killed); the text says how.
    Gone(String),
}

impl StoppedProcess {
    /// Seizes and stops every thread of `pid`. Fails with a one-line reason when the
    /// process does not exist or cannot be traced (another tracer, Yama, no privilege).
    pub fn stop(pid: i32) -> Result<StoppedProcess> {
        if pid <= 0 {
            bail!("invalid pid {pid}");
        }
        if pid as u32 == std::process::id() {
            bail!("pid {pid} is ordo itself; a process cannot ptrace itself");
        }
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .map_err(|_| anyhow!("no process with pid {pid}"))?;
        let tgid = status
            .lines()
            .find_map(|l| l.strip_prefix("Tgid:"))
            .and_then(|v| v.trim().parse::<i32>().ok());
        if let Some(tgid) = tgid.filter(|&t| t != pid) {
            bail!("{pid} is a thread of process {tgid}, not a process id");
        }
        let mut process = StoppedProcess {
            pid,
            threads: Vec::new(),
            tids: Vec::new(),
            mem: None,
            caller: None,
            released: false,
            _tracer_thread_only: PhantomData,
        };
        process.stop_all()?;
        if process.threads.is_empty() {
            bail!("pid {pid} has no live thread to stop (exiting?)");
        }
        let path = format!("/proc/{pid}/mem");
        let mem = File::options()
            .read(true)
            .write(true)
            .open(&path)
            .with_context(|| format!("cannot open {path}"))?;
        process.mem = Some(mem);
        Ok(process)
    }

    /// The process id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The ids of the stopped threads, in `/proc/PID/task` order (the main thread first).
    pub fn threads(&self) -> &[i32] {
        &self.tids
    }

    /// Calls `function` (an absolute address in the target) with up to 6 integer
    /// arguments on one stopped thread and returns `rax` (raw: a callee returning `int`
    /// leaves the upper half undefined). The thread's registers (all of them, including
    /// `orig_rax`, so an interrupted system call restarts correctly), its xstate and its
    /// signal mask are restored afterwards byte for byte, whether the call succeeded or not.
    pub fn call(&mut self, function: u64, args: &[u64]) -> Result<u64> {
        if args.len() > 6 {
            bail!(
                "a remote call takes at most 6 integer arguments, not {}",
                args.len()
            );
        }
        self.ensure_caller()?;
        let (tid, mut regs, low) = {
            let caller = self.caller.as_ref().expect("chosen above");
            (caller.tid, caller.regs, caller.low)
        };
        // rsp % 16 == 8 at the function's entry, as after a `call`.
        let sp = ((low - CALL_GAP) & !15) - 8;
        self.write_memory(sp, &0u64.to_ne_bytes())?;
        regs.rip = function;
        regs.rsp = sp;
        regs.orig_rax = u64::MAX;
        regs.rax = 0;
        regs.eflags &= !(EFLAGS_DF | EFLAGS_TF);
        let mut slots = [0u64; 6];
        slots[..args.len()].copy_from_slice(args);
        [regs.rdi, regs.rsi, regs.rdx, regs.rcx, regs.r8, regs.r9] = slots;
        self.caller.as_mut().expect("chosen above").call_sp = Some(sp);
        let outcome = set_regs(tid, &regs)
            .with_context(|| format!("cannot set the registers of thread {tid}"))
            .and_then(|()| self.run_call(tid, function, sp));
        // Restore even if the call failed; a restore failure wins (the target is at risk).
        self.restore_caller()?;
        outcome
    }

    /// Writes `bytes` into a scratch area of the target (below the calling thread's
    /// red zone, growing down; it lives as long as this `StoppedProcess`) and returns
    /// its address, 16-byte aligned.
    pub fn write_scratch(&mut self, bytes: &[u8]) -> Result<u64> {
        self.ensure_caller()?;
        let caller = self.caller.as_ref().expect("chosen above");
        let addr = caller.low.saturating_sub(bytes.len() as u64) & !15;
        if caller.regs.rsp.saturating_sub(addr) > MAX_SCRATCH {
            bail!(
                "scratch area of pid {} exhausted ({MAX_SCRATCH} bytes)",
                self.pid
            );
        }
        self.write_memory(addr, bytes)?;
        self.caller.as_mut().expect("chosen above").low = addr;
        Ok(addr)
    }

    /// Makes `tid` the thread that [`call`](Self::call) runs on and whose stack holds the
    /// scratch area, instead of the automatic choice (a thread running outside libc and
    /// the loader, else one blocked in a system call, else any). Only before the first
    /// call or scratch write.
    pub fn set_calling_thread(&mut self, tid: i32) -> Result<()> {
        if self.caller.is_some() {
            bail!("the calling thread of pid {} is already chosen", self.pid);
        }
        if !self.index(tid).is_some_and(|i| self.threads[i].stopped) {
            bail!("{tid} is not a stopped thread of pid {}", self.pid);
        }
        let regs =
            get_regs(tid).with_context(|| format!("cannot read the registers of thread {tid}"))?;
        self.save_caller(tid, regs)
    }

    /// Reads `len` bytes of the target's memory at `addr` (through `/proc/PID/mem`).
    pub fn read_memory(&self, addr: u64, len: usize) -> Result<Vec<u8>> {
        let mut buf = vec![0; len];
        self.mem()?
            .read_exact_at(&mut buf, addr)
            .with_context(|| format!("cannot read {len} bytes at {addr:#x} in pid {}", self.pid))?;
        Ok(buf)
    }

    /// Writes `bytes` into the target's memory at `addr` (through `/proc/PID/mem`, which
    /// also writes read-only pages of a traced process).
    pub fn write_memory(&self, addr: u64, bytes: &[u8]) -> Result<()> {
        self.mem()?.write_all_at(bytes, addr).with_context(|| {
            format!(
                "cannot write {} bytes at {addr:#x} in pid {}",
                bytes.len(),
                self.pid
            )
        })
    }

    /// Restores, resumes and detaches every thread (re-delivering any signal taken
    /// meanwhile), reporting the first failure. Dropping does the same silently.
    pub fn detach(mut self) -> Result<()> {
        self.release()
    }

    fn mem(&self) -> Result<&File> {
        self.mem
            .as_ref()
            .ok_or_else(|| anyhow!("pid {} is not stopped", self.pid))
    }

    fn index(&self, tid: i32) -> Option<usize> {
        self.threads.iter().position(|t| t.tid == tid)
    }

    fn forget(&mut self, tid: i32) {
        self.threads.retain(|t| t.tid != tid);
        self.tids = self.threads.iter().map(|t| t.tid).collect();
        if self.caller.as_ref().is_some_and(|c| c.tid == tid) {
            self.caller = None;
        }
    }

    /// Stops every seized thread not stopped, then seizes and stops new threads until
    /// a listing of `/proc/PID/task` shows no new one.
    fn stop_all(&mut self) -> Result<()> {
        // Interrupt every thread of a round first, then wait: they stop in parallel.
        let mut waiting: Vec<i32> = Vec::new();
        for t in self.threads.iter().filter(|t| !t.stopped) {
            // ESRCH: it exited meanwhile; waiting reaps it.
            let _ = ptrace_simple(libc::PTRACE_INTERRUPT, t.tid, 0);
            waiting.push(t.tid);
        }
        loop {
            let mut new = false;
            for tid in list_tasks(self.pid)? {
                if self.index(tid).is_some() || is_zombie(self.pid, tid) {
                    continue;
                }
                match ptrace_simple(libc::PTRACE_SEIZE, tid, 0) {
                    Ok(()) => {}
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) => continue,
                    Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                        return Err(permission_error(self.pid, &e));
                    }
                    Err(e) => bail!("cannot ptrace thread {tid} of pid {}: {e}", self.pid),
                }
                new = true;
                self.threads.push(Thread {
                    tid,
                    stopped: false,
                    signal_stop: false,
                    pending: Vec::new(),
                });
                self.tids.push(tid);
                ptrace_simple(libc::PTRACE_INTERRUPT, tid, 0).with_context(|| {
                    format!("cannot interrupt thread {tid} of pid {}", self.pid)
                })?;
                waiting.push(tid);
            }
            for tid in waiting.drain(..) {
                self.wait_until_stopped(tid, None)?;
            }
            if !new {
                return Ok(());
            }
        }
    }

    /// Waits for the interrupt trap of a thread after `PTRACE_INTERRUPT`, recording and
    /// suppressing signals that stop it first (they are re-delivered on detach). For the
    /// calling thread interrupted during a call (`call_sp`: the call's stack pointer),
    /// the `SIGSEGV` of the call's return, should it win the race, is a stop too.
    fn wait_until_stopped(&mut self, tid: i32, call_sp: Option<u64>) -> Result<()> {
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            let stop = wait_stop(tid, Some(deadline))?;
            let Some(i) = self.index(tid) else {
                return Ok(());
            };
            match stop {
                None => bail!(
                    "thread {tid} of pid {} did not stop within {} s (uninterruptible sleep?)",
                    self.pid,
                    STOP_TIMEOUT.as_secs()
                ),
                Some(Stop::Event) => {
                    self.threads[i].stopped = true;
                    self.threads[i].signal_stop = false;
                    return Ok(());
                }
                Some(Stop::Signal(libc::SIGSEGV))
                    if call_sp.is_some_and(|sp| returned_from_call(tid, sp)) =>
                {
                    self.threads[i].stopped = true;
                    self.threads[i].signal_stop = true;
                    return Ok(());
                }
                Some(Stop::Signal(_)) => {
                    let info = get_siginfo(tid)?;
                    self.threads[i].pending.push(info);
                    ptrace_cont(tid, 0)?;
                }
                Some(Stop::Gone(_)) => {
                    self.forget(tid);
                    return Ok(());
                }
            }
        }
    }

    /// Chooses the calling thread and saves its state, once.
    fn ensure_caller(&mut self) -> Result<()> {
        if self.caller.is_some() {
            return Ok(());
        }
        let lib_ranges = libc_and_loader_ranges(self.pid).unwrap_or_default();
        let mut best: Option<(u8, i32, libc::user_regs_struct)> = None;
        for t in self.threads.iter().filter(|t| t.stopped) {
            let regs = get_regs(t.tid)
                .with_context(|| format!("cannot read the registers of thread {}", t.tid))?;
            let in_syscall = regs.orig_rax as i64 >= 0;
            let in_libc = lib_ranges
                .iter()
                .any(|&(lo, hi)| (lo..hi).contains(&regs.rip));
            let rank = match (in_syscall, in_libc) {
                (false, false) => 0,
                (true, _) => 1,
                (false, true) => 2,
            };
            if best.as_ref().is_none_or(|b| rank < b.0) {
                best = Some((rank, t.tid, regs));
            }
        }
        let (_, tid, regs) =
            best.ok_or_else(|| anyhow!("no stopped thread in pid {}", self.pid))?;
        self.save_caller(tid, regs)
    }

    /// Makes `tid` the calling thread, saving its state as found.
    fn save_caller(&mut self, tid: i32, regs: libc::user_regs_struct) -> Result<()> {
        let fp =
            get_fp(tid).with_context(|| format!("cannot read the FP state of thread {tid}"))?;
        let sigmask = get_sigmask(tid)?;
        self.caller = Some(Caller {
            tid,
            regs,
            fp,
            sigmask,
            low: regs.rsp - RED_ZONE,
            call_sp: None,
        });
        Ok(())
    }

    /// Puts the calling thread's saved state back if a call changed it.
    fn restore_caller(&mut self) -> Result<()> {
        let Some(caller) = self.caller.as_mut() else {
            return Ok(());
        };
        if caller.call_sp.is_none() {
            return Ok(());
        }
        let tid = caller.tid;
        set_regs(tid, &caller.regs)
            .and_then(|()| set_fp(tid, &caller.fp))
            .and_then(|()| set_sigmask(tid, caller.sigmask))
            .with_context(|| {
                format!(
                    "cannot restore the registers of thread {tid} of pid {}",
                    self.pid
                )
            })?;
        caller.call_sp = None;
        Ok(())
    }

    /// Resumes the calling thread (its registers set up for the call) and waits for the
    /// return to address 0 (at stack pointer `sp + 8`). Returns `rax`. Whatever happens,
    /// the calling thread and any thread resumed meanwhile are stopped again on return.
    fn run_call(&mut self, tid: i32, function: u64, sp: u64) -> Result<u64> {
        ptrace_cont(tid, 0)?;
        self.set_stopped(tid, false);
        let mut others_running = false;
        let result = self.await_return(tid, function, sp, &mut others_running);
        if self.index(tid).is_some_and(|i| !self.threads[i].stopped) {
            // An error left the thread running our call: stop it before its registers
            // are restored (abandoning the call), or it would return to address 0.
            let _ = ptrace_simple(libc::PTRACE_INTERRUPT, tid, 0);
            self.wait_until_stopped(tid, Some(sp))?;
        }
        let restopped = if others_running {
            self.stop_all()
        } else {
            Ok(())
        };
        let value = result?;
        restopped?;
        Ok(value)
    }

    fn await_return(
        &mut self,
        tid: i32,
        function: u64,
        sp: u64,
        others_running: &mut bool,
    ) -> Result<u64> {
        let pid = self.pid;
        let start = Instant::now();
        let mut pace = Backoff::new();
        loop {
            match wait_stop(tid, None)? {
                Some(Stop::Signal(libc::SIGSEGV)) => {
                    self.set_stopped(tid, true);
                    self.mark_signal_stop(tid);
                    let regs = get_regs(tid)?;
                    if regs.rip == 0 && regs.rsp == sp + 8 {
                        return Ok(regs.rax);
                    }
                    let info = get_siginfo(tid)?;
                    // SAFETY: the kernel filled `info` for a SIGSEGV, whose union holds si_addr.
                    let addr = unsafe { info.si_addr() } as u64;
                    bail!(
                        "the function at {function:#x} called in pid {pid} crashed: SIGSEGV at \
                         rip {:#x}, address {addr:#x} (the signal was suppressed)",
                        regs.rip
                    );
                }
                Some(Stop::Signal(_)) => {
                    let info = get_siginfo(tid)?;
                    let i = self.index(tid).expect("caller");
                    self.threads[i].pending.push(info);
                    ptrace_cont(tid, 0)?;
                }
                Some(Stop::Event) => ptrace_cont(tid, 0)?,
                Some(Stop::Gone(how)) => {
                    self.forget(tid);
                    bail!("thread {tid} of pid {pid} {how} during a remote call of {function:#x}");
                }
                None => {
                    if *others_running {
                        self.serve_running_others(tid)?;
                    } else if start.elapsed() > CALL_GRACE {
                        *others_running = true;
                        self.resume_others(tid)?;
                    }
                    if start.elapsed() > CALL_TIMEOUT {
                        bail!(
                            "the function at {function:#x} called in pid {pid} did not return \
                             within {} s; abandoned (locks it took may stay held)",
                            CALL_TIMEOUT.as_secs()
                        );
                    }
                    pace.pause();
                }
            }
        }
    }

    fn set_stopped(&mut self, tid: i32, stopped: bool) {
        if let Some(i) = self.index(tid) {
            self.threads[i].stopped = stopped;
        }
    }

    fn mark_signal_stop(&mut self, tid: i32) {
        if let Some(i) = self.index(tid) {
            self.threads[i].signal_stop = true;
        }
    }

    /// Lets every thread but `caller` run (they may hold a lock the call needs).
    fn resume_others(&mut self, caller: i32) -> Result<()> {
        for t in self
            .threads
            .iter_mut()
            .filter(|t| t.tid != caller && t.stopped)
        {
            ptrace_cont(t.tid, 0)?;
            t.stopped = false;
            t.signal_stop = false;
        }
        Ok(())
    }

    /// While other threads run during a call, passes their signals through at once.
    fn serve_running_others(&mut self, caller: i32) -> Result<()> {
        for tid in self.tids.clone() {
            if tid == caller {
                continue;
            }
            match wait_stop(tid, Some(Instant::now()))? {
                Some(Stop::Signal(sig)) => ptrace_cont(tid, sig)?,
                Some(Stop::Event) => ptrace_cont(tid, 0)?,
                Some(Stop::Gone(_)) => self.forget(tid),
                None => {}
            }
        }
        Ok(())
    }

    /// Restores the caller, detaches every thread, delivers the signals taken meanwhile.
    fn release(&mut self) -> Result<()> {
        if self.released {
            return Ok(());
        }
        self.released = true;
        let mut first_error = None;
        // Only reached running after an error: stop them first (the caller before its
        // registers are restored, or it would return to address 0 once detached).
        for tid in self.tids.clone() {
            if self.index(tid).is_some_and(|i| !self.threads[i].stopped) {
                let call_sp = self
                    .caller
                    .as_ref()
                    .filter(|c| c.tid == tid)
                    .and_then(|c| c.call_sp);
                let _ = ptrace_simple(libc::PTRACE_INTERRUPT, tid, 0);
                if let Err(e) = self.wait_until_stopped(tid, call_sp) {
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Err(e) = self.restore_caller() {
            first_error.get_or_insert(e);
        }
        let mut note = |e: anyhow::Error| {
            first_error.get_or_insert(e);
        };
        for tid in self.tids.clone() {
            let Some(i) = self.index(tid) else { continue };
            let thread = &mut self.threads[i];
            let mut pending = std::mem::take(&mut thread.pending).into_iter();
            let mut deliver = 0;
            if thread.signal_stop {
                if let Some(info) = pending.next() {
                    match set_siginfo(tid, &info) {
                        Ok(()) => deliver = info.si_signo,
                        Err(e) => {
                            note(e);
                            let _ = tgkill(self.pid, tid, info.si_signo);
                        }
                    }
                }
            }
            match ptrace_detach(tid, deliver) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {
                    // Gone (a zombie we trace): reap it so it does not linger.
                    let _ = wait_stop(tid, Some(Instant::now()));
                }
                Err(e) => note(anyhow!(
                    "cannot detach from thread {tid} of pid {}: {e}",
                    self.pid
                )),
            }
            for info in pending {
                let _ = tgkill(self.pid, tid, info.si_signo);
            }
        }
        self.threads.clear();
        self.tids.clear();
        first_error.map_or(Ok(()), Err)
    }
}

impl Drop for StoppedProcess {
    fn drop(&mut self) {
        let _ = self.release();
    }
}

/// Address of the dynamic symbol `symbol` in the module of process `pid` whose mapped
/// file path ends with `module_file_name_suffix` (a file name like `"libc.so.6"`
/// matches whole path components), from `/proc/PID/maps` and the file's `.dynsym`.
/// The load bias is the base of the module's first mapping at file offset 0 minus its
/// lowest `PT_LOAD` address. The file is read through `/proc/PID/map_files` (the very
/// file mapped, even from another mount namespace). The target need not be stopped.
pub fn symbol_in_target(pid: i32, module_file_name_suffix: &str, symbol: &str) -> Result<u64> {
    Ok(symbols_in_target(pid, module_file_name_suffix, &[symbol])?[0])
}

/// [`symbol_in_target`] for several symbols of one module, reading the file once.
pub(crate) fn symbols_in_target(pid: i32, suffix: &str, symbols: &[&str]) -> Result<Vec<u64>> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .with_context(|| format!("cannot read the memory map of pid {pid}"))?;
    let mut matched: Vec<&str> = Vec::new();
    let mut base = None;
    for m in maps.lines().filter_map(parse_maps_line) {
        let path_matches = m.path == suffix
            || m.path.strip_suffix(suffix).is_some_and(|head| {
                suffix.starts_with('/') || head.ends_with('/') || head.is_empty()
            });
        if !path_matches || !m.path.starts_with('/') {
            continue;
        }
        if !matched.contains(&m.path) {
            matched.push(m.path);
        }
        if base.is_none() && m.offset == 0 && m.path == matched[0] {
            base = Some((m.start, m.end));
        }
    }
    match matched.len() {
        0 => bail!("pid {pid} has no module matching {suffix:?} mapped"),
        1 => {}
        _ => bail!(
            "{suffix:?} matches several modules of pid {pid}: {}",
            matched.join(", ")
        ),
    }
    let path = matched[0];
    let (start, end) =
        base.ok_or_else(|| anyhow!("{path} in pid {pid} has no mapping at file offset 0"))?;
    let data = std::fs::read(format!("/proc/{pid}/map_files/{start:x}-{end:x}"))
        .or_else(|_| std::fs::read(format!("/proc/{pid}/root{path}")))
        .or_else(|_| std::fs::read(path))
        .with_context(|| format!("cannot read {path} (mapped in pid {pid})"))?;
    let (lowest_vaddr, values) = elf_dynamic_symbols(data.as_slice(), symbols)
        .with_context(|| format!("reading the dynamic symbols of {path} (mapped in pid {pid})"))?;
    let bias = start.wrapping_sub(lowest_vaddr & !0xfff);
    Ok(values.into_iter().map(|v| bias.wrapping_add(v)).collect())
}

/// Loads `library` into running process `pid` and calls `entry(arg)` in it: stops the
/// process, remote-calls libc's `dlopen(path, RTLD_NOW)` (glibc ≥ 2.34 keeps it in
/// `libc.so.6`), then `dlsym(handle, entry)`, then the entry, and returns its raw
/// `rax`. A failing `dlopen`/`dlsym` is reported with the target's `dlerror()` text.
/// Whatever happens, the threads are restored, resumed and detached. The path is made
/// absolute here and must name the library as the target sees it.
pub fn load_and_call(pid: i32, library: &Path, entry: &str, arg: u64) -> Result<u64> {
    let library = std::path::absolute(library)
        .with_context(|| format!("cannot make {} absolute", library.display()))?;
    let path = CString::new(library.as_os_str().as_bytes())
        .context("the library path contains a NUL byte")?;
    let name = CString::new(entry).context("the entry name contains a NUL byte")?;
    let [dlopen, dlsym, dlerror, dlclose] =
        symbols_in_target(pid, "libc.so.6", &["dlopen", "dlsym", "dlerror", "dlclose"])?[..]
    else {
        unreachable!("one address per symbol")
    };
    let mut process = StoppedProcess::stop(pid)?;
    let shown = library.display();
    let outcome = (|| {
        let path_addr = process.write_scratch(path.as_bytes_with_nul())?;
        let handle = process.call(dlopen, &[path_addr, RTLD_NOW])?;
        if handle == 0 {
            let why = dl_error(&mut process, dlerror)?;
            bail!("dlopen({shown}) failed in pid {pid}: {why}");
        }
        let name_addr = process.write_scratch(name.as_bytes_with_nul())?;
        let function = process.call(dlsym, &[handle, name_addr])?;
        if function == 0 {
            let why = dl_error(&mut process, dlerror)?;
            let _ = process.call(dlclose, &[handle]);
            bail!("{entry} not found in {shown} loaded in pid {pid}: {why}");
        }
        process.call(function, &[arg])
    })();
    let released = process.detach();
    let value = outcome?;
    released?;
    Ok(value)
}

/// The target's `dlerror()` text.
pub(crate) fn dl_error(process: &mut StoppedProcess, dlerror: u64) -> Result<String> {
    let text = process.call(dlerror, &[])?;
    if text == 0 {
        return Ok("(no dlerror message)".to_string());
    }
    let mut bytes = Vec::new();
    let mut addr = text;
    // Read page by page so the string's end near an unmapped page does not fail.
    while bytes.len() < 4096 {
        let chunk = (4096 - (addr % 4096)) as usize;
        let part = process.read_memory(addr, chunk)?;
        if let Some(end) = part.iter().position(|&b| b == 0) {
            bytes.extend_from_slice(&part[..end]);
            break;
        }
        bytes.extend_from_slice(&part);
        addr += chunk as u64;
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The lowest `PT_LOAD` address of an ELF file and the values of its defined dynamic
/// symbols `names` (the default version when a symbol has several).
fn elf_dynamic_symbols<'d, R: object::ReadRef<'d>>(
    data: R,
    names: &[&str],
) -> Result<(u64, Vec<u64>)> {
    use object::elf;
    use object::read::elf::{FileHeader, ProgramHeader, Sym};
    let header =
        elf::FileHeader64::<object::Endianness>::parse(data).context("not a 64-bit ELF")?;
    let endian = header.endian()?;
    let lowest = header
        .program_headers(endian, data)?
        .iter()
        .filter(|p| p.p_type(endian) == elf::PT_LOAD)
        .map(|p| p.p_vaddr(endian))
        .min()
        .ok_or_else(|| anyhow!("no PT_LOAD segment"))?;
    let sections = header.sections(endian, data)?;
    let symbols = sections.symbols(endian, data, elf::SHT_DYNSYM)?;
    let versions = sections.versions(endian, data)?;
    // Per name: (hidden version, value, type).
    let mut found: Vec<Option<(bool, u64, u8)>> = vec![None; names.len()];
    for (index, sym) in symbols.enumerate() {
        if sym.is_undefined(endian) {
            continue;
        }
        let name = symbols.symbol_name(endian, sym)?;
        let Some(slot) = names.iter().position(|n| n.as_bytes() == name) else {
            continue;
        };
        let hidden = versions
            .as_ref()
            .is_some_and(|v| v.version_index(endian, index).is_hidden());
        if found[slot].is_none_or(|f| f.0 && !hidden) {
            found[slot] = Some((hidden, sym.st_value(endian), sym.st_type()));
        }
    }
    let values = names
        .iter()
        .zip(found)
        .map(|(name, found)| match found {
            None => bail!("{name} is not a defined dynamic symbol"),
            Some((_, _, elf::STT_GNU_IFUNC)) => {
                bail!("{name} is an IFUNC (its address is a resolver, not the function)")
            }
            Some((_, value, _)) => Ok(value),
        })
        .collect::<Result<_>>()?;
    Ok((lowest, values))
}

struct MapsLine<'a> {
    start: u64,
    end: u64,
    offset: u64,
    path: &'a str,
}

fn parse_maps_line(line: &str) -> Option<MapsLine<'_>> {
    let mut fields = line.splitn(6, ' ');
    let (start, end) = fields.next()?.split_once('-')?;
    let _perms = fields.next()?;
    let offset = u64::from_str_radix(fields.next()?, 16).ok()?;
    let (_dev, _inode) = (fields.next()?, fields.next()?);
    let path = fields.next()?.trim_start();
    Some(MapsLine {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        offset,
        path: path.strip_suffix(" (deleted)").unwrap_or(path),
    })
}

/// Address ranges of libc's and the dynamic loader's mappings (code there may hold
/// one of their internal locks).
fn libc_and_loader_ranges(pid: i32) -> Result<Vec<(u64, u64)>> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
    Ok(maps
        .lines()
        .filter_map(parse_maps_line)
        .filter(|m| {
            let name = m.path.rsplit('/').next().unwrap_or("");
            name.starts_with("libc.so") || name.starts_with("ld-linux")
        })
        .map(|m| (m.start, m.end))
        .collect())
}

fn list_tasks(pid: i32) -> Result<Vec<i32>> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/task"))
        .with_context(|| format!("no process with pid {pid}"))?;
    let mut tids: Vec<i32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    if let Some(main) = tids.iter().position(|&t| t == pid) {
        tids[..=main].rotate_right(1);
    }
    Ok(tids)
}

fn is_zombie(pid: i32, tid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with(['Z', 'X']))
    })
}

/// One line saying why `pid` cannot be traced.
fn permission_error(pid: i32, err: &io::Error) -> anyhow::Error {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let tracer = status
        .lines()
        .find_map(|l| l.strip_prefix("TracerPid:"))
        .and_then(|v| v.trim().parse::<i32>().ok())
        .unwrap_or(0);
    let reason = if tracer != 0 {
        let comm = std::fs::read_to_string(format!("/proc/{tracer}/comm")).unwrap_or_default();
        format!("it is already traced by pid {tracer} ({})", comm.trim())
    } else if let Some(scope) = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .filter(|s| s.trim() != "0")
    {
        format!(
            "kernel.yama.ptrace_scope is {} (run as root or lower it)",
            scope.trim()
        )
    } else {
        format!("{err} (needs the same user and CAP_SYS_PTRACE, or root)")
    };
    anyhow!("cannot ptrace pid {pid}: {reason}")
}

/// The next state change of traced thread `tid`: polls once when `deadline` is `None`,
/// else until `deadline`; `None` if nothing happened.
fn wait_stop(tid: i32, deadline: Option<Instant>) -> Result<Option<Stop>> {
    let mut pace = Backoff::new();
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes the status into a local int.
        let r = unsafe { libc::waitpid(tid, &mut status, libc::__WALL | libc::WNOHANG) };
        if r == -1 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::ECHILD) => return Ok(Some(Stop::Gone("is gone".to_string()))),
                _ => bail!("waitpid({tid}): {e}"),
            }
        }
        if r == tid {
            return Ok(Some(if libc::WIFEXITED(status) {
                Stop::Gone(format!("exited with status {}", libc::WEXITSTATUS(status)))
            } else if libc::WIFSIGNALED(status) {
                Stop::Gone(format!("was killed by signal {}", libc::WTERMSIG(status)))
            } else if (status >> 16) != 0 {
                // PTRACE_EVENT_STOP (the interrupt trap, a group stop); no other event is enabled.
                Stop::Event
            } else {
                Stop::Signal(libc::WSTOPSIG(status))
            }));
        }
        match deadline {
            Some(d) if Instant::now() < d => pace.pause(),
            _ => return Ok(None),
        }
    }
}

/// The calling thread stopped on the return of the call whose stack pointer was `sp`.
fn returned_from_call(tid: i32, sp: u64) -> bool {
    get_regs(tid).is_ok_and(|regs| regs.rip == 0 && regs.rsp == sp + 8)
}

/// The pace of polling `waitpid`: yield the CPU during the first millisecond (a stop or
/// a remote call usually completes in tens of microseconds, and a sleep costs at least
/// the timer slack, 50 µs), then sleep, doubling up to 1 ms.
struct Backoff {
    start: Instant,
    nap: Duration,
}

impl Backoff {
    fn new() -> Backoff {
        Backoff {
            start: Instant::now(),
            nap: Duration::from_micros(20),
        }
    }

    fn pause(&mut self) {
        if self.start.elapsed() < Duration::from_millis(1) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(self.nap);
            self.nap = (self.nap * 2).min(Duration::from_millis(1));
        }
    }
}

fn ptrace_simple(request: libc::c_uint, tid: i32, data: usize) -> io::Result<()> {
    // SAFETY: SEIZE/INTERRUPT/CONT/DETACH take no pointer: `data` is an option word or
    // a signal number and the address is unused.
    let r = unsafe {
        libc::ptrace(
            request,
            tid,
            std::ptr::null_mut::<libc::c_void>(),
            data as *mut libc::c_void,
        )
    };
    if r == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn ptrace_cont(tid: i32, signal: i32) -> Result<()> {
    ptrace_simple(libc::PTRACE_CONT, tid, signal as usize)
        .with_context(|| format!("cannot resume thread {tid}"))
}

fn ptrace_detach(tid: i32, signal: i32) -> io::Result<()> {
    ptrace_simple(libc::PTRACE_DETACH, tid, signal as usize)
}

/// `ptrace(request, tid, addr, data)` for requests that read or write memory of ours.
///
/// # Safety
/// `addr` and `data` must be what `request` expects: valid pointers to buffers of the
/// size the request reads or writes, or plain integers where it takes integers.
unsafe fn ptrace_io(request: libc::c_uint, tid: i32, addr: usize, data: usize) -> io::Result<()> {
    // SAFETY: the caller guarantees the arguments match the request.
    let r = unsafe {
        libc::ptrace(
            request,
            tid,
            addr as *mut libc::c_void,
            data as *mut libc::c_void,
        )
    };
    if r == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn get_regs(tid: i32) -> Result<libc::user_regs_struct> {
    // SAFETY: user_regs_struct is plain integers; all zeroes is a valid value.
    let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
    // SAFETY: PTRACE_GETREGS writes one user_regs_struct at `data`.
    unsafe { ptrace_io(libc::PTRACE_GETREGS, tid, 0, &raw mut regs as usize) }?;
    Ok(regs)
}

fn set_regs(tid: i32, regs: &libc::user_regs_struct) -> Result<()> {
    // SAFETY: PTRACE_SETREGS reads one user_regs_struct at `data`.
    unsafe { ptrace_io(libc::PTRACE_SETREGS, tid, 0, regs as *const _ as usize) }?;
    Ok(())
}

/// The thread's xstate (x87, SSE, AVX and beyond), or its FXSAVE area if the kernel
/// has no xstate regset.
fn get_fp(tid: i32) -> Result<FpState> {
    for note in [NT_X86_XSTATE, libc::NT_PRFPREG] {
        let mut bytes = vec![0u8; XSTATE_MAX];
        let mut iov = libc::iovec {
            iov_base: bytes.as_mut_ptr().cast(),
            iov_len: bytes.len(),
        };
        // SAFETY: PTRACE_GETREGSET writes at most iov_len bytes at iov_base (our buffer)
        // and updates iov_len.
        let r = unsafe {
            ptrace_io(
                libc::PTRACE_GETREGSET,
                tid,
                note as usize,
                &raw mut iov as usize,
            )
        };
        match r {
            Ok(()) => {
                bytes.truncate(iov.iov_len);
                return Ok(FpState { note, bytes });
            }
            Err(e) if note == NT_X86_XSTATE && e.raw_os_error() == Some(libc::EINVAL) => {}
            Err(e) => return Err(e.into()),
        }
    }
    unreachable!("the NT_PRFPREG attempt returns")
}

fn set_fp(tid: i32, fp: &FpState) -> Result<()> {
    let mut iov = libc::iovec {
        iov_base: fp.bytes.as_ptr() as *mut libc::c_void,
        iov_len: fp.bytes.len(),
    };
    // SAFETY: PTRACE_SETREGSET only reads iov_len bytes at iov_base (our buffer).
    unsafe {
        ptrace_io(
            libc::PTRACE_SETREGSET,
            tid,
            fp.note as usize,
            &raw mut iov as usize,
        )
    }?;
    Ok(())
}

fn get_sigmask(tid: i32) -> Result<u64> {
    let mut mask = 0u64;
    // SAFETY: PTRACE_GETSIGMASK writes `addr` (8) bytes at `data`, our u64.
    unsafe { ptrace_io(libc::PTRACE_GETSIGMASK, tid, 8, &raw mut mask as usize) }
        .with_context(|| format!("cannot read the signal mask of thread {tid}"))?;
    Ok(mask)
}

fn set_sigmask(tid: i32, mask: u64) -> Result<()> {
    // SAFETY: PTRACE_SETSIGMASK reads `addr` (8) bytes at `data`, our u64.
    unsafe { ptrace_io(libc::PTRACE_SETSIGMASK, tid, 8, &raw const mask as usize) }?;
    Ok(())
}

fn get_siginfo(tid: i32) -> Result<libc::siginfo_t> {
    // SAFETY: siginfo_t is plain data; all zeroes is a valid value.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: PTRACE_GETSIGINFO writes one siginfo_t at `data`.
    unsafe { ptrace_io(libc::PTRACE_GETSIGINFO, tid, 0, &raw mut info as usize) }
        .with_context(|| format!("cannot read the pending signal of thread {tid}"))?;
    Ok(info)
}

fn set_siginfo(tid: i32, info: &libc::siginfo_t) -> Result<()> {
    // SAFETY: PTRACE_SETSIGINFO reads one siginfo_t at `data`.
    unsafe { ptrace_io(libc::PTRACE_SETSIGINFO, tid, 0, info as *const _ as usize) }?;
    Ok(())
}

fn tgkill(pid: i32, tid: i32, signal: i32) -> io::Result<()> {
    // SAFETY: tgkill takes integers only.
    let r = unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, signal) };
    if r == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_of<T>(value: &T) -> &[u8] {
        // SAFETY: reading the bytes of a plain-data struct (no padding in user_regs_struct).
        unsafe { std::slice::from_raw_parts((value as *const T).cast(), size_of::<T>()) }
    }

    #[test]
    fn maps_lines_parse() {
        let line = "7f1c2a000000-7f1c2a028000 r--p 00000000 fe:01 1234       /usr/lib/x86_64-linux-gnu/libc.so.6";
        let m = parse_maps_line(line).expect("parses");
        assert_eq!(
            (m.start, m.end, m.offset),
            (0x7f1c2a000000, 0x7f1c2a028000, 0)
        );
        assert_eq!(m.path, "/usr/lib/x86_64-linux-gnu/libc.so.6");
        let anon = parse_maps_line("7ffd1000-7ffd2000 rw-p 00000000 00:00 0 ").expect("parses");
        assert_eq!(anon.path, "");
    }

    /// A thread blocked in `clock_nanosleep` gets back exactly its registers, xstate and
    /// signal mask after a remote call, and keeps sleeping.
    #[test]
    fn call_restores_a_sleeping_thread_exactly() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipping: ptrace tests run as root");
            return;
        }
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let pid = child.id() as i32;
        std::thread::sleep(Duration::from_millis(100));
        let getpid = symbol_in_target(pid, "libc.so.6", "getpid").expect("getpid");
        let mut process = StoppedProcess::stop(pid).expect("stop");
        assert_eq!(process.threads(), [pid]);
        let before = (
            get_regs(pid).unwrap(),
            get_fp(pid).unwrap().bytes,
            get_sigmask(pid).unwrap(),
        );
        assert!(
            before.0.orig_rax as i64 >= 0,
            "sleep should be inside a system call"
        );
        assert_eq!(process.call(getpid, &[]).expect("call"), pid as u64);
        let after = (
            get_regs(pid).unwrap(),
            get_fp(pid).unwrap().bytes,
            get_sigmask(pid).unwrap(),
        );
        assert_eq!(bytes_of(&before.0), bytes_of(&after.0));
        assert_eq!(before.1, after.1);
        assert_eq!(before.2, after.2);
        process.detach().expect("detach");
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            child.try_wait().expect("try_wait").is_none(),
            "sleep stopped sleeping"
        );
        child.kill().expect("kill");
        child.wait().expect("wait");
    }
}
