//! Lock-order deadlocks: the lock-order graph and its cycles.
//!
//! Each blocking acquisition of lock B while holding lock A is an edge A → B,
//! remembered with examples: the acquiring thread, both acquisitions, the *gate*
//! (the other locks held at the time), and the thread's fork/join clock when it
//! took A. A cycle is reported when its edges come from distinct threads, their
//! gates are pairwise disjoint (a common gate lock serializes the orders), no edge
//! was a trylock (those never block), every lock in it is wanted in a mode that
//! conflicts with how the next thread holds it (read–read never blocks), and no
//! edge's second acquisition is ordered before another edge's first by thread
//! creation, join or a barrier (such orders can never overlap). Whether the run
//! actually deadlocked does not matter: the orders alone predict it (GoodLock, TSan's
//! lock-order inversion, ExitBlock's lock chains).
//!
//! **Scale.** A thread holding n locks makes n edges with each acquisition, and a
//! table that locks all its n stripes makes n²/2 edges and n-long gates: storing
//! edges, or enumerating paths, is quadratic or worse (a 512-stripe resize took
//! minutes, 5 000 held locks gigabytes). So edges are never stored one by one. The
//! graph is held as a *context trie*: a node is a held-lock stack (a lock, its mode,
//! and the node of the stack it was taken under), interned, so an acquisition costs
//! one hash lookup and an example is stored once per (context, thread). Edge A → B
//! exists when a node for B has an ancestor for A; its gate is the node's other
//! ancestors. At the end, the strongly connected components of the lock graph are
//! found in linear time on an auxiliary graph over locks and trie nodes (no pair is
//! materialized), and cycles are searched only inside components with two or more
//! locks — a correct program's component is a single lock, so its search is free.
//! The work inside components is bounded by [`MAX_SEARCH_STEPS`] and counted.

use std::rc::Rc;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::clock::VectorClock;
use crate::model::{EventId, FindingKind, Mode, ObjId, RawFinding, RawOrdering};

/// Longest cycle searched for.
pub const MAX_CYCLE: usize = 4;
/// Examples kept per context (one per thread) and per lock pair when searching.
const MAX_EXAMPLES: usize = 16;
/// Cycles examined at most (dense graphs have exponentially many).
const MAX_CYCLES_EXAMINED: usize = 100_000;
/// Contexts (trie nodes) kept at most; acquisitions in newer contexts are counted
/// as dropped.
pub const MAX_CONTEXTS: usize = 1 << 20;
/// Steps (trie nodes visited, paths extended) the cycle search inside strongly
/// connected components may take; beyond it the search stops and says so.
pub const MAX_SEARCH_STEPS: u64 = 50_000_000;

/// No trie node.
pub const NO_NODE: u32 = u32::MAX;

/// One acquisition of a lock that is (or was) held while an example was recorded:
/// the chain of a thread's held acquisitions, shared between the examples that need
/// it, so an example costs one pointer however many locks were held.
pub struct Instance {
    acq: EventId,
    fj: Rc<VectorClock>,
    parent: Option<Rc<Instance>>,
}

/// A lock currently held by a thread.
#[derive(Clone)]
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
    /// The context trie node of the held stack up to and including this lock.
    pub node: u32,
    /// This acquisition as an [`Instance`], made when an example first needs it.
    inst: Option<Rc<Instance>>,
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
                nth: 0,
                site: 0,
                ts: 0,
                index: 0,
                after_point: false,
                point: false,
            },
            count: 0,
            fj: None,
            node: NO_NODE,
            inst: None,
        }
    }
}

