//! `ordo analyze` and `ordo export`: findings and candidate reorderings of a trace.

use clap::Args;
use std::path::PathBuf;

/// Arguments of `ordo analyze`.
#[derive(Args)]
pub struct AnalyzeArgs {
    /// The trace to analyze.
    pub trace: PathBuf,
    /// Print one JSON document instead of the text report.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `ordo export`.
#[derive(Args)]
pub struct ExportArgs {
    /// The trace to convert.
    pub trace: PathBuf,
    /// Write a Perfetto trace (protobuf TrackEvent).
    #[arg(long)]
    pub perfetto: bool,
    /// Output file.
    #[arg(short, long)]
    pub output: PathBuf,
}

pub fn run(_args: AnalyzeArgs) -> anyhow::Result<u8> {
    anyhow::bail!("ordo analyze is not built yet")
}

pub fn export(_args: ExportArgs) -> anyhow::Result<u8> {
    anyhow::bail!("ordo export is not built yet")
}
