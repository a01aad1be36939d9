//! `cargo xtask bench`: benchmarks, each printing ratios measured side by side in
//! one run (these machines are noisy).

use anyhow::Result;

pub fn run(_args: &[String]) -> Result<()> {
    Ok(())
}
