//! Fuzzes the `--watch` spec parser (and the operator-aware `NAME+OFFSET` split it
//! shares with `--mark`): any text parses or gives a one-line error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

/// The parser itself, compiled from the recorder's source: the recorder crate
/// builds eBPF programs and the preload agent in its build script, which a fuzz
/// build (nightly, sanitizer flags) does not need for a pure text parser.
#[allow(dead_code)]
#[path = "../../recorder/src/watch/spec.rs"]
mod spec;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match spec::WatchSpec::parse(text) {
        Ok(parsed) => {
            if let Some(size) = parsed.size {
                assert!(
                    (1..=spec::MAX_WATCH_SIZE).contains(&size),
                    "size {size} accepted"
                );
            }
        }
        Err(message) => assert!(!message.contains('\n'), "multi-line error: {message:?}"),
    }
    let _ = spec::split_offset(text);
});