/// Appends a freshly taken lock to `held`, writing each field straight into the
/// vector: a record built on the stack and then moved in makes the move's wide
/// loads wait for the narrow stores that built it (a store-forwarding stall that
/// cost a fifth of the acquire path).
#[inline(always)]
pub fn push_held(
    held: &mut Vec<HeldLock>,
    obj: ObjId,
    mode: Mode,
    acq: &EventId,
    fj: Rc<VectorClock>,
    node: u32,
) {
    held.reserve(1);
    let len = held.len();
    // SAFETY: after `reserve`, slot `len` is allocated; every field is written
    // (with `write`, dropping nothing) before the length covers it.
    unsafe {
        let p = held.as_mut_ptr().add(len);
        std::ptr::addr_of_mut!((*p).obj).write(obj);
        std::ptr::addr_of_mut!((*p).mode).write(mode);
        std::ptr::addr_of_mut!((*p).acq).write(*acq);
        std::ptr::addr_of_mut!((*p).count).write(1);
        std::ptr::addr_of_mut!((*p).fj).write(Some(fj));
        std::ptr::addr_of_mut!((*p).node).write(node);
        std::ptr::addr_of_mut!((*p).inst).write(None);
        held.set_len(len + 1);
    }
}

/// One blocking acquisition in a context, by one thread (the first one seen).
struct Example {
    thread: u32,
    slot: u32,
    acq: EventId,
    /// The thread's own clock then.
    epoch: u32,
    /// The acquisition of the lock on top of the held stack then (the parent
    /// context's lock), whose chain gives every held acquisition.
    held: Rc<Instance>,
}

/// A held-lock stack: `obj` taken in `mode` while holding the stack `parent`.
struct Node {
    parent: u32,
    obj: ObjId,
    mode: Mode,
    depth: u32,
    examples: Vec<Example>,
}

/// One way an edge was taken, as the cycle check needs it.
#[derive(Clone, Debug)]
struct EdgeExample {
    thread: u32,
    slot: u32,
    from: EventId,
    to: EventId,
    from_mode: Mode,
    to_mode: Mode,
    /// Other locks held at the time, sorted.
    gate: Vec<ObjId>,
    from_fj: Rc<VectorClock>,
    to_epoch: u32,
}

/// Counters of the lock-order graph.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GraphStats {
    /// Distinct held-lock contexts (trie nodes).
    pub contexts: u64,
    /// Acquisitions whose context was not kept ([`MAX_CONTEXTS`] reached).
    pub contexts_dropped: u64,
    /// Locks in strongly connected components of two or more locks.
    pub locks_in_cycles: u64,
    /// Steps the cycle search took inside those components.
    pub search_steps: u64,
    /// Whether the search stopped at [`MAX_SEARCH_STEPS`] or the cycle limit.
    pub search_truncated: bool,
}

/// The lock-order graph, as a context trie (see the module docs).
#[derive(Default)]
pub struct LockGraph {
    nodes: Vec<Node>,
    children: FxHashMap<(u32, ObjId, u8), u32>,
    stats: GraphStats,
}

fn mode_code(mode: Mode) -> u8 {
    match mode {
        Mode::Exclusive => 0,
        Mode::Read => 1,
        Mode::Write => 2,
    }
}

impl LockGraph {
    /// The context of taking `obj` in `mode` on top of the stack `parent`
    /// ([`NO_NODE`] for an outermost acquisition, or when contexts ran out).
    #[inline]
    pub fn context(&mut self, parent: u32, obj: ObjId, mode: Mode) -> u32 {
        let key = (parent, obj, mode_code(mode));
        if let Some(&n) = self.children.get(&key) {
            return n;
        }
        if self.nodes.len() >= MAX_CONTEXTS {
            self.stats.contexts_dropped += 1;
            return NO_NODE;
        }
        let depth = if parent == NO_NODE {
            0
        } else {
            self.nodes[parent as usize].depth + 1
        };
        let n = self.nodes.len() as u32;
        self.nodes.push(Node {
            parent,
            obj,
            mode,
            depth,
            examples: Vec::new(),
        });
        self.children.insert(key, n);
        n
    }

    /// Records a blocking acquisition `to` (context `node`, the thread's clock slot
    /// `slot` and own clock `to_epoch`) by a thread holding `held` (`node`'s parent
    /// context is `held`'s top).
    pub fn acquired(
        &mut self,
        held: &mut [HeldLock],
        node: u32,
        slot: u32,
        to: EventId,
        to_epoch: u32,
    ) {
        if node == NO_NODE || held.is_empty() {
            return;
        }
        let examples = &self.nodes[node as usize].examples;
        if examples.len() >= MAX_EXAMPLES || examples.iter().any(|x| x.thread == to.thread) {
            return;
        }
        let held_inst = instance_of(held);
        self.nodes[node as usize].examples.push(Example {
            thread: to.thread,
            slot,
            acq: to,
            epoch: to_epoch,
            held: held_inst,
        });
    }

