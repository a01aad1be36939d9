//! `cargo xtask bench record`: what recording costs a program, side by side in one
//! run against the other ways of tracing the same synchronization.
//!
//! Every repetition runs every recorder on every workload in turn (round robin,
//! each repetition starting one recorder further on), so the machine's load
//! drifts over all of them alike; the table shows medians, ratios
//! to the native run, ordo's own figures (events, bytes per event, drops, attach and
//! detach time) and the targets of issues 9 and 14 with met/missed and by how much.
//! Results go to `bench/results/record-YYYYMMDD-HHMMSS.json` and `record-latest.json`.
//! docs/BENCHMARKS.md says what each workload and recorder is.

pub(crate) mod report;
mod server;
mod sites;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use report::{Metric, Sample, TurnCpu};
use server::{Instance, Server};
use sites::{EmptyProgram, Sites};

/// `cargo xtask bench record [--quick] [--only W,...] [--reps N] [--recorders R,...]
/// [--baseline ORDO]`.
struct Options {
    quick: bool,
    only: Option<Vec<String>>,
    reps: usize,
    recorders: Option<Vec<String>>,
    /// Another `ordo` binary run as recorder `ordo baseline` (launch mode), to
    /// compare a change with what it replaces in the same run.
    baseline: Option<PathBuf>,
}

fn parse_options(args: &[String]) -> Result<Options> {
    let mut o = Options {
        quick: false,
        only: None,
        reps: 0,
        recorders: None,
        baseline: None,
    };
    let mut it = args.iter();
    let list = |v: Option<&String>, flag: &str| -> Result<Vec<String>> {
        let v = v.with_context(|| format!("{flag} needs a comma-separated list"))?;
        Ok(v.split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect())
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => o.quick = true,
            "--only" => o.only = Some(list(it.next(), "--only")?),
            "--recorders" => o.recorders = Some(list(it.next(), "--recorders")?),
            "--baseline" => {
                let v = it.next().context("--baseline needs the path of an ordo binary")?;
                if !Path::new(v).is_file() {
                    bail!("--baseline {v}: no such file");
                }
                o.baseline = Some(PathBuf::from(v));
            }
            "--reps" => {
                let v = it.next().context("--reps needs a number")?;
                o.reps = v.parse().ok().filter(|n| *n > 0).with_context(|| format!("--reps {v}: expected a positive number"))?;
            }
            other => bail!("bench record: unknown option `{other}` (use --quick, --only W,..., --reps N, --recorders R,..., --baseline ORDO)"),
        }
    }
    if o.reps == 0 {
        // A quick run is a smoke test (about a minute for one workload): one
        // repetition. A full run takes medians of three.
        o.reps = if o.quick { 1 } else { 3 };
    }
    if let Some(only) = &o.only {
        for w in only {
            if !WORKLOADS.contains(&w.as_str()) {
                bail!(
                    "--only {w}: unknown workload (choose from {})",
                    WORKLOADS.join(", ")
                );
            }
        }
    }
    Ok(o)
}

/// How long a windows workload's load runs before its first window, at least:
/// until memcached's cache is full and it evicts, as it then does for the rest of
/// the run.
const WINDOWS_WARM_UP: Duration = Duration::from_secs(5);

/// Recorded windows in each run of a windows workload, each between two
/// unrecorded ones.
const WINDOWS_CYCLES: usize = 3;

/// How long each of an alternating workload's turns is measured: short enough
/// that the two servers' turns next to each other see the machine at the same
/// speed (this VM's memcached jumps between two speeds within seconds).
const ALTERNATING_TURN: Duration = Duration::from_secs(1);

/// How long a load resumed for its turn runs before the turn is measured (its
/// connections had been idle while the other server's turn ran).
const ALTERNATING_SETTLE: Duration = Duration::from_millis(200);

const WORKLOADS: &[&str] = &[
    "lock",
    "rust-lock",
    "pair",
    "pingpong",
    "rwlock",
    "pigz",
    "memcached",
    "memcached-attach",
    "memcached-windows",
    "memcached-alternating",
    "mariadb",
    "mariadb-attach",
    "true",
];

/// A way of running a workload.
#[derive(Clone, Debug, PartialEq)]
enum Recorder {
    Native,
    /// `ordo record`, with `--probes VALUE` when given.
    Ordo(Option<String>),
    /// `ordo record` by another ordo binary (`--baseline`), launch mode only.
    OrdoBaseline(PathBuf),
    /// `ordo record --sparse-times` (in process, the clock read sparsely), launched
    /// or attached.
    OrdoSparse,
    /// Plain `ordo record` with one of the recorder's own knobs turned the other
    /// way: what the default saves, side by side.
    OrdoWith(Knob),
    /// The program with ordo's agent preloaded and no recorder: every pthread
    /// call through a wrapper that forwards it (the in-process path's floor, as
    /// the empty probe is the eBPF path's).
    DormantAgent,
    Bpftrace,
    EmptyProbe,
    Tsan,
    Helgrind,
    Lttng,
}

/// A recorder knob the bench turns the other way beside plain `ordo record`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Knob {
    /// `ORDO_RING_UNITS=wide`: no short ring units.
    WideUnits,
    /// `ORDO_RING_UNITS=unfolded`: short units, but the drain does not fold a
    /// lock and its release into one as it copies them.
    Unfolded,
    /// `ORDO_CONVERT=alongside`: the converter works at idle priority while the
    /// program runs, rather than waiting for its end.
    ConvertAlongside,
    /// `ORDO_CONVERT=spare`: the converter works while the machine has a CPU
    /// the program leaves spare (the default before 2026-12-05), the passes it
    /// is behind on in memory up to half the backlog's bound.
    ConvertOnSpareCpu,
    /// `ORDO_CONVERT=end`: the converter waits for the program's end, as by
    /// default, but the passes wait in memory (up to half the backlog's bound)
    /// rather than in the spill file.
    ConvertAtEnd,
    /// `ORDO_SPILL=always ORDO_CONVERT=spare`: every pass goes to the spill
    /// file, and the converter works on a spare CPU.
    SpillEveryPass,
}

impl Knob {
    fn label(self) -> &'static str {
        match self {
            Knob::WideUnits => "ordo wide units",
            Knob::Unfolded => "ordo unfolded",
            Knob::ConvertAlongside => "ordo converting alongside",
            Knob::ConvertOnSpareCpu => "ordo converting on a spare CPU",
            Knob::ConvertAtEnd => "ordo converting at the end",
            Knob::SpillEveryPass => "ordo spilling every pass",
        }
    }

    /// The environment variables and values that turn it.
    fn env(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Knob::WideUnits => &[("ORDO_RING_UNITS", "wide")],
            Knob::Unfolded => &[("ORDO_RING_UNITS", "unfolded")],
            Knob::ConvertAlongside => &[("ORDO_CONVERT", "alongside")],
            Knob::ConvertAtEnd => &[("ORDO_CONVERT", "end")],
            Knob::ConvertOnSpareCpu => &[("ORDO_CONVERT", "spare")],
            Knob::SpillEveryPass => &[("ORDO_SPILL", "always"), ("ORDO_CONVERT", "spare")],
        }
    }
}

impl Recorder {
    fn label(&self) -> String {
        match self {
            Recorder::Native => "native".into(),
            Recorder::Ordo(None) => "ordo".into(),
            Recorder::Ordo(Some(p)) => format!("ordo --probes {p}"),
            Recorder::OrdoBaseline(_) => "ordo baseline".into(),
            Recorder::OrdoSparse => "ordo --sparse-times".into(),
            Recorder::OrdoWith(knob) => knob.label().into(),
            Recorder::Bpftrace => "bpftrace".into(),
            Recorder::EmptyProbe => "empty probe".into(),
            Recorder::DormantAgent => "dormant agent".into(),
            Recorder::Tsan => "tsan".into(),
            Recorder::Helgrind => "helgrind".into(),
            Recorder::Lttng => "lttng-ust".into(),
        }
    }

    /// Whether it is an ordo recording (it writes an ordo trace).
    fn is_ordo(&self) -> bool {
        matches!(
            self,
            Recorder::Ordo(_)
                | Recorder::OrdoBaseline(_)
                | Recorder::OrdoSparse
                | Recorder::OrdoWith(_)
        )
    }

    /// Whether the recorder applies to a workload (TSan and helgrind only to our own
    /// micro-benchmarks; attach mode only to tracers that can attach).
    fn applies(&self, workload: &str) -> bool {
        let micro = matches!(workload, "lock" | "pair" | "pingpong" | "rwlock");
        if workload == "rust-lock" {
            // std's inlined futex mutex: no pthread call for a pthread tracer to see,
            // and TSan would need a nightly rebuild of std.
            return matches!(
                self,
                Recorder::Native | Recorder::Ordo(_) | Recorder::OrdoSparse | Recorder::OrdoWith(_)
            );
        }
        let attaches = workload.ends_with("-attach") || workload.ends_with("-windows");
        match self {
            Recorder::Tsan | Recorder::Helgrind => micro,
            Recorder::Lttng | Recorder::OrdoBaseline(_) | Recorder::DormantAgent => !attaches,
            // Attaching, plain `ordo` (the `ordo` row) is in process already.
            Recorder::Ordo(Some(p)) if attaches => p != "inproc",
            _ => true,
        }
    }
}

/// The amount of work of each workload.
struct Sizes {
    lock_iters: u64,
    pair_iters: u64,
    pingpong_rounds: u64,
    rwlock_iters: u64,
    pigz_mb: u64,
    server_s: u64,
}

impl Sizes {
    fn new(quick: bool) -> Sizes {
        if quick {
            Sizes {
                lock_iters: 25_000,
                pair_iters: 50_000,
                pingpong_rounds: 5_000,
                rwlock_iters: 25_000,
                pigz_mb: 20,
                server_s: 3,
            }
        } else {
            Sizes {
                lock_iters: 100_000,
                pair_iters: 200_000,
                pingpong_rounds: 20_000,
                rwlock_iters: 100_000,
                pigz_mb: 200,
                server_s: 10,
            }
        }
    }

