//! `cargo xtask bench discover`: what discovering shared memory costs (issue 25:
//! ≤ 20× a plain run on the eval programs). For every program of the eval suite,
//! interleaved repetitions of the program alone, `ordo record` and `ordo record
//! --discover` (wall time of the whole command, as a user waits for it); then
//! Debian's pigz compressing 64 MiB with 2 threads, a larger program. Medians.
//! Results go to `bench/results/discover-YYYYMMDD-HHMMSS.json`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result};
use serde_json::json;

const REPS: usize = 5;
/// The target: discovery ≤ this many times a plain run.
const TARGET: f64 = 20.0;
const PIGZ_MB: u64 = 64;
const RUN_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

fn median(v: Vec<f64>) -> f64 {
    crate::bench_record::report::median(v).unwrap_or(f64::NAN)
}

/// Wall time of `cmd` in seconds (any exit status: bug programs may fail). A run
/// still going after [`RUN_LIMIT`] (a bug program that deadlocked by itself) is
/// killed, and its time counts as is.
fn time(cmd: &mut Command) -> Result<f64> {
    let started = Instant::now();
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("run {cmd:?}"))?;
    let pid = child.id() as i32;
    let (done, finished) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = finished.recv_timeout(RUN_LIMIT) {
            // SAFETY: kill has no memory effects; the child is not reaped yet.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    });
    child.wait()?;
    let elapsed = started.elapsed().as_secs_f64();
    drop(done);
    let _ = watchdog.join();
    Ok(elapsed)
}

/// Medians of (program alone, `ordo record`, `ordo record --discover`), then
/// one `ordo record --discover` with no plan kept (a first recording of the
/// binary: the cache in `dir/plans` emptied first; the medians keep what it planned,
/// as a hunt's recordings after its first do).
fn measure(ordo: &Path, dir: &Path, program: &Path, args: &[&str]) -> Result<[f64; 4]> {
    let trace = dir.join("bench.ordo");
    let cache = dir.join("plans");
    let record = |discover: bool| {
        let mut c = Command::new(ordo);
        c.env("ORDO_CACHE_DIR", &cache);
        c.args(["record", "--force", "-o"]).arg(&trace);
        if discover {
            c.arg("--discover");
        }
        c.arg("--").arg(program).args(args);
        c
    };
    let _ = std::fs::remove_dir_all(&cache);
    let cold = time(&mut record(true))?;
    let mut times: [Vec<f64>; 3] = Default::default();
    for _ in 0..REPS {
        times[0].push(time(Command::new(program).args(args))?);
        times[1].push(time(&mut record(false))?);
        times[2].push(time(&mut record(true))?);
    }
    let [alone, record, discover] = times.map(median);
    Ok([alone, record, discover, cold])
}

pub fn run_discover() -> Result<()> {
    let ordo = crate::ordo_release()?;
    let dir = crate::root().join("target/bench/discover");
    std::fs::create_dir_all(&dir)?;
    let programs = crate::eval::suite_binaries()?;
    println!(
        "bench discover: wall time of the program, `ordo record` and `ordo record --discover`, median of {REPS} interleaved runs with the binary's plans kept; `first`: one `--discover` with nothing kept"
    );
    println!(
        "  {:<30} {:>9} {:>9} {:>9} {:>10} {:>10} {:>10}",
        "program", "alone", "record", "discover", "÷ alone", "÷ record", "first"
    );
    let mut rows = Vec::new();
    let mut line = |name: &str, [alone, record, discover, cold]: [f64; 4]| {
        println!(
            "  {name:<30} {:>6.1} ms {:>6.1} ms {:>6.1} ms {:>9.1}× {:>9.2}× {:>7.1} ms",
            alone * 1e3,
            record * 1e3,
            discover * 1e3,
            discover / alone,
            discover / record,
            cold * 1e3
        );
        rows.push(json!({
            "program": name,
            "alone_ms": alone * 1e3,
            "record_ms": record * 1e3,
            "discover_ms": discover * 1e3,
            "first_discover_ms": cold * 1e3,
        }));
        (discover / alone, cold / alone)
    };
    let mut worst: Option<(f64, String)> = None;
    let mut ratios = Vec::new();
    let mut first_ratios = Vec::new();
    for (name, binary, _control) in &programs {
        let (ratio, first) = line(name, measure(&ordo, &dir, binary, &[])?);
        ratios.push(ratio);
        first_ratios.push(first);
        if worst.as_ref().is_none_or(|(w, _)| ratio > *w) {
            worst = Some((ratio, name.clone()));
        }
    }
    // The larger program the issue asks for; installed when missing.
    if let Err(e) = crate::setup::apt_install(&["pigz"]) {
        eprintln!("xtask: bench discover: {e:#}");
    }
    let pigz = Command::new("pigz").arg("--version").output().is_ok();
    if pigz {
        let input = crate::bench_record::pigz_input(&dir, PIGZ_MB)?;
        let input = input.to_string_lossy().into_owned();
        line(
            &format!("pigz -p 2, {PIGZ_MB} MiB"),
            measure(
                &ordo,
                &dir,
                Path::new("/usr/bin/pigz"),
                &["-p", "2", "-c", "-k", &input],
            )?,
        );
    } else {
        println!("  pigz: not installed (apt install pigz), not measured");
    }
    let (worst_ratio, worst_name) = worst.context("the eval suite has no programs")?;
    let within = ratios.iter().filter(|r| **r <= TARGET).count();
    println!(
        "issue 25: discovery ≤ {TARGET}× a plain run on the eval programs: {within} of {} within; median {:.1}×, worst {worst_ratio:.1}× ({worst_name}) — {}",
        ratios.len(),
        median(ratios.clone()),
        if worst_ratio <= TARGET { "met" } else { "missed" }
    );
    let first_within = first_ratios.iter().filter(|r| **r <= TARGET).count();
    println!(
        "  a first recording (nothing kept): {first_within} of {} within {TARGET}×; median {:.1}×",
        first_ratios.len(),
        median(first_ratios.clone())
    );
    let results = crate::root().join("bench/results");
    std::fs::create_dir_all(&results)?;
    let path = results.join(format!(
        "discover-{}.json",
        crate::bench_record::timestamp()
    ));
    std::fs::write(
        &path,
        serde_json::to_string_pretty(&json!({
            "benchmark": "discover",
            "reps": REPS,
            "rows": rows,
            "target_ratio": TARGET,
            "within_target": within,
            "first_within_target": first_within,
            "programs": ratios.len(),
        }))?,
    )?;
    println!("results: {}", path.display());
    Ok(())
}