    /// Counters so far.
    pub fn stats(&self) -> GraphStats {
        GraphStats {
            contexts: self.nodes.len() as u64,
            ..self.stats
        }
    }

    /// The deadlock findings: one per cycle of locks that has a feasible choice of
    /// examples (see the module docs).
    pub fn cycles(&mut self) -> Vec<RawFinding> {
        let components = self.components();
        if components.is_empty() {
            return Vec::new();
        }
        let mut children: FxHashMap<u32, Vec<u32>> = FxHashMap::default();
        let mut nodes_of_lock: FxHashMap<ObjId, Vec<u32>> = FxHashMap::default();
        for (i, node) in self.nodes.iter().enumerate() {
            if node.parent != NO_NODE {
                children.entry(node.parent).or_default().push(i as u32);
            }
            nodes_of_lock.entry(node.obj).or_default().push(i as u32);
        }
        let mut search = Search {
            graph: self,
            children,
            nodes_of_lock,
            steps: 0,
            examined: 0,
            truncated: false,
            out: Vec::new(),
        };
        for locks in components {
            search.component(&locks);
        }
        let (steps, truncated, out) = (search.steps, search.truncated, search.out);
        self.stats.search_steps += steps;
        self.stats.search_truncated |= truncated;
        out
    }

    /// The strongly connected components of the lock graph with two or more locks,
    /// each sorted, found with Tarjan's algorithm on an auxiliary graph linear in
    /// the trie: vertices are locks L(x) and, per node n, A(n) ("some ancestor's
    /// lock reaches here") and D(n) ("lock(n) reaches its descendants"); edges
    /// L(lock n) → D(n), D(n) → A(c) and A(n) → A(c) for each child c, and
    /// A(n) → L(lock n) when n has a blocking example. L(x) reaches L(y) through
    /// trie vertices alone exactly when x → y is an edge.
    fn components(&mut self) -> Vec<Vec<ObjId>> {
        let n = self.nodes.len();
        if n == 0 {
            return Vec::new();
        }
        // Dense lock numbers, and CSR lists: nodes per lock, children per node.
        let mut lock_index: FxHashMap<ObjId, u32> = FxHashMap::default();
        let mut locks: Vec<ObjId> = Vec::new();
        for node in &self.nodes {
            lock_index.entry(node.obj).or_insert_with(|| {
                locks.push(node.obj);
                locks.len() as u32 - 1
            });
        }
        let l = locks.len();
        let csr = |keys: &mut dyn Iterator<Item = Option<u32>>, buckets: usize| {
            let keys: Vec<Option<u32>> = keys.collect();
            let mut start = vec![0u32; buckets + 1];
            for k in keys.iter().flatten() {
                start[*k as usize + 1] += 1;
            }
            for i in 0..buckets {
                start[i + 1] += start[i];
            }
            let mut fill = start.clone();
            let mut items = vec![0u32; start[buckets] as usize];
            for (i, k) in keys.iter().enumerate() {
                if let Some(k) = k {
                    items[fill[*k as usize] as usize] = i as u32;
                    fill[*k as usize] += 1;
                }
            }
            (start, items)
        };
        let (lock_start, lock_nodes) =
            csr(&mut self.nodes.iter().map(|x| Some(lock_index[&x.obj])), l);
        let (child_start, child_nodes) = csr(
            &mut self
                .nodes
                .iter()
                .map(|x| (x.parent != NO_NODE).then_some(x.parent)),
            n,
        );
        let vertices = l + 2 * n;
        // Successor `k` of vertex `v`, or None past the last.
        let successor = |v: usize, k: usize| -> Option<usize> {
            if v < l {
                let (s, e) = (lock_start[v] as usize, lock_start[v + 1] as usize);
                return (s + k < e).then(|| l + n + lock_nodes[s + k] as usize);
            }
            let (node, arrive) = if v < l + n {
                (v - l, true)
            } else {
                (v - l - n, false)
            };
            let (s, e) = (child_start[node] as usize, child_start[node + 1] as usize);
            if s + k < e {
                return Some(l + child_nodes[s + k] as usize);
            }
            if arrive && s + k == e && !self.nodes[node].examples.is_empty() {
                return Some(lock_index[&self.nodes[node].obj] as usize);
            }
            None
        };
        // Iterative Tarjan.
        const UNSEEN: u32 = u32::MAX;
        let mut index = vec![UNSEEN; vertices];
        let mut low = vec![0u32; vertices];
        let mut on_stack = vec![false; vertices];
        let mut stack: Vec<u32> = Vec::new();
        let mut calls: Vec<(u32, u32)> = Vec::new();
        let mut next_index = 0u32;
        let mut out = Vec::new();
        let mut steps = 0u64;
        for root in 0..l {
            if index[root] != UNSEEN {
                continue;
            }
            calls.push((root as u32, 0));
            index[root] = next_index;
            low[root] = next_index;
            next_index += 1;
            stack.push(root as u32);
            on_stack[root] = true;
            while let Some(&mut (v, ref mut k)) = calls.last_mut() {
                let v = v as usize;
                steps += 1;
                match successor(v, *k as usize) {
                    Some(w) => {
                        *k += 1;
                        if index[w] == UNSEEN {
                            index[w] = next_index;
                            low[w] = next_index;
                            next_index += 1;
                            stack.push(w as u32);
                            on_stack[w] = true;
                            calls.push((w as u32, 0));
                        } else if on_stack[w] {
                            low[v] = low[v].min(index[w]);
                        }
                    }
                    None => {
                        calls.pop();
                        if let Some(&(parent, _)) = calls.last() {
                            let p = parent as usize;
                            low[p] = low[p].min(low[v]);
                        }
                        if low[v] == index[v] {
                            let mut component = Vec::new();
                            loop {
                                let w = stack.pop().unwrap() as usize;
                                on_stack[w] = false;
                                if w < l {
                                    component.push(locks[w]);
                                }
                                if w == v {
                                    break;
                                }
                            }
                            if component.len() >= 2 {
                                component.sort_unstable();
                                out.push(component);
                            }
                        }
                    }
                }
            }
        }
        self.stats.search_steps += steps;
        self.stats.locks_in_cycles = out.iter().map(|c| c.len() as u64).sum();
        out
    }
}

