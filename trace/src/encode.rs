//! One-pass chunk encoding for [`crate::TraceWriter`].
//!
//! prost stays the definition of [`crate::schema::Chunk`]; encoding one through
//! it first copies the events into eleven column `Vec`s, then walks every column
//! three more times (the chunk's length, the nested message's length, each packed
//! field's length) before writing it — most of the writer's time on a busy
//! recording. Here the events go straight from the slice into packed varints, each
//! column once, and the chunk comes out byte for byte as prost writes it (a test
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
    /// One column's packed values.
    column: Vec<u8>,
}

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
        let mut prev = 0u64;
        self.packed(1, events, |e| {
            let delta = e.ts_ns.wrapping_sub(prev) as i64;
            prev = e.ts_ns;
            zigzag(delta)
        });
        self.packed(2, events, |e| u64::from(e.tid));
        self.packed(3, events, |e| e.kind as u64);
        self.packed(4, events, |e| u64::from(e.via.code()));
        self.packed(5, events, |e| e.addr);
        self.packed(6, events, |e| e.addr2);
        self.packed(7, events, |e| e.site);
        self.packed(8, events, |e| e.seq);
        self.packed(9, events, |e| zigzag(e.result));
        self.packed(10, events, |e| e.value);
        self.packed(11, events, |e| u64::from(e.size));
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

    /// Appends one packed column (nothing when there are no events, as prost).
    #[inline(always)]
    fn packed(&mut self, tag: u32, events: &[Event], mut value: impl FnMut(&Event) -> u64) {
        if events.is_empty() {
            return;
        }
        self.column.clear();
        for e in events {
            put_varint(&mut self.column, value(e));
        }
        encode_key(tag, WireType::LengthDelimited, &mut self.body);
        encode_varint(self.column.len() as u64, &mut self.body);
        self.body.extend_from_slice(&self.column);
    }
}

/// protobuf's `sint64` mapping.
#[inline(always)]
fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// A varint, appended.
#[inline(always)]
fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push(v as u8 | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}
