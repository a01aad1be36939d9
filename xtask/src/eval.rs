//! `cargo xtask eval`: issue 10's evaluation suite. Builds the programs of
//! `tests/eval/` (listed in `tests/eval/suite.json`), runs `ordo hunt` with every
//! strategy on every program over several seeds, and writes `docs/EVALUATION.md`:
//! per program and strategy whether the bug was found, the median runs and seconds
//! to the first reproduction and the confirm rate; totals against the issue's
//! targets; and the reports on the correctly synchronized controls (must be none).
//!
//! A full evaluation takes long (27 programs × 4 strategies × 10 seeds), so it runs
//! in pieces: `--programs`, `--strategies`, `--seeds`, `--budget`, `--time` restrict
//! it, each hunt's outcome is appended to `bench/results/eval.jsonl` (the latest
//! outcome of a (program, strategy, seed) wins), and the report is rebuilt from
//! every outcome recorded so far, saying which parts were not run.
//!
//! Two measurements that need no hunt: `--natural N` runs each program N times
//! plainly and records its natural failure rate; `--reference N` replays each bug's
//! hand-written reference schedule N times, showing that ordering the
//! synchronization alone reproduces it. Both go to `tests/eval/measured.json`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use serde_json::{json, Value};

use crate::bench_record::report::median;

/// Where hunt outcomes accumulate by default (one JSON object per line).
const RESULTS: &str = "bench/results/eval.jsonl";
/// Natural failure rates and reference-schedule rates, written by this task.
const MEASURED: &str = "tests/eval/measured.json";
const MANIFEST: &str = "tests/eval/suite.json";
const REPORT: &str = "docs/EVALUATION.md";
/// Hand-written notes appended to the report.
const NOTES: &str = "tests/eval/NOTES.md";
/// Strategies in report order.
const STRATEGIES: [&str; 4] = ["predict", "pct", "random", "auto"];
/// A plain run still going after this long is a hang.
const PLAIN_RUN_LIMIT: Duration = Duration::from_secs(5);

/// `cargo xtask eval`: run issue 10's evaluation suite and write docs/EVALUATION.md.
#[derive(Parser, Debug)]
#[command(
    name = "cargo xtask eval",
    about = "Run `ordo hunt` with each strategy on each program of tests/eval over several seeds; write docs/EVALUATION.md",
    after_help = "Outcomes accumulate in bench/results/eval.jsonl, so the suite can run in pieces; \
                  the report is rebuilt from all of them. Without --natural/--reference/--report-only it hunts."
)]
struct Options {
    /// Only these programs (names from tests/eval/suite.json, comma-separated).
    #[arg(long, value_delimiter = ',')]
    programs: Vec<String>,
    /// Strategies to run (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "predict,pct,random,auto")]
    strategies: Vec<String>,
    /// Seeds: a count N (seeds 1..=N) or a comma-separated list.
    #[arg(long, default_value = "10")]
    seeds: String,
    /// Runs each hunt may spend (`ordo hunt --budget`); hunt's default when absent.
    #[arg(long)]
    budget: Option<u32>,
    /// Seconds each hunt may spend (`ordo hunt --time`); it is killed 120 s later.
    #[arg(long, default_value_t = 120)]
    time: u64,
    /// Extra arguments for every `ordo hunt` (e.g. `--hunt-arg=--jobs=1`).
    #[arg(long = "hunt-arg", allow_hyphen_values = true)]
    hunt_args: Vec<String>,
    /// The ordo binary to use (default: `cargo build --release`, target/release/ordo).
    #[arg(long)]
    ordo: Option<PathBuf>,
    /// The file hunt outcomes accumulate in (relative to the workspace root).
    #[arg(long, default_value = RESULTS)]
    results: PathBuf,
    /// Earlier outcome files the report also reads (relative to the workspace root;
    /// repeatable): a run of some programs reported beside the suite's last full run.
    #[arg(long, value_name = "FILE")]
    also: Vec<PathBuf>,
    /// Forget the outcomes recorded so far before running.
    #[arg(long)]
    fresh: bool,
    /// Only rebuild docs/EVALUATION.md from the recorded outcomes.
    #[arg(long)]
    report_only: bool,
    /// Instead of hunting, run each program N times plainly and record its failure rate.
    #[arg(long, value_name = "N")]
    natural: Option<u32>,
    /// Instead of hunting, replay each bug's reference schedule N times.
    #[arg(long, value_name = "N")]
    reference: Option<u32>,
}

/// One program of the suite, as `tests/eval/suite.json` lists it.
#[derive(Debug, Clone)]
struct Program {
    name: String,
    source: String,
    control: bool,
    shape: String,
    needs: String,
    fails: String,
    expect_exit: i32,
    schedule: Option<String>,
}

fn manifest() -> Result<Vec<Program>> {
    let path = crate::root().join(MANIFEST);
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?,
    )
    .with_context(|| format!("{}: not JSON", path.display()))?;
    let Some(list) = doc["programs"].as_array() else {
        bail!("{}: no `programs` array", path.display());
    };
    list.iter()
        .enumerate()
        .map(|(i, p)| {
            let text = |key: &str| -> Result<String> {
                p[key].as_str().map(str::to_string).with_context(|| {
                    format!("{}: program {i} has no string `{key}`", path.display())
                })
            };
            Ok(Program {
                name: text("name")?,
                source: text("source")?,
                control: p["control"].as_bool().unwrap_or(false),
                shape: text("shape")?,
                needs: text("needs")?,
                fails: text("fails")?,
                expect_exit: p["expect_exit"].as_i64().unwrap_or(0) as i32,
                schedule: p["schedule"].as_str().map(str::to_string),
            })
        })
        .collect()
}

