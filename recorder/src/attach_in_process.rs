//! Attaching in process (`ordo record --pid`): the agent brought into a running
//! program, which then records its pthread calls at the launched path's cost (tens
//! of nanoseconds a call) instead of a kernel trap per call.
//!
//! **Attach**, in two short stops of the target ([`crate::inject`]: every thread
//! held under ptrace, one used for calls into the target's own libc):
//! 1. [`prepare`]: the target makes an empty memfd (`memfd_create`) and `dlopen`s
//!    the agent, which stays dormant (its constructor finds no `ORDO_*`
//!    descriptor); this process takes a copy of the memfd (`pidfd_getfd`) and makes
//!    it the recording's mapping. The eBPF side of the recording (thread start and
//!    exit, clone) is then loaded while the target runs.
//! 2. [`attach`]: `ordo_attach(fd)` maps the memfd and switches recording on; then
//!    every GOT slot of every loaded module (but the agent, libc and the dynamic
//!    loader) that the dynamic loader filled (or will fill lazily) with one of the
//!    interposed functions is pointed at the agent's wrapper. Both happen while
//!    every thread is stopped, so the recording starts with every slot redirected:
//!    no thread can record a lock and then miss its unlock through a slot not yet
//!    redirected.
//!
//! **Detach** ([`Attached::detach`]) needs no stop: the recording switch is cleared
//! and each slot still holding the wrapper gets its original 8 bytes back, each an
//! aligned 8-byte store, so a thread loading a slot meanwhile gets either address,
//! and both are right: the agent stays loaded (it is never `dlclose`d), so a thread
//! inside a wrapper returns through code that is still there, and a wrapper reached
//! later through a copied pointer forwards to libc without recording. Attaching
//! again reuses the loaded agent (same path: `dlopen` returns it) with a new mapping.
//!
//! **If this process dies** (SIGKILL included), a guardian process forked at attach
//! (its own session, so a terminal's Ctrl-C to the recorder's group does not reach
//! it) sees its pipe from this process close and does the same restoration through
//! `/proc/PID/mem`: the target keeps running with its GOT as it was before.
//!
//! Not redirected, and so still recorded by nothing in this mode: calls from
//! modules loaded after attaching, libc's calls to itself, and calls through
//! function pointers taken before attaching (`-v` says so).

use std::ffi::CString;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;

use anyhow::{anyhow, bail, Context, Result};
use object::{Object, ObjectSegment, ObjectSymbol, ObjectSymbolTable, RelocationTarget};

use crate::inject::{symbols_in_target, StoppedProcess};
use crate::inproc::InprocMapping;

/// The agent's file name: the module the target maps it as.
const AGENT_FILE: &str = "libordo_attach.so";

/// What [`prepare`] left in the target: the recording's mapping, and the
/// target's own descriptor of it, which [`attach`] hands the agent.
pub struct Prepared {
    /// The mapping, shared with the target's memfd.
    pub mapping: std::sync::Arc<InprocMapping>,
    target_fd: u64,
    agent: PathBuf,
}

/// One redirected GOT slot.
#[derive(Clone, Copy, Debug)]
struct Slot {
    address: u64,
    original: u64,
    wrapper: u64,
}

/// The agent attached to a running program: the slots it redirected and the
/// switch it records under, restored by [`Attached::detach`] (or, if this process
/// dies first, by the guardian).
pub struct Attached {
    pid: i32,
    slots: Vec<Slot>,
    switch: u64,
    mem: File,
    guardian: Option<Guardian>,
    /// Redirected slots per module, for `-v`.
    pub per_module: Vec<(String, usize)>,
}

/// How a detach went.
#[derive(Debug, Default)]
pub struct Detached {
    /// Slots given back their original bytes.
    pub restored: usize,
    /// Slots that no longer held the wrapper (something else rewrote them; left
    /// as they were).
    pub changed: usize,
}

