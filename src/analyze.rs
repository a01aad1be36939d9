//! `ordo analyze` and `ordo export`: findings and candidate reorderings of a trace,
//! and the trace as a Perfetto timeline. The logic lives in `ordo-analysis`.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use ordo_trace::text::escape;
use ordo_trace::{ReadMode, TraceError};

/// Arguments of `ordo analyze`.
#[derive(Args)]
pub struct AnalyzeArgs {
    /// The trace to analyze.
    pub trace: PathBuf,
    /// Print one JSON document instead of the text report (`--format json`).
    #[arg(long)]
    pub json: bool,
    /// What to print: the text report, one JSON document, or a SARIF 2.1.0 log
    /// (for CI code scanning and editors).
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// In the text report, how many findings of each kind to print in full.
    #[arg(long, default_value_t = 20, value_name = "N")]
    pub limit: usize,
    /// Analyze a damaged trace up to its last intact chunk instead of failing.
    #[arg(long)]
    pub salvage: bool,
}

/// `ordo analyze --format`.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// The text report.
    Text,
    /// One JSON document.
    Json,
    /// A SARIF 2.1.0 log.
    Sarif,
}

/// Arguments of `ordo export`.
#[derive(Args)]
pub struct ExportArgs {
    /// The trace to convert.
    pub trace: PathBuf,
    /// Write a Perfetto trace (protobuf TrackEvent).
    #[arg(long)]
    pub perfetto: bool,
    /// Output file (never the trace itself; an existing file only with --force).
    #[arg(short, long)]
    pub output: PathBuf,
    /// Replace the output file if it exists.
    #[arg(long)]
    pub force: bool,
    /// Export one finding's interleaving only: its threads from its first event
    /// to its last, its own events marked `★`. `KIND:N` is the N-th finding of
    /// that kind as `ordo analyze` prints it (`race:1`), a bare `N` the N-th of
    /// `ordo analyze --json`'s list.
    #[arg(long, value_name = "KIND:N|N")]
    pub finding: Option<String>,
}

/// Runs `ordo analyze`: exit 0 when the analysis ran (with or without findings).
pub fn run(args: AnalyzeArgs) -> anyhow::Result<u8> {
    let mode = if args.salvage {
        ReadMode::Salvage
    } else {
        ReadMode::Strict
    };
    let progress = ordo_recorder::progress::Progress::bytes("analyzing");
    let analysis = ordo_analysis::analyze_trace_progress(&args.trace, mode, &|done, total| {
        if done >= total {
            progress.say("analyzing: findings");
        }
        progress.set(done, total)
    })
    .map_err(|e| salvage_hint(e, mode))?;
    drop(progress);
    if let Some(cut) = &analysis.stats.cut_short {
        crate::print_error_line(&format!("ordo: warning: {}", escape(cut)));
    }
    let mut out = std::io::stdout().lock();
    let format = if args.json { Format::Json } else { args.format };
    if format == Format::Json {
        serde_json::to_writer(&mut out, &analysis.to_json())?;
        writeln!(out)?;
    } else if format == Format::Sarif {
        serde_json::to_writer_pretty(&mut out, &analysis.to_sarif())?;
        writeln!(out)?;
    } else {
        // Sites name symbols and module paths the trace points at: escaped.
        for line in analysis.to_text(args.limit).lines() {
            writeln!(out, "{}", escape(line))?;
        }
    }
    Ok(0)
}

/// Runs `ordo export`.
pub fn export(args: ExportArgs) -> anyhow::Result<u8> {
    if !args.perfetto {
        anyhow::bail!("ordo export: choose an output format (--perfetto)");
    }
    let stats = match &args.finding {
        None => ordo_analysis::perfetto::export_perfetto(&args.trace, &args.output, args.force),
        Some(spec) => {
            let analysis = ordo_analysis::analyze_trace(&args.trace)
                .map_err(|e| salvage_hint(e, ReadMode::Strict))?;
            let finding = pick_finding(&analysis.findings, spec)?;
            ordo_analysis::perfetto::export_perfetto_finding(
                &args.trace,
                &args.output,
                args.force,
                finding,
            )
        }
    }
    .with_context(|| format!("exporting {}", args.trace.display()))?;
    crate::print_error_line(&format!(
        "wrote {}: {} packets, {} slices, {} happens-before arrows (open it at https://ui.perfetto.dev)",
        args.output.display(),
        stats.packets,
        stats.slices,
        stats.flows
    ));
    Ok(0)
}

/// The finding `--finding SPEC` names: `KIND:N` (the N-th of that kind, as `ordo
/// analyze` numbers them) or `N` (the N-th of the JSON list), 1-based.
fn pick_finding<'a>(
    findings: &'a [ordo_analysis::Finding],
    spec: &str,
) -> anyhow::Result<&'a ordo_analysis::Finding> {
    let number = |text: &str| -> anyhow::Result<usize> {
        text.parse::<usize>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| anyhow::anyhow!("--finding {spec}: `{text}` is not a number from 1"))
    };
    match spec.split_once(':') {
        Some((kind, n)) => {
            let kind = ordo_analysis::FindingKind::from_name(kind).ok_or_else(|| {
                anyhow::anyhow!(
                    "--finding {spec}: no finding kind `{kind}` (`ordo analyze` prints the kinds)"
                )
            })?;
            let n = number(n)?;
            let of_kind: Vec<_> = findings.iter().filter(|f| f.kind == kind).collect();
            of_kind.get(n - 1).copied().ok_or_else(|| {
                anyhow::anyhow!(
                    "--finding {spec}: the trace has {} {} finding(s)",
                    of_kind.len(),
                    kind.name()
                )
            })
        }
        None => {
            let n = number(spec)?;
            findings.get(n - 1).ok_or_else(|| {
                anyhow::anyhow!(
                    "--finding {spec}: the trace has {} finding(s)",
                    findings.len()
                )
            })
        }
    }
}

/// A strict read that failed past the header: say that `--salvage` reads what is
/// intact.
pub fn salvage_hint(e: TraceError, mode: ReadMode) -> anyhow::Error {
    if mode == ReadMode::Strict && e.kind == ordo_trace::TraceErrorKind::Damaged {
        anyhow::anyhow!("{e} (--salvage reads the intact chunks)")
    } else {
        e.into()
    }
}
