//! Thread identity that is stable across runs.
//!
//! Kernel tids change every run, so schedules name threads by their position in the
//! creation tree: the main thread is `0`, the n-th thread it creates (1-based) is
//! `n`, and the n-th thread created by thread `p` is `p.n`. A program that creates its
//! threads the same way gets the same ids on every run, whatever the interleaving.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

/// Bits of a thread key that hold the kernel tid. A trace names threads by key (its
/// `tid` column, thread records, a creation's child): the kernel tid for the first
/// thread with that tid, `n << TID_BITS | tid` for the n-th later thread the kernel
/// gave the same tid (Linux never hands out tids at or above `PID_MAX_LIMIT`, 2^22
/// on 64-bit). Two threads never share a key.
pub const TID_BITS: u32 = 22;

/// The kernel tid of a thread key (see [`TID_BITS`]).
pub fn kernel_tid(key: u32) -> u32 {
    key & ((1 << TID_BITS) - 1)
}

/// A thread's position in the creation tree. The main thread is the empty path.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LogicalId(pub Vec<u32>);

impl LogicalId {
    /// The main thread, `0`.
    pub fn main() -> LogicalId {
        LogicalId(Vec::new())
    }

    /// The `n`-th (1-based) child of `self`.
    pub fn child(&self, n: u32) -> LogicalId {
        let mut path = self.0.clone();
        path.push(n);
        LogicalId(path)
    }
}

impl fmt::Display for LogicalId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("0");
        }
        for (i, n) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(".")?;
            }
            write!(f, "{n}")?;
        }
        Ok(())
    }
}

impl FromStr for LogicalId {
    type Err = String;

    fn from_str(s: &str) -> Result<LogicalId, String> {
        if s == "0" {
            return Ok(LogicalId::main());
        }
        let mut path = Vec::new();
        for part in s.split('.') {
            match part.parse::<u32>() {
                Ok(n) if n > 0 => path.push(n),
                _ => {
                    return Err(format!(
                        "`{s}` is not a thread id (0, N or N.M…, each part ≥ 1)"
                    ))
                }
            }
        }
        Ok(LogicalId(path))
    }
}

/// What the trace knows about one thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadInfo {
    /// Kernel thread id in the recorded run.
    pub tid: u32,
    /// Stable identity (see the module docs).
    pub logical: LogicalId,
    /// Name (comm) at exit, or at start when it never exited in the trace.
    pub name: String,
    /// Kernel tid of the creating thread, 0 for the main thread or when unknown.
    pub parent_tid: u32,
}

/// All threads of a trace, indexed densely in logical-id order.
#[derive(Clone, Debug, Default)]
pub struct ThreadTable {
    threads: Vec<ThreadInfo>,
    by_tid: HashMap<u32, u32>,
}

impl ThreadTable {
    /// Builds the table, ordering threads by logical id.
    pub fn new(mut threads: Vec<ThreadInfo>) -> ThreadTable {
        threads.sort_by(|a, b| a.logical.cmp(&b.logical).then(a.tid.cmp(&b.tid)));
        let by_tid = threads
            .iter()
            .enumerate()
            .map(|(i, t)| (t.tid, i as u32))
            .collect();
        ThreadTable { threads, by_tid }
    }

    /// Dense index of a tid.
    pub fn index_of(&self, tid: u32) -> Option<u32> {
        self.by_tid.get(&tid).copied()
    }

    /// Thread by dense index.
    pub fn get(&self, index: u32) -> Option<&ThreadInfo> {
        self.threads.get(index as usize)
    }

    /// Thread by kernel tid.
    pub fn by_tid(&self, tid: u32) -> Option<&ThreadInfo> {
        self.index_of(tid).and_then(|i| self.get(i))
    }

    /// Dense index of a logical id.
    pub fn index_of_logical(&self, logical: &LogicalId) -> Option<u32> {
        self.threads
            .iter()
            .position(|t| &t.logical == logical)
            .map(|i| i as u32)
    }

    /// All threads in dense-index order.
    pub fn iter(&self) -> impl Iterator<Item = &ThreadInfo> {
        self.threads.iter()
    }

    /// Number of threads.
    pub fn len(&self) -> usize {
        self.threads.len()
    }

    /// Whether there are no threads.
    pub fn is_empty(&self) -> bool {
        self.threads.is_empty()
    }
}

/// Assigns logical ids while a run is observed: feed it thread creations in each
/// parent's program order.
#[derive(Clone, Debug, Default)]
pub struct LogicalIdAssigner {
    ids: HashMap<u32, LogicalId>,
    children: HashMap<u32, u32>,
    parents: HashMap<u32, u32>,
}

impl LogicalIdAssigner {
    /// Starts with `main_tid` as thread `0`.
    pub fn new(main_tid: u32) -> LogicalIdAssigner {
        let mut ids = HashMap::new();
        ids.insert(main_tid, LogicalId::main());
        LogicalIdAssigner {
            ids,
            ..Default::default()
        }
    }

    /// Records that `parent` created `child`; returns the child's id. A parent whose
    /// own id is unknown (a thread that existed before attaching) is first adopted as
    /// a child of the main thread.
    pub fn created(&mut self, parent: u32, child: u32) -> LogicalId {
        if let Some(id) = self.ids.get(&child) {
            return id.clone();
        }
        let parent_id = match self.ids.get(&parent) {
            Some(id) => id.clone(),
            None => self.adopt(parent),
        };
        let n = self.children.entry(parent).or_insert(0);
        *n += 1;
        let id = parent_id.child(*n);
        self.ids.insert(child, id.clone());
        self.parents.insert(child, parent);
        id
    }

    /// Gives a thread whose creation was not seen an id as the main thread's next child.
    pub fn adopt(&mut self, tid: u32) -> LogicalId {
        if let Some(id) = self.ids.get(&tid) {
            return id.clone();
        }
        let main = self
            .ids
            .iter()
            .find(|(_, id)| id.0.is_empty())
            .map(|(tid, _)| *tid)
            .unwrap_or(0);
        let n = self.children.entry(main).or_insert(0);
        *n += 1;
        let id = LogicalId::main().child(*n);
        self.ids.insert(tid, id.clone());
        id
    }

    /// The id of `tid`, if known.
    pub fn get(&self, tid: u32) -> Option<&LogicalId> {
        self.ids.get(&tid)
    }

    /// The creating thread of `tid`, if known.
    pub fn parent(&self, tid: u32) -> Option<u32> {
        self.parents.get(&tid).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_follow_the_creation_tree() {
        let mut a = LogicalIdAssigner::new(100);
        assert_eq!(a.created(100, 101).to_string(), "1");
        assert_eq!(a.created(101, 103).to_string(), "1.1");
        assert_eq!(a.created(100, 102).to_string(), "2");
        assert_eq!(a.get(100).unwrap().to_string(), "0");
        assert_eq!("1.1".parse::<LogicalId>().unwrap(), LogicalId(vec![1, 1]));
        assert_eq!("0".parse::<LogicalId>().unwrap(), LogicalId::main());
        assert!("1.0".parse::<LogicalId>().is_err());
        assert!("x".parse::<LogicalId>().is_err());
    }
}
