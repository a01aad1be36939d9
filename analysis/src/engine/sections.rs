//! Shapes over a lock's recent critical sections: reorders (`reorder`),
//! atomicity violations (`atomicity`), chains (`chain`) and multi-splits
//! (`multi_split`); barging is found here as well, and built by `condvar.rs`.
//!
//! Most bugs around one lock are a critical section that ran in another place
//! among the sections on that lock: before its neighbour, between the check and
//! the act of another thread, in the other order of a producer/consumer hand-off,
//! or several at once between a check and its act (an ABA). The driver keeps the
//! last `WINDOW` sections per lock, each with bits telling which of those before it
//! its thread did not know when it took the lock, so each shape here is proposed
//! only in an order the recorded happens-before leaves open (Roşu–Sen causality),
//! with no further clock work.

use super::condvar::Wake;
use super::{quick_rank, CsRec, Engine, SPLITTER_KEYED, WINDOW};
use crate::findings::DedupKey;
use crate::model::{EventId, FindingKind};

impl Engine<'_> {
    /// Candidates from the last three critical sections on a lock (`p2`, `p1`, `cur`
    /// in acquisition order): reorder, atomicity and barging.
    ///
    /// Atomicity needs two sections of one thread at different call sites (a loop
    /// taking the lock at one site is not check-then-act), neither of them the
    /// reacquire inside a cond wait (a section split by a wait is the barging case).
    /// `p1` and `cur` come with what woke them, for reacquires inside cond waits.
    pub(super) fn critical_section_candidates(
        &mut self,
        p2: Option<CsRec>,
        (p1, p1_woken): (CsRec, Option<Wake>),
        (cur, cur_woken): (CsRec, Option<Wake>),
    ) {
        let (a, b) = (p1.acq.thread, cur.acq.thread);
        if a != b && cur.swappable_with_prev {
            match p1_woken {
                // `b` can take the mutex between the signal and the waiter's reacquire.
                // Only a third thread competes for what the signal announced: the
                // signaller taking the mutex again is a plain reorder.
                Some(wake) if wake.signal.thread != a && wake.signal.thread != b => {
                    // What the waiter acts on must be what `b` left: a section of
                    // another thread that came between the signal and the reacquire
                    // (the signaller refilling the queue) goes after the reacquire.
                    let refill = p2.filter(|p2| {
                        p2.acq.index > wake.signal.index
                            && p2.acq.thread != a
                            && p2.acq.thread != b
                            && !p2.in_wait
                            && p2.acq.occurrence != 0
                    });
                    let barger = (cur.acq, cur_woken.filter(|_| cur.in_wait));
                    self.offer_barging(wake, barger, p1.acq, refill.map(|p2| p2.acq), "");
                }
                _ => {
                    // The commonest candidate, and nearly always a repeat: ask the
                    // candidate cache before building the schedule.
                    let pair = [p1.acq, cur.acq];
                    let key = DedupKey::new(FindingKind::Reorder, &pair);
                    if pair.iter().all(|e| e.occurrence != 0)
                        && self.found.settled(&key, quick_rank(&pair))
                    {
                        self.stats.candidates_offered += 1;
                    } else {
                        self.offer(FindingKind::Reorder, &pair, &[(&[cur.acq], p1.acq)], "");
                    }
                }
            }
            if let Some(p2) = p2 {
                if p2.acq.thread == a
                    && p2.acq.site != p1.acq.site
                    && !p2.in_wait
                    && !p1.in_wait
                    && p2.mode.conflicts(cur.mode)
                {
                    // `b`'s critical section fits between `a`'s two.
                    self.offer(
                        FindingKind::Atomicity,
                        &[p2.acq, p1.acq, cur.acq],
                        &[(&[p2.acq], cur.acq), (&[cur.acq], p1.acq)],
                        "",
                    );
                }
            }
        }
        if a == b {
            if let Some(p2) = p2 {
                if p2.acq.thread != a
                    && p1.swappable_with_prev
                    && p1.acq.site != cur.acq.site
                    && !p1.in_wait
                    && !cur.in_wait
                {
                    // `p2`'s thread could have come after `a`'s first section.
                    self.offer(
                        FindingKind::Atomicity,
                        &[p1.acq, cur.acq, p2.acq],
                        &[(&[p1.acq], p2.acq), (&[p2.acq], cur.acq)],
                        "",
                    );
                }
            }
        }
        if let Some(wake) = cur_woken {
            if a != b
                && a != wake.signal.thread
                && p1.acq.index > wake.signal.index
                && p1.mode.conflicts(cur.mode)
            {
                let barger = (p1.acq, p1_woken.filter(|_| p1.in_wait));
                self.offer_barging(wake, barger, cur.acq, None, "happened in this run");
            }
        }
    }

    /// Candidates that look past the neighbouring section: `p` are the sections
    /// before `cur` on its lock, newest first (`p[0]` is the neighbour).
    ///
    /// - *Non-adjacent reorder*: `cur` moved before `p[j]`, past sections of other
    ///   threads it knows nothing of (before joining the lock).
    /// - *Non-adjacent atomicity*: another thread's two sections X, Y (different
    ///   sites) with `cur` placed between them although it was not adjacent to Y;
    ///   or `cur`'s thread's two sections with another's earlier section placed
    ///   between them.
    /// - *Chain*: sections a1, a2 of one thread then b1, b2 of another interleaved
    ///   as a1 b1 a2 b2 or b1 a1 b2 a2 (three orderings).
    ///
    /// The neighbour-only cases are left to [`Engine::critical_section_candidates`].
    /// Returns whether any candidate was new or better ranked.
    #[inline(never)]
    pub(super) fn window_candidates(&mut self, p: [Option<CsRec>; WINDOW], cur: CsRec) -> bool {
        let b = cur.acq.thread;
        let mut found = false;
        // Reorder past several sections of other threads.
        for (j, pj) in p.iter().enumerate().skip(1) {
            let all = (1u8 << (j + 1)) - 1;
            let Some(pj) = *pj else { break };
            if cur.unknown & all != all {
                break;
            }
            found |= self.offer(
                FindingKind::Reorder,
                &[pj.acq, cur.acq],
                &[(&[cur.acq], pj.acq)],
                "",
            );
        }
        // Another thread's X, Y with `cur` between them.
        for j in 0..WINDOW - 1 {
            let Some(y) = p[j] else { break };
            if y.acq.thread == b {
                break;
            }
            if cur.unknown & (1 << j) == 0 || y.in_wait || cur.in_wait {
                continue;
            }
            let a = y.acq.thread;
            let Some((k, x)) = p[j + 1..]
                .iter()
                .enumerate()
                .find_map(|(k, x)| x.filter(|x| x.acq.thread == a).map(|x| (j + 1 + k, x)))
            else {
                continue;
            };
            if (j, k) == (0, 1) || x.acq.site == y.acq.site || x.in_wait {
                continue;
            }
            found |= self.offer_at(
                FindingKind::Atomicity,
                &[x.acq, y.acq, cur.acq],
                &[(&[x.acq], cur.acq), (&[cur.acq], y.acq)],
                "",
                SPLITTER_KEYED,
            );
        }
        // `cur`'s thread's Y, cur with an earlier section of another thread between.
        if let Some(j) = p.iter().position(|x| x.is_some_and(|x| x.acq.thread == b)) {
            let y = p[j].unwrap();
            if y.acq.site != cur.acq.site && !y.in_wait && !cur.in_wait {
                for (k, x) in p.iter().enumerate().skip(j + 1) {
                    let Some(x) = *x else { break };
                    if (j, k) == (0, 1)
                        || x.acq.thread == b
                        || y.unknown & (1 << (k - j - 1)) == 0
                        || !x.mode.conflicts(cur.mode)
                    {
                        continue;
                    }
                    found |= self.offer_at(
                        FindingKind::Atomicity,
                        &[y.acq, cur.acq, x.acq],
                        &[(&[y.acq], x.acq), (&[x.acq], cur.acq)],
                        "",
                        SPLITTER_KEYED,
                    );
                }
            }
        }
        found |= self.multi_split_candidates(&p, cur);
        // Chains: a1 a2 b1 b2 recorded (two threads handing off, as a producer and
        // a consumer do; a loop of two may be unrolled, so the pairs' sites may
        // differ).
        if let [Some(b1), Some(a2), Some(a1), _] = p {
            let a = a1.acq.thread;
            if b1.acq.thread == b && a2.acq.thread == a && a != b {
                if b1.unknown & 1 != 0 {
                    found |= self.offer(
                        FindingKind::Chain,
                        &[a1.acq, b1.acq, a2.acq, cur.acq],
                        &[
                            (&[a1.acq], b1.acq),
                            (&[b1.acq], a2.acq),
                            (&[a2.acq], cur.acq),
                        ],
                        "",
                    );
                }
                if b1.unknown & 3 == 3 {
                    found |= self.offer(
                        FindingKind::Chain,
                        &[b1.acq, a1.acq, cur.acq, a2.acq],
                        &[
                            (&[b1.acq], a1.acq),
                            (&[a1.acq], cur.acq),
                            (&[cur.acq], a2.acq),
                        ],
                        "",
                    );
                }
            }
        }
        found
    }

    /// *Multi-split*: a thread's two neighbouring sections X, Y (different sites)
    /// followed by a run of 2–3 sections of other threads ending with `cur`: the
    /// run moved between X and Y, in every order that keeps each thread's own
    /// order and swaps only sections that know nothing of each other — an ABA needs
    /// "take, take another, put back" between a check and its act. `p` as in
    /// [`Engine::window_candidates`]. Returns whether any candidate was new.
    ///
    /// A thread's later section in the run learned what came before it through
    /// its own earlier one and the lock, which is exactly what the move changes:
    /// whether it could come before a section is asked of the thread's first
    /// section in the run that comes after that one.
    #[inline(never)]
    fn multi_split_candidates(&mut self, p: &[Option<CsRec>; WINDOW], cur: CsRec) -> bool {
        let mut found = false;
        for m in 2..WINDOW {
            let (Some(x), Some(y)) = (p[m], p[m - 1]) else {
                break;
            };
            let a = y.acq.thread;
            if x.acq.thread != a || x.acq.site == y.acq.site || x.in_wait || y.in_wait {
                continue;
            }
            // The run in recorded order: p[m-2], …, p[0], cur.
            let mut run = [cur; WINDOW - 1];
            let mut ok = true;
            for (i, slot) in run.iter_mut().take(m).enumerate() {
                match if i + 1 == m { Some(cur) } else { p[m - 2 - i] } {
                    Some(r) if r.acq.thread != a && !r.in_wait => *slot = r,
                    _ => ok = false,
                }
            }
            let run = &run[..m];
            if !ok || !(0..m).all(|j| could_precede(run, -1, j)) {
                continue;
            }
            found |= self.offer_multi_splits(x, y, run);
        }
        // The mirror: a run of sections before X (`p[m]`, …, `p[1]`) moved between
        // X (`p[0]`) and Y (`cur`). X knew none of them before it took the lock.
        if let Some(x) = p[0] {
            let a = cur.acq.thread;
            if x.acq.thread == a && x.acq.site != cur.acq.site && !x.in_wait && !cur.in_wait {
                for m in 2..WINDOW {
                    let mut run = [x; WINDOW - 1];
                    let mut ok = true;
                    for (i, slot) in run.iter_mut().take(m).enumerate() {
                        match p[m - i] {
                            Some(r)
                                if r.acq.thread != a
                                    && !r.in_wait
                                    && x.unknown & (1 << (m - i - 1)) != 0 =>
                            {
                                *slot = r
                            }
                            _ => ok = false,
                        }
                    }
                    if !ok {
                        break;
                    }
                    found |= self.offer_multi_splits(x, cur, &run[..m]);
                }
            }
        }
        found
    }

    /// Offers `run` (sections of other threads, in recorded order, contiguous on
    /// the lock) between `x` and `y`, in each order that keeps each thread's own
    /// order and swaps only sections that could take the lock first.
    fn offer_multi_splits(&mut self, x: CsRec, y: CsRec, run: &[CsRec]) -> bool {
        let m = run.len();
        let mut found = false;
        // Orders of the run: permutations as index lists (m ≤ 3).
        const ORDERS: [&[usize]; 8] = [
            &[0, 1],
            &[1, 0],
            &[0, 1, 2],
            &[0, 2, 1],
            &[1, 0, 2],
            &[1, 2, 0],
            &[2, 0, 1],
            &[2, 1, 0],
        ];
        for order in ORDERS.iter().filter(|o| o.len() == m) {
            // A swapped pair (i before j in the run, j first here) must be of
            // two threads, the later not knowing the earlier.
            let feasible = (0..m).all(|u| {
                (u + 1..m).all(|v| {
                    let (j, i) = (order[u], order[v]);
                    j < i
                        || (run[i].acq.thread != run[j].acq.thread
                            && could_precede(run, i as isize, j))
                })
            });
            if !feasible {
                continue;
            }
            // X, the run in its new order, Y; and the events in role order: X, Y,
            // then the run.
            let mut ordered = [x.acq; WINDOW + 1];
            let mut events = [x.acq; WINDOW + 1];
            events[1] = y.acq;
            for (k, &i) in order.iter().enumerate() {
                ordered[1 + k] = run[i].acq;
                events[2 + k] = run[i].acq;
            }
            ordered[m + 1] = y.acq;
            let (ordered, events) = (&ordered[..m + 2], &events[..m + 2]);
            // Most looks repeat a known candidate: ask the cache before building.
            let key = DedupKey::new(FindingKind::MultiSplit, events);
            if self.found.settled(&key, quick_rank(events)) {
                self.stats.candidates_offered += 1;
                continue;
            }
            let mut orderings: [(&[EventId], EventId); WINDOW] = [(&ordered[..1], y.acq); WINDOW];
            for (k, o) in orderings.iter_mut().take(m + 1).enumerate() {
                *o = (&ordered[k..k + 1], ordered[k + 1]);
            }
            found |= self.offer(FindingKind::MultiSplit, events, &orderings[..m + 1], "");
        }
        found
    }
}

/// Whether `run[j]` — or rather its thread's first section in the run after
/// position `i` (a thread's later section learned what came before through its own
/// earlier one and the lock, which is what a move changes) — could take the lock
/// before what stood at `i` in the recording (`-1`: the section just before the run).
fn could_precede(run: &[CsRec], i: isize, j: usize) -> bool {
    let g = (((i + 1) as usize)..=j)
        .find(|&k| run[k].acq.thread == run[j].acq.thread)
        .unwrap_or(j);
    run[g].unknown & (1 << (g as isize - i - 1)) != 0
}
