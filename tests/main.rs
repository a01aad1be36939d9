//! ordo's end-to-end tests, one binary (as ripgrep's `tests/tests.rs`): the C, C++
//! and Rust programs under `tests/programs/` recorded, analyzed and replayed by the
//! `ordo` binary as a user runs it. One module per area; `common` builds the
//! programs, runs `ordo` and skips a test that needs root when it lacks it.
//! `cargo test --test end_to_end record::` runs one module.

#[macro_use]
mod common;

// `ordo analyze` and `ordo export`: traces made by hand, recorded bug programs,
// correct programs, one program per candidate shape, the evaluation suite.
mod analyze_cli;
mod analyze_correct_set;
mod analyze_recorded;
mod analyze_shapes;
mod eval_suite;

// Shared memory found with no hints, and the bugs between plain accesses.
mod discover;

// `ordo hunt`: record, analyze and replay until a bug shows; the CI recipe
// docs/CI.md shows.
mod ci_recipe;
mod hunt;

// `ordo record` and `ordo dump`: both recording paths, symbols, failures around
// the recording.
mod attach_in_process;
mod record;
mod record_inproc;
mod record_symbols;
mod record_trust;

// `ordo replay`: the bundled bugs, memory-access gates, modes, real programs,
// replay with recording, many threads, verdicts and oracles.
mod replay_bugs;
mod replay_memory;
mod replay_modes;
mod replay_real;
mod replay_record;
mod replay_threads;
mod replay_verdicts;

// Hostile or damaged input.
mod trust_cli;

// Variable watches and the names people write for them.
mod watch;
mod watch_names;