/// The instance chain of `held`'s top, making the missing instances (bottom-up;
/// each links to the one below it).
fn instance_of(held: &mut [HeldLock]) -> Rc<Instance> {
    let first_missing = held
        .iter()
        .rposition(|h| h.inst.is_some())
        .map_or(0, |i| i + 1);
    for i in first_missing..held.len() {
        let parent = if i == 0 {
            None
        } else {
            held[i - 1].inst.clone()
        };
        held[i].inst = Some(Rc::new(Instance {
            acq: held[i].acq,
            fj: held[i].fj.clone().unwrap_or_default(),
            parent,
        }));
    }
    held.last()
        .and_then(|h| h.inst.clone())
        .expect("held is not empty")
}

/// Forgets the instances of `held[from..]`: a lock below them was released, so
/// their chains no longer describe what is held.
pub fn invalidate_instances(held: &mut [HeldLock], from: usize) {
    for h in &mut held[from..] {
        h.inst = None;
    }
}

/// An edge's thread when its examples come from several.
const MULTI: u32 = u32::MAX;

/// A lock's successors in a component, as (thread, lock) sorted, with the bounds of
/// each thread's group.
struct Adjacent {
    edges: Vec<(u32, ObjId)>,
    groups: Vec<(usize, usize)>,
}