/// Step 1: makes the recording's memfd in `pid` and loads the agent into it.
pub fn prepare(
    pid: i32,
    tsc_allowed: bool,
    sparse_times: bool,
    keep_trace_current: bool,
) -> Result<Prepared> {
    let agent = agent_path()?;
    let [memfd_create, dlopen, dlerror, close] = symbols_in_target(
        pid,
        "libc.so.6",
        &["memfd_create", "dlopen", "dlerror", "close"],
    )?[..] else {
        unreachable!("one address per symbol")
    };
    let pidfd = pidfd_open(pid)?;
    let target_fd = ptrace_in_child(|| {
        let mut process = StoppedProcess::stop(pid)?;
        let made = (|| {
            let name = process.write_scratch(b"ordo-record\0")?;
            let fd = process.call(memfd_create, &[name, libc::MFD_CLOEXEC as u64])? as i64;
            if fd < 0 {
                bail!("memfd_create in pid {pid} failed");
            }
            let path = CString::new(agent.as_os_str().as_encoded_bytes())?;
            let path = process.write_scratch(path.as_bytes_with_nul())?;
            let handle = process.call(dlopen, &[path, libc::RTLD_NOW as u64])?;
            if handle == 0 {
                let why = crate::inject::dl_error(&mut process, dlerror)?;
                let _ = process.call(close, &[fd as u64]);
                bail!("dlopen of the agent in pid {pid} failed: {why}");
            }
            Ok(fd as u64)
        })();
        let released = process.detach();
        let target_fd = made?;
        released?;
        Ok(target_fd)
    })?;
    // SAFETY: a plain syscall on descriptors we own; the result is checked.
    let local = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), target_fd, 0) };
    if local < 0 {
        bail!(
            "pidfd_getfd of pid {pid}'s recording memfd: {}",
            std::io::Error::last_os_error()
        );
    }
    // SAFETY: a descriptor just made for us.
    let local = unsafe { OwnedFd::from_raw_fd(local as i32) };
    let mut mapping = InprocMapping::over(local, tsc_allowed, sparse_times)?;
    mapping.converting_while_attached();
    if keep_trace_current {
        mapping.keep_trace_current();
    }
    // The agent need not wait for its modules to be read: they are read at attach.
    mapping.modules_read();
    Ok(Prepared {
        mapping: std::sync::Arc::new(mapping),
        target_fd,
        agent,
    })
}

/// Step 2: switches the agent on and redirects the slots, the target stopped
/// throughout. On an error nothing stays changed.
pub fn attach(pid: i32, prepared: &Prepared) -> Result<Attached> {
    let agent = prepared.agent.to_string_lossy();
    let names = interposed_names()?;
    let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut wanted = vec!["ordo_attach"];
    wanted.extend(&name_refs);
    let addresses = symbols_in_target(pid, &agent, &wanted)?;
    let ordo_attach = addresses[0];
    let wrappers: std::collections::HashMap<&str, u64> = name_refs
        .iter()
        .copied()
        .zip(addresses[1..].iter().copied())
        .collect();
    let (planned, per_module) = plan_slots(pid, &wrappers)?;
    let mem = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/{pid}/mem"))
        .with_context(|| format!("open /proc/{pid}/mem"))?;
    // The slots' values now (a lazy binding resolved before the stop only means
    // restoring the unresolved stub, which resolves again). A slot still holding
    // a wrapper (a recorder before this one died with its guardian) gets libc's
    // function back.
    let mut slots = Vec::with_capacity(planned.len());
    for (address, wrapper, name) in planned {
        let mut original = read_u64(&mem, address)?;
        if original == wrapper {
            original = symbols_in_target(pid, "libc.so.6", &[name])?[0];
        }
        slots.push(Slot {
            address,
            original,
            wrapper,
        });
    }
    // Started before the stop: from here on this process's death restores.
    let mut guardian = Guardian::start(pid, &slots)?;
    let attached = ptrace_in_child(|| {
        let mut process = StoppedProcess::stop(pid)?;
        let switched = (|| -> Result<u64> {
            let switch = process.call(ordo_attach, &[prepared.target_fd])?;
            if switch == 0 {
                bail!("the agent in pid {pid} could not map the recording");
            }
            guardian.tell_switch(switch);
            let redirected = slots
                .iter()
                .try_for_each(|s| write_u64(&mem, s.address, s.wrapper));
            if redirected.is_err() {
                let _ = mem.write_all_at(&[0], switch);
            }
            redirected.map(|()| switch)
        })();
        if switched.is_err() {
            restore(&mem, &slots);
        }
        let released = process.detach();
        let switch = switched?;
        released?;
        Ok(switch)
    });
    let switch = match attached {
        Ok(switch) => switch,
        Err(e) => {
            restore(&mem, &slots);
            guardian.dismiss();
            return Err(e);
        }
    };
    guardian.told = true;
    Ok(Attached {
        pid,
        slots,
        switch,
        mem,
        guardian: Some(guardian),
        per_module,
    })
}

