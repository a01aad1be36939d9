//! `ordo`: record, analyze and replay the synchronization of multithreaded Linux
//! programs. This binary only parses arguments; each subcommand lives in its own
//! module, over the library crates.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod analyze;
mod dump;
mod hunt;
mod oracle_args;
mod record;
mod replay;

/// Make concurrency bugs in native Linux programs reproducible.
#[derive(Parser)]
#[command(name = "ordo", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Record a program's synchronization events (in process by default, eBPF where the agent cannot go).
    Record(record::RecordArgs),
    /// Print a trace's events.
    Dump(dump::DumpArgs),
    /// Find races, deadlocks, condvar bugs and candidate reorderings in a trace.
    Analyze(analyze::AnalyzeArgs),
    /// Convert a trace for other tools.
    Export(analyze::ExportArgs),
    /// Rerun a program enforcing a schedule.
    #[command(
        after_help = "Exit status: 0 passed, 1 reproduced, 2 error, 3 infeasible, 4 not_exercised (docs/REPLAY.md)."
    )]
    Replay(replay::ReplayArgs),
    /// Find a concurrency bug by itself: record, analyze, replay candidates (or
    /// PCT / random-walk runs) until one fails, then pin it as a schedule file.
    Hunt(hunt::HuntArgs),
}

/// Writes one line to stderr, ignoring failure: `eprintln!` panics when stderr is
/// closed (`ordo dump x 2>&-`), and an error report must never become a panic.
pub fn print_error_line(line: &str) {
    use std::io::Write;
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}");
}

fn main() -> ExitCode {
    ordo_recorder::phase("main");
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help, --version: clap prints them (ignoring a closed stdout).
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // One line: clap's message without its "error: " prefix and usage hints.
            let text = e.to_string();
            let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            print_error_line(&format!("ordo: {first} (see --help)"));
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Command::Record(args) => record::run(args),
        Command::Dump(args) => dump::run(args),
        Command::Analyze(args) => analyze::run(args),
        Command::Export(args) => analyze::export(args),
        Command::Replay(args) => replay::run(args),
        Command::Hunt(args) => hunt::run(args),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(err)
            if err.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            ExitCode::SUCCESS
        }
        Err(err) => {
            // One line: the chain of causes, outermost first.
            let mut line = err.to_string();
            for cause in err.chain().skip(1) {
                line.push_str(": ");
                line.push_str(&cause.to_string());
            }
            print_error_line(&format!("ordo: {line}"));
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_command_line_definition_is_consistent() {
        super::Cli::command().debug_assert();
    }

    #[test]
    fn record_rejects_bad_durations_and_env_pairs_while_parsing() {
        use clap::Parser;
        for args in [
            &["ordo", "record", "--pid", "1", "--duration", "0"][..],
            &["ordo", "record", "--pid", "1", "--duration", "soon"],
            &["ordo", "record", "--env", "NOEQUALS", "--", "true"],
        ] {
            assert!(super::Cli::try_parse_from(args).is_err(), "{args:?}");
        }
        assert!(
            super::Cli::try_parse_from(["ordo", "record", "--pid", "1", "--duration", "0.5"])
                .is_ok()
        );
    }
}
