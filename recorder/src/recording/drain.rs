//! Turning ring buffer records into trace chunks, fast enough that the ring buffer
//! never fills.
//!
//! The drain thread only copies records out of the ring buffer and does the cheap
//! per-event bookkeeping ([`DrainState::take`]: thread ids, names, whether an event's
//! site lies in a module already described). Full chunks go to a writer thread,
//! which encodes and compresses them, so zstd never stalls the draining. The probes
//! wake the drain only when the ring buffer is a quarter full (the eBPF
//! `wakeup_flags`; every record while the target's modules are still unknown);
//! otherwise it polls every [`POLL_INTERVAL`], so a busy target
//! costs one wakeup per batch of hundreds or thousands of events, not one every few
//! events (the kernel's default wakes an idle consumer for every record; at real-time
//! priority that meant a context switch per handful of events). The drain
//! thread runs at real-time priority (SCHED_FIFO 1) where permitted, else at nice
//! -20, so a target that keeps every CPU busy cannot starve it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use aya::maps::{MapData, RingBuf};
use ordo_probe_common::{kind, via, RawEvent};
use ordo_trace::schema::{Footer, ModuleRecord, ThreadRecord};
use ordo_trace::symbolize::modules_of_process;
use ordo_trace::thread::TID_BITS;
use ordo_trace::{Event, Kind, LogicalIdAssigner, TraceWriter};
use tokio::io::unix::AsyncFd;
use tokio::sync::{mpsc, oneshot};

use super::attach::Probes;
use super::{monotonic_ns, RecordSummary};
use crate::watch::TrapDecoder;

/// Events per chunk before it is handed to the writer.
const CHUNK_EVENTS: usize = 65536;
/// Chunks waiting for the writer before the drain waits for it.
const CHUNKS_IN_FLIGHT: usize = 8;
/// How often the drain empties the ring buffer while events keep coming.
const POLL_INTERVAL: Duration = Duration::from_millis(10);
/// Longest time events wait in memory before being written.
pub(super) const FLUSH_INTERVAL: Duration = Duration::from_millis(100);

/// Thread ids hash to themselves: they are already well spread, and the set is
/// consulted for every event.
#[derive(Default)]
struct TidHasher(u64);