impl Attached {
    /// Slots redirected.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Switches recording off and gives every slot still holding its wrapper its
    /// original bytes back, the target running.
    pub fn detach(mut self) -> Result<Detached> {
        self.restore_once()
    }

    /// The restoration, then the guardian dismissed: once (a detach, or a drop
    /// without one).
    fn restore_once(&mut self) -> Result<Detached> {
        let Some(guardian) = self.guardian.take() else {
            return Ok(Detached::default());
        };
        let outcome = self
            .mem
            .write_all_at(&[0], self.switch)
            .with_context(|| format!("switch the agent in pid {} off", self.pid))
            .map(|()| {
                let restored = restore(&self.mem, &self.slots);
                Detached {
                    restored,
                    changed: self.slots.len() - restored,
                }
            });
        guardian.dismiss();
        outcome
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        let _ = self.restore_once();
    }
}

/// Gives each slot still holding its wrapper its original value; how many.
fn restore(mem: &File, slots: &[Slot]) -> usize {
    slots
        .iter()
        .filter(|s| {
            read_u64(mem, s.address).is_ok_and(|now| now == s.wrapper)
                && write_u64(mem, s.address, s.original).is_ok()
        })
        .count()
}

fn read_u64(mem: &File, address: u64) -> Result<u64> {
    let mut bytes = [0u8; 8];
    mem.read_exact_at(&mut bytes, address)
        .with_context(|| format!("read the target's memory at {address:#x}"))?;
    Ok(u64::from_ne_bytes(bytes))
}

fn write_u64(mem: &File, address: u64, value: u64) -> Result<()> {
    mem.write_all_at(&value.to_ne_bytes(), address)
        .with_context(|| format!("write the target's memory at {address:#x}"))
}

/// The functions the agent interposes: its exported functions but its own entry
/// points and the start-up hook.
fn interposed_names() -> Result<Vec<String>> {
    let file = object::File::parse(ordo_agent::AGENT_ATTACH_LIBRARY)
        .map_err(|e| anyhow!("the embedded agent: {e}"))?;
    let mut names: Vec<String> = file
        .dynamic_symbols()
        .filter(|s| s.is_definition() && s.kind() == object::SymbolKind::Text && s.is_global())
        .filter_map(|s| s.name().ok().map(str::to_string))
        .filter(|n| !n.starts_with("ordo_") && n != "__libc_start_main")
        .collect();
    names.sort();
    names.dedup();
    Ok(names)
}

/// Modules whose calls are not redirected: the agent itself, libc (its calls to
/// itself), the dynamic loader and the vDSO.
fn is_left_alone(path: &str) -> bool {
    let file = path.rsplit('/').next().unwrap_or(path);
    file == AGENT_FILE
        || file.starts_with("libc.so")
        || file.starts_with("ld-linux")
        || !path.starts_with('/')
}

