//! `ordo record` end to end: launch a program (or attach to a running one), record
//! it, stop on its exit, a signal or a deadline, and finish the trace.
//!
//! Signals: SIGINT, SIGTERM and SIGHUP to the recorder finish the trace instead of
//! killing the recorder. When launching, the first one is forwarded to the program
//! (unless it came from the terminal, which already sent it to the program's whole
//! process group) and the recording ends when the program exits; a second one kills
//! the program with SIGKILL and the recording ends at once: the program was started
//! by, and is recorded for, this command, and leaving it running unrecorded behind a
//! finished trace would surprise more than stopping it. When attached (`--pid`), a
//! signal stops the recording and detaches; the target keeps running.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::{launch, watching, RecordOptions, RecordSummary, Recording};

/// What `ordo record` was asked to do.
#[derive(Clone, Debug, Default)]
pub struct SessionOptions {
    /// Trace file (default: PROGRAM.ordo, or pid-PID.ordo when attaching).
    pub output: Option<PathBuf>,
    /// The kernel probes' ring buffer size in bytes (`None`: [`DEFAULT_BUFFER_SIZE`],
    /// or [`INPROC_BUFFER_SIZE`] for a launch recorded in process without watches).
    ///
    /// [`DEFAULT_BUFFER_SIZE`]: crate::DEFAULT_BUFFER_SIZE
    /// [`INPROC_BUFFER_SIZE`]: crate::INPROC_BUFFER_SIZE
    pub buffer_size: Option<usize>,
    /// `--watch` specs.
    pub watch: Vec<String>,
    /// `--watch-hw` specs.
    pub watch_hw: Vec<String>,
    /// `--mark` specs: program points recorded as `at` events.
    pub mark: Vec<String>,
    /// Extra environment for a launched program.
    pub env: Vec<(OsString, OsString)>,
    /// When attached: stop after this long.
    pub duration: Option<Duration>,
    /// Where the pthread API is recorded (launched or attached).
    pub probes: ProbeChoice,
    /// Say which path records what, and what it cannot see.
    pub verbose: bool,
    /// Replace an existing trace file (otherwise it is refused before anything runs).
    pub force: bool,
    /// In process: read the clock sparsely (exact order, times that are lower
    /// bounds; see `ordo_probe_common::inproc::CLOCK_SPARSE`).
    pub sparse_times: bool,
    /// In process: convert events into the trace as they come, at the program's
    /// priority ([`crate::inproc::Conversion::Live`]), so that a recorder killed
    /// outright leaves what was recorded until shortly before.
    pub keep_trace_current: bool,
    /// Find shared memory with software breakpoints on the program's memory-access
    /// instructions (see [`crate::discover`]); in process only.
    pub discover: bool,
    /// Hold the process's end (`main` returning, `exit`) until every other thread
    /// has exited or blocked, at most [`HOLD_EXIT_MS`]: the recording shows what
    /// threads cut short by the exit would have done. In process only.
    pub hold_exit: bool,
}

/// The longest a held exit waits for the other threads, in milliseconds.
pub const HOLD_EXIT_MS: u32 = 2000;

/// The environment variable asking the agent to hold the exit (its value: at most
/// how many milliseconds).
pub const HOLD_EXIT_ENV: &str = ordo_probe_common::inproc::ENV_HOLD_EXIT;

/// Where the pthread API is recorded (`ordo record --probes`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ProbeChoice {
    /// In process for dynamically linked, not setuid launched programs and for
    /// attached ones where the agent can be loaded; eBPF otherwise.
    #[default]
    Auto,
    /// In process, through the preloaded agent (falls back to eBPF where it cannot).
    Inproc,
    /// eBPF uprobes on libc.
    Ebpf,
}