impl Hasher for TidHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | b as u64;
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = (n as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type TidSet = HashSet<u32, BuildHasherDefault<TidHasher>>;

/// The highest incarnation number a thread key can hold (in its upper 10 bits).
const MAX_INCARNATION: u32 = (1 << (32 - TID_BITS)) - 1;

/// Thread keys: what the trace's `tid` column holds (see `ordo_trace::thread::TID_BITS`).
/// The kernel reuses the tid of an exited thread for a later one (at once with a
/// low `pid_max`, eventually with any), and two threads must never share an
/// identity in the trace. A thread's key is its tid for the first thread with that
/// tid, and `incarnation << TID_BITS | tid` for the n-th later one: a `thread_start`
/// for a tid whose `thread_exit` was taken starts a new incarnation. Each thread's
/// events come in its program order, and a tid is handed out again only after its
/// previous thread's exit, so the exit is always taken before the new thread's
/// start. The creation naming a child can come before the child's start or after
/// it (even after its exit: pthread_create's return is recorded when it returns),
/// so it goes to the oldest started thread of that tid whose creation was not taken
/// yet, and only when there is none does it start a new incarnation itself.
#[derive(Default)]
struct ThreadKeys {
    /// Keys of tids that were reused (the others are their tid).
    reused: HashMap<u32, u32>,
    /// Tids whose last thread exited.
    exited: TidSet,
    /// Per tid: keys of started threads whose creation was not taken yet.
    uncreated: HashMap<u32, std::collections::VecDeque<u32>>,
    /// Tids whose last key came from a creation, before the thread's start.
    created_first: TidSet,
    /// Reuses beyond [`MAX_INCARNATION`] (merged with the last incarnation).
    overflow: u64,
}

impl ThreadKeys {
    /// The key of the live thread with `tid`.
    fn key(&self, tid: u32) -> u32 {
        // Asked for every event: most recordings never see a tid reused.
        if self.reused.is_empty() {
            return tid;
        }
        self.reused.get(&tid).copied().unwrap_or(tid)
    }

    /// The key of a new thread with `tid`: a new one if the tid's last thread exited.
    fn next(&mut self, tid: u32) -> u32 {
        let key = self.key(tid);
        if !self.exited.remove(&tid) {
            return key;
        }
        let incarnation = (key >> TID_BITS) + 1;
        if incarnation > MAX_INCARNATION || tid >> TID_BITS != 0 {
            self.overflow += 1;
            return key;
        }
        let key = incarnation << TID_BITS | tid;
        self.reused.insert(tid, key);
        key
    }

    /// The key of a thread that starts with `tid`.
    fn started(&mut self, tid: u32) -> u32 {
        if self.created_first.remove(&tid) {
            return self.key(tid);
        }
        let key = self.next(tid);
        self.uncreated.entry(tid).or_default().push_back(key);
        key
    }

    /// The key of the child `tid` a creation names.
    fn created(&mut self, tid: u32) -> u32 {
        if let Some(waiting) = self.uncreated.get_mut(&tid) {
            if let Some(key) = waiting.pop_front() {
                if waiting.is_empty() {
                    self.uncreated.remove(&tid);
                }
                return key;
            }
        }
        let key = self.next(tid);
        self.created_first.insert(tid);
        key
    }

    fn exited(&mut self, tid: u32) {
        self.exited.insert(tid);
    }
}

/// Address ranges of the modules already described in the trace, for the one
/// question asked per event: is this site in a known module?
#[derive(Default)]
pub(crate) struct KnownRanges {
    /// Sorted, non-overlapping `[start, end)` ranges.
    ranges: Vec<(u64, u64)>,
    /// The range the last lookup hit: consecutive events mostly share a module.
    last: (u64, u64),
}

impl KnownRanges {
    fn rebuild(&mut self, modules: &[ModuleRecord]) {
        self.ranges = modules
            .iter()
            .flat_map(|m| m.mappings.iter().map(|map| (map.start, map.end)))
            .collect();
        self.ranges.sort_unstable();
    }

    /// Adds the ranges of `modules`.
    pub(crate) fn extend(&mut self, modules: &[ModuleRecord]) {
        self.ranges.extend(
            modules
                .iter()
                .flat_map(|m| m.mappings.iter().map(|map| (map.start, map.end))),
        );
        self.ranges.sort_unstable();
        self.ranges.dedup();
    }

    /// Whether `site` lies in a known range.
    pub(crate) fn contains(&mut self, site: u64) -> bool {
        if (self.last.0..self.last.1).contains(&site) {
            return true;
        }
        let i = self.ranges.partition_point(|r| r.0 <= site);
        match i.checked_sub(1).map(|i| self.ranges[i]) {
            Some(range) if site < range.1 => {
                self.last = range;
                true
            }
            _ => false,
        }
    }
}

/// One chunk on its way to the writer thread.
struct Chunk {
    events: Vec<Event>,
    threads: Vec<ThreadRecord>,
    modules: Vec<ModuleRecord>,
    dropped: u64,
}

/// The writer thread: encodes and compresses chunks into the trace file.
///
/// The first write error (a full disk) ends the writing, not the recording: it is
/// said at once on stderr (one line naming the file), the file keeps every chunk
/// before it (see `TraceWriter`), and later chunks are only counted, so the drain
/// keeps emptying the rings and the program runs on unhindered.
struct ChunkWriter {
    /// Set at the first write error.
    failed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    chunks: SyncSender<Chunk>,
    /// Emptied event buffers coming back for reuse.
    spare: Receiver<Vec<Event>>,
    thread: JoinHandle<WriterEnd>,
    /// The writer thread's kernel tid (for changing its priority).
    tid: i32,
}

/// What the writer thread ends with.
struct WriterEnd {
    writer: TraceWriter,
    /// The first write error, in words (naming the file).
    error: Option<String>,
    /// Events received after it and not written.
    unwritten: u64,
}

impl ChunkWriter {
    fn start(mut writer: TraceWriter, output: PathBuf) -> Result<ChunkWriter> {
        let (chunks, incoming) = sync_channel::<Chunk>(CHUNKS_IN_FLIGHT);
        let (give_back, spare) = sync_channel(CHUNKS_IN_FLIGHT + 1);
        let (tell_tid, tid) = sync_channel(1);
        let failed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let failed_here = failed.clone();
        let thread = std::thread::Builder::new()
            .name("ordo-writer".into())
            .spawn(move || -> WriterEnd {
                // SAFETY: gettid has no preconditions.
                let _ = tell_tid.send(unsafe { libc::gettid() });
                let mut error = None;
                let mut unwritten = 0;
                for mut chunk in incoming {
                    if error.is_none() {
                        if let Err(e) = writer.write_chunk(
                            &chunk.events,
                            &chunk.threads,
                            &chunk.modules,
                            chunk.dropped,
                        ) {
                            let message = write_error(&output, &e, writer.bytes_written());
                            say_now(&format!(
                                "ordo: error: {message}; recording goes on without writing (the program keeps running)"
                            ));
                            error = Some(message);
                            failed_here.store(true, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                    if error.is_some() {
                        unwritten += chunk.events.len() as u64;
                    }
                    chunk.events.clear();
                    let _ = give_back.try_send(chunk.events);
                }
                WriterEnd {
                    writer,
                    error,
                    unwritten,
                }
            })?;
        let tid = tid
            .recv()
            .map_err(|_| anyhow!("the trace writer thread did not start"))?;
        Ok(ChunkWriter {
            failed,
            chunks,
            spare,
            thread,
            tid,
        })
    }

    /// Queues a chunk; false means the writer thread is gone (it panicked).
    fn send(&self, chunk: Chunk) -> bool {
        self.chunks.send(chunk).is_ok()
    }

    fn empty_buffer(&self) -> Vec<Event> {
        self.spare
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(CHUNK_EVENTS))
    }

    fn finish(self) -> Result<WriterEnd> {
        drop(self.chunks);
        self.thread
            .join()
            .map_err(|_| anyhow!("the trace writer thread panicked"))
    }
}

/// A failed write to the trace `output`, in words: the file, the error, and what
/// the file still holds.
fn write_error(output: &std::path::Path, e: &std::io::Error, kept: u64) -> String {
    format!(
        "writing {}: {e}: the trace keeps its first {kept} bytes, readable with `ordo analyze --salvage`",
        output.display()
    )
}

/// Writes a line to stderr now, ignoring errors (a closed stderr must not stop a
/// recording).
fn say_now(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// Everything the drain keeps between chunks: turns raw records into trace events
/// and tracks the threads and modules the trace must describe.
pub(crate) struct DrainState {
    pub(crate) pid: u32,
    writer: Option<ChunkWriter>,
    /// The trace file.
    pub(crate) output: PathBuf,
    pending: Vec<Event>,
    /// Thread keys (distinct for threads that had the same tid).
    keys: ThreadKeys,
    /// Logical ids and names by thread key.
    ids: LogicalIdAssigner,
    names: HashMap<u32, String>,
    seen: TidSet,
    last_tid: u32,
    written_threads: HashMap<u32, ThreadRecord>,
    modules: Vec<ModuleRecord>,
    modules_written: usize,
    known: KnownRanges,
    last_module_scan: Option<Instant>,
    by_kind: [u64; kind::COUNT as usize],
    unknown_kinds: u64,
    /// Hardware-watchpoint traps: which instruction, what access.
    traps: TrapDecoder,
    /// Traps whose instruction could not be found (recorded as writes).
    unclassified_traps: u64,
    /// Events skipped after a write error (see [`DrainState::skip`]).
    skipped: u64,
    started: Instant,
    /// How long attaching took (reported in the summary).
    pub(crate) attach_time: Duration,
    /// Distinct addresses of discovered memory accesses (at most
    /// [`MAX_NAMED_ADDRESSES`]): named at the end when they are members or
    /// elements of a variable (`Footer::data_names`).
    accessed: std::collections::HashSet<u64>,
    /// Addresses of watched accesses (`--watch`, `--watch-hw`): a watch's events
    /// carry the watched object's address whichever part was touched, so they are
    /// named by the watch: its spec's path for a member or element
    /// ([`DrainState::name_watches`]), else the variable's symbol.
    watched: std::collections::HashSet<u64>,
    /// Addresses of synchronization objects (locks, condvars, futex words): named
    /// as the whole variable, as `pthread` objects always are, even when a
    /// discovered access reached them (a Rust mutex's lock word is its first field).
    objects: rustc_hash::FxHashSet<u64>,
    /// The object last put in `objects`.
    last_object: u64,
    /// Watched members and elements: (module, link-time address) → name.
    watch_names: HashMap<(PathBuf, u64), String>,
    /// The main binary's DWARF variables being read ahead ([`Self::prepare_data_names`]).
    prepared_names: Option<(
        PathBuf,
        std::thread::JoinHandle<Option<crate::watch::Resolver>>,
    )>,
    /// The main binary's part names kept from earlier recordings
    /// ([`crate::watch::KeptPartNames`]), taken when the recording started.
    kept_names: Option<(PathBuf, crate::watch::KeptPartNames)>,
}

/// Most distinct accessed addresses the drain keeps to name (a program touching
/// more static parts than this gets `var+OFFSET` for the rest).
const MAX_NAMED_ADDRESSES: usize = 1 << 16;

impl DrainState {
    /// A drain of process `pid`'s events into `writer` (the file `output`).
    pub(crate) fn new(pid: u32, writer: TraceWriter, output: PathBuf) -> Result<DrainState> {
        let writer = ChunkWriter::start(writer, output.clone())?;
        let mut seen = TidSet::default();
        seen.insert(pid);
        Ok(DrainState {
            pid,
            pending: writer.empty_buffer(),
            writer: Some(writer),
            output,
            keys: ThreadKeys::default(),
            ids: LogicalIdAssigner::new(pid),
            names: HashMap::new(),
            seen,
            last_tid: pid,
            written_threads: HashMap::new(),
            modules: Vec::new(),
            modules_written: 0,
            known: KnownRanges::default(),
            last_module_scan: None,
            by_kind: [0; kind::COUNT as usize],
            unknown_kinds: 0,
            traps: TrapDecoder::default(),
            unclassified_traps: 0,
            skipped: 0,
            started: Instant::now(),
            attach_time: Duration::ZERO,
            accessed: std::collections::HashSet::new(),
            objects: rustc_hash::FxHashSet::default(),
            last_object: 0,
            watched: std::collections::HashSet::new(),
            watch_names: HashMap::new(),
            prepared_names: None,
            kept_names: None,
        })
    }

    /// Threads that existed before attaching get ids in tid order.
    pub(crate) fn adopt_existing_threads(&mut self) {
        let mut tids: Vec<u32> = std::fs::read_dir(format!("/proc/{}/task", self.pid))
            .map(|d| {
                d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        tids.sort_unstable();
        for tid in tids {
            if tid != self.pid {
                self.ids.adopt(tid);
            }
            self.seen.insert(tid);
            if let Ok(name) = std::fs::read_to_string(format!("/proc/{}/task/{tid}/comm", self.pid))
            {
                self.names.insert(tid, name.trim().to_string());
            }
        }
    }

    /// Takes one probe record into the current chunk.
    pub(crate) fn take(&mut self, raw: &RawEvent) {
        let Some(mut event) = Event::from_raw(raw) else {
            self.unknown_kinds += 1;
            return;
        };
        let mut raw_kind = raw.kind;
        if raw.via == via::TRAP || raw.via == via::TRAP_ATOMIC {
            raw_kind = self.classify_trap(raw, &mut event);
        }
        if let Some(n) = self.by_kind.get_mut(raw_kind as usize) {
            *n += 1;
        }
        event.tid = if raw.kind == kind::THREAD_START {
            self.keys.started(raw.tid)
        } else {
            self.keys.key(raw.tid)
        };
        if event.tid != self.last_tid {
            self.last_tid = event.tid;
            self.seen.insert(event.tid);
        }
        match raw.kind {
            kind::THREAD_CREATE => {
                if let Some(child) = event.child_tid() {
                    let child = self.keys.created(child);
                    event.value = child as u64;
                    self.ids.created(event.tid, child);
                    self.seen.insert(child);
                }
            }
            kind::THREAD_START | kind::THREAD_EXIT => {
                let name = comm(&raw.name);
                if !name.is_empty() {
                    self.names.insert(event.tid, name);
                }
                if raw.kind == kind::THREAD_EXIT {
                    self.keys.exited(raw.tid);
                }
            }
            _ => {}
        }
        if self.modules.is_empty() || (event.site != 0 && !self.known.contains(event.site)) {
            self.scan_modules();
        }
        if event.kind.is_access() {
            let set = if event.via.is_point() {
                &mut self.accessed
            } else {
                &mut self.watched
            };
            if set.len() < MAX_NAMED_ADDRESSES {
                set.insert(event.addr);
            }
        } else if event.addr != 0
            && event.addr != self.last_object
            && !event.kind.is_lifecycle()
            && event.kind != Kind::At
            && self.objects.len() < MAX_NAMED_ADDRESSES
        {
            // A lock's release follows its acquisition: one lookup for both.
            self.last_object = event.addr;
            self.objects.insert(event.addr);
        }
        self.pending.push(event);
    }

    /// Names the events of watched members and elements take (module, link-time
    /// address, name), from the watch specs.
    /// Starts reading `binary`'s DWARF variables on a thread, for [`Self::data_names`].
    pub(crate) fn prepare_data_names(&mut self, binary: &std::path::Path) {
        let kept = crate::watch::KeptPartNames::of(binary);
        let named_before = kept.as_ref().is_some_and(|k| !k.is_empty());
        if let Some(kept) = kept {
            self.kept_names = Some((binary.to_path_buf(), kept));
        }
        if named_before {
            // Earlier recordings named this binary's addresses: the file is read
            // again only if this one reaches others (in `data_names`).
            return;
        }
        let path = binary.to_path_buf();
        let reading = std::thread::Builder::new()
            .name("ordo-names".into())
            .spawn(move || {
                // The symbols only: DWARF is read when an access falls inside
                // one of the binary's variables (`part_name`), which most
                // programs' discovered accesses (heap, stacks) never do, and a
                // Rust binary's DWARF variables (std's) take ~30 ms to read.
                crate::watch::Resolver::for_data_names(&path).ok()
            });
        if let Ok(reading) = reading {
            self.prepared_names = Some((binary.to_path_buf(), reading));
        }
    }

    pub(crate) fn name_watches(&mut self, names: &[(PathBuf, u64, String)]) {
        for (module, vaddr, name) in names {
            let module = std::fs::canonicalize(module).unwrap_or_else(|_| module.clone());
            self.watch_names.insert((module, *vaddr), name.clone());
        }
    }

    /// Names of the discovered accesses' addresses that are members or elements
    /// of a variable of the main binary (`conn.buf`), from its DWARF types: the
    /// trace, `dump`, `analyze` and schedules then say what a `--watch` spec would.
    fn data_names(&mut self) -> Vec<ordo_trace::schema::DataName> {
        if self.accessed.is_empty() && self.watch_names.is_empty() {
            return Vec::new();
        }
        let symbolizer = ordo_trace::symbolize::Symbolizer::new(&self.modules);
        let mut names: Vec<ordo_trace::schema::DataName> = Vec::new();
        if !self.watch_names.is_empty() {
            for &addr in &self.watched {
                let Some((path, vaddr)) = symbolizer.module_vaddr(addr) else {
                    continue;
                };
                if let Some(name) = self.watch_names.get(&(PathBuf::from(path), vaddr)) {
                    names.push(ordo_trace::schema::DataName {
                        addr,
                        name: name.clone(),
                    });
                }
            }
        }
        // The main binary is the first module (mapped lowest, listed first in
        // /proc/PID/maps); libraries' variables keep their symbol names.
        let mut by_module: HashMap<String, Vec<(u64, u64)>> = HashMap::new();
        for &addr in self.accessed.difference(&self.watched) {
            if self.objects.contains(&addr) {
                continue;
            }
            if let Some((path, vaddr)) = symbolizer.module_vaddr(addr) {
                by_module
                    .entry(path.to_string())
                    .or_default()
                    .push((addr, vaddr));
            }
        }
        let main = self.modules.first().map(|m| m.path.clone());
        let addresses = main.as_ref().and_then(|m| by_module.remove(m));
        let same_as_main = |binary: &PathBuf| {
            main.as_ref().is_some_and(|m| {
                std::fs::canonicalize(m)
                    .is_ok_and(|m| std::fs::canonicalize(binary).is_ok_and(|b| b == m))
            })
        };
        let prepared = self
            .prepared_names
            .take()
            .filter(|(binary, _)| same_as_main(binary))
            .and_then(|(_, reading)| reading.join().ok().flatten());
        let mut kept = self
            .kept_names
            .take()
            .filter(|(binary, _)| same_as_main(binary))
            .map(|(_, kept)| kept)
            .or_else(|| crate::watch::KeptPartNames::of(std::path::Path::new(main.as_ref()?)));
        crate::phase("names: resolver");
        if let (Some(addresses), Some(main)) = (addresses, main.as_ref()) {
            let vaddrs: Vec<u64> = addresses.iter().map(|&(_, vaddr)| vaddr).collect();
            let missing: Vec<u64> = vaddrs
                .iter()
                .copied()
                .filter(|v| kept.as_ref().is_none_or(|k| k.get(*v).is_none()))
                .collect();
            let mut found: HashMap<u64, Option<String>> = HashMap::new();
            if !missing.is_empty() {
                let resolver = prepared.or_else(|| {
                    crate::watch::Resolver::for_data_names(std::path::Path::new(main)).ok()
                });
                if let Some(mut resolver) = resolver {
                    found = missing
                        .iter()
                        .copied()
                        .zip(resolver.part_names(&missing))
                        .collect();
                    if let Some(kept) = kept.as_mut() {
                        kept.add(&found);
                    }
                }
            }
            names.extend(addresses.into_iter().filter_map(|(addr, vaddr)| {
                let name = match found.get(&vaddr) {
                    Some(name) => name.clone(),
                    None => kept.as_ref()?.get(vaddr)?.map(str::to_string),
                }?;
                Some(ordo_trace::schema::DataName { addr, name })
            }));
        }
        names.sort_by_key(|d| d.addr);
        crate::phase("names: named");
        names
    }

    /// Whether writing the trace failed: what is taken from now on is only counted.
    pub(crate) fn write_failed(&self) -> bool {
        self.writer
            .as_ref()
            .is_some_and(|w| w.failed.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Counts `n` events that were recorded but, writing having failed, are not
    /// even converted.
    pub(crate) fn skip(&mut self, n: u64) {
        self.skipped += n;
    }

    /// The kernel tid of the thread that encodes and writes the chunks.
    pub(crate) fn writer_tid(&self) -> i32 {
        self.writer.as_ref().map_or(0, |w| w.tid)
    }

    /// A hardware watchpoint's trap: the kind, atomicity and site of the access
    /// from the instruction that ends where the trap left the thread. Returns the
    /// kind code.
    fn classify_trap(&mut self, raw: &RawEvent, event: &mut Event) -> u16 {
        let atomic_type = raw.via == via::TRAP_ATOMIC;
        let mut found = self.traps.classify(raw.site, &self.modules);
        if found.is_none() {
            self.scan_modules();
            found = self.traps.classify(raw.site, &self.modules);
        }
        let (code, atomic) = match found {
            Some(access) => {
                event.site = access.ip;
                (access.kind, access.atomic)
            }
            None => {
                self.unclassified_traps += 1;
                (kind::WRITE, false)
            }
        };
        event.kind = Kind::from_code(code).unwrap_or(Kind::Write);
        event.via = if atomic || atomic_type {
            ordo_trace::Via::Atomic
        } else {
            ordo_trace::Via::Plain
        };
        code
    }

    /// Whether the current chunk is full.
    pub(crate) fn chunk_full(&self) -> bool {
        self.pending.len() >= CHUNK_EVENTS
    }

    /// Re-reads the target's mappings (rate-limited: a site in a module unloaded
    /// since would otherwise trigger a scan per event).
    fn scan_modules(&mut self) {
        if self
            .last_module_scan
            .is_some_and(|t| t.elapsed() < Duration::from_millis(200))
        {
            return;
        }
        self.last_module_scan = Some(Instant::now());
        self.add_modules(modules_of_process(self.pid));
    }

    /// Whether the target's modules have been read at least once.
    pub(crate) fn has_modules(&self) -> bool {
        !self.modules.is_empty()
    }

    /// Merges a snapshot of the target's modules (from a scan here or one taken by
    /// the session right after `exec`, before a short program can exit and take its
    /// mappings with it).
    pub(crate) fn add_modules(&mut self, snapshot: Vec<ModuleRecord>) {
        for module in snapshot {
            match self.modules.iter_mut().find(|m| m.path == module.path) {
                Some(known) => {
                    for map in module.mappings {
                        if !known.mappings.contains(&map) {
                            known.mappings.push(map);
                        }
                    }
                }
                None => self.modules.push(module),
            }
        }
        self.known.rebuild(&self.modules);
    }

    fn thread_records(&mut self, finishing: bool) -> Vec<ThreadRecord> {
        let mut out = Vec::new();
        let mut tids: Vec<u32> = self.seen.iter().copied().collect();
        tids.sort_unstable();
        for tid in tids {
            let logical = match self.ids.get(tid) {
                Some(id) => id.clone(),
                // A thread whose creation was not seen (yet): only at the end is it
                // adopted, so a late thread_create still gives it its real id.
                None if finishing => self.ids.adopt(tid),
                None => continue,
            };
            let record = ThreadRecord {
                tid,
                logical: logical.0,
                name: self.names.get(&tid).cloned().unwrap_or_default(),
                parent_tid: self.ids.parent(tid).unwrap_or(0),
            };
            if self.written_threads.get(&tid) != Some(&record) {
                self.written_threads.insert(tid, record.clone());
                out.push(record);
            }
        }
        out
    }

    /// Hands the current chunk (with new thread and module records) to the writer.
    pub(crate) fn flush(&mut self, dropped: u64, finishing: bool) -> Result<()> {
        let threads = self.thread_records(finishing);
        // Modules change rarely: a module record is written whole when first seen,
        // and again if it gained mappings (dlopen of more segments).
        let modules: Vec<ModuleRecord> = self.modules[self.modules_written..].to_vec();
        if self.pending.is_empty() && threads.is_empty() && modules.is_empty() {
            return Ok(());
        }
        let writer = self.writer.as_ref().expect("not finished");
        let events = std::mem::replace(&mut self.pending, writer.empty_buffer());
        let sent = writer.send(Chunk {
            events,
            threads,
            modules,
            dropped,
        });
        if !sent {
            self.writer.take().expect("not finished").finish()?;
            return Err(anyhow!("the trace writer stopped"));
        }
        self.modules_written = self.modules.len();
        Ok(())
    }

    /// Writes the last chunk and the footer (with the target's exit status if it
    /// exited) and returns the totals.
    pub(crate) fn finish(
        mut self,
        dropped: u64,
        exit: Option<ExitStatus>,
    ) -> Result<RecordSummary> {
        use std::os::unix::process::ExitStatusExt;
        self.last_module_scan = None;
        if self.modules.is_empty() {
            self.scan_modules();
        }
        crate::phase("finish: modules");
        self.flush(dropped, true)?;
        crate::phase("finish: flushed");
        let WriterEnd {
            writer,
            mut error,
            unwritten,
        } = self.writer.take().expect("finished once").finish()?;
        crate::phase("finish: writer joined");
        let footer = Footer {
            dropped,
            end_monotonic_ns: monotonic_ns(),
            exit_code: exit.and_then(|s| s.code()),
            exit_signal: exit.and_then(|s| s.signal()),
            unknown_kinds: self.unknown_kinds,
            data_names: self.data_names(),
            ..Default::default()
        };
        let events = writer.events_written();
        let kept = writer.bytes_written();
        // After a failed write the trace stays without footer: it ends where its
        // intact chunks end, as if the recording had been cut short there.
        let bytes = match error {
            Some(_) => kept,
            None => writer.finish(footer).unwrap_or_else(|e| {
                let message = write_error(&self.output, &e, kept);
                say_now(&format!("ordo: error: {message}"));
                error = Some(message);
                kept
            }),
        };
        crate::phase("finish: footer written");
        let by_kind: BTreeMap<&'static str, u64> = self
            .by_kind
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .filter_map(|(code, n)| Some((Kind::from_code(code as u16)?.name(), *n)))
            .collect();
        Ok(RecordSummary {
            output: self.output,
            events,
            dropped,
            by_kind,
            threads: self.written_threads.len(),
            bytes,
            duration: self.started.elapsed(),
            exit,
            attach_time: self.attach_time,
            write_error: error,
            unwritten: unwritten + self.skipped,
            notes: (self.unclassified_traps > 0)
                .then(|| format!(
                    "{} hardware watchpoint hits had no decodable instruction before them (recorded as writes)",
                    self.unclassified_traps
                ))
                .into_iter()
                .chain((self.keys.overflow > 0).then(|| format!(
                    "{} threads reused a tid more than {MAX_INCARNATION} times and were merged with the thread before them",
                    self.keys.overflow
                )))
                .collect(),
        })
    }
}

fn comm(name: &[u8; 16]) -> String {
    let end = name.iter().position(|&b| b == 0).unwrap_or(16);
    String::from_utf8_lossy(&name[..end]).into_owned()
}

/// Raises the calling thread's scheduling priority so the target cannot starve it;
/// says what it got.
pub(super) fn raise_priority() -> &'static str {
    // SAFETY: plain syscalls on the calling thread with a valid sched_param.
    unsafe {
        let param = libc::sched_param { sched_priority: 1 };
        if libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 {
            return "SCHED_FIFO 1";
        }
        let tid = libc::gettid();
        if libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, -20) == 0 {
            return "nice -20";
        }
    }
    "normal"
}

/// The drain thread's body: drains `ring` until `stop` says the recording ends,
/// then switches the probes off, takes what is left, finishes the trace and hands
/// the detach off.
pub(super) async fn drain(
    mut probes: Probes,
    ring: RingBuf<MapData>,
    mut state: DrainState,
    mut stop: oneshot::Receiver<Option<ExitStatus>>,
    mut snapshots: mpsc::UnboundedReceiver<Vec<ModuleRecord>>,
) -> Result<RecordSummary> {
    raise_priority();
    // SAFETY: the ring buffer owns its fd and outlives the registration (both are
    // dropped together at the end of this function).
    let mut ring =
        unsafe { AsyncFd::register(ring) }.map_err(|e| anyhow!("poll the ring buffer: {e}"))?;
    let mut ticker = tokio::time::interval(POLL_INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_flush = Instant::now();
    let mut waking_each = true;
    let exit = loop {
        if waking_each && state.has_modules() {
            probes.stop_waking_each();
            waking_each = false;
        }
        tokio::select! {
            guard = ring.readable_mut() => {
                let mut guard = guard.context("poll the ring buffer")?;
                drain_ready(guard.get_inner_mut(), &mut state, &probes)?;
                guard.clear_ready();
            }
            _ = ticker.tick() => {
                drain_ready(ring.get_mut(), &mut state, &probes)?;
                if last_flush.elapsed() >= FLUSH_INTERVAL {
                    state.flush(probes.drops(), false)?;
                    last_flush = Instant::now();
                }
            }
            Some(snapshot) = snapshots.recv() => state.add_modules(snapshot),
            exit = &mut stop => break exit.unwrap_or(None),
        }
    };
    while let Ok(snapshot) = snapshots.try_recv() {
        state.add_modules(snapshot);
    }
    // A live target stops paying for the programs' work now, before the detach.
    probes.disable();
    // Events already in the ring buffer belong to the run: take them all.
    drain_ready(ring.get_mut(), &mut state, &probes)?;
    let dropped = probes.drops();
    drop(ring);
    let mut summary = state.finish(dropped, exit);
    if let Ok(summary) = &mut summary {
        summary.notes.extend(probes.notes(false, 0));
    }
    let handoff = super::detach::hand_off();
    drop(probes);
    drop(handoff);
    summary
}

/// Takes every record the ring buffer holds, handing a chunk to the writer whenever
/// one fills up.
fn drain_ready(ring: &mut RingBuf<MapData>, state: &mut DrainState, probes: &Probes) -> Result<()> {
    loop {
        while let Some(item) = ring.next() {
            if item.len() < std::mem::size_of::<RawEvent>() {
                continue;
            }
            // SAFETY: the probes write whole RawEvent records; read_unaligned copes
            // with the ring buffer's 8-byte record alignment.
            let raw: RawEvent = unsafe { std::ptr::read_unaligned(item.as_ptr().cast()) };
            drop(item);
            state.take(&raw);
            if state.chunk_full() {
                break;
            }
        }
        if !state.chunk_full() {
            return Ok(());
        }
        state.flush(probes.drops(), false)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_counts_kinds_threads_and_unknown_records() {
        let dir = tempfile::tempdir().unwrap();
        let output = dir.path().join("t.ordo");
        let writer = TraceWriter::create(&output, &Default::default()).unwrap();
        // Process 0 is no process: no module scan finds anything, as for a target
        // that is gone.
        let mut state = DrainState::new(0, writer, output.clone()).unwrap();
        let raw = |tid, kind, value| RawEvent {
            tid,
            kind,
            value,
            ts_ns: 1,
            ..RawEvent::default()
        };
        state.take(&raw(0, kind::THREAD_CREATE, 7));
        for _ in 0..3 {
            state.take(&raw(7, kind::MUTEX_LOCK, 0));
            state.take(&raw(7, kind::MUTEX_UNLOCK, 0));
        }
        state.take(&raw(7, kind::COUNT + 5, 0));
        let summary = state.finish(4, None).unwrap();
        assert_eq!(summary.events, 7);
        assert_eq!(summary.dropped, 4);
        assert_eq!(summary.threads, 2);
        assert_eq!(
            summary.by_kind,
            BTreeMap::from([("mutex_lock", 3), ("mutex_unlock", 3), ("thread_create", 1)])
        );
        let (reader, events) =
            ordo_trace::read_trace(&output, ordo_trace::ReadMode::Strict).unwrap();
        assert_eq!(events.len(), 7);
        assert_eq!(reader.footer.unwrap().unknown_kinds, 1);
    }

    #[test]
    fn a_reused_tid_gets_a_new_key_whichever_comes_first() {
        let mut keys = ThreadKeys::default();
        let second = 1 << TID_BITS | 7;
        // Creation after the child's start and exit (a short thread), then the
        // tid again, created before it starts.
        assert_eq!(keys.started(7), 7);
        keys.exited(7);
        assert_eq!(keys.created(7), 7);
        assert_eq!(keys.created(7), second);
        assert_eq!(keys.started(7), second);
        assert_eq!(keys.key(7), second);
        keys.exited(7);
        // Two later threads with it start before either creation is taken: the
        // creations go to them in order.
        let third = 2 << TID_BITS | 7;
        assert_eq!(keys.started(7), third);
        keys.exited(7);
        assert_eq!(keys.started(7), 3 << TID_BITS | 7);
        assert_eq!(keys.created(7), third);
        assert_eq!(keys.created(7), 3 << TID_BITS | 7);
        assert_eq!(ordo_trace::thread::kernel_tid(third), 7);
    }

    #[test]
    fn known_ranges_find_sites_in_any_mapping() {
        use ordo_trace::schema::Mapping;
        let module = |path: &str, ranges: &[(u64, u64)]| ModuleRecord {
            path: path.into(),
            build_id: String::new(),
            mappings: ranges
                .iter()
                .map(|&(start, end)| Mapping {
                    start,
                    end,
                    file_offset: 0,
                })
                .collect(),
        };
        let mut known = KnownRanges::default();
        known.rebuild(&[
            module("/b", &[(0x5000, 0x6000)]),
            module("/a", &[(0x1000, 0x2000), (0x3000, 0x4000)]),
        ]);
        for (site, inside) in [
            (0x0fff, false),
            (0x1000, true),
            (0x1fff, true),
            (0x2000, false),
            (0x3800, true),
            (0x3800, true),
            (0x5000, true),
            (0x6000, false),
            (0, false),
            (u64::MAX, false),
        ] {
            assert_eq!(known.contains(site), inside, "{site:#x}");
        }
    }
}
