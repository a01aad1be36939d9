//! The event model every stage works on: one [`Event`] per synchronization operation.

use ordo_probe_common::{kind as k, via as v, RawEvent};

macro_rules! kinds {
    ($($variant:ident = $code:path, $name:literal;)*) => {
        /// What an event records. Codes come from `ordo_probe_common::kind`, the one
        /// definition shared with the eBPF programs; names are the snake_case names
        /// used by `ordo dump --json` and by schedules.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u16)]
        pub enum Kind {
            $(
                #[doc = concat!("`", $name, "`: see `ordo_probe_common::kind`.")]
                $variant = $code,
            )*
        }

        impl Kind {
            /// Every kind, in code order.
            pub const ALL: &'static [Kind] = &[$(Kind::$variant),*];

            /// The kind with this code, if any.
            pub fn from_code(code: u16) -> Option<Kind> {
                match code {
                    $(c if c == $code => Some(Kind::$variant),)*
                    _ => None,
                }
            }

            /// The snake_case name.
            pub fn name(self) -> &'static str {
                match self {
                    $(Kind::$variant => $name,)*
                }
            }

            /// The kind with this snake_case name, if any.
            pub fn from_name(name: &str) -> Option<Kind> {
                match name {
                    $($name => Some(Kind::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

kinds! {
    MutexLock = k::MUTEX_LOCK, "mutex_lock";
    MutexLockFailed = k::MUTEX_LOCK_FAILED, "mutex_lock_failed";
    MutexUnlock = k::MUTEX_UNLOCK, "mutex_unlock";
    CondWaitBegin = k::COND_WAIT_BEGIN, "cond_wait_begin";
    CondWait = k::COND_WAIT, "cond_wait";
    CondSignal = k::COND_SIGNAL, "cond_signal";
    CondBroadcast = k::COND_BROADCAST, "cond_broadcast";
    RwlockRdlock = k::RWLOCK_RDLOCK, "rwlock_rdlock";
    RwlockWrlock = k::RWLOCK_WRLOCK, "rwlock_wrlock";
    RwlockLockFailed = k::RWLOCK_LOCK_FAILED, "rwlock_lock_failed";
    RwlockUnlock = k::RWLOCK_UNLOCK, "rwlock_unlock";
    SemWait = k::SEM_WAIT, "sem_wait";
    SemWaitFailed = k::SEM_WAIT_FAILED, "sem_wait_failed";
    SemPost = k::SEM_POST, "sem_post";
    BarrierArrive = k::BARRIER_ARRIVE, "barrier_arrive";
    BarrierWait = k::BARRIER_WAIT, "barrier_wait";
    ThreadCreate = k::THREAD_CREATE, "thread_create";
    ThreadStart = k::THREAD_START, "thread_start";
    ThreadExit = k::THREAD_EXIT, "thread_exit";
    ThreadJoin = k::THREAD_JOIN, "thread_join";
    FutexWait = k::FUTEX_WAIT, "futex_wait";
    FutexWake = k::FUTEX_WAKE, "futex_wake";
    Read = k::READ, "read";
    Write = k::WRITE, "write";
    Rmw = k::RMW, "rmw";
    MutexBlock = k::MUTEX_BLOCK, "mutex_block";
    At = k::AT, "at";
    Blocked = k::BLOCKED, "blocked";
}

impl Kind {
    /// Thread creation, start, exit and join.
    pub fn is_lifecycle(self) -> bool {
        matches!(
            self,
            Kind::ThreadCreate | Kind::ThreadStart | Kind::ThreadExit | Kind::ThreadJoin
        )
    }

    /// Kinds whose `seq` field orders them exactly among the events on the same object.
    pub fn is_sequenced(self) -> bool {
        !matches!(
            self,
            Kind::MutexLockFailed
                | Kind::MutexBlock
                | Kind::Blocked
                | Kind::RwlockLockFailed
                | Kind::SemWaitFailed
                | Kind::ThreadCreate
                | Kind::ThreadStart
                | Kind::ThreadExit
                | Kind::ThreadJoin
                | Kind::At
        )
    }

    /// Acquisitions of a lock (mutex or rwlock).
    pub fn is_acquire(self) -> bool {
        matches!(
            self,
            Kind::MutexLock | Kind::RwlockRdlock | Kind::RwlockWrlock
        )
    }

    /// Releases of a lock (mutex or rwlock).
    pub fn is_release(self) -> bool {
        matches!(self, Kind::MutexUnlock | Kind::RwlockUnlock)
    }

    /// Accesses to a watched variable.
    pub fn is_access(self) -> bool {
        matches!(self, Kind::Read | Kind::Write | Kind::Rmw)
    }

    /// Whether `site` is the address of an instruction (accesses and marked program
    /// points) rather than a return address into the caller.
    pub fn site_is_instruction(self) -> bool {
        self.is_access() || self == Kind::At
    }

    /// Whether `result` is meaningful for this kind.
    pub fn has_result(self) -> bool {
        matches!(
            self,
            Kind::MutexLockFailed
                | Kind::RwlockLockFailed
                | Kind::SemWaitFailed
                | Kind::CondWait
                | Kind::BarrierWait
                | Kind::ThreadCreate
                | Kind::ThreadJoin
                | Kind::FutexWait
                | Kind::FutexWake
        )
    }
}

/// How an acquisition or release was requested.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Via {
    /// The plain blocking call.
    #[default]
    Plain,
    /// A `try` variant (`pthread_mutex_trylock`, …).
    Try,
    /// A `timed`/`clock` variant.
    Timed,
    /// Inside `pthread_cond_wait` (release before waiting, reacquire after).
    CondWait,
    /// A watched access by an atomic instruction (lock-prefixed or `xchg`).
    Atomic,
    /// A discovered access (`ordo record --discover`): named by its instruction
    /// (`at(function+OFFSET)`), its thread's arrival count there in `result`.
    Point,
    /// A discovered access by an atomic instruction.
    PointAtomic,
}

impl Via {
    /// From the probe's code; unknown codes read as `Plain`.
    pub fn from_code(code: u8) -> Via {
        match code {
            v::TRY => Via::Try,
            v::TIMED => Via::Timed,
            v::COND_WAIT => Via::CondWait,
            v::ATOMIC => Via::Atomic,
            v::POINT => Via::Point,
            v::POINT_ATOMIC => Via::PointAtomic,
            _ => Via::Plain,
        }
    }

    /// The probe's code.
    pub fn code(self) -> u8 {
        match self {
            Via::Plain => v::PLAIN,
            Via::Try => v::TRY,
            Via::Timed => v::TIMED,
            Via::CondWait => v::COND_WAIT,
            Via::Atomic => v::ATOMIC,
            Via::Point => v::POINT,
            Via::PointAtomic => v::POINT_ATOMIC,
        }
    }

    /// Name used in JSON output.
    pub fn name(self) -> &'static str {
        match self {
            Via::Plain => "lock",
            Via::Try => "trylock",
            Via::Timed => "timedlock",
            Via::CondWait => "cond_wait",
            Via::Atomic => "atomic",
            Via::Point => "discovered",
            Via::PointAtomic => "discovered atomic",
        }
    }

    /// An access by an atomic instruction (or to a variable of atomic type).
    pub fn is_atomic(self) -> bool {
        matches!(self, Via::Atomic | Via::PointAtomic)
    }

    /// A discovered access, named by its instruction ([`Via::Point`]).
    pub fn is_point(self) -> bool {
        matches!(self, Via::Point | Via::PointAtomic)
    }
}

/// One recorded event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// CLOCK_MONOTONIC nanoseconds.
    pub ts_ns: u64,
    /// Kernel thread id.
    pub tid: u32,
    /// Dense index of the thread in the trace's [`crate::ThreadTable`] (filled by the reader).
    pub thread: u32,
    /// What happened.
    pub kind: Kind,
    /// How it was requested.
    pub via: Via,
    /// The object: mutex, condvar, rwlock, semaphore, barrier, futex word, variable,
    /// or the pthread_t for thread_create/thread_join.
    pub addr: u64,
    /// Second object: the mutex of a condvar wait (or the condvar, on the mutex events
    /// of a wait); the futex command for futex events.
    pub addr2: u64,
    /// Call site: return address into the caller, or the accessing instruction.
    pub site: u64,
    /// Per-object sequence number (see [`Kind::is_sequenced`]).
    pub seq: u64,
    /// Result of the call where [`Kind::has_result`].
    pub result: i64,
    /// Kind-specific: child tid of thread_create, value of a variable access, futex value.
    pub value: u64,
    /// Access size in bytes for variable accesses.
    pub size: u8,
}

impl Event {
    /// Converts a probe record; `None` for an unknown kind code (a newer probe).
    pub fn from_raw(raw: &RawEvent) -> Option<Event> {
        Some(Event {
            ts_ns: raw.ts_ns,
            tid: raw.tid,
            thread: 0,
            kind: Kind::from_code(raw.kind)?,
            via: Via::from_code(raw.via),
            addr: raw.addr,
            addr2: raw.addr2,
            site: raw.site,
            seq: raw.seq,
            result: raw.result,
            value: raw.value,
            size: raw.size,
        })
    }

    /// For thread_create: the kernel tid of the created thread.
    pub fn child_tid(&self) -> Option<u32> {
        (self.kind == Kind::ThreadCreate && self.value != 0).then_some(self.value as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for &kind in Kind::ALL {
            assert_eq!(Kind::from_name(kind.name()), Some(kind));
            assert_eq!(Kind::from_code(kind as u16), Some(kind));
        }
        assert_eq!(Kind::ALL.len() as u16, ordo_probe_common::kind::COUNT - 1);
    }
}
