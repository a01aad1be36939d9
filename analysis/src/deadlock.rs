//! Lock-order deadlocks: the lock-order graph and its cycles.
//!
//! Each blocking acquisition of lock B while holding lock A adds an edge A → B,
//! remembered with one example per (thread, gate set, modes): the acquiring thread,
//! both acquisitions, the *gate* (the other locks held at the time), and the
//! thread's fork/join clock when it took A. A cycle is reported when its edges come
//! from distinct threads, their gates are pairwise disjoint (a common gate lock
//! serializes the orders), no edge was a trylock (those never block), every lock
//! in it is wanted in a mode that conflicts with how the next thread holds it
//! (read–read never blocks), and no edge's second acquisition is ordered before
//! another edge's first by thread creation, join or a barrier (such orders can never
//! overlap). Whether the run actually deadlocked does not matter: the orders alone
//! predict it (GoodLock, TSan's lock-order inversion, ExitBlock's lock chains).

use std::rc::Rc;

use rustc_hash::FxHashMap;

use crate::clock::VectorClock;
use crate::model::{EventId, FindingKind, Mode, ObjId, RawFinding, RawOrdering};

/// Longest cycle searched for.
pub const MAX_CYCLE: usize = 4;
/// Examples kept per edge.
const MAX_EXAMPLES: usize = 16;
/// Cycles examined at most (dense graphs have exponentially many).
const MAX_CYCLES_EXAMINED: usize = 100_000;

/// One way an edge was taken.
#[derive(Clone, Debug)]
pub struct EdgeExample {
    /// Acquiring thread.
    pub thread: u32,
    /// Acquisition of the held lock.
    pub from: EventId,
    /// Acquisition of the wanted lock.
    pub to: EventId,
    /// How the held lock was held.
    pub from_mode: Mode,
    /// How the wanted lock was requested.
    pub to_mode: Mode,
    /// Other locks held at the time.
    pub gate: Vec<ObjId>,
    /// Fork/join clock of the thread when it took the held lock.
    pub from_fj: VectorClock,
    /// The thread's own clock when it took the wanted lock.
    pub to_epoch: u32,
}

/// A lock currently held by a thread.
#[derive(Clone, Debug)]
pub struct HeldLock {
    /// The lock.
    pub obj: ObjId,
    /// How it is held.
    pub mode: Mode,
    /// Its (outermost) acquisition.
    pub acq: EventId,
    /// Recursion depth.
    pub count: u32,
    /// The thread's fork/join clock when it took the lock (shared, copy-on-write:
    /// it changes only at thread creation, join and barriers).
    pub fj: Option<Rc<VectorClock>>,
}

impl Default for HeldLock {
    fn default() -> HeldLock {
        HeldLock {
            obj: crate::model::NO_OBJECT,
            mode: Mode::Exclusive,
            acq: EventId {
                thread: 0,
                kind: ordo_trace::Kind::MutexLock,
                obj: crate::model::NO_OBJECT,
                occurrence: 0,
                site: 0,
                ts: 0,
                index: 0,
            },
            count: 0,
            fj: None,
        }
    }
}

/// The lock-order graph.
#[derive(Default)]
pub struct LockGraph {
    edges: FxHashMap<(ObjId, ObjId), Vec<EdgeExample>>,
}

impl LockGraph {
    /// Records the edges of a blocking acquisition `to` (mode `to_mode`, the
    /// thread's own clock then `to_epoch`) by a thread holding `held`.
    pub fn acquired(&mut self, held: &[HeldLock], to: EventId, to_mode: Mode, to_epoch: u32) {
        for (i, h) in held.iter().enumerate() {
            if h.obj == to.obj {
                continue;
            }
            let examples = self.edges.entry((h.obj, to.obj)).or_default();
            if examples.len() >= MAX_EXAMPLES {
                continue;
            }
            let gate = || {
                held.iter()
                    .enumerate()
                    .filter(move |&(j, g)| j != i && g.obj != to.obj)
                    .map(|(_, g)| g.obj)
            };
            let known = examples.iter().any(|x| {
                x.thread == to.thread
                    && x.from_mode == h.mode
                    && x.to_mode == to_mode
                    && x.gate.len() == gate().count()
                    && gate().all(|g| x.gate.contains(&g))
            });
            if !known {
                examples.push(EdgeExample {
                    thread: to.thread,
                    from: h.acq,
                    to,
                    from_mode: h.mode,
                    to_mode,
                    gate: gate().collect(),
                    from_fj: h.fj.as_deref().cloned().unwrap_or_default(),
                    to_epoch,
                });
            }
        }
    }

