//! `ordo dump`.
use clap::Args;
#[derive(Args)]
pub struct DumpArgs {
    pub trace: std::path::PathBuf,
}
pub fn run(_args: DumpArgs) -> anyhow::Result<u8> {
    anyhow::bail!("not built yet")
}
