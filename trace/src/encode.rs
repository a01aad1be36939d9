//! One-pass chunk encoding for [`crate::TraceWriter`].
//!
//! prost stays the definition of [`crate::schema::Chunk`]; encoding one through
//! it first copies the events into eleven column `Vec`s, then walks every column
//! three more times (the chunk's length, the nested message's length, each packed
//! field's length) before writing it — most of the writer's time on a busy
//! recording. Here the events go straight from the slice into packed varints, a
//! block of them at a time (each value into its column's buffer), and the chunk
//! comes out byte for byte as prost writes it (a test compares them), so readers — prost's and [`crate::decode`]'s fast path — see no
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
            for column in &mut self.columns {
                if column.len() < events.len() * 10 {
                    column.resize(events.len() * 10, 0);
                }
            }
            let mut at = [0usize; COLUMNS];
            let mut prev = 0u64;
            // A block of events at a time, a column at a time within it: a chunk
            // of 65 536 events is megabytes, so a walk per column would read it
            // eleven times, while one walk with every column's position in memory
            // kept each value waiting on the last one stored; a block stays in
            // the first-level cache while its eleven columns are written.
            let [ts, tid, kind, via, addr, addr2, site, seq, result, value, size] =
                &mut self.columns;
            for block in events.chunks(BLOCK) {
                let mut a = at[0];
                for e in block {
                    put_varint(ts, &mut a, zigzag(e.ts_ns.wrapping_sub(prev) as i64));
                    prev = e.ts_ns;
                }
                at[0] = a;
                put_column(tid, &mut at[1], block, |e| u64::from(e.tid));
                put_column(kind, &mut at[2], block, |e| e.kind as u64);
                put_column(via, &mut at[3], block, |e| u64::from(e.via.code()));
                put_column(addr, &mut at[4], block, |e| e.addr);
                put_column(addr2, &mut at[5], block, |e| e.addr2);
                put_column(site, &mut at[6], block, |e| e.site);
                put_column(seq, &mut at[7], block, |e| e.seq);
                put_column(result, &mut at[8], block, |e| zigzag(e.result));
                put_column(value, &mut at[9], block, |e| e.value);
                put_column(size, &mut at[10], block, |e| u64::from(e.size));
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

/// Events a column at a time ([`ChunkEncoder::encode`]): 16 KiB of them.
const BLOCK: usize = 256;

/// `value` of each of `block`'s events into `column` from `*at` on.
#[inline(always)]
fn put_column(column: &mut [u8], at: &mut usize, block: &[Event], value: impl Fn(&Event) -> u64) {
    let mut a = *at;
    for e in block {
        put_varint(column, &mut a, value(e));
    }
    *at = a;
}

/// protobuf's `sint64` mapping.
#[inline(always)]
fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// A varint, written at `*at` (the buffer has room: 10 bytes a value).
///
/// Addresses and call sites take 7 bytes each: a loop of a byte at a time was
/// most of the writer's time on a busy recording, so a value of up to 56 bits
/// has its 7-bit groups spread into one 8-byte word and stored at once (the
/// bytes past its length are overwritten by the next value or lie past the
/// column's end, which the 10 bytes a value leave room for).
#[inline(always)]
fn put_varint(buf: &mut [u8], at: &mut usize, v: u64) {
    if v < 0x80 {
        buf[*at] = v as u8;
        *at += 1;
        return;
    }
    if v >= 1 << 56 {
        let mut v = v;
        while v >= 0x80 {
            buf[*at] = v as u8 | 0x80;
            *at += 1;
            v >>= 7;
        }
        buf[*at] = v as u8;
        *at += 1;
        return;
    }
    let groups = (64 - v.leading_zeros() as usize).div_ceil(7);
    let mut spread = 0u64;
    for g in 0..8 {
        spread |= (v << g) & (0x7f << (8 * g));
    }
    // The high bit of every byte but the last.
    let more = 0x8080_8080_8080_8080u64 >> (8 * (9 - groups));
    buf[*at..*at + 8].copy_from_slice(&(spread | more).to_le_bytes());
    *at += groups;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_are_protobufs_at_every_length() {
        let mut values = vec![0, 1, 0x7f, 0x80, 0x3fff, 0x4000, u64::MAX, 1 << 63];
        for bits in 1..64 {
            values.extend([(1u64 << bits) - 1, 1 << bits, (1 << bits) + 1]);
        }
        values.extend([0x7f12_3456_789a, 0x5555_dead_beef, 0x00ff_ffff_ffff_ffff]);
        let mut buf = vec![0xaa; values.len() * 10];
        let mut at = 0;
        let mut expected = Vec::new();
        for &v in &values {
            put_varint(&mut buf, &mut at, v);
            encode_varint(v, &mut expected);
            assert_eq!(&buf[..at], &expected[..], "after {v:#x}");
        }
    }
}
