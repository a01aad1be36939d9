//! Fast chunk decoding for [`crate::TraceReader`].
//!
//! prost stays the definition of [`Chunk`] (the writer encodes it in one pass,
//! `crate::encode`, into the bytes prost would write); reading the event columns
//! through prost decodes one number at a time into eleven fresh `Vec`s per chunk,
//! then the reader copies them into events. Here a chunk as the writer
//! produces it (each column one packed field) decodes in one pass straight into the
//! events, with the decompression context and buffers reused across chunks.
//!
//! The fast path only ever accepts input prost accepts, with the same values: any
//! chunk it does not recognise (malformed, unpacked or repeated fields, unknown
//! fields, unknown kinds, columns of different lengths) makes it give up, and the
//! reader decodes that chunk with prost, which yields the values or the error (so
//! errors read exactly as before).

use std::fmt;

use prost::Message;

use crate::event::{Event, Kind, Via};
use crate::schema::{Chunk, EventColumns, ModuleRecord, ThreadRecord};
use crate::thread::ThreadTable;

/// The most a chunk may decompress to. The recorder's chunks hold at most 65 536
/// events (a few MB, plus thread and module records); a chunk declaring or
/// producing more is rejected, so a small hostile chunk cannot expand into
/// gigabytes.
pub const MAX_CHUNK_BYTES: u64 = 64 << 20;

/// Columns of `EventColumns` (fields 1..=11, in field order).
const COLUMNS: usize = 11;

/// Slots of the per-chunk tid → thread index cache (a power of two).
const TID_CACHE: usize = 64;

/// Reusable state for reading chunks: the zstd context, the decompressed bytes, the
/// kind table.
pub(crate) struct ChunkDecoder {
    dctx: Option<zstd::bulk::Decompressor<'static>>,
    /// The last chunk, decompressed.
    pub(crate) raw: Vec<u8>,
    kinds: [Option<Kind>; 128],
    /// Whether varints are gathered with BMI2's `pext` (see [`pext_is_fast`]).
    pub(crate) pext: bool,
}

impl fmt::Debug for ChunkDecoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChunkDecoder")
            .field("raw_capacity", &self.raw.capacity())
            .finish_non_exhaustive()
    }
}

impl Default for ChunkDecoder {
    fn default() -> ChunkDecoder {
        let mut kinds = [None; 128];
        for &k in Kind::ALL {
            if let Some(slot) = kinds.get_mut(k as usize) {
                *slot = Some(k);
            }
        }
        ChunkDecoder {
            dctx: None,
            raw: Vec::new(),
            kinds,
            pext: pext_is_fast(),
        }
    }
}

impl ChunkDecoder {
    /// Decompresses a chunk's payload into `self.raw`.
    pub(crate) fn decompress(&mut self, payload: &[u8]) -> Result<(), String> {
        self.raw.clear();
        if let Ok(Some(size)) = zstd::zstd_safe::get_frame_content_size(payload) {
            if size > MAX_CHUNK_BYTES {
                return Err(format!(
                    "corrupt chunk: declares {size} bytes decompressed, over the {MAX_CHUNK_BYTES}-byte limit"
                ));
            }
            {
                if self.dctx.is_none() {
                    self.dctx = zstd::bulk::Decompressor::new().ok();
                }
                if let Some(dctx) = &mut self.dctx {
                    self.raw.reserve(size as usize);
                    if dctx.decompress_to_buffer(payload, &mut self.raw).is_ok() {
                        return Ok(());
                    }
                    // Several frames, or corrupt: the streaming decoder decides.
                    self.raw.clear();
                }
            }
        }
        // Without a declared size (or when it lied), stream, but never past the cap:
        // a small chunk must not expand into gigabytes.
        use std::io::Read;
        let decoder = zstd::stream::read::Decoder::new(payload)
            .map_err(|e| format!("corrupt chunk: cannot decompress: {e}"))?;
        decoder
            .take(MAX_CHUNK_BYTES + 1)
            .read_to_end(&mut self.raw)
            .map_err(|e| format!("corrupt chunk: cannot decompress: {e}"))?;
        if self.raw.len() as u64 > MAX_CHUNK_BYTES {
            self.raw = Vec::new();
            return Err(format!(
                "corrupt chunk: decompresses to more than the {MAX_CHUNK_BYTES}-byte limit"
            ));
        }
        Ok(())
    }

    /// Decodes `self.raw` with the fast path: appends its events to `events` (the
    /// thread index from `threads`) and returns the chunk's `dropped_so_far`, or
    /// `None` when the chunk needs prost (then `events` is as it was).
    pub(crate) fn fast_events(
        &self,
        threads: &ThreadTable,
        events: &mut Vec<Event>,
    ) -> Option<FastChunk> {
        let start = events.len();
        let result = fast_chunk(&self.raw, &self.kinds, threads, events, self.pext);
        if result.is_none() {
            events.truncate(start);
        }
        result
    }
}

/// What the reader needs of a chunk besides its events.
pub(crate) struct FastChunk {
    pub(crate) dropped_so_far: u64,
}

