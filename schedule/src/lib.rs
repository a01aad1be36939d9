//! ordo schedule language (being written).
