//! Recording benchmarks: what tracing costs a program, measured side by side in
//! one run (median of several runs each, native and recorded interleaved).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};

const RUNS: usize = 5;

fn build(name: &str) -> Result<PathBuf> {
    let dir = crate::root().join("target/bench");
    std::fs::create_dir_all(&dir)?;
    let out = dir.join(name);
    crate::compile_c(
        &crate::root().join(format!("tests/programs/{name}.c")),
        &out,
        &[],
    )?;
    Ok(out)
}

fn time(cmd: &mut Command) -> Result<f64> {
    let started = Instant::now();
    let out = cmd.output().with_context(|| format!("run {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(started.elapsed().as_secs_f64())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn trace_stats(ordo: &Path, trace: &Path) -> Result<serde_json::Value> {
    let out = Command::new(ordo)
        .arg("dump")
        .arg("--stats")
        .arg("--json")
        .arg(trace)
        .output()?;
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// Runs a recording; returns (wall time of `ordo record`, the recorded run's own span
/// from its first to its last event). The span is the program's slowdown; the wall
/// time adds probe attach/detach, which the kernel serializes across recordings.
fn recorded_run(ordo: &Path, cmd: &mut Command, trace: &Path) -> Result<(f64, f64)> {
    let wall = time(cmd)?;
    let span = trace_stats(ordo, trace)?["span_ns"].as_u64().unwrap_or(0) as f64 / 1e9;
    Ok((wall, span))
}

/// Native vs recorded run time of a lock-heavy program (4 threads × 100k
/// lock/inc/unlock of one mutex, the FACTS anchor).
pub fn run_record() -> Result<()> {
    let ordo = crate::ordo_release()?;
    let program = build("record_sync")?;
    let trace = crate::root().join("target/bench/record.ordo");
    let args = ["contention", "4", "100000"];
    let (mut native, mut recorded, mut walls) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..RUNS {
        native.push(time(Command::new(&program).args(args))?);
        let (wall, span) = recorded_run(
            &ordo,
            Command::new(&ordo)
                .arg("record")
                .arg("-o")
                .arg(&trace)
                .arg("--")
                .arg(&program)
                .args(args),
            &trace,
        )?;
        recorded.push(span);
        walls.push(wall);
    }
    let stats = trace_stats(&ordo, &trace)?;
    let events = stats["events"].as_u64().unwrap_or(0);
    let (n, r) = (median(native), median(recorded));
    println!("bench record: 4 threads x 100000 lock/unlock of one mutex, median of {RUNS}");
    println!("  native              {:>8.1} ms", n * 1e3);
    println!(
        "  recorded run        {:>8.1} ms   ({:.1}x native; `ordo record` wall time {:.1} ms)",
        r * 1e3,
        r / n,
        median(walls) * 1e3
    );
    println!(
        "  events recorded     {events} ({} lost), {:.2} us per event of added time",
        stats["lost"],
        (r - n) * 1e6 / events.max(1) as f64
    );
    Ok(())
}

/// Per-access cost of instruction-site uprobes and hardware watchpoints on a hot
/// watched variable (1 thread, 200k read+write pairs under a lock).
pub fn run_watch() -> Result<()> {
    let ordo = crate::ordo_release()?;
    let program = build("record_watch")?;
    let dir = crate::root().join("target/bench");
    let args = ["plain", "1", "200000"];
    let mut results: Vec<(&str, Vec<f64>, PathBuf)> = vec![
        ("native", Vec::new(), PathBuf::new()),
        ("record, no watch", Vec::new(), dir.join("w0.ordo")),
        ("record --watch hits", Vec::new(), dir.join("w1.ordo")),
        ("record --watch-hw hits", Vec::new(), dir.join("w2.ordo")),
    ];
    for _ in 0..RUNS {
        for (label, times, trace) in results.iter_mut() {
            let mut cmd = if *label == "native" {
                Command::new(&program)
            } else {
                let mut c = Command::new(&ordo);
                c.arg("record").arg("-o").arg(&*trace);
                if label.contains("--watch-hw") {
                    c.args(["--watch-hw", "hits"]);
                } else if label.contains("--watch") {
                    c.args(["--watch", "hits"]);
                }
                c.arg("--").arg(&program);
                c
            };
            if *label == "native" {
                times.push(time(cmd.args(args))?);
            } else {
                times.push(recorded_run(&ordo, cmd.args(args), trace)?.1);
            }
        }
    }
    println!(
        "bench watch: 1 thread, 200000 x (lock; read hits; write hits; unlock), median of {RUNS}; recorded runs timed from their first to last event"
    );
    let base = median(results[1].1.clone());
    let native = median(results[0].1.clone());
    for (label, times, trace) in &results {
        let t = median(times.clone());
        let mut line = format!(
            "  {label:<24} {:>8.1} ms   ({:.1}x native)",
            t * 1e3,
            t / native
        );
        if label.contains("watch") {
            let stats = trace_stats(&ordo, trace)?;
            let accesses = stats["by_kind"]["read"].as_u64().unwrap_or(0)
                + stats["by_kind"]["write"].as_u64().unwrap_or(0);
            line.push_str(&format!(
                ", {accesses} accesses recorded, {:.2} us per access over recording without watches",
                (t - base) * 1e6 / accesses.max(1) as f64
            ));
        }
        println!("{line}");
    }
    Ok(())
}
