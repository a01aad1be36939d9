//! The fast path agrees with prost: same events where it decodes, and it gives up
//! (never panics, never accepts) where prost rejects.

use prost::Message;

use super::*;
use crate::file::columns;
use crate::schema::{Mapping, ModuleRecord, ThreadRecord};
use crate::thread::{LogicalId, ThreadInfo};

/// xorshift, deterministic.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Numbers of every varint length, small ones more often.
    fn number(&mut self) -> u64 {
        let bits = self.below(65) as u32;
        self.next() & (u64::MAX >> (64 - bits.max(1))) & if bits == 0 { 0 } else { u64::MAX }
    }
}

fn table() -> ThreadTable {
    ThreadTable::new(
        [100, 101, 102, 164, 228]
            .into_iter()
            .enumerate()
            .map(|(i, tid)| ThreadInfo {
                tid,
                logical: LogicalId(vec![i as u32]),
                name: String::new(),
                parent_tid: 0,
            })
            .collect(),
    )
}

fn random_events(rng: &mut Rng, n: usize) -> Vec<Event> {
    let mut ts = rng.number();
    (0..n)
        .map(|_| {
            ts = if rng.below(8) == 0 {
                rng.next()
            } else {
                ts.wrapping_add(rng.number())
            };
            Event {
                ts_ns: ts,
                // Known tids (some colliding in the cache), unknown ones, extremes.
                tid: match rng.below(4) {
                    0 => [100, 101, 102, 164, 228][rng.below(5) as usize],
                    1 => rng.number() as u32,
                    2 => [0, u32::MAX, 36, 292][rng.below(4) as usize],
                    _ => 100 + rng.below(3) as u32,
                },
                thread: 0,
                kind: Kind::ALL[rng.below(Kind::ALL.len() as u64) as usize],
                via: Via::from_code(rng.below(5) as u8),
                addr: rng.number(),
                addr2: rng.number(),
                site: rng.number(),
                seq: rng.number(),
                result: rng.number() as i64,
                value: rng.number(),
                size: rng.number() as u8,
            }
        })
        .collect()
}

/// A chunk's thread and module records: one of each, or none.
fn records(with: bool) -> (Vec<ThreadRecord>, Vec<ModuleRecord>) {
    if !with {
        return (vec![], vec![]);
    }
    let thread = ThreadRecord {
        tid: 7,
        logical: vec![1, 2],
        name: "w".into(),
        parent_tid: 1,
    };
    let module = ModuleRecord {
        path: "/bin/x".into(),
        build_id: "ab".into(),
        mappings: vec![Mapping {
            start: 1,
            end: 2,
            file_offset: 3,
        }],
    };
    (vec![thread], vec![module])
}

fn chunk_bytes(events: &[Event], rng: &mut Rng) -> Vec<u8> {
    let (threads, modules) = records(rng.below(3) == 0);
    Chunk {
        events: (!events.is_empty() || rng.below(2) == 0).then(|| columns(events)),
        threads,
        modules,
        dropped_so_far: rng.number(),
    }
    .encode_to_vec()
}

/// Decodes with both paths; when the fast one decodes, prost must agree exactly.
/// Returns whether the fast path took it.
fn agree(raw: &[u8], threads: &ThreadTable) -> bool {
    let decoder = ChunkDecoder {
        raw: raw.to_vec(),
        ..ChunkDecoder::default()
    };
    let mut fast = vec![Event {
        ts_ns: 1,
        tid: 1,
        thread: 1,
        kind: Kind::Read,
        via: Via::Try,
        addr: 1,
        addr2: 1,
        site: 1,
        seq: 1,
        result: 1,
        value: 1,
        size: 1,
    }];
    let before = fast.clone();
    let got = decoder.fast_events(threads, &mut fast);
    // Both ways of gathering varints (when this CPU can run `pext`) agree.
    if super::pext_is_fast() {
        let plain = ChunkDecoder {
            pext: !decoder.pext,
            ..decoder
        };
        let mut other = before.clone();
        let got_other = plain.fast_events(threads, &mut other);
        assert_eq!(got.is_some(), got_other.is_some());
        assert_eq!(fast, other);
    }
    let slow = prost_chunk(raw).and_then(|chunk| {
        let mut events = before.clone();
        if let Some(c) = &chunk.events {
            prost_events(c, threads, &mut events)?;
        }
        Ok((chunk.dropped_so_far, events))
    });
    match got {
        Some(FastChunk { dropped_so_far }) => {
            let (dropped, events) =
                slow.unwrap_or_else(|e| panic!("fast path accepted what prost rejects: {e}"));
            assert_eq!(dropped, dropped_so_far);
            assert_eq!(fast, events);
            true
        }
        None => {
            assert_eq!(fast, before, "a declined chunk leaves the events alone");
            false
        }
    }
}

