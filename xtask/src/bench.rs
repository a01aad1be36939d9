//! `cargo xtask bench`: benchmarks, each printing ratios measured side by side in
//! one run (these machines are noisy).
//!
//! - `analysis`: `ordo analyze` throughput and peak memory at two trace lengths.
//! - `record`: what recording costs, against native, bpftrace, empty probes, TSan,
//!   helgrind and LTTng-UST, on micro-benchmarks, pigz and memcached
//!   (`record [--quick] [--only W,...] [--reps N] [--recorders R,...]`; docs/BENCHMARKS.md).
//! - `watch`: the per-access cost of each watch mechanism.
//! - `hunt`: what one `ordo hunt` iteration costs beyond the program's run time.
//! - `gate`: the cost of replay's memory-access gates (a trap per counted access).
//! - `discover`: `ordo record --discover` against the program alone and a plain
//!   recording, on every eval program and pigz.
//!
//! `cargo xtask bench` runs them all; `cargo xtask bench NAME [OPTIONS]…` runs some.

use anyhow::{bail, Result};

const ALL: [&str; 6] = ["record", "watch", "gate", "analysis", "hunt", "discover"];

/// Splits `NAME [--options…] NAME …` into (name, its options).
fn groups(args: &[String]) -> Result<Vec<(String, Vec<String>)>> {
    if args.is_empty() {
        return Ok(ALL.iter().map(|n| (n.to_string(), Vec::new())).collect());
    }
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for a in args {
        if ALL.contains(&a.as_str()) {
            out.push((a.clone(), Vec::new()));
        } else if let Some(last) = out.last_mut() {
            last.1.push(a.clone());
        } else {
            bail!("unknown benchmark `{a}` (choose from {})", ALL.join(", "));
        }
    }
    Ok(out)
}

pub fn run(args: &[String]) -> Result<()> {
    for (name, options) in groups(args)? {
        if name != "record" && !options.is_empty() {
            bail!("bench {name} takes no options (got {})", options.join(" "));
        }
        match name.as_str() {
            "analysis" => crate::bench_analysis::run()?,
            "record" => crate::bench_record::run_record(&options)?,
            "watch" => crate::bench_watch::run_watch()?,
            "gate" => crate::bench_watch::run_gate()?,
            "hunt" => crate::bench_hunt::run_hunt()?,
            "discover" => crate::bench_discover::run_discover()?,
            other => bail!(
                "unknown benchmark `{other}` (choose from {})",
                ALL.join(", ")
            ),
        }
    }
    Ok(())
}
