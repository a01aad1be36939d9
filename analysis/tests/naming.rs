//! The analysis names events exactly as `ordo_schedule::EventNamer` does (the
//! replayer matches events by these names), including skipping glibc-internal calls.

use ordo_analysis::engine::Engine;
use ordo_analysis::naming::Namer;
use ordo_analysis::synthetic::{TraceBuilder, MAIN_TID};
use ordo_schedule::EventNamer;
use ordo_trace::symbolize::Symbolizer;
use ordo_trace::{global_order, Kind, ReadMode};

#[test]
fn names_agree_with_the_schedule_crates_namer() {
    let mut b = TraceBuilder::new();
    let ts: Vec<u32> = (0..3).map(|_| b.spawn(MAIN_TID)).collect();
    for (i, &t) in ts.iter().enumerate() {
        b.create(MAIN_TID, t, 0x9000 + 8 * i as u64, 0x400);
    }
    let internal_site = 0xdead_0000;
    for i in 0..300u64 {
        let t = ts[(i % 3) as usize];
        let m = 0x1000 + (i % 5) * 0x40;
        b.lock(t, m, 0x500 + i % 7);
        if i % 5 == 1 {
            // A condvar wait: its mutex release and reacquisition count in no
            // mutex_* occurrence, in both namers.
            b.wait_begin(t, 0x2800, m, 0x520);
            b.wait_end(t, 0x2800, m, 0, 0x520);
        }
        if i % 4 == 0 {
            b.read(t, 0x3000, 0x600);
            b.write(t, 0x3000 + (i % 2) * 8, 0x601);
        }
        if i % 6 == 0 {
            b.signal(t, 0x2000 + (i % 2) * 0x40, 0x700);
            b.push(t, Kind::SemPost, 0x4000, 0x701);
            // A lock glibc takes for itself: no name, not counted.
            b.lock(t, 0x5000, internal_site);
            b.unlock(t, 0x5000, internal_site + 1);
        }
        b.unlock(t, m, 0x510);
    }
    for (i, &t) in ts.iter().enumerate() {
        b.exit_join(MAIN_TID, t, 0x9000 + 8 * i as u64, 0x401);
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.ordo");
    b.write_to(&path).unwrap();
    let (reader, events) = ordo_trace::read_trace(&path, ReadMode::Strict).unwrap();
    let events = global_order(events);
    let is_internal = |site: u64| site & 0xffff_0000 == internal_site;

    let mut engine = Engine::with_internal_sites(&reader.threads, is_internal);
    let ids: Vec<_> = events.iter().map(|e| engine.process(e)).collect();
    let pass = engine.finish();
    let symbolizer = Symbolizer::of_trace(&reader);
    let ours = Namer::new(&reader.threads, &pass.tids, &pass.objects, &symbolizer);

    let mut theirs = EventNamer::new(&reader.threads, &symbolizer);
    let mut named = 0;
    for (e, id) in events.iter().zip(&ids) {
        // The trace has no modules, so the schedule crate's namer cannot tell which
        // sites are glibc's: give it only the events it would name.
        if is_internal(e.site) {
            assert!(ours.event_ref(id).is_none());
            continue;
        }
        assert_eq!(ours.event_ref(id), theirs.name(e), "{e:?}");
        named += 1;
    }
    assert!(named > 700, "{named}");
}
