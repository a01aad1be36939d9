//! Trace reading throughput: writes a generated trace (8 worker threads taking 16
//! mutexes, nested sometimes, watched accesses under one of them, chunks of 65,536
//! events — the shape of `cargo xtask bench analysis`'s traces) and times
//! `TraceReader::next_chunk_into` over it.
//!
//! `cargo run --release -p ordo-trace --example read_bench [EVENTS [THREADS [PATH]]]`
//! (default 10,000,000 events, 8 threads, a temporary file). With PATH naming an
//! existing trace and EVENTS 0, only reads it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use ordo_trace::schema::{Footer, Header, ThreadRecord};
use ordo_trace::{Event, Kind, ReadMode, TraceReader, TraceWriter, Via};

const CHUNK: usize = 65_536;
const MAIN_TID: u32 = 1000;

fn generate(path: &Path, events: u64, threads: u32) -> std::io::Result<u64> {
    let header = Header {
        pid: MAIN_TID,
        command: vec!["read_bench".into()],
        ..Default::default()
    };
    let mut w = TraceWriter::create(path, &header)?;
    let workers: Vec<u32> = (1..=threads).map(|i| MAIN_TID + i).collect();
    let mut records = vec![ThreadRecord {
        tid: MAIN_TID,
        logical: vec![],
        name: "main".into(),
        parent_tid: 0,
    }];
    records.extend(workers.iter().enumerate().map(|(i, &t)| ThreadRecord {
        tid: t,
        logical: vec![i as u32 + 1],
        name: format!("w{}", i + 1),
        parent_tid: MAIN_TID,
    }));
    let mut ts = 1_000_000u64;
    let mut seq: HashMap<u64, u64> = HashMap::new();
    let mut buf: Vec<Event> = Vec::with_capacity(CHUNK + 8);
    let mut push = |buf: &mut Vec<Event>, tid: u32, kind: Kind, addr: u64, site: u64, size: u8| {
        ts += 10;
        let s = if kind.is_sequenced() {
            let s = seq.entry(addr).or_insert(0);
            *s += 1;
            *s - 1
        } else {
            0
        };
        buf.push(Event {
            ts_ns: ts,
            tid,
            thread: 0,
            kind,
            via: Via::Plain,
            addr,
            addr2: 0,
            site,
            seq: s,
            result: 0,
            value: 0,
            size,
        });
    };
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut written = 0u64;
    let mut first = true;
    while written + (buf.len() as u64) < events {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let r = rng;
        let t = workers[(r % threads as u64) as usize];
        let outer = (r >> 8) % 16;
        let lock = 0x5000_0000 + outer * 64;
        let site = 0x402000 + ((r >> 16) % 2) * 0x10 + outer * 0x100;
        push(&mut buf, t, Kind::MutexLock, lock, site, 0);
        if (r >> 24) & 3 == 0 && outer + 1 < 16 {
            let inner = outer + 1 + (r >> 28) % (16 - outer - 1);
            push(
                &mut buf,
                t,
                Kind::MutexLock,
                0x5000_0000 + inner * 64,
                0x403000 + inner * 0x10,
                0,
            );
            push(
                &mut buf,
                t,
                Kind::MutexUnlock,
                0x5000_0000 + inner * 64,
                0x403004 + inner * 0x10,
                0,
            );
        }
        if outer == 0 {
            let kind = if (r >> 32) & 1 == 0 {
                Kind::Read
            } else {
                Kind::Write
            };
            push(&mut buf, t, kind, 0x6000_0000, site + 6, 4);
        }
        push(&mut buf, t, Kind::MutexUnlock, lock, site + 8, 0);
        if buf.len() >= CHUNK {
            w.write_chunk(&buf, if first { &records } else { &[] }, &[], 0)?;
            first = false;
            written += buf.len() as u64;
            buf.clear();
        }
    }
    if !buf.is_empty() {
        w.write_chunk(&buf, if first { &records } else { &[] }, &[], 0)?;
        written += buf.len() as u64;
    }
    w.finish(Footer::default())?;
    Ok(written)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let events: u64 = args
        .first()
        .map(|s| s.parse().expect("EVENTS"))
        .unwrap_or(10_000_000);
    let threads: u32 = args
        .get(1)
        .map(|s| s.parse().expect("THREADS"))
        .unwrap_or(8);
    let dir = tempfile::tempdir().unwrap();
    let path: PathBuf = args
        .get(2)
        .map(PathBuf::from)
        .unwrap_or_else(|| dir.path().join("bench.ordo"));
    if events > 0 {
        let started = Instant::now();
        let n = generate(&path, events, threads).unwrap();
        println!(
            "wrote {n} events ({:.1} MB) in {:.2} s",
            std::fs::metadata(&path).unwrap().len() as f64 / 1e6,
            started.elapsed().as_secs_f64()
        );
    }
    let mut best = f64::MAX;
    let mut total = 0u64;
    let mut checksum = 0u64;
    for _ in 0..3 {
        let started = Instant::now();
        let mut reader = TraceReader::open(&path, ReadMode::Strict).unwrap();
        let mut chunk = Vec::new();
        total = 0;
        while reader.next_chunk_into(&mut chunk).unwrap() {
            total += chunk.len() as u64;
            checksum = checksum.wrapping_add(
                chunk
                    .iter()
                    .map(|e| e.ts_ns ^ e.seq ^ e.thread as u64)
                    .fold(0, u64::wrapping_add),
            );
        }
        best = best.min(started.elapsed().as_secs_f64());
    }
    println!(
        "read {total} events: best of 3 {best:.3} s = {:.2} M events/s (checksum {checksum:x})",
        total as f64 / best / 1e6
    );
}
