//! ordo's analysis engine: happens-before over a recorded trace, detectors for
//! lock-order deadlocks, condition-variable hazards, races and atomicity
//! violations, and ranked candidate reorderings written in the schedule language so
//! the replayer can enforce them.
//!
//! A pure library (no eBPF, no async): [`analyze_trace`] streams a trace file through
//! [`merge::Merger`] (a global order consistent with happens-before) into the
//! [`engine::Engine`], then symbolizes the
//! findings into a [`report::Analysis`] that prints as text or JSON.
//! [`perfetto`] converts a trace for the Perfetto UI. `docs/ANALYSIS.md` explains the
//! method.

pub mod clock;
pub mod deadlock;
pub mod engine;
pub mod findings;
pub mod interleave;
pub mod merge;
pub mod model;
pub mod naming;
pub mod perfetto;
pub mod report;
pub mod sarif;
pub mod synthetic;

use std::path::Path;
use std::sync::mpsc;
use std::time::Instant;

use ordo_trace::symbolize::Symbolizer;
use ordo_trace::{Event, Kind, ReadMode, TraceError, TraceReader};

pub use model::{FindingKind, Rank};
/// The schedule language the candidates are written in (re-exported for users of
/// the findings, e.g. to parse a finding's schedule).
pub use ordo_schedule as schedule;
pub use report::{
    Analysis, Finding, FindingEvent, FindingStep, Loss, ObjectDesc, SharedDesc, Stats,
};

/// Where the kernel's drop counter rose, chunk by chunk.
#[derive(Default)]
struct LossTracker {
    prev_dropped: u64,
    prev_chunk: Option<(u64, u64, u64)>,
    chunks: u64,
    losses: Vec<Loss>,
}

impl LossTracker {
    /// A chunk was read: its byte offset, the cumulative drops when it was written,
    /// and its first timestamp.
    fn chunk(&mut self, offset: u64, dropped_so_far: u64, first_ts: u64) {
        let index = self.chunks;
        if dropped_so_far > self.prev_dropped {
            // Lost while the previous chunk was being filled (or before the first).
            let (first_chunk, first_offset, from_ts) =
                self.prev_chunk.unwrap_or((index, offset, first_ts));
            self.losses.push(Loss {
                first_chunk,
                last_chunk: index,
                offset: first_offset,
                events: dropped_so_far - self.prev_dropped,
                from_ts,
            });
            self.prev_dropped = dropped_so_far;
        }
        self.prev_chunk = Some((index, offset, first_ts));
        self.chunks += 1;
    }

    /// The trace's total drops: any beyond the last chunk's counter were lost at the end.
    fn finish(&mut self, total: u64) {
        if total > self.prev_dropped {
            let (first_chunk, offset, from_ts) = self.prev_chunk.unwrap_or((0, 0, 0));
            self.losses.push(Loss {
                first_chunk,
                last_chunk: self.chunks.saturating_sub(1),
                offset,
                events: total - self.prev_dropped,
                from_ts,
            });
            self.prev_dropped = total;
        }
    }
}

/// A decoded chunk on its way from the decoding thread.
struct DecodedChunk {
    events: Vec<Event>,
    offset: u64,
    dropped: u64,
}

/// Where chunks are decoded during an analysis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decoding {
    /// On a thread of its own, a chunk or two ahead of the pass.
    OwnThread,
    /// On the analyzing thread (one CPU: a second thread would only add hand-offs).
    Inline,
}

/// Analyzes a trace file, streaming it: see the crate docs. Decodes on a thread of
/// its own when more than one CPU is available.
pub fn analyze_trace(path: &Path) -> Result<Analysis, TraceError> {
    analyze_trace_reading(path, ReadMode::Strict)
}

/// [`analyze_trace`] reading the trace in `mode`: [`ReadMode::Salvage`] analyzes
/// the intact chunks of a damaged trace (the reason it stops is in
/// `stats.cut_short`).
pub fn analyze_trace_reading(path: &Path, mode: ReadMode) -> Result<Analysis, TraceError> {
    analyze_trace_progress(path, mode, &|_, _| {})
}

/// [`analyze_trace_reading`] calling `progress(bytes_read, trace_bytes)` as each
/// chunk is taken (for a progress bar: a big trace takes a while).
pub fn analyze_trace_progress(
    path: &Path,
    mode: ReadMode,
    progress: &dyn Fn(u64, u64),
) -> Result<Analysis, TraceError> {
    let decoding = if std::thread::available_parallelism().is_ok_and(|n| n.get() > 1) {
        Decoding::OwnThread
    } else {
        Decoding::Inline
    };
    analyze(path, decoding, mode, progress)
}

