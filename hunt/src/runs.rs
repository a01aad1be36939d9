//! One run of a hunt: the first recording, a candidate's replay or a baseline run
//! (PCT, random walk), each recorded, and what it showed.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use ordo_analysis::Analysis;
use ordo_recorder::{record_launched, ProbeChoice, SessionOptions};
use ordo_replayer::oracle::Ending;
use ordo_replayer::shm::ENV_STRATEGY;
use ordo_replayer::{replay, ReplayOptions, Verdict};
use ordo_schedule::Schedule;

use crate::queue::Candidate;
use crate::HuntOptions;

/// A baseline: a scheduling strategy the replay agent enforces by itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Baseline {
    /// PCT with `depth − 1` change points over about `k` events.
    Pct {
        /// PCT's bug depth d.
        depth: u32,
        /// Expected synchronization events of a run.
        k: u64,
    },
    /// At each synchronization event a random enabled thread goes on.
    Random,
}

impl Baseline {
    /// `pct` or `random`.
    pub fn name(self) -> &'static str {
        match self {
            Baseline::Pct { .. } => "pct",
            Baseline::Random => "random",
        }
    }

    /// The agent's strategy text for one run (see `shm::ENV_STRATEGY`).
    pub fn agent_text(self, seed: u64) -> String {
        match self {
            Baseline::Pct { depth, k } => format!("pct:{seed}:{depth}:{k}"),
            Baseline::Random => format!("random:{seed}"),
        }
    }
}

/// What a run does.
#[derive(Clone, Debug)]
pub enum Job {
    /// The first run: recorded as it comes, to be analyzed. `hold_exit`: the thread
    /// that ends the process waits until the others have exited or blocked (a
    /// recording made again because the first one ended before its threads acted).
    Record {
        /// Hold the process's exit.
        hold_exit: bool,
    },
    /// Replay a candidate's schedule.
    Candidate(Box<Candidate>),
    /// A baseline run with this seed.
    Baseline(Baseline, u64),
}

impl Job {
    /// How the run chose its schedule: `recorded`, `predict`, `pct`, `random`.
    pub fn source(&self) -> &'static str {
        match self {
            Job::Record { .. } => "recorded",
            Job::Candidate(_) => "predict",
            Job::Baseline(b, _) => b.name(),
        }
    }
}

/// A finished run.
#[derive(Debug)]
pub struct RunResult {
    /// 0 for the first recording, then 1, 2, … in the order runs were started.
    pub number: u32,
    /// What it did.
    pub job: Job,
    /// The replay's verdict (the first recording: passed or reproduced).
    pub verdict: Verdict,
    /// Why, in a few words.
    pub reason: String,
    /// Its recording.
    pub trace: PathBuf,
    /// The analysis of its recording, for runs whose candidates feed the queue.
    pub analysis: Option<Analysis>,
    /// Wall time of the run, recording and analysis included.
    pub elapsed: Duration,
}

/// The replay options every run of the hunt shares; `schedule`, `env` and `record`
/// are set per run.
pub fn replay_template(options: &HuntOptions) -> ReplayOptions {
    let mut replay = ReplayOptions::new(options.command.clone(), Schedule::default());
    replay.timeout = options.timeout;
    replay.stall = options.stall;
    replay.stdout_to_stderr = options.program_stdout_to_stderr;
    replay.oracle = options.oracle.clone();
    replay
}

