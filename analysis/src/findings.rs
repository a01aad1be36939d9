//! Collecting candidates: deduplication of candidates that ask for the same order at
//! the code level, keeping the best-ranked instance, with memory bounded by the
//! program's structure (sites, objects, threads), not by the trace's length.

use rustc_hash::FxHashMap;

use crate::model::{EventId, FindingKind, Rank, RawFinding, RawOrdering, NO_OBJECT};

/// What makes two candidates "the same order": the kind, and the objects and call
/// sites of the events involved, role by role. Two occurrences of the same swap in a
/// loop, or by two worker threads running the same code, are one candidate; the
/// instance with the best rank (fewest threads, smallest change) is kept.
///
/// Packed into words (kind and up to four objects, then up to six sites) so the
/// recent-offers cache compares keys without a call to `memcmp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DedupKey([u64; 9]);

impl DedupKey {
    /// The key of a candidate involving `events` (in a fixed role order).
    pub fn new(kind: FindingKind, events: &[EventId]) -> DedupKey {
        let mut objects = [NO_OBJECT; 4];
        let mut words = [0u64; 9];
        let mut no = 0;
        for (i, e) in events.iter().enumerate() {
            if i < 6 {
                // An event without a site (a thread's start or exit) is told apart
                // by its kind.
                words[3 + i] = if e.site == 0 {
                    1 << 63 | e.kind as u64
                } else {
                    e.site
                };
            }
            // A discovered access is keyed by its instruction alone: the same shape
            // on the next heap object is the same candidate.
            if no < 4 && e.obj != NO_OBJECT && !e.point && !objects[..no].contains(&e.obj) {
                objects[no] = e.obj;
                no += 1;
            }
        }
        words[0] = kind as u64 | (objects[0] as u64) << 32;
        words[1] = objects[1] as u64 | (objects[2] as u64) << 32;
        words[2] = objects[3] as u64;
        DedupKey(words)
    }

    /// Equality without early exits (keys are compared on every offer).
    #[inline]
    fn same(&self, other: &DedupKey) -> bool {
        self.0
            .iter()
            .zip(&other.0)
            .fold(0, |diff, (a, b)| diff | (a ^ b))
            == 0
    }

    /// A cheap hash, for the recent-offers cache.
    #[inline]
    fn quick_hash(&self) -> usize {
        // Independent products (no chain through every word) keep it short; the
        // cache compares whole keys, so a partial hash only costs collisions.
        let [w0, _, _, s0, s1, s2, ..] = self.0;
        let h = w0.wrapping_mul(0x517c_c1b7_2722_0a95)
            ^ s0.wrapping_mul(0x9e37_79b9_7f4a_7c15)
            ^ s1.wrapping_mul(0xc2b2_ae3d_27d4_eb4f)
            ^ s2.wrapping_mul(0x1656_67b1_9e37_79f9);
        (h >> 40) as usize
    }
}

/// Entries of the recent-offers cache.
const RECENT: usize = 2048;

/// A candidate as the detectors produce it, borrowed: see [`RawFinding`].
#[derive(Clone, Copy)]
pub struct Candidate<'a> {
    /// What it is.
    pub kind: FindingKind,
    /// The events the report shows.
    pub events: &'a [EventId],
    /// The schedule: (before, after) pairs.
    pub orderings: &'a [(&'a [EventId], EventId)],
    /// A detail for the message.
    pub note: &'static str,
    /// For barging: the wait's call site.
    pub wait_site: u64,
}

/// The deduplicated candidates found so far.
#[derive(Default)]
pub struct FindingSet {
    index: FxHashMap<DedupKey, usize>,
    items: Vec<(Rank, RawFinding)>,
    /// Direct-mapped cache of keys offered lately with the rank kept for them then
    /// (kept ranks only improve), so a repeat that cannot win skips the map.
    recent: Vec<Option<(DedupKey, Rank)>>,
}

