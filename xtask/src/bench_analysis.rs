//! The analysis benchmark: `ordo analyze` over generated traces of 2 and 10 million
//! events from 8 worker threads (critical sections on 16 mutexes, nested in a fixed
//! order, watched accesses under one of them). Prints events per second — of the
//! whole command, and of the streaming pass alone (read, order, happens-before,
//! detectors) — and the analyzing process's peak resident memory, which must not
//! grow with the trace's length.
//!
//! Each trace is analyzed twice, back to back: pinned to one CPU with `taskset`
//! (the target, >= 10 M events/s, is for one core; `ordo analyze` then runs on one
//! thread), and free to use every CPU (decoding then runs on a thread of its own).
//! Each figure is the best of three runs.
//!
//! Then the two *scale shapes*, pinned to one core: a striped hash table whose
//! resize holds every stripe at once (512 and 5 000 stripes), 100 000
//! short-lived threads created and joined two at a time, and 100 000 detached
//! ones (never joined; each posts a semaphore the main thread waits on before it
//! creates more). The target for both: at
//! least 1 M events/s and at most 100 MB peak RSS, whatever the number of locks
//! held at once or of threads ever created.
//!
//! Each analysis runs in its own `ordo analyze --json` process, which reports its
//! peak RSS (VmHWM) in `stats.peak_rss_kb`, so the two lengths do not share a
//! high-water mark. Traces are written with `ordo-analysis`'s generator (the
//! `bench_trace` example) into a scratch directory that is removed afterwards.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};

/// Trace lengths compared, in events.
const LENGTHS: [u64; 2] = [2_000_000, 10_000_000];
/// Worker threads in the generated traces (plus the main thread).
const THREADS: u32 = 8;

/// Runs per configuration; the fastest is reported (the machines are noisy).
const RUNS: usize = 3;

/// The scale shapes: label and `bench_trace` arguments (after the path).
const SHAPES: [(&str, &[&str]); 4] = [
    (
        "striped table, 512 stripes held at once",
        &["--stripes", "2000000", "512"],
    ),
    (
        "striped table, 5000 stripes held at once",
        &["--stripes", "2000000", "5000"],
    ),
    ("100000 short-lived threads", &["--short-threads", "100000"]),
    (
        "100000 short-lived detached threads",
        &["--detached-threads", "100000"],
    ),
];
/// The scale shapes' targets.
const SHAPE_MIN_RATE: f64 = 1.0;
const SHAPE_MAX_RSS_MB: f64 = 100.0;

struct Measured {
    events: u64,
    trace_bytes: u64,
    one_core: Run,
    all_cores: Run,
}

#[derive(Clone, Copy)]
struct Run {
    events: u64,
    wall: f64,
    pass: f64,
    peak_rss_kb: u64,
}

