//! Names recorded events the way schedules name them.
//!
//! Feed [`EventNamer::name`] the events of a trace in an order consistent with each
//! thread's program order (the file order or a global order both are). The namer
//! counts, per thread, the distinct objects of each [`Family`] (for `@K`) and the
//! occurrences of each kind on each object (for `#N`).
//!
//! The mutex release and reacquisition inside `pthread_cond_wait` (and its timed
//! variants; recorded with `via` = cond_wait) get no name either and count in no
//! `mutex_*` occurrence: whether a thread waits at all depends on timing, so
//! counting them would make `mutex_lock(m)#N` name different acquisitions on
//! different runs. The condvar events `cond_wait_begin(cv)#k` / `cond_wait(cv)#k`
//! name them.
//!
//! Events glibc makes on its own behalf (a pthread call whose call site lies inside
//! libc or the dynamic loader, e.g. the loader's recursive lock) get no name: the
//! replayer's agent interposes the pthread API at the program's calls and never sees
//! them, so counting them would shift every later occurrence number.

use std::collections::HashMap;

use ordo_trace::symbolize::Symbolizer;
use ordo_trace::{Event, Kind, LogicalId, ThreadTable, Via};

use crate::{EventRef, Family, ObjectRef, ThreadRef};

/// Whether `e` is the mutex release or reacquisition inside a condvar wait, which
/// schedules name through the condvar's events (see the module docs).
pub fn is_cond_wait_mutex_event(e: &Event) -> bool {
    e.via == Via::CondWait && Family::of(e.kind) == Family::Mutex
}

/// Whether a module file name is glibc's C library or dynamic loader, whose internal
/// pthread calls the replayer cannot see.
pub fn is_glibc_internal_module(file_name: &str) -> bool {
    file_name.starts_with("libc.so")
        || file_name.starts_with("libc-2.")
        || file_name.starts_with("ld-linux")
        || file_name.starts_with("ld64.so")
        || file_name.starts_with("libpthread")
}

#[derive(Default)]
struct ThreadCounts {
    /// Per family: object address → K.
    objects: HashMap<(Family, u64), u32>,
    /// Per family: distinct objects seen.
    distinct: HashMap<Family, u32>,
    /// (kind, object address) → occurrences so far.
    occurrences: HashMap<(Kind, u64), u32>,
}

/// Gives events their schedule names (`THREAD:KIND(OBJECT)#N`).
pub struct EventNamer<'a> {
    threads: &'a ThreadTable,
    symbolizer: &'a Symbolizer,
    counts: HashMap<u32, ThreadCounts>,
    internal_site: HashMap<u64, bool>,
    data_names: HashMap<u64, Option<String>>,
    points_as_accesses: bool,
}

