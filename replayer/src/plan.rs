//! A schedule compiled for the agent: its named events grouped by thread, each with
//! the events that must happen before it, symbols resolved against the program.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::Ordering;

use anyhow::{bail, Result};
use ordo_schedule::{EventRef, Family, ObjectRef, Schedule};
use ordo_trace::symbolize::demangle;
use ordo_trace::{Kind, LogicalId};

use crate::shm;

/// Kinds whose effect happens inside a blocking call, so the agent can only hold the
/// thread after the call returned (with the reacquired mutex or past the barrier).
pub fn gated_late(kind: Kind) -> bool {
    matches!(kind, Kind::CondWait | Kind::BarrierWait)
}

/// One symbol the schedule names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanSymbol {
    /// The symbol as written (`state+8`).
    pub text: String,
    /// The symbol's name.
    pub name: String,
    /// Byte offset into it.
    pub offset: u64,
    /// ELF virtual address in the main executable, when found there.
    pub vaddr: Option<u64>,
}

/// One named event.
#[derive(Clone, Debug)]
pub struct PlanEvent {
    /// The event (thread `*` for a `*` successor).
    pub event: EventRef,
    /// Index into [`Plan::threads`]; [`shm::EVERY_OTHER_THREAD`] for a `*` successor.
    pub thread: usize,
    /// Indices into [`Plan::events`] that must happen before it.
    pub preds: Vec<usize>,
}

impl PlanEvent {
    /// Whether this is a `*` successor.
    pub fn is_wild(&self) -> bool {
        self.event.thread.is_others()
    }
}

/// A schedule ready to be written into the agent's shared memory.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// Named events, grouped by thread (in [`Plan::threads`] order), then the `*`
    /// successors, one per ordering that has one.
    pub events: Vec<PlanEvent>,
    /// The named threads.
    pub threads: Vec<LogicalId>,
    /// The named symbols.
    pub symbols: Vec<PlanSymbol>,
    /// Instruction sites of the variables access events name (and of `at` points).
    pub sites: Vec<crate::access::AccessSite>,
    /// Per named thread: the sites it arms (indices into `sites`).
    pub arm: Vec<Vec<usize>>,
    /// `at(SPEC)` objects as written → the name a recording gives the point
    /// (`function+OFFSET`).
    pub mark_names: Vec<(String, String)>,
    /// Sites gated by the agent's software breakpoints instead of debug registers
    /// (a thread names more points than it has registers), `gate` set to their
    /// index in `sites`.
    pub soft: Vec<ordo_probe_common::inproc::SoftSite>,
}