    /// The micro-benchmark's arguments for a fraction of the work.
    fn micro_args(&self, workload: &str, scale: f64) -> Vec<String> {
        let n = |x: u64| ((x as f64 * scale).round() as u64).max(1).to_string();
        match workload {
            "lock" | "rust-lock" => vec!["lock".into(), "4".into(), n(self.lock_iters)],
            "pair" => vec!["pair".into(), n(self.pair_iters)],
            "pingpong" => vec!["pingpong".into(), n(self.pingpong_rounds)],
            _ => vec![
                "rwlock".into(),
                "4".into(),
                n(self.rwlock_iters),
                "10".into(),
            ],
        }
    }
}

/// Helgrind runs a fraction of each micro-benchmark (its time is scaled up to the
/// full work; the table marks such rows): it serializes threads and is slow.
fn helgrind_scale(workload: &str) -> f64 {
    match workload {
        "pingpong" => 0.1,
        "rwlock" => 0.25,
        _ => 1.0,
    }
}

fn mono() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we pass.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: kill has no memory effects; pid is a process this bench started.
    unsafe { libc::kill(pid as i32, sig) };
}

/// Waits for a child at most `limit`, then kills it (and says so).
fn wait_bounded(
    child: &mut Child,
    limit: Duration,
    what: &str,
) -> Result<std::process::ExitStatus> {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{what} did not finish within {} s: killed", limit.as_secs());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Everything the runs share: the binaries, what the ordo binary supports, the
/// comparators that can run (or why not).
struct Bench {
    ordo: PathBuf,
    dir: PathBuf,
    sizes: Sizes,
    program: PathBuf,
    /// The lock micro-benchmark in Rust (`bench/programs/rust_lock_bench.rs`).
    rust_program: Option<PathBuf>,
    tsan_program: Option<PathBuf>,
    sites: Option<Sites>,
    /// `ordo_empty` at ordo's instruction sites, and the `empty_probes` binary that
    /// launches a program under it or attaches it to a process.
    empty_program: Option<(EmptyProgram, PathBuf)>,
    /// The agent written out for the `dormant agent` row.
    dormant_agent: Option<PathBuf>,
    bpftrace_script: Option<PathBuf>,
    sessiond: Option<Child>,
    pigz_input: Option<PathBuf>,
    /// (recorder label, reason) for comparators that cannot run at all.
    unavailable: Vec<(String, String)>,
    /// (workload, recorder, reason) for runs that failed.
    failures: Vec<(String, String, String)>,
    lttng_runs: u64,
    /// Runs of an alternating workload so far: each starts its turns with the
    /// other server than the run before.
    alternations: usize,
    /// MariaDB's data directory with sysbench's tables, made on first use (or
    /// why it could not be).
    mariadb_data: Option<std::result::Result<PathBuf, String>>,
}

/// When a launched run's recorder started, its server was told to stop and the
/// recorder returned (CLOCK_MONOTONIC s), and LTTng's event and lost counts.
struct LaunchEnd {
    spawned: f64,
    stopped: f64,
    returned: f64,
    lttng: Option<(Option<u64>, Option<u64>)>,
}

impl LaunchEnd {
    /// The whole command's wall time.
    fn wall_s(&self) -> f64 {
        self.returned - self.spawned
    }
}

/// A workspace crate's example built in release (as `ordo` is): its binary.
fn release_example(package: &str, example: &str) -> Result<PathBuf> {
    crate::run(Command::new("cargo").args([
        "build",
        "--release",
        "-p",
        package,
        "--example",
        example,
    ]))?;
    Ok(crate::root().join("target/release/examples").join(example))
}

/// The launch-mode empty probe: ordo's instruction sites, and `empty_probes` built
/// in release (the recorder's example attaching `ordo_empty`).
fn empty_program(sites: &[sites::Site]) -> Result<(EmptyProgram, PathBuf)> {
    let e = EmptyProgram::from_sites(sites)?;
    Ok((e, release_example("ordo-recorder", "empty_probes")?))
}

/// The agent `ordo` embeds, written to `dir` by the agent crate's `write_agent`
/// example.
fn dormant_agent(dir: &Path) -> Result<PathBuf> {
    let write_agent = release_example("ordo-agent", "write_agent")?;
    let path = dir.join("libordo_preload_dormant.so");
    crate::run(Command::new(write_agent).arg(&path))?;
    Ok(path)
}

/// What the `empty probe` row measured, and the per-event costs on `lock`: added
/// time over the kernel-path ordo's event count (`empty_probes` counts no hits; the
/// program and so its events are the same in both runs).
fn empty_note(e: &EmptyProgram, rows: &[report::Row], kernel_ordo: &str) -> String {
    let mut note = format!(
        "empty probe: `ordo_empty` (a BPF program that returns at once) at ordo's {} instruction sites, by recorder/examples/empty_probes (launch: `-- prog`, attach: `--pid`)",
        e.offsets.split(',').count()
    );
    if e.uncovered_returns.is_empty() {
        note.push_str("; ordo has no return probes here.");
    } else {
        note.push_str(&format!(
            "; ordo's return probes ({}) are not covered (empty_probes places no return probe).",
            e.uncovered_returns.join(", ")
        ));
    }
    let find = |r: &str| {
        rows.iter()
            .find(|x| x.workload == "lock" && x.recorder == r)
    };
    if let (Some(ordo), Some(empty)) = (find(kernel_ordo), find("empty probe")) {
        if let (Some(events), Some(o), Some(m)) = (ordo.events, ordo.added_s, empty.added_s) {
            if events > 0.0 {
                note.push_str(&format!(
                    "\nlock, per event over {kernel_ordo}'s {events:.0} events: {kernel_ordo} {:.3} µs, empty probe {:.3} µs.",
                    o / events * 1e6,
                    m / events * 1e6
                ));
            }
        }
    }
    note
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn first_line(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .to_string()
}

/// What `ordo record -h` offers: the `--probes` values, `--list-probes` and
/// `--sparse-times`.
fn ordo_features(ordo: &Path) -> (Vec<String>, bool, bool) {
    let help = |flag: &str| {
        Command::new(ordo)
            .args(["record", flag])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    };
    let short = help("-h");
    let mut values = probe_values(&short);
    if values.is_empty() {
        values = probe_values(&help("--help"));
    }
    (
        values,
        short.contains("--list-probes"),
        short.contains("--sparse-times"),
    )
}

/// The values of `--probes` in clap's help: `[possible values: a, b]` (short help)
/// or a "Possible values:" list of `- a: …` lines (long help).
fn probe_values(help: &str) -> Vec<String> {
    let Some(pos) = help.find("--probes") else {
        return Vec::new();
    };
    let after: Vec<&str> = help[pos..].lines().take(20).collect();
    let first_option =
        |l: &str| l.trim_start().starts_with('-') && !l.trim_start().starts_with("- ");
    let mut values = Vec::new();
    for (i, line) in after.iter().enumerate() {
        if i > 0 && first_option(line) {
            break;
        }
        let lower = line.to_lowercase();
        if let Some(p) = lower.find("[possible values:") {
            let list = &line[p + "[possible values:".len()..];
            return list
                .split(']')
                .next()
                .unwrap_or("")
                .split(',')
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .collect();
        }
        if let Some(item) = line.trim().strip_prefix("- ") {
            if let Some((name, _)) = item.split_once(':') {
                values.push(name.trim().to_string());
            }
        }
    }
    values
}

impl Bench {
    fn setup(quick: bool, wanted: &[String], recorders: &[Recorder]) -> Result<Bench> {
        crate::setup::bench_tools()?;
        let ordo = crate::ordo_release()?;
        let dir = crate::root().join("target/bench");
        std::fs::create_dir_all(&dir)?;
        let src = crate::root().join("bench/programs/sync_bench.c");
        let program = dir.join("sync_bench");
        crate::compile_c(&src, &program, &[])?;
        let mut bench = Bench {
            ordo,
            dir: dir.clone(),
            sizes: Sizes::new(quick),
            program,
            rust_program: None,
            tsan_program: None,
            sites: None,
            empty_program: None,
            dormant_agent: None,
            bpftrace_script: None,
            sessiond: None,
            pigz_input: None,
            unavailable: Vec::new(),
            failures: Vec::new(),
            lttng_runs: 0,
            alternations: 0,
            mariadb_data: None,
        };
        if wanted.iter().any(|w| w == "rust-lock") {
            let out = dir.join("rust_lock_bench");
            crate::run(
                Command::new("rustc")
                    .args(["-O", "-g", "--edition", "2021", "-o"])
                    .arg(&out)
                    .arg(crate::root().join("bench/programs/rust_lock_bench.rs")),
            )?;
            bench.rust_program = Some(out);
        }
        let wants = |r: &Recorder| recorders.contains(r);
        if wants(&Recorder::Tsan) {
            // clang as the task names it; gcc's libtsan when clang's runtime is missing.
            let out = dir.join("sync_bench_tsan");
            let mut errors = Vec::new();
            for cc in ["clang", "gcc"] {
                let r = Command::new(cc)
                    .args(["-O1", "-g", "-pthread", "-fsanitize=thread", "-o"])
                    .arg(&out)
                    .arg(&src)
                    .output();
                match r {
                    Ok(o) if o.status.success() => {
                        bench.tsan_program = Some(out.clone());
                        if cc != "clang" {
                            eprintln!(
                                "bench: TSan build with gcc (clang failed: {})",
                                errors.join("; ")
                            );
                        }
                        break;
                    }
                    Ok(o) => errors.push(format!("{cc}: {}", first_line(&o.stderr))),
                    Err(e) => errors.push(format!("{cc}: {e}")),
                }
            }
            if bench.tsan_program.is_none() {
                bench.unavailable.push((
                    "tsan".into(),
                    format!(
                        "no compiler builds with -fsanitize=thread ({})",
                        errors.join("; ")
                    ),
                ));
            }
        }
        let (_, list_probes, _) = ordo_features(&bench.ordo);
        if wants(&Recorder::Bpftrace) || wants(&Recorder::EmptyProbe) {
            match sites::discover(&bench.ordo, list_probes) {
                Ok(s) => bench.sites = Some(s),
                Err(e) => {
                    bench
                        .unavailable
                        .push(("bpftrace".into(), format!("no probe sites: {e:#}")));
                    bench
                        .unavailable
                        .push(("empty probe".into(), format!("no probe sites: {e:#}")));
                }
            }
        }
        if let Some(s) = &bench.sites {
            if wants(&Recorder::Bpftrace) {
                if have("bpftrace") {
                    std::fs::write(
                        dir.join("same-functions.bt"),
                        sites::bpftrace_script(&s.sites, "cpid"),
                    )?;
                    std::fs::write(
                        dir.join("same-functions-pid.bt"),
                        sites::bpftrace_script(&s.sites, "$1"),
                    )?;
                    bench.bpftrace_script = Some(dir.join("same-functions.bt"));
                } else {
                    bench
                        .unavailable
                        .push(("bpftrace".into(), "bpftrace is not installed".into()));
                }
            }
            if wants(&Recorder::EmptyProbe) {
                match empty_program(&s.sites) {
                    Ok(e) => bench.empty_program = Some(e),
                    Err(e) => bench
                        .unavailable
                        .push(("empty probe".into(), format!("{e:#}"))),
                }
            }
        }
        if wants(&Recorder::DormantAgent) {
            match dormant_agent(&dir) {
                Ok(path) => bench.dormant_agent = Some(path),
                Err(e) => bench
                    .unavailable
                    .push(("dormant agent".into(), format!("{e:#}"))),
            }
        }
        if wants(&Recorder::Helgrind) && !have("valgrind") {
            bench
                .unavailable
                .push(("helgrind".into(), "valgrind is not installed".into()));
        }
        if wants(&Recorder::Lttng) {
            if let Err(e) = bench.start_lttng() {
                bench
                    .unavailable
                    .push(("lttng-ust".into(), format!("{e:#}")));
            }
        }
        if wanted.iter().any(|w| w == "pigz") {
            if !have("pigz") {
                bench
                    .failures
                    .push(("pigz".into(), "all".into(), "pigz is not installed".into()));
            } else {
                bench.pigz_input = Some(bench.pigz_input()?);
            }
        }
        Ok(bench)
    }

    fn start_lttng(&mut self) -> Result<()> {
        if !have("lttng") || !have("lttng-sessiond") {
            bail!("lttng-tools is not installed");
        }
        let wrapper_present = [
            "/usr/lib/x86_64-linux-gnu/liblttng-ust-pthread-wrapper.so.1",
            "/lib/x86_64-linux-gnu/liblttng-ust-pthread-wrapper.so.1",
        ]
        .iter()
        .any(|p| Path::new(p).exists());
        if !wrapper_present {
            bail!("liblttng-ust-pthread-wrapper.so.1 not found (package liblttng-ust1)");
        }
        let alive = || {
            Command::new("lttng")
                .arg("list")
                .output()
                .is_ok_and(|o| o.status.success())
        };
        if !alive() {
            let child = Command::new("lttng-sessiond")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("start lttng-sessiond")?;
            self.sessiond = Some(child);
            let started = Instant::now();
            while !alive() {
                if started.elapsed() > Duration::from_secs(10) {
                    bail!("lttng-sessiond did not come up in 10 s");
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(())
    }

    /// A compressible but not trivial input for pigz: words drawn by a seeded
    /// xorshift generator from a fixed vocabulary, in lines. Made once.
    fn pigz_input(&self) -> Result<PathBuf> {
        pigz_input(&self.dir, self.sizes.pigz_mb)
    }

    /// The command that runs `program args` under a recorder, in launch mode.
    fn wrap(
        &mut self,
        recorder: &Recorder,
        program: &Path,
        args: &[String],
        trace: &Path,
        tag: &str,
    ) -> Result<(Command, Option<String>)> {
        let mut lttng_session = None;
        let cmd = match recorder {
            Recorder::Native => {
                let mut c = Command::new(program);
                c.args(args);
                c
            }
            Recorder::OrdoBaseline(binary) => {
                let _ = std::fs::remove_file(trace);
                let mut c = Command::new(binary);
                c.arg("record").arg("-o").arg(trace);
                c.arg("--").arg(program).args(args);
                c
            }
            Recorder::OrdoSparse => {
                let _ = std::fs::remove_file(trace);
                let mut c = Command::new(&self.ordo);
                c.args(["record", "--sparse-times", "-o"]).arg(trace);
                c.arg("--").arg(program).args(args);
                c
            }
            Recorder::OrdoWith(knob) => {
                let _ = std::fs::remove_file(trace);
                let mut c = Command::new(&self.ordo);
                c.envs(knob.env().iter().copied());
                c.arg("record").arg("-o").arg(trace);
                c.arg("--").arg(program).args(args);
                c
            }
            Recorder::Ordo(probes) => {
                let _ = std::fs::remove_file(trace);
                let mut c = Command::new(&self.ordo);
                c.arg("record").arg("-o").arg(trace);
                if let Some(p) = probes {
                    c.args(["--probes", p]);
                }
                c.arg("--").arg(program).args(args);
                c
            }
            Recorder::Bpftrace => {
                let script = self.bpftrace_script.clone().context("no bpftrace script")?;
                let mut c = Command::new("bpftrace");
                c.arg("-o")
                    .arg(self.dir.join(format!("bpftrace-{tag}.out")));
                let line: Vec<String> = std::iter::once(program.display().to_string())
                    .chain(args.iter().cloned())
                    .collect();
                c.arg("-c").arg(line.join(" ")).arg(script);
                c
            }
            Recorder::EmptyProbe => {
                let (e, binary) = self
                    .empty_program
                    .as_ref()
                    .context("no empty_probes program")?;
                e.command(binary, program, args)
            }
            Recorder::DormantAgent => {
                let agent = self.dormant_agent.as_ref().context("no agent written")?;
                let mut c = Command::new(program);
                c.args(args).env("LD_PRELOAD", agent);
                c
            }
            Recorder::Tsan => {
                let mut c = Command::new(self.tsan_program.as_ref().context("no TSan build")?);
                c.args(args);
                c
            }
            Recorder::Helgrind => {
                let mut c = Command::new("valgrind");
                c.args(["--tool=helgrind", "-q"]).arg(program).args(args);
                c
            }
            Recorder::Lttng => {
                self.lttng_runs += 1;
                let name = format!("ordobench-{}-{}", std::process::id(), self.lttng_runs);
                let out = self.dir.join("lttng").join(&name);
                let _ = std::fs::remove_dir_all(&out);
                let s = ["-s", name.as_str()];
                crate::run(
                    Command::new("lttng")
                        .args(["create", &name])
                        .arg(format!("--output={}", out.display()))
                        .stdout(Stdio::null()),
                )?;
                // Sub-buffers as large as ordo's default ring buffer (8 × 2 MiB per
                // CPU): LTTng's default channel discards events on this workload.
                crate::run(
                    Command::new("lttng")
                        .args([
                            "enable-channel",
                            "-u",
                            "bench",
                            "--subbuf-size=2M",
                            "--num-subbuf=8",
                        ])
                        .args(s)
                        .stdout(Stdio::null()),
                )?;
                crate::run(
                    Command::new("lttng")
                        .args(["enable-event", "-u", "lttng_ust_pthread:*", "-c", "bench"])
                        .args(s)
                        .stdout(Stdio::null()),
                )?;
                crate::run(
                    Command::new("lttng")
                        .args(["add-context", "-u", "-t", "vtid", "-c", "bench"])
                        .args(s)
                        .stdout(Stdio::null()),
                )?;
                crate::run(
                    Command::new("lttng")
                        .args(["start", &name])
                        .stdout(Stdio::null()),
                )?;
                lttng_session = Some(name);
                let mut c = Command::new(program);
                c.args(args)
                    .env("LD_PRELOAD", "liblttng-ust-pthread-wrapper.so.1");
                c
            }
        };
        Ok((cmd, lttng_session))
    }

    /// Stops an LTTng session; returns (events, discarded). Counting reads the whole
    /// trace with babeltrace2 (seconds), so only when `count`.
    fn end_lttng(&self, name: &str, count: bool) -> (Option<u64>, Option<u64>) {
        let stop = Command::new("lttng").args(["stop", name]).output();
        let text = stop
            .map(|o| {
                format!(
                    "{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                )
            })
            .unwrap_or_default();
        // "Warning: 30921 events were discarded, ..."
        let discarded = text
            .lines()
            .filter(|l| l.contains("discarded"))
            .filter_map(|l| l.split_whitespace().find_map(|w| w.parse::<u64>().ok()))
            .sum::<u64>();
        let out = self.dir.join("lttng").join(name);
        let events = if count {
            Command::new("babeltrace2")
                .arg(&out)
                .stderr(Stdio::null())
                .output()
                .ok()
                .map(|o| o.stdout.iter().filter(|b| **b == b'\n').count() as u64)
        } else {
            None
        };
        let _ = Command::new("lttng")
            .args(["destroy", name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&out);
        (events, Some(discarded))
    }

    /// An ordo trace's figures: (events, lost, span s, bytes, first event's CLOCK_MONOTONIC s).
    fn ordo_trace(&self, trace: &Path) -> Result<(u64, u64, f64, u64, Option<f64>)> {
        let out = Command::new(&self.ordo)
            .arg("dump")
            .arg("--stats")
            .arg("--json")
            .arg(trace)
            .output()?;
        if !out.status.success() {
            bail!(
                "ordo dump --stats {}: {}",
                trace.display(),
                first_line(&out.stderr)
            );
        }
        let stats: Value =
            serde_json::from_slice(&out.stdout).context("ordo dump --stats --json output")?;
        let mut dump = Command::new(&self.ordo)
            .arg("dump")
            .arg("--json")
            .arg(trace)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let mut line = String::new();
        BufReader::new(dump.stdout.take().unwrap()).read_line(&mut line)?;
        let _ = dump.kill();
        let _ = dump.wait();
        let first = serde_json::from_str::<Value>(&line)
            .ok()
            .and_then(|v| v["ts_ns"].as_u64())
            .map(|t| t as f64 * 1e-9);
        Ok((
            stats["events"].as_u64().unwrap_or(0),
            stats["lost"].as_u64().unwrap_or(0),
            stats["span_ns"].as_u64().unwrap_or(0) as f64 * 1e-9,
            std::fs::metadata(trace).map(|m| m.len()).unwrap_or(0),
            first,
        ))
    }

    /// A memcached workload's sample: throughput and latency from memcaslap.
    fn server_sample(
        &self,
        workload: &str,
        recorder: &Recorder,
        (tps, avg, p99): (f64, Option<f64>, Option<f64>),
        wall_s: f64,
    ) -> Sample {
        Sample {
            workload: workload.into(),
            recorder: recorder.label(),
            value: tps,
            wall_s,
            scale: 1.0,
            avg_us: avg,
            p99_us: p99,
            active_s: Some(self.sizes.server_s as f64),
            ..Sample::default()
        }
    }

    /// Fills a sample's recorder figures after a launch-mode run. `end` is when the
    /// program ended (CLOCK_MONOTONIC s) if known, `returned` when the recorder did.
    #[expect(
        clippy::too_many_arguments,
        reason = "the run's figures, each a different kind; a struct would be built only for this call"
    )]
    fn collect(
        &self,
        recorder: &Recorder,
        sample: &mut Sample,
        trace: &Path,
        tag: &str,
        spawned: f64,
        end: Option<f64>,
        returned: f64,
    ) -> Result<()> {
        match recorder {
            r if r.is_ordo() => {
                let (events, lost, span, bytes, first) = self.ordo_trace(trace)?;
                sample.events = Some(events);
                sample.lost = Some(lost);
                sample.bytes = Some(bytes);
                sample.attach_s = first.map(|f| f - spawned);
                let end = end.or(first.map(|f| f + span));
                sample.detach_s = end.map(|e| returned - e);
            }
            Recorder::Bpftrace => {
                let out = self.dir.join(format!("bpftrace-{tag}.out"));
                let text = std::fs::read_to_string(&out).unwrap_or_default();
                sample.events = Some(
                    text.lines()
                        .filter(|l| l.split_whitespace().count() >= 4)
                        .count() as u64,
                );
                sample.lost = Some(
                    text.lines()
                        .filter(|l| l.contains("Lost"))
                        .filter_map(|l| l.split_whitespace().find_map(|w| w.parse::<u64>().ok()))
                        .sum(),
                );
                sample.bytes = std::fs::metadata(&out).ok().map(|m| m.len());
            }
            _ => {}
        }
        Ok(())
    }

    fn micro(&mut self, workload: &str, recorder: &Recorder, last_rep: bool) -> Result<Sample> {
        let scale = if *recorder == Recorder::Helgrind {
            helgrind_scale(workload)
        } else {
            1.0
        };
        let args = self.sizes.micro_args(workload, scale);
        let tag = format!("{workload}-{}", recorder.label().replace(' ', "_"));
        let trace = self.dir.join(format!("{tag}.ordo"));
        let program = if workload == "rust-lock" {
            self.rust_program
                .clone()
                .context("no Rust lock benchmark")?
        } else {
            self.program.clone()
        };
        let (mut cmd, session) = self.wrap(recorder, &program, &args, &trace, &tag)?;
        let spawned = mono();
        let out = cmd
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("run {cmd:?}"))?;
        let returned = mono();
        let lttng = session.map(|s| self.end_lttng(&s, last_rep));
        if !out.status.success() {
            bail!(
                "{} failed ({}): {}",
                recorder.label(),
                out.status,
                first_line(&out.stderr)
            );
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let field = |name: &str| -> Option<f64> {
            stdout
                .lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        };
        let span = field("span_ns").with_context(|| {
            format!(
                "{}: the program printed no span_ns: {}",
                recorder.label(),
                first_line(&out.stderr)
            )
        })? * 1e-9;
        let mut sample = Sample {
            workload: workload.into(),
            recorder: recorder.label(),
            value: span / scale,
            wall_s: returned - spawned,
            ops: field("ops").map(|o| o / scale),
            scale,
            active_s: Some(span),
            ..Sample::default()
        };
        self.collect(
            recorder,
            &mut sample,
            &trace,
            &tag,
            spawned,
            field("end_ns").map(|e| e * 1e-9),
            returned,
        )?;
        if let Some((events, lost)) = lttng {
            sample.events = events;
            sample.lost = lost;
        }
        Ok(sample)
    }

    /// pigz -p 2 compressing the input from a pipe: the span runs from the moment
    /// pigz has taken the first MiB to the moment it has taken the last byte, so the
    /// recorder's start and exit do not count (the few blocks still compressing after
    /// the last read are left out alike for every recorder).
    fn pigz(&mut self, recorder: &Recorder, last_rep: bool) -> Result<Sample> {
        let input = self.pigz_input.clone().context("no pigz input")?;
        let tag = format!("pigz-{}", recorder.label().replace(' ', "_"));
        let trace = self.dir.join(format!("{tag}.ordo"));
        let args: Vec<String> = ["-p", "2", "-c"].map(String::from).to_vec();
        let (mut cmd, session) =
            self.wrap(recorder, Path::new("/usr/bin/pigz"), &args, &trace, &tag)?;
        let data = std::fs::read(&input)?;
        let spawned = mono();
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("run {cmd:?}"))?;
        let mut stdin = child.stdin.take().unwrap();
        let mut stderr = child.stderr.take().unwrap();
        let errors = std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = stderr.read_to_end(&mut s);
            s
        });
        let (head, rest) = data.split_at(1 << 20);
        stdin.write_all(head)?;
        let begin = mono();
        stdin.write_all(rest)?;
        let fed = mono();
        drop(stdin);
        let status = wait_bounded(&mut child, Duration::from_secs(600), "pigz")?;
        let returned = mono();
        let lttng = session.map(|s| self.end_lttng(&s, last_rep));
        if !status.success() {
            bail!(
                "{} failed ({status}): {}",
                recorder.label(),
                first_line(&errors.join().unwrap_or_default())
            );
        }
        let mut sample = Sample {
            workload: "pigz".into(),
            recorder: recorder.label(),
            value: fed - begin,
            wall_s: returned - spawned,
            scale: 1.0,
            active_s: Some(fed - begin),
            ..Sample::default()
        };
        self.collect(recorder, &mut sample, &trace, &tag, spawned, None, returned)?;
        if let Some((events, lost)) = lttng {
            sample.events = events;
            sample.lost = lost;
        }
        Ok(sample)
    }

    /// A new instance of `server` (MariaDB's data directory is made on first use).
    fn instance(&mut self, server: Server) -> Result<Instance> {
        match server {
            Server::Memcached => Instance::memcached(),
            Server::Mariadb => {
                if self.mariadb_data.is_none() {
                    self.mariadb_data = Some(
                        server::prepare_mariadb(&self.dir.join("mariadb"))
                            .map_err(|e| format!("{e:#}")),
                    );
                }
                match self.mariadb_data.as_ref().expect("just made") {
                    Ok(data) => Ok(Instance::mariadb(data)),
                    Err(why) => bail!("{why}"),
                }
            }
        }
    }

    /// The server started under the recorder, loaded for the configured time, then
    /// stopped with SIGTERM; detach is measured from the SIGTERM.
    fn server_launch(
        &mut self,
        server: Server,
        recorder: &Recorder,
        last_rep: bool,
    ) -> Result<Sample> {
        let instance = self.instance(server)?;
        let tag = format!("{}-{}", server.name(), recorder.label().replace(' ', "_"));
        let trace = self.dir.join(format!("{tag}.ordo"));
        let (mut cmd, session) =
            self.wrap(recorder, server.binary(), &instance.args, &trace, &tag)?;
        let spawned = mono();
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("run {cmd:?}"))?;
        let mut steal = None;
        let result = (|| -> Result<(f64, Option<f64>, Option<f64>)> {
            instance.wait_ready(Duration::from_secs(60))?;
            let before = cpu_ticks();
            let load = instance.load(self.sizes.server_s);
            steal = before.zip(cpu_ticks()).and_then(|(a, b)| steal_pct(a, b));
            load
        })();
        // The load generator is reaped already: what the children's CPU time
        // gains from here on is the server's and its recorder's, both counted
        // when the recorder (or the native server) is reaped below.
        let cpu_before = children_cpu_s();
        let (status, end) =
            self.stop_launched(&instance, &mut child, recorder, session, spawned, last_rep);
        let cpu_s = children_cpu_s() - cpu_before;
        let (tps, avg, p99) = result?;
        status?;
        let mut sample = self.server_sample(server.name(), recorder, (tps, avg, p99), end.wall_s());
        // LTTng's session daemon is not the server's child: its CPU is not counted.
        if *recorder != Recorder::Lttng {
            sample.cpu_us_per_op = per_op_us(cpu_s, tps, self.sizes.server_s);
        }
        sample.steal_pct = steal;
        self.collect_launched(recorder, &mut sample, &trace, &tag, &end)?;
        Ok(sample)
    }

    /// Stops a server launched under the recorder (SIGTERM to the server; the
    /// recorder killed when the server's process cannot be found), waits for
    /// the recorder and ends LTTng's session: the recorder's exit, and when.
    fn stop_launched(
        &self,
        instance: &Instance,
        child: &mut Child,
        recorder: &Recorder,
        session: Option<String>,
        spawned: f64,
        last_rep: bool,
    ) -> (Result<std::process::ExitStatus>, LaunchEnd) {
        let pid = instance.find_pid();
        let stopped = mono();
        match pid {
            Some(pid) => signal(pid, libc::SIGTERM),
            None => {
                let _ = child.kill();
            }
        }
        let status = wait_bounded(child, Duration::from_secs(120), &recorder.label());
        let returned = mono();
        let lttng = session.map(|s| self.end_lttng(&s, last_rep));
        let end = LaunchEnd {
            spawned,
            stopped,
            returned,
            lttng,
        };
        (status, end)
    }

    /// A launched run's recorder figures ([`Bench::collect`], and LTTng's counts).
    fn collect_launched(
        &self,
        recorder: &Recorder,
        sample: &mut Sample,
        trace: &Path,
        tag: &str,
        end: &LaunchEnd,
    ) -> Result<()> {
        self.collect(
            recorder,
            sample,
            trace,
            tag,
            end.spawned,
            Some(end.stopped),
            end.returned,
        )?;
        if let Some((events, lost)) = end.lttng {
            sample.events = events;
            sample.lost = lost;
        }
        Ok(())
    }

    /// A running server; the recorder attaches (`--pid`), the load runs, the
    /// recorder is asked to stop (SIGINT): detach is measured from that request while
    /// the server keeps running.
    fn server_attach(&mut self, server: Server, recorder: &Recorder) -> Result<Sample> {
        let instance = self.instance(server)?;
        let workload = format!("{}-attach", server.name());
        let tag = format!("{workload}-{}", recorder.label().replace(' ', "_"));
        let trace = self.dir.join(format!("{tag}.ordo"));
        let mut running = instance.start_native()?;
        let result = (|| -> Result<Sample> {
            instance.wait_ready(Duration::from_secs(60))?;
            let (mut rec, spawned) =
                self.attach_recorder(recorder, &instance, running.id(), &trace, &tag)?;
            let server_cpu = || process_cpu_s(running.id()).unwrap_or(f64::NAN);
            let server_before = server_cpu();
            let load = instance.load(self.sizes.server_s);
            let server_s = server_cpu() - server_before;
            let stopped = mono();
            let recorder_before = children_cpu_s();
            let stopped_ok = self.stop_attached(&mut rec, recorder, &tag);
            let returned = mono();
            // The recorder's whole life (its attach and conversion too) and the
            // server's CPU over the load.
            let cpu_s = server_s + (children_cpu_s() - recorder_before);
            let (tps, avg, p99) = load?;
            stopped_ok?;
            let mut sample =
                self.server_sample(&workload, recorder, (tps, avg, p99), returned - spawned);
            sample.cpu_us_per_op = per_op_us(cpu_s, tps, self.sizes.server_s);
            self.collect(
                recorder,
                &mut sample,
                &trace,
                &tag,
                spawned,
                Some(stopped),
                returned,
            )?;
            if recorder.is_ordo() {
                sample.detach_s = Some(returned - stopped);
            }
            Ok(sample)
        })();
        signal(running.id(), libc::SIGTERM);
        let _ = wait_bounded(&mut running, Duration::from_secs(60), server.name());
        result
    }

    /// Alternating windows on one memcached under one continuous load, once its
    /// cache is full (memcaslap fills memcached's 64 MiB in ~4 s, and evicts from
    /// then on): an unrecorded window, then [`WINDOWS_CYCLES`] times: the recorder
    /// attaches and, once it records, a recorded window of the same length; once
    /// it has stopped and exited, another unrecorded one. Each recorded window is
    /// compared with the mean of the two around it, which cancels a drift linear
    /// over the three; the sample is the mean of the recorded windows against the
    /// mean of those pairs (for `native` the recorded windows are unrecorded too:
    /// the method's own noise). The first cycle attaches to a process the agent
    /// was never in, the later ones to one it stayed dormant in. The server's
    /// throughput differs by tens of per cent from one start to the next on a
    /// 2-CPU machine; within one process and one load, adjacent windows differ by
    /// a few.
    fn server_windows(&mut self, server: Server, recorder: &Recorder) -> Result<Sample> {
        let instance = self.instance(server)?;
        let workload = format!("{}-windows", server.name());
        let tag = format!("{workload}-{}", recorder.label().replace(' ', "_"));
        let trace = self.dir.join(format!("{tag}.ordo"));
        let window = Duration::from_secs(self.sizes.server_s.div_ceil(2));
        let mut running = instance.start_native()?;
        let mut load = None;
        let result = (|| -> Result<Sample> {
            instance.wait_ready(Duration::from_secs(60))?;
            // Outlasts the warm-up, the windows and the slowest attaches (empty
            // probes: ~60 s) and detaches.
            let cycles = WINDOWS_CYCLES as u64;
            load = Some(instance.start_load((2 * cycles + 2) * window.as_secs() + 150 * cycles)?);
            std::thread::sleep(WINDOWS_WARM_UP.max(window));
            let mut off = vec![instance.rate_over(window)?];
            let mut on = Vec::new();
            let mut sample = Sample {
                workload: workload.clone(),
                recorder: recorder.label(),
                scale: 1.0,
                active_s: Some(window.as_secs_f64()),
                ..Sample::default()
            };
            for _ in 0..WINDOWS_CYCLES {
                let mut attached = match recorder {
                    Recorder::Native => None,
                    r => Some(self.attach_recorder(r, &instance, running.id(), &trace, &tag)?),
                };
                std::thread::sleep(Duration::from_millis(500));
                on.push(instance.rate_over(window)?);
                let stopped = mono();
                if let Some((rec, _)) = attached.as_mut() {
                    self.stop_attached(rec, recorder, &tag)?;
                }
                let returned = mono();
                if let Some((_, spawned)) = attached {
                    let mut cycle = Sample::default();
                    self.collect(
                        recorder,
                        &mut cycle,
                        &trace,
                        &tag,
                        spawned,
                        Some(stopped),
                        returned,
                    )?;
                    sample.add_cycle(&cycle, returned - spawned);
                    if recorder.is_ordo() {
                        let detach = returned - stopped;
                        sample.detach_s = Some(sample.detach_s.unwrap_or(0.0).max(detach));
                        // Events over the whole recordings, not the windows.
                        sample.active_s = None;
                    }
                }
                std::thread::sleep(Duration::from_millis(500));
                off.push(instance.rate_over(window)?);
            }
            let around: Vec<f64> = off.windows(2).map(|w| (w[0] + w[1]) / 2.0).collect();
            sample.value = on.iter().sum::<f64>() / on.len() as f64;
            sample.paired_off = Some(around.iter().sum::<f64>() / around.len() as f64);
            sample.windows = Some((off, on));
            Ok(sample)
        })();
        if let Some(mut load) = load {
            let _ = load.kill();
            let _ = load.wait();
        }
        signal(running.id(), libc::SIGTERM);
        let _ = wait_bounded(&mut running, Duration::from_secs(60), server.name());
        result
    }

    /// Two servers started together, one under the recorder and one natively
    /// (for `native` both natively: the method's own noise), each with a load
    /// generator of its own, and the loads take turns: one runs while the other
    /// is stopped (SIGSTOP), each turn measured for [`ALTERNATING_TURN`] after
    /// [`ALTERNATING_SETTLE`] by the server's own counters, as many turns each
    /// as the launch workload's load lasts seconds, the server that goes first
    /// in a pair of turns alternating (and from one run to the next). The
    /// sample is the recorded server's mean over its turns against the native
    /// one's. Why: separate starts in separate runs differ by up to a quarter
    /// here, and the machine jumps between two speeds within seconds; turns a
    /// second apart mostly see the same speed, so one run compares the two far
    /// more closely than the `memcached` workload's two runs of a repetition.
    fn server_alternating(
        &mut self,
        server: Server,
        recorder: &Recorder,
        last_rep: bool,
    ) -> Result<Sample> {
        let workload = format!("{}-alternating", server.name());
        let recorded = self.instance(server)?;
        let beside = self.instance(server)?;
        let tag = format!("{workload}-{}", recorder.label().replace(' ', "_"));
        let trace = self.dir.join(format!("{tag}.ordo"));
        // Wrapped first: a recorder that cannot be set up leaves no server behind.
        let (mut cmd, session) =
            self.wrap(recorder, server.binary(), &recorded.args, &trace, &tag)?;
        let mut native = beside.start_native()?;
        let spawned = mono();
        let mut child = match cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
        {
            Ok(child) => child,
            Err(e) => {
                signal(native.id(), libc::SIGTERM);
                let _ = wait_bounded(&mut native, Duration::from_secs(60), server.name());
                return Err(e).with_context(|| format!("run {cmd:?}"));
            }
        };
        let recorded_first = self.alternations.is_multiple_of(2);
        self.alternations += 1;
        let turns = self.sizes.server_s as usize;
        let mut loads: Vec<Child> = Vec::new();
        let mut steal = None;
        let mut turn_cpu = None;
        let result = (|| -> Result<(Vec<f64>, Vec<f64>)> {
            recorded.wait_ready(Duration::from_secs(60))?;
            beside.wait_ready(Duration::from_secs(60))?;
            let recorded_pid = recorded.find_pid().context("find the recorded server")?;
            let beside_pid = beside.find_pid().context("find the native server")?;
            // Outlasts every turn of both, stopped half the time.
            let seconds = 3 * turns as u64 + 60;
            for instance in [&recorded, &beside] {
                let load = instance.start_load(seconds)?;
                signal(load.id(), libc::SIGSTOP);
                loads.push(load);
            }
            let before = cpu_ticks();
            let (mut on, mut off) = (Vec::new(), Vec::new());
            let (mut cpu_on, mut cpu_off) = (CpuOverTurns::default(), CpuOverTurns::default());
            for turn in 0..turns {
                let first = recorded_first == turn.is_multiple_of(2);
                for recorded_turn in [first, !first] {
                    let (instance, pid, load, rates, cpu) = if recorded_turn {
                        (&recorded, recorded_pid, &loads[0], &mut on, &mut cpu_on)
                    } else {
                        (&beside, beside_pid, &loads[1], &mut off, &mut cpu_off)
                    };
                    signal(load.id(), libc::SIGCONT);
                    std::thread::sleep(ALTERNATING_SETTLE);
                    let cpu_before = process_user_system_s(pid);
                    let rate = instance.rate_over(ALTERNATING_TURN);
                    let cpu_after = process_user_system_s(pid);
                    signal(load.id(), libc::SIGSTOP);
                    let rate = rate?;
                    rates.push(rate);
                    let (a, b) = cpu_before
                        .zip(cpu_after)
                        .context("read the server's CPU time")?;
                    cpu.user_s += b.0 - a.0;
                    cpu.system_s += b.1 - a.1;
                    cpu.ops += rate * ALTERNATING_TURN.as_secs_f64();
                }
            }
            steal = before.zip(cpu_ticks()).and_then(|(a, b)| steal_pct(a, b));
            let ((recorded_user, recorded_system), (native_user, native_system)) =
                (cpu_on.per_op_us(), cpu_off.per_op_us());
            turn_cpu = Some(TurnCpu {
                recorded_user,
                recorded_system,
                native_user,
                native_system,
            });
            Ok((off, on))
        })();
        for mut load in loads {
            let _ = load.kill();
            let _ = load.wait();
        }
        signal(native.id(), libc::SIGTERM);
        let _ = wait_bounded(&mut native, Duration::from_secs(60), server.name());
        let (status, end) =
            self.stop_launched(&recorded, &mut child, recorder, session, spawned, last_rep);
        let (off, on) = result?;
        status?;
        let mean = |rates: &[f64]| rates.iter().sum::<f64>() / rates.len().max(1) as f64;
        let mut sample = Sample {
            workload,
            recorder: recorder.label(),
            value: mean(&on),
            paired_off: Some(mean(&off)),
            windows: Some((off, on)),
            wall_s: end.wall_s(),
            scale: 1.0,
            active_s: Some(turns as f64 * (ALTERNATING_TURN + ALTERNATING_SETTLE).as_secs_f64()),
            steal_pct: steal,
            turn_cpu,
            ..Sample::default()
        };
        self.collect_launched(recorder, &mut sample, &trace, &tag, &end)?;
        Ok(sample)
    }

    /// Asks an attached recorder to stop (SIGINT) and waits for it; a failure
    /// is its stderr's first line (empty probes and bpftrace end on the signal).
    fn stop_attached(&self, rec: &mut Child, recorder: &Recorder, tag: &str) -> Result<()> {
        signal(rec.id(), libc::SIGINT);
        let status = wait_bounded(rec, Duration::from_secs(120), &recorder.label())?;
        if !status.success() && *recorder != Recorder::EmptyProbe && *recorder != Recorder::Bpftrace
        {
            let err = std::fs::read(self.stderr_file(tag)).unwrap_or_default();
            bail!(
                "{} failed ({status}): {}",
                recorder.label(),
                first_line(&err)
            );
        }
        Ok(())
    }

    /// Where an attached recorder's stderr goes.
    fn stderr_file(&self, tag: &str) -> PathBuf {
        self.dir.join(format!("{tag}.stderr"))
    }

    /// Attaches `recorder` to the running server `pid` and waits until it sees
    /// events (ordo: the trace has some; empty probes: attached; others: a fixed
    /// 2 s), poking the server with connections so there are events to see.
    /// Returns the recorder and when it was started.
    fn attach_recorder(
        &self,
        recorder: &Recorder,
        instance: &Instance,
        pid: u32,
        trace: &Path,
        tag: &str,
    ) -> Result<(Child, f64)> {
        let pid = pid.to_string();
        let mut cmd = match recorder {
            Recorder::Ordo(probes) => {
                let _ = std::fs::remove_file(trace);
                let mut c = Command::new(&self.ordo);
                c.args(["record", "--pid", &pid, "-o"]).arg(trace);
                if let Some(p) = probes {
                    c.args(["--probes", p]);
                }
                c
            }
            Recorder::OrdoWith(knob) => {
                let _ = std::fs::remove_file(trace);
                let mut c = Command::new(&self.ordo);
                c.envs(knob.env().iter().copied());
                c.args(["record", "--pid", &pid, "-o"]).arg(trace);
                c
            }
            Recorder::OrdoSparse => {
                let _ = std::fs::remove_file(trace);
                let mut c = Command::new(&self.ordo);
                c.args(["record", "--sparse-times", "--pid", &pid, "-o"])
                    .arg(trace);
                c
            }
            Recorder::Bpftrace => {
                let mut c = Command::new("bpftrace");
                self.bpftrace_script
                    .as_ref()
                    .context("no bpftrace script")?;
                c.arg("-o")
                    .arg(self.dir.join(format!("bpftrace-{tag}.out")))
                    .args(["-p", &pid])
                    .arg(self.dir.join("same-functions-pid.bt"))
                    .arg(&pid);
                c
            }
            Recorder::EmptyProbe => {
                let (e, binary) = self
                    .empty_program
                    .as_ref()
                    .context("no empty_probes program")?;
                e.attach_command(binary, &pid)
            }
            other => bail!("{} cannot attach", other.label()),
        };
        // empty_probes says on stdout when its probes are in place.
        let attached = self.dir.join(format!("{tag}.attached"));
        let stdout = match recorder {
            Recorder::EmptyProbe => Stdio::from(std::fs::File::create(&attached)?),
            _ => Stdio::null(),
        };
        let spawned = mono();
        let said = self.stderr_file(tag);
        let mut rec = cmd
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(std::fs::File::create(&said)?)
            .spawn()
            .with_context(|| format!("run {cmd:?}"))?;
        // Wait until the recorder records (ordo: it says so, or its trace has
        // events — a trace does not grow while the conversion waits for a spare
        // CPU; empty probes: attached; others: a fixed 2 s), poking the server
        // with connections so there are events to see.
        let ready = Instant::now();
        loop {
            instance.poke();
            if let Some(status) = rec.try_wait()? {
                let err = std::fs::read(&said).unwrap_or_default();
                bail!(
                    "{} exited before the load ({status}): {}",
                    recorder.label(),
                    first_line(&err)
                );
            }
            let seen = match recorder {
                r if r.is_ordo()
                    && std::fs::read_to_string(&said)
                        .is_ok_and(|t| t.contains("Ctrl-C to stop")) =>
                {
                    true
                }
                r if r.is_ordo() => Command::new(&self.ordo)
                    .args(["dump", "--stats", "--json", "--salvage"])
                    .arg(trace)
                    .stderr(Stdio::null())
                    .output()
                    .ok()
                    .and_then(|o| serde_json::from_slice::<Value>(&o.stdout).ok())
                    .is_some_and(|v| v["events"].as_u64().unwrap_or(0) > 0),
                Recorder::EmptyProbe => {
                    std::fs::read_to_string(&attached).is_ok_and(|t| t.starts_with("attached"))
                }
                _ => ready.elapsed() > Duration::from_secs(2),
            };
            // empty_probes attaches its ~80 probes at ~0.1 s each.
            let limit = if *recorder == Recorder::EmptyProbe {
                60
            } else {
                20
            };
            if seen || ready.elapsed() > Duration::from_secs(limit) {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok((rec, spawned))
    }

    /// Ten `ordo record -- true` in a row: mean and max wall time.
    fn true_ten(&self) -> Result<Value> {
        let trace = self.dir.join("true.ordo");
        let mut walls = Vec::new();
        for _ in 0..10 {
            let started = Instant::now();
            let out = Command::new(&self.ordo)
                .args(["record", "--force", "-o"])
                .arg(&trace)
                .args(["--", "true"])
                .output()?;
            if !out.status.success() {
                bail!("ordo record -- true failed: {}", first_line(&out.stderr));
            }
            walls.push(started.elapsed().as_secs_f64());
        }
        let mean = walls.iter().sum::<f64>() / walls.len() as f64;
        let max = walls.iter().cloned().fold(0.0, f64::max);
        Ok(json!({"runs": walls, "mean_s": mean, "max_s": max}))
    }

    fn run_one(&mut self, workload: &str, recorder: &Recorder, last_rep: bool) -> Result<Sample> {
        // The run before may have left a trace of ~150 MB dirty in the page cache,
        // which the kernel would write back during this run: write it now.
        // SAFETY: sync takes no arguments and cannot fail.
        unsafe { libc::sync() };
        match workload {
            "pigz" => self.pigz(recorder, last_rep),
            // Attach mode's baseline is a native launch (used only when the launch
            // workload, whose native run it shares, is not selected).
            w if w.ends_with("-windows") => {
                let server = Server::of(w).context("no such server")?;
                self.server_windows(server, recorder)
            }
            w if w.ends_with("-alternating") => {
                let server = Server::of(w).context("no such server")?;
                self.server_alternating(server, recorder, last_rep)
            }
            w if w.ends_with("-attach") => {
                let server = Server::of(w).context("no such server")?;
                if *recorder == Recorder::Native {
                    let mut sample = self.server_launch(server, recorder, last_rep)?;
                    sample.workload = workload.into();
                    Ok(sample)
                } else {
                    self.server_attach(server, recorder)
                }
            }
            w if Server::of(w).is_some() => {
                let server = Server::of(w).context("no such server")?;
                self.server_launch(server, recorder, last_rep)
            }
            _ => self.micro(workload, recorder, last_rep),
        }
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        if let Some(mut d) = self.sessiond.take() {
            signal(d.id(), libc::SIGTERM);
            let _ = wait_bounded(&mut d, Duration::from_secs(10), "lttng-sessiond");
        }
    }
}

/// memcaslap's summary: (ops/s, average µs, p99 µs). memcaslap prints no
/// percentiles, only a log2 histogram of latencies ("Log2 Dist:" rows of four
/// buckets, row label = the first bucket's exponent k; bucket k holds latencies in
/// (2^(k-1), 2^k] µs — its minimum of 14 µs lands in bucket 4): the p99 reported is
/// the upper edge 2^k of the bucket holding the 99th percentile.
fn parse_memcaslap(text: &str) -> Option<(f64, Option<f64>, Option<f64>)> {
    let tps = text
        .lines()
        .rfind(|l| l.contains("TPS:"))?
        .split("TPS:")
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let total = text.rfind("Total Statistics").map(|i| &text[i..]);
    let (mut avg, mut p99) = (None, None);
    if let Some(total) = total {
        avg = total
            .lines()
            .find_map(|l| l.trim().strip_prefix("Avg:")?.trim().parse().ok());
        let mut buckets: Vec<(u32, u64)> = Vec::new();
        let mut in_dist = false;
        for l in total.lines() {
            let l = l.trim();
            if l.starts_with("Log2 Dist") {
                in_dist = true;
                continue;
            }
            if !in_dist {
                continue;
            }
            let Some((label, counts)) = l.split_once(':') else {
                break;
            };
            let Ok(first) = label.trim().parse::<u32>() else {
                break;
            };
            for (i, c) in counts.split_whitespace().enumerate() {
                buckets.push((first + i as u32, c.parse().ok()?));
            }
        }
        let all: u64 = buckets.iter().map(|b| b.1).sum();
        let mut seen = 0;
        for (exp, count) in &buckets {
            seen += count;
            if all > 0 && seen as f64 >= 0.99 * all as f64 {
                p99 = Some(2f64.powi(*exp as i32));
                break;
            }
        }
    }
    Some((tps, avg, p99))
}

fn metric_of(workload: &str) -> Metric {
    if Server::of(workload).is_some() {
        Metric::Throughput
    } else {
        Metric::Time
    }
}

/// CPU seconds (user and system) of this process's reaped children so far.
fn children_cpu_s() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let usage = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut u);
        u
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// CPU seconds (user and system, all threads) process `pid` has used so far,
/// from `/proc/PID/stat`.
fn process_cpu_s(pid: u32) -> Option<f64> {
    let (user, system) = process_user_system_s(pid)?;
    Some(user + system)
}

/// One server's CPU time and operations over an alternating run's turns.
#[derive(Default)]
struct CpuOverTurns {
    user_s: f64,
    system_s: f64,
    ops: f64,
}

impl CpuOverTurns {
    /// User and system time per operation, µs.
    fn per_op_us(&self) -> (f64, f64) {
        let ops = self.ops.max(1.0);
        (self.user_s * 1e6 / ops, self.system_s * 1e6 / ops)
    }
}

/// User and system CPU seconds (all threads) process `pid` has used so far,
/// from `/proc/PID/stat`.
fn process_user_system_s(pid: u32) -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces): utime is the 14th
    // field of the line, stime the 15th.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    let user: f64 = fields.get(11)?.parse().ok()?;
    let system: f64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some((user / hz, system / hz))
}