#[test]
fn agrees_with_prost_on_random_chunks() {
    let threads = table();
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    for round in 0..400 {
        let n = if round % 10 == 0 {
            0
        } else {
            rng.below(300) as usize
        };
        let events = random_events(&mut rng, n);
        let raw = chunk_bytes(&events, &mut rng);
        // What the writer writes always takes the fast path.
        assert!(
            agree(&raw, &threads),
            "round {round}: writer output declined"
        );
        let decoder = ChunkDecoder {
            raw: raw.clone(),
            ..ChunkDecoder::default()
        };
        let mut back = Vec::new();
        decoder.fast_events(&threads, &mut back).unwrap();
        let expect: Vec<Event> = events
            .iter()
            .map(|e| Event {
                thread: threads.index_of(e.tid).unwrap_or(u32::MAX),
                ..*e
            })
            .collect();
        assert_eq!(back, expect);
    }
}

#[test]
fn agrees_with_prost_on_damaged_chunks() {
    let threads = table();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut declined = 0;
    for _ in 0..3000 {
        let n = 1 + rng.below(40) as usize;
        let events = random_events(&mut rng, n);
        let mut raw = chunk_bytes(&events, &mut rng);
        for _ in 0..1 + rng.below(3) {
            let at = rng.below(raw.len() as u64) as usize;
            match rng.below(5) {
                0 => raw[at] = rng.next() as u8,
                1 => raw[at] ^= 0x80,
                2 => raw.truncate(at),
                3 => raw.insert(at, rng.next() as u8),
                _ => {
                    raw.remove(at);
                }
            }
            if raw.is_empty() {
                break;
            }
        }
        if !agree(&raw, &threads) {
            declined += 1;
        }
    }
    assert!(declined > 0);
    // Plain noise.
    for len in 0..2000 {
        let raw: Vec<u8> = (0..len % 97).map(|_| rng.next() as u8).collect();
        agree(&raw, &threads);
    }
}

#[test]
fn declines_malformed_packed_fields() {
    let threads = table();
    let mut rng = Rng(7);
    let events = random_events(&mut rng, 10);
    let columns = columns(&events);
    let good = Chunk {
        events: Some(columns.clone()),
        ..Default::default()
    }
    .encode_to_vec();
    assert!(agree(&good, &threads));

    // The tid column (field 2) cut inside its last varint: its length says 1 byte
    // fewer, and that byte goes to the next field (so the rest stays framed).
    let inner = columns.encode_to_vec();
    // Skip field 1 (ts_delta) to field 2's key.
    assert_eq!(inner[0], 0x0a);
    let mut rest = &inner[1..];
    let ts_len = varint(&mut rest).unwrap() as usize;
    let at = inner.len() - rest.len() + ts_len;
    assert_eq!(inner[at], 0x12);
    let len = inner[at + 1] as usize;
    assert!(len < 0x80);
    let mut cut = inner.clone();
    cut[at + 1] = (len - 1) as u8;
    cut.insert(at + 2 + len - 1, 0x12);
    cut.insert(at + 2 + len, 0);
    let mut raw = vec![0x0a];
    prost::encoding::encode_varint(cut.len() as u64, &mut raw);
    raw.extend(&cut);
    assert!(!agree(&raw, &threads));

    // A varint of 11 bytes, and one whose 10th byte overflows 64 bits.
    for bad in [
        [0xffu8; 10]
            .iter()
            .copied()
            .chain([0x01])
            .collect::<Vec<_>>(),
        [0xff; 9].iter().copied().chain([0x02]).collect(),
    ] {
        let mut inner = vec![0x12];
        prost::encoding::encode_varint(bad.len() as u64, &mut inner);
        inner.extend(&bad);
        let mut raw = vec![0x0a];
        prost::encoding::encode_varint(inner.len() as u64, &mut raw);
        raw.extend(&inner);
        assert!(!agree(&raw, &threads));
        assert!(prost_chunk(&raw).is_err());
    }

    // Columns of different lengths.
    let mut short = columns.clone();
    short.site.pop();
    let raw = Chunk {
        events: Some(short),
        ..Default::default()
    }
    .encode_to_vec();
    assert!(!agree(&raw, &threads));
    // An unknown kind.
    let mut unknown = columns.clone();
    unknown.kind[3] = 999;
    let raw = Chunk {
        events: Some(unknown),
        ..Default::default()
    }
    .encode_to_vec();
    assert!(!agree(&raw, &threads));
}

