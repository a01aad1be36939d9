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

/// Sort key of a pending candidate: the first recording's findings before those
/// of later runs (a stream of small new findings from each replay must not starve
/// a larger one of the first recording, e.g. a `*` schedule whose rank counts
/// every thread), then the rank, harmful shapes before plain reorderings among
/// equal ranks, then arrival. Built-on candidates that complete a schedule whose
/// replay left an ordering unmet go first (the replay showed what was missing: the
/// program took another path before the ordering could happen), then harmful
/// shapes before the others (a section after a release is proposed on top of
/// every replay, and deepest-first alone followed such a chain step by step for
/// half a hunt), then deepest first (most orderings): the search follows one
/// promising order step by step.
type QueueKey = (bool, bool, u8, std::cmp::Reverse<usize>, Rank, u8, u64);

/// The replayed schedule a run's findings are built on.
#[derive(Clone, Copy, Debug)]
pub struct Base<'a> {
    /// The schedule the run replayed.
    pub schedule: &'a Schedule,
    /// The replay ended with some of its orderings never met (`not_exercised`).
    pub unmet: bool,
}

/// Most orderings a candidate built on a replayed schedule may have.
pub const MAX_COMPOSED_ORDERINGS: usize = 16;

/// `base`'s orderings followed by those of `add` it lacks, or `None` when `add`
/// brings nothing new, reverses an ordering of `base` (an event of one's `before`
/// is the other's `after`, both ways), closes a cycle with them
/// ([`Schedule::is_cyclic`]) or the result is too long.
fn compose(base: &Schedule, add: &Schedule) -> Option<Schedule> {
    let mut out = base.clone();
    for o in &add.orderings {
        let reverses = base
            .orderings
            .iter()
            .any(|b| b.before.contains(&o.after) && o.before.contains(&b.after));
        if reverses {
            return None;
        }
        if !out
            .orderings
            .iter()
            .any(|b| b.before == o.before && b.after == o.after)
        {
            out.orderings.push(o.clone());
        }
    }
    // A finding that contradicts the base through a chain of orderings (not only
    // by reversing one) would be replayed only to be found infeasible.
    (out.orderings.len() > base.orderings.len()
        && out.orderings.len() <= MAX_COMPOSED_ORDERINGS
        && !out.is_cyclic())
    .then_some(out)
}

/// Pending candidates, best first, each order at most once over the whole hunt.
/// Findings of a candidate's replay that passed are queued twice: as they are,
/// and built on that replay's schedule ([`CandidateQueue::extend_on`]); the two
/// kinds are served in turns.
#[derive(Default)]
pub struct CandidateQueue {
    seen: HashSet<String>,
    /// Sort key → candidate, kept sorted on insertion: `[0]` the analyzer's
    /// findings as they are, `[1]` those built on a replayed schedule.
    pending: [Vec<(QueueKey, Candidate)>; 2],
    /// Serve a built-on candidate next (when one is pending): the two kinds take
    /// turns, so a search that deepens a promising order one step per run does not
    /// starve the fresh findings (or the other way round).
    deeper_next: bool,
    arrivals: u64,
    /// Candidates served so far (for sharding: the n-th one served has index n).
    served: u64,
    /// Orders queued a second time ([`CandidateQueue::retry`]).
    retried: HashSet<String>,
}

impl CandidateQueue {
    /// Adds the findings of one analyzed run that carry a schedule not seen before;
    /// returns how many were new.
    pub fn extend(&mut self, findings: &[Finding], from_run: u32) -> usize {
        self.extend_on(findings, from_run, None)
    }

    /// Like [`CandidateQueue::extend`], for a run that replayed the schedule `base`
    /// and followed it without failing: each finding is also queued on top of
    /// `base` (its orderings added to the base's), so orders deeper than one
    /// finding — a chain of hand-offs over three threads, several sections between
    /// two — are reached one step per run. A finding that reverses one of the
    /// base's orderings, or would make the schedule longer than
    /// [`MAX_COMPOSED_ORDERINGS`], is queued alone only.
    pub fn extend_on(&mut self, findings: &[Finding], from_run: u32, base: Option<Base>) -> usize {
        let mut added = 0;
        for f in findings {
            let Ok(schedule) = Schedule::parse(&f.schedule) else {
                continue;
            };
            if let Some((composed, b)) =
                base.and_then(|b| Some((compose(b.schedule, &schedule)?, b)))
            {
                let mut finding = f.clone();
                finding.message = format!("{} (on top of run {from_run}'s schedule)", f.message);
                finding.schedule = composed.to_string();
                added += self.push(finding, &composed, from_run, Some(b.unmet));
            }
            added += self.push(f.clone(), &schedule, from_run, None);
        }
        added
    }

