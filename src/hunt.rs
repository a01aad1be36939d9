//! `ordo hunt`: find a concurrency bug and pin it as a schedule file. The hunt
//! itself is `ordo_hunt::hunt`; this is the command line and the progress bar.
//! Exit status: 1 a bug reproduced, 0 none, 2 an error, 130 interrupted. The programs' own output
//! goes to `DIR/program-output.log`.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use ordo_hunt::{hunt, HuntOptions, Shard, Status, Strategy};

use crate::oracle_args::OracleArgs;

/// `--strategy`.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum StrategyArg {
    /// The analyzer's candidate schedules, best first (and those of each replay).
    Predict,
    /// PCT: random thread priorities with D−1 change points, enforced by the agent.
    Pct,
    /// A random walk: a random enabled thread goes on at each synchronization event.
    Random,
    /// Predict until its candidates run out, then PCT.
    Auto,
}

/// Arguments of `ordo hunt`.
#[derive(Args)]
pub struct HuntArgs {
    /// Most runs, the first recording included (the confirmation replays are extra).
    #[arg(long, value_name = "RUNS", default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    pub budget: u32,
    /// Start no run after this many seconds.
    #[arg(long, value_name = "S", value_parser = ordo_replayer::run::parse_timeout)]
    pub time: Option<f64>,
    /// How runs after the first recording are chosen.
    #[arg(long, value_enum, default_value = "auto")]
    pub strategy: StrategyArg,
    /// PCT's depth D: D−1 priority change points.
    #[arg(long, value_name = "D", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=65))]
    pub depth: u32,
    /// Seed of PCT's and the random walk's choices (same seed, same choices).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub seed: u64,
    /// Record every read and write of a variable in the first run (as `ordo record --watch`).
    #[arg(long, value_name = "SPEC")]
    pub watch: Vec<String>,
    /// Record reads and writes of a variable with a hardware watchpoint in the first
    /// run (as `ordo record --watch-hw`: at most 4, accesses through pointers too).
    #[arg(long = "watch-hw", value_name = "SPEC")]
    pub watch_hw: Vec<String>,
    /// Record an `at` event each time a thread reaches a program point in the first
    /// run (as `ordo record --mark`): candidates can then hold a thread there.
    #[arg(long, value_name = "SPEC")]
    pub mark: Vec<String>,
    /// Do not look for the memory threads share (by default every recorded run
    /// traps each memory-access instruction of the program a bounded number of
    /// times, so candidates can order plain loads and stores).
    #[arg(long)]
    pub no_discover: bool,
    /// Runs at a time (default: the number of CPUs).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub jobs: Option<u32>,
    /// Directory for the runs' traces and the reproducing schedule (default: PROGRAM.hunt).
    #[arg(short, long, value_name = "DIR")]
    pub output: Option<PathBuf>,
    /// Print the outcome as one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
    /// Also write the outcome as a SARIF 2.1.0 log to FILE (replaced if it
    /// exists): for CI code scanning (docs/CI.md).
    #[arg(long, value_name = "FILE")]
    pub sarif: Option<PathBuf>,
    /// Take part I of a hunt split into N (candidates I, I+N, …; seeds of its own): see docs/HUNT.md.
    #[arg(long, value_name = "I/N", value_parser = Shard::parse)]
    pub shard: Option<Shard>,
    /// Replays of the reproducing schedule that measure its reproduction rate.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub confirm: u32,
    /// Kill a run after this many seconds (a hang is a failure).
    #[arg(long, value_name = "S", default_value = "60", value_parser = ordo_replayer::run::parse_timeout)]
    pub timeout: f64,
    /// Every thread blocked this many milliseconds: a deadlock (or an infeasible schedule).
    #[arg(long, value_name = "MS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..))]
    pub stall_ms: u64,
    /// What counts as a failing run, as for `ordo replay`.
    #[command(flatten)]
    pub oracle: OracleArgs,
    /// The command to run.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

pub fn run(args: HuntArgs) -> Result<u8> {
    let out_dir = args.output.clone().unwrap_or_else(|| {
        let name = std::path::Path::new(&args.command[0])
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "ordo".into());
        PathBuf::from(format!("{name}.hunt"))
    });
    let mut options = HuntOptions::new(args.command, out_dir);
    options.budget = args.budget;
    options.time = args.time.map(Duration::from_secs_f64);
    options.strategy = match args.strategy {
        StrategyArg::Predict => Strategy::Predict,
        StrategyArg::Pct => Strategy::Pct,
        StrategyArg::Random => Strategy::Random,
        StrategyArg::Auto => Strategy::Auto,
    };
    options.depth = args.depth;
    options.seed = args.seed;
    options.watch = args.watch;
    options.watch_hw = args.watch_hw;
    options.mark = args.mark;
    options.discover = !args.no_discover;
    if let Some(jobs) = args.jobs {
        options.jobs = jobs as usize;
    }
    options.shard = args.shard.unwrap_or(Shard::ALL);
    options.confirm_runs = args.confirm;
    options.timeout = Duration::from_secs_f64(args.timeout);
    options.stall = Duration::from_millis(args.stall_ms);
    options.oracle = args.oracle.into();

