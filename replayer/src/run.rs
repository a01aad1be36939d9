//! One replay: start the program with the agent, watch it, decide the verdict.
//!
//! The driver polls every few milliseconds: the program's exit, each thread's state
//! in the shared page (running, held at a gate, inside a blocking pthread call) and
//! its kernel state in `/proc/PID/task/TID/stat`. When every live thread is asleep,
//! either held at a gate or blocked in an untimed pthread call, and nothing changed
//! for the stall window, the run is stuck for good: a *deadlock* when no thread is
//! held (verdict reproduced), an *infeasible* schedule when some thread is held
//! waiting for an event that cannot come.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use ordo_probe_common::inproc::{SoftSite, SOFT_NO_GATE};
use ordo_recorder::discover::SoftTable;
use ordo_recorder::inproc::InprocMapping;
use ordo_recorder::launch::{self, ChildOutput};
use ordo_recorder::{snapshot_after_exec, watching, RecordOptions, Recording};
use ordo_schedule::{Checker, EventNamer, Schedule};
use ordo_trace::symbolize::Symbolizer;
use ordo_trace::{global_order, read_trace, Kind, LogicalId, ReadMode};
use serde_json::json;

use crate::access::{plan_access_sites, AccessWatches};
use crate::oracle::{Ending, Evidence, Oracle};
use crate::plan::Plan;
use crate::shared::SharedMemory;
use crate::shm;
use ordo_agent::AgentFile;

/// How often the driver looks at the program.
const POLL: Duration = Duration::from_millis(5);

/// Active (enforce the schedule) or passive (only check it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Hold threads at named events until their predecessors happened.
    Enforce,
    /// Gate nothing; report whether the run happened to follow the schedule.
    Check,
}

/// What to do with a run whose schedule turned out infeasible.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnInfeasible {
    /// Kill it (fast).
    Kill,
    /// Open every gate and let it finish freely.
    Release,
}

/// What to replay and how.
#[derive(Clone, Debug)]
pub struct ReplayOptions {
    /// Program and arguments.
    pub command: Vec<String>,
    /// The schedule to enforce or check.
    pub schedule: Schedule,
    /// Enforce or check.
    pub mode: Mode,
    /// Longest the program may run; then it is killed (see [`parse_timeout`]).
    pub timeout: Duration,
    /// How long every thread must stay blocked, with no progress, to call it stuck.
    pub stall: Duration,
    /// Infeasible schedule: kill or release.
    pub on_infeasible: OnInfeasible,
    /// Record the replay into this trace and check the schedule against it.
    pub record: Option<PathBuf>,
    /// The kernel probes' ring buffer size for the recording (`None`: as `ordo
    /// record` chooses, [`ordo_recorder::INPROC_BUFFER_SIZE`] when nothing is
    /// watched by eBPF, [`ordo_recorder::DEFAULT_BUFFER_SIZE`] otherwise).
    pub buffer_size: Option<usize>,
    /// Send the program's stdout to stderr (keeps stdout for a machine-readable outcome).
    pub stdout_to_stderr: bool,
    /// Where the instruction sites of the variables access events name come from
    /// (`--watch`, `--watch-hw`, `--sites-from`).
    pub watches: AccessWatches,
    /// What counts as the bug showing.
    pub oracle: Oracle,
    /// Extra environment for the program and its agent (e.g. the agent's
    /// scheduling strategy, `shm::ENV_STRATEGY`, which `ordo hunt` sets).
    pub env: Vec<(OsString, OsString)>,
    /// With `record`: also record the program's plain memory accesses at these
    /// instructions (`ordo_recorder::discover`, as `ordo record --discover` does),
    /// each taking at most `ordo_recorder::discover::DEFAULT_BUDGET` traps.
    pub discover: Option<std::sync::Arc<Vec<SoftSite>>>,
}

impl ReplayOptions {
    /// Enforce `schedule` on `command` with the CLI's defaults: 60 s timeout, 300 ms
    /// stall window, kill when infeasible, no recording, the default [`Oracle`].
    pub fn new(command: Vec<String>, schedule: Schedule) -> ReplayOptions {
        ReplayOptions {
            command,
            schedule,
            mode: Mode::Enforce,
            timeout: Duration::from_secs(60),
            stall: Duration::from_millis(300),
            on_infeasible: OnInfeasible::Kill,
            record: None,
            buffer_size: None,
            stdout_to_stderr: false,
            watches: AccessWatches::default(),
            oracle: Oracle::default(),
            env: Vec::new(),
            discover: None,
        }
    }
}

/// The outcome class. Only [`Verdict::Passed`] says the schedule ran to its end
/// without the bug showing; only [`Verdict::Reproduced`] says the bug showed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The program finished, every ordering of the schedule happened, and the
    /// oracle saw no failure.
    Passed,
    /// The oracle saw a failure (by default: an unexpected exit status, a signal, a
    /// deadlock or hang, a sanitizer report).
    Reproduced,
    /// The run could not be judged: the agent never started in the program, or the
    /// program ended before reaching `main` (e.g. a sanitizer runtime refused to
    /// start). Never a reproduction.
    Error,
    /// The schedule cannot be followed: threads were held at gates whose
    /// predecessors could not happen.
    Infeasible,
    /// The program finished without a failure but some ordering of the schedule
    /// never happened (it exited first): the schedule was not exercised, so this
    /// is no evidence the bug is absent.
    NotExercised,
    /// `ordo replay` (or the hunt running it) was asked to stop by SIGINT, SIGTERM
    /// or SIGHUP: the program was killed and nothing is concluded.
    Interrupted,
}

