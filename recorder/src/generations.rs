//! Splices the mutex generations the agent numbers inside the mutexes into each
//! address's one sequence, so the trace's `seq` of an object counts up by one per
//! event as on the eBPF path.
//!
//! The agent numbers a plain mutex's events in the mutex's own `__list` word
//! (`ordo_probe_common::inproc::MUTEX_GEN_SHIFT`): a *generation* starts whenever it
//! finds that word zero (a new, zeroed or reused mutex) and takes one place `p` of
//! the address's table sequence; its events carry `(p, n)`. Here each generation's
//! place is expanded into its events: an event's number is its table number (or its
//! generation's place plus `n`) plus, for every generation at an earlier place of
//! the same address, that generation's events less the one place it took.
//!
//! That needs a generation's event count to be final by the time any event after it
//! is numbered. It is, one drain pass later: the objects that live at one address
//! one after the other do so in turn, every event of a generation is published
//! before its effect can be seen by another thread (an unlock is recorded before the
//! real call, a lock before the thread goes on), so whatever follows a generation was
//! published after all of it — and an event read in drain pass `k` is numbered only
//! once pass `k + 1` was read (`Merger`'s release rule).

use ordo_probe_common::inproc::mutex_generation;
use ordo_probe_common::RawEvent;
use ordo_trace::event::Kind;
use rustc_hash::FxHashMap;

/// Generations kept per address before the oldest are folded into one shift.
const KEPT: usize = 64;

/// One generation of a mutex's own counter.
#[derive(Clone, Copy, Debug)]
struct Generation {
    /// Its place in the address's table sequence.
    place: u64,
    /// Its events seen so far (its largest `n` plus one).
    events: u64,
}

/// The generations of one address.
#[derive(Default, Debug)]
struct Address {
    /// By place.
    generations: Vec<Generation>,
    /// Generations folded away: those at places below `folded_below`, which
    /// together add `folded_shift` to every later number.
    folded_below: u64,
    folded_shift: u64,
}

/// The mutex generations seen so far, per address (see the module doc).
#[derive(Default, Debug)]
pub(crate) struct MutexGenerations {
    by_addr: FxHashMap<u64, Address>,
    /// Events numbered after the generations before them had been folded away (so
    /// their numbers may be off): a generation's events came more than [`KEPT`]
    /// generations late, which the publication rule above rules out.
    late: u64,
}

impl MutexGenerations {
    /// Takes note of an agent event as it is read.
    #[inline]
    pub(crate) fn note(&mut self, e: &RawEvent) {
        let Some((place, n)) = mutex_generation(e.seq) else {
            return;
        };
        let a = self.by_addr.entry(e.addr).or_default();
        let gens = &mut a.generations;
        // Usually the newest generation, at the end.
        match gens.iter().rposition(|g| g.place <= place) {
            Some(i) if gens[i].place == place => {
                gens[i].events = gens[i].events.max(n + 1);
            }
            at => {
                let i = at.map_or(0, |i| i + 1);
                gens.insert(
                    i,
                    Generation {
                        place,
                        events: n + 1,
                    },
                );
                if gens.len() > KEPT {
                    let fold = gens.len() - KEPT / 2;
                    let folded = gens.drain(..fold);
                    for g in folded {
                        a.folded_shift += g.events - 1;
                        a.folded_below = g.place + 1;
                    }
                }
            }
        }
    }

    /// Gives an agent event its number in its address's sequence.
    #[inline]
    pub(crate) fn renumber(&mut self, e: &mut RawEvent) {
        if self.by_addr.is_empty() {
            return;
        }
        let Some(a) = self.by_addr.get(&e.addr) else {
            return;
        };
        if !Kind::from_code(e.kind).is_some_and(Kind::is_sequenced) {
            return;
        }
        let (place, n) = mutex_generation(e.seq).unwrap_or((e.seq, 0));
        if place < a.folded_below {
            self.late += 1;
        }
        let shift: u64 = a
            .generations
            .iter()
            .take_while(|g| g.place < place)
            .map(|g| g.events - 1)
            .sum();
        e.seq = place + n + a.folded_shift + shift;
    }

    /// Events whose number may be off (see [`MutexGenerations::late`]'s field).
    pub(crate) fn late(&self) -> u64 {
        self.late
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ordo_probe_common::inproc::MUTEX_GEN_SHIFT;
    use ordo_probe_common::kind;

    fn event(kind: u16, addr: u64, seq: u64) -> RawEvent {
        RawEvent {
            kind,
            addr,
            seq,
            ..RawEvent::default()
        }
    }

    fn gen(place: u64, n: u64) -> u64 {
        (place + 1) << MUTEX_GEN_SHIFT | n
    }

    /// The numbers `events` get when all of them are noted first.
    fn numbers(events: &[RawEvent]) -> Vec<u64> {
        let mut g = MutexGenerations::default();
        for e in events {
            g.note(e);
        }
        events
            .iter()
            .map(|e| {
                let mut e = *e;
                g.renumber(&mut e);
                e.seq
            })
            .collect()
    }

    #[test]
    fn generations_are_spliced_into_the_table_sequence() {
        let (m, c) = (0x1000, 0x2000);
        let events = [
            // A condvar's two events at 0x1000 (table 0, 1), then a mutex there
            // (place 2, four events), then a condvar again (table 3), then a
            // second mutex generation (place 4, two events).
            event(kind::COND_SIGNAL, m, 0),
            event(kind::COND_SIGNAL, m, 1),
            event(kind::MUTEX_LOCK, m, gen(2, 0)),
            event(kind::MUTEX_UNLOCK, m, gen(2, 1)),
            event(kind::MUTEX_LOCK, m, gen(2, 2)),
            event(kind::MUTEX_UNLOCK, m, gen(2, 3)),
            event(kind::COND_BROADCAST, m, 3),
            event(kind::MUTEX_LOCK, m, gen(4, 0)),
            event(kind::MUTEX_UNLOCK, m, gen(4, 1)),
            // Another address keeps its numbers; an unsequenced kind too.
            event(kind::SEM_POST, c, 7),
            event(kind::MUTEX_LOCK_FAILED, m, 0),
        ];
        assert_eq!(numbers(&events), [0, 1, 2, 3, 4, 5, 6, 7, 8, 7, 0]);
    }

    #[test]
    fn the_order_events_are_noted_in_does_not_matter() {
        let m = 0x1000;
        let mut events = vec![
            event(kind::MUTEX_LOCK, m, gen(0, 0)),
            event(kind::MUTEX_UNLOCK, m, gen(0, 1)),
            event(kind::MUTEX_LOCK, m, gen(1, 0)),
            event(kind::MUTEX_UNLOCK, m, gen(1, 1)),
            event(kind::MUTEX_LOCK, m, gen(1, 2)),
        ];
        events.reverse();
        assert_eq!(numbers(&events), [4, 3, 2, 1, 0]);
    }

    #[test]
    fn old_generations_fold_into_one_shift() {
        let m = 0x1000;
        let mut events = Vec::new();
        // 200 generations of three events each, one after the other.
        for p in 0..200 {
            for n in 0..3 {
                events.push(event(kind::MUTEX_LOCK, m, gen(p, n)));
            }
        }
        let mut g = MutexGenerations::default();
        let mut got = Vec::new();
        for e in &events {
            g.note(e);
            let mut e = *e;
            g.renumber(&mut e);
            got.push(e.seq);
        }
        assert_eq!(got, (0..600).collect::<Vec<u64>>());
        assert_eq!(g.late(), 0);
        assert!(g.by_addr[&m].generations.len() <= KEPT);
    }
}