/// Every GOT slot of the target's modules bound to an interposed function
/// (`R_X86_64_JUMP_SLOT` or `GLOB_DAT` relocations naming it): address, the
/// wrapper it gets and the function's name; and how many per module.
#[allow(
    clippy::type_complexity,
    reason = "two plain lists: slots, and counts per module"
)]
fn plan_slots<'n>(
    pid: i32,
    wrappers: &std::collections::HashMap<&'n str, u64>,
) -> Result<(Vec<(u64, u64, &'n str)>, Vec<(String, usize)>)> {
    let mut slots = Vec::new();
    let mut per_module = Vec::new();
    for module in ordo_trace::symbolize::modules_of_process(pid as u32) {
        if is_left_alone(&module.path) {
            continue;
        }
        let Some(first) = module.mappings.iter().min_by_key(|m| m.file_offset) else {
            continue;
        };
        let data = std::fs::read(format!("/proc/{pid}/root{}", module.path))
            .or_else(|_| std::fs::read(&module.path));
        let Ok(data) = data else {
            continue;
        };
        let Ok(file) = object::File::parse(data.as_slice()) else {
            continue;
        };
        // The load bias: where the mapping of the lowest file offset is, less the
        // address the file's segments give that offset.
        let Some(vaddr) = file.segments().find_map(|seg| {
            let (start, size) = seg.file_range();
            (start..start + size)
                .contains(&first.file_offset)
                .then(|| seg.address() + (first.file_offset - start))
        }) else {
            continue;
        };
        let bias = first.start.wrapping_sub(vaddr);
        let Some(relocations) = file.dynamic_relocations() else {
            continue;
        };
        let symbols = file.dynamic_symbol_table();
        let before = slots.len();
        for (offset, r) in relocations {
            use object::RelocationFlags;
            let RelocationFlags::Elf { r_type } = r.flags() else {
                continue;
            };
            if r_type != object::elf::R_X86_64_JUMP_SLOT && r_type != object::elf::R_X86_64_GLOB_DAT
            {
                continue;
            }
            let RelocationTarget::Symbol(index) = r.target() else {
                continue;
            };
            let Some(name) = symbols
                .as_ref()
                .and_then(|t| t.symbol_by_index(index).ok())
                .and_then(|s| s.name().ok())
            else {
                continue;
            };
            if let Some((&name, &wrapper)) = wrappers.get_key_value(name) {
                slots.push((bias + offset, wrapper, name));
            }
        }
        if slots.len() > before {
            per_module.push((module.path.clone(), slots.len() - before));
        }
    }
    Ok((slots, per_module))
}

/// The agent on disk where every user's program can map it and nobody but
/// this user can change it: one directory per agent build under the temporary
/// directory, kept (a target keeps the path mapped, and a second attach finds
/// the same library loaded).
fn agent_path() -> Result<PathBuf> {
    let digest = crc32fast::hash(ordo_agent::AGENT_ATTACH_LIBRARY);
    // SAFETY: no preconditions.
    let uid = unsafe { libc::geteuid() };
    let dir = std::env::temp_dir().join(format!("ordo-attach-{uid}-{digest:08x}"));
    match std::fs::DirBuilder::new().mode(0o755).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).with_context(|| format!("create {}", dir.display())),
    }
    let meta = std::fs::symlink_metadata(&dir).with_context(|| format!("{}", dir.display()))?;
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
        bail!(
            "{} is not a directory only this user can write: refusing to load an agent from it",
            dir.display()
        );
    }
    let path = dir.join(AGENT_FILE);
    if std::fs::read(&path).ok().as_deref() == Some(ordo_agent::AGENT_ATTACH_LIBRARY) {
        return Ok(path);
    }
    let staged = dir.join(format!(".{AGENT_FILE}.{}", std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o555)
        .open(&staged)
        .with_context(|| format!("write {}", staged.display()))?;
    file.write_all(ordo_agent::AGENT_ATTACH_LIBRARY)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o555))?;
    drop(file);
    std::fs::rename(&staged, &path).with_context(|| format!("write {}", path.display()))?;
    Ok(path)
}

/// Runs `work` — a stop of the target and calls into it — in a child process
/// of its own (its own session: a terminal's signals to this process's group do
/// not reach it), and returns what it returned. A thread of the target in a
/// call whose tracer dies is let go with its registers pointing into the call,
/// which returns to address 0 and takes the target down: the child is that
/// tracer, and it finishes, restores and detaches whatever happens to this
/// process. Only glibc's fork-safe allocator and system calls run in it.
fn ptrace_in_child(work: impl FnOnce() -> Result<u64>) -> Result<u64> {
    let mut fds = [0; 2];
    // SAFETY: a plain syscall filling `fds`.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        bail!("pipe: {}", std::io::Error::last_os_error());
    }
    // SAFETY: descriptors just made.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: the child runs `work` (allocation through glibc's malloc, which
    // its fork resets, and system calls) and `_exit`s without unwinding into
    // this process's state.
    let child = unsafe { libc::fork() };
    if child < 0 {
        bail!("fork: {}", std::io::Error::last_os_error());
    }
    if child == 0 {
        // SAFETY: in the child: plain system calls, then `_exit`.
        unsafe {
            libc::setsid();
            for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGPIPE] {
                libc::signal(signal, libc::SIG_IGN);
            }
            let reply = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)) {
                Ok(Ok(value)) => {
                    let mut bytes = vec![0u8];
                    bytes.extend(value.to_ne_bytes());
                    bytes
                }
                Ok(Err(e)) => {
                    let mut bytes = vec![1u8];
                    bytes.extend(format!("{e:#}").into_bytes());
                    bytes
                }
                Err(_) => b"\x01the attaching process panicked".to_vec(),
            };
            libc::write(write_end.as_raw_fd(), reply.as_ptr().cast(), reply.len());
            libc::_exit(0);
        }
    }
    drop(write_end);
    let mut reply = Vec::new();
    let read = std::io::Read::read_to_end(&mut File::from(read_end), &mut reply);
    let mut status = 0;
    // SAFETY: our own child.
    unsafe { libc::waitpid(child, &mut status, 0) };
    read.context("read the attaching process's reply")?;
    match reply.split_first() {
        Some((0, value)) if value.len() == 8 => {
            Ok(u64::from_ne_bytes(value.try_into().expect("8 bytes")))
        }
        Some((1, why)) => Err(anyhow!("{}", String::from_utf8_lossy(why))),
        _ => bail!("the attaching process ended without a reply (status {status:#x})"),
    }
}