impl Verdict {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Passed => "passed",
            Verdict::Reproduced => "reproduced",
            Verdict::Error => "error",
            Verdict::Infeasible => "infeasible",
            Verdict::NotExercised => "not_exercised",
            Verdict::Interrupted => "interrupted",
        }
    }

    /// `ordo replay`'s exit status for this verdict: passed 0, reproduced 1, error 2
    /// (also every other error of `ordo`), infeasible 3, not_exercised 4.
    pub fn exit_status(self) -> u8 {
        match self {
            Verdict::Passed => 0,
            Verdict::Reproduced => 1,
            Verdict::Error => 2,
            Verdict::Infeasible => 3,
            Verdict::NotExercised => 4,
            Verdict::Interrupted => 130,
        }
    }
}

/// Everything a replay found out.
#[derive(Clone, Debug)]
pub struct ReplayOutcome {
    /// The verdict.
    pub verdict: Verdict,
    /// Why, in a few words (`exit code 1`, `deadlock: …`).
    pub reason: String,
    /// The program's exit code, if it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended it, if one did (ours included when we killed it).
    pub signal: Option<i32>,
    /// What the run showed: exit code, signal name, sanitizer report, stderr match.
    pub evidence: Evidence,
    /// No ordering of the schedule was violated in the run.
    pub schedule_held: bool,
    /// Whether `schedule_held` comes from a recording of the run (else: the agent's
    /// own observation).
    pub verified_by_recording: bool,
    /// Orderings whose later event did not happen, with what they waited for.
    pub pending: Vec<String>,
    /// Orderings violated (should be empty when enforcing).
    pub violated: Vec<String>,
    /// Threads held at a gate when the verdict was reached.
    pub held: Vec<String>,
    /// Problems worth a line (e.g. a symbol the agent could not find).
    pub warnings: Vec<String>,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// The trace of the replay, with `--record`.
    pub trace: Option<PathBuf>,
    /// Breakpoint traps the agent took at watched accesses (memory-access gates):
    /// one per counted access; accesses after a thread's last named one do not trap.
    pub access_traps: u64,
}

impl ReplayOutcome {
    /// The `--json` object.
    pub fn to_json(&self) -> serde_json::Value {
        let mut object = json!({
            "verdict": self.verdict.name(),
            "schedule_held": self.schedule_held,
            "pending": self.pending,
            "reason": self.reason,
            "violated": self.violated,
            "held_threads": self.held,
            "verified_by": if self.verified_by_recording { "recording" } else { "agent" },
            "warnings": self.warnings,
            "elapsed_ms": self.elapsed.as_millis() as u64,
            "trace": self.trace.as_ref().map(|p| p.display().to_string()),
            "access_traps": self.access_traps,
        });
        // The evidence's fields (`exit_code`, `signal`, `signal_name`, `sanitizer`,
        // `stderr_match`) sit at the top level.
        if let (Some(out), serde_json::Value::Object(evidence)) =
            (object.as_object_mut(), self.evidence.to_json())
        {
            out.extend(evidence);
        }
        object
    }

    /// Human-readable summary, several lines.
    pub fn render(&self) -> String {
        let mut out = format!("ordo replay: {} ({})\n", self.verdict.name(), self.reason);
        if self.verdict == Verdict::Error {
            // Nothing else of the run can be trusted: one line, naming why.
            return out;
        }
        let evidence = self.evidence.summary();
        if !evidence.is_empty() {
            out.push_str(&format!("  evidence: {evidence}\n"));
        }
        if let Some(report) = &self.evidence.sanitizer {
            out.push_str(&format!("  sanitizer: {}\n", report.first_line));
        }
        let by = if self.verified_by_recording {
            "checked on the recording"
        } else {
            "as seen by the agent"
        };
        out.push_str(&format!(
            "  schedule held: {} ({by})\n",
            if self.schedule_held { "yes" } else { "NO" }
        ));
        for v in &self.violated {
            out.push_str(&format!("  violated: {v}\n"));
        }
        for p in &self.pending {
            out.push_str(&format!("  pending: {p}\n"));
        }
        for h in &self.held {
            out.push_str(&format!("  held: {h}\n"));
        }
        for w in &self.warnings {
            out.push_str(&format!("  warning: {w}\n"));
        }
        if let Some(t) = &self.trace {
            out.push_str(&format!("  trace: {}\n", t.display()));
        }
        out
    }
}

/// How the run ended, before the verdict.
enum End {
    Exited(ExitStatus),
    Interrupted(i32),
    Deadlock(String),
    Infeasible,
    Timeout,
}

/// A thread of the program at one poll.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ThreadView {
    tid: u32,
    kernel_state: u8,
    agent_state: u32,
    detail: u32,
    logical: Option<LogicalId>,
}