    /// Number of distinct edges (lock pairs).
    pub fn edge_count(&self) -> usize {
        self.edges.len()
    }

    /// The deadlock findings: one per cycle of locks that has a feasible choice of
    /// examples (see the module docs).
    pub fn cycles(&self) -> Vec<RawFinding> {
        let mut adjacency: FxHashMap<ObjId, Vec<ObjId>> = FxHashMap::default();
        for &(a, b) in self.edges.keys() {
            adjacency.entry(a).or_default().push(b);
        }
        for next in adjacency.values_mut() {
            next.sort_unstable();
        }
        let mut starts: Vec<ObjId> = adjacency.keys().copied().collect();
        starts.sort_unstable();
        let mut out = Vec::new();
        let mut examined = 0usize;
        for &start in &starts {
            let mut path = vec![start];
            self.extend(&adjacency, &mut path, &mut out, &mut examined);
            if examined >= MAX_CYCLES_EXAMINED {
                break;
            }
        }
        out
    }

    /// Depth-first search for simple cycles whose smallest lock is `path[0]`.
    fn extend(
        &self,
        adjacency: &FxHashMap<ObjId, Vec<ObjId>>,
        path: &mut Vec<ObjId>,
        out: &mut Vec<RawFinding>,
        examined: &mut usize,
    ) {
        let last = *path.last().unwrap();
        let Some(next) = adjacency.get(&last) else {
            return;
        };
        for &n in next {
            if *examined >= MAX_CYCLES_EXAMINED {
                return;
            }
            if n == path[0] && path.len() >= 2 {
                *examined += 1;
                if let Some(f) = self.feasible(path) {
                    out.push(f);
                }
            } else if n > path[0] && !path.contains(&n) && path.len() < MAX_CYCLE {
                path.push(n);
                self.extend(adjacency, path, out, examined);
                path.pop();
            }
        }
    }

    /// Picks one example per edge of the cycle `locks[0] → locks[1] → … → locks[0]`
    /// satisfying every condition, and builds the finding.
    fn feasible(&self, locks: &[ObjId]) -> Option<RawFinding> {
        let n = locks.len();
        let lists: Vec<&Vec<EdgeExample>> = (0..n)
            .map(|i| self.edges.get(&(locks[i], locks[(i + 1) % n])))
            .collect::<Option<_>>()?;
        let mut chosen: Vec<&EdgeExample> = Vec::with_capacity(n);
        if !choose(&lists, &mut chosen) {
            return None;
        }
        // Every thread first takes its held lock; only then may any thread ask for
        // its second: the schedule that makes the cycle close.
        let firsts: Vec<EventId> = chosen.iter().map(|x| x.from).collect();
        let orderings = chosen
            .iter()
            .map(|x| RawOrdering {
                before: firsts.clone(),
                after: x.to,
            })
            .collect();
        let mut events = Vec::with_capacity(2 * n);
        for x in &chosen {
            events.push(x.from);
            events.push(x.to);
        }
        Some(RawFinding {
            kind: FindingKind::Deadlock,
            events,
            orderings,
            note: "",
            wait_site: 0,
        })
    }
}

fn choose<'a>(lists: &[&'a Vec<EdgeExample>], chosen: &mut Vec<&'a EdgeExample>) -> bool {
    let i = chosen.len();
    if i == lists.len() {
        // The last edge's wanted lock is the first edge's held lock.
        return chosen[i - 1].to_mode.conflicts(chosen[0].from_mode);
    }
    // Events no schedule can name (glibc-internal calls) cannot be enforced.
    for x in lists[i]
        .iter()
        .filter(|x| x.from.occurrence > 0 && x.to.occurrence > 0)
    {
        if compatible(chosen, x) {
            chosen.push(x);
            if choose(lists, chosen) {
                return true;
            }
            chosen.pop();
        }
    }
    false
}

fn compatible(chosen: &[&EdgeExample], x: &EdgeExample) -> bool {
    if let Some(prev) = chosen.last() {
        // prev wants the lock x holds.
        if !prev.to_mode.conflicts(x.from_mode) {
            return false;
        }
    }
    chosen.iter().all(|c| {
        c.thread != x.thread
            && !c.gate.iter().any(|g| x.gate.contains(g))
            && !finished_before(c, x)
            && !finished_before(x, c)
    })
}

/// Whether `a` took its second lock before `b` took its first, by fork/join order.
fn finished_before(a: &EdgeExample, b: &EdgeExample) -> bool {
    a.to_epoch <= b.from_fj.get(a.thread)
}
