//! Times the phases of the streaming pass separately, on one thread: read,
//! read+merge, read+merge+engine (only the last with `full`).
use ordo_trace::{ReadMode, TraceReader};

fn main() {
    let path =
        std::path::PathBuf::from(std::env::args().nth(1).expect("usage: phases TRACE [full]"));
    if std::env::args().nth(2).as_deref() == Some("full") {
        return full(&path);
    }
    let start = std::time::Instant::now();
    let mut r = TraceReader::open(&path, ReadMode::Strict).unwrap();
    let mut buf = Vec::new();
    let mut n = 0u64;
    while r.next_chunk_into(&mut buf).unwrap() {
        n += buf.len() as u64;
    }
    let read = start.elapsed().as_secs_f64();
    println!(
        "read: {n} events {read:.3}s = {:.1} M/s",
        n as f64 / read / 1e6
    );
    let start = std::time::Instant::now();
    let mut r = TraceReader::open(&path, ReadMode::Strict).unwrap();
    let mut m = ordo_analysis::merge::Merger::new();
    let mut k = 0u64;
    while r.next_chunk_into(&mut buf).unwrap() {
        for e in buf.drain(..) {
            m.push(e);
        }
        while let Some(e) = m.pop() {
            k += e.seq & 1;
        }
    }
    m.finish();
    while let Some(e) = m.pop() {
        k += e.seq & 1;
    }
    let merged = start.elapsed().as_secs_f64();
    println!(
        "read+merge: {merged:.3}s = {:.1} M/s ({k})",
        n as f64 / merged / 1e6
    );
    full(&path);
}

/// Read, merge and the engine's pass, on one thread.
fn full(path: &std::path::Path) {
    let start = std::time::Instant::now();
    let mut r = TraceReader::open(path, ReadMode::Strict).unwrap();
    let threads = r.threads.clone();
    let mut engine = ordo_analysis::engine::Engine::new(&threads);
    let mut m = ordo_analysis::merge::Merger::new();
    let mut buf = Vec::new();
    let mut n = 0u64;
    while r.next_chunk_into(&mut buf).unwrap() {
        n += buf.len() as u64;
        m.push_batch(&buf, |e| {
            engine.process(e);
        });
    }
    m.finish();
    while let Some(e) = m.pop() {
        engine.process(&e);
    }
    let pass = engine.finish();
    let t = start.elapsed().as_secs_f64();
    println!(
        "read+merge+engine: {t:.3}s = {:.1} M/s ({} findings)",
        n as f64 / t / 1e6,
        pass.findings.len()
    );
}