/// Runs one replay.
pub fn replay(options: &ReplayOptions) -> Result<ReplayOutcome> {
    let Some(program) = options.command.first() else {
        bail!("no command given")
    };
    let path = launch::find_program(program)?;
    if !launch::is_dynamic(&path) {
        bail!("{}: statically linked: the replay agent can only be preloaded into dynamically linked programs", path.display());
    }
    let check_only = options.mode == Mode::Check;
    let mut plan = Plan::compile(&options.schedule, &path)?;
    // Access events need armed instruction sites, except in a passive check that a
    // recording verifies.
    let required = !(check_only && options.record.is_some());
    let mut warnings = plan_access_sites(
        &mut plan,
        &options.schedule,
        &path,
        &options.watches,
        required,
    )?;
    let mut memory = SharedMemory::create()?;
    plan.write_to(memory.get_mut(), check_only);
    let agent = AgentFile::write()?;

    let mut env: Vec<(OsString, OsString)> = agent.preload_env(&launch::sanitizer_runtimes(&path));
    env.push((shm::ENV_SHM_FD.into(), memory.raw_fd().to_string().into()));
    let mut output = ChildOutput::default();
    let sanitized = launch::is_sanitizer_build(&path);
    let capture = options
        .oracle
        .needs_stderr(sanitized)
        .then(StderrTee::new)
        .transpose()?;
    if let Some(tee) = &capture {
        output.stderr = Some(tee.program_end()?);
        if options.stdout_to_stderr {
            // Straight to our stderr, not into the pipe: a `stderr:REGEX` must not
            // match what the program printed on stdout.
            output.stdout = Some(dup(2)?);
        }
    } else if options.stdout_to_stderr {
        env.push((shm::ENV_STDOUT_TO_STDERR.into(), "1".into()));
    }
    env.extend(options.env.iter().cloned());

    // `--record`: the replay is recorded in process by the same agent (see
    // docs/REPLAY.md, "Recording a replay"): call sites are the program's, and the
    // agent's own work (its loader calls, its gates' futexes) is never recorded.
    // The variables and points the schedule orders are watched by eBPF, as
    // `ordo record --watch/--mark` does.
    let mut record_options = None;
    let mut inherit = Vec::new();
    let mut record_only_soft = Vec::new();
    // Without discovery every software breakpoint stays for the whole run, so the
    // schedule's variables can be recorded at them and their records named as the
    // variables' accesses (`read(level)#N`).
    let soft_records_variables = options.discover.is_none() && !plan.soft.is_empty();
    if let Some(out) = &options.record {
        ordo_recorder::recording::prepare_loader();
        let mut record = RecordOptions::new(
            out.clone(),
            ordo_recorder::DEFAULT_BUFFER_SIZE,
            options.command.clone(),
            false,
        );
        record.inputs.push(path.clone());
        if options.discover.is_some() {
            record.name_data_of = Some(path.clone());
        }
        let discovered: std::collections::HashSet<u64> = options
            .discover
            .iter()
            .flat_map(|sites| sites.iter().map(|s| s.ip))
            .chain(plan.soft.iter().map(|s| s.ip))
            .collect();
        record_only_soft = record_accesses(
            &mut record,
            &plan,
            &path,
            &options.watches,
            &discovered,
            soft_records_variables,
        )?;
        // Watched accesses stay on the kernel's clock (see the recorder's inproc).
        let watched = !record.watch_sites.is_empty() || !record.hw_watches.is_empty();
        record.buffer_size = options.buffer_size.unwrap_or(if watched {
            ordo_recorder::DEFAULT_BUFFER_SIZE
        } else {
            ordo_recorder::INPROC_BUFFER_SIZE
        });
        let mapping = std::sync::Arc::new(InprocMapping::create(!watched, false)?);
        env.push(mapping.env());
        inherit.push(mapping.raw_fd());
        record.inproc = Some(mapping);
        record_options = Some(record);
    }
    // Discovery in the recording, the schedule's program points included: a point
    // gated by a hardware breakpoint traps there first (held, then let go), then
    // at the software breakpoint (recorded, run out of line).
    // The plan's software gates (points past a thread's debug registers) join them.
    let mut soft_sites: Vec<SoftSite> = match (&options.record, &options.discover) {
        (Some(_), Some(sites)) => sites.to_vec(),
        // A Rust program's std mutexes are gated (and recorded) at software
        // breakpoints even without discovery (whose plan has them).
        _ => ordo_recorder::rust_locks::plan_rust_locks(&path)?.sites,
    };
    let discovering = options.record.is_some() && options.discover.is_some();
    for gate in &plan.soft {
        match soft_sites.iter_mut().find(|s| s.ip == gate.ip) {
            Some(s) => s.gate = gate.gate,
            None => soft_sites.push(*gate),
        }
    }
    for site in record_only_soft {
        if !soft_sites.iter().any(|s| s.ip == site.ip) {
            soft_sites.push(site);
        }
    }
    soft_sites.sort_by_key(|s| s.ip);
    let soft_table = if soft_sites.is_empty() {
        None
    } else {
        let budget = if discovering {
            ordo_recorder::discover::DEFAULT_BUDGET
        } else {
            0
        };
        let table = SoftTable::create(&soft_sites, budget)?;
        env.push(table.env());
        inherit.push(table.raw_fd());
        Some(table)
    };
    // A hardware watch in the recording needs the program's addresses before it
    // starts: no ASLR, as `ordo record` does.
    let no_aslr = record_options
        .as_ref()
        .is_some_and(|r: &RecordOptions| !r.hw_watches.is_empty());
    let stopped =
        launch::spawn_stopped_redirected(&options.command, &env, no_aslr, &inherit, output)?;
    let pid = stopped.pid();
    let recording = match &record_options {
        Some(record) => Some(Recording::start(pid, record).context("record the replay")?),
        None => None,
    };
    let start = Instant::now();
    let mut child = match &recording {
        Some(recording) => {
            // As `ordo record` does: the module map is read while the program is
            // held at its entry point, so a replay that is over at once still
            // leaves a symbolized trace (names in the check depend on it).
            let (child, held) =
                stopped.release_held_at_entry(&mut || recording.snapshot_modules())?;
            if held == launch::EntryStop::NotHeld {
                snapshot_after_exec(recording, pid, false);
            }
            child
        }
        None => stopped.release()?,
    };
    let capture = capture.map(StderrTee::start);
    let (end, held) = watch(&mut child, pid, &memory, &plan, options, start, sanitized)?;
    let elapsed = start.elapsed();
    let status = match &end {
        End::Exited(status) => Some(*status),
        _ => child.try_wait().ok().flatten(),
    };
    let summary = match recording {
        Some(r) => Some(
            r.finish(status)
                .context("finish the recording of the replay")?,
        ),
        None => None,
    };
    drop(agent);
    drop(soft_table);
    let stderr = capture.map(|c| c.finish());

    let sh = memory.get();
    let started = sh.attached.load(Ordering::Acquire);
    for s in plan.unresolved_symbols() {
        let idx = plan.symbols.iter().position(|p| p == s).unwrap_or(0);
        if sh.symbols[idx].addr.load(Ordering::Relaxed) == 0 {
            warnings.push(format!(
                "symbol `{}` is neither in {} nor exported by its libraries: events on it never matched",
                s.name,
                path.display()
            ));
        }
    }

    // What the agent saw, in its order stamps.
    let mut checker = Checker::new(&options.schedule);
    for event in plan.observed(sh) {
        checker.observe(&event);
    }
    let mut report = checker.report();
    let mut verified_by_recording = false;
    if let (Some(out), Some(summary)) = (&options.record, &summary) {
        let (reader, events) =
            read_trace(out, ReadMode::Salvage).map_err(|e| anyhow::anyhow!("{e}"))?;
        if reader.modules.is_empty() {
            warnings.push(
                "the recording has no module map (the program's symbols are unknown): orderings on named objects cannot be checked on it".to_string(),
            );
        }
        let symbolizer = Symbolizer::of_trace(&reader);
        let mut namer = EventNamer::new(&reader.threads, &symbolizer);
        if soft_records_variables {
            namer = namer.counting_points_as_accesses();
        }
        let ordered = global_order(events);
        report = ordo_schedule::check(&as_recorded(&options.schedule, &plan), &ordered, &mut namer);
        verified_by_recording = true;
        if summary.dropped > 0 {
            warnings.push(format!(
                "the recording lost {} events (ring buffer full): the check may be wrong; raise --buffer-size",
                summary.dropped
            ));
        }
        if let Some(error) = &summary.write_error {
            warnings.push(format!(
                "the recording is incomplete ({error}; {} events not written): the check may be wrong",
                summary.unwritten
            ));
        }
    }

    let (exit_code, signal) = match status {
        Some(s) => (s.code(), s.signal()),
        None => (None, None),
    };
    let ending = match &end {
        End::Exited(s) => Some(match s.signal() {
            Some(signal) => Ending::Signaled { signal },
            None => Ending::Exited {
                code: s.code().unwrap_or(-1),
            },
        }),
        End::Deadlock(what) => Some(Ending::Deadlock(what.clone())),
        End::Timeout if held.is_empty() => Some(Ending::Hang {
            secs: options.timeout.as_secs_f64(),
        }),
        End::Timeout | End::Infeasible | End::Interrupted(_) => None,
    };
    let judgement = ending
        .as_ref()
        .map(|e| options.oracle.judge(e, stderr.as_deref()));
    let evidence = match &judgement {
        Some(j) => j.evidence.clone(),
        None => {
            // Killed by us as infeasible: the evidence is what we did.
            let ending = match signal {
                Some(signal) => Ending::Signaled { signal },
                None => Ending::Exited {
                    code: exit_code.unwrap_or(-1),
                },
            };
            options.oracle.judge(&ending, stderr.as_deref()).evidence
        }
    };
    let pending: Vec<String> = report.pending.iter().map(|u| u.to_string()).collect();
    let first_stderr_line = || {
        stderr
            .as_deref()
            .and_then(|t| t.lines().map(str::trim).find(|l| !l.is_empty()))
            .map(|l| format!(": the program said {l:?}"))
            .unwrap_or_default()
    };
    let ended_by_itself = matches!(end, End::Exited(_));
    let (verdict, reason) = if started == 0 {
        (
            Verdict::Error,
            format!(
                "the replay agent never started in the program{}",
                first_stderr_line()
            ),
        )
    } else if started == shm::ATTACHED_STARTED && ended_by_itself {
        (
            Verdict::Error,
            format!(
                "the program ended before reaching main ({}){}",
                evidence.summary(),
                first_stderr_line()
            ),
        )
    } else {
        match (&end, judgement) {
            (_, Some(j)) if j.failed => (Verdict::Reproduced, j.reason),
            (End::Infeasible, _) => {
                let what = match options.on_infeasible {
                    OnInfeasible::Kill => "killed",
                    OnInfeasible::Release => "released to finish freely",
                };
                (
                    Verdict::Infeasible,
                    format!("every live thread was held at a gate or blocked; {what}"),
                )
            }
            (End::Interrupted(signal), _) => (
                Verdict::Interrupted,
                format!(
                    "interrupted by {}; the program was killed",
                    crate::oracle::signal_name(*signal)
                ),
            ),
            (End::Timeout, _) => (
                Verdict::Infeasible,
                format!(
                    "threads still held at gates after {} s; killed",
                    options.timeout.as_secs_f64()
                ),
            ),
            (End::Exited(_), _) if !held.is_empty() && !check_only => (
                Verdict::Infeasible,
                "the program finished while threads were held at gates".to_string(),
            ),
            (_, j) => {
                let what = j.map(|j| j.reason).unwrap_or_default();
                if pending.is_empty() {
                    (Verdict::Passed, what)
                } else {
                    (
                        Verdict::NotExercised,
                        format!(
                            "{what}, but {} ordering(s) of the schedule never happened: not a pass",
                            pending.len()
                        ),
                    )
                }
            }
        }
    };
    Ok(ReplayOutcome {
        verdict,
        reason,
        exit_code,
        signal,
        evidence,
        schedule_held: report.held,
        verified_by_recording,
        pending,
        violated: report.violated.iter().map(|u| u.to_string()).collect(),
        held,
        warnings,
        elapsed,
        trace: options.record.clone(),
        access_traps: sh.traps.load(Ordering::Relaxed),
    })
}

