//! The Perfetto export decodes as a `Trace`, with a track per thread, balanced
//! slices that nest per track, and flows only between different threads, each of
//! which ends somewhere.

use ordo_analysis::perfetto::{
    export_perfetto, Trace, TYPE_INSTANT, TYPE_SLICE_BEGIN, TYPE_SLICE_END,
};
use ordo_analysis::synthetic::{TraceBuilder, MAIN_TID};
use prost::Message;
use std::collections::HashMap;

#[test]
fn export_decodes_with_tracks_slices_and_flows() {
    let mut b = TraceBuilder::new();
    let (t1, t2) = (b.spawn(MAIN_TID), b.spawn(MAIN_TID));
    b.create(MAIN_TID, t1, 0x90, 0x400);
    b.create(MAIN_TID, t2, 0x98, 0x400);
    // Hand-over-hand: A taken, B taken, A released first (slices must be repaired).
    b.lock(t1, 0xa0, 0x500);
    b.lock(t1, 0xb0, 0x501);
    b.unlock(t1, 0xa0, 0x502);
    b.unlock(t1, 0xb0, 0x503);
    b.lock(t2, 0xa0, 0x600);
    b.wait_begin(t2, 0xc0, 0xa0, 0x601);
    b.signal(t1, 0xc0, 0x504);
    b.wait_end(t2, 0xc0, 0xa0, 0, 0x601);
    b.unlock(t2, 0xa0, 0x602);
    b.exit_join(MAIN_TID, t1, 0x90, 0x401);
    b.exit_join(MAIN_TID, t2, 0x98, 0x401);
    let dir = tempfile::tempdir().unwrap();
    let (trace, out) = (dir.path().join("t.ordo"), dir.path().join("t.pftrace"));
    b.write_to(&trace).unwrap();
    let stats = export_perfetto(&trace, &out, false).unwrap();
    let decoded = Trace::decode(std::fs::read(&out).unwrap().as_slice()).expect("a valid Trace");
    assert_eq!(decoded.packet.len() as u64, stats.packets);

    let threads: Vec<_> = decoded
        .packet
        .iter()
        .filter_map(|p| p.track_descriptor.as_ref()?.thread.as_ref())
        .collect();
    assert_eq!(threads.len(), 3);
    assert!(
        threads
            .iter()
            .any(|t| t.thread_name.as_deref() == Some("t1001 [1]")),
        "{threads:?}"
    );

    // Per track, slice begins and ends balance and never go below zero.
    let mut depth: HashMap<u64, i64> = HashMap::new();
    let mut instants = 0;
    let (mut starts, mut ends) = (Vec::new(), Vec::new());
    for p in &decoded.packet {
        let Some(e) = &p.track_event else { continue };
        let d = depth.entry(e.track_uuid.unwrap()).or_default();
        match e.r#type {
            Some(TYPE_SLICE_BEGIN) => *d += 1,
            Some(TYPE_SLICE_END) => *d -= 1,
            Some(TYPE_INSTANT) => instants += 1,
            other => panic!("unexpected type {other:?}"),
        }
        assert!(*d >= 0);
        starts.extend(e.flow_ids.iter().map(|&f| (f, e.track_uuid.unwrap())));
        ends.extend(
            e.terminating_flow_ids
                .iter()
                .map(|&f| (f, e.track_uuid.unwrap())),
        );
    }
    assert!(depth.values().all(|&d| d == 0), "{depth:?}");
    assert_eq!(instants, b.len());
    // create→start twice, A: t1's unlock → t2's lock, signal → wait return, exit→join twice.
    assert_eq!(stats.flows, 6);
    assert_eq!(ends.len(), 6);
    for (flow, track) in &ends {
        let (_, from) = starts
            .iter()
            .find(|(f, _)| f == flow)
            .expect("every ended flow starts somewhere");
        assert_ne!(from, track, "flows connect different threads");
    }
    // And every started one ends: t1's unlock of B and t2's last unlock of A are
    // followed by no other thread's acquire, so they start no arrow.
    assert_eq!(starts.len(), 6, "{starts:?}");
    for (flow, _) in &starts {
        assert!(ends.iter().any(|(f, _)| f == flow), "flow {flow} dangles");
    }
    // Slices: two on t1 plus one reopened by the repair, t2's two sections and its wait.
    assert_eq!(stats.slices, 5);
}

#[test]
fn export_of_a_bad_trace_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("bad.ordo");
    std::fs::write(&trace, b"garbage").unwrap();
    let err = export_perfetto(&trace, &dir.path().join("o"), false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("bad.ordo"), "{err}");
}
