//! The drain of a recording with the in-process source (see `crate::inproc`):
//! passes over the agent's rings and the eBPF ring buffer, merged per thread, into
//! the same [`DrainState`] the eBPF-only drain feeds. A plain thread, not tokio: it
//! sleeps on the agents' doorbell (a futex in the shared mapping) between passes.

use std::process::ExitStatus;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use aya::maps::{MapData, RingBuf};
use ordo_probe_common::inproc::RING_RECORDS;
use ordo_probe_common::RawEvent;
use ordo_trace::schema::ModuleRecord;
use tokio::sync::{mpsc, oneshot};

use super::attach::Probes;
use super::drain::FLUSH_INTERVAL;
use super::{DrainState, RecordSummary};
use crate::inproc::{pass, InprocMapping, Merger};

/// The drain thread's scheduling: idle priority while the rings are nearly empty,
/// normal once a pass found a ring a quarter full (see [`drain`]).
#[derive(Default)]
struct DrainPriority {
    normal: bool,
    started: bool,
}

impl DrainPriority {
    /// Adjusts after a pass that took at most `largest` records from one ring.
    fn after_pass(&mut self, largest: usize) {
        let want_normal = if self.normal {
            largest > RING_RECORDS / 32
        } else {
            largest >= RING_RECORDS / 4
        };
        if self.started && want_normal == self.normal {
            return;
        }
        self.started = true;
        self.normal = want_normal;
        let policy = if want_normal {
            libc::SCHED_OTHER
        } else {
            libc::SCHED_IDLE
        };
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: changes this thread's scheduling policy only.
        unsafe { libc::sched_setscheduler(0, policy, &param) };
    }
}

/// How long the drain sleeps between passes when no ring fills up.
const PASS_INTERVAL: Duration = Duration::from_millis(5);

/// The drain of a recording with the in-process source: passes over the agent
/// rings and the eBPF ring until told to stop, then the rest, then the footer.
pub(super) fn drain(
    mut probes: Probes,
    mut ring: RingBuf<MapData>,
    mut state: DrainState,
    mut stop: oneshot::Receiver<Option<ExitStatus>>,
    mut snapshots: mpsc::UnboundedReceiver<Vec<ModuleRecord>>,
    mapping: Arc<InprocMapping>,
) -> Result<RecordSummary> {
    // The drain yields the CPU to the program while the rings absorb the load: it
    // runs at idle priority until a pass finds a ring a quarter full, then at normal
    // priority until the rings stay nearly empty. Always at idle priority it starves
    // under a saturating load (a server and its load generator on every CPU), the
    // rings fill and the program waits; always at normal priority it takes its share
    // of the CPU from a program in the middle of a burst the rings could have held.
    let mut priority = DrainPriority::default();
    let mut merger = Merger::default();
    merger.created.insert(state.pid);
    let mut released = Vec::new();
    let mut last_flush = Instant::now();
    let mut doorbell = mapping.doorbell();
    let mut run_pass = |merger: &mut Merger,
                        state: &mut DrainState,
                        all: bool,
                        ring: &mut RingBuf<MapData>,
                        probes: &Probes|
     -> Result<()> {
        let mut read_kernel = |m: &mut Merger| -> Result<()> {
            while let Some(item) = ring.next() {
                if item.len() < std::mem::size_of::<RawEvent>() {
                    continue;
                }
                // SAFETY: the probes write whole RawEvent records; read_unaligned copes
                // with the ring buffer's 8-byte record alignment.
                let raw: RawEvent = unsafe { std::ptr::read_unaligned(item.as_ptr().cast()) };
                m.push_kernel(raw);
            }
            Ok(())
        };
        let held = merger.held;
        let largest = pass(&mapping, merger, &mut read_kernel, all, &mut |e| {
            released.push(*e)
        })?;
        priority.after_pass(largest);
        if merger.held != held || !released.is_empty() {
            state.ensure_modules();
        }
        for e in released.drain(..) {
            state.take(&e);
            if state.chunk_full() {
                state.flush(probes.drops() + mapping.dropped(), false)?;
            }
        }
        Ok(())
    };
    let mut modules_read = false;
    let mut waking_each = true;
    let exit = loop {
        while let Ok(snapshot) = snapshots.try_recv() {
            state.add_modules(snapshot);
        }
        if waking_each && state.has_modules() {
            // The eBPF side need not wake anyone per record: this drain polls.
            probes.stop_waking_each();
            waking_each = false;
        }
        // The program's modules are read as soon as the agent started in it (all its
        // start-up libraries are mapped then; the agent waits for this), as the eBPF
        // path reads them at the first event: by the time held-back events are taken
        // a short program may be gone, or its binary replaced on disk.
        if !modules_read && mapping.attached() {
            state.ensure_modules();
            modules_read = true;
            mapping.modules_read();
        }
        match stop.try_recv() {
            Ok(exit) => break exit,
            Err(oneshot::error::TryRecvError::Closed) => break None,
            Err(oneshot::error::TryRecvError::Empty) => {}
        }
        if mapping.doorbell() == doorbell {
            mapping.wait_doorbell(doorbell, PASS_INTERVAL);
        }
        doorbell = mapping.doorbell();
        run_pass(&mut merger, &mut state, false, &mut ring, &probes)?;
        if last_flush.elapsed() >= FLUSH_INTERVAL {
            state.flush(probes.drops() + mapping.dropped(), false)?;
            last_flush = Instant::now();
        }
    };
    while let Ok(snapshot) = snapshots.try_recv() {
        state.add_modules(snapshot);
    }
    // A live target stops paying for the programs' work now, before the detach.
    probes.disable();
    // Everything published or committed belongs to the run: one more ordinary pass
    // (so the last eBPF events meet the agent events before them), then the rest.
    run_pass(&mut merger, &mut state, false, &mut ring, &probes)?;
    run_pass(&mut merger, &mut state, true, &mut ring, &probes)?;
    let dropped = probes.drops() + mapping.dropped();
    drop(ring);
    let mut summary = state.finish(dropped, exit);
    if let Ok(summary) = &mut summary {
        summary.notes.extend(notes(&mapping));
    }
    let handoff = super::detach::hand_off();
    drop(probes);
    drop(handoff);
    summary
}

/// What the in-process path did not see, in words.
fn notes(mapping: &InprocMapping) -> Vec<String> {
    let mut notes = Vec::new();
    if !mapping.attached() {
        notes.push("the in-process agent never started in the program: its pthread calls were not recorded (run with --probes ebpf)".to_string());
    }
    let forks = mapping.forks();
    if forks > 0 {
        notes.push(format!(
            "{forks} forked child process{} not followed",
            if forks == 1 { "" } else { "es" }
        ));
    }
    let unsequenced = mapping.unsequenced();
    if unsequenced > 0 {
        notes.push(format!("{unsequenced} events found the sequence table full: their order on their object is only as exact as their timestamps"));
    }
    notes
}