/// Whether a launched `program` is recorded in process, saying why not when it was
/// asked for and cannot be.
fn use_inproc(choice: ProbeChoice, program: &Path, say: &mut dyn FnMut(&str)) -> bool {
    if choice == ProbeChoice::Ebpf {
        return false;
    }
    if !launch::is_dynamic(program) {
        if choice == ProbeChoice::Inproc {
            say("ordo: --probes inproc: the program is statically linked, the agent cannot be preloaded: recording with eBPF");
        }
        return false;
    }
    if launch::is_setuid(program) {
        say(&format!(
            "ordo: {} is setuid/setgid: the loader ignores LD_PRELOAD for it: recording with eBPF",
            program.display()
        ));
        return false;
    }
    true
}

/// What `-v` says about the recording path.
fn verbose_note(inproc: bool) -> &'static str {
    if inproc {
        "ordo: recording in process: a preloaded agent records the pthread, semaphore, condvar, rwlock, barrier, create/join calls and futex calls through libc's syscall(); eBPF records thread creation, start and exit (no syscall tracepoint) and watches.\n\
         ordo: not seen in process: glibc-internal locks (e.g. the dynamic loader's lock inside pthread_create and dlopen), pthread calls from statically linked code or through pointers resolved before the agent loaded, futex calls made with a raw syscall instruction, child processes, and anything after an exec (use --probes ebpf)."
    } else {
        "ordo: recording with eBPF: uprobes on libc's pthread API (each call traps into the kernel), the futex syscall's tracepoints, and tracepoints for thread creation and exit."
    }
}

/// How a recording session ended.
pub struct SessionEnd {
    /// The recording's totals.
    pub summary: RecordSummary,
    /// The exit code `ordo record` should return: the program's own (128 + signal
    /// when killed), 0 when attached; [`EXIT_WRITE_FAILED`] when the trace could
    /// not be written whole (the summary says how the program ended).
    pub exit_code: u8,
}

/// `ordo record`'s exit code when writing the trace failed (sysexits' EX_IOERR).
pub const EXIT_WRITE_FAILED: u8 = 74;

impl SessionEnd {
    fn new(summary: RecordSummary, exit_code: u8) -> SessionEnd {
        let exit_code = if summary.write_error.is_some() {
            EXIT_WRITE_FAILED
        } else {
            exit_code
        };
        SessionEnd { summary, exit_code }
    }
}

/// Signals received (SIGINT, SIGTERM, SIGHUP), the program to forward them to, and
/// a signal that arrived before the program ran.
static SIGNALS: AtomicU32 = AtomicU32::new(0);
static CHILD: AtomicI32 = AtomicI32::new(0);
static EARLY_SIGNAL: AtomicI32 = AtomicI32::new(0);

/// `si_code` of signals raised by the kernel (a terminal's Ctrl-C or hangup).
const SI_KERNEL: i32 = 0x80;

extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    let first = SIGNALS.fetch_add(1, Ordering::SeqCst) == 0;
    let child = CHILD.load(Ordering::SeqCst);
    if child <= 0 {
        if first {
            EARLY_SIGNAL.store(sig, Ordering::SeqCst);
        }
        return;
    }
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let from_terminal = !info.is_null() && unsafe { (*info).si_code } == SI_KERNEL;
    // SAFETY: kill is async-signal-safe.
    unsafe {
        if !first {
            libc::kill(child, libc::SIGKILL);
        } else if !from_terminal {
            libc::kill(child, sig);
        }
    }
}

/// Makes SIGINT, SIGTERM and SIGHUP finish the recording (see the module doc).
fn install_signal_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only touches atomics and calls kill.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
}