pub fn run(args: &[String]) -> Result<()> {
    let options = Options::try_parse_from(
        std::iter::once("cargo xtask eval".to_string()).chain(args.iter().cloned()),
    )
    .unwrap_or_else(|e| e.exit());
    let suite = manifest()?;
    for name in &options.programs {
        if !suite.iter().any(|p| &p.name == name) {
            bail!("--programs: no program `{name}` in {MANIFEST}");
        }
    }
    for s in &options.strategies {
        if !STRATEGIES.contains(&s.as_str()) {
            bail!(
                "--strategies: unknown strategy `{s}` (choose from {})",
                STRATEGIES.join(", ")
            );
        }
    }
    let seeds = parse_seeds(&options.seeds)?;
    let chosen: Vec<&Program> = suite
        .iter()
        .filter(|p| options.programs.is_empty() || options.programs.contains(&p.name))
        .collect();
    if options.fresh {
        let _ = std::fs::remove_file(crate::root().join(&options.results));
    }
    if !options.report_only {
        let binaries = build_suite(&chosen)?;
        if let Some(n) = options.natural {
            measure_natural(&chosen, &binaries, n)?;
        } else {
            crate::setup::run()?;
            let ordo = match &options.ordo {
                Some(path) => path.clone(),
                None => crate::ordo_release()?,
            };
            if let Some(n) = options.reference {
                measure_reference(&ordo, &chosen, &binaries, n)?;
            } else {
                hunt_all(&ordo, &options, &chosen, &binaries, &seeds)?;
            }
        }
    }
    let mut results = BTreeMap::new();
    for file in options.also.iter().chain(std::iter::once(&options.results)) {
        // Later files win, as later lines of one file do.
        results.extend(load_results(&crate::root().join(file))?);
    }
    let report = render_report(&suite, &results, &load_measured()?);
    let path = crate::root().join(REPORT);
    std::fs::write(&path, report).with_context(|| format!("write {}", path.display()))?;
    println!("xtask eval: wrote {}", path.display());
    Ok(())
}

fn parse_seeds(text: &str) -> Result<Vec<u64>> {
    let bad =
        || format!("--seeds: `{text}` is neither a count nor a comma-separated list of seeds");
    if text.contains(',') {
        return text
            .split(',')
            .map(|s| s.trim().parse().with_context(bad))
            .collect();
    }
    let n: u64 = text.trim().parse().with_context(bad)?;
    if n == 0 {
        bail!("--seeds: at least one seed");
    }
    Ok((1..=n).collect())
}

/// Every program of the suite compiled (target/eval/bin): name, binary, whether
/// it is a control. For benchmarks that run the suite's programs.
pub(crate) fn suite_binaries() -> Result<Vec<(String, PathBuf, bool)>> {
    let suite = manifest()?;
    let binaries = build_suite(&suite.iter().collect::<Vec<_>>())?;
    Ok(suite
        .into_iter()
        .filter_map(|p| Some((p.name.clone(), binaries.get(&p.name)?.clone(), p.control)))
        .collect())
}

/// Compiles each program into target/eval/bin; returns name → binary.
fn build_suite(programs: &[&Program]) -> Result<BTreeMap<String, PathBuf>> {
    let dir = crate::root().join("target/eval/bin");
    std::fs::create_dir_all(&dir)?;
    let mut out = BTreeMap::new();
    for p in programs {
        let binary = dir.join(&p.name);
        let source = crate::root().join("tests/eval").join(&p.source);
        if p.source.ends_with(".rs") {
            // A release build, as cargo's default profile makes it (symbols kept).
            let status = Command::new("rustc")
                .args(["-O", "-g", "--edition", "2021", "-D", "warnings", "-o"])
                .arg(&binary)
                .arg(&source)
                .status()
                .with_context(|| format!("run rustc on {}", source.display()))?;
            if !status.success() {
                bail!("rustc failed on {}", source.display());
            }
        } else {
            crate::compile_c(&source, &binary, &["-Wall", "-Wextra", "-Werror"])?;
        }
        out.insert(p.name.clone(), binary);
    }
    Ok(out)
}

/// "2026-11-23 14:30 UTC".
fn now_utc() -> String {
    Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// The machine, in one line: CPU model, CPUs, kernel.
fn machine() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let kernel = Command::new("uname")
        .arg("-r")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    format!("{cpus} vCPU {model}, Linux {kernel}")
}

/// How a plain run ended.
enum PlainEnd {
    Normal,
    Failed,
    Hung,
}

/// Runs `cmd` with output discarded; kills it after `limit`.
fn run_limited(
    cmd: &mut Command,
    limit: Duration,
) -> Result<(Option<std::process::ExitStatus>, Duration)> {
    let started = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("run {cmd:?}"))?;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok((Some(status), started.elapsed()));
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return Ok((None, started.elapsed()));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn plain_run(binary: &Path, expect_exit: i32) -> Result<PlainEnd> {
    Ok(
        match run_limited(&mut Command::new(binary), PLAIN_RUN_LIMIT)?.0 {
            None => PlainEnd::Hung,
            Some(s) if s.code() == Some(expect_exit) => PlainEnd::Normal,
            Some(_) => PlainEnd::Failed,
        },
    )
}

