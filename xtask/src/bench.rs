//! `cargo xtask bench`: benchmarks, each printing ratios measured side by side in
//! one run (these machines are noisy).
//!
//! - `analysis`: `ordo analyze` throughput and peak memory at two trace lengths.
//! - `record`: the slowdown of recording a lock-heavy program, native vs recorded.
//! - `watch`: the per-access cost of each watch mechanism.
//!
//! `cargo xtask bench` runs them all; `cargo xtask bench NAME…` runs some.

use anyhow::{bail, Result};

pub fn run(args: &[String]) -> Result<()> {
    let all = ["record", "watch", "analysis"];
    let chosen: Vec<&str> = if args.is_empty() {
        all.to_vec()
    } else {
        args.iter().map(String::as_str).collect()
    };
    for name in chosen {
        match name {
            "analysis" => crate::bench_analysis::run()?,
            "record" => crate::bench_record::run_record()?,
            "watch" => crate::bench_record::run_watch()?,
            other => bail!(
                "unknown benchmark `{other}` (choose from {})",
                all.join(", ")
            ),
        }
    }
    Ok(())
}
