//! Whether a schedule contradicts itself: a cycle through its orderings and the
//! orders every run has inside one thread. A replay of such a schedule can only end
//! infeasible (every thread held at a gate), so the hunt does not spend a run on it.
//!
//! The orders inside a thread used are the ones that hold in every run, whatever
//! the program: a thread's `KIND(OBJ)#k` comes before its `#k+1`, an event before
//! the point right after it (`after(…)`), that point before the next occurrence,
//! its `thread_start` before all its other events, and its k-th `mutex_lock` of a
//! mutex before its k-th `mutex_unlock` of it (unlocks never outnumber locks; the
//! release and reacquire inside a cond wait are not named). Nothing else is
//! assumed, so a schedule called cyclic is infeasible in every run.

use std::collections::HashMap;

use ordo_trace::Kind;

use crate::{EventRef, Schedule, ThreadRef};

impl Schedule {
    /// Whether the orderings, with the orders every thread keeps, form a cycle
    /// (see the module doc). `*` successors are left out.
    pub fn is_cyclic(&self) -> bool {
        let events: Vec<&EventRef> = self
            .events()
            .into_iter()
            .filter(|e| matches!(e.thread, ThreadRef::Id(_)))
            .collect();
        let index: HashMap<&EventRef, usize> =
            events.iter().enumerate().map(|(i, e)| (*e, i)).collect();
        let mut next: Vec<Vec<usize>> = vec![Vec::new(); events.len()];
        for o in &self.orderings {
            let Some(&to) = index.get(&o.after) else {
                continue;
            };
            for b in &o.before {
                if let Some(&from) = index.get(b) {
                    next[from].push(to);
                }
            }
        }
        for (i, a) in events.iter().enumerate() {
            for (j, b) in events.iter().enumerate() {
                if i != j && precedes_in_thread(a, b) {
                    next[i].push(j);
                }
            }
        }
        // Depth-first search for a back edge: 0 unseen, 1 on the path, 2 done.
        let mut state = vec![0u8; events.len()];
        for start in 0..events.len() {
            if state[start] != 0 {
                continue;
            }
            let mut stack = vec![(start, 0usize)];
            state[start] = 1;
            while let Some(&mut (node, ref mut edge)) = stack.last_mut() {
                if let Some(&succ) = next[node].get(*edge) {
                    *edge += 1;
                    match state[succ] {
                        0 => {
                            state[succ] = 1;
                            stack.push((succ, 0));
                        }
                        1 => return true,
                        _ => {}
                    }
                } else {
                    state[node] = 2;
                    stack.pop();
                }
            }
        }
        false
    }
}

/// Whether `a` comes before `b` in every run of their thread (see the module doc).
fn precedes_in_thread(a: &EventRef, b: &EventRef) -> bool {
    if a.thread != b.thread {
        return false;
    }
    if a.kind == Kind::ThreadStart && !a.after {
        return b.kind != Kind::ThreadStart || b.after;
    }
    if a.object != b.object {
        return false;
    }
    if a.kind == b.kind {
        // #k, after(#k), #k+1, after(#k+1), …
        return (a.occurrence, a.after) < (b.occurrence, b.after);
    }
    a.kind == Kind::MutexLock && b.kind == Kind::MutexUnlock && a.occurrence <= b.occurrence
}

#[cfg(test)]
mod tests {
    use crate::Schedule;

    fn cyclic(text: &str) -> bool {
        Schedule::parse(text).unwrap().is_cyclic()
    }

    #[test]
    fn a_chain_through_a_lock_and_its_unlock_is_a_cycle() {
        // 2's first section must come after 1's second, and before it.
        assert!(cyclic(
            "1:mutex_unlock(m)#2 -> 2:mutex_lock(m)#1\n\
             2:mutex_lock(m)#1 -> 3:cond_wait(c)#1\n\
             3:cond_wait(c)#1 -> 1:mutex_lock(m)#2\n"
        ));
    }

    #[test]
    fn occurrences_and_after_points_keep_their_order() {
        assert!(cyclic(
            "1:mutex_lock(m)#2 -> 2:mutex_lock(m)#1\n2:mutex_lock(m)#1 -> 1:mutex_lock(m)#1\n"
        ));
        assert!(cyclic(
            "1:after(mutex_unlock(m)#1) -> 2:mutex_lock(m)#1\n2:mutex_lock(m)#1 -> 1:mutex_unlock(m)#1\n"
        ));
        assert!(cyclic(
            "1:mutex_lock(m)#1 -> 2:thread_start()#1\n2:mutex_lock(m)#1 -> 1:mutex_lock(m)#1\n"
        ));
    }

    #[test]
    fn feasible_schedules_are_not_cycles() {
        assert!(!cyclic(
            "1:mutex_unlock(m)#1 -> 2:mutex_lock(m)#1\n\
             2:mutex_unlock(m)#1 -> 3:mutex_lock(m)#1\n\
             3:mutex_unlock(m)#1 -> 2:mutex_lock(m)#2\n\
             2:mutex_unlock(m)#2 -> 1:mutex_lock(m)#2\n"
        ));
        // A recursive mutex: the second lock may come before the first unlock.
        assert!(!cyclic(
            "1:mutex_lock(m)#2 -> 2:mutex_lock(m)#1\n2:mutex_lock(m)#1 -> 1:mutex_unlock(m)#1\n"
        ));
        // Nor is an unlock before the next lock (recursion again).
        assert!(!cyclic(
            "1:mutex_unlock(m)#1 -> 2:mutex_lock(m)#1\n2:mutex_lock(m)#1 -> 1:mutex_lock(m)#2\n"
        ));
        assert!(!cyclic("1:mutex_lock(m)#1 -> *:mutex_lock(m)#1\n"));
    }
}
