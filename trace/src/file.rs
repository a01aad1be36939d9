//! The trace file: a magic, then framed records (header, chunks, footer), then a
//! trailer pointing at the footer.
//!
//! ```text
//! file    = "ORDOTRC\0" header chunk* [footer trailer]
//! record  = tag:u8 len:u32le crc32:u32le payload[len]
//! tag     = 1 header (protobuf Header) | 2 chunk (zstd of protobuf Chunk) | 3 footer
//! trailer = footer_offset:u64le "ORDOEND\0"
//! ```
//!
//! Each chunk is self-contained and checksummed, so a trace cut short by a crash
//! reads back up to its last complete chunk; the footer and trailer only make opening
//! fast and carry the totals. A write that fails (a full disk) is rolled back: the
//! file is cut to the end of the last complete record, so what was written stays a
//! readable trace without footer, and nothing more is written to it.

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use prost::Message;

use crate::decode::{self, ChunkDecoder};
use crate::encode::ChunkEncoder;
use crate::event::Event;
use crate::schema::{Chunk, Footer, Header, ModuleRecord, ThreadRecord};
use crate::thread::{LogicalId, ThreadInfo, ThreadTable};

/// Magic at the start of every trace.
pub const MAGIC: &[u8; 8] = b"ORDOTRC\0";
/// Magic closing the trailer.
pub const TRAILER_MAGIC: &[u8; 8] = b"ORDOEND\0";
/// The format version this library writes and the newest it reads.
pub const FORMAT_VERSION: u32 = 1;

const TAG_HEADER: u8 = 1;
const TAG_CHUNK: u8 = 2;
const TAG_FOOTER: u8 = 3;
const FRAME_LEN: u64 = 9;
/// Records larger than this are corrupt rather than real.
const MAX_RECORD: u32 = 1 << 30;

/// An error reading a trace, naming the file and the byte offset.
#[derive(Debug)]
pub struct TraceError {
    /// The trace file.
    pub path: PathBuf,
    /// Byte offset where the problem is.
    pub offset: u64,
    /// What is wrong.
    pub message: String,
    /// What kind of problem, for callers that act on it (the message is for
    /// people).
    pub kind: TraceErrorKind,
}

/// The kinds of [`TraceError`] a caller may act on differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceErrorKind {
    /// The file cannot be opened or read.
    Unreadable,
    /// The file is not an ordo trace (too short, wrong magic).
    NotATrace,
    /// Written by a newer ordo, in a format this one does not read.
    Unsupported,
    /// The header record is missing or damaged: nothing after it can be read.
    DamagedHeader,
    /// A record after the header is damaged or missing (a recording cut short, a
    /// flipped byte): the chunks before it are intact, which
    /// [`ReadMode::Salvage`] reads.
    Damaged,
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: at byte {}: {}",
            self.path.display(),
            self.offset,
            self.message
        )
    }
}

impl std::error::Error for TraceError {}

/// Writes a trace as events arrive.
pub struct TraceWriter {
    out: File,
    /// End of the last complete record: everything before it is on the file.
    offset: u64,
    /// The first write error, after which nothing more is written.
    failed: Option<io::ErrorKind>,
    /// One record's frame and payload, written with one `write_all`.
    buffer: Vec<u8>,
    events: u64,
    threads: HashMap<u32, ThreadRecord>,
    modules: Vec<ModuleRecord>,
    /// Encodes chunks in one pass (`crate::encode`).
    encoder: ChunkEncoder,
    /// One compression context for every chunk.
    compressor: zstd::bulk::Compressor<'static>,
}

impl TraceWriter {
    /// Creates `path` (mode 0600: traces can hold memory contents) and writes the
    /// header, replacing an existing file: [`TraceWriter::create_with`] with
    /// `force` and no inputs.
    pub fn create(path: &Path, header: &Header) -> io::Result<TraceWriter> {
        TraceWriter::create_with(path, header, true, &[])
    }

    /// Creates `path` as [`crate::output`] does — a fresh file (`O_EXCL`, never
    /// through a symlink) renamed into place at once, refused when it is one of
    /// `inputs`, or exists and `force` is false — and writes the header. The file
    /// is at its path from the start, so a crash leaves a readable trace there.
    pub fn create_with(
        path: &Path,
        header: &Header,
        force: bool,
        inputs: &[&Path],
    ) -> io::Result<TraceWriter> {
        let file = crate::output::Output::create(path, force, inputs)?.commit()?;
        let mut writer = TraceWriter {
            out: file,
            offset: 0,
            failed: None,
            buffer: Vec::new(),
            events: 0,
            threads: HashMap::new(),
            modules: Vec::new(),
            encoder: ChunkEncoder::default(),
            compressor: zstd::bulk::Compressor::new(1)?,
        };
        writer.out.write_all(MAGIC)?;
        writer.offset = MAGIC.len() as u64;
        let mut header = header.clone();
        header.format_version = FORMAT_VERSION;
        writer.record(TAG_HEADER, &header.encode_to_vec(), &[])?;
        Ok(writer)
    }

