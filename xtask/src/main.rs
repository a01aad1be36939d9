//! ordo's developer tasks: `cargo xtask setup | test | demo | bench | eval | fuzz`.
//!
//! `setup` installs what the eBPF build needs on a fresh Debian 12 machine and is
//! fast when everything is present; `test` and `demo` run it first, so the README's
//! two commands work on a new machine.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::{bail, Context, Result};

mod bench;
mod bench_analysis;
mod bench_discover;
mod bench_hunt;
mod bench_record;
mod bench_watch;
mod eval;
mod fuzz;
mod setup;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn usage() -> ExitCode {
    eprintln!(
        "usage: cargo xtask <task>\n\n\
         tasks:\n  \
         setup   install the eBPF toolchain (Debian rustc-web, libstd-rust-web-dev-bpf, bpf-linker)\n  \
         test    setup, then run every test and a short run of each fuzz target\n  \
         demo    setup, then record, analyze and replay the bundled demo program\n  \
         bench   setup, then run the benchmarks\n  \
         eval    run `ordo hunt` on the evaluation suite tests/eval, write docs/EVALUATION.md (--help)\n  \
         fuzz    fuzz the trace reader, schedule and --watch parsers, 10 M runs each (--help)"
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("setup") => setup::run(),
        Some("test") => setup::run().and_then(|_| test(&args[1..])),
        Some("demo") => setup::run().and_then(|_| demo()),
        Some("bench") => setup::run().and_then(|_| bench::run(&args[1..])),
        // eval parses its options first (so `--help` needs nothing installed) and
        // runs setup itself when it builds ordo.
        Some("eval") => eval::run(&args[1..]),
        // fuzz installs only what it needs (nightly, cargo-fuzz), after parsing its options.
        Some("fuzz") => fuzz::run(&args[1..]),
        _ => return usage(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs a command in the workspace root, failing if it fails.
pub fn run(cmd: &mut Command) -> Result<()> {
    let shown = format!("{cmd:?}");
    let status = cmd
        .current_dir(root())
        .status()
        .with_context(|| format!("run {shown}"))?;
    if !status.success() {
        bail!("{shown} failed ({status})");
    }
    Ok(())
}

fn test(extra: &[String]) -> Result<()> {
    let started = Instant::now();
    // Build first so a compile error is reported once, not per test binary.
    run(Command::new("cargo").args(["build", "--workspace", "--all-targets"]))?;
    run(Command::new("cargo")
        .args(["test", "--workspace", "--no-fail-fast"])
        .args(extra))?;
    // The parsers of untrusted input, a few seconds each (`cargo xtask fuzz` for long).
    fuzz::short()?;
    eprintln!(
        "xtask: all tests passed in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The ordo binary built by `cargo build --release`.
pub fn ordo_release() -> Result<PathBuf> {
    run(Command::new("cargo").args(["build", "--release", "--bin", "ordo"]))?;
    Ok(root().join("target/release/ordo"))
}

/// Compiles a C program with debug info.
pub fn compile_c(src: &Path, out: &Path, extra: &[&str]) -> Result<()> {
    run(Command::new("cc")
        .args(["-O1", "-g", "-pthread"])
        .args(extra)
        .arg("-o")
        .arg(out)
        .arg(src))
}

fn demo() -> Result<()> {
    let ordo = ordo_release()?;
    let dir = root().join("target/demo");
    std::fs::create_dir_all(&dir)?;
    let program = dir.join("bank");
    compile_c(&root().join("demo/bank.c"), &program, &[])?;
    let trace = dir.join("bank.ordo");
    println!(
        "\n== 1. record: ordo record --force -o {} -- {}",
        trace.display(),
        program.display()
    );
    let status = Command::new(&ordo)
        .args(["record", "--force", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(&program)
        .status()?;
    println!("(the demo exited with {status}; its bug rarely shows in a plain run)");
    println!("\n== 2. the trace: ordo dump --stats");
    run(Command::new(&ordo).arg("dump").arg("--stats").arg(&trace))?;
    println!("\n== first events: ordo dump");
    let dump = Command::new(&ordo).arg("dump").arg(&trace).output()?;
    for line in String::from_utf8_lossy(&dump.stdout)
        .lines()
        .filter(|l| l.contains("account_lock") || l.starts_with('#'))
        .take(16)
    {
        println!("{line}");
    }
    demo_analyze_and_replay(&ordo, &program, &trace, &dir)
}

fn demo_analyze_and_replay(ordo: &Path, program: &Path, trace: &Path, dir: &Path) -> Result<()> {
    println!("\n== 3. analyze: ordo analyze");
    let analysis = Command::new(ordo).arg("analyze").arg(trace).output()?;
    print!("{}", String::from_utf8_lossy(&analysis.stdout));
    eprint!("{}", String::from_utf8_lossy(&analysis.stderr));
    if !analysis.status.success() {
        bail!("ordo analyze failed");
    }
    let json = Command::new(ordo)
        .arg("analyze")
        .arg("--json")
        .arg(trace)
        .output()?;
    let doc: serde_json::Value =
        serde_json::from_slice(&json.stdout).context("ordo analyze --json output")?;
    let findings = doc["findings"].as_array().cloned().unwrap_or_default();
    let Some(top) = findings
        .iter()
        .find(|f| f["kind"] == "atomicity")
        .or(findings.first())
    else {
        bail!("the analysis found no candidate for the demo");
    };
    let schedule = dir.join("candidate.sched");
    std::fs::write(&schedule, top["schedule"].as_str().unwrap_or_default())?;
    println!(
        "\n== 4. replay the top candidate ({}): ordo replay --schedule {}",
        top["kind"],
        schedule.display()
    );
    println!("{}", std::fs::read_to_string(&schedule)?);
    for attempt in 1..=3 {
        let out = Command::new(ordo)
            .arg("replay")
            .arg("--schedule")
            .arg(&schedule)
            .arg("--json")
            .arg("--")
            .arg(program)
            .output()?;
        let verdict: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        println!(
            "replay {attempt}: {}",
            String::from_utf8_lossy(&out.stdout).trim()
        );
        if verdict["verdict"] != "reproduced" {
            bail!(
                "the candidate did not reproduce the bug: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    println!(
        "\nThe bug reproduced on every replay: {} is the failing schedule.",
        schedule.display()
    );
    Ok(())
}
