//! `ordo hunt`: find a concurrency bug and pin it, without a person in the loop.
//!
//! A hunt records a run of the program, analyzes it, and replays the analyzer's
//! candidate schedules best first, each replay recorded and analyzed in turn so
//! the candidates it suggests join the queue (deduplicated by the order they ask
//! for: [`queue`]). Or it runs the program under a baseline the replay agent
//! enforces by itself (PCT, a random walk: [`runs::Baseline`]). It stops at the first
//! run that fails — the oracle is the replayer's verdict — or when its budget of
//! runs or time is spent. A failing run is pinned as a schedule file (a candidate's
//! own schedule, or the hand-overs of a baseline run: [`pin`]), which is then
//! replayed [`HuntOptions::confirm_runs`] times to measure how reliably it
//! reproduces.
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! use ordo_hunt::{hunt, HuntOptions, Strategy};
//! let mut options = HuntOptions::new(vec!["./bank".into()], "hunt-out".into());
//! options.strategy = Strategy::Predict;
//! let outcome = hunt(&options, &mut |_status: &ordo_hunt::Status| {})?;
//! println!("{}", outcome.render());
//! # Ok(()) }
//! ```
//!
//! Runs are independent, so up to [`HuntOptions::jobs`] run at once; a hunt spreads
//! over machines by [`Shard`] (docs/HUNT.md).

pub mod pin;
pub mod queue;
pub mod runs;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use ordo_replayer::{replay, FailOn, Oracle, Verdict};
use ordo_schedule::Schedule;
use serde_json::{json, Value};

use queue::CandidateQueue;
use runs::{Baseline, Job, RunResult};

/// How a hunt chooses the runs after the first recording.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// The analyzer's candidates, best first (and those of each replay's recording).
    Predict,
    /// PCT over synchronization events, enforced by the replay agent.
    Pct,
    /// A random walk over synchronization events, enforced by the replay agent.
    Random,
    /// Predict until its candidates run out, then PCT.
    Auto,
}

impl Strategy {
    /// The name `--strategy` takes.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Predict => "predict",
            Strategy::Pct => "pct",
            Strategy::Random => "random",
            Strategy::Auto => "auto",
        }
    }
}

/// This process's part of a hunt spread over `count` processes (`--shard I/N`):
/// it replays the candidates whose serving index is `index` modulo `count`, and its
/// baseline runs use seeds no other shard uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    /// 0-based.
    pub index: u32,
    /// At least 1.
    pub count: u32,
}

impl Shard {
    /// The whole hunt.
    pub const ALL: Shard = Shard { index: 0, count: 1 };

    /// Parses `I/N` with `0 <= I < N`.
    pub fn parse(text: &str) -> Result<Shard, String> {
        let parsed = text
            .split_once('/')
            .and_then(|(i, n)| Some((i.trim().parse().ok()?, n.trim().parse().ok()?)));
        match parsed {
            Some((index, count)) if count >= 1 && index < count => Ok(Shard { index, count }),
            _ => Err(format!("`{text}`: expected I/N with 0 <= I < N (e.g. 0/4)")),
        }
    }

    fn takes(self, candidate_index: u64) -> bool {
        candidate_index % self.count as u64 == self.index as u64
    }
}

/// What to hunt and how.
#[derive(Clone, Debug)]
pub struct HuntOptions {
    /// Program and arguments.
    pub command: Vec<String>,
    /// Most runs, the first recording included (confirmation replays not counted).
    pub budget: u32,
    /// Start no run after this much time.
    pub time: Option<Duration>,
    /// How runs are chosen.
    pub strategy: Strategy,
    /// PCT's depth d: d − 1 priority change points.
    pub depth: u32,
    /// Seed of the baselines' choices: the same seed makes the same choices.
    pub seed: u64,
    /// `--watch` specs for the first recording.
    pub watch: Vec<String>,
    /// `--watch-hw` specs for the first recording (hardware watchpoints: accesses
    /// through pointers too).
    pub watch_hw: Vec<String>,
    /// `--mark` specs for the first recording.
    pub mark: Vec<String>,
    /// Runs at a time.
    pub jobs: usize,
    /// Where the runs' traces and the reproducing schedule go.
    pub out_dir: PathBuf,
    /// Replays of the reproducing schedule that measure its reproduction rate.
    pub confirm_runs: u32,
    /// Longest a run may take (a hang is a failure).
    pub timeout: Duration,
    /// Every thread blocked this long: a deadlock (or an infeasible schedule).
    pub stall: Duration,
    /// This process's part of a sharded hunt.
    pub shard: Shard,
    /// Send the program's stdout to stderr (keeps stdout for `--json`).
    pub program_stdout_to_stderr: bool,
    /// What counts as a failing run (`--expect-exit`, `--fail-on`), as for `ordo replay`.
    pub oracle: Oracle,
    /// Find the memory threads share in every recorded run (`ordo record
    /// --discover`): candidates can then order plain loads and stores.
    pub discover: bool,
    /// The discovered instructions, planned once per hunt (set by [`hunt`]).
    pub soft_sites: Option<std::sync::Arc<Vec<ordo_probe_common::inproc::SoftSite>>>,
}

impl HuntOptions {
    /// The defaults of `ordo hunt` for `command`, writing into `out_dir`.
    pub fn new(command: Vec<String>, out_dir: PathBuf) -> HuntOptions {
        HuntOptions {
            command,
            budget: 50,
            time: None,
            strategy: Strategy::Auto,
            depth: 3,
            seed: 0,
            watch: Vec::new(),
            watch_hw: Vec::new(),
            mark: Vec::new(),
            jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
            out_dir,
            confirm_runs: 20,
            timeout: Duration::from_secs(60),
            stall: Duration::from_millis(300),
            shard: Shard::ALL,
            program_stdout_to_stderr: false,
            oracle: Oracle::default(),
            discover: true,
            soft_sites: None,
        }
    }
}

