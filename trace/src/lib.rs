//! ordo's trace: the contract between the recorder, the analysis and the replayer.
//!
//! - [`event`]: the event model ([`Event`], [`Kind`]), built on the layout the eBPF
//!   probes share with user space (`ordo_probe_common`).
//! - [`thread`]: logical thread ids, stable across runs.
//! - [`schema`] and [`file`]: the on-disk format — protobuf records in checksummed,
//!   zstd-compressed, self-contained chunks.
//! - [`order`]: a global order of events consistent with happens-before.
//! - [`symbolize`]: call sites and objects to names, using the module table a trace
//!   carries (only regular files are opened, with a size limit).
//! - [`output`]: how ordo creates the files it writes (no symlink followed, no
//!   clobbering without `--force`, never over an input).
//! - [`text`]: escaping strings from a trace for a terminal.
//!
//! This crate has no aya or tokio dependency, so analysis tools can read traces
//! without pulling in the recorder.

mod decode;
mod encode;
pub mod event;
pub mod file;
pub mod order;
pub mod output;
pub mod schema;
pub mod symbolize;
pub mod text;
pub mod thread;

pub use event::{Event, Kind, Via};
pub use file::{
    read_trace, ReadMode, TraceError, TraceErrorKind, TraceReader, TraceWriter, FORMAT_VERSION,
};
pub use order::{global_order, OrderMerger};
pub use thread::{LogicalId, LogicalIdAssigner, ThreadInfo, ThreadTable};
