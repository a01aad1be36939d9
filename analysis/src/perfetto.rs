//! `ordo export --perfetto`: a trace as Perfetto TrackEvents, to look at a run in the
//! Perfetto UI (ui.perfetto.dev): one track per thread, slices for critical sections
//! and waits, an instant per event, and flow arrows for happens-before edges between
//! threads (release → the next acquire of another thread, signal → woken wait,
//! create → start, exit → join, post → wait, wake → futex wait, barrier).
//!
//! The messages are a hand-written subset of perfetto's `trace.proto`, with the
//! upstream field numbers; the file is a `Trace` (field 1: repeated `TracePacket`),
//! written packet by packet so exporting streams like the analysis does.

use std::fmt;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use ordo_trace::output::Output;
use ordo_trace::symbolize::Symbolizer;
use ordo_trace::text::escape;
use ordo_trace::{Event, Kind, ReadMode, TraceError, TraceReader};
use prost::Message;
use rustc_hash::FxHashMap;

use crate::merge::Merger;

/// `perfetto.protos.Trace`.
#[derive(Clone, PartialEq, Message)]
pub struct Trace {
    /// The packets.
    #[prost(message, repeated, tag = "1")]
    pub packet: Vec<TracePacket>,
}

/// `perfetto.protos.TracePacket` (subset).
#[derive(Clone, PartialEq, Message)]
pub struct TracePacket {
    /// Timestamp in nanoseconds.
    #[prost(uint64, optional, tag = "8")]
    pub timestamp: Option<u64>,
    /// Writer sequence.
    #[prost(uint32, optional, tag = "10")]
    pub trusted_packet_sequence_id: Option<u32>,
    /// A track event.
    #[prost(message, optional, tag = "11")]
    pub track_event: Option<TrackEvent>,
    /// `SEQ_INCREMENTAL_STATE_CLEARED` = 1 on the first packet.
    #[prost(uint32, optional, tag = "13")]
    pub sequence_flags: Option<u32>,
    /// A track definition.
    #[prost(message, optional, tag = "60")]
    pub track_descriptor: Option<TrackDescriptor>,
}

/// `perfetto.protos.TrackDescriptor` (subset).
#[derive(Clone, PartialEq, Message)]
pub struct TrackDescriptor {
    /// Track id, global to the trace.
    #[prost(uint64, optional, tag = "1")]
    pub uuid: Option<u64>,
    /// Display name.
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
    /// For a process track.
    #[prost(message, optional, tag = "3")]
    pub process: Option<ProcessDescriptor>,
    /// For a thread track.
    #[prost(message, optional, tag = "4")]
    pub thread: Option<ThreadDescriptor>,
    /// Parent track.
    #[prost(uint64, optional, tag = "5")]
    pub parent_uuid: Option<u64>,
}

/// `perfetto.protos.ProcessDescriptor` (subset).
#[derive(Clone, PartialEq, Message)]
pub struct ProcessDescriptor {
    /// Process id.
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    /// Command line.
    #[prost(string, repeated, tag = "2")]
    pub cmdline: Vec<String>,
    /// Name.
    #[prost(string, optional, tag = "6")]
    pub process_name: Option<String>,
}

/// `perfetto.protos.ThreadDescriptor` (subset).
#[derive(Clone, PartialEq, Message)]
pub struct ThreadDescriptor {
    /// Process id.
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    /// Thread id.
    #[prost(int32, optional, tag = "2")]
    pub tid: Option<i32>,
    /// Name.
    #[prost(string, optional, tag = "5")]
    pub thread_name: Option<String>,
}

/// `perfetto.protos.TrackEvent` (subset).
#[derive(Clone, PartialEq, Message)]
pub struct TrackEvent {
    /// Annotations.
    #[prost(message, repeated, tag = "4")]
    pub debug_annotations: Vec<DebugAnnotation>,
    /// [`TYPE_SLICE_BEGIN`], [`TYPE_SLICE_END`] or [`TYPE_INSTANT`].
    #[prost(int32, optional, tag = "9")]
    pub r#type: Option<i32>,
    /// The track.
    #[prost(uint64, optional, tag = "11")]
    pub track_uuid: Option<u64>,
    /// Categories.
    #[prost(string, repeated, tag = "22")]
    pub categories: Vec<String>,
    /// Name.
    #[prost(string, optional, tag = "23")]
    pub name: Option<String>,
    /// Flows starting or passing here.
    #[prost(fixed64, repeated, packed = "false", tag = "47")]
    pub flow_ids: Vec<u64>,
    /// Flows ending here.
    #[prost(fixed64, repeated, packed = "false", tag = "48")]
    pub terminating_flow_ids: Vec<u64>,
}