/// Where a hunt stands, for a progress display.
#[derive(Clone, Debug, Default)]
pub struct Status {
    /// Runs finished.
    pub runs: u32,
    /// The budget.
    pub budget: u32,
    /// Candidates not tried yet.
    pub pending: usize,
    /// The best pending candidate (kind and rank), or what runs now.
    pub best: String,
    /// Confirmation replays finished (after a reproduction).
    pub confirming: Option<(u32, u32)>,
}

/// A reproduced bug.
#[derive(Clone, Debug)]
pub struct Found {
    /// The run that showed it.
    pub run: u32,
    /// What chose that run's schedule: `predict`, `pct`, `random`, `recorded`.
    pub source: &'static str,
    /// The finding as JSON (a candidate's analysis finding, or a description of the
    /// failing baseline run).
    pub finding: Value,
    /// Why the run counts as failing (`exit code 1`, `deadlock: …`).
    pub reason: String,
    /// The schedule file that reproduces it.
    pub schedule: PathBuf,
    /// The failing run's recording.
    pub trace: PathBuf,
    /// Further runs that failed in the same batch (the same bug, reported once).
    pub also_failed: u32,
    /// The analyzer's finding the run tried, for a candidate (none for a
    /// baseline or recorded run): its interleaving, for SARIF.
    pub analysis: Option<ordo_analysis::Finding>,
}

/// The end of a hunt.
#[derive(Clone, Debug)]
pub struct HuntOutcome {
    /// The bug, when one reproduced.
    pub found: Option<Found>,
    /// Runs taken (the first recording included).
    pub runs: u32,
    /// The strategy asked for.
    pub strategy: Strategy,
    /// Time to the end of the search (confirmation excluded).
    pub search_time: Duration,
    /// Confirmation: (replays, reproduced).
    pub confirm: Option<(u32, u32)>,
    /// The command that reproduces the bug.
    pub replay_command: Option<String>,
    /// Whole hunt, confirmation included.
    pub elapsed: Duration,
    /// Why the hunt stopped without a bug (budget, time, no candidates left).
    pub stopped: String,
    /// Discovery: instructions watched in each recorded run, and the shared
    /// locations the first recording showed (the failing run's when the first
    /// recording failed by itself; as `ordo analyze --json` lists them).
    pub discovery: Option<(usize, Vec<Value>)>,
}

impl HuntOutcome {
    /// The outcome as a SARIF 2.1.0 log (`ordo hunt --sarif FILE`): a reproduced
    /// bug is one `error` result — the analyzer's finding with its interleaving
    /// when a candidate reproduced it, a `failure` otherwise — whose message
    /// leads with how often its schedule reproduced, and whose properties hold the
    /// schedule and the replay command; no result when nothing reproduced.
    pub fn to_sarif(&self) -> Value {
        let failure_rule = serde_json::json!({
            "id": "failure",
            "name": "failure",
            "shortDescription": { "text": "A run of the program failed under a schedule ordo pinned." },
            "help": { "text": "A run failed (a crash, an abort, a deadlock, an unexpected exit status); the schedule in the result's properties reproduces it with `ordo replay`." },
            "defaultConfiguration": { "level": "error" },
        });
        let Some(f) = &self.found else {
            return ordo_analysis::sarif::log(Vec::new(), vec![failure_rule]);
        };
        let confirm = self
            .confirm
            .map(|(runs, reproduced)| format!("reproduced {reproduced}/{runs}"))
            .unwrap_or_else(|| "not confirmed".into());
        let headline = format!("{confirm} ({}): ", f.reason);
        let mut result = match &f.analysis {
            Some(a) => ordo_analysis::sarif::result(a, true, self.replay_command.as_deref()),
            None => serde_json::json!({
                "ruleId": "failure",
                "level": "error",
                "message": { "text": "" },
                "partialFingerprints": {
                    "ordoFinding/v1": format!("{:016x}", fnv(&f.reason))
                },
                "properties": {},
            }),
        };
        let message = f.finding["message"].as_str().unwrap_or("").to_string();
        result["message"]["text"] = Value::from(format!("{headline}{message}"));
        result["properties"]["schedule"] = f.finding["schedule"].clone();
        result["properties"]["confirm"] = serde_json::json!(self.confirm.map(|c| c.1));
        if let Some(cmd) = &self.replay_command {
            result["properties"]["replayCommand"] = Value::from(cmd.clone());
        }
        ordo_analysis::sarif::log(vec![result], vec![failure_rule])
    }

    /// `ordo hunt`'s exit status: 1 reproduced, 0 not.
    pub fn exit_status(&self) -> u8 {
        u8::from(self.found.is_some())
    }

