//! `cargo xtask bench hunt`: what one iteration of `ordo hunt` costs beyond the
//! program's own run time, on a short correct program (so every hunt spends its
//! whole budget), with one run at a time and with the default `--jobs`, next to
//! the pieces an iteration is made of (a replay, a recorded replay, an analysis).
//! Medians of interleaved repetitions: these machines are noisy.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};

const REPS: usize = 3;
const BUDGET: u32 = 10;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Wall time of a command that must exit with one of `ok` statuses.
fn time(cmd: &mut Command, ok: &[i32]) -> Result<f64> {
    let started = Instant::now();
    let out = cmd.output().with_context(|| format!("run {cmd:?}"))?;
    if !out.status.code().is_some_and(|c| ok.contains(&c)) {
        bail!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(started.elapsed().as_secs_f64())
}

/// Seconds per run of a PCT hunt that spends its budget.
fn hunt_per_run(ordo: &Path, program: &Path, dir: &Path, jobs: Option<&str>) -> Result<f64> {
    let mut cmd = Command::new(ordo);
    cmd.args(["hunt", "--json", "--strategy", "pct", "--confirm", "0"])
        .args(["--budget", &BUDGET.to_string()])
        .arg("-o")
        .arg(dir);
    if let Some(j) = jobs {
        cmd.args(["--jobs", j]);
    }
    let out = cmd.arg("--").arg(program).output()?;
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("ordo hunt: {}", String::from_utf8_lossy(&out.stderr)))?;
    if json["reproduced"] != false {
        bail!("the correct program failed under hunt: {json}");
    }
    let runs = json["runs"].as_f64().unwrap_or(1.0);
    Ok(json["search_ms"].as_f64().unwrap_or(0.0) / 1e3 / runs)
}

pub fn run_hunt() -> Result<()> {
    let ordo = crate::ordo_release()?;
    let dir = crate::root().join("target/bench/hunt");
    std::fs::create_dir_all(&dir)?;
    let program = dir.join("analyze_correct");
    crate::compile_c(
        &crate::root().join("tests/programs/analyze_correct.c"),
        &program,
        &[],
    )?;
    let schedule = dir.join("empty.sched");
    std::fs::write(&schedule, "")?;
    let trace = dir.join("replay.ordo");
    let labels = [
        "program alone",
        "ordo replay (empty schedule)",
        "ordo replay --record",
        "ordo analyze of that recording",
        "hunt iteration, --jobs 1",
        "hunt iteration, default --jobs",
    ];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); labels.len()];
    for _ in 0..REPS {
        times[0].push(time(&mut Command::new(&program), &[0])?);
        let replay = |record: bool| {
            let mut c = Command::new(&ordo);
            c.arg("replay").arg("--schedule").arg(&schedule);
            if record {
                c.arg("--record").arg(&trace);
            }
            c.arg("--").arg(&program);
            c
        };
        times[1].push(time(&mut replay(false), &[0])?);
        times[2].push(time(&mut replay(true), &[0])?);
        times[3].push(time(Command::new(&ordo).arg("analyze").arg(&trace), &[0])?);
        times[4].push(hunt_per_run(&ordo, &program, &dir.join("h1"), Some("1"))?);
        times[5].push(hunt_per_run(&ordo, &program, &dir.join("hn"), None)?);
    }
    println!(
        "bench hunt: tests/programs/analyze_correct.c, PCT hunts of {BUDGET} runs, median of {REPS}"
    );
    let program_time = median(times[0].clone());
    for (label, t) in labels.iter().zip(times) {
        let t = median(t);
        let mut line = format!("  {label:<34} {:>8.1} ms", t * 1e3);
        if label.starts_with("hunt") {
            line.push_str(&format!(
                "   ({:.1} ms over the program's run time)",
                (t - program_time) * 1e3
            ));
        }
        println!("{line}");
    }
    Ok(())
}