/// Adds the schedule's variables to the replay's recording, so the check on the
/// recording sees the accesses it orders: the `--watch` specs, the variables the
/// schedule names (as `--watch`), and the `--watch-hw` specs (hardware watchpoints,
/// at the addresses of a run without ASLR).
///
/// Returns the software breakpoints that record, without gating, the main
/// executable's other accesses of the schedule's variables when some of their
/// instructions are gated in software (`soft_records_variables`: not with
/// discovery, which records them already). A uprobe on a gated instruction would take its
/// `int3` first and step the instruction itself, so the agent's breakpoint, and
/// the gate, would never run (seen: `--record` let a gated read through 1 time in
/// 100, and a write waiting for a gated read hung); and one variable's accesses
/// must all come from one recorder, or their sequence numbers — the agent's and
/// the kernel's, counted apart — would not order them.
fn record_accesses(
    record: &mut RecordOptions,
    plan: &Plan,
    program: &Path,
    watches: &AccessWatches,
    discovered: &std::collections::HashSet<u64>,
    soft_records_variables: bool,
) -> Result<Vec<SoftSite>> {
    let mut watch = watches.watch.clone();
    for s in &plan.symbols {
        let named = plan
            .events
            .iter()
            .any(|e| e.event.kind.is_access() && e.event.object.to_string() == s.text);
        let hw = watches
            .watch_hw
            .iter()
            .any(|h| h.split(':').next() == Some(&s.text));
        let given = watch
            .iter()
            .any(|w| w.split(':').next() == Some(&s.text) || w.split(':').next() == Some(&s.name));
        if named && !hw && !given {
            watch.push(if s.offset == 0 {
                s.text.clone()
            } else {
                format!("{}:1", s.text)
            });
        }
    }
    let libs = launch::needed_libraries(program);
    let pie = launch::is_pie(program);
    let main_binary = std::fs::canonicalize(program).unwrap_or(program.to_path_buf());
    let bias = |module: &Path| -> Option<u64> {
        (std::fs::canonicalize(module).ok()? == main_binary).then_some(if pie {
            launch::NO_ASLR_PIE_BASE
        } else {
            0
        })
    };
    let setup = watching::plan(&watch, &watches.watch_hw, program, &libs, &bias)
        .context("watch the schedule's variables in the recording")?;
    record.watch_sites = setup.sites;
    let in_main = |module: &Path| std::fs::canonicalize(module).is_ok_and(|m| m == main_binary);
    record
        .watch_sites
        .retain(|(module, _, site)| !(discovered.contains(&site.ip) && in_main(module)));
    let mut record_only = Vec::new();
    if soft_records_variables {
        let eligible: HashMap<u64, SoftSite> = ordo_recorder::discover::plan_discovery(program)?
            .sites
            .into_iter()
            .map(|s| (s.ip, s))
            .collect();
        record.watch_sites.retain(|(module, _, site)| {
            match eligible.get(&site.ip).filter(|_| in_main(module)) {
                Some(soft) => {
                    record_only.push(SoftSite {
                        gate: SOFT_NO_GATE,
                        ..*soft
                    });
                    false
                }
                None => true,
            }
        });
    }
    record.hw_watches = setup.hw;
    // The schedule's program points, recorded as `at` events — but those discovery
    // records already: their accesses are named `at(function+OFFSET)#N` too, and two
    // breakpoints on one instruction would fight over its first byte.
    let through_discovery: std::collections::HashSet<&str> = plan
        .sites
        .iter()
        .filter(|s| s.kind == Kind::At && discovered.contains(&s.site.ip))
        .map(|s| plan.symbols[s.symbol].text.as_str())
        .collect();
    let marks: Vec<String> = plan
        .mark_names
        .iter()
        .map(|(t, _)| t.clone())
        .filter(|t| !through_discovery.contains(t.as_str()))
        .collect();
    let (sites, _) =
        watching::plan_marks(&marks, program).context("record the schedule's program points")?;
    record.watch_sites.extend(sites);
    Ok(record_only)
}