    // The programs' own output, from every run, goes to a log in the hunt's
    // directory: dozens of runs would bury the report (and --json's stdout).
    std::fs::create_dir_all(&options.out_dir)
        .with_context(|| format!("create the hunt directory {}", options.out_dir.display()))?;
    let log = options.out_dir.join("program-output.log");
    let redirect = OutputRedirect::to(&log)?;
    let bar = progress_bar(&redirect)?;
    let mut on_status = |s: &Status| {
        bar.set_length(s.budget as u64);
        bar.set_position(s.runs as u64);
        match s.confirming {
            Some((done, total)) => bar.set_message(format!("confirming {done}/{total}")),
            None => bar.set_message(format!("{} pending  {}", s.pending, s.best)),
        }
    };
    // Ctrl-C ends the run under way (its program killed) and the hunt with it.
    ordo_replayer::run::stop_replays_on_interrupt();
    let outcome = hunt(&options, &mut on_status);
    bar.finish_and_clear();
    drop(redirect);
    let outcome = outcome?;
    if let Some(path) = &args.sarif {
        let text = serde_json::to_string_pretty(&outcome.to_sarif())?;
        std::fs::write(path, text + "\n")
            .with_context(|| format!("--sarif {}: cannot write", path.display()))?;
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", outcome.to_json())?;
    } else {
        write!(out, "{}", outcome.render())?;
        writeln!(out, "  programs' output: {}", log.display())?;
    }
    if ordo_replayer::run::interrupted() && outcome.found.is_none() {
        return Ok(ordo_replayer::Verdict::Interrupted.exit_status());
    }
    Ok(outcome.exit_status())
}

/// Runs done out of the budget, candidates pending, the best pending; drawn on the
/// original stderr, and only when that is a terminal.
fn progress_bar(redirect: &OutputRedirect) -> Result<ProgressBar> {
    let stderr = redirect.original_stderr()?;
    let term = console::Term::read_write_pair(std::io::stdin(), stderr);
    let target = if term.is_term() {
        ProgressDrawTarget::term(term, 5)
    } else {
        ProgressDrawTarget::hidden()
    };
    let bar = ProgressBar::with_draw_target(Some(0), target);
    bar.set_style(
        ProgressStyle::with_template(
            "ordo hunt [{elapsed_precise}] {bar:30} {pos}/{len} runs  {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    Ok(bar)
}

/// Points this process's stdout and stderr (and so those of every program a run
/// starts) at a file, and puts the originals back when dropped.
struct OutputRedirect {
    saved: [OwnedFd; 2],
}

impl OutputRedirect {
    fn to(path: &Path) -> Result<OutputRedirect> {
        let file = File::create(path).with_context(|| format!("create {}", path.display()))?;
        let saved = [dup_cloexec(1)?, dup_cloexec(2)?];
        for fd in [1, 2] {
            // SAFETY: dup2 onto a standard descriptor from a file we own.
            if unsafe { libc::dup2(file.as_raw_fd(), fd) } < 0 {
                return Err(std::io::Error::last_os_error())
                    .context("redirect the programs' output");
            }
        }
        Ok(OutputRedirect { saved })
    }

    /// A handle on the original stderr.
    fn original_stderr(&self) -> Result<File> {
        Ok(File::from(self.saved[1].try_clone()?))
    }
}

impl Drop for OutputRedirect {
    fn drop(&mut self) {
        for (fd, saved) in [1, 2].into_iter().zip(&self.saved) {
            // SAFETY: restoring a standard descriptor from its saved duplicate.
            unsafe { libc::dup2(saved.as_raw_fd(), fd) };
        }
    }
}

fn dup_cloexec(fd: i32) -> Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC returns a new descriptor we then own.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if new < 0 {
        return Err(std::io::Error::last_os_error()).context("duplicate a standard descriptor");
    }
    // SAFETY: `new` is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}