    /// The `--json` object.
    pub fn to_json(&self) -> Value {
        let found = self.found.as_ref();
        json!({
            "reproduced": found.is_some(),
            "schedule": found.map(|f| f.schedule.display().to_string()),
            "finding": found.map(|f| f.finding.clone()),
            "reason": found.map(|f| f.reason.clone()),
            "source": found.map(|f| f.source),
            // The first recording failed by itself: no strategy had to act.
            "unforced": found.map(|f| f.source == "recorded"),
            "run": found.map(|f| f.run),
            "also_failed": found.map(|f| f.also_failed),
            "trace": found.map(|f| f.trace.display().to_string()),
            "runs": self.runs,
            "confirm": self.confirm.map(|(runs, reproduced)| json!({"runs": runs, "reproduced": reproduced})),
            "pinned": self.confirm.map(|(runs, reproduced)| reproduced >= pinned_threshold(runs)),
            "replay_command": self.replay_command,
            "strategy": self.strategy.name(),
            "search_ms": self.search_time.as_millis() as u64,
            "elapsed_ms": self.elapsed.as_millis() as u64,
            "stopped": if found.is_some() { None } else { Some(self.stopped.as_str()) },
            "discovery": self.discovery.as_ref().map(|(sites, shared)| json!({
                "sites_watched": sites,
                "budget_per_site": ordo_recorder::discover::DEFAULT_BUDGET,
                "shared_locations": shared,
            })),
        })
    }

    /// The text report.
    pub fn render(&self) -> String {
        let Some(f) = &self.found else {
            return format!(
                "ordo hunt: no bug reproduced in {} runs, {:.1} s ({}; strategy {})\n",
                self.runs,
                self.search_time.as_secs_f64(),
                self.stopped,
                self.strategy.name()
            );
        };
        let rate = match self.confirm {
            Some((runs, reproduced)) => format!(", confirmed in {reproduced} of {runs} replays"),
            None => String::new(),
        };
        let mut out = format!(
            "ordo hunt: reproduced{rate} — run {} of {} ({:.1} s, strategy {}, found by {}): {}\n",
            f.run,
            self.runs,
            self.search_time.as_secs_f64(),
            self.strategy.name(),
            f.source,
            f.reason
        );
        if f.source == "recorded" {
            out.push_str(
                "  the first run failed by itself, before any schedule was forced: the schedule pins what it did\n",
            );
        }
        if let Some(message) = f.finding["message"].as_str() {
            out.push_str(&format!("  finding: {message}\n"));
        }
        out.push_str(&format!("  schedule: {}\n", f.schedule.display()));
        if let Some(candidate) = f.finding["candidate_confirm"].as_u64() {
            out.push_str(&format!(
                "  (the order run {}'s recording shows: the candidate's own schedule reproduced {candidate} of {} replays; it is in {})\n",
                f.run,
                self.confirm.map_or(0, |(runs, _)| runs),
                f.schedule.with_file_name("candidate.sched").display()
            ));
        }
        out.push_str(&format!(
            "  trace of the failing run: {}\n",
            f.trace.display()
        ));
        if let Some((runs, reproduced)) = self.confirm {
            out.push_str(&format!(
                "  confirmed: reproduced in {reproduced} of {runs} replays\n"
            ));
        }
        if let Some(cmd) = &self.replay_command {
            out.push_str(&format!("  reproduce with: {cmd}\n"));
        }
        out
    }
}

/// The state of a hunt between runs.
struct Hunter<'a> {
    options: &'a HuntOptions,
    queue: CandidateQueue,
    /// Runs started so far (the next run's number).
    runs: u32,
    /// Baseline runs started so far (each gets its own seed).
    baseline_runs: u64,
    /// PCT's k: the first recording's events.
    k: u64,
    started: Instant,
    stopped: String,
    progress: &'a mut dyn FnMut(&Status),
    /// The shared locations the first recording showed.
    shared: Vec<Value>,
    /// Runs that failed but whose recording gave no ordering to pin.
    unpinned: Vec<String>,
    /// The schedules of other candidates that failed in the reproducing batch.
    alternatives: Vec<String>,
    /// Runs the search may reach (the budget; raised while looking for a pin
    /// that holds better).
    limit: u32,
    /// First recordings still to make: one that failed by itself left nothing to
    /// pin (a thread that never got to act), and another recording, which likely
    /// passes, is where the candidates come from.
    rerecord: u32,
}

