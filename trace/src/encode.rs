//! One-pass chunk encoding for [`crate::TraceWriter`].
//!
//! prost stays the definition of [`crate::schema::Chunk`]; encoding one through
//! it first copies the events into eleven column `Vec`s, then walks every column
//! three more times (the chunk's length, the nested message's length, each packed
//! field's length) before writing it — most of the writer's time on a busy
//! recording. Here the events go straight from the slice into packed varints, in
//! one walk over them (each value into its column's buffer), and the chunk comes out byte for byte as prost writes it (a test
//! compares them), so readers — prost's and [`crate::decode`]'s fast path — see no
//! difference. Thread and module records, a handful per chunk, go through prost.

use prost::encoding::{encode_key, encode_varint, WireType};

use crate::event::Event;
use crate::schema::{ModuleRecord, ThreadRecord};

/// Buffers reused from chunk to chunk.
#[derive(Default)]
pub(crate) struct ChunkEncoder {
    /// The encoded chunk.
    chunk: Vec<u8>,
    /// The event columns' body (field 1 of `Chunk`).
    body: Vec<u8>,
    /// Each column's packed values, written at the front; each is kept at least
    /// 10 bytes (the longest varint) per event of the largest chunk so far.
    columns: [Vec<u8>; COLUMNS],
}

/// Event columns (fields 1 to 11 of `EventColumns`).
const COLUMNS: usize = 11;

impl ChunkEncoder {
    /// The `Chunk` of these events, thread and module records and drop count, as
    /// `Chunk { events: Some(columns(events)), .. }.encode_to_vec()` would produce it.
    pub(crate) fn encode(
        &mut self,
        events: &[Event],
        threads: &[ThreadRecord],
        modules: &[ModuleRecord],
        dropped_so_far: u64,
    ) -> &[u8] {
        self.body.clear();
        if !events.is_empty() {
            // One walk over the events (a chunk of 65 536 is megabytes: a walk per
            // column read it eleven times), each value into its column.
            for column in &mut self.columns {
                if column.len() < events.len() * 10 {
                    column.resize(events.len() * 10, 0);
                }
            }
            let mut at = [0usize; COLUMNS];
            let mut prev = 0u64;
            for e in events {
                let delta = e.ts_ns.wrapping_sub(prev) as i64;
                prev = e.ts_ns;
                let values = [
                    zigzag(delta),
                    u64::from(e.tid),
                    e.kind as u64,
                    u64::from(e.via.code()),
                    e.addr,
                    e.addr2,
                    e.site,
                    e.seq,
                    zigzag(e.result),
                    e.value,
                    u64::from(e.size),
                ];
                for ((column, at), v) in self.columns.iter_mut().zip(&mut at).zip(values) {
                    put_varint(column, at, v);
                }
            }
            for (tag, (column, len)) in (1..).zip(self.columns.iter().zip(at)) {
                encode_key(tag, WireType::LengthDelimited, &mut self.body);
                encode_varint(len as u64, &mut self.body);
                self.body.extend_from_slice(&column[..len]);
            }
        }
        let out = &mut self.chunk;
        out.clear();
        encode_key(1, WireType::LengthDelimited, out);
        encode_varint(self.body.len() as u64, out);
        out.extend_from_slice(&self.body);
        for t in threads {
            prost::encoding::message::encode(2, t, out);
        }
        for m in modules {
            prost::encoding::message::encode(3, m, out);
        }
        if dropped_so_far != 0 {
            prost::encoding::uint64::encode(4, &dropped_so_far, out);
        }
        out
    }
}

/// protobuf's `sint64` mapping.
#[inline(always)]
fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// A varint, written at `*at` (the buffer has room: 10 bytes a value).
#[inline(always)]
fn put_varint(buf: &mut [u8], at: &mut usize, mut v: u64) {
    while v >= 0x80 {
        buf[*at] = v as u8 | 0x80;
        *at += 1;
        v >>= 7;
    }
    buf[*at] = v as u8;
    *at += 1;
}