impl Adjacent {
    fn new(edges: Vec<(u32, ObjId)>) -> Adjacent {
        let mut groups = Vec::new();
        let mut start = 0;
        for i in 1..=edges.len() {
            if i == edges.len() || edges[i].0 != edges[start].0 {
                groups.push((start, i));
                start = i;
            }
        }
        Adjacent { edges, groups }
    }
}

/// The cycle search inside strongly connected components.
struct Search<'g> {
    graph: &'g LockGraph,
    children: FxHashMap<u32, Vec<u32>>,
    nodes_of_lock: FxHashMap<ObjId, Vec<u32>>,
    steps: u64,
    examined: usize,
    truncated: bool,
    out: Vec<RawFinding>,
}

impl Search<'_> {
    fn spend(&mut self) -> bool {
        self.steps += 1;
        if self.steps > MAX_SEARCH_STEPS || self.examined >= MAX_CYCLES_EXAMINED {
            self.truncated = true;
            return false;
        }
        true
    }

    /// Builds the component's explicit adjacency and searches its cycles, shortest
    /// first (all 2-cycles before any 3-cycle), so a search cut short by the budget
    /// still has every shorter cycle.
    ///
    /// Each edge carries the one thread all its examples come from (or [`MULTI`]);
    /// a cycle's edges must come from distinct threads, so a path never takes two
    /// edges of the same single thread, and a lock's edges are grouped by thread so
    /// a whole group is skipped at once. This is what keeps one thread's n²/2
    /// edges from being walked as paths.
    fn component(&mut self, locks: &[ObjId]) {
        let graph = self.graph;
        let members: FxHashSet<ObjId> = locks.iter().copied().collect();
        let mut adjacency: FxHashMap<ObjId, Adjacent> = FxHashMap::default();
        let mut pending: Vec<u32> = Vec::new();
        let mut found: Vec<(ObjId, u32)> = Vec::new();
        for &x in locks {
            found.clear();
            for a in self.nodes_of_lock[&x].clone() {
                pending.clear();
                pending.extend(self.children.get(&a).into_iter().flatten());
                while let Some(d) = pending.pop() {
                    if !self.spend() {
                        return;
                    }
                    let dn = &graph.nodes[d as usize];
                    if !dn.examples.is_empty() && members.contains(&dn.obj) {
                        let t = dn.examples[0].thread;
                        let sig = if dn.examples.iter().all(|e| e.thread == t) {
                            t
                        } else {
                            MULTI
                        };
                        found.push((dn.obj, sig));
                    }
                    pending.extend(self.children.get(&d).into_iter().flatten());
                }
            }
            // One entry per successor (a successor reached with two threads is MULTI),
            // then grouped by thread.
            found.sort_unstable();
            let mut edges: Vec<(u32, ObjId)> = Vec::new();
            for &(y, sig) in found.iter() {
                match edges.last_mut() {
                    Some((s, last)) if *last == y => {
                        if *s != sig {
                            *s = MULTI;
                        }
                    }
                    _ => edges.push((sig, y)),
                }
            }
            edges.sort_unstable();
            adjacency.insert(x, Adjacent::new(edges));
        }
        for k in 2..=MAX_CYCLE {
            for &start in locks {
                let mut path = vec![(start, MULTI)];
                self.extend(&adjacency, &mut path, k);
                if self.truncated {
                    return;
                }
            }
        }
    }

    /// Depth-first search for simple cycles of exactly `k` locks whose smallest lock
    /// is `path[0]`; each path entry is a lock and the thread of the edge into it.
    fn extend(
        &mut self,
        adjacency: &FxHashMap<ObjId, Adjacent>,
        path: &mut Vec<(ObjId, u32)>,
        k: usize,
    ) {
        let (last, _) = *path.last().unwrap();
        let Some(adjacent) = adjacency.get(&last) else {
            return;
        };
        let used =
            |path: &[(ObjId, u32)], sig: u32| sig != MULTI && path.iter().any(|&(_, s)| s == sig);
        for group in &adjacent.groups {
            if !self.spend() {
                return;
            }
            let edges = &adjacent.edges[group.0..group.1];
            let sig = edges[0].0;
            if used(path, sig) {
                continue;
            }
            if path.len() == k {
                // Only the closing edge back to the start is of interest.
                if edges.binary_search(&(sig, path[0].0)).is_ok() {
                    self.examined += 1;
                    let locks: Vec<ObjId> = path.iter().map(|&(x, _)| x).collect();
                    if let Some(f) = self.feasible(&locks) {
                        self.out.push(f);
                    }
                }
                continue;
            }
            // Successors larger than the start, not on the path yet.
            let from = edges.partition_point(|&(_, y)| y <= path[0].0);
            for &(_, n) in &edges[from..] {
                if !self.spend() {
                    return;
                }
                if path.iter().any(|&(x, _)| x == n) {
                    continue;
                }
                path.push((n, sig));
                self.extend(adjacency, path, k);
                path.pop();
                if self.truncated {
                    return;
                }
            }
        }
    }

    /// The (ancestor, node) pairs giving edge `x → y`: nodes of `y` with examples,
    /// and their ancestor whose lock is `x`.
    fn evidence(&mut self, x: ObjId, y: ObjId) -> Vec<(u32, u32)> {
        let nodes = &self.graph.nodes;
        let mut out = Vec::new();
        for &d in &self.nodes_of_lock[&y] {
            if nodes[d as usize].examples.is_empty() {
                continue;
            }
            let mut p = nodes[d as usize].parent;
            while p != NO_NODE {
                self.steps += 1;
                if nodes[p as usize].obj == x {
                    out.push((p, d));
                    break;
                }
                p = nodes[p as usize].parent;
            }
            if out.len() >= MAX_EXAMPLES {
                break;
            }
        }
        out
    }

    /// The examples of edge `from → to`, built from the trie.
    fn examples(&mut self, pairs: &[(u32, u32)]) -> Vec<EdgeExample> {
        let nodes = &self.graph.nodes;
        let mut out = Vec::new();
        for &(a, d) in pairs {
            let (an, dn) = (&nodes[a as usize], &nodes[d as usize]);
            let mut gate = Vec::with_capacity(dn.depth as usize);
            let mut p = dn.parent;
            while p != NO_NODE {
                self.steps += 1;
                if p != a {
                    gate.push(nodes[p as usize].obj);
                }
                p = nodes[p as usize].parent;
            }
            gate.sort_unstable();
            for x in &dn.examples {
                // The held acquisition at `a`'s depth: walk down from the top.
                let mut inst = &x.held;
                for _ in an.depth + 1..dn.depth {
                    self.steps += 1;
                    inst = inst
                        .parent
                        .as_ref()
                        .expect("chains are as deep as their node");
                }
                out.push(EdgeExample {
                    thread: x.thread,
                    slot: x.slot,
                    from: inst.acq,
                    to: x.acq,
                    from_mode: an.mode,
                    to_mode: dn.mode,
                    gate: gate.clone(),
                    from_fj: inst.fj.clone(),
                    to_epoch: x.epoch,
                });
            }
        }
        out
    }

    /// Picks one example per edge of the cycle `locks[0] → locks[1] → … → locks[0]`
    /// satisfying every condition, and builds the finding.
    fn feasible(&mut self, locks: &[ObjId]) -> Option<RawFinding> {
        let n = locks.len();
        let mut lists: Vec<Vec<EdgeExample>> = Vec::with_capacity(n);
        for i in 0..n {
            let pairs = self.evidence(locks[i], locks[(i + 1) % n]);
            lists.push(self.examples(&pairs));
        }
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

fn choose<'a>(lists: &'a [Vec<EdgeExample>], chosen: &mut Vec<&'a EdgeExample>) -> bool {
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
            && disjoint(&c.gate, &x.gate)
            && !finished_before(c, x)
            && !finished_before(x, c)
    })
}

/// Whether two sorted lists share no element.
fn disjoint(a: &[ObjId], b: &[ObjId]) -> bool {
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => return false,
        }
    }
    true
}

/// Whether `a` took its second lock before `b` took its first, by fork/join order.
fn finished_before(a: &EdgeExample, b: &EdgeExample) -> bool {
    a.to_epoch <= b.from_fj.get(a.slot)
}