/// Runs a hunt; `progress` hears about every finished run.
pub fn hunt(options: &HuntOptions, progress: &mut dyn FnMut(&Status)) -> Result<HuntOutcome> {
    if options.command.is_empty() {
        bail!("no command given: ordo hunt [OPTIONS] -- CMD ARGS...");
    }
    std::fs::create_dir_all(options.out_dir.join("runs"))
        .with_context(|| format!("create the hunt directory {}", options.out_dir.display()))?;
    // The log is this hunt's alone (a directory may be hunted into again).
    let _ = std::fs::remove_file(options.out_dir.join("runs.log"));
    let started = Instant::now();
    let mut options = options.clone();
    if options.discover && options.soft_sites.is_none() {
        let program = ordo_recorder::launch::find_program(&options.command[0])?;
        let plan = ordo_recorder::discover::plan_discovery(&program)?;
        options.soft_sites = Some(std::sync::Arc::new(plan.sites));
    }
    let options = &options;
    let mut hunter = Hunter {
        options,
        queue: CandidateQueue::default(),
        runs: 0,
        baseline_runs: 0,
        k: 1,
        started,
        stopped: String::new(),
        progress,
        shared: Vec::new(),
        unpinned: Vec::new(),
        alternatives: Vec::new(),
        limit: options.budget,
        rerecord: 0,
    };
    let mut found = hunter.search()?;
    if found.is_none() && !hunter.unpinned.is_empty() {
        hunter.stopped = format!(
            "{}; failed once, not pinned (no ordering in the recording to enforce): {}",
            hunter.stopped,
            hunter.unpinned.join(", ")
        );
    }
    let search_time = started.elapsed();
    if let (Some(f), true, true) = (&found, hunter.shared.is_empty(), options.discover) {
        // The first recording failed by itself (it is not analyzed): the shared
        // locations are those of the failing run.
        if let Ok(a) = ordo_analysis::analyze_trace_reading(&f.trace, ordo_trace::ReadMode::Salvage)
        {
            hunter.shared = a.shared.iter().map(|l| l.to_json()).collect();
        }
    }
    let mut confirm = None;
    let mut replay_command = None;
    if let Some(f) = &mut found {
        let mut reproduced = hunter.confirm(&f.schedule)?;
        // A pin that let even one replay pass is tightened where that costs a
        // confirmation a schedule tried (the batch's other failing candidates, the
        // orders the failing run took): a schedule that reproduces 19 times in 20
        // fails its user one time in 20. Hunting for more runs is for worse pins.
        if reproduced < options.confirm_runs {
            // Another candidate that failed in the same batch may hold better.
            if let Some(better) = hunter.try_alternatives(f, reproduced)? {
                reproduced = better;
            }
        }
        // The run whose recording was pinned already (a baseline run's schedule is
        // its recording's from the start).
        let mut pinned_run = None;
        if reproduced < options.confirm_runs
            && f.source == "predict"
            && f.reason.starts_with("deadlock")
        {
            // A deadlock's recording shows its whole cycle — each thread's held lock
            // and its `blocked` attempt on another's — which `schedule_of_run` pins
            // whole, where a candidate that ordered one of the acquisitions left
            // the other to timing (rust_deadlock's one-ordering pin: 17/20 in one
            // CI run, its batch holding no two-ordering candidate to fall back on).
            pinned_run = Some(f.run);
            if let Some(better) = hunter.pin_from_recording(f, reproduced)? {
                reproduced = better;
            }
        }
        if reproduced < options.confirm_runs {
            // What the schedule leaves free made some replays pass: the order the
            // failing run's discovered accesses took pins it further.
            if let Some(better) = hunter.strengthen_with_accesses(f, reproduced)? {
                reproduced = better;
            }
        }
        if reproduced < pinned_threshold(options.confirm_runs) {
            if f.source == "recorded" && hunter.queue.is_empty() {
                // A first recording that failed by itself was not analyzed, and a
                // thread it cut short (an abort before the thread acted) is in no
                // hand-over: a recording that passes has the candidates.
                hunter.rerecord += 1;
            }
            if let Some(better) = hunter.search_better_pin(f, reproduced)? {
                reproduced = better;
                if reproduced < pinned_threshold(options.confirm_runs) {
                    // The better pin is another run's: its own accesses may hold it.
                    if let Some(better) = hunter.strengthen_with_accesses(f, reproduced)? {
                        reproduced = better;
                    }
                }
            }
        }
        if reproduced < options.confirm_runs
            && matches!(f.source, "predict")
            && pinned_run != Some(f.run)
        {
            // The candidate's orderings were not all that made the run fail (it
            // failed by luck of the timing the schedule left free): the order the
            // failing run's recording shows may hold it better.
            if let Some(better) = hunter.pin_from_recording(f, reproduced)? {
                reproduced = better;
            }
        }
        replay_command = Some(replay_command_line(
            &f.schedule,
            &options.oracle,
            &options.command,
        ));
        confirm = Some((options.confirm_runs, reproduced));
    }
    if let (Some(f), Some((runs, 0))) = (&found, confirm) {
        // A schedule that never reproduced pins nothing: the run failed once, by
        // timing no schedule found here names. Said so, not reported as found.
        let note = format!(
            "run {} ({}) failed once ({}), not pinned: its schedule reproduced 0 of {runs} replays (kept in {})",
            f.run,
            f.source,
            f.reason,
            f.schedule.display()
        );
        hunter.stopped = if hunter.stopped.is_empty() {
            note
        } else {
            format!("{}; {note}", hunter.stopped)
        };
        found = None;
        confirm = None;
        replay_command = None;
    }
    Ok(HuntOutcome {
        found,
        runs: hunter.runs,
        strategy: options.strategy,
        search_time,
        confirm,
        replay_command,
        elapsed: started.elapsed(),
        discovery: options
            .soft_sites
            .as_ref()
            .map(|sites| (sites.len(), hunter.shared)),
        stopped: hunter.stopped,
    })
}

