//! `cargo xtask fuzz`: libFuzzer campaigns (cargo-fuzz) on the parsers of untrusted
//! input — the trace reader, the schedule parser and the `--watch` spec parser
//! (targets in `fuzz/fuzz_targets`, a workspace of its own built with nightly).
//!
//! Each target starts from a seed corpus made at run time in `fuzz/corpus/TARGET`
//! (not committed): the repository's schedules, `--watch` forms from the docs, and
//! small traces written by the analysis' trace generator (the same `TraceWriter` the
//! recorder uses). Every run has libFuzzer's limits on: `-rss_limit_mb=1024` (also
//! the largest single allocation), `-timeout` per input (a hang is a failure), and
//! any panic is a crash. A crashing input is left in `fuzz/artifacts/TARGET`.
//!
//! `cargo xtask fuzz [--runs N] [--target NAME]...` runs each target for N
//! executions (default 10 million) and reports the counts and speeds;
//! `cargo xtask test` ends with [`short`], a few seconds per target.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};

/// The fuzz targets, as named in fuzz/Cargo.toml.
pub const TARGETS: [&str; 3] = ["trace_reader", "schedule_parser", "watch_spec"];
/// Executions per target of the long campaign.
const DEFAULT_RUNS: u64 = 10_000_000;
/// Seconds per target of the run inside `cargo xtask test`.
const SHORT_SECONDS: u64 = 20;
/// Optimized, with debug assertions and overflow checks: an arithmetic overflow on
/// a hostile input is a finding too.
const BUILD_FLAGS: [&str; 2] = ["-O", "-a"];
/// libFuzzer's memory limit: resident set, and any one allocation.
const RSS_LIMIT_MB: u32 = 1024;
/// Seconds one input may take before it counts as a hang. Inputs take
/// milliseconds; the margin is for a machine shared with builds (a 377-byte
/// schedule that parses in 1 ms once "timed out" at 10 s while 5 builds ran).
const INPUT_TIMEOUT_S: u32 = 60;

/// `--watch` forms from README.md and docs/ANALYSIS.md §3: one seed file each.
const WATCH_SEEDS: &[&str] = &[
    "balance",
    "cfg+8:4",
    "cfg.inner.count",
    "current->users",
    "(anonymous namespace)::hits",
    "ns::holder<int, 3>::value",
    "ns::operator+=(X const&)::calls",
    "crate::module::STATIC",
    "prog.c:counter",
    "0x4010a0:4",
    "table[2]",
    "counter:8",
    "a.b[3]->c+2:2",
    "_ZN4prog7COUNTER17h0123456789abcdefE",
    "calls.0",
];

/// How long a campaign runs.
#[derive(Clone, Copy)]
enum Budget {
    Runs(u64),
    Seconds(u64),
}

/// What one target's run did.
struct Outcome {
    target: &'static str,
    runs: u64,
    seconds: f64,
    corpus: usize,
}

/// `cargo xtask fuzz`.
pub fn run(args: &[String]) -> Result<()> {
    let mut runs = DEFAULT_RUNS;
    let mut targets: Vec<&'static str> = Vec::new();
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--runs" => {
                let value = args.get(i + 1).context("--runs needs a number")?;
                runs = value
                    .replace('_', "")
                    .parse()
                    .with_context(|| format!("--runs {value:?}: not a number"))?;
                i += 1;
            }
            "--target" => {
                let value = args.get(i + 1).context("--target needs a name")?;
                let Some(t) = TARGETS.iter().find(|t| **t == value) else {
                    bail!("--target {value:?}: one of {}", TARGETS.join(", "));
                };
                targets.push(t);
                i += 1;
            }
            "--help" | "-h" => {
                println!(
                    "usage: cargo xtask fuzz [--runs N] [--target NAME]...\n\n\
                     Runs each fuzz target ({}) for N executions (default {DEFAULT_RUNS}).",
                    TARGETS.join(", ")
                );
                return Ok(());
            }
            other => bail!("unknown option {other:?} (see cargo xtask fuzz --help)"),
        }
        i += 1;
    }
    if targets.is_empty() {
        targets = TARGETS.to_vec();
    }
    campaign(&targets, Budget::Runs(runs))
}

/// The short run of every target at the end of `cargo xtask test`.
pub fn short() -> Result<()> {
    campaign(&TARGETS, Budget::Seconds(SHORT_SECONDS))
}

