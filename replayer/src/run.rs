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
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use ordo_recorder::{launch, spawn_stopped, RecordOptions, Recording};
use ordo_schedule::{Checker, EventNamer, Schedule};
use ordo_trace::symbolize::Symbolizer;
use ordo_trace::{global_order, read_trace, Kind, LogicalId, ReadMode};
use serde_json::json;

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
    /// Ring buffer size for the recording.
    pub buffer_size: usize,
    /// Send the program's stdout to stderr (keeps stdout for a machine-readable outcome).
    pub stdout_to_stderr: bool,
    /// Extra environment for the program and its agent (e.g. the agent's
    /// scheduling strategy, `shm::ENV_STRATEGY`, which `ordo hunt` sets).
    pub env: Vec<(OsString, OsString)>,
}

/// The outcome class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The program finished normally.
    Passed,
    /// The program failed: non-zero exit, a signal, a deadlock or a hang.
    Reproduced,
    /// The schedule cannot be followed: threads were held at gates whose
    /// predecessors could not happen.
    Infeasible,
}

impl Verdict {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Passed => "passed",
            Verdict::Reproduced => "reproduced",
            Verdict::Infeasible => "infeasible",
        }
    }

    /// `ordo replay`'s exit status for this verdict.
    pub fn exit_status(self) -> u8 {
        match self {
            Verdict::Passed => 0,
            Verdict::Reproduced => 1,
            Verdict::Infeasible => 3,
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
}

impl ReplayOutcome {
    /// The `--json` object.
    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "verdict": self.verdict.name(),
            "exit_code": self.exit_code,
            "signal": self.signal,
            "schedule_held": self.schedule_held,
            "pending": self.pending,
            "reason": self.reason,
            "violated": self.violated,
            "held_threads": self.held,
            "verified_by": if self.verified_by_recording { "recording" } else { "agent" },
            "warnings": self.warnings,
            "elapsed_ms": self.elapsed.as_millis() as u64,
            "trace": self.trace.as_ref().map(|p| p.display().to_string()),
        })
    }

    /// Human-readable summary, several lines.
    pub fn render(&self) -> String {
        let mut out = format!("ordo replay: {} ({})\n", self.verdict.name(), self.reason);
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
    if check_only && options.record.is_none() {
        // Without a recording, the agent is the only observer: it must see every event.
        Plan::compile(&options.schedule, &path, false)?;
    }
    let plan = Plan::compile(&options.schedule, &path, options.record.is_some())?;
    let mut memory = SharedMemory::create()?;
    plan.write_to(memory.get_mut(), check_only);
    let agent = AgentFile::write()?;

    let mut env: Vec<(OsString, OsString)> = agent.preload_env();
    env.push((shm::ENV_SHM_FD.into(), memory.raw_fd().to_string().into()));
    if options.stdout_to_stderr {
        env.push((shm::ENV_STDOUT_TO_STDERR.into(), "1".into()));
    }
    env.extend(options.env.iter().cloned());

    let stopped = spawn_stopped(&options.command, &env)?;
    let pid = stopped.pid();
    let recording = match &options.record {
        Some(out) => {
            let record_options = RecordOptions::new(
                out.clone(),
                options.buffer_size,
                options.command.clone(),
                false,
            );
            Some(Recording::start(pid, &record_options).context("record the replay")?)
        }
        None => None,
    };
    let start = Instant::now();
    let mut child = stopped.release()?;
    let (end, held) = watch(&mut child, pid, &memory, &plan, options, start)?;
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

    let sh = memory.get();
    let mut warnings = Vec::new();
    if sh.attached.load(Ordering::Acquire) == 0 && !options.schedule.is_empty() {
        warnings
            .push("the replay agent never started in the program: nothing was gated".to_string());
    }
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
    let mut done: Vec<(u64, usize)> = (0..plan.events.len())
        .filter(|&i| sh.events[i].done.load(Ordering::Acquire) != 0)
        .map(|i| (sh.events[i].stamp.load(Ordering::Relaxed), i))
        .collect();
    done.sort();
    let mut checker = Checker::new(&options.schedule);
    for (_, i) in &done {
        checker.observe(&plan.events[*i].event);
    }
    let mut report = checker.report();
    let mut verified_by_recording = false;
    if let (Some(out), Some(summary)) = (&options.record, &summary) {
        let (reader, events) =
            read_trace(out, ReadMode::Salvage).map_err(|e| anyhow::anyhow!("{e}"))?;
        let symbolizer = Symbolizer::new(&reader.modules);
        let mut namer = EventNamer::new(&reader.threads, &symbolizer);
        let ordered = global_order(events);
        report = ordo_schedule::check(&options.schedule, &ordered, &mut namer);
        verified_by_recording = true;
        if summary.dropped > 0 {
            warnings.push(format!(
                "the recording lost {} events (ring buffer full): the check may be wrong; raise --buffer-size",
                summary.dropped
            ));
        }
    }

    let (exit_code, signal) = match status {
        Some(s) => (s.code(), s.signal()),
        None => (None, None),
    };
    let (verdict, reason) = match &end {
        End::Exited(s) => {
            if let Some(sig) = s.signal() {
                (
                    Verdict::Reproduced,
                    format!("killed by signal {} ({})", sig, signal_name(sig)),
                )
            } else if s.code() != Some(0) {
                (
                    Verdict::Reproduced,
                    format!("exit code {}", s.code().unwrap_or(-1)),
                )
            } else if !held.is_empty() && !check_only {
                (
                    Verdict::Infeasible,
                    "the program finished while threads were held at gates".to_string(),
                )
            } else {
                (Verdict::Passed, "exit code 0".to_string())
            }
        }
        End::Deadlock(what) => (Verdict::Reproduced, format!("deadlock: {what}")),
        End::Infeasible => {
            let what = match options.on_infeasible {
                OnInfeasible::Kill => "killed",
                OnInfeasible::Release => "released to finish freely",
            };
            (
                Verdict::Infeasible,
                format!("every live thread was held at a gate or blocked; {what}"),
            )
        }
        End::Timeout if !held.is_empty() => (
            Verdict::Infeasible,
            format!(
                "threads still held at gates after {} s; killed",
                options.timeout.as_secs_f64()
            ),
        ),
        End::Timeout => (
            Verdict::Reproduced,
            format!(
                "hang: still running after {} s; killed",
                options.timeout.as_secs_f64()
            ),
        ),
    };
    Ok(ReplayOutcome {
        verdict,
        reason,
        exit_code,
        signal,
        schedule_held: report.held,
        verified_by_recording,
        pending: report.pending.iter().map(|u| u.to_string()).collect(),
        violated: report.violated.iter().map(|u| u.to_string()).collect(),
        held,
        warnings,
        elapsed,
        trace: options.record.clone(),
    })
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
) -> Result<(End, Vec<String>)> {
    let mut stuck_since: Option<(Instant, Vec<ThreadView>, u64)> = None;
    let mut infeasible_seen = false;
    // Threads held when the schedule proved infeasible and the run was released.
    let mut held_at_release: Vec<String> = Vec::new();
    loop {
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
        let threads = snapshot(pid, memory);
        let progress = progress_of(memory);
        let live: Vec<&ThreadView> = threads
            .iter()
            .filter(|t| !matches!(t.kernel_state, b'Z' | b'X'))
            .collect();
        let asleep = |t: &&ThreadView| matches!(t.kernel_state, b'S' | b'D');
        let stuck = !live.is_empty()
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
        if let Some((since, views, _)) = &stuck_since {
            if since.elapsed() >= options.stall {
                let any_held = views.iter().any(|t| t.agent_state == shm::STATE_HELD);
                if any_held && !infeasible_seen && options.mode == Mode::Enforce {
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
                            continue;
                        }
                    }
                }
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

fn snapshot(pid: u32, memory: &SharedMemory) -> Vec<ThreadView> {
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

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGABRT => "SIGABRT",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGILL => "SIGILL",
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGTRAP => "SIGTRAP",
        _ => "signal",
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