/// The schedule with its `at(SPEC)` objects renamed as a recording names them
/// (`function+OFFSET`), for checking it on the recording.
fn as_recorded(schedule: &Schedule, plan: &Plan) -> Schedule {
    let mut out = schedule.clone();
    let rename = |e: &mut ordo_schedule::EventRef| {
        if e.kind != Kind::At {
            return;
        }
        let text = e.object.to_string();
        if let Some((_, name)) = plan.mark_names.iter().find(|(t, _)| *t == text) {
            e.object = ordo_schedule::ObjectRef::Symbol(name.clone());
        }
    };
    for o in &mut out.orderings {
        o.before.iter_mut().for_each(rename);
        rename(&mut o.after);
    }
    out
}

/// Watches the running program until it ends or is stuck; returns how it ended and
/// the threads held at gates at that moment.
fn watch(
    child: &mut Child,
    pid: u32,
    memory: &SharedMemory,
    plan: &Plan,
    options: &ReplayOptions,
    start: Instant,
    sanitized: bool,
) -> Result<(End, Vec<String>)> {
    let mut stuck_since: Option<(Instant, Vec<ThreadView>, u64)> = None;
    // Since when a thread has been held with no call made by any thread: the others
    // may be sleeping in a poll loop (`usleep`, a timed wait) or spinning on a
    // flag, which the states above never show as blocked.
    let mut held_since: Option<(Instant, u64)> = None;
    let idle_limit = (options.stall * 5).max(HELD_IDLE_MIN);
    let mut infeasible_seen = false;
    // Threads held when the schedule proved infeasible and the run was released.
    let mut held_at_release: Vec<String> = Vec::new();
    loop {
        let interrupted = INTERRUPTED.load(Ordering::SeqCst);
        if interrupted != 0 {
            let held = held_threads(&snapshot_slots(memory), plan, memory);
            kill(child, pid);
            return Ok((End::Interrupted(interrupted), held));
        }
        if let Some(status) = child.try_wait().context("wait for the program")? {
            if infeasible_seen {
                return Ok((End::Infeasible, held_at_release));
            }
            let held = held_threads(&snapshot_slots(memory), plan, memory);
            return Ok((End::Exited(status), held));
        }
        if start.elapsed() >= options.timeout {
            if infeasible_seen {
                kill(child, pid);
                return Ok((End::Infeasible, held_at_release));
            }
            let held = held_threads(&snapshot_slots(memory), plan, memory);
            kill(child, pid);
            return Ok((End::Timeout, held));
        }
        let threads = snapshot(pid, memory, sanitized);
        let progress = progress_of(memory);
        let live: Vec<&ThreadView> = threads
            .iter()
            .filter(|t| !matches!(t.kernel_state, b'Z' | b'X'))
            .collect();
        let asleep = |t: &&ThreadView| matches!(t.kernel_state, b'S' | b'D');
        // A thread being created has no slot yet and may not even be scheduled: the
        // threads the driver sees waiting may be waiting for it.
        let starting = memory.get().pending_starts.load(Ordering::Acquire) != 0;
        let stuck = !live.is_empty()
            && !starting
            && live.iter().all(|t| {
                asleep(t)
                    && (t.agent_state == shm::STATE_HELD || t.agent_state == shm::STATE_BLOCKED)
            });
        if !stuck {
            stuck_since = None;
        } else {
            match &stuck_since {
                Some((_, views, p)) if *views == threads && *p == progress => {}
                _ => stuck_since = Some((Instant::now(), threads.clone(), progress)),
            }
        }
        let any_held_now = live.iter().any(|t| t.agent_state == shm::STATE_HELD);
        match held_since {
            Some((_, p)) if any_held_now && p == progress => {}
            _ if any_held_now => held_since = Some((Instant::now(), progress)),
            _ => held_since = None,
        }
        // Held with no call made for the idle limit, or every thread held or blocked
        // for the stall window: the schedule cannot go on.
        let held_idle = held_since.is_some_and(|(since, _)| since.elapsed() >= idle_limit);
        let stuck_held = stuck_since.as_ref().is_some_and(|(since, views, _)| {
            since.elapsed() >= options.stall
                && views.iter().any(|t| t.agent_state == shm::STATE_HELD)
        });
        if (held_idle || stuck_held) && !infeasible_seen && options.mode == Mode::Enforce {
            let held = held_threads(&snapshot_slots(memory), plan, memory);
            match options.on_infeasible {
                OnInfeasible::Kill => {
                    kill(child, pid);
                    return Ok((End::Infeasible, held));
                }
                OnInfeasible::Release => {
                    infeasible_seen = true;
                    held_at_release = held;
                    memory.release_all();
                    stuck_since = None;
                    held_since = None;
                    continue;
                }
            }
        }
        if let Some((since, views, _)) = &stuck_since {
            if since.elapsed() >= options.stall {
                let what = describe_blocked(views);
                kill(child, pid);
                if infeasible_seen {
                    return Ok((End::Infeasible, held_at_release));
                }
                return Ok((End::Deadlock(what), Vec::new()));
            }
        }
        std::thread::sleep(POLL);
    }
}