#[test]
fn unpacked_and_repeated_fields_fall_back_to_prost() {
    let threads = table();
    let mut rng = Rng(11);
    let events = random_events(&mut rng, 3);
    let columns = columns(&events);
    // The same columns, every value as its own (unpacked) field: valid protobuf.
    let mut inner = Vec::new();
    let c = &columns;
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
    let mut raw = vec![0x0a];
    prost::encoding::encode_varint(inner.len() as u64, &mut raw);
    raw.extend(&inner);
    assert_eq!(
        Chunk::decode(raw.as_slice()).unwrap().events.unwrap(),
        columns
    );
    assert!(!agree(&raw, &threads));
    // Two `events` fields merge (columns concatenate): prost's business too.
    let one = Chunk {
        events: Some(columns.clone()),
        ..Default::default()
    }
    .encode_to_vec();
    let twice = [one.clone(), one].concat();
    assert!(!agree(&twice, &threads));
    assert_eq!(prost_chunk(&twice).unwrap().events.unwrap().tid.len(), 6);
}

#[test]
fn varints_agree_with_prost() {
    let mut rng = Rng(3);
    let mut values: Vec<u64> = (0..64)
        .map(|b| 1u64 << b)
        .chain((0..64).map(|b| (1u64 << b) - 1))
        .chain([u64::MAX])
        .collect();
    values.extend((0..5000).map(|_| rng.number()));
    for v in values {
        let mut enc = Vec::new();
        prost::encoding::encode_varint(v, &mut enc);
        // Alone (the byte-wise tail) and followed by more bytes (8 at once).
        for tail in [
            &[][..],
            &[0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80][..],
            &[1, 2][..],
        ] {
            let bytes = [enc.as_slice(), tail].concat();
            let mut buf = bytes.as_slice();
            assert_eq!(varint(&mut buf), Some(v), "{v:#x}");
            assert_eq!(buf, tail);
        }
        // Cut short.
        let mut cut = &enc[..enc.len() - 1];
        assert_eq!(varint(&mut cut), None);
    }
    // Overlong but valid (prost reads them too): 1 in 10 bytes.
    let mut buf = &[0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00][..];
    assert_eq!(varint(&mut buf), Some(1));
    assert_eq!(
        prost::encoding::decode_varint(
            &mut &[0x81u8, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00][..]
        )
        .unwrap(),
        1
    );
    // Too long, or overflowing 64 bits.
    for bad in [
        &[0x80u8; 10][..],
        &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02][..],
    ] {
        let with_tail = [bad, &[0u8; 4]].concat();
        assert_eq!(varint(&mut &with_tail[..]), None);
        assert!(prost::encoding::decode_varint(&mut &with_tail[..]).is_err());
    }
}

#[test]
fn decompresses_like_the_stream_decoder() {
    let mut rng = Rng(5);
    let data: Vec<u8> = (0..100_000).map(|_| rng.below(7) as u8).collect();
    let mut decoder = ChunkDecoder::default();
    for level in [1, 3] {
        let packed = zstd::bulk::compress(&data, level).unwrap();
        decoder.decompress(&packed).unwrap();
        assert_eq!(decoder.raw, data);
        // A frame without its content size (streamed), and two frames in a row.
        let mut streamed = Vec::new();
        let mut enc = zstd::stream::Encoder::new(&mut streamed, level).unwrap();
        std::io::Write::write_all(&mut enc, &data).unwrap();
        enc.finish().unwrap();
        decoder.decompress(&streamed).unwrap();
        assert_eq!(decoder.raw, data);
        decoder
            .decompress(&[packed.clone(), packed.clone()].concat())
            .unwrap();
        assert_eq!(decoder.raw, [data.clone(), data.clone()].concat());
        // Damage: an error, not a panic.
        let mut bad = packed.clone();
        let mid = bad.len() / 2;
        bad[mid] ^= 0x55;
        bad.truncate(bad.len() - 3);
        assert!(decoder
            .decompress(&bad)
            .unwrap_err()
            .contains("cannot decompress"));
    }
}

#[test]
fn the_one_pass_encoder_writes_what_prost_writes() {
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let mut encoder = crate::encode::ChunkEncoder::default();
    for round in 0..300 {
        let n = [0, 1, 2, 17, 1000][round % 5];
        let events = random_events(&mut rng, n);
        let (threads, modules) = records(round % 3 == 0);
        let dropped = [0, 1, u64::MAX][round % 3];
        let by_prost = Chunk {
            events: Some(columns(&events)),
            threads: threads.clone(),
            modules: modules.clone(),
            dropped_so_far: dropped,
        }
        .encode_to_vec();
        let out = encoder.encode(&events, &threads, &modules, dropped);
        assert_eq!(out, by_prost, "round {round}, {n} events");
    }
}
