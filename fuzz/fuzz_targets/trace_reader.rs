//! Fuzzes the trace reader: any bytes as a trace file, opened strictly and in
//! salvage mode, every chunk decoded and put in happens-before order. A damaged
//! trace must give an error naming the byte offset, never a panic, a hang or a
//! huge allocation.
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use ordo_trace::{OrderMerger, ReadMode, TraceReader};

/// The reader opens files (it seeks to the trailer), so each input goes to one
/// file in memory-backed storage, rewritten per input.
fn input_path() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let dir = if std::path::Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        dir.join(format!("ordo-fuzz-trace-{}.ordo", std::process::id()))
    })
}

fuzz_target!(|data: &[u8]| {
    let path = input_path();
    std::fs::write(path, data).expect("write the fuzz input");
    // Salvage differs from a strict read only past an error.
    if !read(path, ReadMode::Strict) {
        read(path, ReadMode::Salvage);
    }
});

/// Opens and reads the whole trace, ordering its events as `analyze` does;
/// whether it read without error.
fn read(path: &Path, mode: ReadMode) -> bool {
    let Ok(mut reader) = TraceReader::open(path, mode) else {
        return false;
    };
    let mut merger = OrderMerger::new();
    let mut events = Vec::new();
    let mut ordered = 0usize;
    let complete = loop {
        match reader.next_chunk_into(&mut events) {
            Ok(true) => merger.push_batch(&events, |_| ordered += 1),
            Ok(false) => break true,
            Err(_) => break false,
        }
    };
    merger.finish();
    merger.push_batch(&[], |_| ordered += 1);
    std::hint::black_box(ordered);
    complete
}