    /// Queues one candidate unless its order was seen; returns 1 when queued.
    /// `built_on` is `None` for a finding as it is, else whether the base it was
    /// built on left orderings unmet.
    fn push(
        &mut self,
        finding: Finding,
        schedule: &Schedule,
        from_run: u32,
        built_on: Option<bool>,
    ) -> usize {
        let composed = built_on.is_some();
        if schedule.is_empty() || !self.seen.insert(order_key(schedule)) {
            return 0;
        }
        // Among equal ranks, harmful shapes (deadlock, lost wakeup, atomicity) go
        // first, then sections after a release, as in the analyzer's own order.
        let class = finding.kind.tier();
        let depth = if composed {
            schedule.orderings.len()
        } else {
            0
        };
        let key = (
            from_run != 0,
            built_on != Some(true),
            if composed { class } else { 0 },
            std::cmp::Reverse(depth),
            finding.rank,
            class,
            self.arrivals,
        );
        self.arrivals += 1;
        let list = &mut self.pending[usize::from(composed)];
        let at = list.partition_point(|(k, _)| *k <= key);
        list.insert(at, (key, Candidate { finding, from_run }));
        1
    }

    /// Queues again, once, a harmful candidate whose replay followed its schedule
    /// and passed: its orderings may leave the window open to the timing of what
    /// they do not order (a race's two accesses ordered, the use after them free to
    /// come first), so one pass does not refute it. Only the first recording's
    /// candidates (a bounded number); each comes after that recording's other
    /// candidates. Returns whether it was queued.
    pub fn retry(&mut self, candidate: Candidate) -> bool {
        let Ok(schedule) = Schedule::parse(&candidate.finding.schedule) else {
            return false;
        };
        if !candidate.finding.kind.is_harmful()
            || candidate.from_run != 0
            || schedule.is_empty()
            || !self.retried.insert(order_key(&schedule))
        {
            return false;
        }
        let key = (
            true,
            true,
            0,
            std::cmp::Reverse(0),
            candidate.finding.rank,
            candidate.finding.kind.tier(),
            self.arrivals,
        );
        self.arrivals += 1;
        let list = &mut self.pending[0];
        let at = list.partition_point(|(k, _)| *k <= key);
        list.insert(at, (key, candidate));
        true
    }

    /// The list the next candidate comes from.
    fn next_list(&self) -> usize {
        match (self.pending[0].is_empty(), self.pending[1].is_empty()) {
            (false, false) => usize::from(self.deeper_next),
            (true, false) => 1,
            _ => 0,
        }
    }

    /// The best pending candidate with its serving index, or `None` when none is left.
    pub fn pop(&mut self) -> Option<(u64, Candidate)> {
        if self.is_empty() {
            return None;
        }
        let list = self.next_list();
        self.deeper_next = list == 0;
        let (_, c) = self.pending[list].remove(0);
        let index = self.served;
        self.served += 1;
        Some((index, c))
    }

    /// Candidates not tried yet.
    pub fn len(&self) -> usize {
        self.pending[0].len() + self.pending[1].len()
    }