impl Hunter<'_> {
    fn status(&mut self) {
        let best = match self.queue.best() {
            Some(c) => format!(
                "next: {} (v={}, t={})",
                c.finding.kind.name(),
                c.rank().v,
                c.rank().t
            ),
            None if self.baseline_runs > 0 => format!("{} runs", self.baseline_name()),
            None => String::new(),
        };
        let status = Status {
            runs: self.runs,
            budget: self.options.budget,
            pending: self.queue.len(),
            best,
            confirming: None,
        };
        (self.progress)(&status);
    }

    fn baseline_name(&self) -> &'static str {
        match self.options.strategy {
            Strategy::Random => "random",
            _ => "pct",
        }
    }

    /// Records, then runs batches until a run fails or the budget is spent.
    fn search(&mut self) -> Result<Option<Found>> {
        let first = runs::run(self.options, 0, Job::Record { hold_exit: false })?;
        self.runs = 1;
        if first.verdict == Verdict::Error {
            // Every later run would end the same way: nothing to hunt in.
            bail!("the first run could not be judged: {}", first.reason);
        }
        if let Some(a) = &first.analysis {
            self.k = a.stats.pass.events.max(1);
            self.shared = a.shared.iter().map(|l| l.to_json()).collect();
        }
        let cut_off = if first.verdict == Verdict::Passed && self.options.discover {
            runs::threads_cut_off(&first.trace).unwrap_or(0)
        } else {
            0
        };
        if let Some(found) = self.take(vec![first])? {
            return Ok(Some(found));
        }
        if cut_off > 0 {
            // Threads that never got to act: a recording that holds the process's
            // end shows what they do, and the candidates on it.
            self.rerecord += 1;
        }
        self.search_on()
    }

    /// The search after the first recording: batches until a run fails, the limit
    /// or the time is spent, or nothing is left to run.
    fn search_on(&mut self) -> Result<Option<Found>> {
        loop {
            if ordo_replayer::run::interrupted() {
                self.stopped = "interrupted".to_string();
                return Ok(None);
            }
            if self.runs >= self.limit {
                self.stopped = format!("budget of {} runs spent", self.options.budget);
                return Ok(None);
            }
            if self
                .options
                .time
                .is_some_and(|t| self.started.elapsed() >= t)
            {
                self.stopped = "time budget spent".to_string();
                return Ok(None);
            }
            let batch = self.next_batch();
            if batch.is_empty() {
                self.stopped = "no candidates left".to_string();
                return Ok(None);
            }
            let results = self.run_batch(batch)?;
            if let Some(found) = self.take(results)? {
                return Ok(Some(found));
            }
        }
    }

    /// The next runs, at most `jobs` and what the budget allows.
    fn next_batch(&mut self) -> Vec<(u32, Job)> {
        let room = self.limit.saturating_sub(self.runs) as usize;
        let mut batch = Vec::new();
        while batch.len() < self.options.jobs.max(1).min(room) {
            if self.rerecord > 0 {
                self.rerecord -= 1;
                batch.push((self.runs, Job::Record { hold_exit: true }));
                self.runs += 1;
                continue;
            }
            let job = match self.options.strategy {
                Strategy::Predict | Strategy::Auto => match self.next_candidate() {
                    Some(c) => Job::Candidate(Box::new(c)),
                    // Candidates of runs still in this batch may come: wait for them.
                    None if !batch.is_empty() => break,
                    None if self.options.strategy == Strategy::Auto => self.next_baseline(),
                    None => break,
                },
                Strategy::Pct | Strategy::Random => self.next_baseline(),
            };
            batch.push((self.runs, job));
            self.runs += 1;
        }
        batch
    }

    fn next_candidate(&mut self) -> Option<queue::Candidate> {
        while let Some((index, c)) = self.queue.pop() {
            if self.options.shard.takes(index) {
                return Some(c);
            }
        }
        None
    }

    fn next_baseline(&mut self) -> Job {
        let baseline = match self.options.strategy {
            Strategy::Random => Baseline::Random,
            _ => Baseline::Pct {
                depth: self.options.depth,
                k: self.k,
            },
        };
        let n = self.baseline_runs;
        self.baseline_runs += 1;
        let shard = self.options.shard;
        let seed = run_seed(
            self.options.seed,
            n * shard.count as u64 + shard.index as u64,
        );
        Job::Baseline(baseline, seed)
    }

    /// Runs a batch concurrently; results in run order.
    fn run_batch(&mut self, batch: Vec<(u32, Job)>) -> Result<Vec<RunResult>> {
        let options = self.options;
        let results: Vec<Result<RunResult>> = std::thread::scope(|scope| {
            let handles: Vec<_> = batch
                .into_iter()
                .map(|(number, job)| scope.spawn(move || runs::run(options, number, job)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("a run panicked")))
                })
                .collect()
        });
        results.into_iter().collect()
    }

    /// Takes finished runs in order: the first failing one is the bug (later ones in
    /// the same batch are the same hunt's duplicates); the others' candidates join
    /// the queue.
    fn take(&mut self, results: Vec<RunResult>) -> Result<Option<Found>> {
        let failed = results
            .iter()
            .filter(|r| r.verdict == Verdict::Reproduced)
            .count() as u32;
        let mut found = None;
        for r in results {
            self.log_run(&r);
            if r.verdict == Verdict::Reproduced {
                if found.is_some() {
                    // Another candidate of the batch failed too: kept in case the
                    // first one's schedule does not hold.
                    if let Job::Candidate(c) = &r.job {
                        self.alternatives.push(c.finding.schedule.clone());
                    }
                }
                if found.is_none() {
                    found = self.pin(&r, failed - 1)?;
                    if found.is_none() {
                        // A schedule with no ordering reproduces nothing: the
                        // failure is noted, and the hunt goes on — from another
                        // recording when this one was a first recording.
                        self.unpinned.push(format!(
                            "run {} ({}, {})",
                            r.number,
                            r.job.source(),
                            r.reason
                        ));
                        if matches!(r.job, Job::Record { .. })
                            && self.unpinned.len() <= MAX_RERECORDS
                        {
                            self.rerecord += 1;
                        }
                    }
                }
                continue;
            }
            if let (Job::Candidate(c), Verdict::Passed) = (&r.job, r.verdict) {
                self.queue.retry((**c).clone());
            }
            if let Some(a) = &r.analysis {
                // A candidate's replay that followed its schedule and passed, or
                // took another path before an ordering could happen (a check saw
                // other data): its findings are also tried on top of that
                // schedule. The latter is how a reorder gets the earlier order it
                // needs: `1:rdlock#1 -> 2:wrlock#1` alone lets thread 1 register
                // first and thread 2 never write; on top of it, the replay's own
                // `2:rdlock#1 -> 1:wrlock#1` makes both check before either writes.
                let base = match &r.job {
                    Job::Candidate(c)
                        if matches!(r.verdict, Verdict::Passed | Verdict::NotExercised) =>
                    {
                        Schedule::parse(&c.finding.schedule).ok()
                    }
                    _ => None,
                };
                let base = base.as_ref().map(|schedule| queue::Base {
                    schedule,
                    unmet: r.verdict == Verdict::NotExercised,
                });
                self.queue.extend_on(&a.findings, r.number, base);
            }
            // Traces of runs that showed nothing are not kept (a long hunt would
            // fill the disk); the first recording stays for reference.
            if r.number > 0 {
                let _ = std::fs::remove_file(&r.trace);
            }
        }
        self.status();
        Ok(found)
    }

    /// Appends `line` to `DIR/runs.log` (best effort, as [`Hunter::log_run`]).
    fn log_line(&self, line: &str) {
        use std::io::Write as _;
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.options.out_dir.join("runs.log"))
            .and_then(|mut f| f.write_all(line.as_bytes()));
    }

    /// Appends one line on a finished run to `DIR/runs.log` (what it ran, from which
    /// run's candidates, and how it ended), so a hunt that found nothing can be read
    /// afterwards. Best effort: a log that cannot be written does not stop the hunt.
    fn log_run(&self, r: &RunResult) {
        use std::io::Write as _;
        let what = match &r.job {
            Job::Candidate(c) => format!(
                "{} from run {} (v={}, t={}): {}",
                c.finding.kind.name(),
                c.from_run,
                c.rank().v,
                c.rank().t,
                c.finding
                    .schedule
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            Job::Baseline(_, seed) => format!("seed {seed}"),
            Job::Record { hold_exit } => {
                if *hold_exit {
                    "exit held".to_string()
                } else {
                    String::new()
                }
            }
        };
        let findings = r.analysis.as_ref().map_or(0, |a| a.findings.len());
        let line = format!(
            "run {}\t{}\t{}\t{}\t{} findings\t{:.0} ms\t{}\n",
            r.number,
            r.job.source(),
            r.verdict.name(),
            r.reason,
            findings,
            r.elapsed.as_secs_f64() * 1e3,
            what
        );
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.options.out_dir.join("runs.log"))
            .and_then(|mut f| f.write_all(line.as_bytes()));
    }

    /// Writes the schedule that reproduces a failing run; `None` when the run's
    /// recording gives no ordering to enforce (it failed once, by timing the
    /// schedule language cannot name: not a reproduction).
    fn pin(&self, r: &RunResult, also_failed: u32) -> Result<Option<Found>> {
        let path = self.options.out_dir.join("reproduce.sched");
        let source = r.job.source();
        let (finding, text) = match &r.job {
            Job::Candidate(c) => {
                let mut finding = c.finding.to_json();
                finding["from_run"] = json!(c.from_run);
                (finding, c.finding.schedule.clone())
            }
            Job::Record { .. } | Job::Baseline(..) => {
                let mut schedule = pin::schedule_of_run(&r.trace)?;
                if schedule.is_empty() {
                    // No hand-over of a synchronization object: the order of the
                    // discovered accesses is all there is. Otherwise they are
                    // added only when confirming shows they help (`hunt`).
                    schedule = pin::with_access_handovers(&schedule, &r.trace)?;
                }
                if schedule.is_empty() {
                    return Ok(None);
                }
                let seed = match &r.job {
                    Job::Baseline(_, seed) => Some(*seed),
                    _ => None,
                };
                let finding = json!({
                    "kind": "failure",
                    "message": format!("a {source} run failed ({}); the schedule pins the order its synchronization events took", r.reason),
                    "seed": seed,
                    "schedule": schedule.to_string(),
                });
                (finding, schedule.to_string())
            }
        };
        let header = format!(
            "# ordo hunt: run {} ({source}) failed: {}\n# {}\n",
            r.number,
            r.reason,
            finding["message"].as_str().unwrap_or("").replace('\n', " ")
        );
        std::fs::write(&path, format!("{header}{text}"))
            .with_context(|| format!("write {}", path.display()))?;
        let analysis = match &r.job {
            Job::Candidate(c) => Some(c.finding.clone()),
            _ => None,
        };
        Ok(Some(Found {
            run: r.number,
            source,
            finding,
            reason: r.reason.clone(),
            schedule: path,
            trace: r.trace.clone(),
            also_failed,
            analysis,
        }))
    }

    /// For a candidate whose schedule confirmed `reproduced` times only: pins the
    /// failing replay's recording as a baseline run's is (`pin::schedule_of_run`),
    /// confirms that, and when it reproduces more often makes it the hunt's
    /// schedule (`reproduce.sched`; the candidate's stays as `candidate.sched`).
    /// Returns the better count, or `None` when the candidate's stays.
    fn pin_from_recording(&mut self, f: &mut Found, reproduced: u32) -> Result<Option<u32>> {
        let Ok(pinned) = pin::schedule_of_run(&f.trace) else {
            return Ok(None);
        };
        if pinned.is_empty() {
            return Ok(None);
        }
        let path = self.options.out_dir.join("pinned.sched");
        let header = format!(
            "# ordo hunt: the order run {}'s recording shows (its candidate's schedule reproduced {reproduced}/{})\n",
            f.run, self.options.confirm_runs
        );
        std::fs::write(&path, format!("{header}{pinned}"))
            .with_context(|| format!("write {}", path.display()))?;
        let better = self.confirm(&path)?;
        if better <= reproduced {
            let _ = std::fs::remove_file(&path);
            return Ok(None);
        }
        let candidate = self.options.out_dir.join("candidate.sched");
        std::fs::rename(&f.schedule, &candidate)
            .and_then(|()| std::fs::rename(&path, &f.schedule))
            .with_context(|| format!("write {}", f.schedule.display()))?;
        f.finding["candidate_schedule"] = f.finding["schedule"].clone();
        f.finding["candidate_confirm"] = json!(reproduced);
        f.finding["schedule"] = json!(pinned.to_string());
        f.finding["pinned_from_run"] = json!(f.run);
        Ok(Some(better))
    }

    /// For a candidate whose schedule confirmed `reproduced` times only (and could
    /// not be strengthened): goes on hunting for up to [`BETTER_PIN_RUNS`] more
    /// (twice that when it reproduced at most half the time)
    /// runs; each candidate that fails is confirmed, and the one that reproduces
    /// most often becomes the hunt's (another shape of the same bug often pins
    /// what the first one left free: a publication seen half-way rather than its
    /// first store alone). Returns the better count.
    fn search_better_pin(&mut self, f: &mut Found, reproduced: u32) -> Result<Option<u32>> {
        let held = self.options.out_dir.join("held.sched");
        std::fs::copy(&f.schedule, &held).with_context(|| format!("write {}", held.display()))?;
        // A pin that fails at most half the time was likely luck of timing: the
        // order that holds (often another shape of the same bug) gets more runs.
        let extra = if 2 * reproduced <= self.options.confirm_runs {
            2 * BETTER_PIN_RUNS
        } else {
            BETTER_PIN_RUNS
        };
        self.limit = self.runs + extra;
        let mut best = reproduced;
        let mut better = None;
        while best < pinned_threshold(self.options.confirm_runs) && self.runs < self.limit {
            let Some(mut g) = self.search_on()? else {
                break;
            };
            let n = self.confirm(&g.schedule)?;
            if n > best {
                best = n;
                std::fs::copy(&g.schedule, &held)?;
                g.finding["first_confirm"] = json!(reproduced);
                g.finding["first_schedule"] = f.finding["schedule"].clone();
                *f = g;
                better = Some(n);
            }
        }
        std::fs::rename(&held, &f.schedule)
            .with_context(|| format!("write {}", f.schedule.display()))?;
        self.stopped = String::new();
        Ok(better)
    }

    /// For a schedule that confirmed `reproduced` times only: confirms the other
    /// candidates that failed in the same batch and keeps the one that reproduces
    /// most often (the first stays as `first.sched`). Returns the better count.
    fn try_alternatives(&mut self, f: &mut Found, reproduced: u32) -> Result<Option<u32>> {
        let mut best: Option<(u32, String)> = None;
        for text in std::mem::take(&mut self.alternatives) {
            let path = self.options.out_dir.join("alternative.sched");
            std::fs::write(&path, &text).with_context(|| format!("write {}", path.display()))?;
            let n = self.confirm(&path)?;
            let _ = std::fs::remove_file(&path);
            if n > best.as_ref().map_or(reproduced, |b| b.0) {
                best = Some((n, text));
            }
            if n >= pinned_threshold(self.options.confirm_runs) {
                break;
            }
        }
        let Some((n, text)) = best else {
            return Ok(None);
        };
        let first = self.options.out_dir.join("first.sched");
        std::fs::rename(&f.schedule, &first)
            .with_context(|| format!("write {}", first.display()))?;
        let header = format!(
            "# ordo hunt: another candidate that failed in run {}'s batch (the first one reproduced {reproduced}/{})\n",
            f.run, self.options.confirm_runs
        );
        std::fs::write(&f.schedule, format!("{header}{text}"))
            .with_context(|| format!("write {}", f.schedule.display()))?;
        f.finding["first_schedule"] = f.finding["schedule"].clone();
        f.finding["first_confirm"] = json!(reproduced);
        f.finding["schedule"] = json!(text);
        Ok(Some(n))
    }

    /// For a schedule that confirmed `reproduced` times only: adds the order the
    /// failing run's discovered shared accesses took (`pin::with_access_handovers`),
    /// confirms that, and keeps it when it reproduces more often (the previous
    /// schedule stays as `unstrengthened.sched`). Returns the better count.
    fn strengthen_with_accesses(&mut self, f: &mut Found, reproduced: u32) -> Result<Option<u32>> {
        let text = std::fs::read_to_string(&f.schedule)?;
        let Ok(base) = Schedule::parse(&text) else {
            return Ok(None);
        };
        let Ok(stronger) = pin::with_access_handovers(&base, &f.trace) else {
            return Ok(None);
        };
        if stronger.orderings.len() == base.orderings.len() {
            return Ok(None);
        }
        let path = self.options.out_dir.join("strengthened.sched");
        let header = format!(
            "# ordo hunt: run {}'s schedule and the order its discovered shared accesses took \
             (the schedule alone reproduced {reproduced}/{})\n",
            f.run, self.options.confirm_runs
        );
        std::fs::write(&path, format!("{header}{stronger}"))
            .with_context(|| format!("write {}", path.display()))?;
        let better = self.confirm(&path)?;
        if better <= reproduced {
            let _ = std::fs::remove_file(&path);
            return Ok(None);
        }
        let previous = self.options.out_dir.join("unstrengthened.sched");
        std::fs::rename(&f.schedule, &previous)
            .and_then(|()| std::fs::rename(&path, &f.schedule))
            .with_context(|| format!("write {}", f.schedule.display()))?;
        f.finding["unstrengthened_schedule"] = f.finding["schedule"].clone();
        f.finding["unstrengthened_confirm"] = json!(reproduced);
        f.finding["schedule"] = json!(stronger.to_string());
        Ok(Some(better))
    }

    /// Replays the schedule `confirm_runs` times, `jobs` at a time; returns how many
    /// reproduced.
    fn confirm(&mut self, schedule_file: &Path) -> Result<u32> {
        let text = std::fs::read_to_string(schedule_file)?;
        let mut template = runs::replay_template(self.options);
        template.schedule = Schedule::parse(&text)
            .map_err(|e| anyhow::anyhow!("{}:{e}", schedule_file.display()))?;
        let total = self.options.confirm_runs;
        let (mut done, mut reproduced) = (0, 0);
        while done < total && !ordo_replayer::run::interrupted() {
            let n = (total - done).min(self.options.jobs.max(1) as u32);
            let template = &template;
            let verdicts: Vec<Result<Verdict>> = std::thread::scope(|scope| {
                let handles: Vec<_> = (0..n)
                    .map(|_| scope.spawn(move || replay(template).map(|o| o.verdict)))
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join()
                            .unwrap_or_else(|_| Err(anyhow::anyhow!("a replay panicked")))
                    })
                    .collect()
            });
            for v in verdicts {
                match v {
                    Ok(Verdict::Reproduced) => reproduced += 1,
                    Ok(_) => {}
                    Err(e) => {
                        // A strengthened or alternative schedule the replayer cannot
                        // plan (a point named by a function longer than a plan
                        // holds): it reproduces nothing; the log says why.
                        self.log_line(&format!(
                            "confirm\t{}\tnot replayable: {e:#}\n",
                            schedule_file.display()
                        ));
                        return Ok(0);
                    }
                }
            }
            done += n;
            let status = Status {
                runs: self.runs,
                budget: self.options.budget,
                pending: self.queue.len(),
                best: "confirming".to_string(),
                confirming: Some((done, total)),
            };
            (self.progress)(&status);
        }
        Ok(reproduced)
    }
}