/// `perfetto.protos.DebugAnnotation` (subset: a named string).
#[derive(Clone, PartialEq, Message)]
pub struct DebugAnnotation {
    /// Value.
    #[prost(string, optional, tag = "6")]
    pub string_value: Option<String>,
    /// Name.
    #[prost(string, optional, tag = "10")]
    pub name: Option<String>,
}

impl Trace {
    /// Decodes an exported file's bytes (a check that the output is well formed).
    pub fn from_bytes(bytes: &[u8]) -> Result<Trace, prost::DecodeError> {
        Trace::decode(bytes)
    }
}

/// `TrackEvent.Type.TYPE_SLICE_BEGIN`.
pub const TYPE_SLICE_BEGIN: i32 = 1;
/// `TrackEvent.Type.TYPE_SLICE_END`.
pub const TYPE_SLICE_END: i32 = 2;
/// `TrackEvent.Type.TYPE_INSTANT`.
pub const TYPE_INSTANT: i32 = 3;

const SEQUENCE: u32 = 1;
const PROCESS_TRACK: u64 = 1;
const THREAD_TRACK_BASE: u64 = 100;

/// Why an export failed.
#[derive(Debug)]
pub enum ExportError {
    /// The trace could not be read.
    Trace(TraceError),
    /// The output could not be written.
    Write(PathBuf, io::Error),
}

impl fmt::Display for ExportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExportError::Trace(e) => write!(f, "{e}"),
            ExportError::Write(p, e) => write!(f, "{}: cannot write: {e}", p.display()),
        }
    }
}

impl std::error::Error for ExportError {}

impl From<TraceError> for ExportError {
    fn from(e: TraceError) -> Self {
        ExportError::Trace(e)
    }
}

/// What an export wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExportStats {
    /// Packets written.
    pub packets: u64,
    /// Slices (critical sections and waits).
    pub slices: u64,
    /// Flow arrows between threads.
    pub flows: u64,
}

struct Writer {
    out: BufWriter<File>,
    path: PathBuf,
    buf: Vec<u8>,
    stats: ExportStats,
}

impl Writer {
    fn packet(&mut self, p: &TracePacket) -> Result<(), ExportError> {
        self.buf.clear();
        // Field 1 (repeated TracePacket), length-delimited: concatenated packets
        // are a valid `Trace` message.
        self.buf.push(0x0a);
        prost::encoding::encode_varint(p.encoded_len() as u64, &mut self.buf);
        p.encode(&mut self.buf).expect("a Vec grows");
        self.out
            .write_all(&self.buf)
            .map_err(|e| ExportError::Write(self.path.clone(), e))?;
        self.stats.packets += 1;
        Ok(())
    }

    fn event(
        &mut self,
        ts: u64,
        track: u64,
        ty: i32,
        name: Option<String>,
        site: Option<&str>,
        flows: (Vec<u64>, Vec<u64>),
    ) -> Result<(), ExportError> {
        let debug_annotations = site
            .map(|s| {
                vec![DebugAnnotation {
                    name: Some("site".into()),
                    string_value: Some(s.to_string()),
                }]
            })
            .unwrap_or_default();
        self.packet(&TracePacket {
            timestamp: Some(ts),
            trusted_packet_sequence_id: Some(SEQUENCE),
            track_event: Some(TrackEvent {
                debug_annotations,
                r#type: Some(ty),
                track_uuid: Some(track),
                categories: vec!["ordo".into()],
                name,
                flow_ids: flows.0,
                terminating_flow_ids: flows.1,
            }),
            sequence_flags: None,
            track_descriptor: None,
        })
    }
}

/// An open slice on a thread's track.
#[derive(Clone)]
struct Open {
    key: (u8, u64),
    name: String,
}

/// Converts `trace` to a Perfetto trace at `output`, created as
/// [`ordo_trace::output`] does: never through a symlink, never over `trace`, and
/// over an existing file only with `force`. Strings from the trace (command line,
/// thread names, symbols) are escaped ([`ordo_trace::text::escape`]).
pub fn export_perfetto(
    trace: &Path,
    output: &Path,
    force: bool,
) -> Result<ExportStats, ExportError> {
    export(trace, output, force, None)
}