impl Plan {
    /// Compiles `schedule` for `program` (whose symbol table resolves symbol names).
    /// Access events (`read`/`write`/`rmw`) and program points (`at`) still need
    /// their instruction sites: [`crate::access::plan_access_sites`] finds them.
    pub fn compile(schedule: &Schedule, program: &Path) -> Result<Plan> {
        let mut named: Vec<&EventRef> = Vec::new();
        // `*` successors: (ordering index, event).
        let mut wild: Vec<(usize, &EventRef)> = Vec::new();
        let mut seen: std::collections::HashSet<&EventRef> = std::collections::HashSet::new();
        for (i, o) in schedule.orderings.iter().enumerate() {
            for e in o.before.iter().chain(std::iter::once(&o.after)) {
                if e.thread.is_others() {
                    wild.push((i, e));
                } else if seen.insert(e) {
                    named.push(e);
                }
            }
        }
        // Threads, and events grouped by thread (stable within a thread). Names are
        // looked up in hash maps: a schedule may name thousands of threads.
        let mut threads: Vec<LogicalId> = Vec::new();
        let mut thread_index: HashMap<&LogicalId, usize> = HashMap::new();
        for e in &named {
            let Some(id) = e.thread.id() else { continue };
            if id.0.len() > shm::MAX_DEPTH {
                bail!(
                    "`{e}`: thread ids deeper than {} levels are not supported",
                    shm::MAX_DEPTH
                );
            }
            if !thread_index.contains_key(id) {
                thread_index.insert(id, threads.len());
                threads.push(id.clone());
            }
        }
        let thread_of = |e: &EventRef| e.thread.id().map(|id| thread_index[id]).unwrap_or(0);
        named.sort_by_key(|e| thread_of(e));
        let mut events: Vec<PlanEvent> = named
            .iter()
            .map(|e| PlanEvent {
                event: (*e).clone(),
                thread: thread_of(e),
                preds: Vec::new(),
            })
            .collect();
        let index: HashMap<&EventRef, usize> =
            named.iter().enumerate().map(|(i, e)| (*e, i)).collect();
        let mut wild_index: HashMap<usize, usize> = HashMap::new();
        for (o, e) in &wild {
            wild_index.insert(*o, events.len());
            events.push(PlanEvent {
                event: (*e).clone(),
                thread: shm::EVERY_OTHER_THREAD as usize,
                preds: Vec::new(),
            });
        }
        for (i, o) in schedule.orderings.iter().enumerate() {
            let after = if o.after.thread.is_others() {
                wild_index.get(&i).copied()
            } else {
                index.get(&o.after).copied()
            };
            let Some(after) = after else {
                continue;
            };
            for b in &o.before {
                if let Some(&before) = index.get(b) {
                    if !events[after].preds.contains(&before) {
                        events[after].preds.push(before);
                    }
                }
            }
        }
        // Symbols, resolved in the main executable when they are there; the agent asks
        // the dynamic linker for the others.
        let mut symbols: Vec<PlanSymbol> = Vec::new();
        let mut elf: Option<Option<Vec<u8>>> = None;
        for e in named.iter().copied().chain(wild.iter().map(|(_, e)| *e)) {
            let Some((name, offset)) = e.object.symbol_parts() else {
                continue;
            };
            let ObjectRef::Symbol(text) = &e.object else {
                continue;
            };
            if symbols.iter().any(|s| &s.text == text) {
                continue;
            }
            if name.len() >= shm::SYMBOL_LEN {
                bail!(
                    "`{e}`: the symbol name is longer than {} bytes",
                    shm::SYMBOL_LEN - 1
                );
            }
            let data = elf.get_or_insert_with(|| std::fs::read(program).ok());
            let vaddr = data.as_deref().and_then(|d| symbol_address(d, name));
            symbols.push(PlanSymbol {
                text: text.clone(),
                name: name.to_string(),
                offset,
                vaddr,
            });
        }
        let plan = Plan {
            events,
            threads,
            symbols,
            sites: Vec::new(),
            arm: Vec::new(),
            mark_names: Vec::new(),
            soft: Vec::new(),
        };
        plan.check_limits()?;
        Ok(plan)
    }

    fn check_limits(&self) -> Result<()> {
        let preds: usize = self.events.iter().map(|e| e.preds.len()).sum();
        if self.events.len() > shm::MAX_EVENTS {
            bail!(
                "the schedule names {} events; the replayer handles at most {}",
                self.events.len(),
                shm::MAX_EVENTS
            );
        }
        if preds > shm::MAX_PREDS {
            bail!(
                "the schedule has {preds} ordering edges; the replayer handles at most {}",
                shm::MAX_PREDS
            );
        }
        if self.threads.len() > shm::MAX_PLAN_THREADS {
            bail!(
                "the schedule names {} threads; the replayer handles at most {}",
                self.threads.len(),
                shm::MAX_PLAN_THREADS
            );
        }
        let wild = self.events.iter().filter(|e| e.is_wild()).count();
        if wild > shm::MAX_WILD {
            bail!(
                "the schedule has {wild} orderings with a `*` successor; the replayer handles at most {}",
                shm::MAX_WILD
            );
        }
        if self.symbols.len() > shm::MAX_SYMBOLS {
            bail!(
                "the schedule names {} symbols; the replayer handles at most {}",
                self.symbols.len(),
                shm::MAX_SYMBOLS
            );
        }
        // Any `@K` is fine: the agent keeps each thread's objects in a table that
        // grows (agent/preload/src/gate.rs, `ObjectTable`).
        Ok(())
    }