fn load_measured() -> Result<Value> {
    let path = crate::root().join(MEASURED);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))
        }
        Err(_) => Ok(json!({})),
    }
}

/// Stores `entries` (program → object) under `section` of tests/eval/measured.json.
fn store_measured(section: &str, entries: Vec<(String, Value)>) -> Result<()> {
    let mut doc = load_measured()?;
    if !doc.is_object() {
        doc = json!({});
    }
    if !doc[section].is_object() {
        doc[section] = json!({});
    }
    for (name, value) in entries {
        doc[section][name] = value;
    }
    let path = crate::root().join(MEASURED);
    std::fs::write(&path, serde_json::to_string_pretty(&doc)? + "\n")
        .with_context(|| format!("write {}", path.display()))
}

/// `--natural N`: each program N times, plainly; a failure is an exit status other
/// than the expected one, a signal, or a run still going after 5 s (a hang).
fn measure_natural(
    programs: &[&Program],
    binaries: &BTreeMap<String, PathBuf>,
    n: u32,
) -> Result<()> {
    let (date, machine) = (now_utc(), machine());
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut entries = Vec::new();
    for p in programs {
        let (mut failed, mut hung) = (0, 0);
        for _ in 0..n {
            match plain_run(&binaries[&p.name], p.expect_exit)? {
                PlainEnd::Normal => {}
                PlainEnd::Failed => failed += 1,
                PlainEnd::Hung => hung += 1,
            }
        }
        println!("natural {:<20} {failed} failed, {hung} hung / {n}", p.name);
        entries.push((
            p.name.clone(),
            json!({"runs": n, "failed": failed, "hung": hung, "date": date, "machine": machine,
                   "loadavg_at_start": load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")}),
        ));
    }
    store_measured("natural", entries)
}

/// Whether this `ordo replay` takes `--expect-exit` (the verdicts work adds it).
fn replay_has_expect_exit(ordo: &Path) -> bool {
    Command::new(ordo)
        .args(["replay", "--help"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("--expect-exit"))
        .unwrap_or(false)
}

/// `--reference N`: each bug's reference schedule replayed N times.
fn measure_reference(
    ordo: &Path,
    programs: &[&Program],
    binaries: &BTreeMap<String, PathBuf>,
    n: u32,
) -> Result<()> {
    let expect_flag = replay_has_expect_exit(ordo);
    let (date, machine) = (now_utc(), machine());
    let mut entries = Vec::new();
    for p in programs {
        let Some(schedule) = &p.schedule else {
            continue;
        };
        let mut verdicts: BTreeMap<String, u32> = BTreeMap::new();
        let mut reproduced = 0;
        let mut last_error = String::new();
        for _ in 0..n {
            let mut cmd = Command::new(ordo);
            cmd.args(["replay", "--json", "--schedule"])
                .arg(crate::root().join("tests/eval").join(schedule));
            if expect_flag && p.expect_exit != 0 {
                cmd.arg("--expect-exit").arg(p.expect_exit.to_string());
            }
            let out = cmd
                .arg("--")
                .arg(&binaries[&p.name])
                .stdin(Stdio::null())
                .output()?;
            let outcome: Value = last_json(&out.stdout).unwrap_or(Value::Null);
            let mut verdict = outcome["verdict"].as_str().unwrap_or("error").to_string();
            // Before `--expect-exit` existed, the expected status counted as a failure.
            if verdict == "reproduced"
                && outcome["exit_code"].as_i64() == Some(p.expect_exit as i64)
                && p.expect_exit != 0
            {
                verdict = "passed".into();
            }
            if verdict == "error" {
                last_error = last_line(&out.stderr);
            }
            if verdict == "reproduced" {
                reproduced += 1;
            }
            *verdicts.entry(verdict).or_default() += 1;
        }
        println!(
            "reference {:<20} {reproduced}/{n} reproduced {verdicts:?} {last_error}",
            p.name
        );
        entries.push((
            p.name.clone(),
            json!({"runs": n, "reproduced": reproduced, "verdicts": verdicts, "error": last_error,
                   "date": date, "machine": machine}),
        ));
    }
    store_measured("reference", entries)
}

/// The last line of `bytes` that parses as a JSON object (or the whole text).
fn last_json(bytes: &[u8]) -> Option<Value> {
    let text = String::from_utf8_lossy(bytes);
    if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(text.trim()) {
        return Some(v);
    }
    text.lines().rev().find_map(|l| {
        serde_json::from_str::<Value>(l.trim())
            .ok()
            .filter(Value::is_object)
    })
}

fn last_line(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .to_string()
}

fn git_commit() -> String {
    let out = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(crate::root())
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    let dirty = !out(&["status", "--porcelain", "--untracked-files=no"]).is_empty();
    format!(
        "{}{}",
        out(&["rev-parse", "--short", "HEAD"]),
        if dirty { "+changes" } else { "" }
    )
}

/// Runs every (program, strategy, seed) hunt, appending each outcome to the results.
fn hunt_all(
    ordo: &Path,
    options: &Options,
    programs: &[&Program],
    binaries: &BTreeMap<String, PathBuf>,
    seeds: &[u64],
) -> Result<()> {
    use std::io::Write;
    let results = crate::root().join(&options.results);
    std::fs::create_dir_all(results.parent().unwrap())?;
    let mut sink = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&results)?;
    let commit = match &options.ordo {
        Some(path) => format!("{} (given with --ordo)", path.display()),
        None => git_commit(),
    };
    let machine = machine();
    let total = programs.len() * options.strategies.len() * seeds.len();
    let mut done = 0;
    for p in programs {
        for strategy in &options.strategies {
            for &seed in seeds {
                done += 1;
                let outcome = hunt_once(ordo, options, p, &binaries[&p.name], strategy, seed)?;
                let mut line = outcome;
                line["date"] = json!(now_utc());
                line["commit"] = json!(commit);
                line["machine"] = json!(machine);
                line["budget"] = json!(options.budget);
                line["time_limit_s"] = json!(options.time);
                println!(
                    "[{done}/{total}] {:<20} {strategy:<8} seed {seed:<3} {}",
                    p.name,
                    summary(&line)
                );
                writeln!(sink, "{}", serde_json::to_string(&line)?)?;
            }
        }
    }
    Ok(())
}

fn summary(outcome: &Value) -> String {
    if let Some(e) = outcome["error"].as_str() {
        return format!("error: {e}");
    }
    format!(
        "{} in {} runs, {:.1} s, confirm {}/{}",
        if outcome["reproduced"] == true {
            "REPRODUCED"
        } else {
            "not found"
        },
        outcome["runs"],
        outcome["elapsed_ms"].as_f64().unwrap_or(0.0) / 1e3,
        outcome["confirm_reproduced"],
        outcome["confirm_runs"],
    )
}

/// One `ordo hunt --json` run; its outcome as a flat JSON object.
fn hunt_once(
    ordo: &Path,
    options: &Options,
    program: &Program,
    binary: &Path,
    strategy: &str,
    seed: u64,
) -> Result<Value> {
    let dir = crate::root().join(format!(
        "target/eval/hunts/{}-{strategy}-{seed}",
        program.name
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let mut cmd = Command::new(ordo);
    cmd.args([
        "hunt",
        "--json",
        "--strategy",
        strategy,
        "--seed",
        &seed.to_string(),
    ])
    .args(["--time", &options.time.to_string()]);
    if let Some(budget) = options.budget {
        cmd.args(["--budget", &budget.to_string()]);
    }
    if program.expect_exit != 0 {
        cmd.args(["--expect-exit", &program.expect_exit.to_string()]);
    }
    cmd.args(&options.hunt_args)
        .arg("-o")
        .arg(&dir)
        .arg("--")
        .arg(binary);
    let stdout_path = dir.join("hunt.json");
    let stderr_path = dir.join("hunt.stderr");
    cmd.stdout(std::fs::File::create(&stdout_path)?)
        .stderr(std::fs::File::create(&stderr_path)?)
        .stdin(Stdio::null());
    let started = Instant::now();
    let limit = Duration::from_secs(options.time + 120);
    let mut child = cmd.spawn().with_context(|| format!("run {cmd:?}"))?;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let wall_ms = started.elapsed().as_millis() as u64;
    let base =
        json!({"program": program.name, "strategy": strategy, "seed": seed, "wall_ms": wall_ms});
    let stderr = std::fs::read(&stderr_path).unwrap_or_default();
    let error = |why: String| {
        let mut v = base.clone();
        v["error"] = json!(why);
        v
    };
    let Some(status) = status else {
        return Ok(error(format!(
            "killed after {} s (--time {} was not kept)",
            limit.as_secs(),
            options.time
        )));
    };
    let code = status.code();
    let parsed = last_json(&std::fs::read(&stdout_path).unwrap_or_default());
    let Some(hunt) = parsed.filter(|_| matches!(code, Some(0) | Some(1))) else {
        return Ok(error(format!(
            "ordo hunt exited {status}: {}",
            last_line(&stderr)
        )));
    };
    if (code == Some(1)) != (hunt["reproduced"] == true) {
        return Ok(error(format!(
            "ordo hunt exited {status} but said reproduced={}",
            hunt["reproduced"]
        )));
    }
    let mut v = base;
    v["reproduced"] = json!(hunt["reproduced"] == true);
    // To the first reproduction: runs up to the one that reproduced (`run` counts
    // from 0, the first recording; runs go on concurrently, so `runs` may count a
    // few more) and the search time without the confirmation.
    v["runs"] = match hunt["run"].as_u64() {
        Some(run) => json!(run + 1),
        None => hunt["runs"].clone(),
    };
    v["runs_total"] = hunt["runs"].clone();
    v["elapsed_ms"] = [&hunt["search_ms"], &hunt["elapsed_ms"]]
        .into_iter()
        .find(|t| t.is_number())
        .cloned()
        .unwrap_or(json!(wall_ms));
    v["found_by"] = hunt["source"].clone();
    v["reason"] = hunt["reason"].clone();
    v["stopped"] = hunt["stopped"].clone();
    v["confirm_runs"] = hunt["confirm"]["runs"].clone();
    v["confirm_reproduced"] = hunt["confirm"]["reproduced"].clone();
    v["finding_kind"] = hunt["finding"]["kind"].clone();
    v["schedule"] = hunt["schedule"].clone();
    Ok(v)
}

/// Every recorded outcome, the latest per (program, strategy, seed).
fn load_results(path: &Path) -> Result<BTreeMap<(String, String, u64), Value>> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut out = BTreeMap::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let v: Value = serde_json::from_str(line)
            .with_context(|| format!("{}:{}: not a JSON object", path.display(), i + 1))?;
        let key = (
            v["program"].as_str().unwrap_or_default().to_string(),
            v["strategy"].as_str().unwrap_or_default().to_string(),
            v["seed"].as_u64().unwrap_or(0),
        );
        out.insert(key, v);
    }
    Ok(out)
}

/// What one strategy did on one program over its seeds.
#[derive(Default, Debug)]
struct Cell {
    hunts: usize,
    /// Reproduced, and pinned: by the strategy's own runs, or (`natural`) because
    /// the first recording failed by itself and its recording was pinned.
    found: usize,
    /// Of `found`: the first recording failed by itself (run 1), before the
    /// strategy acted. Counted as found in 1 run (a user would have had the bug and
    /// its schedule), but left out of the PCT/predict comparison.
    natural: usize,
    errors: usize,
    runs: Vec<f64>,
    /// Runs of the finds the strategy made itself (not `natural`).
    forced_runs: Vec<f64>,
    seconds: Vec<f64>,
    confirm_runs: u64,
    confirm_reproduced: u64,
}

impl Cell {
    /// Hunts that ran (no error).
    fn tried(&self) -> usize {
        self.hunts - self.errors
    }
    /// Found on most of the seeds that tested it.
    fn found(&self) -> bool {
        self.tried() > 0 && self.found * 2 > self.tried()
    }
    /// Found, and its schedules reproduced the bug in at least half of the
    /// confirmation replays (a failure seen once but not pinned is not).
    fn pinned(&self) -> bool {
        self.found() && self.confirm_runs > 0 && self.confirm_reproduced * 2 >= self.confirm_runs
    }
    fn median_runs(&self) -> Option<f64> {
        median(self.runs.iter().copied())
    }
    fn render(&self) -> String {
        if self.hunts == 0 {
            return "not run".into();
        }
        let mut s = format!("{}/{}", self.found, self.tried());
        if let (Some(r), Some(t)) = (self.median_runs(), median(self.seconds.iter().copied())) {
            s.push_str(&format!(" · {r:.0} runs · {t:.1} s"));
        }
        if self.confirm_runs > 0 {
            s.push_str(&format!(
                " · confirm {}/{}",
                self.confirm_reproduced, self.confirm_runs
            ));
        }
        if self.natural > 0 {
            s.push_str(&format!(" · {} in run 1 unforced", self.natural));
        }
        if self.errors > 0 {
            s.push_str(&format!(" · {} errors", self.errors));
        }
        s
    }
}

fn cells(results: &BTreeMap<(String, String, u64), Value>) -> BTreeMap<(String, String), Cell> {
    let mut out: BTreeMap<(String, String), Cell> = BTreeMap::new();
    for ((program, strategy, _), v) in results {
        let cell = out.entry((program.clone(), strategy.clone())).or_default();
        cell.hunts += 1;
        if v["error"].is_string() {
            cell.errors += 1;
            continue;
        }
        if v["reproduced"] == true {
            // Run 1 is the first recording, which no strategy steers.
            if v["runs"] == 1 || v["found_by"] == "recorded" {
                cell.natural += 1;
            } else {
                cell.forced_runs.extend(v["runs"].as_f64());
            }
            cell.found += 1;
            cell.runs.extend(v["runs"].as_f64());
            cell.seconds
                .extend(v["elapsed_ms"].as_f64().map(|ms| ms / 1e3));
            cell.confirm_runs += v["confirm_runs"].as_u64().unwrap_or(0);
            cell.confirm_reproduced += v["confirm_reproduced"].as_u64().unwrap_or(0);
        }
    }
    out
}

fn rate(entry: &Value, hits: &[&str]) -> String {
    let Some(runs) = entry["runs"].as_u64() else {
        return "–".into();
    };
    let k: u64 = hits.iter().map(|h| entry[*h].as_u64().unwrap_or(0)).sum();
    format!("{k}/{runs}")
}

fn render_report(
    suite: &[Program],
    results: &BTreeMap<(String, String, u64), Value>,
    measured: &Value,
) -> String {
    let cells = cells(results);
    let cell = |p: &str, s: &str| cells.get(&(p.to_string(), s.to_string()));
    let bugs: Vec<&Program> = suite.iter().filter(|p| !p.control).collect();
    let controls: Vec<&Program> = suite.iter().filter(|p| p.control).collect();
    let mut md = String::new();
    md.push_str("# Evaluation: does `ordo hunt` find the bugs of tests/eval/?\n\n");
    md.push_str(
        "Generated by `cargo xtask eval` (xtask/src/eval.rs) from `bench/results/eval.jsonl` and \
         `tests/eval/measured.json`; do not edit by hand. The suite (issue 10) is \
         `tests/eval/suite.json`: small pthread programs written for this project, each bug \
         rare in a plain run, plus correctly synchronized controls. Every hunt is \
         `ordo hunt --json --strategy S --seed N [--budget B] --time T [--expect-exit E] -- PROGRAM`.\n\n",
    );
    let dates: Vec<&str> = results
        .values()
        .filter_map(|v| v["date"].as_str())
        .collect();
    let commits: std::collections::BTreeSet<&str> = results
        .values()
        .filter_map(|v| v["commit"].as_str())
        .collect();
    let machines: std::collections::BTreeSet<&str> = results
        .values()
        .filter_map(|v| v["machine"].as_str())
        .collect();
    let limits: std::collections::BTreeSet<String> = results
        .values()
        .map(|v| {
            format!(
                "budget {}, --time {} s",
                v["budget"]
                    .as_u64()
                    .map_or("hunt's default".into(), |b| b.to_string()),
                v["time_limit_s"]
            )
        })
        .collect();
    if results.is_empty() {
        md.push_str("**No hunt has been run yet**: only the natural failure rates and reference schedules below are measured.\n\n");
    } else {
        md.push_str(&format!(
            "Hunts: {} outcomes, {} to {}, ordo {}, on {}; {}.\n\n",
            results.len(),
            dates.iter().min().unwrap_or(&"?"),
            dates.iter().max().unwrap_or(&"?"),
            commits.into_iter().collect::<Vec<_>>().join(", "),
            machines.into_iter().collect::<Vec<_>>().join("; "),
            limits.into_iter().collect::<Vec<_>>().join("; "),
        ));
    }
    md.push_str(
        "A cell reads `found/seeds · median runs · median seconds to the first reproduction · \
         confirm reproduced/runs`. Runs count every run up to the reproducing one, the first \
         recording included; seconds are the search without the confirmation, in which the \
         hunt replays its schedule 20 times. A strategy \
         *finds* a program when it reproduced the bug on most of the seeds that tried it (a hunt \
         that errored is left out). A hunt whose first recording failed by itself \
         (`N in run 1 unforced`) counts as found in 1 run — the user has the failure and the \
         schedule pinned from its recording, whose confirm rate shows whether the pin holds — but \
         is left out of the PCT/predict run ratio, which compares what the strategies did.\n\n",
    );
    render_totals(&mut md, &bugs, &controls, &cell);
    md.push_str("\n## Bugs\n\n| program | shape | natural failures | reference schedule |");
    for s in STRATEGIES {
        md.push_str(&format!(" {s} |"));
    }
    md.push_str(" PCT/predict runs |\n|---|---|---|---|");
    md.push_str(&"---|".repeat(STRATEGIES.len() + 1));
    md.push('\n');
    for p in &bugs {
        let natural = rate(&measured["natural"][&p.name], &["failed", "hung"]);
        let reference = rate(&measured["reference"][&p.name], &["reproduced"]);
        md.push_str(&format!(
            "| {} | {} | {natural} | {reference} |",
            p.name, p.shape
        ));
        for s in STRATEGIES {
            md.push_str(&format!(
                " {} |",
                cell(&p.name, s).map_or("not run".into(), Cell::render)
            ));
        }
        md.push_str(&format!(
            " {} |\n",
            pct_ratio(cell(&p.name, "pct"), cell(&p.name, "predict"))
                .map_or("–".into(), |r| format!("{r:.1}×"))
        ));
    }
    md.push_str("\n## Controls (correctly synchronized: every report is a false positive)\n\n| program | like | natural failures |");
    for s in STRATEGIES {
        md.push_str(&format!(" {s} |"));
    }
    md.push_str("\n|---|---|---|");
    md.push_str(&"---|".repeat(STRATEGIES.len()));
    md.push('\n');
    for p in &controls {
        let natural = rate(&measured["natural"][&p.name], &["failed", "hung"]);
        md.push_str(&format!("| {} | {} | {natural} |", p.name, p.shape));
        for s in STRATEGIES {
            md.push_str(&format!(
                " {} |",
                cell(&p.name, s).map_or("not run".into(), |c| format!(
                    "{} reports / {} hunts",
                    c.found, c.hunts
                ))
            ));
        }
        md.push('\n');
    }
    render_misses(&mut md, &bugs, &cell, measured);
    render_measurements(&mut md, measured);
    // What the numbers cannot say by themselves (why a strategy missed a program,
    // which parts were not run and why) is written by hand next to the suite.
    if let Ok(notes) = std::fs::read_to_string(crate::root().join(NOTES)) {
        md.push_str(&format!(
            "\n## Notes (hand-written, `{NOTES}`)\n\n{}",
            notes.trim_start()
        ));
    }
    md
}

/// PCT's median runs over predict's, when both found the bug by their own runs
/// (a first recording that failed by itself says nothing about either).
fn pct_ratio(pct: Option<&Cell>, predict: Option<&Cell>) -> Option<f64> {
    let (pct, predict) = (pct?, predict?);
    if !pct.found() || !predict.found() {
        return None;
    }
    let forced = |c: &Cell| median(c.forced_runs.iter().copied());
    Some(forced(pct)? / forced(predict)?.max(1.0))
}

fn render_totals<'a>(
    md: &mut String,
    bugs: &[&Program],
    controls: &[&Program],
    cell: &dyn Fn(&str, &str) -> Option<&'a Cell>,
) {
    md.push_str("## Totals against the targets of issue 10\n\n| strategy | bugs found | of them pinned (confirm ≥ 50 %) | median of per-bug median runs | reports on controls |\n|---|---|---|---|---|\n");
    let mut found_by: BTreeMap<&str, (usize, usize, Option<f64>)> = BTreeMap::new();
    for s in STRATEGIES {
        let run: Vec<&Cell> = bugs.iter().filter_map(|p| cell(&p.name, s)).collect();
        let found: Vec<&&Cell> = run.iter().filter(|c| c.found()).collect();
        let med = median(found.iter().filter_map(|c| c.median_runs()));
        let false_reports: usize = controls
            .iter()
            .filter_map(|p| cell(&p.name, s))
            .map(|c| c.found)
            .sum();
        let control_hunts: usize = controls
            .iter()
            .filter_map(|p| cell(&p.name, s))
            .map(|c| c.hunts)
            .sum();
        found_by.insert(s, (found.len(), run.len(), med));
        if run.is_empty() && control_hunts == 0 {
            md.push_str(&format!("| {s} | not run | – | – | not run |\n"));
            continue;
        }
        md.push_str(&format!(
            "| {s} | {} of {} run ({} of the suite's {}) | {} | {} | {false_reports} in {control_hunts} hunts |\n",
            found.len(),
            run.len(),
            found.len(),
            bugs.len(),
            found.iter().filter(|c| c.pinned()).count(),
            med.map_or("–".into(), |m| format!("{m:.0}")),
        ));
    }
    let ratios: Vec<f64> = bugs
        .iter()
        .filter_map(|p| pct_ratio(cell(&p.name, "pct"), cell(&p.name, "predict")))
        .collect();
    md.push('\n');
    let verdict = |ok: bool| if ok { "**met**" } else { "**not met**" };
    for s in ["predict", "auto"] {
        let (found, run, med) = found_by[s];
        if run == 0 {
            md.push_str(&format!("- {s}: not run.\n"));
            continue;
        }
        let share = found as f64 / bugs.len() as f64;
        md.push_str(&format!(
            "- {s} finds ≥ 90 % of the suite with median ≤ 3 runs: {} ({:.0} % of all {} bugs{}, median {}).\n",
            verdict(share >= 0.9 && med.is_some_and(|m| m <= 3.0)),
            share * 100.0,
            bugs.len(),
            if run < bugs.len() { format!("; only {run} were run") } else { String::new() },
            med.map_or("–".into(), |m| format!("{m:.0} runs")),
        ));
    }
    match median(ratios.iter().copied()) {
        Some(m) => md.push_str(&format!(
            "- PCT needs ≥ 5× the runs of predict where both find the bug: {} (median ratio {m:.1}× over {} bugs, range {:.1}×–{:.1}×).\n",
            verdict(m >= 5.0),
            ratios.len(),
            ratios.iter().copied().fold(f64::INFINITY, f64::min),
            ratios.iter().copied().fold(0.0, f64::max),
        )),
        None => md.push_str("- PCT vs predict: no bug was found by both (or they were not both run).\n"),
    }
    let false_reports: usize = controls
        .iter()
        .flat_map(|p| STRATEGIES.iter().filter_map(|s| cell(&p.name, s)))
        .map(|c| c.found)
        .sum();
    let control_hunts: usize = controls
        .iter()
        .flat_map(|p| STRATEGIES.iter().filter_map(|s| cell(&p.name, s)))
        .map(|c| c.hunts)
        .sum();
    if control_hunts == 0 {
        md.push_str("- Zero reports on the controls: not run.\n");
    } else {
        md.push_str(&format!(
            "- Zero reports on the controls: {} ({false_reports} reports in {control_hunts} hunts).\n",
            verdict(false_reports == 0)
        ));
    }
}

fn render_misses<'a>(
    md: &mut String,
    bugs: &[&Program],
    cell: &dyn Fn(&str, &str) -> Option<&'a Cell>,
    measured: &Value,
) {
    md.push_str("\n## Where predict falls short, and what it would have had to propose\n\n");
    let mut any = false;
    for p in bugs {
        let Some(c) = cell(&p.name, "predict") else {
            continue;
        };
        if c.found() {
            continue;
        }
        any = true;
        let reference = &measured["reference"][&p.name];
        let reach = match reference["runs"].as_u64() {
            Some(n) => format!(
                "its reference schedule `tests/eval/{}` reproduces it {}/{n} times{}",
                p.schedule.as_deref().unwrap_or("?"),
                reference["reproduced"].as_u64().unwrap_or(0),
                reference["error"]
                    .as_str()
                    .filter(|e| !e.is_empty())
                    .map_or(String::new(), |e| format!(" (replay: {e})")),
            ),
            None => "its reference schedule was not replayed".into(),
        };
        md.push_str(&format!(
            "- **{}** ({}; fails by {}): found on {}/{} seeds tried{}. Needs: {}; {reach}.\n",
            p.name,
            p.shape,
            p.fails,
            c.found,
            c.tried(),
            if c.errors > 0 {
                format!(", {} hunts errored", c.errors)
            } else {
                String::new()
            },
            p.needs,
        ));
    }
    if !any {
        md.push_str("Nothing run was missed by predict.\n");
    }
    let not_run: Vec<&str> = bugs
        .iter()
        .filter(|p| cell(&p.name, "predict").is_none())
        .map(|p| p.name.as_str())
        .collect();
    if !not_run.is_empty() {
        md.push_str(&format!(
            "\nNot run with predict: {}.\n",
            not_run.join(", ")
        ));
    }
}

