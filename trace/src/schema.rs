//! The protobuf messages of a trace file (prost). `docs/TRACE_FORMAT.md` gives the
//! same schema as `.proto` text for readers in other languages; this file is the
//! definition.

/// First record of a trace.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Header {
    /// [`crate::FORMAT_VERSION`] of the writer.
    #[prost(uint32, tag = "1")]
    pub format_version: u32,
    /// The recorded command line (launch mode) or the process's cmdline (attach mode).
    #[prost(string, repeated, tag = "2")]
    pub command: Vec<String>,
    /// Process id of the target.
    #[prost(uint32, tag = "3")]
    pub pid: u32,
    /// Wall-clock start, Unix nanoseconds.
    #[prost(uint64, tag = "4")]
    pub start_unix_ns: u64,
    /// CLOCK_MONOTONIC at start, the clock of event timestamps.
    #[prost(uint64, tag = "5")]
    pub start_monotonic_ns: u64,
    /// `uname -r` of the recording machine.
    #[prost(string, tag = "6")]
    pub kernel_release: String,
    /// Version of the ordo that wrote the trace.
    #[prost(string, tag = "7")]
    pub ordo_version: String,
    /// True when ordo attached to a running process instead of launching it.
    #[prost(bool, tag = "8")]
    pub attached: bool,
    /// Ring buffer size in bytes.
    #[prost(uint64, tag = "9")]
    pub buffer_size: u64,
    /// Recorded with `--sparse-times`: an event's time may be earlier than it was
    /// (never later), by up to the time since its thread last read the clock; the
    /// order of events is exact.
    #[prost(bool, tag = "10")]
    pub sparse_times: bool,
}

/// A thread's identity, as known when the record was written. Later records for the
/// same tid supersede earlier ones.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ThreadRecord {
    /// Kernel tid.
    #[prost(uint32, tag = "1")]
    pub tid: u32,
    /// Logical id path (see `crate::LogicalId`); empty for the main thread.
    #[prost(uint32, repeated, tag = "2")]
    pub logical: Vec<u32>,
    /// comm.
    #[prost(string, tag = "3")]
    pub name: String,
    /// Creating thread's tid, 0 if main or unknown.
    #[prost(uint32, tag = "4")]
    pub parent_tid: u32,
}

/// A mapped file of the target, for symbolizing sites later.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ModuleRecord {
    /// Path of the file as mapped.
    #[prost(string, tag = "1")]
    pub path: String,
    /// GNU build-id, hex, empty if none.
    #[prost(string, tag = "2")]
    pub build_id: String,
    /// Executable or data mappings of the file: start, end, file offset.
    #[prost(message, repeated, tag = "3")]
    pub mappings: Vec<Mapping>,
}

/// One mapping of a module.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Mapping {
    /// First address.
    #[prost(uint64, tag = "1")]
    pub start: u64,
    /// One past the last address.
    #[prost(uint64, tag = "2")]
    pub end: u64,
    /// Offset in the file of `start`.
    #[prost(uint64, tag = "3")]
    pub file_offset: u64,
}

/// Events in columns: packed repeated fields decode an order of magnitude faster than
/// one message per event, and compress better.
#[derive(Clone, PartialEq, prost::Message)]
pub struct EventColumns {
    /// Timestamp deltas from the previous event in the chunk (first: from 0), zigzag.
    #[prost(sint64, repeated, tag = "1")]
    pub ts_delta: Vec<i64>,
    /// Kernel tids.
    #[prost(uint32, repeated, tag = "2")]
    pub tid: Vec<u32>,
    /// Kind codes.
    #[prost(uint32, repeated, tag = "3")]
    pub kind: Vec<u32>,
    /// Via codes.
    #[prost(uint32, repeated, tag = "4")]
    pub via: Vec<u32>,
    /// Object addresses.
    #[prost(uint64, repeated, tag = "5")]
    pub addr: Vec<u64>,
    /// Second objects.
    #[prost(uint64, repeated, tag = "6")]
    pub addr2: Vec<u64>,
    /// Call sites.
    #[prost(uint64, repeated, tag = "7")]
    pub site: Vec<u64>,
    /// Per-object sequence numbers.
    #[prost(uint64, repeated, tag = "8")]
    pub seq: Vec<u64>,
    /// Results.
    #[prost(sint64, repeated, tag = "9")]
    pub result: Vec<i64>,
    /// Values.
    #[prost(uint64, repeated, tag = "10")]
    pub value: Vec<u64>,
    /// Access sizes.
    #[prost(uint32, repeated, tag = "11")]
    pub size: Vec<u32>,
}

/// A self-contained piece of the trace.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Chunk {
    /// Events, in the order the ring buffer delivered them.
    #[prost(message, optional, tag = "1")]
    pub events: Option<EventColumns>,
    /// Threads first seen or updated since the previous chunk.
    #[prost(message, repeated, tag = "2")]
    pub threads: Vec<ThreadRecord>,
    /// Modules first seen since the previous chunk.
    #[prost(message, repeated, tag = "3")]
    pub modules: Vec<ModuleRecord>,
    /// Kernel drop counter when the chunk was written (cumulative).
    #[prost(uint64, tag = "4")]
    pub dropped_so_far: u64,
}

/// Last record of a complete trace.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Footer {
    /// Events written.
    #[prost(uint64, tag = "1")]
    pub events: u64,
    /// Events the kernel could not put in the ring buffer.
    #[prost(uint64, tag = "2")]
    pub dropped: u64,
    /// Final thread table.
    #[prost(message, repeated, tag = "3")]
    pub threads: Vec<ThreadRecord>,
    /// Final module table.
    #[prost(message, repeated, tag = "4")]
    pub modules: Vec<ModuleRecord>,
    /// CLOCK_MONOTONIC at the end.
    #[prost(uint64, tag = "5")]
    pub end_monotonic_ns: u64,
    /// Exit code of the target, if it exited.
    #[prost(int32, optional, tag = "6")]
    pub exit_code: Option<i32>,
    /// Signal that killed the target, if any.
    #[prost(int32, optional, tag = "7")]
    pub exit_signal: Option<i32>,
    /// Events read from the ring buffer with a kind this version does not know.
    #[prost(uint64, tag = "8")]
    pub unknown_kinds: u64,
    /// Names of the parts of variables the recorded accesses touched (`conn.buf`,
    /// `cfg.slots[2]`), read from the program's DWARF types by the recorder while
    /// the binary is at hand.
    #[prost(message, repeated, tag = "9")]
    pub data_names: Vec<DataName>,
}

/// The name of the bytes at one address: a member or element of a variable, as a
/// `--watch` spec or a schedule writes it.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DataName {
    /// The address in the recorded process.
    #[prost(uint64, tag = "1")]
    pub addr: u64,
    /// The name (`conn.buf`).
    #[prost(string, tag = "2")]
    pub name: String,
}