/// [`analyze_trace`] with the decoding placement chosen by the caller (the result
/// is the same either way).
pub fn analyze_trace_with(path: &Path, decoding: Decoding) -> Result<Analysis, TraceError> {
    analyze(path, decoding, ReadMode::Strict, &|_, _| {})
}

fn analyze(
    path: &Path,
    decoding: Decoding,
    mode: ReadMode,
    progress: &dyn Fn(u64, u64),
) -> Result<Analysis, TraceError> {
    let started = Instant::now();
    let mut reader = TraceReader::open(path, mode)?;
    let trace_bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let threads = reader.threads.clone();
    let (total_dropped, cut_short) = (
        reader.dropped,
        reader.cut_short.as_ref().map(|e| e.to_string()),
    );
    let symbolizer = Symbolizer::of_trace(&reader);
    let mut engine = engine::Engine::with_internal_sites(&threads, |site| {
        symbolizer
            .locate(site, true)
            .is_some_and(|loc| ordo_schedule::is_glibc_internal_module(&loc.module))
    });
    let mut merger = merge::Merger::new();
    let mut losses = LossTracker::default();
    let mut take_chunk = |events: &[Event], offset: u64, dropped: u64| {
        progress(offset, trace_bytes);
        losses.chunk(
            offset,
            dropped,
            events.first().map(|e| e.ts_ns).unwrap_or(0),
        );
        merger.push_batch(events, |e| {
            if e.kind != Kind::MutexBlock {
                engine.process(e);
            }
        });
    };
    if decoding == Decoding::OwnThread {
        // Decoding (zstd, protobuf) runs on its own thread, a chunk or two ahead of
        // the pass; chunk buffers go back to it for reuse.
        let (chunks_tx, chunks_rx) = mpsc::sync_channel::<Result<DecodedChunk, TraceError>>(2);
        let (recycle_tx, recycle_rx) = mpsc::channel::<Vec<Event>>();
        std::thread::scope(|scope| {
            scope.spawn(move || loop {
                let mut events = recycle_rx.try_recv().unwrap_or_default();
                let message = match reader.next_chunk_into(&mut events) {
                    Ok(true) => {
                        let (offset, dropped) =
                            reader.drops_by_chunk().last().copied().unwrap_or((0, 0));
                        Ok(DecodedChunk {
                            events,
                            offset,
                            dropped,
                        })
                    }
                    Ok(false) => return,
                    Err(e) => Err(e),
                };
                let stop = message.is_err();
                if chunks_tx.send(message).is_err() || stop {
                    return;
                }
            });
            for message in chunks_rx {
                let chunk = message?;
                take_chunk(&chunk.events, chunk.offset, chunk.dropped);
                let _ = recycle_tx.send(chunk.events);
            }
            Ok::<(), TraceError>(())
        })?;
    } else {
        let mut events = Vec::new();
        while reader.next_chunk_into(&mut events)? {
            let (offset, dropped) = reader.drops_by_chunk().last().copied().unwrap_or((0, 0));
            take_chunk(&events, offset, dropped);
        }
    }
    progress(trace_bytes, trace_bytes);
    merger.finish();
    while let Some(e) = merger.pop() {
        // A thread blocking on a mutex is no synchronization: the lock it then takes is.
        if e.kind != Kind::MutexBlock {
            engine.process(&e);
        }
    }
    losses.finish(total_dropped);
    let pass = engine.finish();
    let pass_seconds = started.elapsed().as_secs_f64();
    let namer = naming::Namer::new(&threads, &pass.tids, &pass.objects, &symbolizer);
    let first_loss = losses.losses.first().map(|l| l.from_ts);
    let findings = report::resolve(pass.findings, &namer, first_loss);
    let shared = pass
        .shared
        .iter()
        .map(|l| report::SharedDesc::resolve(l, &namer))
        .collect();
    let stats = Stats {
        pass: pass.stats,
        threads: threads.len() as u64,
        chunks: losses.chunks,
        dropped: total_dropped.max(losses.prev_dropped),
        cut_short,
        peak_rss_kb: peak_rss_kb(),
        seconds: started.elapsed().as_secs_f64(),
        pass_seconds,
    };
    Ok(Analysis {
        trace: path.to_path_buf(),
        findings,
        losses: losses.losses,
        stats,
        shared,
    })
}

/// This process's peak resident set (VmHWM), in kB.
pub fn peak_rss_kb() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
