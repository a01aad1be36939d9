//! `ordo analyze` and `ordo export`: findings and candidate reorderings of a trace,
//! and the trace as a Perfetto timeline. The logic lives in `ordo-analysis`.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

/// Arguments of `ordo analyze`.
#[derive(Args)]
pub struct AnalyzeArgs {
    /// The trace to analyze.
    pub trace: PathBuf,
    /// Print one JSON document instead of the text report.
    #[arg(long)]
    pub json: bool,
    /// In the text report, how many findings of each kind to print in full.
    #[arg(long, default_value_t = 20, value_name = "N")]
    pub limit: usize,
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

/// Runs `ordo analyze`: exit 0 when the analysis ran (with or without findings).
pub fn run(args: AnalyzeArgs) -> anyhow::Result<u8> {
    let analysis = ordo_analysis::analyze_trace(&args.trace)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer(&mut out, &analysis.to_json())?;
        writeln!(out)?;
    } else {
        out.write_all(analysis.to_text(args.limit).as_bytes())?;
    }
    Ok(0)
}

/// Runs `ordo export`.
pub fn export(args: ExportArgs) -> anyhow::Result<u8> {
    if !args.perfetto {
        anyhow::bail!("ordo export: choose an output format (--perfetto)");
    }
    let stats = ordo_analysis::perfetto::export_perfetto(&args.trace, &args.output)
        .with_context(|| format!("exporting {}", args.trace.display()))?;
    eprintln!(
        "wrote {}: {} packets, {} slices, {} happens-before arrows (open it at https://ui.perfetto.dev)",
        args.output.display(),
        stats.packets,
        stats.slices,
        stats.flows
    );
    Ok(0)
}