/// The slow path: the whole chunk through prost.
pub(crate) fn prost_chunk(raw: &[u8]) -> Result<Chunk, String> {
    Chunk::decode(raw).map_err(|e| format!("corrupt chunk: {e}"))
}

/// The slow path's events: prost's columns into events, appended to `events`.
pub(crate) fn prost_events(
    c: &EventColumns,
    threads: &ThreadTable,
    events: &mut Vec<Event>,
) -> Result<(), String> {
    let n = c.tid.len();
    let same = [
        c.ts_delta.len(),
        c.kind.len(),
        c.via.len(),
        c.addr.len(),
        c.addr2.len(),
        c.site.len(),
        c.seq.len(),
        c.result.len(),
        c.value.len(),
        c.size.len(),
    ];
    if same.iter().any(|&l| l != n) {
        return Err("corrupt chunk: event columns differ in length".into());
    }
    events.reserve(n);
    let mut ts = 0u64;
    for i in 0..n {
        ts = ts.wrapping_add(c.ts_delta[i] as u64);
        let Some(kind) = u16::try_from(c.kind[i]).ok().and_then(Kind::from_code) else {
            return Err(format!("corrupt chunk: unknown event kind {}", c.kind[i]));
        };
        let tid = c.tid[i];
        events.push(Event {
            ts_ns: ts,
            tid,
            thread: threads.index_of(tid).unwrap_or(u32::MAX),
            kind,
            via: Via::from_code(c.via[i] as u8),
            addr: c.addr[i],
            addr2: c.addr2[i],
            site: c.site[i],
            seq: c.seq[i],
            result: c.result[i],
            value: c.value[i],
            size: c.size[i] as u8,
        });
    }
    Ok(())
}

/// Whether this CPU has BMI2 with a fast `pext`: every Intel CPU with BMI2, and AMD
/// from Zen 3 (family 0x19) on; earlier AMD CPUs microcode it (hundreds of cycles).
fn pext_is_fast() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::__cpuid;
        if !std::arch::is_x86_feature_detected!("bmi2") {
            return false;
        }
        let vendor = __cpuid(0);
        let amd = (vendor.ebx, vendor.edx, vendor.ecx) == (0x6874_7541, 0x6974_6e65, 0x444d_4163);
        let signature = __cpuid(1).eax;
        let family = ((signature >> 8) & 0xf) + ((signature >> 20) & 0xff);
        !amd || family >= 0x19
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// A varint as prost reads it: at most 10 bytes, the 10th at most 1.
#[inline(always)]
fn varint(buf: &mut &[u8]) -> Option<u64> {
    varint_with::<false>(buf)
}

/// [`varint`], gathering the 7-bit groups with `pext` when `PEXT` (only called so
/// from code compiled for BMI2, on CPUs that have it).
#[inline(always)]
fn varint_with<const PEXT: bool>(buf: &mut &[u8]) -> Option<u64> {
    let b = *buf.first()?;
    if b < 0x80 {
        *buf = &buf[1..];
        return Some(b as u64);
    }
    // Up to 8 bytes at once, without a branch per byte: find the last byte (the
    // first without its high bit) and gather the 7-bit groups below it.
    if let Some(word) = buf.first_chunk::<8>() {
        let word = u64::from_le_bytes(*word);
        let ends = !word & 0x8080_8080_8080_8080;
        if ends != 0 {
            let len = (ends.trailing_zeros() / 8 + 1) as usize;
            let x = word & (u64::MAX >> (64 - 8 * len as u32));
            *buf = &buf[len..];
            #[cfg(target_arch = "x86_64")]
            if PEXT {
                // SAFETY: `PEXT` is only set by `decode_events_bmi2`, which runs only
                // where BMI2 was detected.
                return Some(unsafe { std::arch::x86_64::_pext_u64(x, 0x7f7f_7f7f_7f7f_7f7f) });
            }
            // Pairs of groups, then quads, then all eight; a column's varints mostly
            // share one length, so the early exits predict well.
            let x = ((x & 0x7f00_7f00_7f00_7f00) >> 1) | (x & 0x007f_007f_007f_007f);
            if len <= 2 {
                return Some(x);
            }
            let x = ((x & 0x3fff_0000_3fff_0000) >> 2) | (x & 0x0000_3fff_0000_3fff);
            if len <= 4 {
                return Some(x);
            }
            let x = ((x & 0x0fff_ffff_0000_0000) >> 4) | (x & 0x0000_0000_0fff_ffff);
            return Some(x);
        }
    }
    varint_slow(buf)
}

#[inline]
fn varint_slow(buf: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for i in 0..10 {
        let b = *buf.get(i)?;
        if i == 9 && b > 1 {
            return None;
        }
        value |= ((b & 0x7f) as u64) << (7 * i);
        if b < 0x80 {
            *buf = &buf[i + 1..];
            return Some(value);
        }
    }
    None
}

/// The next length-delimited field's bytes.
#[inline]
fn delimited<'a>(buf: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = varint(buf)?;
    if len > buf.len() as u64 {
        return None;
    }
    let (field, rest) = buf.split_at(len as usize);
    *buf = rest;
    Some(field)
}

