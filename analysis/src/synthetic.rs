//! Traces made in code: a builder for hand-made traces in tests, and the generator
//! of the large traces the benchmark analyzes.
//!
//! The builder emits events in the order they are added, with increasing
//! timestamps and per-object sequence numbers, exactly as the recorder would for a
//! run that happened in that order.

use std::io;
use std::path::Path;

use ordo_trace::schema::{Footer, Header, ThreadRecord};
use ordo_trace::{Event, Kind, LogicalId, TraceWriter, Via};
use rustc_hash::FxHashMap;

/// Kernel tid of the main thread in built traces.
pub const MAIN_TID: u32 = 1000;

/// Builds a trace event by event.
pub struct TraceBuilder {
    events: Vec<Event>,
    threads: Vec<ThreadRecord>,
    seq: FxHashMap<u64, u64>,
    ts: u64,
    children: FxHashMap<u32, u32>,
    /// Events per chunk when written.
    pub chunk_events: usize,
    /// Kernel drop counter to record after chunk `i` (cumulative), if any.
    pub drops_after_chunk: Vec<(usize, u64)>,
    /// The traced command line (the header's).
    pub command: Vec<String>,
    /// Modules (mapped files) recorded with the first chunk.
    pub modules: Vec<ordo_trace::schema::ModuleRecord>,
}

impl Default for TraceBuilder {
    fn default() -> Self {
        TraceBuilder::new()
    }
}

impl TraceBuilder {
    /// A trace with only the main thread (`0`, tid [`MAIN_TID`]).
    pub fn new() -> TraceBuilder {
        TraceBuilder {
            events: Vec::new(),
            threads: vec![ThreadRecord {
                tid: MAIN_TID,
                logical: vec![],
                name: "main".into(),
                parent_tid: 0,
            }],
            seq: FxHashMap::default(),
            ts: 1_000_000,
            children: FxHashMap::default(),
            chunk_events: 4096,
            drops_after_chunk: Vec::new(),
            command: vec!["built".into()],
            modules: Vec::new(),
        }
    }

    /// Renames a thread (as `prctl(PR_SET_NAME)` would).
    pub fn name_thread(&mut self, tid: u32, name: &str) {
        if let Some(t) = self.threads.iter_mut().find(|t| t.tid == tid) {
            t.name = name.to_string();
        }
    }

    /// Registers a thread created by `parent` (its next child); returns its tid.
    /// Call [`TraceBuilder::create`] and [`TraceBuilder::start`] to give it events.
    pub fn spawn(&mut self, parent: u32) -> u32 {
        let tid = MAIN_TID + self.threads.len() as u32;
        let parent_logical = self.logical(parent);
        let n = self.children.entry(parent).or_insert(0);
        *n += 1;
        let logical = parent_logical.child(*n);
        self.threads.push(ThreadRecord {
            tid,
            logical: logical.0,
            name: format!("t{tid}"),
            parent_tid: parent,
        });
        tid
    }

    /// The logical id of a tid.
    pub fn logical(&self, tid: u32) -> LogicalId {
        LogicalId(
            self.threads
                .iter()
                .find(|t| t.tid == tid)
                .map(|t| t.logical.clone())
                .unwrap_or_default(),
        )
    }

    /// Adds an event; sequenced kinds get the object's next `seq`. Returns it for
    /// adjustment (`via`, `addr2`, `result`, …).
    pub fn push(&mut self, tid: u32, kind: Kind, addr: u64, site: u64) -> &mut Event {
        self.ts += 10;
        let seq = if kind.is_sequenced() {
            let s = self.seq.entry(addr).or_insert(0);
            *s += 1;
            *s - 1
        } else {
            0
        };
        self.events.push(Event {
            ts_ns: self.ts,
            tid,
            thread: 0,
            kind,
            via: Via::Plain,
            addr,
            addr2: 0,
            site,
            seq,
            result: 0,
            value: 0,
            size: 0,
        });
        self.events.last_mut().unwrap()
    }

    /// `parent` creates `child` with pthread_t handle `handle`, and the child starts.
    pub fn create(&mut self, parent: u32, child: u32, handle: u64, site: u64) {
        self.push(parent, Kind::ThreadCreate, handle, site).value = child as u64;
        self.push(child, Kind::ThreadStart, 0, 0);
    }

