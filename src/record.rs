//! `ordo record`: launch a program (or attach to one) and record its
//! synchronization events into a trace.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use ordo_recorder::{
    check_privileges, launch, parse_buffer_size, spawn_stopped_inheriting, watching, RecordOptions,
    Recording,
};

/// Arguments of `ordo record`.
#[derive(Args)]
pub struct RecordArgs {
    /// Trace file to write (default: PROGRAM.ordo, or pid-PID.ordo when attaching).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Ring buffer size (power of two, e.g. 16M, 512K).
    #[arg(long, value_parser = parse_buffer_size, default_value = "16M")]
    pub buffer_size: usize,
    /// Attach to this running process instead of launching a command.
    #[arg(long, conflicts_with = "command")]
    pub pid: Option<u32>,
    /// With --pid: stop recording after this many seconds (default: until Ctrl-C or exit).
    #[arg(long, requires = "pid")]
    pub duration: Option<f64>,
    /// Record every read and write of a variable: SYMBOL, SYMBOL+OFFSET:SIZE or 0xADDR:SIZE
    /// (instruction-site uprobes; repeatable).
    #[arg(long, value_name = "SPEC")]
    pub watch: Vec<String>,
    /// Record writes of a variable with a hardware watchpoint (at most 4; catches
    /// accesses through pointers too).
    #[arg(long = "watch-hw", value_name = "SPEC")]
    pub watch_hw: Vec<String>,
    /// Extra environment variable for the launched program (KEY=VALUE, repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<String>,
    /// Where the pthread API is recorded: `inproc` (a preloaded agent writes events
    /// into memory the recorder drains: tens of nanoseconds a call), `ebpf` (uprobes:
    /// microseconds a call), or `auto` (inproc for dynamically linked programs
    /// launched here, ebpf for static or setuid ones and when attaching).
    #[arg(long, value_enum, default_value = "auto")]
    pub probes: Probes,
    /// Say which path records what, and what it cannot see.
    #[arg(short, long)]
    pub verbose: bool,
    /// The command to launch, after `--`.
    #[arg(last = true)]
    pub command: Vec<String>,
}

/// Where the pthread API is recorded (`--probes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Probes {
    /// In process for dynamically linked launched programs, eBPF otherwise.
    Auto,
    /// In process, through the preloaded agent.
    Inproc,
    /// eBPF uprobes on libc.
    Ebpf,
}

static SIGNALS: AtomicU32 = AtomicU32::new(0);
static CHILD: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(_: libc::c_int) {
    // The launched program got the same Ctrl-C (same process group) and normally
    // exits on it; a second one kills it so the recording can always be finished.
    if SIGNALS.fetch_add(1, Ordering::SeqCst) >= 1 {
        let child = CHILD.load(Ordering::SeqCst);
        if child > 0 {
            // SAFETY: kill is async-signal-safe.
            unsafe { libc::kill(child, libc::SIGKILL) };
        }
    }
}

fn install_signal_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: installing a handler that only touches atomics and calls kill.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as usize;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
}

pub fn run(args: RecordArgs) -> Result<u8> {
    if args.pid.is_none() && args.command.is_empty() {
        bail!("nothing to record: give a command after `--` (ordo record -- ./prog args) or --pid PID");
    }
    let mut env = Vec::new();
    for pair in &args.env {
        let Some((k, v)) = pair.split_once('=') else {
            bail!("--env {pair}: expected KEY=VALUE");
        };
        env.push((OsString::from(k), OsString::from(v)));
    }
    if let Some(d) = args.duration {
        if !(d > 0.0 && d.is_finite()) {
            bail!("--duration {d}: expected a positive number of seconds");
        }
    }
    if args.pid.is_some() && args.probes == Probes::Inproc {
        bail!("--probes inproc: attaching to a running process records with eBPF only (the agent must be loaded at start-up)");
    }
    check_privileges()?;
    match args.pid {
        Some(pid) => attach(pid, &args),
        None => launch_and_record(&args, &env),
    }
}

