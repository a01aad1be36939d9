//! ordo's replayer: rerun a program so that a chosen partial order of its
//! synchronization events happens, and say whether the predicted bug showed.
//!
//! - [`plan`]: a [`ordo_schedule::Schedule`] compiled for the agent; [`access`]:
//!   the instruction sites its `read`/`write`/`rmw` events arm (memory-access gates).
//! - [`shared`]: the memfd the driver and the agent share ([`shm`] is its layout,
//!   one file compiled into both).
//! - the agent library comes from `ordo-agent` (built and embedded there; the
//!   recorder preloads the same library for in-process recording).
//! - [`oracle`]: what counts as the bug showing (`--expect-exit`, `--fail-on`),
//!   and the evidence of a run; shared with `ordo hunt`.
//! - [`run`]: spawning the program with the agent, watching it for deadlocks and
//!   infeasible schedules, the verdict, and verification by recording.
//!
//! `docs/REPLAY.md` explains the mechanism and why it was chosen.

pub mod access;
pub mod oracle;
pub mod plan;
pub mod run;
pub mod shared;
#[path = "../../agent/preload/src/shm.rs"]
pub mod shm;

pub use oracle::{Evidence, FailOn, Oracle};
pub use plan::Plan;
pub use run::{
    interrupted, replay, stop_replays_on_interrupt, Mode, OnInfeasible, ReplayOptions,
    ReplayOutcome, Verdict,
};