/// Runs the benchmark and prints its numbers.
pub fn run() -> Result<()> {
    let ordo = crate::ordo_release()?;
    crate::run(Command::new("cargo").args([
        "build",
        "--release",
        "-p",
        "ordo-analysis",
        "--example",
        "bench_trace",
    ]))?;
    let generator = crate::root().join("target/release/examples/bench_trace");
    let dir = std::env::temp_dir().join(format!("ordo-bench-analysis-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    let result = measure_all(&ordo, &generator, &dir);
    let shapes = result
        .as_ref()
        .ok()
        .map(|_| measure_shapes(&ordo, &generator, &dir));
    let _ = std::fs::remove_dir_all(&dir);
    let runs = result?;
    let shapes = shapes.transpose()?.unwrap_or_default();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("\n== analysis: ordo analyze over generated traces ({THREADS} worker threads; best of {RUNS})");
    for m in &runs {
        for (label, r) in [
            ("1 core ", m.one_core),
            (&*format!("{cpus} cores"), m.all_cores),
        ] {
            println!(
                "{:>11} events ({:>5.1} MB trace), {label}: {:>5.2} s = {:>5.2} M events/s; streaming pass {:>5.2} M events/s; peak RSS {:>5.1} MB",
                m.events,
                m.trace_bytes as f64 / 1e6,
                r.wall,
                m.events as f64 / r.wall / 1e6,
                m.events as f64 / r.pass / 1e6,
                r.peak_rss_kb as f64 / 1024.0
            );
        }
    }
    if let [short, long] = runs.as_slice() {
        println!(
            "memory at {}x the length: {:.2}x (independent of length when close to 1)",
            long.events / short.events.max(1),
            long.one_core.peak_rss_kb as f64 / short.one_core.peak_rss_kb.max(1) as f64
        );
        let rate = long.events as f64 / long.one_core.wall / 1e6;
        println!(
            "target >= 10 M events/s on one core: {rate:.2} M events/s ({})",
            if rate >= 10.0 { "met" } else { "NOT met" }
        );
    }
    println!("\n== analysis scale shapes (1 core; best of {RUNS}; target >= {SHAPE_MIN_RATE} M events/s and <= {SHAPE_MAX_RSS_MB} MB)");
    for (label, r) in &shapes {
        let rate = r.events as f64 / r.wall / 1e6;
        let mb = r.peak_rss_kb as f64 / 1024.0;
        println!(
            "{label:>42}: {:>9} events, {:>5.2} s = {rate:>5.2} M events/s; peak RSS {mb:>5.1} MB ({})",
            r.events,
            r.wall,
            if rate >= SHAPE_MIN_RATE && mb <= SHAPE_MAX_RSS_MB {
                "met"
            } else {
                "NOT met"
            }
        );
    }
    Ok(())
}

/// The scale shapes, each generated, analyzed pinned to one core, and removed.
fn measure_shapes(ordo: &Path, generator: &Path, dir: &Path) -> Result<Vec<(String, Run)>> {
    let mut out = Vec::new();
    for (label, args) in SHAPES {
        let trace = dir.join("shape.ordo");
        let generated = Command::new(generator)
            .arg(args[0])
            .arg(&trace)
            .args(&args[1..])
            .output()?;
        if !generated.status.success() {
            bail!(
                "bench_trace failed: {}",
                String::from_utf8_lossy(&generated.stderr)
            );
        }
        out.push((label.to_string(), analyze(ordo, &trace, true)?));
        let _ = std::fs::remove_file(&trace);
    }
    Ok(out)
}

/// The best of [`RUNS`] analyses of `trace`, pinned to CPU 0 or not.
fn analyze(ordo: &Path, trace: &Path, pinned: bool) -> Result<Run> {
    let mut best: Option<Run> = None;
    for _ in 0..RUNS {
        let mut command = if pinned {
            let mut c = Command::new("taskset");
            c.args(["-c", "0"]).arg(ordo);
            c
        } else {
            Command::new(ordo)
        };
        let started = Instant::now();
        let analyzed = command.arg("analyze").arg("--json").arg(trace).output()?;
        let wall = started.elapsed().as_secs_f64();
        if !analyzed.status.success() {
            bail!(
                "ordo analyze failed: {}",
                String::from_utf8_lossy(&analyzed.stderr)
            );
        }
        let doc: serde_json::Value =
            serde_json::from_slice(&analyzed.stdout).context("ordo analyze --json output")?;
        let stats = &doc["stats"];
        let number = |key: &str| {
            stats[key]
                .as_f64()
                .with_context(|| format!("stats.{key} missing"))
        };
        let run = Run {
            events: number("events")? as u64,
            wall,
            pass: number("pass_seconds")?,
            peak_rss_kb: number("peak_rss_kb")? as u64,
        };
        if best.is_none_or(|b| run.wall < b.wall) {
            best = Some(run);
        }
    }
    best.context("no runs")
}

fn measure_all(ordo: &Path, generator: &Path, dir: &Path) -> Result<Vec<Measured>> {
    let mut out = Vec::new();
    for events in LENGTHS {
        let trace: PathBuf = dir.join(format!("bench-{events}.ordo"));
        let generated = Command::new(generator)
            .arg(&trace)
            .arg(events.to_string())
            .arg(THREADS.to_string())
            .output()?;
        if !generated.status.success() {
            bail!(
                "bench_trace failed: {}",
                String::from_utf8_lossy(&generated.stderr)
            );
        }
        let trace_bytes = std::fs::metadata(&trace)?.len();
        let one_core = analyze(ordo, &trace, true)?;
        let all_cores = analyze(ordo, &trace, false)?;
        out.push(Measured {
            events: one_core.events,
            trace_bytes,
            one_core,
            all_cores,
        });
        let _ = std::fs::remove_file(&trace);
    }
    Ok(out)
}