    /// Writes one framed record, followed by `tail` (the trailer), whole or not at
    /// all: on an error the file is cut back to where the record started.
    fn record(&mut self, tag: u8, payload: &[u8], tail: &[u8]) -> io::Result<()> {
        if let Some(kind) = self.failed {
            return Err(io::Error::new(
                kind,
                "an earlier write to the trace failed: nothing more is written",
            ));
        }
        let mut buffer = std::mem::take(&mut self.buffer);
        buffer.clear();
        buffer.push(tag);
        buffer.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        buffer.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
        buffer.extend_from_slice(payload);
        buffer.extend_from_slice(tail);
        let written = self.out.write_all(&buffer);
        let len = buffer.len() as u64;
        self.buffer = buffer;
        match written {
            Ok(()) => {
                self.offset += len;
                Ok(())
            }
            Err(e) => {
                self.roll_back(e.kind());
                Err(e)
            }
        }
    }

    /// After a failed write: cuts the file to the last complete record (which also
    /// frees the space a partial record took) and stops writing.
    fn roll_back(&mut self, kind: io::ErrorKind) {
        self.failed = Some(kind);
        let _ = self.out.set_len(self.offset);
        let _ = self.out.seek(SeekFrom::Start(self.offset));
    }

    /// Whether a write failed (the file holds what came before it).
    pub fn failed(&self) -> bool {
        self.failed.is_some()
    }

    /// Appends a chunk to the file, so a crash loses at most the events not yet
    /// written. On an error (a full disk) the file keeps every chunk before this
    /// one, and later calls fail at once.
    pub fn write_chunk(
        &mut self,
        events: &[Event],
        threads: &[ThreadRecord],
        modules: &[ModuleRecord],
        dropped_so_far: u64,
    ) -> io::Result<()> {
        let chunk = self
            .encoder
            .encode(events, threads, modules, dropped_so_far);
        let packed = self.compressor.compress(chunk)?;
        self.record(TAG_CHUNK, &packed, &[])?;
        self.events += events.len() as u64;
        for t in threads {
            self.threads.insert(t.tid, t.clone());
        }
        self.modules.extend_from_slice(modules);
        Ok(())
    }

    /// Events written so far.
    pub fn events_written(&self) -> u64 {
        self.events
    }

    /// Bytes written so far.
    pub fn bytes_written(&self) -> u64 {
        self.offset
    }

    /// Writes the footer (with the final thread and module tables) and the trailer.
    /// On an error the file keeps its chunks (a trace without footer).
    pub fn finish(mut self, mut footer: Footer) -> io::Result<u64> {
        footer.events = self.events;
        let mut threads: Vec<_> = self.threads.values().cloned().collect();
        threads.sort_by_key(|t| t.tid);
        footer.threads = threads;
        footer.modules = std::mem::take(&mut self.modules);
        let footer_offset = self.offset;
        let mut trailer = [0u8; 16];
        trailer[..8].copy_from_slice(&footer_offset.to_le_bytes());
        trailer[8..].copy_from_slice(TRAILER_MAGIC);
        self.record(TAG_FOOTER, &footer.encode_to_vec(), &trailer)?;
        if let Err(e) = self.out.sync_all() {
            // Delayed allocation can report a full disk only here: keep the chunks,
            // which a reader takes without the footer.
            self.offset = footer_offset;
            self.roll_back(e.kind());
            return Err(e);
        }
        Ok(self.offset)
    }
}

/// The events as prost's column message: what `crate::encode` writes without
/// building it (the tests compare the two).
#[cfg(test)]
pub(crate) fn columns(events: &[Event]) -> crate::schema::EventColumns {
    let mut c = crate::schema::EventColumns::default();
    let mut prev = 0u64;
    for e in events {
        c.ts_delta.push(e.ts_ns.wrapping_sub(prev) as i64);
        prev = e.ts_ns;
        c.tid.push(e.tid);
        c.kind.push(e.kind as u32);
        c.via.push(e.via.code() as u32);
        c.addr.push(e.addr);
        c.addr2.push(e.addr2);
        c.site.push(e.site);
        c.seq.push(e.seq);
        c.result.push(e.result);
        c.value.push(e.value);
        c.size.push(e.size as u32);
    }
    c
}