/// Launches `command` under recording until it exits. `say` prints notes for the user.
pub fn record_launched(
    command: &[String],
    options: &SessionOptions,
    say: &mut dyn FnMut(&str),
) -> Result<SessionEnd> {
    crate::recording::prepare_loader();
    let program = launch::find_program(&command[0])?;
    crate::phase("found");
    if !launch::is_dynamic(&program) {
        say(&format!("ordo: warning: {} is statically linked: its pthread calls cannot be probed; only futex and thread events are recorded", program.display()));
    }
    let output = options.output.clone().unwrap_or_else(|| {
        let base = program
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "trace".into());
        PathBuf::from(format!("{base}.ordo"))
    });
    // The probes load while the program's sites are planned and it is launched.
    let inproc = use_inproc(options.probes, &program, say);
    let unwatched =
        options.watch.is_empty() && options.watch_hw.is_empty() && options.mark.is_empty();
    let buffer_size = options.buffer_size.unwrap_or(if inproc && unwatched {
        crate::recording::INPROC_BUFFER_SIZE
    } else {
        crate::recording::DEFAULT_BUFFER_SIZE
    });
    crate::recording::prepare_probes(crate::recording::ProbeSizes::new(buffer_size, inproc));
    let mut record = RecordOptions::new(output, buffer_size, command.to_vec(), false);
    record.inputs.push(program.clone());
    refuse_output(&mut record, options.force)?;
    // Hardware watchpoints need runtime addresses before the program starts: run a
    // position-independent program without ASLR, so its load address is known.
    let pie = launch::is_pie(&program);
    let main_binary = std::fs::canonicalize(&program).unwrap_or(program.clone());
    let bias = |module: &Path| -> Option<u64> {
        (std::fs::canonicalize(module).ok()? == main_binary).then_some(if pie {
            launch::NO_ASLR_PIE_BASE
        } else {
            0
        })
    };
    let libs = launch::needed_libraries(&program);
    plan_watches(&mut record, options, &program, &libs, &bias, say)?;
    let no_aslr = !record.hw_watches.is_empty();
    // Watched accesses and marks interleave with the agent's events nanoseconds
    // apart (a store right after a lock returns): they need exact stamps on the
    // kernel's own clock rather than a calibrated TSC.
    let watched = !record.watch_sites.is_empty() || !record.hw_watches.is_empty();
    check_sparse_times(options, watched, inproc, say)?;
    if options.verbose {
        say(verbose_note(inproc));
    }
    // Rust's std mutex: its inlined lock and unlock, recorded by the agent at
    // software breakpoints (in process only).
    crate::phase("watches planned");
    let rust_locks = if inproc {
        crate::rust_locks::plan_rust_locks(&program)?
    } else {
        crate::rust_locks::RustLockPlan::default()
    };
    if options.verbose && !rust_locks.sites.is_empty() {
        say(&format!(
            "ordo: Rust std::sync: {} inlined Mutex acquisitions, {} try_locks and {} releases, {} RwLock acquisitions, {} try_reads/try_writes and {} releases, {} Condvar and {} Barrier functions, {} inlined Once completion checks{}, {} inlined unparks and {} park functions, {} channel send and {} receive functions, {} parking_lot Mutex/RwLock acquisitions, {} tries and {} releases, {} Condvar notifies{} in {}, recorded in process",
            rust_locks.locks,
            rust_locks.try_locks,
            rust_locks.unlocks,
            rust_locks.rw_locks,
            rust_locks.rw_tries,
            rust_locks.rw_unlocks,
            rust_locks.condvars,
            rust_locks.barriers,
            rust_locks.once_checks,
            if rust_locks.once_call { " and Once::call" } else { "" },
            rust_locks.unparks,
            rust_locks.parks,
            rust_locks.sends,
            rust_locks.receives,
            rust_locks.parking_lot_locks,
            rust_locks.parking_lot_tries,
            rust_locks.parking_lot_unlocks,
            rust_locks.parking_lot_notifies,
            if rust_locks.parking_lot_condvars > 0 {
                " and its wait"
            } else {
                ""
            },
            program.display()
        ));
    }
    if rust_locks.stripped_rust {
        say(&format!(
            "ordo: {} is a Rust binary without its symbol table: its std::sync Mutex, RwLock, Condvar, Barrier and Once operations and thread parking are not seen (only contended ones, as futex waits and wakes); keep the symbols (cargo's default) to record them",
            program.display()
        ));
    }
    crate::phase("rust locks planned");
    let discovery = match (options.discover, inproc) {
        (false, _) if rust_locks.sites.is_empty() => None,
        (false, _) => Some(crate::discover::SoftTable::create(
            &rust_locks.sites,
            crate::discover::DEFAULT_BUDGET,
        )?),
        (true, false) => bail!(
            "--discover records in process: it needs a dynamically linked, not setuid program and not --probes ebpf"
        ),
        (true, true) => {
            record.name_data_of = Some(program.clone());
            let plan = crate::discover::plan_discovery_with(&program, &rust_locks)?;
            crate::phase("discovery planned");
            if options.verbose {
                say(&format!(
                    "ordo: --discover: {} memory-access instructions in {} functions of {} (each trapped at most {} times; {} left out: stack, thread-local, read-only)",
                    plan.sites.len(),
                    plan.functions,
                    program.display(),
                    crate::discover::DEFAULT_BUDGET,
                    plan.skipped
                ));
            }
            Some(crate::discover::SoftTable::create(
                &plan.sites,
                crate::discover::DEFAULT_BUDGET,
            )?)
        }
    };
    // In process: the agent, preloaded ahead of the user's own LD_PRELOAD, records
    // into a mapping this process owns; the program inherits its descriptor.
    let mut env = options.env.clone();
    let mut agent = None;
    let mut inherit = Vec::new();
    if inproc {
        let mut mapping = crate::inproc::InprocMapping::create(!watched, options.sparse_times)?;
        if options.keep_trace_current {
            mapping.keep_trace_current();
        }
        let mapping = std::sync::Arc::new(mapping);
        crate::phase("mapping made");
        let file = ordo_agent::AgentFile::write()?;
        crate::phase("agent written");
        let user_preload = env
            .iter()
            .position(|(k, _)| k == "LD_PRELOAD")
            .map(|i| env.remove(i).1)
            .or_else(|| std::env::var_os("LD_PRELOAD"));
        env.extend(file.preload_env_over(&launch::sanitizer_runtimes(&program), user_preload));
        env.push(mapping.env());
        inherit.push(mapping.raw_fd());
        record.inproc = Some(mapping);
        agent = Some(file);
    }
    if options.hold_exit {
        if !inproc {
            bail!("--hold-exit is done by the in-process agent: it needs a dynamically linked, not setuid program and not --probes ebpf");
        }
        env.push((HOLD_EXIT_ENV.into(), HOLD_EXIT_MS.to_string().into()));
    }
    if let Some(table) = &discovery {
        env.push(table.env());
        inherit.push(table.raw_fd());
    }
    crate::phase("agent ready");
    install_signal_handlers();
    let stopped = launch::spawn_stopped_inheriting(command, &env, no_aslr, &inherit)?;
    crate::phase("spawned");
    // The module map is read while the program is held at its entry point, so even
    // a program that is over within a millisecond leaves a symbolized trace. In
    // process the agent's start holds it instead: it waits in the program's
    // constructors (all its start-up libraries mapped) until the drain has read
    // the map, which spares the launch tracing the program to its entry (~3-10
    // ms here, half of it a second read of the same map) and lets the `exec` and
    // the dynamic loader's work overlap the probes' loading.
    let (recording, released) = if inproc {
        let mut child = stopped.release()?;
        crate::phase("exec'd");
        record.exec_before_start = true;
        match start(child.id(), &record, say) {
            Ok(recording) => (recording, Ok((child, launch::EntryStop::Held))),
            Err(e) => {
                // Waiting in its agent for a recording that will not come.
                let _ = child.kill();
                let _ = child.wait();
                return Err(e);
            }
        }
    } else {
        let recording = start(stopped.pid(), &record, say)?;
        let released = stopped.release_held_at_entry(&mut || recording.snapshot_modules());
        (recording, released)
    };
    crate::phase("recording started");
    let (mut child, held) = match released {
        Ok(released) => released,
        Err(e) => {
            let _ = recording.finish(None);
            return Err(e);
        }
    };
    crate::phase("released");
    CHILD.store(child.id() as i32, Ordering::SeqCst);
    if held == launch::EntryStop::NotHeld {
        snapshot_after_exec(&recording, child.id(), !launch::is_dynamic(&program));
    }
    let early = EARLY_SIGNAL.swap(0, Ordering::SeqCst);
    if early != 0 {
        // Asked to stop while the probes were being attached: pass it on now.
        // SAFETY: kill on our own child.
        unsafe { libc::kill(child.id() as i32, early) };
    }
    let status = child.wait().context("wait for the program")?;
    crate::phase("child exited");
    CHILD.store(0, Ordering::SeqCst);
    let summary = recording.finish(Some(status))?;
    crate::phase(&format!("finished ({})", crate::own_cpu()));
    drop(agent);
    drop(discovery);
    Ok(SessionEnd::new(summary, exit_code(status)))
}