/// Shortest time a thread may be held while no thread makes a call before the
/// schedule is taken as infeasible (five stall windows, at least this).
const HELD_IDLE_MIN: Duration = Duration::from_millis(1500);

/// The signal that asked the replays of this process to stop (0: none).
static INTERRUPTED: AtomicI32 = AtomicI32::new(0);

/// Makes SIGINT, SIGTERM and SIGHUP end every replay running in this process with
/// the verdict [`Verdict::Interrupted`]: its program is killed (a program held at a
/// gate would otherwise wait forever) and its temporary files removed. For the
/// command line (`ordo replay`, `ordo hunt`); a library user keeps its own handling.
pub fn stop_replays_on_interrupt() {
    extern "C" fn on_signal(signal: libc::c_int) {
        INTERRUPTED.store(signal, Ordering::SeqCst);
    }
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { libc::signal(signal, on_signal as *const () as libc::sighandler_t) };
    }
}

/// Whether [`stop_replays_on_interrupt`]'s signal arrived: a caller running many
/// replays (a hunt) stops starting new ones.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst) != 0
}

fn kill(child: &mut Child, pid: u32) {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let _ = child.wait();
}

fn progress_of(memory: &SharedMemory) -> u64 {
    let sh = memory.get();
    let n = (sh.n_slots.load(Ordering::Acquire) as usize).min(shm::MAX_SLOTS);
    let mut sum = sh.epoch.load(Ordering::Acquire) as u64 + sh.stamp.load(Ordering::Acquire);
    for slot in &sh.slots[..n] {
        sum = sum.wrapping_add(slot.progress.load(Ordering::Relaxed));
    }
    sum
}