/// How strictly to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadMode {
    /// Any torn or corrupt record is an error.
    Strict,
    /// Stop at the first torn or corrupt record and keep what came before.
    Salvage,
}

/// A trace opened for reading: its metadata, and its events chunk by chunk.
#[derive(Debug)]
pub struct TraceReader {
    path: PathBuf,
    file: BufReader<File>,
    /// The header.
    pub header: Header,
    /// Threads, densely indexed in logical-id order.
    pub threads: ThreadTable,
    /// Mapped files of the target.
    pub modules: Vec<ModuleRecord>,
    /// The footer, if the recording finished normally.
    pub footer: Option<Footer>,
    /// Kernel-side drops (from the footer, or the last chunk of a cut-short trace).
    pub dropped: u64,
    /// Where and why reading stopped early in salvage mode, or where a cut-short trace ends.
    pub cut_short: Option<TraceError>,
    chunks_start: u64,
    chunks_end: u64,
    pos: u64,
    mode: ReadMode,
    /// For each chunk offset: drops so far (filled while iterating).
    drops_at_chunk: Vec<(u64, u64)>,
    /// The last record's payload (reused).
    payload: Vec<u8>,
    /// Decompression context, decompressed bytes and fast decoding (reused).
    decoder: ChunkDecoder,
}

impl TraceReader {
    /// The names the recorder gave the parts of variables its accesses touched
    /// (empty for a trace without footer).
    pub fn data_names(&self) -> &[crate::schema::DataName] {
        self.footer.as_ref().map_or(&[], |f| &f.data_names[..])
    }

    /// Opens a trace, reading its header and thread table.
    pub fn open(path: &Path, mode: ReadMode) -> Result<TraceReader, TraceError> {
        let err = |kind: TraceErrorKind, offset: u64, message: String| TraceError {
            path: path.to_path_buf(),
            offset,
            message,
            kind,
        };
        use TraceErrorKind::{DamagedHeader, NotATrace, Unreadable, Unsupported};
        let file = File::open(path).map_err(|e| err(Unreadable, 0, format!("cannot open: {e}")))?;
        let len = file
            .metadata()
            .map_err(|e| err(Unreadable, 0, e.to_string()))?
            .len();
        // No bigger than the file: a small trace needs no megabyte of buffer.
        let mut file = BufReader::with_capacity((1 << 20).min(len as usize).max(64), file);
        let mut magic = [0u8; 8];
        if len < 8 {
            return Err(err(
                NotATrace,
                len,
                "file too short to be an ordo trace".into(),
            ));
        }
        file.read_exact(&mut magic)
            .map_err(|e| err(Unreadable, 0, e.to_string()))?;
        if &magic != MAGIC {
            return Err(err(NotATrace, 0, "not an ordo trace (bad magic)".into()));
        }
        let mut reader = TraceReader {
            path: path.to_path_buf(),
            file,
            header: Header::default(),
            threads: ThreadTable::default(),
            modules: Vec::new(),
            footer: None,
            dropped: 0,
            cut_short: None,
            chunks_start: 0,
            chunks_end: len,
            pos: 8,
            mode,
            drops_at_chunk: Vec::new(),
            payload: Vec::new(),
            decoder: ChunkDecoder::default(),
        };
        let (tag, payload) = match reader.next_record(len).map_err(|e| TraceError {
            kind: DamagedHeader,
            ..e
        })? {
            Some(r) => r,
            None => return Err(err(DamagedHeader, 8, "truncated: no header record".into())),
        };
        if tag != TAG_HEADER {
            return Err(err(
                DamagedHeader,
                8,
                format!("expected the header record, found tag {tag}"),
            ));
        }
        reader.header = Header::decode(payload.as_slice())
            .map_err(|e| err(DamagedHeader, 8, format!("corrupt header: {e}")))?;
        if reader.header.format_version > FORMAT_VERSION {
            return Err(err(
                Unsupported,
                8,
                format!(
                    "written by a newer ordo (format version {}; this ordo reads up to {})",
                    reader.header.format_version, FORMAT_VERSION
                ),
            ));
        }
        reader.chunks_start = reader.pos;

        let trailer = match reader.read_trailer(len) {
            // A damaged trailer or footer does not make the chunks unreadable.
            Err(e) if mode == ReadMode::Salvage => {
                reader.chunks_end = len;
                reader.cut_short = Some(e);
                None
            }
            other => other?,
        };
        let (threads, modules) = match trailer {
            Some(footer) => {
                let t = footer.threads.clone();
                let m = footer.modules.clone();
                reader.dropped = footer.dropped;
                reader.footer = Some(footer);
                (t, m)
            }
            None => reader.scan_without_footer(len)?,
        };
        reader.modules = modules;
        reader.threads = ThreadTable::new(threads.into_iter().map(thread_info).collect());
        reader.pos = reader.chunks_start;
        reader
            .file
            .seek(SeekFrom::Start(reader.pos))
            .map_err(|e| err(Unreadable, reader.pos, e.to_string()))?;
        Ok(reader)
    }