    /// Whether no candidate is pending.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The best pending candidate's kind and rank, for progress displays.
    pub fn best(&self) -> Option<&Candidate> {
        self.pending[self.next_list()].first().map(|(_, c)| c)
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
            events: Vec::new(),
            steps: Vec::new(),
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
    fn a_harmful_candidate_that_passed_is_tried_once_more_after_the_first_recordings() {
        let mut q = CandidateQueue::default();
        let race = finding(FindingKind::Race, 1, "1:read(x)#1 -> 2:write(x)#1\n");
        let other = finding(FindingKind::Reorder, 2, AB);
        q.extend(&[race.clone(), other.clone()], 0);
        let (_, first) = q.pop().unwrap();
        assert_eq!(first.finding.kind, FindingKind::Race);
        assert!(q.retry(first.clone()));
        // Once only, and never a plain reordering.
        assert!(!q.retry(first));
        assert!(!q.retry(Candidate {
            finding: other,
            from_run: 0
        }));
        let order: Vec<FindingKind> = std::iter::from_fn(|| q.pop())
            .map(|(_, c)| c.finding.kind)
            .collect();
        assert_eq!(order, vec![FindingKind::Reorder, FindingKind::Race]);
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

    #[test]
    fn findings_of_a_passing_replay_are_also_tried_on_top_of_its_schedule() {
        let mut q = CandidateQueue::default();
        let base = Schedule::parse("1:mutex_lock(m)#1 -> 2:mutex_lock(m)#1\n").unwrap();
        let deeper = "3:mutex_lock(m)#1 -> 1:mutex_lock(m)#2\n";
        let reverse = "2:mutex_lock(m)#1 -> 1:mutex_lock(m)#1\n";
        assert_eq!(
            q.extend_on(
                &[
                    finding(FindingKind::Reorder, 1, deeper),
                    finding(FindingKind::Reorder, 1, reverse)
                ],
                1,
                Some(Base {
                    schedule: &base,
                    unmet: false
                })
            ),
            // `deeper` alone and on the base; `reverse` contradicts the base: alone.
            3
        );
        let schedules: Vec<String> = std::iter::from_fn(|| q.pop())
            .map(|(_, c)| c.finding.schedule)
            .collect();
        assert_eq!(schedules.len(), 3);
        assert!(schedules.contains(
            &"1:mutex_lock(m)#1 -> 2:mutex_lock(m)#1\n3:mutex_lock(m)#1 -> 1:mutex_lock(m)#2\n"
                .to_string()
        ));
        assert!(schedules.contains(&deeper.to_string()));
        assert!(schedules.contains(&reverse.to_string()));
    }

    #[test]
    fn later_runs_do_not_starve_the_first_recordings_findings() {
        let mut q = CandidateQueue::default();
        let c = |n: u32| format!("1:mutex_lock(m)#{n} -> 2:mutex_lock(m)#1\n");
        // A `*`-like finding of the first recording ranks worse (v = 3) …
        q.extend(&[finding(FindingKind::FirstOfMany, 3, &c(1))], 0);
        // … than every finding replays keep proposing.
        for run in 1..5 {
            q.extend(&[finding(FindingKind::Reorder, 1, &c(run + 1))], run);
        }
        let (_, first) = q.pop().unwrap();
        assert_eq!(first.finding.kind, FindingKind::FirstOfMany);
    }

    #[test]
    fn built_on_and_fresh_candidates_take_turns() {
        let mut q = CandidateQueue::default();
        let c = |n: u32| format!("1:mutex_lock(m)#{n} -> 2:mutex_lock(m)#1\n");
        q.extend(
            &[
                finding(FindingKind::Reorder, 1, &c(1)),
                finding(FindingKind::Reorder, 1, &c(2)),
            ],
            0,
        );
        let base = Schedule::parse("3:mutex_lock(m)#1 -> 2:mutex_lock(m)#2\n").unwrap();
        q.extend_on(
            &[finding(FindingKind::Reorder, 1, &c(3))],
            1,
            Some(Base {
                schedule: &base,
                unmet: false,
            }),
        );
        let lengths: Vec<usize> = std::iter::from_fn(|| q.pop())
            .map(|(_, c)| c.finding.schedule.lines().count())
            .collect();
        // fresh, built on (two orderings), fresh, then the rest.
        assert_eq!(&lengths[..3], &[1, 2, 1]);
    }

    #[test]
    fn completing_a_schedule_whose_orderings_went_unmet_comes_before_deepening_one_that_passed() {
        let mut q = CandidateQueue::default();
        // A passing replay's deep schedule …
        let passed = Schedule::parse(
            "1:mutex_unlock(m)#2 -> 2:mutex_lock(m)#1\n2:mutex_unlock(m)#1 -> 1:mutex_lock(m)#3\n",
        )
        .unwrap();
        q.extend_on(
            &[finding(
                FindingKind::Reorder,
                1,
                "3:mutex_lock(m)#1 -> 1:mutex_lock(m)#4\n",
            )],
            1,
            Some(Base {
                schedule: &passed,
                unmet: false,
            }),
        );
        // … and a later one whose ordering never happened (thread 2 took another path).
        let unmet = Schedule::parse("1:rwlock_rdlock(l)#1 -> 2:rwlock_wrlock(l)#1\n").unwrap();
        q.extend_on(
            &[finding(
                FindingKind::Reorder,
                1,
                "2:rwlock_rdlock(l)#1 -> 1:rwlock_wrlock(l)#1\n",
            )],
            2,
            Some(Base {
                schedule: &unmet,
                unmet: true,
            }),
        );
        let built_on: Vec<String> = std::iter::from_fn(|| q.pop())
            .map(|(_, c)| c.finding.schedule)
            .filter(|s| s.lines().count() > 1)
            .collect();
        assert_eq!(
            built_on[0],
            "1:rwlock_rdlock(l)#1 -> 2:rwlock_wrlock(l)#1\n2:rwlock_rdlock(l)#1 -> 1:rwlock_wrlock(l)#1\n"
        );
        assert_eq!(built_on.len(), 2);
    }
}