/// The agent's view: tid → (state, detail, logical id), latest slot per tid.
fn snapshot_slots(memory: &SharedMemory) -> HashMap<u32, (u32, u32, Option<LogicalId>)> {
    let sh = memory.get();
    let n = (sh.n_slots.load(Ordering::Acquire) as usize).min(shm::MAX_SLOTS);
    let mut out = HashMap::new();
    for slot in &sh.slots[..n] {
        let tid = slot.tid.load(Ordering::Acquire);
        if tid == 0 {
            continue;
        }
        let depth = slot.depth.load(Ordering::Relaxed) as usize;
        let logical = (depth <= shm::MAX_DEPTH).then(|| {
            LogicalId(
                slot.path[..depth]
                    .iter()
                    .map(|p| p.load(Ordering::Relaxed))
                    .collect(),
            )
        });
        out.insert(
            tid,
            (
                slot.state.load(Ordering::Acquire),
                slot.detail.load(Ordering::Relaxed),
                logical,
            ),
        );
    }
    out
}

/// Whether a thread of a sanitizer build is the runtime's own (ThreadSanitizer's
/// background thread): sanitizer runtimes start their threads with every signal
/// blocked, synchronous faults included, which program threads practically never
/// do. Such a thread wakes up periodically forever, so counting it as a program
/// thread that makes progress would hide every deadlock and infeasible schedule.
fn is_runtime_thread(task: &Path) -> bool {
    let Ok(status) = std::fs::read_to_string(task.join("status")) else {
        return false;
    };
    let Some(blocked) = status
        .lines()
        .find_map(|l| l.strip_prefix("SigBlk:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
    else {
        return false;
    };
    [
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGFPE,
        libc::SIGILL,
        libc::SIGABRT,
    ]
    .iter()
    .all(|&sig| blocked & (1u64 << (sig - 1)) != 0)
}

/// The program's threads as the kernel and the agent see them; with `sanitized`,
/// the sanitizer runtime's own threads are left out.
fn snapshot(pid: u32, memory: &SharedMemory, sanitized: bool) -> Vec<ThreadView> {
    let slots = snapshot_slots(memory);
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(tid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // A program thread the agent knows is never the runtime's, even inside a
        // call that blocks every signal (glibc's `pthread_create` does).
        if sanitized && !slots.contains_key(&tid) && is_runtime_thread(&entry.path()) {
            continue;
        }
        // The state follows the command name, which is in parentheses and may hold any byte.
        let Some(state) = stat
            .rfind(')')
            .and_then(|i| stat.as_bytes().get(i + 2))
            .copied()
        else {
            continue;
        };
        let (agent_state, detail, logical) =
            slots
                .get(&tid)
                .cloned()
                .unwrap_or((shm::STATE_RUNNING, 0, None));
        out.push(ThreadView {
            tid,
            kernel_state: state,
            agent_state,
            detail,
            logical,
        });
    }
    out.sort_by_key(|t| t.tid);
    out
}

fn thread_name(logical: &Option<LogicalId>, tid: u32) -> String {
    match logical {
        Some(id) => format!("thread {id}"),
        None => format!("thread tid {tid}"),
    }
}

fn describe_blocked(views: &[ThreadView]) -> String {
    let parts: Vec<String> = views
        .iter()
        .filter(|t| !matches!(t.kernel_state, b'Z' | b'X'))
        .map(|t| {
            let call = Kind::from_code(t.detail as u16)
                .map(|k| k.name())
                .unwrap_or("a pthread call");
            format!("{} in {call}", thread_name(&t.logical, t.tid))
        })
        .collect();
    format!("all {} threads blocked ({})", parts.len(), parts.join(", "))
}

fn held_threads(
    slots: &HashMap<u32, (u32, u32, Option<LogicalId>)>,
    plan: &Plan,
    memory: &SharedMemory,
) -> Vec<String> {
    let sh = memory.get();
    let mut out: Vec<String> = slots
        .iter()
        .filter(|(_, (state, _, _))| *state == shm::STATE_HELD)
        .filter_map(|(tid, (_, detail, logical))| {
            let Some(e) = plan.events.get(*detail as usize) else {
                return Some(thread_name(logical, *tid));
            };
            let missing: Vec<String> = e
                .preds
                .iter()
                .filter(|&&p| sh.events[p].done.load(Ordering::Acquire) == 0)
                .map(|&p| plan.events[p].event.to_string())
                .collect();
            // A thread whose predecessors all happened was released and had not run yet.
            (!missing.is_empty()).then(|| {
                format!(
                    "{} before {} (waiting for {})",
                    thread_name(logical, *tid),
                    e.event,
                    missing.join(", ")
                )
            })
        })
        .collect();
    out.sort();
    out
}

/// A duplicate of our descriptor `fd`, close-on-exec.
fn dup(fd: i32) -> Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC returns a new descriptor we then own.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if new < 0 {
        bail!(
            "duplicate descriptor {fd}: {}",
            std::io::Error::last_os_error()
        );
    }
    // SAFETY: just created, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// Most of the program's stderr kept for the oracle; beyond it, output is still
/// passed through but not kept (sanitizer reports come early enough in practice).
const STDERR_KEEP: usize = 8 << 20;

/// The program's stderr, passed through to ours as it comes (a tee) and kept for
/// the oracle: sanitizer reports and `stderr:REGEX`.
struct StderrTee {
    read: OwnedFd,
    write: Option<OwnedFd>,
}

/// A running [`StderrTee`].
struct RunningTee {
    kept: Arc<Mutex<Vec<u8>>>,
    done: std::sync::mpsc::Receiver<()>,
}

impl StderrTee {
    fn new() -> Result<StderrTee> {
        let mut fds = [0; 2];
        // SAFETY: fds is a valid array of two ints.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            bail!(
                "pipe for the program's stderr: {}",
                std::io::Error::last_os_error()
            );
        }
        // SAFETY: pipe2 returned two new descriptors we now own.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        Ok(StderrTee {
            read,
            write: Some(write),
        })
    }

    /// The write end, for the program's stderr (the spawn dups it to fd 2).
    fn program_end(&self) -> Result<OwnedFd> {
        let write = self.write.as_ref().expect("before start");
        Ok(write.try_clone()?)
    }

    /// Starts passing the output through; our copy of the write end is closed, so
    /// the reader sees end-of-file when the program (and whatever inherited its
    /// stderr) is gone.
    fn start(mut self) -> RunningTee {
        self.write.take();
        let kept = Arc::new(Mutex::new(Vec::new()));
        let (tx, done) = std::sync::mpsc::channel();
        let sink = kept.clone();
        let mut pipe = std::fs::File::from(self.read);
        std::thread::spawn(move || {
            let mut buf = [0u8; 16 << 10];
            loop {
                match pipe.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        let _ = std::io::stderr().write_all(&buf[..n]);
                        let mut kept = sink.lock().unwrap_or_else(|e| e.into_inner());
                        let room = STDERR_KEEP.saturating_sub(kept.len()).min(n);
                        kept.extend_from_slice(&buf[..room]);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            let _ = tx.send(());
        });
        RunningTee { kept, done }
    }
}