    fn error(&self, offset: u64, message: impl Into<String>) -> TraceError {
        TraceError {
            path: self.path.clone(),
            offset,
            message: message.into(),
            kind: TraceErrorKind::Damaged,
        }
    }

    /// Reads the next framed record at `self.pos`; `None` at a clean end.
    fn next_record(&mut self, end: u64) -> Result<Option<(u8, Vec<u8>)>, TraceError> {
        let mut payload = Vec::new();
        Ok(self
            .next_record_into(end, &mut payload)?
            .map(|tag| (tag, payload)))
    }

    /// Like [`TraceReader::next_record`], reading the payload into `payload`.
    fn next_record_into(
        &mut self,
        end: u64,
        payload: &mut Vec<u8>,
    ) -> Result<Option<u8>, TraceError> {
        let at = self.pos;
        if at == end {
            return Ok(None);
        }
        if end - at < FRAME_LEN {
            return Err(self.error(
                at,
                format!("truncated record frame ({} of {FRAME_LEN} bytes)", end - at),
            ));
        }
        let mut frame = [0u8; FRAME_LEN as usize];
        self.file
            .read_exact(&mut frame)
            .map_err(|e| self.error(at, e.to_string()))?;
        let tag = frame[0];
        let len = u32::from_le_bytes(frame[1..5].try_into().unwrap());
        let crc = u32::from_le_bytes(frame[5..9].try_into().unwrap());
        if !(TAG_HEADER..=TAG_FOOTER).contains(&tag) || len > MAX_RECORD {
            return Err(self.error(
                at,
                format!("corrupt record frame (tag {tag}, length {len})"),
            ));
        }
        if end - at - FRAME_LEN < len as u64 {
            return Err(self.error(
                at,
                format!(
                    "truncated record: {len} bytes announced, {} present",
                    end - at - FRAME_LEN
                ),
            ));
        }
        payload.clear();
        payload.resize(len as usize, 0);
        self.file
            .read_exact(payload)
            .map_err(|e| self.error(at, e.to_string()))?;
        if crc32fast::hash(payload) != crc {
            return Err(self.error(at, "corrupt record: checksum mismatch"));
        }
        self.pos = at + FRAME_LEN + len as u64;
        Ok(Some(tag))
    }

    fn read_trailer(&mut self, len: u64) -> Result<Option<Footer>, TraceError> {
        if len < self.chunks_start + 16 + FRAME_LEN {
            return Ok(None);
        }
        let mut trailer = [0u8; 16];
        self.file
            .seek(SeekFrom::Start(len - 16))
            .map_err(|e| self.error(len - 16, e.to_string()))?;
        self.file
            .read_exact(&mut trailer)
            .map_err(|e| self.error(len - 16, e.to_string()))?;
        if &trailer[8..] != TRAILER_MAGIC {
            return Ok(None);
        }
        let footer_offset = u64::from_le_bytes(trailer[..8].try_into().unwrap());
        if footer_offset < self.chunks_start || footer_offset >= len - 16 {
            return Err(self.error(
                len - 16,
                format!("corrupt trailer: footer offset {footer_offset}"),
            ));
        }
        self.pos = footer_offset;
        self.file
            .seek(SeekFrom::Start(footer_offset))
            .map_err(|e| self.error(footer_offset, e.to_string()))?;
        match self.next_record(len - 16)? {
            Some((TAG_FOOTER, payload)) => {
                self.chunks_end = footer_offset;
                Footer::decode(payload.as_slice())
                    .map(Some)
                    .map_err(|e| self.error(footer_offset, format!("corrupt footer: {e}")))
            }
            _ => Err(self.error(
                footer_offset,
                "corrupt trailer: no footer record at its offset",
            )),
        }
    }

