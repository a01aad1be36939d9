//! ordo's schedule language: orderings between named events of a run.
//!
//! A schedule is text, one ordering per line (`#` starts a comment):
//!
//! ```text
//! # the consumer must take the lock before the producer publishes
//! 1:mutex_lock(queue_lock)#1 -> 2:mutex_lock(queue_lock)#1
//! 1:mutex_unlock(@1)#2 && 2:cond_wait_begin(ready)#1 -> 0:cond_signal(ready)#1
//! ```
//!
//! `A -> B` means event B may not take effect before event A has happened; `A && B -> C`
//! makes C wait for both. An event is `THREAD:KIND(OBJECT)#N` (see [`EventRef`]);
//! `A -> *:KIND(OBJECT)#N` makes every thread other than A's wait for A before its
//! own N-th KIND(OBJECT).
//! Events a schedule does not name are free. `docs/SCHEDULE.md` has the full grammar.
//!
//! - [`parse`]: text to [`Schedule`] (errors carry line and column), and back via `Display`.
//! - [`namer`]: [`EventNamer`] gives a recorded [`ordo_trace::Event`] the name a schedule
//!   would use for it.
//! - [`check`]: whether a run (events in global order) satisfied a schedule.

pub mod check;
mod cycle;
pub mod namer;
pub mod parse;

use std::fmt;

use ordo_trace::{Kind, LogicalId};

pub use check::{check, CheckReport, Checker, Unmet};
pub use namer::{is_cond_wait_mutex_event, is_glibc_internal_module, EventNamer};
pub use parse::ParseError;

/// The family of objects a kind acts on; `@K` numbers objects within one family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// `mutex_*`.
    Mutex,
    /// `cond_*`.
    Cond,
    /// `rwlock_*`.
    Rwlock,
    /// `sem_*`.
    Sem,
    /// `barrier_*`.
    Barrier,
    /// `futex_*`.
    Futex,
    /// `read`, `write`, `rmw` of watched variables.
    Var,
    /// `thread_create`, `thread_join` (the object is the `pthread_t` handle).
    Thread,
    /// `thread_start`, `thread_exit`: no object.
    NoObject,
    /// `at`: marked program points (`at(file.c:42)`, `at(function+0x1c)`).
    Mark,
}

impl Family {
    /// Every family, in a fixed order (the replayer's agent uses the index as a code).
    pub const ALL: &'static [Family] = &[
        Family::Mutex,
        Family::Cond,
        Family::Rwlock,
        Family::Sem,
        Family::Barrier,
        Family::Futex,
        Family::Var,
        Family::Thread,
        Family::NoObject,
        Family::Mark,
    ];

    /// The family of a kind (the mapping is `ordo_probe_common::family::of`, shared
    /// with the replay agent and the analysis).
    pub fn of(kind: Kind) -> Family {
        Family::ALL[ordo_probe_common::family::of(kind as u16) as usize]
    }

    /// Position in [`Family::ALL`].
    pub fn index(self) -> usize {
        Family::ALL.iter().position(|f| *f == self).unwrap_or(0)
    }

    /// Short name, as used in messages.
    pub fn name(self) -> &'static str {
        match self {
            Family::Mutex => "mutex",
            Family::Cond => "cond",
            Family::Rwlock => "rwlock",
            Family::Sem => "sem",
            Family::Barrier => "barrier",
            Family::Futex => "futex",
            Family::Var => "var",
            Family::Thread => "thread",
            Family::NoObject => "none",
            Family::Mark => "mark",
        }
    }
}

/// Which object an event acts on, in a form that survives a rerun.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ObjectRef {
    /// A global or static variable, as [`ordo_trace::symbolize::Symbolizer::data_name`]
    /// prints it: `name`, or `name+OFFSET` (decimal bytes) inside it.
    Symbol(String),
    /// `@K`: the thread's K-th (1-based) distinct object of the kind's [`Family`], in
    /// order of the thread's first event on it.
    Nth(u32),
    /// No object (`thread_start`, `thread_exit`).
    None,
}

impl ObjectRef {
    /// For a symbol: the name and the byte offset into it (`state+8` → `("state", 8)`).
    pub fn symbol_parts(&self) -> Option<(&str, u64)> {
        let ObjectRef::Symbol(s) = self else {
            return None;
        };
        if let Some((name, off)) = s.rsplit_once('+') {
            if !name.is_empty() && !off.is_empty() && off.bytes().all(|b| b.is_ascii_digit()) {
                if let Ok(off) = off.parse() {
                    return Some((name, off));
                }
            }
        }
        Some((s.as_str(), 0))
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ObjectRef::Symbol(s) => f.write_str(s),
            ObjectRef::Nth(k) => write!(f, "@{k}"),
            ObjectRef::None => Ok(()),
        }
    }
}

/// The thread part of an event name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ThreadRef {
    /// One thread, by logical id (`0`, `2`, `1.3`).
    Id(LogicalId),
    /// `*`, only as the successor of an ordering: every thread other than the
    /// threads of the ordering's left-hand events, each on its own event.
    Others,
}

impl ThreadRef {
    /// The logical id, unless this is `*`.
    pub fn id(&self) -> Option<&LogicalId> {
        match self {
            ThreadRef::Id(id) => Some(id),
            ThreadRef::Others => None,
        }
    }

    /// Whether this is `*`.
    pub fn is_others(&self) -> bool {
        matches!(self, ThreadRef::Others)
    }
}

impl From<LogicalId> for ThreadRef {
    fn from(id: LogicalId) -> ThreadRef {
        ThreadRef::Id(id)
    }
}