    /// Symbols the driver did not find in the main executable.
    pub fn unresolved_symbols(&self) -> impl Iterator<Item = &PlanSymbol> {
        self.symbols.iter().filter(|s| s.vaddr.is_none())
    }

    /// Writes the plan into a zeroed shared page.
    pub fn write_to(&self, sh: &mut shm::Shared, check_only: bool) {
        sh.magic = shm::MAGIC;
        sh.version = shm::VERSION;
        *sh.flags.get_mut() = if check_only { shm::FLAG_CHECK_ONLY } else { 0 };
        sh.n_events = self.events.len() as u32;
        sh.n_threads = self.threads.len() as u32;
        sh.n_symbols = self.symbols.len() as u32;
        let wild_first = self
            .events
            .iter()
            .position(PlanEvent::is_wild)
            .unwrap_or(self.events.len());
        sh.wild_first = wild_first as u32;
        sh.n_wild = (self.events.len() - wild_first) as u32;
        for (i, s) in self.symbols.iter().enumerate() {
            let slot = &mut sh.symbols[i];
            slot.name = [0; shm::SYMBOL_LEN];
            slot.name[..s.name.len()].copy_from_slice(s.name.as_bytes());
            slot.vaddr = s.vaddr.unwrap_or(0);
            slot.offset = s.offset;
        }
        let mut awaited = vec![false; self.events.len()];
        for p in self.events.iter().flat_map(|e| &e.preds) {
            awaited[*p] = true;
        }
        let mut per_thread: BTreeMap<usize, (u32, u32)> = BTreeMap::new();
        let mut pred_next = 0usize;
        for (i, e) in self.events.iter().enumerate() {
            if !e.is_wild() {
                let entry = per_thread.entry(e.thread).or_insert((i as u32, 0));
                entry.1 += 1;
            }
            let family = Family::of(e.event.kind);
            let (object_kind, object) = match &e.event.object {
                ObjectRef::None => (shm::OBJ_NONE, 0),
                ObjectRef::Nth(k) => (shm::OBJ_NTH, *k),
                ObjectRef::Symbol(text) => (
                    shm::OBJ_SYMBOL,
                    self.symbols
                        .iter()
                        .position(|s| &s.text == text)
                        .unwrap_or(0) as u32,
                ),
            };
            let out = &mut sh.events[i];
            out.plan_thread = e.thread as u32;
            out.kind = e.event.kind as u16 | if e.event.after { shm::AFTER_POINT } else { 0 };
            out.family = family.index() as u8;
            out.object_kind = object_kind;
            out.object = object;
            out.occurrence = e.event.occurrence;
            out.gated = u32::from(!e.preds.is_empty());
            out.awaited = u32::from(awaited[i]);
            out.pred_start = pred_next as u32;
            out.pred_count = e.preds.len() as u32;
            for p in &e.preds {
                sh.preds[pred_next] = *p as u32;
                pred_next += 1;
            }
            if let ObjectRef::Nth(k) = e.event.object {
                let kmax = &mut sh.kmax[family.index()];
                *kmax = (*kmax).max(k);
            }
        }
        sh.n_preds = pred_next as u32;
        for (i, id) in self.threads.iter().enumerate() {
            let t = &mut sh.threads[i];
            t.depth = id.0.len() as u32;
            for (d, n) in id.0.iter().enumerate() {
                t.path[d] = *n;
            }
            let (first, count) = per_thread.get(&i).copied().unwrap_or((0, 0));
            t.first_event = first;
            t.event_count = count;
            let arm = self.arm.get(i).map(Vec::as_slice).unwrap_or(&[]);
            for (slot, site) in arm.iter().take(shm::MAX_ARMED_SITES).enumerate() {
                t.arm[slot] = *site as u32;
            }
            t.n_arm = arm.len().min(shm::MAX_ARMED_SITES) as u32;
        }
        sh.n_sites = self.sites.len().min(shm::MAX_ACCESS_SITES) as u32;
        for (out, s) in sh.sites.iter_mut().zip(&self.sites) {
            out.site = shared_site(&s.site);
            out.symbol = s.symbol as u32;
            out.kind = s.kind as u16;
            out.via_register = u16::from(s.via_register);
        }
    }