    /// A trace without footer (cut short): collect thread and module records from
    /// every chunk, and find where the readable part ends.
    fn scan_without_footer(
        &mut self,
        len: u64,
    ) -> Result<(Vec<ThreadRecord>, Vec<ModuleRecord>), TraceError> {
        self.pos = self.chunks_start;
        self.file
            .seek(SeekFrom::Start(self.pos))
            .map_err(|e| self.error(self.pos, e.to_string()))?;
        let mut threads: HashMap<u32, ThreadRecord> = HashMap::new();
        let mut modules = Vec::new();
        loop {
            let at = self.pos;
            let record = match self.next_record(len) {
                Ok(r) => r,
                Err(e) if self.mode == ReadMode::Salvage => {
                    self.chunks_end = at;
                    self.cut_short = Some(e);
                    break;
                }
                Err(e) => return Err(e),
            };
            match record {
                None => {
                    self.chunks_end = at;
                    self.cut_short = Some(self.error(at, "no footer: the recording was cut short; read up to its last complete chunk"));
                    break;
                }
                Some((TAG_CHUNK, payload)) => match self.decode_chunk(&payload) {
                    Ok(chunk) => {
                        for t in chunk.threads {
                            threads.insert(t.tid, t);
                        }
                        modules.extend(chunk.modules);
                        self.dropped = chunk.dropped_so_far;
                    }
                    Err(message) if self.mode == ReadMode::Salvage => {
                        self.chunks_end = at;
                        self.cut_short = Some(self.error(at, message));
                        break;
                    }
                    Err(message) => return Err(self.error(at, message)),
                },
                Some((TAG_FOOTER, _)) if self.mode == ReadMode::Salvage => {
                    self.chunks_end = at;
                    if self.cut_short.is_none() {
                        self.cut_short = Some(self.error(at, "footer without trailer"));
                    }
                    break;
                }
                Some((TAG_FOOTER, _)) => {
                    return Err(self.error(at, "footer without trailer"));
                }
                Some((tag, _)) => {
                    return Err(self.error(at, format!("unexpected record tag {tag}")))
                }
            }
        }
        let mut threads: Vec<_> = threads.into_values().collect();
        threads.sort_by_key(|t| t.tid);
        Ok((threads, modules))
    }

    /// The next chunk's events, with `thread` filled in; `None` after the last chunk.
    pub fn next_chunk(&mut self) -> Result<Option<Vec<Event>>, TraceError> {
        let mut events = Vec::new();
        Ok(self.next_chunk_into(&mut events)?.then_some(events))
    }

    /// Like [`TraceReader::next_chunk`], reusing `events`' allocation; returns false at the end.
    pub fn next_chunk_into(&mut self, events: &mut Vec<Event>) -> Result<bool, TraceError> {
        events.clear();
        loop {
            let at = self.pos;
            let mut payload = std::mem::take(&mut self.payload);
            let record = self.next_record_into(self.chunks_end, &mut payload);
            self.payload = payload;
            let Some(tag) = record? else {
                return Ok(false);
            };
            if tag != TAG_CHUNK {
                return Err(self.error(at, format!("unexpected record tag {tag} among chunks")));
            }
            self.decoder
                .decompress(&self.payload)
                .map_err(|m| self.error(at, m))?;
            if let Some(chunk) = self.decoder.fast_events(&self.threads, events) {
                self.drops_at_chunk.push((at, chunk.dropped_so_far));
                if !events.is_empty() {
                    return Ok(true);
                }
                continue;
            }
            // Anything the fast path does not take, prost decodes (or rejects).
            let chunk = decode::prost_chunk(&self.decoder.raw).map_err(|m| self.error(at, m))?;
            self.drops_at_chunk.push((at, chunk.dropped_so_far));
            let Some(c) = chunk.events else { continue };
            decode::prost_events(&c, &self.threads, events).map_err(|m| self.error(at, m))?;
            if !events.is_empty() {
                return Ok(true);
            }
        }
    }

    /// Reads every remaining event.
    pub fn read_all(&mut self) -> Result<Vec<Event>, TraceError> {
        let mut all = Vec::new();
        while let Some(chunk) = self.next_chunk()? {
            all.extend(chunk);
        }
        Ok(all)
    }

    /// Chunks read so far, with the cumulative drop count at each: where events were
    /// lost (drops between two chunks happened while the earlier one was being filled).
    pub fn drops_by_chunk(&self) -> &[(u64, u64)] {
        &self.drops_at_chunk
    }

    /// The trace file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl TraceReader {
    fn decode_chunk(&mut self, payload: &[u8]) -> Result<Chunk, String> {
        self.decoder.decompress(payload)?;
        decode::prost_chunk(&self.decoder.raw)
    }
}