impl FindingSet {
    /// Offers a candidate given as slices: stored when new, or copied over the kept
    /// instance (reusing its allocations) when better ranked, so repeats cost a hash
    /// lookup and nothing else. Returns whether the set changed.
    pub fn offer(&mut self, key: DedupKey, rank: Rank, c: &Candidate<'_>) -> bool {
        let Candidate {
            kind,
            events,
            orderings,
            note,
            wait_site,
        } = *c;
        let slot = key.quick_hash() % RECENT;
        if let Some(Some((k, r))) = self.recent.get(slot) {
            if k.same(&key) && *r <= rank {
                return false;
            }
        }
        if self.recent.is_empty() {
            self.recent = vec![None; RECENT];
        }
        match self.index.get(&key) {
            Some(&i) if self.items[i].0 <= rank => {
                self.recent[slot] = Some((key, self.items[i].0));
                false
            }
            Some(&i) => {
                let (r, f) = &mut self.items[i];
                *r = rank;
                f.events.clear();
                f.events.extend_from_slice(events);
                f.orderings.resize_with(orderings.len(), || RawOrdering {
                    before: Vec::new(),
                    after: events[0],
                });
                for (o, (before, after)) in f.orderings.iter_mut().zip(orderings) {
                    o.before.clear();
                    o.before.extend_from_slice(before);
                    o.after = *after;
                }
                f.note = note;
                f.wait_site = wait_site;
                self.recent[slot] = Some((key, rank));
                true
            }
            None => {
                self.index.insert(key, self.items.len());
                let f = RawFinding {
                    kind,
                    events: events.to_vec(),
                    orderings: orderings
                        .iter()
                        .map(|(b, a)| RawOrdering {
                            before: b.to_vec(),
                            after: *a,
                        })
                        .collect(),
                    note,
                    wait_site,
                };
                self.items.push((rank, f));
                self.recent[slot] = Some((key, rank));
                true
            }
        }
    }

    /// Whether offering a candidate with this key and rank would change nothing
    /// because the instance kept for the key ranks at least as well — as far as the
    /// recent-offers cache knows (false when it does not know). Cheap: callers ask
    /// before building a candidate.
    #[inline]
    pub fn settled(&self, key: &DedupKey, rank: Rank) -> bool {
        let slot = key.quick_hash() % RECENT;
        matches!(self.recent.get(slot), Some(Some((k, r))) if k.same(key) && *r <= rank)
    }

    /// Offers a finished finding (rank and key computed from it).
    pub fn offer_finding(&mut self, finding: RawFinding) {
        let key = DedupKey::new(finding.kind, &finding.events);
        let rank = finding.rank();
        match self.index.get(&key) {
            Some(&i) if self.items[i].0 <= rank => {}
            Some(&i) => self.items[i] = (rank, finding),
            None => {
                self.index.insert(key, self.items.len());
                self.items.push((rank, finding));
            }
        }
    }

    /// Number of distinct candidates.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// All candidates, best first: by (v, t); among equal (v, t) harmful shapes
    /// (deadlock, lost wakeup, race, atomicity, barging), then sections after a
    /// release, then plain reorderings ([`FindingKind::tier`]);
    /// then by distance, kind and position in the trace. Candidates of different
    /// kinds or sites that ask for exactly the same orders (the same events, by
    /// thread, kind, object and occurrence) are one: the first in this order stays.
    pub fn into_sorted(self) -> Vec<(Rank, RawFinding)> {
        let mut items = self.items;
        items.sort_by(|a, b| {
            (a.0.v, a.0.t, a.1.kind.tier(), a.0.distance)
                .cmp(&(b.0.v, b.0.t, b.1.kind.tier(), b.0.distance))
                .then(a.1.kind.cmp(&b.1.kind))
                .then(first_index(&a.1).cmp(&first_index(&b.1)))
        });
        let mut asked = rustc_hash::FxHashSet::default();
        items.retain(|(_, f)| asked.insert(order_key(f)));
        items
    }
}

/// The orders a candidate asks for, independent of how it was found: each
/// ordering's events as (thread, kind, object, occurrence), sorted.
fn order_key(f: &RawFinding) -> Vec<Vec<(u32, u16, u32, u32)>> {
    let name = |e: &EventId| (e.thread, e.kind as u16, e.obj, e.occurrence);
    let mut key: Vec<Vec<(u32, u16, u32, u32)>> = f
        .orderings
        .iter()
        .map(|o| {
            let mut v: Vec<_> = o.before.iter().map(name).collect();
            v.sort_unstable();
            v.push(name(&o.after));
            v
        })
        .collect();
    key.sort_unstable();
    key
}

fn first_index(f: &RawFinding) -> u64 {
    f.events.iter().map(|e| e.index).min().unwrap_or(0)
}