/// When the program could not be held at its entry point: hands the trace its
/// modules as soon as the dynamic loader has mapped libc (at most [`SNAPSHOT_WAIT`] after `exec`), so even a program that
/// exits within milliseconds leaves a symbolized trace.
pub fn snapshot_after_exec(recording: &Recording, pid: u32, is_static: bool) {
    let started = std::time::Instant::now();
    loop {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        if maps.is_empty() {
            return; // already gone
        }
        if is_static || maps.contains("/libc.so.6") || started.elapsed() >= SNAPSHOT_WAIT {
            recording.snapshot_modules();
            return;
        }
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
}

/// How long [`snapshot_after_exec`] waits for the loader to map libc.
const SNAPSHOT_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

/// Records the running process `pid` until it exits, `options.duration` passes or
/// a signal arrives; the process keeps running.
pub fn record_attached(
    pid: u32,
    options: &SessionOptions,
    say: &mut dyn FnMut(&str),
) -> Result<SessionEnd> {
    crate::recording::prepare_loader();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
        .with_context(|| format!("--pid {pid}: no such process"))?;
    let command: Vec<String> = cmdline
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect();
    let output = options
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("pid-{pid}.ordo")));
    let buffer_size = options
        .buffer_size
        .unwrap_or(crate::recording::DEFAULT_BUFFER_SIZE);
    let mut record = RecordOptions::new(output, buffer_size, command, true);
    refuse_output(&mut record, options.force)?;
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
        .with_context(|| format!("--pid {pid}: cannot read its executable"))?;
    let libs: Vec<PathBuf> = ordo_trace::symbolize::modules_of_process(pid)
        .into_iter()
        .map(|m| PathBuf::from(m.path))
        .filter(|p| *p != exe)
        .collect();
    let bias = |module: &Path| watching::load_bias_in(pid, module);
    plan_watches(&mut record, options, &exe, &libs, &bias, say)?;
    install_signal_handlers();
    // In process unless asked for eBPF: the agent loaded into the target records
    // into a mapping shared with it (see attach_in_process).
    let watched = !record.watch_sites.is_empty() || !record.hw_watches.is_empty();
    check_sparse_times(
        options,
        watched,
        !matches!(options.probes, ProbeChoice::Ebpf),
        say,
    )?;
    let prepared = match options.probes {
        ProbeChoice::Ebpf => None,
        ProbeChoice::Auto | ProbeChoice::Inproc => {
            match crate::attach_in_process::prepare(
                pid as i32,
                !watched,
                options.sparse_times,
                options.keep_trace_current,
            ) {
                Ok(prepared) => Some(prepared),
                Err(e) => {
                    say(&format!(
                        "ordo: cannot attach in process ({e:#}): recording with eBPF uprobes"
                    ));
                    None
                }
            }
        }
    };
    record.inproc = prepared.as_ref().map(|p| p.mapping.clone());
    let recording = start(pid, &record, say)?;
    let attached = match &prepared {
        None => None,
        Some(prepared) => match crate::attach_in_process::attach(pid as i32, prepared) {
            Ok(attached) => Some(attached),
            Err(e) => {
                // Nothing was recorded: record again the other way.
                drop(recording);
                say(&format!(
                    "ordo: cannot attach in process ({e:#}): recording with eBPF uprobes"
                ));
                let ebpf = SessionOptions {
                    probes: ProbeChoice::Ebpf,
                    force: true,
                    ..options.clone()
                };
                return record_attached(pid, &ebpf, say);
            }
        },
    };
    if let (Some(attached), true) = (&attached, options.verbose) {
        say(&format!(
            "ordo: recording in process: the agent is loaded into pid {pid} and {} GOT slots of the pthread functions point at it ({}); not seen: calls from modules loaded later, libc's calls to itself, calls through pointers taken before attaching",
            attached.slots(),
            attached
                .per_module
                .iter()
                .map(|(path, n)| format!("{path}: {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let deadline = options.duration.map(|d| Instant::now() + d);
    say(&format!("ordo: recording pid {pid}; Ctrl-C to stop"));
    let alive = || Path::new(&format!("/proc/{pid}/task")).exists() && !is_zombie(pid);
    while SIGNALS.load(Ordering::SeqCst) == 0
        && deadline.is_none_or(|d| Instant::now() < d)
        && alive()
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    if let Some(attached) = attached {
        match attached.detach() {
            Ok(detached) if options.verbose => say(&format!(
                "ordo: detached from pid {pid}: {} GOT slots restored{}",
                detached.restored,
                if detached.changed > 0 {
                    format!(
                        ", {} rewritten by the program meanwhile and left as they were",
                        detached.changed
                    )
                } else {
                    String::new()
                }
            )),
            Ok(_) => {}
            Err(e) if alive() => say(&format!("ordo: warning: detaching from pid {pid}: {e:#}")),
            Err(_) => {}
        }
    }
    let summary = recording.finish(None);
    if let Some(prepared) = &prepared {
        prepared.mapping.release_pages();
    }
    Ok(SessionEnd::new(summary?, 0))
}

/// Refuses the trace path before anything is launched or attached: an existing
/// file without `--force`, a symlink, or the recorded program itself.
/// Refuses `--sparse-times` with watches (they are placed among the pthread calls
/// by exact time stamps) and says it changes nothing on the eBPF path.
fn check_sparse_times(
    options: &SessionOptions,
    watched: bool,
    inproc: bool,
    say: &mut dyn FnMut(&str),
) -> Result<()> {
    if !options.sparse_times {
        return Ok(());
    }
    if watched {
        bail!("--sparse-times cannot be used with --watch, --watch-hw or --mark: what they record is placed among the pthread calls by exact time stamps");
    }
    if !inproc {
        say("ordo: --sparse-times applies to the in-process path only: every event is stamped");
    }
    Ok(())
}

fn refuse_output(record: &mut RecordOptions, force: bool) -> Result<()> {
    record.replace_existing = force;
    let inputs: Vec<&Path> = record.inputs.iter().map(PathBuf::as_path).collect();
    ordo_trace::output::check(&record.output, force, &inputs)
        .with_context(|| format!("-o {}", record.output.display()))
}

fn start(pid: u32, record: &RecordOptions, say: &mut dyn FnMut(&str)) -> Result<Recording> {
    let recording = Recording::start(pid, record)?;
    for note in recording.notes() {
        say(&format!("ordo: note: {note}"));
    }
    Ok(recording)
}

/// Resolves the watches against the program and its libraries into `record`.
fn plan_watches(
    record: &mut RecordOptions,
    options: &SessionOptions,
    binary: &Path,
    libs: &[PathBuf],
    bias: &dyn Fn(&Path) -> Option<u64>,
    say: &mut dyn FnMut(&str),
) -> Result<()> {
    let watches = watching::plan(&options.watch, &options.watch_hw, binary, libs, bias)?;
    for note in &watches.notes {
        say(&format!("ordo: {note}"));
    }
    record.watch_sites = watches.sites;
    record.hw_watches = watches.hw;
    record.watch_names = watches.names;
    let (marks, notes) = watching::plan_marks(&options.mark, binary)?;
    for note in &notes {
        say(&format!("ordo: {note}"));
    }
    record.watch_sites.extend(marks);
    Ok(())
}

fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(sig)) => 128u8.wrapping_add(sig as u8),
        _ => 1,
    }
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}
