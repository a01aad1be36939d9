//! `ordo record`: launch a program (or attach to one) and record its
//! synchronization events into a trace. The work is done by
//! `ordo_recorder::session`; this is the command line.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::Args;
use ordo_recorder::{
    check_privileges, parse_buffer_size, probes, record_attached, record_launched, ProbeChoice,
    SessionOptions,
};

/// Arguments of `ordo record`.
#[derive(Args)]
pub struct RecordArgs {
    /// Trace file to write (default: PROGRAM.ordo, or pid-PID.ordo when attaching).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Replace the trace file if it exists (without it an existing file is refused).
    #[arg(long)]
    pub force: bool,
    /// The kernel probes' ring buffer size (power of two, e.g. 16M, 512K; default
    /// 16M, or 4M for a launch recorded in process without watches, where the
    /// ring carries system calls only).
    #[arg(long, value_parser = parse_buffer_size)]
    pub buffer_size: Option<usize>,
    /// Attach to this running process instead of launching a command.
    #[arg(long, conflicts_with = "command")]
    pub pid: Option<u32>,
    /// With --pid: stop recording after this many seconds (default: until Ctrl-C or exit).
    #[arg(long, requires = "pid", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Record every read and write of a variable: NAME (as `nm -C` prints it, or a Rust
    /// path), NAME.field, NAME[2], POINTER->field, FILE.c:NAME, NAME+OFFSET:SIZE or
    /// 0xADDR:SIZE (instruction-site uprobes; repeatable).
    #[arg(long, value_name = "SPEC")]
    pub watch: Vec<String>,
    /// Record reads and writes of a variable with a hardware watchpoint (at most 4;
    /// catches accesses through pointers too; same names as --watch, without `->`).
    #[arg(long = "watch-hw", value_name = "SPEC")]
    pub watch_hw: Vec<String>,
    /// Record an `at` event each time a thread reaches a program point:
    /// `file.c:LINE`, `function` or `function+OFFSET` (repeatable; schedules name
    /// it `T:at(function+OFFSET)#N`).
    #[arg(long, value_name = "SPEC")]
    pub mark: Vec<String>,
    /// Find the memory threads share, with no variable named: every instruction of
    /// the program that may read or write data other than its own stack gets a
    /// software breakpoint for its first traps (bounded per instruction), and each
    /// access is recorded with its address and instruction (`ordo analyze` lists
    /// the shared locations; schedules name accesses `T:at(function+OFFSET)#N`).
    /// Launched, dynamically linked programs (in process).
    #[arg(long, conflicts_with_all = ["pid", "sparse_times"])]
    pub discover: bool,
    /// Hold the end of the program (`main` returning, a call to `exit`) until every
    /// other thread has exited or blocked, at most 2 s: the recording shows what
    /// threads the exit would have cut short do (a worker that had not run yet, a
    /// result read before it was written). Launched, dynamically linked programs.
    #[arg(long, conflicts_with = "pid")]
    pub hold_exit: bool,
    /// Extra environment variable for the launched program (KEY=VALUE, repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = parse_env)]
    pub env: Vec<(OsString, OsString)>,
    /// Where the pthread API is recorded: `inproc` (a preloaded agent writes events
    /// into memory the recorder drains: tens of nanoseconds a call), `ebpf` (uprobes:
    /// microseconds a call), or `auto` (inproc for dynamically linked programs,
    /// launched here or attached to with --pid, where the agent is loaded into the
    /// running process; ebpf for static or setuid ones and where loading fails).
    #[arg(long, value_enum, default_value = "auto")]
    pub probes: Probes,
    /// In process (launched, or attached to with --pid), read the clock only where
    /// an event may follow a wait (a blocking call, a contended lock) and at least
    /// every 16th event of a thread; the others get the thread's previous time plus
    /// one tick. Order stays exact; a time may be early by up to the drain's pass
    /// interval (5–20 ms). Costs busy lock-heavy programs less (see README).
    #[arg(long)]
    pub sparse_times: bool,
    /// In process: write events into the trace as they come, converting them at the
    /// program's priority, rather than (by default) after a launched program ends or
    /// while a CPU is spare. A recorder killed with SIGKILL (the OOM killer, a job's
    /// time limit) then leaves a trace of what was recorded until shortly before,
    /// where by default it may leave none of the in-process events; on a machine the
    /// program fills, the conversion's CPU (~0.3 CPU under memcached's load) comes
    /// out of the program's.
    #[arg(long)]
    pub keep_trace_current: bool,
    /// Say which path records what and what it cannot see, and with eBPF where each
    /// libc probe sits (one line per site: function, offset, instruction, emulated
    /// or single-stepped, events) before recording.
    #[arg(short, long)]
    pub verbose: bool,
    /// Print the probe placement and exit without recording (no root needed).
    #[arg(long)]
    pub list_probes: bool,
    /// With --list-probes: one JSON object per site.
    #[arg(long, requires = "list_probes")]
    pub json: bool,
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

/// Prints the probe placement for the system libc: a table, or JSON lines.
fn print_probes(json: bool, out: &mut dyn std::io::Write) -> Result<()> {
    let libc = probes::system_libc()?;
    let plan = probes::plan(&libc)?;
    for site in &plan.report {
        let line = if json {
            serde_json::json!({
                "function": site.function,
                "library": libc.display().to_string(),
                "offset": format!("{:#x}", site.offset),
                "function_offset": site.function_offset,
                "instruction": site.instruction,
                "emulated": site.emulated,
                "program": site.program,
                "events": site.events,
                "fallback": site.fallback,
            })
            .to_string()
        } else {
            format!(
                "{:26} {:#9x} +{:<#6x} {:36} {:14} {}{}",
                site.function,
                site.offset,
                site.function_offset,
                site.instruction,
                if site.emulated {
                    "emulated"
                } else {
                    "single-stepped"
                },
                site.events,
                site.fallback
                    .as_deref()
                    .map(|f| format!(" [fallback: {f}]"))
                    .unwrap_or_default()
            )
        };
        writeln!(out, "{line}")?;
    }
    Ok(())
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    match text.parse::<f64>() {
        Ok(d) if d > 0.0 && d.is_finite() => Ok(Duration::from_secs_f64(d)),
        _ => Err(format!("`{text}`: expected a positive number of seconds")),
    }
}

fn parse_env(text: &str) -> Result<(OsString, OsString), String> {
    match text.split_once('=') {
        Some((k, v)) => Ok((OsString::from(k), OsString::from(v))),
        None => Err(format!("`{text}`: expected KEY=VALUE")),
    }
}

pub fn run(args: RecordArgs) -> Result<u8> {
    if args.list_probes {
        print_probes(args.json, &mut std::io::stdout().lock())?;
        return Ok(0);
    }
    if args.pid.is_none() && args.command.is_empty() {
        bail!("nothing to record: give a command after `--` (ordo record -- ./prog args) or --pid PID");
    }
    if args.duration.is_some() && args.pid.is_none() {
        bail!("--duration works with --pid only: a launched program is recorded until it exits (stop it with Ctrl-C, or launch it under `timeout`)");
    }
    check_privileges()?;
    // The libc probe sites matter only where they are attached.
    if args.verbose && (args.pid.is_some() || args.probes == Probes::Ebpf) {
        let mut text = Vec::new();
        print_probes(false, &mut text)?;
        say(&String::from_utf8_lossy(&text));
    }
    let options = SessionOptions {
        output: args.output,
        buffer_size: args.buffer_size,
        watch: args.watch,
        watch_hw: args.watch_hw,
        mark: args.mark,
        env: args.env,
        duration: args.duration,
        probes: match args.probes {
            Probes::Auto => ProbeChoice::Auto,
            Probes::Inproc => ProbeChoice::Inproc,
            Probes::Ebpf => ProbeChoice::Ebpf,
        },
        verbose: args.verbose,
        force: args.force,
        sparse_times: args.sparse_times,
        keep_trace_current: args.keep_trace_current,
        discover: args.discover,
        hold_exit: args.hold_exit,
    };
    let mut note = |line: &str| say(&format!("{line}\n"));
    let end = match args.pid {
        Some(pid) => record_attached(pid, &options, &mut note)?,
        None => record_launched(&args.command, &options, &mut note)?,
    };
    say(&end.summary.render());
    Ok(end.exit_code)
}

/// Writes to stderr, ignoring errors: a closed stderr (`ordo record … 2>&1 | head`)
/// must not turn a finished recording into a panic.
fn say(text: &str) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(text.as_bytes());
}
