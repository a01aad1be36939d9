//! Vector clocks and epochs (Roşu–Sen multithreaded vector clocks, FastTrack epochs).
//!
//! Components are *clock slots*, not threads: a slot is given to a thread when it
//! starts and freed when it exits, and a later thread reuses it only when the
//! thread's exit happens before (by fork/join order) the new thread's creation —
//! then the new thread continues the slot's counter from the old thread's last
//! value, and every comparison stays exact (a clock that knows the new thread's
//! start knows all of the old thread). Clocks are as wide as the live threads, not
//! as the threads ever created (create-then-join loops reuse one slot).
//!
//! A thread's own component grows by one after each operation other threads can
//! synchronize with (a release), so an event's *epoch* — its slot and that slot's
//! component when it happened — is enough to ask whether it happens before a later
//! point of another thread: `epoch.clock <= clock_of_that_point[slot]`.

/// A vector clock: component `i` is how much of thread `i`'s history is known.
/// Missing components are zero, so clocks grow lazily as threads appear.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VectorClock(Vec<u32>);

impl VectorClock {
    /// The clock of a thread starting in slot `slot` at `own` (1 for a fresh slot,
    /// the previous owner's last value + 1 for a reused one), others 0.
    pub fn for_slot(slot: u32, own: u32) -> VectorClock {
        let mut v = vec![0; slot as usize + 1];
        v[slot as usize] = own;
        VectorClock(v)
    }

    /// Number of components held (higher ones are 0).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no component is held.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Component `thread` (0 when absent).
    #[inline]
    pub fn get(&self, thread: u32) -> u32 {
        self.0.get(thread as usize).copied().unwrap_or(0)
    }

    /// Advances `thread`'s own component after a release.
    #[inline]
    pub fn tick(&mut self, thread: u32) {
        let i = thread as usize;
        if i >= self.0.len() {
            self.0.resize(i + 1, 0);
        }
        self.0[i] += 1;
    }

    /// Sets component `thread` to `value`.
    pub fn set(&mut self, thread: u32, value: u32) {
        let i = thread as usize;
        if i >= self.0.len() {
            self.0.resize(i + 1, 0);
        }
        self.0[i] = value;
    }

    /// Pointwise maximum with `other` (an acquire).
    #[inline]
    pub fn join(&mut self, other: &VectorClock) {
        if other.0.len() > self.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        // Equal-length slices and a branch-free max let this vectorize.
        let n = other.0.len();
        for (a, b) in self.0[..n].iter_mut().zip(&other.0[..n]) {
            *a = (*a).max(*b);
        }
    }

    /// Overwrites with `other`, reusing the allocation (a mutex release).
    #[inline]
    pub fn assign(&mut self, other: &VectorClock) {
        self.0.clear();
        self.0.extend_from_slice(&other.0);
    }

    /// Whether every component is ≤ the same component of `other`.
    pub fn le(&self, other: &VectorClock) -> bool {
        self.0
            .iter()
            .enumerate()
            .all(|(i, &c)| c <= other.get(i as u32))
    }

    /// The components, by dense thread index.
    pub fn components(&self) -> &[u32] {
        &self.0
    }
}

/// A point in one thread's history: the thread and its own clock component then.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Epoch {
    /// Dense thread index.
    pub thread: u32,
    /// The thread's own component at that point.
    pub clock: u32,
}

impl Epoch {
    /// Whether the point happens before (or is known to) a thread whose clock is `vc`.
    #[inline]
    pub fn happens_before(&self, vc: &VectorClock) -> bool {
        self.clock <= vc.get(self.thread)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_tick_and_epochs() {
        let mut a = VectorClock::for_slot(0, 1);
        let mut b = VectorClock::for_slot(1, 1);
        let release = Epoch {
            thread: 0,
            clock: a.get(0),
        };
        assert!(!release.happens_before(&b));
        b.join(&a);
        a.tick(0);
        assert!(release.happens_before(&b));
        assert!(!Epoch {
            thread: 0,
            clock: a.get(0)
        }
        .happens_before(&b));
        assert_eq!(b.components(), &[1, 1]);
        let mut c = VectorClock::default();
        c.tick(3);
        b.join(&c);
        assert_eq!(b.get(3), 1);
        assert!(c.le(&b) && !b.le(&c));
        c.assign(&a);
        assert_eq!(c, a);
    }
}
