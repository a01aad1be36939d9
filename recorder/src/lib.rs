//! ordo's recorder (being written).
pub mod watch;