    /// `child` exits and `parent` joins it through `handle`.
    pub fn exit_join(&mut self, parent: u32, child: u32, handle: u64, site: u64) {
        self.push(child, Kind::ThreadExit, 0, 0);
        self.push(parent, Kind::ThreadJoin, handle, site);
    }

    /// Main creates two threads (handles 0x90 and 0x98, at `site`) that take locks
    /// `a` and `b` in opposite orders — a lock-order cycle the run survived — and
    /// joins them (at `site + 1`). Lock calls are at `site + 0x100 + lock + 0..3`.
    /// Returns the two tids.
    pub fn ab_ba(&mut self, a: u64, b: u64, site: u64) -> (u32, u32) {
        let (t1, t2) = (self.spawn(MAIN_TID), self.spawn(MAIN_TID));
        self.create(MAIN_TID, t1, 0x90, site);
        self.create(MAIN_TID, t2, 0x98, site);
        for (t, first, second) in [(t1, a, b), (t2, b, a)] {
            let at = site + 0x100 + first;
            self.lock(t, first, at);
            self.lock(t, second, at + 1);
            self.unlock(t, second, at + 2);
            self.unlock(t, first, at + 3);
        }
        self.exit_join(MAIN_TID, t1, 0x90, site + 1);
        self.exit_join(MAIN_TID, t2, 0x98, site + 1);
        (t1, t2)
    }

    /// A mutex acquisition.
    pub fn lock(&mut self, tid: u32, mutex: u64, site: u64) {
        self.push(tid, Kind::MutexLock, mutex, site);
    }

    /// A successful trylock.
    pub fn trylock(&mut self, tid: u32, mutex: u64, site: u64) {
        self.push(tid, Kind::MutexLock, mutex, site).via = Via::Try;
    }

    /// A mutex release.
    pub fn unlock(&mut self, tid: u32, mutex: u64, site: u64) {
        self.push(tid, Kind::MutexUnlock, mutex, site);
    }

    /// `pthread_cond_wait` starts: the mutex is released and the thread waits.
    pub fn wait_begin(&mut self, tid: u32, cond: u64, mutex: u64, site: u64) {
        let e = self.push(tid, Kind::MutexUnlock, mutex, site);
        e.via = Via::CondWait;
        e.addr2 = cond;
        self.push(tid, Kind::CondWaitBegin, cond, site).addr2 = mutex;
    }

    /// `pthread_cond_wait` returns (result 0 or ETIMEDOUT) and reacquires the mutex.
    pub fn wait_end(&mut self, tid: u32, cond: u64, mutex: u64, result: i64, site: u64) {
        let e = self.push(tid, Kind::CondWait, cond, site);
        e.addr2 = mutex;
        e.result = result;
        let e = self.push(tid, Kind::MutexLock, mutex, site);
        e.via = Via::CondWait;
        e.addr2 = cond;
    }

    /// `pthread_cond_signal`.
    pub fn signal(&mut self, tid: u32, cond: u64, site: u64) {
        self.push(tid, Kind::CondSignal, cond, site);
    }

    /// A watched read.
    pub fn read(&mut self, tid: u32, var: u64, site: u64) {
        self.push(tid, Kind::Read, var, site).size = 4;
    }

    /// A watched write.
    pub fn write(&mut self, tid: u32, var: u64, site: u64) {
        self.push(tid, Kind::Write, var, site).size = 4;
    }

    /// A watched read-modify-write, by an atomic instruction (`lock add`, `xchg`)
    /// or a plain one (`add $1, mem`).
    pub fn rmw(&mut self, tid: u32, var: u64, site: u64, atomic: bool) {
        let e = self.push(tid, Kind::Rmw, var, site);
        e.size = 4;
        if atomic {
            e.via = Via::Atomic;
        }
    }

    /// A watched access by an atomic instruction, or of a variable whose type is
    /// atomic (`kind` is [`Kind::Read`], [`Kind::Write`] or [`Kind::Rmw`]).
    pub fn atomic(&mut self, tid: u32, kind: Kind, var: u64, site: u64) {
        let e = self.push(tid, kind, var, site);
        e.size = 4;
        e.via = Via::Atomic;
    }

