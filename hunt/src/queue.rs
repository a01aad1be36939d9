//! The candidates a hunt still has to try: every finding of every analyzed run,
//! deduplicated by the order it asks for, served best rank first.
//!
//! Two candidates ask for the same order when their schedules have the same
//! orderings, whatever their text order, comments or the run they came from: a
//! replay's recording usually proposes again what the first recording proposed.

use std::collections::{BTreeSet, HashSet};

use ordo_analysis::{Finding, Rank};
use ordo_schedule::Schedule;

/// One candidate schedule to replay.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// The finding that proposed it (its `schedule` is the schedule text).
    pub finding: Finding,
    /// The run whose recording proposed it (0: the first recording).
    pub from_run: u32,
}

impl Candidate {
    /// Its rank: the analyzer's (v, t, distance).
    pub fn rank(&self) -> Rank {
        self.finding.rank
    }
}

/// The identity of an order: its orderings, printed and sorted.
pub fn order_key(schedule: &Schedule) -> String {
    let lines: BTreeSet<String> = schedule.orderings.iter().map(|o| o.to_string()).collect();
    lines.into_iter().collect::<Vec<_>>().join("\n")
}

/// Pending candidates, best first, each order at most once over the whole hunt.
#[derive(Default)]
pub struct CandidateQueue {
    seen: HashSet<String>,
    /// (rank, harmful-first class, arrival) → candidate, kept sorted on insertion.
    pending: Vec<((Rank, u8, u64), Candidate)>,
    arrivals: u64,
    /// Candidates served so far (for sharding: the n-th one served has index n).
    served: u64,
}

impl CandidateQueue {
    /// Adds the findings of one analyzed run that carry a schedule not seen before;
    /// returns how many were new.
    pub fn extend(&mut self, findings: &[Finding], from_run: u32) -> usize {
        let mut added = 0;
        for f in findings {
            let Ok(schedule) = Schedule::parse(&f.schedule) else {
                continue;
            };
            if schedule.is_empty() || !self.seen.insert(order_key(&schedule)) {
                continue;
            }
            // Among equal ranks, harmful shapes (deadlock, lost wakeup, atomicity)
            // go first, then sections after a release, as in the analyzer's order.
            let class = f.kind.tier();
            let key = (f.rank, class, self.arrivals);
            self.arrivals += 1;
            let at = self.pending.partition_point(|(k, _)| *k <= key);
            self.pending.insert(
                at,
                (
                    key,
                    Candidate {
                        finding: f.clone(),
                        from_run,
                    },
                ),
            );
            added += 1;
        }
        added
    }

    /// The best pending candidate with its serving index, or `None` when none is left.
    pub fn pop(&mut self) -> Option<(u64, Candidate)> {
        if self.pending.is_empty() {
            return None;
        }
        let (_, c) = self.pending.remove(0);
        let index = self.served;
        self.served += 1;
        Some((index, c))
    }

    /// Candidates not tried yet.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Whether no candidate is pending.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// The best pending candidate's kind and rank, for progress displays.
    pub fn best(&self) -> Option<&Candidate> {
        self.pending.first().map(|(_, c)| c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ordo_analysis::FindingKind;

    fn finding(kind: FindingKind, v: u32, schedule: &str) -> Finding {
        Finding {
            kind,
            threads: vec!["1".into(), "2".into()],
            objects: Vec::new(),
            sites: Vec::new(),
            schedule: schedule.to_string(),
            rank: Rank {
                v,
                t: 2,
                distance: 1,
            },
            message: String::new(),
            details: Vec::new(),
            possibly_affected_by_drops: false,
            mark: None,
        }
    }

    const AB: &str =
        "1:mutex_lock(a)#1 -> 2:mutex_lock(a)#1\n2:mutex_lock(b)#1 -> 1:mutex_lock(b)#1\n";
    const BA: &str = "# the same orderings, the other way round\n2:mutex_lock(b)#1 -> 1:mutex_lock(b)#1\n1:mutex_lock(a)#1 -> 2:mutex_lock(a)#1\n";

    #[test]
    fn the_same_order_is_queued_once_over_the_whole_hunt() {
        let mut q = CandidateQueue::default();
        assert_eq!(q.extend(&[finding(FindingKind::Reorder, 1, AB)], 0), 1);
        assert_eq!(q.extend(&[finding(FindingKind::Atomicity, 1, BA)], 3), 0);
        q.pop().unwrap();
        // Tried already: a later run proposing it again adds nothing.
        assert_eq!(q.extend(&[finding(FindingKind::Reorder, 1, AB)], 4), 0);
        assert!(q.is_empty());
    }

    #[test]
    fn candidates_come_best_rank_first_and_harmful_shapes_first_among_equals() {
        let mut q = CandidateQueue::default();
        let c = |n: u32| format!("1:mutex_lock(m)#{n} -> 2:mutex_lock(m)#1\n");
        q.extend(
            &[
                finding(FindingKind::Reorder, 2, &c(1)),
                finding(FindingKind::Reorder, 1, &c(2)),
                finding(FindingKind::Deadlock, 1, &c(3)),
                finding(FindingKind::Reorder, 1, ""),
            ],
            0,
        );
        let order: Vec<(u64, FindingKind, u32)> = std::iter::from_fn(|| q.pop())
            .map(|(i, c)| (i, c.finding.kind, c.finding.rank.v))
            .collect();
        assert_eq!(
            order,
            vec![
                (0, FindingKind::Deadlock, 1),
                (1, FindingKind::Reorder, 1),
                (2, FindingKind::Reorder, 2)
            ]
        );
    }
}