/// CPU µs per operation served, for `cpu_s` over a load of `seconds` at `tps`.
/// The machine's CPU time so far from the first line of /proc/stat: (steal, all),
/// in clock ticks.
fn cpu_ticks() -> Option<(u64, u64)> {
    parse_cpu_ticks(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// [`cpu_ticks`] of /proc/stat's text: `cpu user nice system idle iowait irq
/// softirq steal …` (guest time is counted in user already).
fn parse_cpu_ticks(stat: &str) -> Option<(u64, u64)> {
    let fields: Vec<u64> = (stat
        .lines()
        .next()?
        .strip_prefix("cpu ")?
        .split_whitespace())
    .take(8)
    .map(|f| f.parse().ok())
    .collect::<Option<_>>()?;
    (fields.len() == 8).then(|| (fields[7], fields.iter().sum()))
}

/// Steal as a share of all CPU time between two [`cpu_ticks`] readings, %.
fn steal_pct((steal_a, all_a): (u64, u64), (steal_b, all_b): (u64, u64)) -> Option<f64> {
    let all = all_b.checked_sub(all_a).filter(|&t| t > 0)?;
    Some(steal_b.checked_sub(steal_a)? as f64 * 100.0 / all as f64)
}

fn per_op_us(cpu_s: f64, tps: f64, seconds: u64) -> Option<f64> {
    let ops = tps * seconds as f64;
    (cpu_s.is_finite() && ops > 0.0).then(|| cpu_s / ops * 1e6)
}

/// UTC now as `YYYYMMDD-HHMMSS`, for result file names.
pub(crate) fn timestamp() -> String {
    let out = Command::new("date").args(["-u", "+%Y%m%d-%H%M%S"]).output();
    out.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

pub fn run_record(args: &[String]) -> Result<()> {
    let options = parse_options(args)?;
    let started_at = timestamp();
    let wanted: Vec<String> = match &options.only {
        Some(only) => only.clone(),
        None => WORKLOADS.iter().map(|w| w.to_string()).collect(),
    };
    let ordo_path = crate::root().join("target/release/ordo");
    let _ = crate::ordo_release()?;
    let (probe_values, list_probes, sparse_times) = ordo_features(&ordo_path);
    let mut recorders = vec![Recorder::Native, Recorder::Ordo(None)];
    // `auto` is what plain `ordo record` does: it is the `ordo` row.
    for v in probe_values.iter().filter(|v| *v != "auto") {
        recorders.push(Recorder::Ordo(Some(v.clone())));
    }
    if sparse_times {
        recorders.push(Recorder::OrdoSparse);
    }
    recorders.extend([
        Recorder::OrdoWith(Knob::WideUnits),
        Recorder::OrdoWith(Knob::Unfolded),
        Recorder::OrdoWith(Knob::ConvertAlongside),
        Recorder::OrdoWith(Knob::ConvertOnSpareCpu),
        Recorder::OrdoWith(Knob::ConvertAtEnd),
        Recorder::OrdoWith(Knob::SpillEveryPass),
    ]);
    if let Some(b) = &options.baseline {
        recorders.push(Recorder::OrdoBaseline(b.clone()));
    }
    recorders.extend([
        Recorder::DormantAgent,
        Recorder::Bpftrace,
        Recorder::EmptyProbe,
        Recorder::Tsan,
        Recorder::Helgrind,
        Recorder::Lttng,
    ]);
    if let Some(chosen) = &options.recorders {
        // `--baseline` asked for its row: no filter drops it.
        recorders.retain(|r| {
            r.label() == "native"
                || matches!(r, Recorder::OrdoBaseline(_))
                || chosen.iter().any(|c| match c.strip_suffix('$') {
                    // `ordo$`: that row only, not `ordo --probes ...`.
                    Some(exact) => exact == r.label(),
                    None => *c == r.label() || r.label().starts_with(&format!("{c} ")),
                })
        });
    }
    let kernel_ordo = if probe_values.iter().any(|v| v == "ebpf") {
        "ordo --probes ebpf".to_string()
    } else {
        "ordo".to_string()
    };
    let mut bench = Bench::setup(options.quick, &wanted, &recorders)?;
    let unavailable = bench.unavailable.clone();
    for (r, why) in &unavailable {
        eprintln!("bench: {r} cannot run: {why}");
    }
    let runnable: Vec<Recorder> = recorders
        .iter()
        .filter(|r| !unavailable.iter().any(|(l, _)| *l == r.label()))
        .cloned()
        .collect();
    let workloads: Vec<&str> = WORKLOADS
        .iter()
        .copied()
        .filter(|w| wanted.iter().any(|x| x == w) && *w != "true")
        .collect();
    // An alternating run compares the recorded server with the native one beside
    // it; its `native` row, two native servers, is only the method's control: it
    // doubles the run's time, so a `--recorders` list runs it only when it names it.
    let alternating_control = options
        .recorders
        .as_ref()
        .is_none_or(|chosen| chosen.iter().any(|c| c.trim_end_matches('$') == "native"));
    let mut samples: Vec<Sample> = Vec::new();
    let results_dir = crate::root().join("bench/results");
    std::fs::create_dir_all(&results_dir)?;
    let started = Instant::now();
    let mut true_ten = Value::Null;
    let path = results_dir.join(format!("record-{started_at}.json"));
    for rep in 0..options.reps {
        if rep > 0 {
            // The session can end abruptly: keep what is measured so far.
            let partial = json!({"benchmark": "record", "partial": true, "completed_reps": rep,
                "samples": samples.iter().map(report::sample_json).collect::<Vec<_>>()});
            std::fs::write(&path, serde_json::to_string_pretty(&partial)?)?;
        }
        for workload in &workloads {
            if *workload == "pigz" && bench.pigz_input.is_none() {
                continue;
            }
            let shared_baseline = workload
                .strip_suffix("-attach")
                .is_some_and(|launched| workloads.contains(&launched));
            // Each repetition starts one recorder further on, so that no recorder
            // always runs first, or always right after the one whose trace was
            // just written and read back: an order effect of the machine (the
            // host's episodes, what a run leaves behind) falls on all alike.
            let mut order: Vec<&Recorder> =
                runnable.iter().filter(|r| r.applies(workload)).collect();
            let turn = rep % order.len().max(1);
            order.rotate_left(turn);
            for recorder in order {
                if *recorder == Recorder::Native
                    && (shared_baseline
                        || (workload.ends_with("-alternating") && !alternating_control))
                {
                    continue;
                }
                eprint!(
                    "bench: rep {}/{} {workload:<16} {:<20}",
                    rep + 1,
                    options.reps,
                    recorder.label()
                );
                match bench.run_one(workload, recorder, rep + 1 == options.reps) {
                    Ok(mut s) => {
                        s.rep = rep;
                        eprintln!(
                            " {}",
                            match metric_of(workload) {
                                Metric::Time => format!("{:.1} ms", s.value * 1e3),
                                Metric::Throughput => format!("{:.0} op/s", s.value),
                            }
                        );
                        samples.push(s);
                    }
                    Err(e) => {
                        eprintln!(" FAILED: {e:#}");
                        bench.failures.push((
                            workload.to_string(),
                            recorder.label(),
                            format!("{e:#}"),
                        ));
                    }
                }
            }
        }
    }
    if wanted.iter().any(|w| w == "true") {
        match bench.true_ten() {
            Ok(v) => true_ten = v,
            Err(e) => bench
                .failures
                .push(("true".into(), "ordo".into(), format!("{e:#}"))),
        }
    }
    let rows = report::rows(&samples, metric_of);
    let exact_sites = bench.sites.as_ref().is_some_and(|s| s.exact);
    let targets = report::targets(&rows, &kernel_ordo, "ordo", exact_sites);
    // The baseline's issue-14 figures, to read next to ordo's.
    let baseline_targets: Vec<report::Target> = if options.baseline.is_some() {
        report::targets(&rows, &kernel_ordo, "ordo baseline", exact_sites)
            .into_iter()
            .filter(|t| t.issue == 14)
            .collect()
    } else {
        Vec::new()
    };
    let s = &bench.sizes;
    println!(
        "\nbench record{}: median of {} interleaved repetitions, {:.0} s. lock = 4 threads × {} lock/inc/unlock; pair = 1 thread × {} uncontended pairs; \
         pingpong = {} condvar round trips; rwlock = 4 threads × {} ops, 10 % writes; pigz -p 2 on {} MiB; {}; {}.",
        if options.quick { " --quick" } else { "" },
        options.reps,
        started.elapsed().as_secs_f64(),
        s.lock_iters, s.pair_iters, s.pingpong_rounds, s.rwlock_iters, s.pigz_mb,
        Server::Memcached.describe(s.server_s), Server::Mariadb.describe(s.server_s)
    );
    println!("Times are the program's own span (pigz: from its first to its last MiB read); memcached is ops/s, mariadb transactions/s; memcached-windows is the recorded {} s window's ops/s, its loss against the mean of the unrecorded windows before and after it in the same server under the same load; memcached-alternating is the recorded server's ops/s over {} turns of {} s, its loss against a native server's turns beside it. Probe sites: {}.", s.server_s.div_ceil(2), s.server_s, ALTERNATING_TURN.as_secs(), bench.sites.as_ref().map(|s| s.source.as_str()).unwrap_or("not needed"));
    println!("{}", report::table(&rows));
    for line in report::turn_cpu_lines(&samples) {
        println!("{line}");
    }
    if let Some((e, _)) = &bench.empty_program {
        println!("{}", empty_note(e, &rows, &kernel_ordo));
    }
    if let Some(t) = true_ten.as_object() {
        println!(
            "ten `ordo record -- true` in a row: mean {:.3} s, max {:.3} s",
            t["mean_s"].as_f64().unwrap_or(0.0),
            t["max_s"].as_f64().unwrap_or(0.0)
        );
    }
    println!("targets:\n{}", report::target_lines(&targets));
    if !baseline_targets.is_empty() {
        println!(
            "the same issue-14 targets for `ordo baseline` ({}):\n{}",
            options.baseline.as_ref().unwrap().display(),
            report::target_lines(&baseline_targets)
        );
    }
    for (r, why) in &unavailable {
        println!("could not run {r}: {why}");
    }
    for (w, r, why) in &bench.failures {
        println!("failed: {w} / {r}: {why}");
    }
    let doc = json!({
        "benchmark": "record",
        "started_utc": started_at,
        "seconds": started.elapsed().as_secs_f64(),
        "quick": options.quick,
        "reps": options.reps,
        "machine": {
            "kernel": Command::new("uname").arg("-r").output().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()).unwrap_or_default(),
            "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            "loadavg_at_end": std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim(),
        },
        "ordo": {
            "probes_values": probe_values,
            "list_probes": list_probes,
            "kernel_path_label": kernel_ordo,
        },
        "sizes": {
            "lock_iters_per_thread": s.lock_iters, "lock_threads": 4, "pair_iters": s.pair_iters,
            "pingpong_rounds": s.pingpong_rounds, "rwlock_iters_per_thread": s.rwlock_iters, "rwlock_threads": 4,
            "rwlock_write_percent": 10, "pigz_mib": s.pigz_mb, "server_load_s": s.server_s,
        },
        "probe_sites": bench.sites.as_ref().map(|s| json!({
            "source": s.source,
            "sites": s.sites.iter().map(|x| json!({"function": x.function, "library": x.library, "file_offset": x.file_offset, "return": x.on_return})).collect::<Vec<_>>(),
        })),
        "rows": rows.iter().map(report::row_json).collect::<Vec<_>>(),
        "targets": targets.iter().map(|t| t.to_json()).collect::<Vec<_>>(),
        "baseline": options.baseline.as_ref().map(|b| json!({
            "binary": b.display().to_string(),
            "targets": baseline_targets.iter().map(|t| t.to_json()).collect::<Vec<_>>(),
        })),
        "true_ten": true_ten,
        "unavailable": unavailable.iter().map(|(r, w)| json!({"recorder": r, "why": w})).collect::<Vec<_>>(),
        "failures": bench.failures.iter().map(|(w, r, why)| json!({"workload": w, "recorder": r, "why": why})).collect::<Vec<_>>(),
        "samples": samples.iter().map(report::sample_json).collect::<Vec<_>>(),
    });
    let text = serde_json::to_string_pretty(&doc)?;
    std::fs::write(&path, &text)?;
    std::fs::write(results_dir.join("record-latest.json"), &text)?;
    println!("results: {}", path.display());
    if samples.is_empty() {
        bail!("no run succeeded");
    }
    Ok(())
}

/// `mb` MiB of seeded pseudo-random words in `dir` (made once): pigz's input.
pub(crate) fn pigz_input(dir: &Path, mb: u64) -> Result<PathBuf> {
    let path = dir.join(format!("pigz-input-{mb}M.txt"));
    if std::fs::metadata(&path).is_ok_and(|m| m.len() == mb << 20) {
        return Ok(path);
    }
    eprintln!(
        "bench: generating {} ({mb} MiB of seeded pseudo-random words)",
        path.display()
    );
    let syllables = [
        "ka", "lo", "mir", "ten", "du", "sa", "vel", "or", "pi", "que", "an", "ros", "bel", "ti",
        "um", "gra",
    ];
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let vocabulary: Vec<String> = (0..4096)
        .map(|_| {
            let n = 1 + next() % 4;
            (0..n).map(|_| syllables[(next() % 16) as usize]).collect()
        })
        .collect();
    let mut out = Vec::with_capacity((mb << 20) as usize + 64);
    while out.len() < (mb << 20) as usize {
        let r = next();
        out.extend_from_slice(vocabulary[(r % 4096) as usize].as_bytes());
        out.push(if (r >> 20) % 12 == 0 { b'\n' } else { b' ' });
    }
    out.truncate((mb << 20) as usize);
    std::fs::write(&path, &out)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMCASLAP: &str = "cmd_get: 311235\nRun time: 3.0s Ops: 345836 TPS: 115269 Net_rate: 129.0M/s\n\
Total Statistics (345804 events)\n   Min:        14\n   Max:     17313\n   Avg:       277\n   Geo:     98.62\n   Std:    718.11\n   Log2 Dist:\n\
       4:      600   113947    61469    20424\n       8:    39527    85496     5220     8887\n      12:     7170     2881      171       12\n\ncmd_get: 311235\n\
Run time: 3.0s Ops: 345836 TPS: 115269 Net_rate: 129.0M/s\n";

    #[test]
    fn steal_is_a_share_of_all_cpu_time_between_readings() {
        let a = parse_cpu_ticks("cpu  100 5 50 800 10 1 2 30 0 0\ncpu0 1 2 3\n").unwrap();
        assert_eq!(a, (30, 998));
        let b = parse_cpu_ticks("cpu  150 5 60 1720 10 1 2 52 0 0\n").unwrap();
        assert_eq!(b, (52, 2000));
        let pct = steal_pct(a, b).unwrap();
        assert!((pct - 22.0 * 100.0 / 1002.0).abs() < 1e-9, "{pct}");
        assert_eq!(steal_pct(b, a), None);
        assert_eq!(parse_cpu_ticks("intr 5\n"), None);
        assert_eq!(parse_cpu_ticks("cpu  1 2 x 4 5 6 7 8\n"), None);
    }

    #[test]
    fn memcaslap_throughput_average_and_p99_bucket() {
        let (tps, avg, p99) = parse_memcaslap(MEMCASLAP).unwrap();
        assert_eq!(tps, 115269.0);
        assert_eq!(avg, Some(277.0));
        // 99 % of 345 804 is 342 346: reached in bucket 12, (2048, 4096] µs.
        assert_eq!(p99, Some(4096.0));
        assert!(parse_memcaslap("no numbers here").is_none());
    }

    #[test]
    fn options_are_checked() {
        let o = parse_options(&[
            "--quick".into(),
            "--only".into(),
            "lock,pair".into(),
            "--reps".into(),
            "2".into(),
        ])
        .unwrap();
        assert!(o.quick);
        assert_eq!(o.only.unwrap(), ["lock", "pair"]);
        assert_eq!(o.reps, 2);
        assert!(parse_options(&["--only".into(), "nope".into()]).is_err());
        assert!(parse_options(&["--reps".into(), "0".into()]).is_err());
        assert!(parse_options(&["--fast".into()]).is_err());
    }

    #[test]
    fn probes_values_from_short_and_long_help() {
        let short = "      --probes <PROBES>            Where: `inproc` (…), or `auto` [default: auto] [possible values: auto, inproc, ebpf]\n  -v, --verbose   Say\n";
        assert_eq!(probe_values(short), ["auto", "inproc", "ebpf"]);
        let long = "      --probes <PROBES>\n          Where the pthread API is recorded\n\n          Possible values:\n          - auto:   In process\n          - inproc: In process, through the agent\n          - ebpf:   eBPF uprobes on libc\n\n          [default: auto]\n\n  -v, --verbose\n";
        assert_eq!(probe_values(long), ["auto", "inproc", "ebpf"]);
        assert!(probe_values("  -o, --output <OUTPUT>  Trace file\n").is_empty());
    }

    #[test]
    fn recorders_apply_where_they_can() {
        assert!(Recorder::Tsan.applies("lock"));
        assert!(!Recorder::Tsan.applies("pigz"));
        assert!(!Recorder::Lttng.applies("memcached-attach"));
        assert!(!Recorder::Ordo(Some("inproc".into())).applies("memcached-attach"));
        assert!(Recorder::Ordo(Some("ebpf".into())).applies("memcached-attach"));
        // Windows attach to a running server, as attach mode does.
        assert!(!Recorder::Lttng.applies("memcached-windows"));
        assert!(Recorder::Native.applies("memcached-windows"));
        assert!(Recorder::OrdoSparse.applies("memcached-windows"));
        assert!(!Recorder::Ordo(Some("inproc".into())).applies("memcached-windows"));
        // Alternating turns are launch mode beside a native server.
        assert!(Recorder::Lttng.applies("memcached-alternating"));
        assert!(Recorder::DormantAgent.applies("memcached-alternating"));
        assert!(Recorder::Ordo(Some("inproc".into())).applies("memcached-alternating"));
        assert!(!Recorder::Tsan.applies("memcached-alternating"));
        // The dormant agent is preloaded at launch: no attach, no Rust std locks.
        assert!(Recorder::DormantAgent.applies("memcached"));
        assert!(Recorder::DormantAgent.applies("pair"));
        assert!(!Recorder::DormantAgent.applies("memcached-attach"));
        assert!(!Recorder::DormantAgent.applies("rust-lock"));
    }
}