/// Runs `job` as run `number`, recording it into the hunt's directory.
pub fn run(options: &HuntOptions, number: u32, job: Job) -> Result<RunResult> {
    let started = Instant::now();
    let trace = options
        .out_dir
        .join("runs")
        .join(format!("run-{number}.ordo"));
    let _ = std::fs::remove_file(&trace);
    let (verdict, reason) = match &job {
        Job::Record { hold_exit }
            if !options.watch.is_empty()
                || !options.watch_hw.is_empty()
                || !options.mark.is_empty() =>
        {
            record_with_watches(options, &trace, *hold_exit)?
        }
        _ => {
            let mut replay_options = replay_template(options);
            replay_options.record = Some(trace.clone());
            replay_options.discover = options.soft_sites.clone();
            match &job {
                Job::Candidate(c) => {
                    replay_options.schedule = Schedule::parse(&c.finding.schedule)
                        .context("parse a candidate's schedule")?;
                }
                Job::Baseline(b, seed) => replay_options
                    .env
                    .push((ENV_STRATEGY.into(), OsString::from(b.agent_text(*seed)))),
                Job::Record { hold_exit: true } => replay_options.env.push((
                    ordo_recorder::HOLD_EXIT_ENV.into(),
                    OsString::from(ordo_recorder::HOLD_EXIT_MS.to_string()),
                )),
                Job::Record { hold_exit: false } => {}
            }
            match replay(&replay_options) {
                Ok(outcome) => (outcome.verdict, outcome.reason),
                // A candidate the replayer cannot plan (a point whose function name
                // is longer than a plan holds, more events than it holds) is one
                // candidate less, not the end of the hunt.
                Err(e) if matches!(job, Job::Candidate(_)) => {
                    (Verdict::Error, format!("not replayable: {e:#}"))
                }
                Err(e) => return Err(e.context(format!("run {number} ({})", job.source()))),
            }
        }
    };
    // Baselines do not feed the queue; a reproduced run ends the hunt.
    let analysis = match (&job, verdict) {
        (Job::Baseline(..), _) | (_, Verdict::Reproduced) => None,
        _ if trace.exists() => Some(
            ordo_analysis::analyze_trace_reading(&trace, ordo_trace::ReadMode::Salvage)
                .map_err(|e| anyhow::anyhow!("analyze run {number}'s trace: {e}"))?,
        ),
        _ => None,
    };
    Ok(RunResult {
        number,
        job,
        verdict,
        reason,
        trace,
        analysis,
        elapsed: started.elapsed(),
    })
}

/// Threads of a recorded run that were cut short: they did nothing between their
/// start and their end, and ended no earlier than the thread that ended the
/// process (`main` returned or someone called `exit` before they got to act). A
/// recording with such threads shows nothing of what they do: it is made again
/// with the exit held (`Job::Record { hold_exit: true }`).
pub fn threads_cut_off(trace: &std::path::Path) -> Result<usize> {
    use ordo_trace::{global_order, read_trace, Kind, ReadMode};
    let (_, events) = read_trace(trace, ReadMode::Salvage)
        .with_context(|| format!("read the first recording {}", trace.display()))?;
    let events = global_order(events);
    // Per thread: (acted, ended at index).
    let mut threads: std::collections::HashMap<u32, (bool, Option<usize>)> =
        std::collections::HashMap::new();
    for (index, e) in events.iter().enumerate() {
        let entry = threads.entry(e.tid).or_default();
        match e.kind {
            Kind::ThreadStart => {}
            Kind::ThreadExit => entry.1 = Some(index),
            _ => entry.0 = true,
        }
    }
    // The main thread's end (its first event is the run's first).
    let Some(main_end) = events.first().and_then(|e| threads.get(&e.tid)?.1) else {
        return Ok(0);
    };
    Ok(threads
        .values()
        .filter(|(acted, end)| !acted && end.is_none_or(|end| end >= main_end))
        .count())
}

/// The first recording when variables are watched or program points marked:
/// `ordo record`'s own session (the replay driver records the pthread API only).
fn record_with_watches(
    options: &HuntOptions,
    trace: &std::path::Path,
    hold_exit: bool,
) -> Result<(Verdict, String)> {
    let session = SessionOptions {
        output: Some(trace.to_path_buf()),
        buffer_size: None,
        watch: options.watch.clone(),
        watch_hw: options.watch_hw.clone(),
        mark: options.mark.clone(),
        hold_exit,
        probes: ProbeChoice::Auto,
        // The hunt's own output directory: a file from an earlier hunt is replaced.
        force: true,
        discover: options.discover,
        ..SessionOptions::default()
    };
    let end =
        record_launched(&options.command, &session, &mut |_| {}).context("record the first run")?;
    // The same oracle as the replays: the exit status or signal, judged.
    let ending = match end.summary.exit {
        Some(status) => match (status.code(), status.signal()) {
            (Some(code), _) => Ending::Exited { code },
            (None, Some(signal)) => Ending::Signaled { signal },
            _ => Ending::Exited { code: -1 },
        },
        None => Ending::Exited { code: -1 },
    };
    let judgement = options.oracle.judge(&ending, None);
    let verdict = if judgement.failed {
        Verdict::Reproduced
    } else {
        Verdict::Passed
    };
    Ok((verdict, judgement.reason))
}