fn thread_info(t: ThreadRecord) -> ThreadInfo {
    ThreadInfo {
        tid: t.tid,
        logical: LogicalId(t.logical),
        name: t.name,
        parent_tid: t.parent_tid,
    }
}

/// Reads a whole trace into memory: metadata and every event.
pub fn read_trace(path: &Path, mode: ReadMode) -> Result<(TraceReader, Vec<Event>), TraceError> {
    let mut reader = TraceReader::open(path, mode)?;
    let events = match reader.read_all() {
        Ok(events) => events,
        Err(e) if mode == ReadMode::Salvage => {
            let mut kept = Vec::new();
            // Re-read up to the failing chunk.
            let mut again = TraceReader::open(path, mode)?;
            again.chunks_end = e.offset;
            while let Ok(Some(chunk)) = again.next_chunk() {
                kept.extend(chunk);
            }
            again.cut_short = Some(e);
            return Ok((again, kept));
        }
        Err(e) => return Err(e),
    };
    Ok((reader, events))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Kind, Via};

    fn sample(n: usize) -> Vec<Event> {
        (0..n)
            .map(|i| Event {
                ts_ns: 1_000 + i as u64 * 7,
                tid: 100 + (i % 3) as u32,
                thread: 0,
                kind: if i % 2 == 0 {
                    Kind::MutexLock
                } else {
                    Kind::MutexUnlock
                },
                via: if i % 5 == 0 { Via::Try } else { Via::Plain },
                addr: 0x5555_0000 + (i % 2) as u64 * 64,
                addr2: 0,
                site: 0x4000 + i as u64,
                seq: i as u64 / 2,
                result: -(i as i64 % 3),
                value: i as u64 * 3,
                size: (i % 9) as u8,
            })
            .collect()
    }

    fn threads() -> Vec<ThreadRecord> {
        vec![
            ThreadRecord {
                tid: 100,
                logical: vec![],
                name: "main".into(),
                parent_tid: 0,
            },
            ThreadRecord {
                tid: 101,
                logical: vec![1],
                name: "w1".into(),
                parent_tid: 100,
            },
            ThreadRecord {
                tid: 102,
                logical: vec![2],
                name: "w2".into(),
                parent_tid: 100,
            },
        ]
    }

    fn write(path: &Path, events: &[Event], finish: bool) -> u64 {
        let header = Header {
            pid: 100,
            command: vec!["prog".into()],
            ..Default::default()
        };
        let mut w = TraceWriter::create(path, &header).unwrap();
        for (i, part) in events.chunks(100).enumerate() {
            let t = if i == 0 { threads() } else { vec![] };
            w.write_chunk(part, &t, &[], i as u64).unwrap();
        }
        if finish {
            w.finish(Footer {
                dropped: 7,
                ..Default::default()
            })
            .unwrap()
        } else {
            w.bytes_written()
        }
    }

    fn strip_thread(events: Vec<Event>) -> Vec<Event> {
        events
            .into_iter()
            .map(|e| Event { thread: 0, ..e })
            .collect()
    }

    #[test]
    fn round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.ordo");
        let events = sample(1000);
        write(&path, &events, true);
        let (reader, back) = read_trace(&path, ReadMode::Strict).unwrap();
        assert_eq!(strip_thread(back.clone()), events);
        assert_eq!(reader.dropped, 7);
        assert_eq!(reader.threads.len(), 3);
        assert_eq!(reader.threads.by_tid(101).unwrap().logical.to_string(), "1");
        assert_eq!(back[1].thread, reader.threads.index_of(101).unwrap());
        assert!(reader.cut_short.is_none());
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    #[test]
    fn cut_short_trace_reads_up_to_last_chunk() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.ordo");
        let events = sample(1000);
        write(&path, &events, false);
        let (reader, back) = read_trace(&path, ReadMode::Strict).unwrap();
        assert_eq!(back.len(), 1000);
        assert!(reader.cut_short.is_some());
        assert_eq!(reader.dropped, 9);
        assert_eq!(reader.threads.len(), 3);
    }

    #[test]
    fn truncated_file_names_offset() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.ordo");
        let len = write(&path, &sample(1000), true);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..(len as usize - 40)]).unwrap();
        let err = read_trace(&path, ReadMode::Strict).unwrap_err();
        assert!(err.to_string().contains("truncated"), "{err}");
        assert!(err.offset > 8);
        assert_eq!(err.kind, TraceErrorKind::Damaged);
        // Salvage keeps the complete chunks.
        let (reader, back) = read_trace(&path, ReadMode::Salvage).unwrap();
        assert_eq!(back.len(), 1000);
        assert!(reader.cut_short.is_some());
        // A header cut in half.
        std::fs::write(&path, &bytes[..12]).unwrap();
        let err = read_trace(&path, ReadMode::Strict).unwrap_err();
        assert_eq!(err.offset, 8, "{err}");
        assert_eq!(err.kind, TraceErrorKind::DamagedHeader);
    }

    #[test]
    fn corrupt_chunk_is_an_error_with_offset() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.ordo");
        write(&path, &sample(1000), true);
        let mut bytes = std::fs::read(&path).unwrap();
        // Flip a byte in the middle of the file (inside some chunk's payload).
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0xff;
        std::fs::write(&path, &bytes).unwrap();
        let err = read_trace(&path, ReadMode::Strict).unwrap_err();
        assert!(err.to_string().contains("checksum"), "{err}");
        assert!(err.offset > 8 && err.offset <= mid as u64);
        assert_eq!(err.kind, TraceErrorKind::Damaged);
        let (_, back) = read_trace(&path, ReadMode::Salvage).unwrap();
        assert!(back.len() < 1000 && !back.is_empty());
    }

    /// A trace whose one chunk record holds `chunk` (protobuf bytes), compressed and framed.
    fn trace_with_raw_chunk(path: &Path, chunk: &[u8]) -> u64 {
        trace_with_compressed_chunk(path, zstd::bulk::compress(chunk, 1).unwrap())
    }

    /// A trace whose one chunk record carries `payload` as its compressed bytes.
    fn trace_with_compressed_chunk(path: &Path, payload: Vec<u8>) -> u64 {
        let header = Header::default().encode_to_vec();
        let mut bytes = MAGIC.to_vec();
        for (tag, payload) in [(TAG_HEADER, header), (TAG_CHUNK, payload)] {
            bytes.push(tag);
            bytes.extend((payload.len() as u32).to_le_bytes());
            bytes.extend(crc32fast::hash(&payload).to_le_bytes());
            bytes.extend(&payload);
        }
        std::fs::write(path, &bytes).unwrap();
        // The chunk record's offset.
        8 + FRAME_LEN + Header::default().encode_to_vec().len() as u64
    }

    #[test]
    fn decompression_is_bounded_by_the_chunk_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bomb.ordo");
        let big = vec![0u8; crate::decode::MAX_CHUNK_BYTES as usize + 4096];
        // A frame that declares its size, and one that does not (streamed): both
        // are tiny compressed, and both are refused at the limit.
        let declared = zstd::bulk::compress(&big, 1).unwrap();
        let mut undeclared = Vec::new();
        let mut encoder = zstd::stream::Encoder::new(&mut undeclared, 1).unwrap();
        encoder.include_contentsize(false).unwrap();
        std::io::Write::write_all(&mut encoder, &big).unwrap();
        encoder.finish().unwrap();
        assert!(declared.len() < 100_000 && undeclared.len() < 100_000);
        for (payload, message) in [
            (declared, "declares 67112960 bytes decompressed"),
            (undeclared, "decompresses to more than"),
        ] {
            let offset = trace_with_compressed_chunk(&path, payload);
            let err = read_trace(&path, ReadMode::Strict).unwrap_err();
            assert_eq!(err.offset, offset, "{err}");
            let text = err.to_string();
            assert!(
                text.contains("bomb.ordo") && text.contains(message),
                "{text}"
            );
            assert!(!text.contains('\n'));
        }
    }

    #[test]
    fn missing_trailer_or_damaged_footer_is_salvageable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.ordo");
        let events = sample(300);
        let len = write(&path, &events, true);
        let bytes = std::fs::read(&path).unwrap();
        let footer_offset = u64::from_le_bytes(bytes[len as usize - 16..][..8].try_into().unwrap());
        // Damaged footer (a byte flipped): strict reading names it; salvage reads
        // every chunk.
        let mut damaged = bytes.clone();
        damaged[footer_offset as usize + 12] ^= 0xff;
        // No trailer (and the footer cut in half).
        let cut = bytes[..(footer_offset as usize + len as usize - 16) / 2].to_vec();
        for (what, content) in [("damaged footer", damaged), ("missing trailer", cut)] {
            std::fs::write(&path, &content).unwrap();
            let err = read_trace(&path, ReadMode::Strict).unwrap_err();
            assert!(err.to_string().contains("t.ordo"), "{what}: {err}");
            let (reader, read) = read_trace(&path, ReadMode::Salvage)
                .unwrap_or_else(|e| panic!("{what}: salvage failed: {e}"));
            assert_eq!(read.len(), events.len(), "{what}");
            assert!(reader.cut_short.is_some(), "{what}");
            assert_eq!(reader.threads.len(), threads().len(), "{what}");
        }
    }

    #[test]
    fn malformed_columns_are_errors_with_offset() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.ordo");
        let columns = columns(&sample(50));
        // Packed tid column (field 2) whose last varint runs past its length.
        let mut inner = columns.encode_to_vec();
        // Field 1 (ts_delta) comes first; its length fits one byte here.
        assert!(inner[0] == 0x0a && inner[1] < 0x80);
        let at = 2 + inner[1] as usize;
        assert_eq!(inner[at], 0x12);
        let len = inner[at + 1] as usize;
        inner[at + 2 + len - 1] |= 0x80;
        let mut chunk = vec![0x0a];
        prost::encoding::encode_varint(inner.len() as u64, &mut chunk);
        chunk.extend(&inner);
        let offset = trace_with_raw_chunk(&path, &chunk);
        let err = read_trace(&path, ReadMode::Strict).unwrap_err();
        assert_eq!(err.offset, offset, "{err}");
        assert!(
            err.to_string().contains("t.ordo") && err.to_string().contains("corrupt chunk"),
            "{err}"
        );
        // Columns of different lengths, an unknown kind.
        let mut short = columns.clone();
        short.value.pop();
        let mut unknown = columns.clone();
        unknown.kind[7] = 70_000;
        for (c, message) in [
            (short, "differ in length"),
            (unknown, "unknown event kind 70000"),
        ] {
            let offset = trace_with_raw_chunk(
                &path,
                &Chunk {
                    events: Some(c),
                    ..Default::default()
                }
                .encode_to_vec(),
            );
            let err = read_trace(&path, ReadMode::Strict).unwrap_err();
            assert_eq!(err.offset, offset, "{err}");
            assert!(err.to_string().contains(message), "{err}");
        }
        // Salvage mode keeps what came before (here nothing) instead of failing.
        let (reader, back) = read_trace(&path, ReadMode::Salvage).unwrap();
        assert!(back.is_empty() && reader.cut_short.is_some());
    }

    #[test]
    fn unpacked_columns_read_like_packed_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.ordo");
        let events = sample(20);
        let c = columns(&events);
        // Valid protobuf the writer never produces: every value its own field.
        let mut inner = Vec::new();
        let zz = |v: i64| ((v << 1) ^ (v >> 63)) as u64;
        for i in 0..events.len() {
            let row = [
                zz(c.ts_delta[i]),
                c.tid[i] as u64,
                c.kind[i] as u64,
                c.via[i] as u64,
                c.addr[i],
                c.addr2[i],
                c.site[i],
                c.seq[i],
                zz(c.result[i]),
                c.value[i],
                c.size[i] as u64,
            ];
            for (field, v) in row.into_iter().enumerate() {
                prost::encoding::encode_varint((field as u64 + 1) << 3, &mut inner);
                prost::encoding::encode_varint(v, &mut inner);
            }
        }
        let mut chunk = vec![0x0a];
        prost::encoding::encode_varint(inner.len() as u64, &mut chunk);
        chunk.extend(&inner);
        trace_with_raw_chunk(&path, &chunk);
        let (_, back) = read_trace(&path, ReadMode::Strict).unwrap();
        assert_eq!(strip_thread(back), events);
    }

    #[test]
    fn rejects_other_files_and_newer_versions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.ordo");
        std::fs::write(&path, b"hello world, not a trace").unwrap();
        let err = read_trace(&path, ReadMode::Strict).unwrap_err();
        assert!(err.to_string().contains("bad magic"));
        assert_eq!(err.kind, TraceErrorKind::NotATrace);
        let missing = dir.path().join("missing.ordo");
        let err = read_trace(&missing, ReadMode::Strict).unwrap_err();
        assert!(err.to_string().contains("cannot open"));
        assert_eq!(err.kind, TraceErrorKind::Unreadable);
        // A newer format version.
        let header = Header {
            format_version: FORMAT_VERSION + 1,
            ..Default::default()
        }
        .encode_to_vec();
        let mut bytes = MAGIC.to_vec();
        bytes.push(TAG_HEADER);
        bytes.extend((header.len() as u32).to_le_bytes());
        bytes.extend(crc32fast::hash(&header).to_le_bytes());
        bytes.extend(&header);
        std::fs::write(&path, &bytes).unwrap();
        let err = read_trace(&path, ReadMode::Strict).unwrap_err();
        assert!(err.to_string().contains("newer ordo"));
        assert_eq!(err.kind, TraceErrorKind::Unsupported);
    }
}
