//! `cargo xtask bench watch`: the per-access cost of each variable-watch mechanism
//! (instruction-site uprobes, hardware watchpoints), recorded runs timed from their
//! first to their last event, median of several runs interleaved.

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
                c.args(["record", "--force", "-o"]).arg(&*trace);
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

/// The value after `key ` on a line of `text` (`span_ns 123`).
fn printed_number(text: &str, key: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
}

/// `cargo xtask bench gate`: what a memory-access gate costs in replay. A worker
/// reads a watched variable `ITERS` times (one instruction); the program times its
/// own loop. Side by side, median of several interleaved runs: native; `ordo replay`
/// with an empty schedule; a schedule gating the first read only (the breakpoint is
/// disarmed after it: the other reads run at full speed); and one naming the last
/// read, so every read before it traps to be counted (the per-trap cost).
pub fn run_gate() -> Result<()> {
    const ITERS: u64 = 20_000;
    let ordo = crate::ordo_release()?;
    let dir = crate::root().join("target/bench");
    std::fs::create_dir_all(&dir)?;
    let program = dir.join("gate_bench");
    crate::compile_c(
        &crate::root().join("bench/programs/gate_bench.c"),
        &program,
        &[],
    )?;
    let schedules = [
        ("native", None),
        ("replay, empty schedule", Some(String::new())),
        (
            "replay, first read gated",
            Some("0:write(level)#1 -> 1:read(level)#1\n".to_string()),
        ),
        (
            "replay, every read trapped",
            Some(format!("0:write(level)#1 -> 1:read(level)#{ITERS}\n")),
        ),
    ];
    let mut spans: Vec<Vec<f64>> = vec![Vec::new(); schedules.len()];
    for _ in 0..RUNS {
        for (i, (label, schedule)) in schedules.iter().enumerate() {
            let out = match schedule {
                None => Command::new(&program).arg(ITERS.to_string()).output()?,
                Some(text) => {
                    let file = dir.join(format!("gate{i}.sched"));
                    std::fs::write(&file, text)?;
                    Command::new(&ordo)
                        .args(["replay", "--schedule"])
                        .arg(&file)
                        .arg("--")
                        .arg(&program)
                        .arg(ITERS.to_string())
                        .output()?
                }
            };
            let text = String::from_utf8_lossy(&out.stdout);
            let span = printed_number(&text, "span_ns")
                .with_context(|| format!("{label}: no span printed: {text}"))?;
            spans[i].push(span);
        }
    }
    println!("bench gate: 1 worker, {ITERS} reads of a watched variable, median of {RUNS}; the program times its loop");
    let native = median(spans[0].clone());
    for (i, (label, _)) in schedules.iter().enumerate() {
        let t = median(spans[i].clone());
        let mut line = format!("  {label:<28} {:>12.3} ms", t / 1e6);
        if i == schedules.len() - 1 {
            line.push_str(&format!(
                "   {:.2} us per trapped read",
                (t - native) / 1e3 / ITERS as f64
            ));
        } else {
            line.push_str(&format!("   {:.2} ns per read", t / ITERS as f64));
        }
        println!("{line}");
    }
    Ok(())
}