impl<'a> EventNamer<'a> {
    /// A namer for the events of one trace.
    pub fn new(threads: &'a ThreadTable, symbolizer: &'a Symbolizer) -> EventNamer<'a> {
        EventNamer {
            threads,
            symbolizer,
            counts: HashMap::new(),
            internal_site: HashMap::new(),
            data_names: HashMap::new(),
            points_as_accesses: false,
        }
    }

    /// Also names each access recorded at a software breakpoint (`via` discovered)
    /// as its variable's access, `read(level)#N`, counted with the thread's other
    /// accesses of it, in [`EventNamer::name_all`]. Only for a trace in which every
    /// such breakpoint stayed for the whole run (a replay's software gates and the
    /// breakpoints that record the same variables beside them): discovery removes a
    /// breakpoint after its budget of traps, and the counts would then skip the
    /// accesses it no longer saw.
    pub fn counting_points_as_accesses(mut self) -> Self {
        self.points_as_accesses = true;
        self
    }

    fn logical_of(&self, e: &Event) -> Option<LogicalId> {
        match self.threads.get(e.thread) {
            Some(t) if t.tid == e.tid => Some(t.logical.clone()),
            _ => self.threads.by_tid(e.tid).map(|t| t.logical.clone()),
        }
    }

    /// Whether the event's call site is inside glibc (see the module docs).
    pub fn is_internal(&mut self, e: &Event) -> bool {
        if e.site == 0 || e.kind.is_access() {
            return false;
        }
        let symbolizer = self.symbolizer;
        *self.internal_site.entry(e.site).or_insert_with(|| {
            symbolizer
                .locate(e.site, true)
                .is_some_and(|loc| is_glibc_internal_module(&loc.module))
        })
    }

    /// The symbol name of an object address, cached.
    fn data_name(&mut self, addr: u64) -> Option<String> {
        let symbolizer = self.symbolizer;
        self.data_names
            .entry(addr)
            .or_insert_with(|| symbolizer.data_name(addr))
            .clone()
    }

    /// The event's name, or `None` for an event no schedule can name: a thread missing
    /// from the thread table, a pthread call glibc made internally, or the mutex side
    /// of a condvar wait. Call it once per event, in each thread's program order: it
    /// counts.
    pub fn name(&mut self, e: &Event) -> Option<EventRef> {
        let thread = self.logical_of(e)?;
        if self.is_internal(e) || is_cond_wait_mutex_event(e) {
            return None;
        }
        if e.kind.is_access() && e.via.is_point() {
            // A discovered access (`ordo record --discover`): named by its
            // instruction, with the arrival count the agent took (`result`).
            let occurrence = u32::try_from(e.result).ok().filter(|&n| n > 0)?;
            return Some(EventRef {
                thread: ThreadRef::Id(thread),
                kind: Kind::At,
                object: ObjectRef::Symbol(self.data_name(e.site)?),
                occurrence,
                after: false,
            });
        }
        Some(self.name_by_object(e, thread))
    }

    /// The event's name by its kind, object and occurrence (counted).
    fn name_by_object(&mut self, e: &Event, thread: LogicalId) -> EventRef {
        let family = Family::of(e.kind);
        let symbol = if family == Family::NoObject || family == Family::Thread {
            None
        } else {
            self.data_name(e.addr)
        };
        let counts = self.counts.entry(e.tid).or_default();
        let (object, key) = if family == Family::NoObject {
            (ObjectRef::None, 0)
        } else {
            // Every object counts for `@K`, named or not, so `@K` stays meaningful for
            // a replayer that does not know which objects have names.
            let k = match counts.objects.get(&(family, e.addr)) {
                Some(k) => *k,
                None => {
                    let n = counts.distinct.entry(family).or_insert(0);
                    *n += 1;
                    counts.objects.insert((family, e.addr), *n);
                    *n
                }
            };
            (
                symbol.map(ObjectRef::Symbol).unwrap_or(ObjectRef::Nth(k)),
                e.addr,
            )
        };
        let occ = counts.occurrences.entry((e.kind, key)).or_insert(0);
        *occ += 1;
        EventRef {
            thread: ThreadRef::Id(thread),
            kind: e.kind,
            object,
            occurrence: *occ,
            after: false,
        }
    }

    /// Every spelling of the event's name ([`EventNamer::name`]'s, then, for an
    /// object named by symbol, its `@K` spelling); empty when it has no name.
    pub fn name_all(&mut self, e: &Event) -> Vec<EventRef> {
        let Some(name) = self.name(e) else {
            return Vec::new();
        };
        let mut names = vec![name];
        if self.points_as_accesses && e.kind.is_access() && e.via.is_point() {
            if let Some(thread) = self.logical_of(e) {
                let by_object = self.name_by_object(e, thread);
                names.push(by_object);
            }
        }
        let last = names[names.len() - 1].clone();
        if let ObjectRef::Symbol(_) = last.object {
            if let Some(k) = self.nth_of(e.tid, e.kind, e.addr) {
                names.push(EventRef {
                    object: ObjectRef::Nth(k),
                    ..last
                });
            }
        }
        names
    }

    /// The `@K` name of an object for a thread, if the thread has acted on it (useful
    /// to offer both spellings of a named object).
    pub fn nth_of(&self, tid: u32, kind: Kind, addr: u64) -> Option<u32> {
        self.counts
            .get(&tid)?
            .objects
            .get(&(Family::of(kind), addr))
            .copied()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use ordo_trace::{ThreadInfo, Via};

    pub(crate) fn ev(tid: u32, kind: Kind, addr: u64) -> Event {
        Event {
            ts_ns: 0,
            tid,
            thread: 0,
            kind,
            via: Via::Plain,
            addr,
            addr2: 0,
            site: 0,
            seq: 0,
            result: 0,
            value: 0,
            size: 0,
        }
    }

    pub(crate) fn table() -> ThreadTable {
        ThreadTable::new(vec![
            ThreadInfo {
                tid: 100,
                logical: LogicalId::main(),
                name: "main".into(),
                parent_tid: 0,
            },
            ThreadInfo {
                tid: 101,
                logical: LogicalId(vec![1]),
                name: "a".into(),
                parent_tid: 100,
            },
            ThreadInfo {
                tid: 102,
                logical: LogicalId(vec![1, 1]),
                name: "b".into(),
                parent_tid: 101,
            },
        ])
    }

    #[test]
    fn counts_objects_per_family_and_occurrences_per_object() {
        let threads = table();
        let sym = Symbolizer::new(&[]);
        let mut namer = EventNamer::new(&threads, &sym);
        let names: Vec<String> = [
            ev(101, Kind::MutexLock, 0x10),
            ev(101, Kind::CondWaitBegin, 0x50),
            ev(101, Kind::MutexUnlock, 0x10),
            ev(101, Kind::MutexLock, 0x20),
            ev(101, Kind::MutexLock, 0x10),
            ev(102, Kind::MutexLock, 0x20),
            ev(102, Kind::ThreadStart, 0),
            ev(100, Kind::ThreadCreate, 0x7000),
            ev(100, Kind::ThreadJoin, 0x7000),
        ]
        .iter()
        .map(|e| namer.name(e).unwrap().to_string())
        .collect();
        assert_eq!(
            names,
            [
                "1:mutex_lock(@1)#1",
                "1:cond_wait_begin(@1)#1",
                "1:mutex_unlock(@1)#1",
                "1:mutex_lock(@2)#1",
                "1:mutex_lock(@1)#2",
                "1.1:mutex_lock(@1)#1",
                "1.1:thread_start()#1",
                "0:thread_create(@1)#1",
                "0:thread_join(@1)#1",
            ]
        );
        assert_eq!(namer.nth_of(101, Kind::MutexUnlock, 0x20), Some(2));
        // A thread missing from the table gets no name.
        assert!(namer.name(&ev(999, Kind::MutexLock, 0x10)).is_none());
    }

    #[test]
    fn a_cond_wait_does_not_shift_mutex_occurrences() {
        let threads = table();
        let sym = Symbolizer::new(&[]);
        let in_wait = |kind, addr, cond| Event {
            via: Via::CondWait,
            addr2: cond,
            ..ev(101, kind, addr)
        };
        // lock; wait (release + reacquire inside); unlock; lock; unlock.
        let run = [
            ev(101, Kind::MutexLock, 0x10),
            ev(101, Kind::CondWaitBegin, 0x50),
            in_wait(Kind::MutexUnlock, 0x10, 0x50),
            ev(101, Kind::CondWait, 0x50),
            in_wait(Kind::MutexLock, 0x10, 0x50),
            ev(101, Kind::MutexUnlock, 0x10),
            ev(101, Kind::MutexLock, 0x10),
        ];
        let mut namer = EventNamer::new(&threads, &sym);
        let names: Vec<Option<String>> = run
            .iter()
            .map(|e| namer.name(e).map(|n| n.to_string()))
            .collect();
        assert_eq!(
            names,
            [
                Some("1:mutex_lock(@1)#1".to_string()),
                Some("1:cond_wait_begin(@1)#1".to_string()),
                None,
                Some("1:cond_wait(@1)#1".to_string()),
                None,
                Some("1:mutex_unlock(@1)#1".to_string()),
                Some("1:mutex_lock(@1)#2".to_string()),
            ]
        );
        // The same thread without the wait names its explicit calls the same way.
        let mut namer = EventNamer::new(&threads, &sym);
        let plain: Vec<String> = [run[0], run[5], run[6]]
            .iter()
            .map(|e| namer.name(e).unwrap().to_string())
            .collect();
        assert_eq!(
            plain,
            [
                names[0].clone().unwrap(),
                names[5].clone().unwrap(),
                names[6].clone().unwrap()
            ]
        );
    }

    #[test]
    fn names_globals_of_this_process_by_symbol() {
        static LOCK_WORD: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let modules = ordo_trace::symbolize::modules_of_process(std::process::id());
        let sym = Symbolizer::new(&modules);
        let threads = table();
        let mut namer = EventNamer::new(&threads, &sym);
        let addr = &LOCK_WORD as *const _ as u64;
        let name = namer.name(&ev(101, Kind::MutexLock, addr)).unwrap();
        match &name.object {
            ObjectRef::Symbol(s) => assert!(s.contains("LOCK_WORD"), "{s}"),
            other => panic!("expected a symbol, got {other:?}"),
        }
        // The named object still took `@1` in the thread's mutex family.
        assert_eq!(namer.nth_of(101, Kind::MutexLock, addr), Some(1));
        // A call whose site is inside libc is glibc's own and gets no name.
        let libc_site = libc_function_address(&modules);
        let mut internal = ev(101, Kind::MutexLock, addr);
        internal.site = libc_site;
        assert!(namer.name(&internal).is_none());
    }

    /// A replay's software-gated accesses (`via` discovered) are named by their
    /// instruction, and with `counting_points_as_accesses` by their variable too,
    /// counted per thread: `read(LEVEL)#2` is the thread's second read of it
    /// whichever instruction made it.
    #[test]
    fn points_count_as_their_variables_accesses_when_asked() {
        static LEVEL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let modules = ordo_trace::symbolize::modules_of_process(std::process::id());
        let sym = Symbolizer::new(&modules);
        let threads = table();
        let addr = &LEVEL as *const _ as u64;
        let point = |site: u64| Event {
            via: Via::Point,
            site,
            result: 1,
            ..ev(101, Kind::Read, addr)
        };
        let sites = [
            points_count_as_their_variables_accesses_when_asked as *const () as u64,
            names_globals_of_this_process_by_symbol as *const () as u64,
        ];
        let spellings = |namer: &mut EventNamer| -> Vec<Vec<String>> {
            sites
                .iter()
                .map(|&site| {
                    namer
                        .name_all(&point(site))
                        .iter()
                        .map(|n| n.to_string())
                        .collect()
                })
                .collect()
        };
        let plain = spellings(&mut EventNamer::new(&threads, &sym));
        assert!(
            plain
                .iter()
                .all(|names| names.len() == 1 && names[0].starts_with("1:at(")),
            "{plain:?}"
        );
        let counted = spellings(&mut EventNamer::new(&threads, &sym).counting_points_as_accesses());
        for (n, names) in counted.iter().enumerate() {
            assert_eq!(names.len(), 3, "{names:?}");
            assert!(names[0].starts_with("1:at("), "{names:?}");
            assert!(
                names[1].starts_with("1:read(") && names[1].contains("LEVEL"),
                "{names:?}"
            );
            assert!(names[1].ends_with(&format!("#{}", n + 1)), "{names:?}");
            assert_eq!(names[2], format!("1:read(@1)#{}", n + 1));
        }
    }

    fn libc_function_address(modules: &[ordo_trace::schema::ModuleRecord]) -> u64 {
        let libc = modules
            .iter()
            .find(|m| {
                m.path
                    .rsplit('/')
                    .next()
                    .is_some_and(is_glibc_internal_module)
            })
            .expect("libc is mapped");
        // The first executable-looking mapping plus a little: inside libc's text.
        libc.mappings.iter().map(|m| m.start).max().unwrap() + 0x10
    }
}