    /// The named events the agent saw happen, in the order it stamped them: each
    /// thread's instance of a `*` successor under the thread's own id.
    pub fn observed(&self, sh: &shm::Shared) -> Vec<EventRef> {
        let mut done: Vec<(u64, EventRef)> = Vec::new();
        for (i, e) in self.events.iter().enumerate() {
            if !e.is_wild() && sh.events[i].done.load(Ordering::Acquire) != 0 {
                done.push((sh.events[i].stamp.load(Ordering::Relaxed), e.event.clone()));
            }
        }
        let wild: Vec<&PlanEvent> = self.events.iter().filter(|e| e.is_wild()).collect();
        if !wild.is_empty() {
            let n = (sh.n_slots.load(Ordering::Acquire) as usize).min(shm::MAX_SLOTS);
            for slot in &sh.slots[..n] {
                let depth = slot.depth.load(Ordering::Relaxed) as usize;
                if depth > shm::MAX_DEPTH || slot.tid.load(Ordering::Acquire) == 0 {
                    continue;
                }
                let id = LogicalId(
                    slot.path[..depth]
                        .iter()
                        .map(|p| p.load(Ordering::Relaxed))
                        .collect(),
                );
                for (w, e) in wild.iter().enumerate() {
                    let stamp = slot.wild_stamp[w].load(Ordering::Acquire);
                    if stamp != 0 {
                        done.push((stamp, e.event.in_thread(id.clone())));
                    }
                }
            }
        }
        done.sort_by_key(|(stamp, _)| *stamp);
        done.into_iter().map(|(_, e)| e).collect()
    }
}

/// The same site in the shared page's copy of the probe layout (one source file,
/// compiled into this crate twice: as `ordo_probe_common` and inside [`shm`]).
fn shared_site(s: &ordo_probe_common::WatchSite) -> shm::probe_common::WatchSite {
    shm::probe_common::WatchSite {
        watch_addr: s.watch_addr,
        disp: s.disp,
        imm: s.imm,
        ip: s.ip,
        watch_len: s.watch_len,
        base: s.base,
        index: s.index,
        scale: s.scale,
        size: s.size,
        access: s.access,
        value_reg: s.value_reg,
        value_is_imm: s.value_is_imm,
        _pad: s._pad,
        via: s.via,
        relative: s.relative,
        _reserved: s._reserved,
    }
}