#[inline(always)]
fn zigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// The columns of an `EventColumns` message, each one packed field at most.
fn columns(mut buf: &[u8]) -> Option<[&[u8]; COLUMNS]> {
    let mut cols: [Option<&[u8]>; COLUMNS] = [None; COLUMNS];
    while !buf.is_empty() {
        // Keys of packed fields 1..=11 are one byte: field << 3 | 2.
        let key = buf[0];
        buf = &buf[1..];
        let field = (key >> 3) as usize;
        if key & 7 != 2 || !(1..=COLUMNS).contains(&field) {
            return None;
        }
        let slot = &mut cols[field - 1];
        if slot.is_some() {
            return None;
        }
        *slot = Some(delimited(&mut buf)?);
    }
    Some(cols.map(|c| c.unwrap_or(&[])))
}

fn fast_chunk(
    mut buf: &[u8],
    kinds: &[Option<Kind>; 128],
    threads: &ThreadTable,
    events: &mut Vec<Event>,
    pext: bool,
) -> Option<FastChunk> {
    let mut cols: Option<[&[u8]; COLUMNS]> = None;
    let mut dropped_so_far = 0;
    while !buf.is_empty() {
        let key = buf[0];
        buf = &buf[1..];
        match key {
            // events
            0x0a => {
                if cols.is_some() {
                    return None;
                }
                cols = Some(columns(delimited(&mut buf)?)?);
            }
            // threads, modules: validated as prost would (they are read at open).
            0x12 => {
                ThreadRecord::decode(delimited(&mut buf)?).ok()?;
            }
            0x1a => {
                ModuleRecord::decode(delimited(&mut buf)?).ok()?;
            }
            // dropped_so_far
            0x20 => dropped_so_far = varint(&mut buf)?,
            _ => return None,
        }
    }
    if let Some(cols) = cols {
        #[cfg(target_arch = "x86_64")]
        if pext {
            // SAFETY: `pext` is only true where `pext_is_fast` detected BMI2.
            unsafe { decode_events_bmi2(cols, kinds, threads, events)? };
            return Some(FastChunk { dropped_so_far });
        }
        let _ = pext;
        decode_events::<false>(cols, kinds, threads, events)?;
    }
    Some(FastChunk { dropped_so_far })
}

/// [`decode_events`] compiled for BMI2, gathering varints with `pext`.
///
/// # Safety
/// The CPU must support BMI2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "bmi2")]
unsafe fn decode_events_bmi2(
    cols: [&[u8]; COLUMNS],
    kinds: &[Option<Kind>; 128],
    threads: &ThreadTable,
    events: &mut Vec<Event>,
) -> Option<()> {
    decode_events::<true>(cols, kinds, threads, events)
}

/// Decodes the columns row by row into events.
#[inline(always)]
fn decode_events<const PEXT: bool>(
    cols: [&[u8]; COLUMNS],
    kinds: &[Option<Kind>; 128],
    threads: &ThreadTable,
    events: &mut Vec<Event>,
) -> Option<()> {
    let [mut ts_delta, mut tid, mut kind, mut via, mut addr, mut addr2, mut site, mut seq, mut result, mut value, mut size] =
        cols;
    // Every varint ends in exactly one byte below 0x80.
    let n = tid.iter().filter(|&&b| b < 0x80).count();
    events.reserve(n);

    // tid → thread index, the unknown tid u32::MAX filling the empty slots.
    let index_of = |t: u32| threads.index_of(t).unwrap_or(u32::MAX);
    let mut cache = [(u32::MAX, index_of(u32::MAX)); TID_CACHE];

    let mut ts = 0u64;
    for _ in 0..n {
        ts = ts.wrapping_add(zigzag(varint_with::<PEXT>(&mut ts_delta)?) as u64);
        let t = varint_with::<PEXT>(&mut tid)? as u32;
        let code = varint_with::<PEXT>(&mut kind)? as u32;
        let event_kind = (*kinds.get(code as usize)?)?;
        let slot = &mut cache[t as usize % TID_CACHE];
        if slot.0 != t {
            *slot = (t, index_of(t));
        }
        let thread = slot.1;
        events.push(Event {
            ts_ns: ts,
            tid: t,
            thread,
            kind: event_kind,
            via: Via::from_code(varint_with::<PEXT>(&mut via)? as u32 as u8),
            addr: varint_with::<PEXT>(&mut addr)?,
            addr2: varint_with::<PEXT>(&mut addr2)?,
            site: varint_with::<PEXT>(&mut site)?,
            seq: varint_with::<PEXT>(&mut seq)?,
            result: zigzag(varint_with::<PEXT>(&mut result)?),
            value: varint_with::<PEXT>(&mut value)?,
            size: varint_with::<PEXT>(&mut size)? as u32 as u8,
        });
    }
    let all_read = [
        ts_delta, tid, kind, via, addr, addr2, site, seq, result, value, size,
    ]
    .iter()
    .all(|c| c.is_empty());
    all_read.then_some(())
}

#[cfg(test)]
mod tests;