fn render_measurements(md: &mut String, measured: &Value) {
    md.push_str("\n## How the rates were measured\n\n");
    let about = |section: &str| -> String {
        let entries: Vec<&Value> = measured[section]
            .as_object()
            .map(|m| m.values().collect())
            .unwrap_or_default();
        let dates: std::collections::BTreeSet<&str> =
            entries.iter().filter_map(|v| v["date"].as_str()).collect();
        let machines: std::collections::BTreeSet<&str> = entries
            .iter()
            .filter_map(|v| v["machine"].as_str())
            .collect();
        if entries.is_empty() {
            return "not measured yet".into();
        }
        format!(
            "{} programs, {} on {}",
            entries.len(),
            dates.into_iter().collect::<Vec<_>>().join(", "),
            machines.into_iter().collect::<Vec<_>>().join("; ")
        )
    };
    md.push_str(&format!(
        "- *Natural failures* (`cargo xtask eval --natural N`): N plain runs of the program; a failure is an exit status other than the expected one, a signal, or a run still going after 5 s. Timing-dependent: other work on the machine moves these rates. {}.\n",
        about("natural")
    ));
    md.push_str(&format!(
        "- *Reference schedule* (`cargo xtask eval --reference N`): the hand-written schedule next to each bug (`tests/eval/NAME.sched`), replayed N times with `ordo replay`; it shows the bug is reachable by ordering synchronization alone, so a hunt that misses it lacks the candidate, not the means to enforce it. {}.\n",
        about("reference")
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn program(name: &str, control: bool) -> Program {
        Program {
            name: name.into(),
            source: format!("{name}.c"),
            control,
            shape: "a shape".into(),
            needs: "an ordering".into(),
            fails: "abort".into(),
            expect_exit: 0,
            schedule: Some(format!("{name}.sched")),
        }
    }

    fn outcome(
        program: &str,
        strategy: &str,
        seed: u64,
        runs: Option<u64>,
    ) -> ((String, String, u64), Value) {
        let v = json!({"program": program, "strategy": strategy, "seed": seed,
                       "reproduced": runs.is_some(), "runs": runs.unwrap_or(50),
                       "elapsed_ms": 1500, "confirm_runs": 20, "confirm_reproduced": 20});
        ((program.into(), strategy.into(), seed), v)
    }

    #[test]
    fn seeds_are_a_count_or_a_list() {
        assert_eq!(parse_seeds("3").unwrap(), vec![1, 2, 3]);
        assert_eq!(parse_seeds("4,9").unwrap(), vec![4, 9]);
        assert!(parse_seeds("0").is_err());
        assert!(parse_seeds("x").is_err());
    }

    #[test]
    fn the_manifest_parses_and_names_unique_programs() {
        let suite = manifest().unwrap();
        let mut names: Vec<&str> = suite.iter().map(|p| p.name.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), suite.len());
        assert!(suite.iter().any(|p| p.expect_exit == 3));
    }

    #[test]
    fn report_totals_ratios_and_control_reports() {
        let suite = vec![
            program("a", false),
            program("b", false),
            program("ok", true),
        ];
        let results: BTreeMap<_, _> = [
            outcome("a", "predict", 1, Some(2)),
            outcome("a", "predict", 2, Some(3)),
            outcome("a", "pct", 1, Some(20)),
            outcome("a", "pct", 2, Some(40)),
            outcome("b", "predict", 1, None),
            outcome("b", "predict", 2, None),
            // The first recording failed by itself: found in run 1, but no
            // strategy was compared on it.
            outcome("b", "pct", 1, Some(1)),
            outcome("ok", "predict", 1, None),
            outcome("ok", "pct", 1, Some(7)),
        ]
        .into_iter()
        .collect();
        let md = render_report(&suite, &results, &json!({}));
        // a: predict 2/2 with median 3 runs (upper median), pct median 40: 13.3x.
        assert!(
            md.contains("| a | a shape | – | – | 2/2 · 3 runs · 1.5 s · confirm 40/40 |"),
            "{md}"
        );
        assert!(md.contains("13.3×"), "{md}");
        assert!(
            md.contains("| predict | 1 of 2 run (1 of the suite's 2) | 1 | 3 | 0 in 1 hunts |"),
            "{md}"
        );
        assert!(
            md.contains("finds ≥ 90 % of the suite with median ≤ 3 runs: **not met** (50 %"),
            "{md}"
        );
        assert!(
            md.contains("Zero reports on the controls: **not met** (1 reports in 2 hunts)"),
            "{md}"
        );
        assert!(
            md.contains(
                "- **b** (a shape; fails by abort): found on 0/2 seeds tried. Needs: an ordering"
            ),
            "{md}"
        );
        assert!(md.contains("| auto | not run | – | – | not run |"), "{md}");
        // b: pct's only hunt failed by itself in run 1: found, pinned, no ratio.
        assert!(
            md.contains("1/1 · 1 runs · 1.5 s · confirm 20/20 · 1 in run 1 unforced | not run | not run | – |"),
            "{md}"
        );
    }
}