fn launch_and_record(args: &RecordArgs, env: &[(OsString, OsString)]) -> Result<u8> {
    let program = launch::find_program(&args.command[0])?;
    let dynamic = launch::is_dynamic(&program);
    if !dynamic {
        say(&format!("ordo: warning: {} is statically linked: its pthread calls cannot be probed; only futex and thread events are recorded\n", program.display()));
    }
    let inproc = match args.probes {
        Probes::Ebpf => false,
        Probes::Auto | Probes::Inproc => {
            if !dynamic {
                if args.probes == Probes::Inproc {
                    say("ordo: --probes inproc: the program is statically linked, the agent cannot be preloaded: recording with eBPF\n");
                }
                false
            } else if launch::is_setuid(&program) {
                say(&format!("ordo: {} is setuid/setgid: the loader ignores LD_PRELOAD for it: recording with eBPF\n", program.display()));
                false
            } else {
                true
            }
        }
    };
    if args.verbose {
        say(&verbose_note(inproc));
    }
    let output = args.output.clone().unwrap_or_else(|| {
        let base = program
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "trace".into());
        PathBuf::from(format!("{base}.ordo"))
    });
    let mut options = RecordOptions::new(output, args.buffer_size, args.command.clone(), false);
    // Hardware watchpoints need runtime addresses before the program starts: run a
    // position-independent program without ASLR, so its load address is known.
    let pie = watching::is_pie(&program);
    let main_binary = std::fs::canonicalize(&program).unwrap_or(program.clone());
    let bias = |module: &std::path::Path| -> Option<u64> {
        (std::fs::canonicalize(module).ok()? == main_binary).then_some(if pie {
            launch::NO_ASLR_PIE_BASE
        } else {
            0
        })
    };
    let libs = launch::needed_libraries(&program);
    let watches = watching::plan(&args.watch, &args.watch_hw, &program, &libs, &bias)?;
    for note in &watches.notes {
        say(&format!("ordo: {note}\n"));
    }
    options.watch_sites = watches.sites;
    options.hw_watches = watches.hw;
    let no_aslr = !options.hw_watches.is_empty();
    // In process: the agent, preloaded ahead of the user's own LD_PRELOAD, records
    // into a mapping this process owns; the program inherits its descriptor.
    let mut env = env.to_vec();
    let mut agent = None;
    let mut inherit = Vec::new();
    if inproc {
        let mapping = std::sync::Arc::new(ordo_recorder::inproc::InprocMapping::create()?);
        let file = ordo_agent::AgentFile::write()?;
        let user_preload = env
            .iter()
            .position(|(k, _)| k == "LD_PRELOAD")
            .map(|i| env.remove(i).1)
            .or_else(|| std::env::var_os("LD_PRELOAD"));
        env.extend(file.preload_env_over(user_preload));
        env.push(mapping.env());
        inherit.push(mapping.raw_fd());
        options.inproc = Some(mapping);
        agent = Some(file);
    }
    let stopped = spawn_stopped_inheriting(&args.command, &env, no_aslr, &inherit)?;
    let recording = Recording::start(stopped.pid(), &options)?;
    CHILD.store(stopped.pid() as i32, Ordering::SeqCst);
    install_signal_handlers();
    let mut child = match stopped.release() {
        Ok(child) => child,
        Err(e) => {
            let _ = recording.finish(None);
            return Err(e);
        }
    };
    let status = child.wait().context("wait for the program")?;
    let summary = recording.finish(Some(status))?;
    drop(agent);
    say(&summary.render());
    use std::os::unix::process::ExitStatusExt;
    Ok(match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(sig)) => 128u8.wrapping_add(sig as u8),
        _ => 1,
    })
}

fn attach(pid: u32, args: &RecordArgs) -> Result<u8> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
        .with_context(|| format!("--pid {pid}: no such process"))?;
    let command: Vec<String> = cmdline
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect();
    let output = args
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("pid-{pid}.ordo")));
    let mut options = RecordOptions::new(output, args.buffer_size, command, true);
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
        .with_context(|| format!("--pid {pid}: cannot read its executable"))?;
    let libs: Vec<PathBuf> = ordo_trace::symbolize::modules_of_process(pid)
        .into_iter()
        .map(|m| PathBuf::from(m.path))
        .filter(|p| *p != exe)
        .collect();
    let bias = |module: &std::path::Path| watching::load_bias_in(pid, module);
    let watches = watching::plan(&args.watch, &args.watch_hw, &exe, &libs, &bias)?;
    for note in &watches.notes {
        say(&format!("ordo: {note}\n"));
    }
    options.watch_sites = watches.sites;
    options.hw_watches = watches.hw;
    let recording = Recording::start(pid, &options)?;
    install_signal_handlers();
    let deadline = args
        .duration
        .map(|d| Instant::now() + Duration::from_secs_f64(d));
    say(&format!("ordo: recording pid {pid}; Ctrl-C to stop\n"));
    let alive = || std::path::Path::new(&format!("/proc/{pid}/task")).exists() && !is_zombie(pid);
    while SIGNALS.load(Ordering::SeqCst) == 0
        && deadline.is_none_or(|d| Instant::now() < d)
        && alive()
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let summary = recording.finish(None)?;
    say(&summary.render());
    Ok(0)
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

/// Writes to stderr, ignoring errors: a closed stderr (`ordo record … 2>&1 | head`)
/// must not turn a finished recording into a panic.
fn say(text: &str) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(text.as_bytes());
}

/// What `-v` says about the recording path.
fn verbose_note(inproc: bool) -> String {
    if inproc {
        "ordo: recording in process: a preloaded agent records the pthread, semaphore, condvar, rwlock, barrier, create/join calls and futex calls through libc's syscall(); eBPF records thread start/exit, clone and watches.\n\
         ordo: not seen in process: glibc-internal locks (e.g. the dynamic loader's lock inside pthread_create and dlopen), pthread calls from statically linked code or through pointers resolved before the agent loaded, futex calls made with a raw syscall instruction, child processes, and anything after an exec (use --probes ebpf).\n".to_string()
    } else {
        "ordo: recording with eBPF: uprobes on libc's pthread API (each call traps into the kernel), raw tracepoints for futex, clone and exit.\n".to_string()
    }
}
