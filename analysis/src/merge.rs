//! The global order the analysis consumes: [`ordo_trace::OrderMerger`], the one
//! implementation shared with `ordo dump` (it was written here for speed and moved
//! into the trace crate).

pub use ordo_trace::OrderMerger as Merger;