/// The address of a data symbol in an ELF file, by raw or demangled name. Raw names
/// are tried first: short C names like `m` or `x` also read as mangled C++ types.
fn symbol_address(data: &[u8], name: &str) -> Option<u64> {
    use object::{Object, ObjectSymbol, SymbolKind};
    let file = object::File::parse(data).ok()?;
    let candidates = || {
        file.symbols().chain(file.dynamic_symbols()).filter(|s| {
            matches!(
                s.kind(),
                SymbolKind::Data | SymbolKind::Tls | SymbolKind::Unknown
            ) && s.address() != 0
        })
    };
    candidates()
        .find(|s| s.name() == Ok(name))
        .or_else(|| candidates().find(|s| s.name().is_ok_and(|n| demangle(n) == name)))
        .map(|s| s.address())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_events_by_thread_with_predecessors() {
        let s = Schedule::parse(
            "1:mutex_lock(@1)#1 -> 2:mutex_lock(@1)#1\n\
             2:mutex_unlock(@1)#1 && 0:thread_create(@2)#2 -> 1:mutex_lock(@1)#2\n\
             1:mutex_lock(@1)#1 -> 1:mutex_lock(@1)#2\n",
        )
        .unwrap();
        let plan = Plan::compile(&s, Path::new("/nonexistent")).unwrap();
        assert_eq!(plan.threads.len(), 3);
        // Grouped: thread 1's events first (it is named first), then 2, then 0.
        let names: Vec<String> = plan.events.iter().map(|e| e.event.to_string()).collect();
        assert_eq!(
            names,
            [
                "1:mutex_lock(@1)#1",
                "1:mutex_lock(@1)#2",
                "2:mutex_lock(@1)#1",
                "2:mutex_unlock(@1)#1",
                "0:thread_create(@2)#2"
            ]
        );
        assert_eq!(plan.events[1].preds, vec![3, 4, 0]);
        assert_eq!(plan.events[2].preds, vec![0]);
        assert!(plan.events[0].preds.is_empty());
    }

    #[test]
    fn star_successors_follow_the_named_threads() {
        let s = Schedule::parse(
            "1:mutex_unlock(@1)#1 -> *:mutex_lock(@1)#1\n\
             1:mutex_unlock(@1)#1 && 2:sem_post(@1)#1 -> *:thread_start()#1\n\
             2:mutex_lock(@1)#1 -> 1:mutex_lock(@1)#2\n",
        )
        .unwrap();
        let plan = Plan::compile(&s, Path::new("/nonexistent")).unwrap();
        let names: Vec<String> = plan.events.iter().map(|e| e.event.to_string()).collect();
        assert_eq!(
            names,
            [
                "1:mutex_unlock(@1)#1",
                "1:mutex_lock(@1)#2",
                "2:sem_post(@1)#1",
                "2:mutex_lock(@1)#1",
                "*:mutex_lock(@1)#1",
                "*:thread_start()#1",
            ]
        );
        assert_eq!(plan.threads.len(), 2);
        assert!(plan.events[4].is_wild() && plan.events[4].preds == [0]);
        assert_eq!(plan.events[5].preds, [0, 2]);
        assert_eq!(plan.events[1].preds, [3]);
    }

    #[test]
    fn a_thousand_named_threads_fit() {
        let text: String = (1..=1024)
            .map(|t| format!("0:mutex_unlock(m)#1 -> {t}:mutex_lock(m)#1\n{t}:mutex_unlock(m)#1 -> 0:thread_join(@{})#1\n", (t - 1) % 32 + 1))
            .collect();
        let s = Schedule::parse(&text).unwrap();
        let plan = Plan::compile(&s, Path::new("/nonexistent")).unwrap();
        assert_eq!(plan.threads.len(), 1025);
        let mut memory = crate::shared::SharedMemory::create().unwrap();
        plan.write_to(memory.get_mut(), false);
        assert_eq!(memory.get().n_threads, 1025);
    }

    #[test]
    fn objects_beyond_the_first_32_of_a_family_are_planned() {
        // The agent names them through its per-thread table (no limit since issue 12).
        let deep = Schedule::parse("1:mutex_lock(@300)#1 -> 2:mutex_lock(@1)#1").unwrap();
        assert!(Plan::compile(&deep, Path::new("/nonexistent")).is_ok());
    }
}

#[cfg(test)]
mod layout_tests {
    use crate::shm;
    use ordo_schedule::Family;
    use ordo_trace::Kind;

    #[test]
    fn agent_codes_match_the_trace_and_schedule_crates() {
        use ordo_probe_common::kind as k;
        assert_eq!(
            (
                shm::kind::MUTEX_LOCK,
                shm::kind::COND_WAIT_BEGIN,
                shm::kind::THREAD_START,
                shm::kind::FUTEX_WAKE,
                shm::kind::RMW
            ),
            (
                k::MUTEX_LOCK,
                k::COND_WAIT_BEGIN,
                k::THREAD_START,
                k::FUTEX_WAKE,
                k::RMW
            )
        );
        assert_eq!(Family::ALL.len(), shm::FAMILIES);
        for &kind in Kind::ALL {
            assert_eq!(
                shm::family_of(kind as u16),
                Family::of(kind).index(),
                "{}",
                kind.name()
            );
        }
        // Every kind the agent stamps at entry is one the recorder sequences at entry.
        assert!(
            shm::stamps_before(Kind::MutexUnlock as u16)
                && !shm::stamps_before(Kind::MutexLock as u16)
        );
    }
}