/// Runs a hunt goes on for to find a pin that holds better than its first
/// reproduction's.
const BETTER_PIN_RUNS: u32 = 10;

/// First recordings a hunt makes again when one failed by itself with nothing to
/// pin.
const MAX_RERECORDS: usize = 3;

/// Reproductions out of `runs` confirmation replays that make a pin that holds
/// (19 of 20).
pub fn pinned_threshold(runs: u32) -> u32 {
    (runs * 19).div_ceil(20)
}

/// The seed of baseline run `n`: every run its own, all from the hunt's seed.
fn run_seed(seed: u64, n: u64) -> u64 {
    let mut z = seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    // The agent parses a decimal u64; keep it readable in schedule comments.
    (z ^ (z >> 31)) >> 1
}

/// `ordo replay --schedule FILE [ORACLE OPTIONS] -- CMD ARGS`, quoted for a POSIX
/// shell: the oracle's options only where they differ from the defaults.
pub fn replay_command_line(schedule: &Path, oracle: &Oracle, command: &[String]) -> String {
    let schedule = std::fs::canonicalize(schedule).unwrap_or_else(|_| schedule.to_path_buf());
    let mut words = vec![
        "ordo".to_string(),
        "replay".to_string(),
        "--schedule".to_string(),
        shell_quote(&schedule.display().to_string()),
    ];
    if oracle.expect_exit != 0 {
        words.push("--expect-exit".to_string());
        words.push(oracle.expect_exit.to_string());
    }
    let kinds: Vec<String> = oracle.fail_on.iter().map(|f| f.to_string()).collect();
    let defaults: Vec<String> = FailOn::DEFAULT.iter().map(|f| f.to_string()).collect();
    if kinds != defaults {
        for kind in kinds {
            words.push("--fail-on".to_string());
            words.push(shell_quote(&kind));
        }
    }
    words.push("--".to_string());
    words.extend(command.iter().map(|w| shell_quote(w)));
    words.join(" ")
}