fn campaign(targets: &[&'static str], budget: Budget) -> Result<()> {
    crate::setup::cargo_fuzz()?;
    let fuzz = crate::root().join("fuzz");
    crate::run(
        Command::new("cargo")
            .args(["+nightly", "fuzz", "build"])
            .args(BUILD_FLAGS)
            .current_dir(&fuzz),
    )?;
    let mut outcomes = Vec::new();
    for &target in targets {
        let corpus = seed_corpus(target)?;
        outcomes.push(fuzz_one(target, &corpus, budget)?);
    }
    println!("\n== fuzzing (libFuzzer via cargo-fuzz; -rss_limit_mb={RSS_LIMIT_MB}, -timeout={INPUT_TIMEOUT_S})");
    for o in &outcomes {
        println!(
            "{:>16}: {:>11} executions in {:>6.0} s ({:>6.0}/s), corpus {} inputs: no crash, hang or allocation over the limit",
            o.target,
            o.runs,
            o.seconds,
            o.runs as f64 / o.seconds.max(1e-9),
            o.corpus
        );
    }
    Ok(())
}

/// Runs one target; fails when libFuzzer found a crash, a hang or an allocation
/// over the limit (its report is on stderr, the input in fuzz/artifacts).
///
/// A timeout is checked by running its input again alone: on a machine shared with
/// builds, the fuzzer has been seen stalled past a minute on inputs that run in
/// milliseconds. One that does not reproduce is reported and the campaign goes on
/// with the executions it still owes (at most [`STALLS_TOLERATED`] times).
fn fuzz_one(target: &'static str, corpus: &Path, budget: Budget) -> Result<Outcome> {
    let fuzz = crate::root().join("fuzz");
    let artifacts = fuzz.join("artifacts").join(target);
    std::fs::create_dir_all(&artifacts)?;
    let started = Instant::now();
    let mut runs = 0u64;
    let mut stalls = 0;
    loop {
        let limit = match budget {
            Budget::Runs(n) => format!("-runs={}", n.saturating_sub(runs).max(1)),
            Budget::Seconds(s) => format!(
                "-max_total_time={}",
                s.saturating_sub(started.elapsed().as_secs()).max(1)
            ),
        };
        eprintln!("xtask: fuzzing {target} ({limit})");
        let before: Vec<PathBuf> = artifact_files(&artifacts)?;
        let output = Command::new("cargo")
            .args(["+nightly", "fuzz", "run"])
            .args(BUILD_FLAGS)
            .arg(target)
            .arg(corpus)
            .arg("--")
            .arg(limit)
            .arg(format!("-rss_limit_mb={RSS_LIMIT_MB}"))
            .arg(format!("-timeout={INPUT_TIMEOUT_S}"))
            .arg(format!("-report_slow_units={INPUT_TIMEOUT_S}"))
            .arg(format!("-artifact_prefix={}/", artifacts.display()))
            .arg("-print_final_stats=1")
            .current_dir(&fuzz)
            .output()
            .with_context(|| format!("run cargo fuzz run {target}"))?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        runs += final_stat(&stderr, "stat::number_of_executed_units:").unwrap_or(0);
        if output.status.success() {
            break;
        }
        let mut new: Vec<PathBuf> = artifact_files(&artifacts)?
            .into_iter()
            .filter(|p| !before.contains(p))
            .collect();
        // Slow inputs are libFuzzer's notes, not failures (a stalled machine makes
        // them too): only a timeout, crash or memory excess fails a campaign.
        for slow in new.iter().filter(|p| is_slow_unit(p)) {
            std::fs::remove_file(slow)?;
        }
        new.retain(|p| !is_slow_unit(p));
        let stall = match new.as_slice() {
            [input] if is_timeout(input) && stalls < STALLS_TOLERATED => {
                !reproduces(target, input)?
            }
            _ => false,
        };
        if !stall {
            let report: Vec<&str> = stderr
                .lines()
                .filter(|l| !l.starts_with('#') && !l.contains("# Uses:"))
                .rev()
                .take(40)
                .collect();
            for line in report.iter().rev() {
                eprintln!("{line}");
            }
            bail!(
                "fuzz target {target} failed ({}); the input is in {}",
                output.status,
                artifacts.display()
            );
        }
        stalls += 1;
        eprintln!(
            "xtask: {target}: a timeout on {} did not reproduce when run alone (the machine stalled); going on",
            new[0].display()
        );
        std::fs::remove_file(&new[0])?;
    }
    Ok(Outcome {
        target,
        runs,
        seconds: started.elapsed().as_secs_f64(),
        corpus: std::fs::read_dir(corpus)?.count(),
    })
}

/// Stalls of the machine a campaign tolerates before a timeout counts anyway.
const STALLS_TOLERATED: u32 = 5;

fn artifact_files(dir: &Path) -> Result<Vec<PathBuf>> {
    Ok(std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect())
}

fn is_slow_unit(input: &Path) -> bool {
    input
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("slow-unit-"))
}

