//! The oracle's command-line options (`--expect-exit`, `--fail-on`), shared by
//! `ordo replay` and `ordo hunt`: flatten [`OracleArgs`] into a subcommand's
//! arguments and turn it into an [`ordo_replayer::Oracle`].

use clap::Args;
use ordo_replayer::{FailOn, Oracle};

/// What counts as the bug showing in a run of the program.
#[derive(Args, Clone, Debug, Default)]
pub struct OracleArgs {
    /// The program's normal exit status: any other counts as a failure (with
    /// `--fail-on exit`).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        allow_hyphen_values = true
    )]
    pub expect_exit: u8,
    /// What counts as a failure: `exit` (an exit status other than --expect-exit),
    /// `signal`, `hang` (deadlock or timeout), `sanitizer` (a sanitizer report on
    /// stderr), `stderr:REGEX` (a stderr line matches; stderr is still shown).
    /// Repeatable; default: exit, signal, hang and sanitizer.
    #[arg(long = "fail-on", value_name = "WHEN", value_parser = clap::value_parser!(FailOn))]
    pub fail_on: Vec<FailOn>,
}

impl OracleArgs {
    /// The oracle these options describe.
    pub fn oracle(&self) -> Oracle {
        Oracle::new(i32::from(self.expect_exit), self.fail_on.clone())
    }
}

impl From<OracleArgs> for Oracle {
    fn from(args: OracleArgs) -> Oracle {
        Oracle::new(i32::from(args.expect_exit), args.fail_on)
    }
}