    /// The events so far.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// Number of events so far.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether no event was added.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Writes the trace (chunks of [`TraceBuilder::chunk_events`] events).
    pub fn write_to(&self, path: &Path) -> io::Result<()> {
        let header = Header {
            pid: MAIN_TID,
            command: self.command.clone(),
            ..Default::default()
        };
        let mut w = TraceWriter::create(path, &header)?;
        let mut dropped = 0;
        for (i, part) in self.events.chunks(self.chunk_events.max(1)).enumerate() {
            let (threads, modules) = if i == 0 {
                (self.threads.clone(), self.modules.clone())
            } else {
                (Vec::new(), Vec::new())
            };
            if let Some(&(_, d)) = self.drops_after_chunk.iter().find(|(c, _)| *c == i) {
                dropped = d;
            }
            w.write_chunk(part, &threads, &modules, dropped)?;
        }
        w.finish(Footer {
            dropped,
            ..Default::default()
        })?;
        Ok(())
    }
}

/// Writes the benchmark's trace: `threads` worker threads (plus main) doing
/// `events` events in total — critical sections on 16 mutexes, nested in a fixed
/// order, with watched accesses under one of them — streamed to disk in chunks so
/// generating needs no more memory than one chunk. Returns the events written.
pub fn write_benchmark_trace(path: &Path, events: u64, threads: u32) -> io::Result<u64> {
    const LOCKS: u64 = 16;
    const LOCK_BASE: u64 = 0x5000_0000;
    const VAR: u64 = 0x6000_0000;
    const CHUNK: usize = 65_536;
    let header = Header {
        pid: MAIN_TID,
        command: vec!["bench".into()],
        ..Default::default()
    };
    let mut w = TraceWriter::create(path, &header)?;
    let mut b = TraceBuilder::new();
    let workers: Vec<u32> = (0..threads).map(|_| b.spawn(MAIN_TID)).collect();
    let records = b.threads.clone();
    for (i, &t) in workers.iter().enumerate() {
        b.create(MAIN_TID, t, 0x7000_0000 + 8 * i as u64, 0x401000);
    }
    // xorshift: deterministic, dependency-free.
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut written = 0u64;
    let mut first = true;
    let budget = events.saturating_sub(3 * threads as u64);
    while written + (b.len() as u64) < budget {
        let r = next();
        let t = workers[(r % threads as u64) as usize];
        let outer = (r >> 8) % LOCKS;
        let site = 0x402000 + ((r >> 16) % 2) * 0x10 + outer * 0x100;
        b.lock(t, LOCK_BASE + outer * 64, site);
        if (r >> 24) % 4 == 0 && outer + 1 < LOCKS {
            let inner = outer + 1 + (r >> 28) % (LOCKS - outer - 1);
            b.lock(t, LOCK_BASE + inner * 64, 0x403000 + inner * 0x10);
            b.unlock(t, LOCK_BASE + inner * 64, 0x403004 + inner * 0x10);
        }
        if outer == 0 {
            if (r >> 32) % 2 == 0 {
                b.read(t, VAR, site + 6);
            } else {
                b.write(t, VAR, site + 7);
            }
        }
        b.unlock(t, LOCK_BASE + outer * 64, site + 8);
        if b.len() >= CHUNK {
            w.write_chunk(&b.events, if first { &records } else { &[] }, &[], 0)?;
            first = false;
            written += b.events.len() as u64;
            b.events.clear();
        }
    }
    for (i, &t) in workers.iter().enumerate() {
        b.exit_join(MAIN_TID, t, 0x7000_0000 + 8 * i as u64, 0x401100);
    }
    w.write_chunk(&b.events, if first { &records } else { &[] }, &[], 0)?;
    written += b.events.len() as u64;
    w.finish(Footer::default())?;
    Ok(written)
}

