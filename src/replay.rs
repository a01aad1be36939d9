//! `ordo replay`: rerun a program enforcing a schedule.

use clap::Args;

/// Arguments of `ordo replay`.
#[derive(Args)]
pub struct ReplayArgs {
    /// The command to run.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

pub fn run(_args: ReplayArgs) -> anyhow::Result<u8> {
    anyhow::bail!("ordo replay is not built yet")
}