/// Writes the interleaving of one finding of `trace` (from
/// [`crate::analyze_trace`]) to `output` as a Perfetto trace: the tracks of the
/// threads it involves, their events from its first to its last, and its own
/// events marked (`★`, in the event's name) — what to look at, with what the
/// threads did around it.
pub fn export_perfetto_finding(
    trace: &Path,
    output: &Path,
    force: bool,
    finding: &crate::Finding,
) -> Result<ExportStats, ExportError> {
    let focus = Focus::of(finding);
    export(trace, output, force, Some(&focus))
}

/// What a finding's export keeps and marks.
struct Focus {
    tids: rustc_hash::FxHashSet<u32>,
    from_ts: u64,
    to_ts: u64,
    marked: rustc_hash::FxHashSet<crate::FindingEvent>,
}

impl Focus {
    fn of(finding: &crate::Finding) -> Focus {
        let events = &finding.events;
        Focus {
            tids: events.iter().map(|e| e.tid).collect(),
            from_ts: events.iter().map(|e| e.ts).min().unwrap_or(0),
            to_ts: events.iter().map(|e| e.ts).max().unwrap_or(u64::MAX),
            marked: events.iter().copied().collect(),
        }
    }

    fn keeps(&self, e: &Event) -> bool {
        self.tids.contains(&e.tid) && e.ts_ns >= self.from_ts && e.ts_ns <= self.to_ts
    }

    fn marks(&self, e: &Event) -> bool {
        self.marked.contains(&crate::FindingEvent {
            tid: e.tid,
            kind: e.kind,
            addr: e.addr,
            ts: e.ts_ns,
        })
    }
}

fn export(
    trace: &Path,
    output: &Path,
    force: bool,
    focus: Option<&Focus>,
) -> Result<ExportStats, ExportError> {
    let write_error = |e| ExportError::Write(output.to_path_buf(), e);
    let reader = TraceReader::open(trace, ReadMode::Strict)?;
    let mut target = Output::create(output, force, &[trace]).map_err(write_error)?;
    let file = target.file().try_clone().map_err(write_error)?;
    let mut w = Writer {
        out: BufWriter::new(file),
        path: output.to_path_buf(),
        buf: Vec::new(),
        stats: ExportStats::default(),
    };
    let symbolizer = Symbolizer::of_trace(&reader);
    let pid = reader.header.pid as i32;
    let process_name = reader
        .header
        .command
        .first()
        .map(|c| escape(c).into_owned())
        .unwrap_or_else(|| "target".into());
    w.packet(&TracePacket {
        sequence_flags: Some(1),
        trusted_packet_sequence_id: Some(SEQUENCE),
        track_descriptor: Some(TrackDescriptor {
            uuid: Some(PROCESS_TRACK),
            name: Some(process_name.clone()),
            process: Some(ProcessDescriptor {
                pid: Some(pid),
                cmdline: reader
                    .header
                    .command
                    .iter()
                    .map(|c| escape(c).into_owned())
                    .collect(),
                process_name: Some(process_name),
            }),
            thread: None,
            parent_uuid: None,
        }),
        timestamp: None,
        track_event: None,
    })?;
    let mut track_of_tid: FxHashMap<u32, u64> = FxHashMap::default();
    let threads: Vec<_> = reader.threads.iter().cloned().collect();
    for (i, t) in threads.iter().enumerate() {
        if focus.is_some_and(|f| !f.tids.contains(&t.tid)) {
            continue;
        }
        let uuid = THREAD_TRACK_BASE + i as u64;
        track_of_tid.insert(t.tid, uuid);
        w.packet(&thread_track(
            uuid,
            pid,
            t.tid,
            &format!("{} [{}]", escape(&t.name), t.logical),
        ))?;
    }
    let mut names: FxHashMap<u64, String> = FxHashMap::default();
    let mut sites: FxHashMap<u64, String> = FxHashMap::default();
    let mut stacks: FxHashMap<u64, Vec<Open>> = FxHashMap::default();
    // Per object: (thread, flow id) of the last release-like event, not yet consumed.
    let mut pending: FxHashMap<(u8, u64), (u32, u64)> = FxHashMap::default();
    let mut handles: FxHashMap<u64, u32> = FxHashMap::default();
    let terminated = terminated_flows(trace, focus)?;
    let mut events = Ordered::new(reader);
    let mut index = 0u64;
    while let Some(e) = events.next()? {
        index += 1;
        if focus.is_some_and(|f| !f.keeps(&e)) {
            continue;
        }
        let track = match track_of_tid.get(&e.tid) {
            Some(&t) => t,
            None => {
                let uuid = THREAD_TRACK_BASE + 1_000_000 + e.tid as u64;
                track_of_tid.insert(e.tid, uuid);
                w.packet(&thread_track(uuid, pid, e.tid, &format!("tid {}", e.tid)))?;
                uuid
            }
        };
        let object = if e.addr == 0 || matches!(e.kind, Kind::ThreadStart | Kind::ThreadExit) {
            String::new()
        } else {
            names
                .entry(e.addr)
                .or_insert_with(|| {
                    symbolizer
                        .data_name(e.addr)
                        .map(|n| escape(&n).into_owned())
                        .unwrap_or_else(|| format!("{:#x}", e.addr))
                })
                .clone()
        };
        let site = (e.site != 0).then(|| {
            sites
                .entry(e.site)
                .or_insert_with(|| escape(&symbolizer.site_text(e.site)).into_owned())
                .clone()
        });
        let mut flows = flows_of(&e, index, &mut pending, &mut handles, &mut w.stats);
        // A release no other thread's acquire follows starts no arrow.
        flows.0.retain(|id| terminated.contains(id));
        let mut name = if object.is_empty() {
            e.kind.name().to_string()
        } else {
            format!("{} {}", e.kind.name(), object)
        };
        if focus.is_some_and(|f| f.marks(&e)) {
            name = format!("★ {name}");
        }
        w.event(
            e.ts_ns,
            track,
            TYPE_INSTANT,
            Some(name),
            site.as_deref(),
            flows,
        )?;
        let stack = stacks.entry(track).or_default();
        match e.kind {
            Kind::MutexLock | Kind::RwlockRdlock | Kind::RwlockWrlock => {
                let key = (0, e.addr);
                if stack.iter().any(|o| o.key == key) {
                    continue; // recursive acquisition: same slice
                }
                let verb = if e.kind == Kind::RwlockRdlock {
                    "reads"
                } else {
                    "holds"
                };
                open(
                    &mut w,
                    stack,
                    e.ts_ns,
                    track,
                    key,
                    format!("{verb} {object}"),
                )?;
            }
            Kind::MutexUnlock | Kind::RwlockUnlock => {
                close(&mut w, stack, e.ts_ns, track, (0, e.addr))?
            }
            Kind::CondWaitBegin => open(
                &mut w,
                stack,
                e.ts_ns,
                track,
                (1, e.addr),
                format!("waits on {object}"),
            )?,
            Kind::CondWait => close(&mut w, stack, e.ts_ns, track, (1, e.addr))?,
            Kind::BarrierArrive => open(
                &mut w,
                stack,
                e.ts_ns,
                track,
                (2, e.addr),
                format!("barrier {object}"),
            )?,
            Kind::BarrierWait => close(&mut w, stack, e.ts_ns, track, (2, e.addr))?,
            _ => {}
        }
    }
    w.out
        .flush()
        .map_err(|e| ExportError::Write(w.path.clone(), e))?;
    target.commit().map_err(write_error)?;
    Ok(w.stats)
}