impl PartialEq<LogicalId> for ThreadRef {
    fn eq(&self, other: &LogicalId) -> bool {
        self.id() == Some(other)
    }
}

impl fmt::Display for ThreadRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ThreadRef::Id(id) => write!(f, "{id}"),
            ThreadRef::Others => f.write_str("*"),
        }
    }
}

/// One event of a run, named so the name means the same event on every run:
/// `THREAD:KIND(OBJECT)#N`. With thread `*` ([`ThreadRef::Others`]) it is a pattern
/// for the same event in each of several threads (successors only).
///
/// With [`EventRef::after`] set it names the moment right *after* that event
/// returned to the program, `THREAD:after(KIND(OBJECT)#N)`: the point before the
/// thread's next statement, where the replayer can hold it (after an unlock,
/// before the plain code that follows it).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventRef {
    /// The thread's logical id, or `*`.
    pub thread: ThreadRef,
    /// The event kind.
    pub kind: Kind,
    /// The object.
    pub object: ObjectRef,
    /// Which occurrence (1-based) of `kind` on `object` in `thread`.
    pub occurrence: u32,
    /// The point right after the event returned (`after(…)`), not the event itself.
    pub after: bool,
}

impl fmt::Display for EventRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.after {
            write!(
                f,
                "{}:after({}({})#{})",
                self.thread,
                self.kind.name(),
                self.object,
                self.occurrence
            )
        } else {
            write!(
                f,
                "{}:{}({})#{}",
                self.thread,
                self.kind.name(),
                self.object,
                self.occurrence
            )
        }
    }
}

/// Whether `T:after(KIND(…)#N)` can be held: the agent interposes the call and the
/// event takes effect before the call returns to the program. Not: accesses and
/// program points (trapped before the instruction, nothing interposed after it),
/// `cond_wait_begin` and `barrier_arrive` (the call blocks after them: name the
/// `cond_wait`/`barrier_wait` that returns), `thread_exit` (nothing runs after it).
pub fn after_supported(kind: Kind) -> bool {
    !matches!(
        kind,
        Kind::Read
            | Kind::Write
            | Kind::Rmw
            | Kind::At
            | Kind::CondWaitBegin
            | Kind::BarrierArrive
            | Kind::ThreadExit
            | Kind::MutexBlock
    )
}

impl EventRef {
    /// The same event in thread `thread` (how a `*` successor is instantiated).
    pub fn in_thread(&self, thread: LogicalId) -> EventRef {
        EventRef {
            thread: ThreadRef::Id(thread),
            ..self.clone()
        }
    }

    /// The point right after this event returned (`T:after(KIND(OBJ)#N)`).
    pub fn after_point(&self) -> EventRef {
        EventRef {
            after: true,
            ..self.clone()
        }
    }

    /// Whether `concrete` (an event of one thread) is an instance of this `*`
    /// pattern: same kind, object and occurrence, in a thread not in `excluded`.
    pub fn matches_others(&self, concrete: &EventRef, excluded: &[&LogicalId]) -> bool {
        self.thread.is_others()
            && concrete.kind == self.kind
            && concrete.object == self.object
            && concrete.occurrence == self.occurrence
            && concrete.after == self.after
            && concrete.thread.id().is_some_and(|t| !excluded.contains(&t))
    }
}

impl std::str::FromStr for EventRef {
    type Err = ParseError;

    /// Parses one event (`1:mutex_lock(m)#2`); errors are on line 1.
    fn from_str(s: &str) -> Result<EventRef, ParseError> {
        parse::parse_event_text(s)
    }
}

/// `before… -> after`: `after` may not take effect until every event of `before` has
/// happened.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Ordering {
    /// The events that must happen first (joined by `&&`).
    pub before: Vec<EventRef>,
    /// The event that waits.
    pub after: EventRef,
    /// 1-based line in the schedule text (0 when built in code).
    pub line: usize,
}

impl Ordering {
    /// The threads of the left-hand events: a `*` successor means every thread but
    /// these.
    pub fn before_threads(&self) -> Vec<&LogicalId> {
        let mut out: Vec<&LogicalId> = Vec::new();
        for e in &self.before {
            if let Some(t) = e.thread.id() {
                if !out.contains(&t) {
                    out.push(t);
                }
            }
        }
        out
    }
}

impl fmt::Display for Ordering {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.before.iter().enumerate() {
            if i > 0 {
                f.write_str(" && ")?;
            }
            write!(f, "{e}")?;
        }
        write!(f, " -> {}", self.after)
    }
}

/// A set of orderings: a partial order over some events of a run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Schedule {
    /// The orderings, in text order.
    pub orderings: Vec<Ordering>,
}

impl Schedule {
    /// Parses schedule text; see the crate docs and `docs/SCHEDULE.md`.
    pub fn parse(text: &str) -> Result<Schedule, ParseError> {
        parse::parse_schedule(text)
    }

    /// Whether the schedule names no event (replaying it changes nothing).
    pub fn is_empty(&self) -> bool {
        self.orderings.is_empty()
    }

    /// Every distinct event the schedule names, in order of first mention.
    pub fn events(&self) -> Vec<&EventRef> {
        let mut seen = std::collections::HashSet::new();
        self.orderings
            .iter()
            .flat_map(|o| o.before.iter().chain(std::iter::once(&o.after)))
            .filter(|e| seen.insert(*e))
            .collect()
    }
}

impl fmt::Display for Schedule {
    /// One ordering per line; parsing the output gives the same orderings back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for o in &self.orderings {
            writeln!(f, "{o}")?;
        }
        Ok(())
    }
}