/// A word as a POSIX shell reads it back unchanged.
pub fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-./:=@%+,".contains(&b));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// FNV-1a of `text`: a fingerprint that does not change between runs.
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_parse_and_split_candidates() {
        assert_eq!(Shard::parse("1/4"), Ok(Shard { index: 1, count: 4 }));
        for bad in ["4/4", "1", "a/b", "0/0", "-1/2"] {
            assert!(Shard::parse(bad).is_err(), "{bad}");
        }
        let s = Shard::parse("1/3").unwrap();
        let taken: Vec<u64> = (0..9).filter(|&i| s.takes(i)).collect();
        assert_eq!(taken, vec![1, 4, 7]);
    }

    #[test]
    fn words_are_quoted_only_when_needed() {
        assert_eq!(shell_quote("./prog"), "./prog");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn the_replay_command_carries_a_non_default_oracle() {
        let cmd = |oracle: &Oracle| {
            replay_command_line(
                Path::new("/x/r.sched"),
                oracle,
                &["./p".into(), "a b".into()],
            )
        };
        assert_eq!(
            cmd(&Oracle::default()),
            "ordo replay --schedule /x/r.sched -- ./p 'a b'"
        );
        let oracle = Oracle::new(3, vec!["stderr:bad (x)".parse().unwrap()]);
        assert_eq!(
            cmd(&oracle),
            "ordo replay --schedule /x/r.sched --expect-exit 3 --fail-on 'stderr:bad (x)' -- ./p 'a b'"
        );
    }

    #[test]
    fn run_seeds_differ_and_repeat() {
        assert_eq!(run_seed(7, 3), run_seed(7, 3));
        assert_ne!(run_seed(7, 3), run_seed(7, 4));
        assert_ne!(run_seed(7, 3), run_seed(8, 3));
    }
}