/// A trace's events in global order, chunk by chunk.
struct Ordered {
    reader: TraceReader,
    merger: Merger,
    chunk: Vec<Event>,
    ready: std::collections::VecDeque<Event>,
    finished: bool,
}

impl Ordered {
    fn new(reader: TraceReader) -> Ordered {
        Ordered {
            reader,
            merger: Merger::new(),
            chunk: Vec::new(),
            ready: std::collections::VecDeque::new(),
            finished: false,
        }
    }

    fn next(&mut self) -> Result<Option<Event>, ExportError> {
        while self.ready.is_empty() && !self.finished {
            if self.reader.next_chunk_into(&mut self.chunk)? {
                // In batches: the merger then queues only what arrives out of
                // order, and its work follows the live threads.
                let ready = &mut self.ready;
                self.merger.push_batch(&self.chunk, |e| ready.push_back(*e));
            } else {
                self.merger.finish();
                self.finished = true;
                while let Some(e) = self.merger.pop() {
                    self.ready.push_back(e);
                }
            }
        }
        Ok(self.ready.pop_front())
    }
}

/// The flow ids a later event terminates (a first pass over the trace): a flow
/// starts only where another thread's acquire will end it, so no arrow in the
/// export goes nowhere (a last unlock, a signal no wait took).
fn terminated_flows(
    trace: &Path,
    focus: Option<&Focus>,
) -> Result<rustc_hash::FxHashSet<u64>, ExportError> {
    let mut events = Ordered::new(TraceReader::open(trace, ReadMode::Strict)?);
    let mut pending: FxHashMap<(u8, u64), (u32, u64)> = FxHashMap::default();
    let mut handles: FxHashMap<u64, u32> = FxHashMap::default();
    let mut stats = ExportStats::default();
    let mut terminated = rustc_hash::FxHashSet::default();
    let mut index = 0u64;
    while let Some(e) = events.next()? {
        index += 1;
        if focus.is_some_and(|f| !f.keeps(&e)) {
            continue;
        }
        let (_, ends) = flows_of(&e, index, &mut pending, &mut handles, &mut stats);
        terminated.extend(ends);
    }
    Ok(terminated)
}