fn is_timeout(input: &Path) -> bool {
    input
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("timeout-"))
}

/// Whether `input` hangs `target` again when run alone (under the same limits).
fn reproduces(target: &str, input: &Path) -> Result<bool> {
    let status = Command::new("cargo")
        .args(["+nightly", "fuzz", "run"])
        .args(BUILD_FLAGS)
        .arg(target)
        .arg(input)
        .arg("--")
        .arg(format!("-rss_limit_mb={RSS_LIMIT_MB}"))
        .arg(format!("-timeout={INPUT_TIMEOUT_S}"))
        .current_dir(crate::root().join("fuzz"))
        .output()
        .with_context(|| format!("run cargo fuzz run {target} {}", input.display()))?
        .status;
    Ok(!status.success())
}

fn final_stat(stderr: &str, key: &str) -> Option<u64> {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().parse().ok())
}

/// Makes (or tops up) `fuzz/corpus/TARGET` with the target's seeds; inputs
/// libFuzzer added in earlier runs stay.
fn seed_corpus(target: &str) -> Result<PathBuf> {
    let root = crate::root();
    let dir = root.join("fuzz/corpus").join(target);
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    match target {
        "schedule_parser" => {
            for file in schedules(&root.join("tests"))? {
                let name = file
                    .strip_prefix(&root)
                    .unwrap_or(&file)
                    .to_string_lossy()
                    .replace('/', "_");
                std::fs::copy(&file, dir.join(format!("seed-{name}")))?;
            }
        }
        "watch_spec" => {
            for (i, spec) in WATCH_SEEDS.iter().enumerate() {
                std::fs::write(dir.join(format!("seed-{i}")), spec)?;
            }
        }
        "trace_reader" => seed_traces(&dir)?,
        other => bail!("no seeds for fuzz target {other}"),
    }
    Ok(dir)
}

/// Every `.sched` file under `dir`.
fn schedules(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            out.extend(schedules(&path)?);
        } else if path.extension().is_some_and(|e| e == "sched") {
            out.push(path);
        }
    }
    Ok(out)
}

/// Small generated traces of each shape the analysis benchmark uses (a few KB each,
/// so libFuzzer mutates real chunk, thread and footer records quickly), plus one cut
/// short without its footer.
fn seed_traces(dir: &Path) -> Result<()> {
    crate::run(Command::new("cargo").args([
        "build",
        "-p",
        "ordo-analysis",
        "--example",
        "bench_trace",
    ]))?;
    let generator = crate::root().join("target/debug/examples/bench_trace");
    let shapes: [(&str, &[&str]); 4] = [
        ("mixed", &["400", "3"]),
        ("stripes", &["--stripes", "300", "8"]),
        ("short-threads", &["--short-threads", "12"]),
        ("detached-threads", &["--detached-threads", "12"]),
    ];
    for (name, args) in shapes {
        let path = dir.join(format!("seed-{name}.ordo"));
        let _ = std::fs::remove_file(&path);
        let mut command = Command::new(&generator);
        match args {
            [flag, rest @ ..] if flag.starts_with("--") => {
                command.arg(flag).arg(&path).args(rest);
            }
            _ => {
                command.arg(&path).args(args);
            }
        }
        // It prints the number of events written: not for this output.
        crate::run(command.stdout(std::process::Stdio::null()))?;
        if name == "mixed" {
            // The same trace cut in the middle of its footer: read by scanning chunks.
            let bytes = std::fs::read(&path)?;
            std::fs::write(
                dir.join("seed-cut-short.ordo"),
                &bytes[..bytes.len() - bytes.len().min(40)],
            )?;
        }
    }
    Ok(())
}
