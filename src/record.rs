//! `ordo record`.
use clap::Args;
#[derive(Args)]
pub struct RecordArgs {
    #[arg(last = true)]
    pub command: Vec<String>,
}
pub fn run(_args: RecordArgs) -> anyhow::Result<u8> {
    anyhow::bail!("not built yet")
}