fn thread_track(uuid: u64, pid: i32, tid: u32, name: &str) -> TracePacket {
    TracePacket {
        trusted_packet_sequence_id: Some(SEQUENCE),
        track_descriptor: Some(TrackDescriptor {
            uuid: Some(uuid),
            name: Some(name.to_string()),
            process: None,
            thread: Some(ThreadDescriptor {
                pid: Some(pid),
                tid: Some(tid as i32),
                thread_name: Some(name.to_string()),
            }),
            parent_uuid: Some(PROCESS_TRACK),
        }),
        timestamp: None,
        track_event: None,
        sequence_flags: None,
    }
}

fn open(
    w: &mut Writer,
    stack: &mut Vec<Open>,
    ts: u64,
    track: u64,
    key: (u8, u64),
    name: String,
) -> Result<(), ExportError> {
    w.event(
        ts,
        track,
        TYPE_SLICE_BEGIN,
        Some(name.clone()),
        None,
        (vec![], vec![]),
    )?;
    w.stats.slices += 1;
    stack.push(Open { key, name });
    Ok(())
}

/// Ends the slice `key`. Slices on a track must nest, but locks need not be released
/// in reverse order: the slices opened after it are ended and reopened.
fn close(
    w: &mut Writer,
    stack: &mut Vec<Open>,
    ts: u64,
    track: u64,
    key: (u8, u64),
) -> Result<(), ExportError> {
    let Some(pos) = stack.iter().rposition(|o| o.key == key) else {
        return Ok(());
    };
    let above: Vec<Open> = stack.drain(pos + 1..).collect();
    for _ in 0..=above.len() {
        w.event(ts, track, TYPE_SLICE_END, None, None, (vec![], vec![]))?;
    }
    stack.pop();
    for o in above {
        w.event(
            ts,
            track,
            TYPE_SLICE_BEGIN,
            Some(o.name.clone()),
            None,
            (vec![], vec![]),
        )?;
        stack.push(o);
    }
    Ok(())
}

/// Flow ids for an event: a release-like event starts a flow (its own id); an
/// acquire-like event of another thread on the same object ends the pending one.
fn flows_of(
    e: &Event,
    index: u64,
    pending: &mut FxHashMap<(u8, u64), (u32, u64)>,
    handles: &mut FxHashMap<u64, u32>,
    stats: &mut ExportStats,
) -> (Vec<u64>, Vec<u64>) {
    let mut start = |key: (u8, u64)| {
        pending.insert(key, (e.tid, index));
        (vec![index], vec![])
    };
    match e.kind {
        Kind::MutexUnlock | Kind::RwlockUnlock => start((0, e.addr)),
        Kind::CondSignal | Kind::CondBroadcast => start((1, e.addr)),
        Kind::SemPost => start((3, e.addr)),
        Kind::FutexWake if e.result > 0 => start((4, e.addr)),
        Kind::BarrierArrive => start((2, e.addr)),
        Kind::ThreadCreate => match e.child_tid() {
            Some(child) => {
                handles.insert(e.addr, child);
                start((5, child as u64))
            }
            None => (vec![], vec![]),
        },
        Kind::ThreadExit => start((6, e.tid as u64)),
        _ => {
            let key = match e.kind {
                Kind::MutexLock | Kind::RwlockRdlock | Kind::RwlockWrlock => (0, e.addr),
                Kind::CondWait if e.result == 0 => (1, e.addr),
                Kind::SemWait => (3, e.addr),
                Kind::FutexWait if e.result == 0 => (4, e.addr),
                Kind::BarrierWait => (2, e.addr),
                Kind::ThreadStart => (5, e.tid as u64),
                Kind::ThreadJoin => match handles.get(&e.addr) {
                    Some(&child) => (6, child as u64),
                    None => return (vec![], vec![]),
                },
                _ => return (vec![], vec![]),
            };
            match pending.get(&key) {
                Some(&(tid, id)) if tid != e.tid => {
                    pending.remove(&key);
                    stats.flows += 1;
                    (vec![], vec![id])
                }
                _ => (vec![], vec![]),
            }
        }
    }
}