/// Writes the "many locks held at once" scale shape: a striped hash table with
/// `stripes` mutexes. Four worker threads do operations that each lock one stripe
/// (a watched access under it); every 64 operations one of them resizes the table,
/// which locks every stripe in order and releases them in reverse — a correct
/// program whose lock-order graph has `stripes²/2` edges. Returns the events written.
pub fn write_striped_resize_trace(path: &Path, events: u64, stripes: u32) -> io::Result<u64> {
    const WORKERS: u32 = 4;
    const STRIPE_BASE: u64 = 0x5000_0000;
    const VAR_BASE: u64 = 0x6000_0000;
    const CHUNK: usize = 65_536;
    let stripes = stripes.max(1) as u64;
    let mut w = TraceWriter::create(path, &bench_header())?;
    let mut b = TraceBuilder::new();
    let workers: Vec<u32> = (0..WORKERS).map(|_| b.spawn(MAIN_TID)).collect();
    let records = b.threads.clone();
    for (i, &t) in workers.iter().enumerate() {
        b.create(MAIN_TID, t, 0x7000_0000 + 8 * i as u64, 0x401000);
    }
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut written = 0u64;
    let mut first = true;
    let mut ops = 0u64;
    while written + (b.len() as u64) < events.saturating_sub(2 * WORKERS as u64) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let t = workers[(rng % WORKERS as u64) as usize];
        ops += 1;
        if ops.is_multiple_of(64) {
            for s in 0..stripes {
                b.lock(t, STRIPE_BASE + s * 64, 0x404000);
            }
            for s in (0..stripes).rev() {
                b.unlock(t, STRIPE_BASE + s * 64, 0x404010);
            }
        } else {
            let s = (rng >> 8) % stripes;
            b.lock(t, STRIPE_BASE + s * 64, 0x402000);
            b.write(t, VAR_BASE + s * 8, 0x402008);
            b.unlock(t, STRIPE_BASE + s * 64, 0x402010);
        }
        if b.len() >= CHUNK {
            w.write_chunk(&b.events, if first { &records } else { &[] }, &[], 0)?;
            first = false;
            written += b.events.len() as u64;
            b.events.clear();
        }
    }
    for (i, &t) in workers.iter().enumerate() {
        b.exit_join(MAIN_TID, t, 0x7000_0000 + 8 * i as u64, 0x401100);
    }
    w.write_chunk(&b.events, if first { &records } else { &[] }, &[], 0)?;
    written += b.events.len() as u64;
    w.finish(Footer::default())?;
    Ok(written)
}

/// Writes the "many short-lived threads" scale shape: the main thread creates
/// `threads` threads two at a time; each takes a shared mutex (a watched write under
/// it), exits, and is joined before the next pair is created — at most two live
/// at once. Thread records go with the chunk of their creation, as the recorder
/// writes them. Returns the events written.
pub fn write_short_threads_trace(path: &Path, threads: u32) -> io::Result<u64> {
    write_short_lived(path, threads, false)
}

/// Writes the "many short-lived detached threads" scale shape: like
/// [`write_short_threads_trace`], but nothing joins the threads. Each posts a
/// semaphore as its last act, and the main thread waits on it before creating the
/// next pair (a thread-per-task server bounding its concurrency); pthread_t handles
/// recycle, as glibc's stack cache reuses a detached thread's descriptor. Returns
/// the events written.
pub fn write_detached_threads_trace(path: &Path, threads: u32) -> io::Result<u64> {
    write_short_lived(path, threads, true)
}

fn write_short_lived(path: &Path, threads: u32, detached: bool) -> io::Result<u64> {
    const MUTEX: u64 = 0x5000_0000;
    const VAR: u64 = 0x6000_0000;
    const DONE: u64 = 0x5100_0000;
    const CHUNK: usize = 65_536;
    let mut w = TraceWriter::create(path, &bench_header())?;
    let mut b = TraceBuilder::new();
    let mut written = 0u64;
    let mut records_written = 0;
    let mut created = 0u32;
    while created < threads {
        let pair: Vec<u32> = (0..2.min(threads - created))
            .map(|_| b.spawn(MAIN_TID))
            .collect();
        created += pair.len() as u32;
        for (i, &t) in pair.iter().enumerate() {
            b.create(MAIN_TID, t, 0x7000_0000 + 8 * i as u64, 0x401000);
        }
        for &t in &pair {
            b.lock(t, MUTEX, 0x402000);
            b.write(t, VAR, 0x402008);
            b.unlock(t, MUTEX, 0x402010);
            if detached {
                b.push(t, Kind::SemPost, DONE, 0x402018);
            }
        }
        for (i, &t) in pair.iter().enumerate() {
            if detached {
                b.push(t, Kind::ThreadExit, 0, 0);
                b.push(MAIN_TID, Kind::SemWait, DONE, 0x401100);
            } else {
                b.exit_join(MAIN_TID, t, 0x7000_0000 + 8 * i as u64, 0x401100);
            }
        }
        if b.len() >= CHUNK || created == threads {
            w.write_chunk(&b.events, &b.threads[records_written..], &[], 0)?;
            records_written = b.threads.len();
            written += b.events.len() as u64;
            b.events.clear();
        }
    }
    w.finish(Footer::default())?;
    Ok(written)
}

fn bench_header() -> Header {
    Header {
        pid: MAIN_TID,
        command: vec!["bench".into()],
        ..Default::default()
    }
}