fn pidfd_open(pid: i32) -> Result<OwnedFd> {
    // SAFETY: a plain syscall; the result is checked.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        bail!("pidfd_open({pid}): {}", std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor just made for us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// A process that restores the target if this one dies while attached.
struct Guardian {
    pid: libc::pid_t,
    /// The switch's address was written.
    told: bool,
    /// The recording switch's address (8 bytes) once known, then a byte that
    /// dismisses it; closing it before that (this process died) makes it restore.
    pipe: OwnedFd,
}

impl Guardian {
    fn start(target: i32, slots: &[Slot]) -> Result<Guardian> {
        let mem = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/{target}/mem"))?;
        let mut fds = [0; 2];
        // SAFETY: a plain syscall filling `fds`.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            bail!("pipe: {}", std::io::Error::last_os_error());
        }
        // SAFETY: descriptors just made.
        let (read_end, write_end) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let slots = slots.to_vec();
        // SAFETY: the child only makes async-signal-safe system calls on memory
        // prepared before the fork, then `_exit`s.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            bail!("fork: {}", std::io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: as above.
            unsafe { guard(read_end.as_raw_fd(), write_end.as_raw_fd(), &mem, &slots) };
        }
        drop(read_end);
        Ok(Guardian {
            pid,
            told: false,
            pipe: write_end,
        })
    }

    /// Tells it where the recording switch is.
    fn tell_switch(&mut self, switch: u64) {
        // SAFETY: our own pipe; 8 bytes, written at once (below PIPE_BUF).
        unsafe {
            libc::write(
                self.pipe.as_raw_fd(),
                switch.to_ne_bytes().as_ptr().cast(),
                8,
            )
        };
        self.told = true;
    }

    fn dismiss(mut self) {
        if !self.told {
            // No switch (0), so that the dismissal comes where it is read.
            self.tell_switch(0);
        }
        // SAFETY: our own pipe and child.
        unsafe {
            libc::write(self.pipe.as_raw_fd(), [1u8].as_ptr().cast(), 1);
            let mut status = 0;
            libc::waitpid(self.pid, &mut status, 0);
        }
    }
}

/// The guardian's life (in the forked child): its own session, deaf to the
/// terminal's signals; learns the switch's address, then waits for the byte
/// that dismisses it, or the pipe's end (the recorder died: restore).
///
/// # Safety
/// Only in the child of `fork`: async-signal-safe system calls only.
unsafe fn guard(read_end: i32, write_end: i32, mem: &File, slots: &[Slot]) -> ! {
    // SAFETY: async-signal-safe calls (the caller's contract).
    unsafe {
        libc::close(write_end);
        libc::setsid();
        for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
            libc::signal(signal, libc::SIG_IGN);
        }
        let read_exact = |buf: &mut [u8]| -> bool {
            let mut got = 0;
            while got < buf.len() {
                let n = libc::read(read_end, buf[got..].as_mut_ptr().cast(), buf.len() - got);
                if n > 0 {
                    got += n as usize;
                } else if n == 0 || *libc::__errno_location() != libc::EINTR {
                    return false;
                }
            }
            true
        };
        let mut switch = [0u8; 8];
        let mut dismissed = [0u8; 1];
        let switch_known = read_exact(&mut switch);
        if switch_known && read_exact(&mut dismissed) {
            libc::_exit(0);
        }
        let fd = mem.as_raw_fd();
        if switch_known && switch != [0; 8] {
            let off: u8 = 0;
            libc::pwrite(
                fd,
                (&off as *const u8).cast(),
                1,
                u64::from_ne_bytes(switch) as i64,
            );
        }
        for s in slots {
            let mut now = 0u64;
            let read = libc::pread(fd, (&mut now as *mut u64).cast(), 8, s.address as i64);
            if read == 8 && now == s.wrapper {
                libc::pwrite(fd, (&s.original as *const u64).cast(), 8, s.address as i64);
            }
        }
        libc::_exit(0)
    }
}