impl RunningTee {
    /// What the program wrote to stderr. Waits briefly for the end of the output:
    /// a process the program started may keep the pipe open long after.
    fn finish(self) -> String {
        let _ = self.done.recv_timeout(Duration::from_millis(500));
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        String::from_utf8_lossy(&kept).into_owned()
    }
}

/// Reads and parses a schedule file; errors name the file, line and column.
pub fn read_schedule(path: &Path) -> Result<Schedule> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("read schedule {}", path.display()))?;
    Schedule::parse(&text).map_err(|e| anyhow::anyhow!("{}:{e}", path.display()))
}

/// The longest `--timeout` accepted, in seconds (a year): beyond it a `Duration`
/// would overflow its deadline arithmetic, and no replay means it.
pub const MAX_TIMEOUT_SECS: f64 = 365.0 * 24.0 * 3600.0;

/// Parses a `--timeout` in seconds: a finite number in (0, [`MAX_TIMEOUT_SECS`]].
/// Used as the CLI's value parser, so `--timeout 1e30` is a one-line error, not
/// a panic in `Duration::from_secs_f64`.
pub fn parse_timeout(s: &str) -> Result<f64, String> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !(secs > 0.0 && secs <= MAX_TIMEOUT_SECS) {
        return Err(format!(
            "{s} is out of range: expected seconds in (0, {MAX_TIMEOUT_SECS}]"
        ));
    }
    Ok(secs)
}
