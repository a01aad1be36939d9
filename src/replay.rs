//! `ordo replay`: rerun a program enforcing (or only checking) a schedule, and say
//! whether the bug showed: exit status 0 passed, 1 reproduced, 2 error, 3 infeasible,
//! 4 not exercised (docs/REPLAY.md).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::{Args, ValueEnum};
use ordo_recorder::parse_buffer_size;
use ordo_replayer::access::AccessWatches;
use ordo_replayer::run::read_schedule;
use ordo_replayer::{replay, Mode, OnInfeasible, ReplayOptions};

use crate::oracle_args::OracleArgs;

/// What to do when the schedule proves infeasible.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum InfeasibleAction {
    /// Kill the program at once.
    Kill,
    /// Open every gate and let the program finish freely.
    Release,
}

/// Arguments of `ordo replay`.
#[derive(Args)]
pub struct ReplayArgs {
    /// The schedule file (see docs/SCHEDULE.md).
    #[arg(short, long, value_name = "FILE")]
    pub schedule: PathBuf,
    /// Print the outcome as one JSON object on stdout (the program's own stdout then
    /// goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// Kill the program after this many seconds.
    #[arg(long, value_name = "S", default_value = "60", value_parser = ordo_replayer::run::parse_timeout)]
    pub timeout: f64,
    /// A run is stuck when every thread stayed blocked (or held), with no progress,
    /// this many milliseconds: a deadlock, or an infeasible schedule.
    #[arg(long, value_name = "MS", default_value = "300")]
    pub stall_ms: u64,
    /// When the schedule is infeasible: kill the program, or release it to finish freely.
    #[arg(long, value_enum, default_value = "kill")]
    pub on_infeasible: InfeasibleAction,
    /// Record the replay into this trace and check the schedule held on the recording.
    #[arg(long, value_name = "OUT")]
    pub record: Option<PathBuf>,
    /// With --record: also record the program's plain memory accesses, as
    /// `ordo record --discover` does.
    #[arg(long, requires = "record")]
    pub discover: bool,
    /// The kernel probes' ring buffer size for --record (power of two, e.g. 16M;
    /// default 16M, or 4M when the recording watches nothing by eBPF).
    #[arg(long, value_parser = parse_buffer_size)]
    pub buffer_size: Option<usize>,
    /// A variable whose accesses the schedule orders (`read`/`write`/`rmw` events):
    /// SYMBOL, SYMBOL+OFFSET:SIZE or 0xADDR:SIZE, as for `ordo record --watch`. The
    /// agent arms a hardware breakpoint on each instruction that accesses it in the
    /// threads that need it (at most 4 per thread). A variable the schedule names
    /// needs no --watch unless its size or field matters (repeatable).
    #[arg(long, value_name = "SPEC")]
    pub watch: Vec<String>,
    /// A variable also reached through pointers, as for `ordo record --watch-hw`:
    /// its accesses are gated at the instruction sites recorded in --sites-from
    /// (repeatable).
    #[arg(long = "watch-hw", value_name = "SPEC")]
    pub watch_hw: Vec<String>,
    /// A recording of the program (with --watch-hw or --watch): the instructions its
    /// recorded accesses were made by are armed too.
    #[arg(long, value_name = "TRACE")]
    pub sites_from: Option<PathBuf>,
    /// Passive mode: gate nothing, only report whether the run happened to follow the schedule.
    #[arg(long)]
    pub check: bool,
    /// What counts as the bug showing.
    #[command(flatten)]
    pub oracle: OracleArgs,
    /// The command to run.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// The program a command runs, found as the replay finds it (`None`: no command).
fn options_program(command: &[String]) -> Option<PathBuf> {
    command
        .first()
        .and_then(|p| ordo_recorder::launch::find_program(p).ok())
}

pub fn run(args: ReplayArgs) -> Result<u8> {
    if !(args.timeout > 0.0 && args.timeout.is_finite()) {
        bail!(
            "--timeout {}: expected a positive number of seconds",
            args.timeout
        );
    }
    if args.stall_ms == 0 {
        bail!("--stall-ms 0: expected a positive number of milliseconds");
    }
    let schedule = read_schedule(&args.schedule)?;
    let discover = match (args.discover, options_program(&args.command)) {
        (true, Some(program)) => Some(std::sync::Arc::new(
            ordo_recorder::discover::plan_discovery(&program)?.sites,
        )),
        _ => None,
    };
    let options = ReplayOptions {
        command: args.command,
        schedule,
        mode: if args.check {
            Mode::Check
        } else {
            Mode::Enforce
        },
        timeout: Duration::from_secs_f64(args.timeout),
        stall: Duration::from_millis(args.stall_ms),
        on_infeasible: match args.on_infeasible {
            InfeasibleAction::Kill => OnInfeasible::Kill,
            InfeasibleAction::Release => OnInfeasible::Release,
        },
        record: args.record,
        buffer_size: args.buffer_size,
        stdout_to_stderr: args.json,
        watches: AccessWatches {
            watch: args.watch,
            watch_hw: args.watch_hw,
            sites_from: args.sites_from,
        },
        oracle: args.oracle.into(),
        env: Vec::new(),
        discover,
    };
    ordo_replayer::stop_replays_on_interrupt();
    let outcome = replay(&options)?;
    if args.json {
        println!("{}", outcome.to_json());
    } else {
        eprint!("{}", outcome.render());
    }
    Ok(outcome.verdict.exit_status())
}
