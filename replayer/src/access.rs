//! Memory-access gates, driver half: the instructions the agent arms for the
//! `read`/`write`/`rmw` events a schedule names.
//!
//! For every variable an access event names, the driver resolves it in the program
//! (the same resolver as `ordo record --watch`) and lists the instructions that can
//! access it: the watch planner's statically decoded sites, plus — for variables
//! reached through pointers, which decoding cannot follow — the sites recorded in a
//! trace of the program (`--sites-from`; a hardware watchpoint records the
//! instruction after the access, so the accessing one is decoded back from it).
//! Each thread named by an access event arms the sites of the kinds and variables it
//! names, one x86 debug register each: more than [`shm::MAX_ARMED_SITES`] in one
//! thread is an error before the program starts. The agent's side is
//! `agent/preload/src/trap.rs`.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Result};
use ordo_probe_common::inproc::SoftSite;
use ordo_probe_common::WatchSite;
use ordo_recorder::launch;
use ordo_recorder::watch::{
    access_at, access_ending_at, plan_sites, resolve_mark, PlannedSite, ResolvedWatch, Resolver,
    WatchSpec, WatchTarget,
};
use ordo_schedule::EventNamer;
use ordo_schedule::{EventRef, ObjectRef, Schedule, ThreadRef};
use ordo_trace::symbolize::Symbolizer;
use ordo_trace::{global_order, read_trace, Kind, ReadMode};

use crate::plan::Plan;
use crate::shm;

/// Where the instructions of watched variables come from.
#[derive(Clone, Debug, Default)]
pub struct AccessWatches {
    /// `--watch` specs: sizes and fields for the variables the schedule names (a
    /// variable the schedule names needs no spec: its whole extent is used).
    pub watch: Vec<String>,
    /// `--watch-hw` specs: variables also reached through pointers. Their sites
    /// come from a recording (`sites_from`), besides the decoded ones.
    pub watch_hw: Vec<String>,
    /// A recording of the program whose recorded access sites are armed too.
    pub sites_from: Option<PathBuf>,
}

/// One instruction the agent may arm.
#[derive(Clone, Debug)]
pub struct AccessSite {
    /// The instruction and its operand, link-time addresses of the main executable;
    /// `site.ip` is the accessing instruction.
    pub site: WatchSite,
    /// Index into [`Plan::symbols`]: the variable.
    pub symbol: usize,
    /// The kind the schedule's events of this site count as.
    pub kind: Kind,
    /// The operand goes through registers: the agent checks the address it reaches.
    pub via_register: bool,
    /// The instruction, for messages.
    pub instruction: String,
}

/// Finds the sites of every variable the plan's access events name, and which
/// sites each named thread arms. With `required`, an access event no site can serve
/// is an error; without (a passive check on a recording), it is left to the
/// recording.
pub fn plan_access_sites(
    plan: &mut Plan,
    schedule: &Schedule,
    program: &Path,
    watches: &AccessWatches,
    required: bool,
) -> Result<Vec<String>> {
    // Where an event is first named, for messages.
    let line_of = |e: &EventRef| -> String {
        schedule
            .orderings
            .iter()
            .find(|o| {
                o.before
                    .iter()
                    .chain(std::iter::once(&o.after))
                    .any(|x| x == e)
            })
            .map(|o| format!("schedule line {}: ", o.line))
            .unwrap_or_default()
    };
    let mut notes = Vec::new();
    let accesses: Vec<usize> = (0..plan.events.len())
        .filter(|&i| plan.events[i].event.kind.is_access())
        .collect();
    let marks: Vec<usize> = (0..plan.events.len())
        .filter(|&i| plan.events[i].event.kind == Kind::At)
        .collect();
    if accesses.is_empty() && marks.is_empty() {
        return Ok(notes);
    }
    for &i in accesses.iter().chain(&marks) {
        let e = &plan.events[i].event;
        if plan.events[i].is_wild() {
            bail!(
                "{}`{e}`: a `*` thread cannot be used for {} events: they are gated by breakpoints each named thread arms",
                line_of(e),
                e.kind.name()
            );
        }
        if !matches!(e.object, ObjectRef::Symbol(_)) {
            bail!(
                "{}`{e}`: name the variable (`read(flag)`): the replayer gates accesses of variables it can \
                 resolve by name, and `@K` of watched variables is not counted in replay",
                line_of(e)
            );
        }
    }
    let libs = launch::needed_libraries(program);
    let mut resolver = Resolver::new(program, &libs).map_err(|e| anyhow!("{e}"))?;
    let main_binary = std::fs::canonicalize(program).unwrap_or_else(|_| program.to_path_buf());
    let specs = |list: &[String], option: &str| -> Result<Vec<(String, WatchSpec)>> {
        list.iter()
            .map(|t| {
                WatchSpec::parse(t)
                    .map(|s| (t.clone(), s))
                    .map_err(|e| anyhow!("{option} {t}: {e}"))
            })
            .collect()
    };
    let mut given: Vec<(bool, ResolvedWatch)> = Vec::new();
    for (hw, option, list) in [
        (false, "--watch", &watches.watch),
        (true, "--watch-hw", &watches.watch_hw),
    ] {
        for (text, spec) in specs(list, option)? {
            let resolved = resolver
                .resolve(&spec)
                .map_err(|e| anyhow!("{option} {text}: {e}"))?;
            given.push((hw, resolved));
        }
    }
    let recorded: Vec<RecordedAccess> = match &watches.sites_from {
        Some(trace) => recorded_accesses(trace)?,
        None => Vec::new(),
    };
    let program_name = main_binary
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut sites: Vec<AccessSite> = Vec::new();
    // (variable, kind, recorded link-time site) → index into `sites`.
    let mut site_of_recorded: HashMap<(String, Kind, u64), usize> = HashMap::new();
    let variables: BTreeSet<String> = accesses
        .iter()
        .map(|&i| plan.events[i].event.object.to_string())
        .collect();
    for text in &variables {
        let object = ObjectRef::Symbol(text.clone());
        let first = accesses
            .iter()
            .map(|&i| &plan.events[i].event)
            .find(|e| e.object == object)
            .map(|e| format!("{}`{e}`: ", line_of(e)))
            .unwrap_or_default();
        let (name, offset) = object.symbol_parts().unwrap_or((text.as_str(), 0));
        let symbol = plan
            .symbols
            .iter()
            .position(|s| &s.text == text)
            .ok_or_else(|| anyhow!("`{text}`: not among the plan's symbols"))?;
        let spec = WatchSpec {
            target: WatchTarget::Symbol(name.to_string()),
            offset,
            size: (offset != 0).then_some(1),
            file: None,
            fields: Vec::new(),
        };
        let mut resolved = match resolver.resolve(&spec) {
            Ok(r) => r,
            Err(e) => match field_or_bytes(&mut resolver, text, offset) {
                // A field (`conn.buf`), bytes (`conn+8:8`), or the first field of a
                // variable larger than a watch (`conn`, as a recording of
                // `--watch-hw conn.id` names it: the object is the address).
                Some(r) => {
                    plan.symbols[symbol].vaddr = Some(r.vaddr);
                    plan.symbols[symbol].offset = 0;
                    r
                }
                None => return Err(anyhow!("{first}{e}")),
            },
        };
        let mut hw = false;
        if let Some((is_hw, g)) = given
            .iter()
            .find(|(_, g)| g.module == resolved.module && g.vaddr == resolved.vaddr)
        {
            hw = *is_hw;
            resolved = g.clone();
        }
        if std::fs::canonicalize(&resolved.module).unwrap_or(resolved.module.clone()) != main_binary
        {
            bail!(
                "{first}`{text}` is in {}: only variables of the program itself can be gated",
                resolved.module.display()
            );
        }
        if resolved.through_pointer.is_some() {
            // Its decoded sites address the field relative to a register (each object
            // the pointer reaches), which a breakpoint's address check cannot follow.
            bail!(
                "{first}`{text}` is reached through a pointer (`->`): such accesses are \
                 gated at the sites a recording saw (--watch-hw on the object and --sites-from TRACE)"
            );
        }
        let planned = plan_sites(&resolved).map_err(|e| anyhow!("`{text}`: {e}"))?;
        let mut found: Vec<AccessSite> = planned
            .sites
            .iter()
            .chain(planned.unprobeable.iter())
            .filter_map(|p| access_site(p, symbol, None))
            .collect();
        if hw || watches.sites_from.is_some() {
            let Some(trace) = &watches.sites_from else {
                bail!(
                    "--watch-hw {text}: accesses through pointers are gated at the sites a recording saw: \
                     add --sites-from TRACE (a recording of the program with --watch-hw {text})"
                );
            };
            let mut seen = BTreeSet::new();
            for r in &recorded {
                if r.var != *text || r.module != program_name || !seen.insert((r.kind, r.vaddr)) {
                    continue;
                }
                let vaddr = &r.vaddr;
                let key = (text.clone(), r.kind, r.vaddr);
                // A watch uprobe records the accessing instruction: a decoded site.
                if let Some(at) = found
                    .iter()
                    .position(|f| f.site.ip == r.vaddr && f.kind == r.kind)
                {
                    site_of_recorded.insert(key, sites.len() + at);
                    continue;
                }
                // A hardware watch records the accessing instruction (the recorder
                // decodes the trap); traces from before that record the one after it.
                let decoded = match access_at(&resolved, *vaddr).map_err(|e| anyhow!("{e}"))? {
                    Some(site) => Some(site),
                    None => access_ending_at(&resolved, *vaddr).map_err(|e| anyhow!("{e}"))?,
                };
                let Some(p) = decoded else {
                    notes.push(format!(
                        "warning: {}: the recorded access site {vaddr:#x} of `{text}` is not after a decodable access; not armed",
                        trace.display()
                    ));
                    continue;
                };
                if let Some(site) = access_site(&p, symbol, Some(r.kind)) {
                    let at = match found
                        .iter()
                        .position(|f| f.site.ip == site.site.ip && f.kind == site.kind)
                    {
                        Some(at) => at,
                        None => {
                            found.push(site);
                            found.len() - 1
                        }
                    };
                    site_of_recorded.insert(key, sites.len() + at);
                }
            }
        }
        sites.extend(found);
    }
    // Program points (`at(SPEC)`): one instruction each; the agent gates it like an
    // access, with the point's runtime address as its object.
    let mut mark_names = Vec::new();
    for &i in &marks {
        let text = plan.events[i].event.object.to_string();
        let Some(symbol) = plan.symbols.iter().position(|s| s.text == text) else {
            continue;
        };
        if sites.iter().any(|s| s.symbol == symbol) {
            continue;
        }
        let mark = resolve_mark(&text, program).map_err(|e| {
            anyhow!(
                "{}`{}`: {e}",
                line_of(&plan.events[i].event),
                plan.events[i].event
            )
        })?;
        let offset = plan.symbols[symbol].offset;
        plan.symbols[symbol].vaddr = Some(mark.vaddr - offset);
        sites.push(AccessSite {
            site: mark.watch_site(),
            symbol,
            kind: Kind::At,
            via_register: false,
            instruction: format!("{} ({:#x})", mark.name, mark.vaddr),
        });
        mark_names.push((text, mark.name));
    }
    plan.mark_names = mark_names;
    // What each named thread arms.
    let mut arm: Vec<Vec<usize>> = vec![Vec::new(); plan.threads.len()];
    for &i in accesses.iter().chain(&marks) {
        let e = &plan.events[i];
        let symbol = plan
            .symbols
            .iter()
            .position(|s| s.text == e.event.object.to_string())
            .unwrap_or(usize::MAX);
        let mut serving: Vec<usize> = (0..sites.len())
            .filter(|&s| sites[s].symbol == symbol && sites[s].kind == e.event.kind)
            .collect();
        // With a recording: only the sites this thread's accesses up to the named one
        // were made at (same input, same path), when the recording has them all.
        if let Some(used) = recorded_sites_of(&recorded, &e.event, &site_of_recorded) {
            serving = used;
        }
        if serving.is_empty() {
            if !required {
                continue;
            }
            bail!(
                "{}`{}`: no instruction of {} {} `{}` (found by decoding the program{}); \
                 for accesses through pointers record with --watch-hw and pass that trace as --sites-from",
                line_of(&e.event),
                e.event,
                program.display(),
                match e.event.kind {
                    Kind::Read => "reads",
                    Kind::Write => "writes",
                    _ => "read-modify-writes",
                },
                e.event.object,
                if watches.sites_from.is_some() {
                    " or in the recording"
                } else {
                    ""
                }
            );
        }
        for s in serving {
            if !arm[e.thread].contains(&s) {
                arm[e.thread].push(s);
            }
        }
    }
    // A thread naming more sites than it has debug registers: the sites of such
    // threads that the agent can run out of line (memory-access instructions) are
    // gated by its software breakpoints instead, for every thread.
    if arm.iter().any(|l| l.len() > shm::MAX_ARMED_SITES) {
        let eligible: HashMap<u64, SoftSite> = ordo_recorder::discover::plan_discovery(program)?
            .sites
            .into_iter()
            .map(|s| (s.ip, s))
            .collect();
        let mut soft = BTreeSet::new();
        for list in arm.iter().filter(|l| l.len() > shm::MAX_ARMED_SITES) {
            soft.extend(
                list.iter()
                    .copied()
                    .filter(|&s| eligible.contains_key(&sites[s].site.ip)),
            );
        }
        for list in &mut arm {
            list.retain(|s| !soft.contains(s));
        }
        plan.soft = soft
            .iter()
            .map(|&s| SoftSite {
                gate: s as u32,
                ..eligible[&sites[s].site.ip]
            })
            .collect();
    }
    for (t, list) in arm.iter().enumerate() {
        if list.len() > shm::MAX_ARMED_SITES {
            let what: Vec<String> = list
                .iter()
                .map(|&s| {
                    format!(
                        "{} {} at {:#x} (`{}`)",
                        sites[s].kind.name(),
                        plan.symbols[sites[s].symbol].text,
                        sites[s].site.ip,
                        sites[s].instruction
                    )
                })
                .collect();
            bail!(
                "thread {} would arm {} instruction sites, but x86 has {} debug registers per thread and \
                 these are not memory-access instructions the agent can gate by software breakpoints: {}; \
                 name fewer access kinds or variables for this thread",
                plan.threads[t],
                list.len(),
                shm::MAX_ARMED_SITES,
                what.join(", ")
            );
        }
    }
    if sites.len() > shm::MAX_ACCESS_SITES {
        bail!(
            "the schedule's variables have {} access sites; the replayer handles at most {}",
            sites.len(),
            shm::MAX_ACCESS_SITES
        );
    }
    plan.sites = sites;
    plan.arm = arm;
    Ok(notes)
}

/// What an access event's object names when it is not a whole variable of at most
/// a watch's size: a `--watch` spec (`conn.buf`, `conn+8:8`, `table[2]`), or the
/// byte at `NAME+OFFSET` of a larger variable — how a recording names an access
/// (the object is its address, `symbol+offset`), so every schedule `ordo analyze`
/// prints replays as printed.
fn field_or_bytes(resolver: &mut Resolver, text: &str, offset: u64) -> Option<ResolvedWatch> {
    if let Ok(spec) = WatchSpec::parse(text) {
        if let Ok(r) = resolver.resolve(&spec) {
            return Some(r);
        }
    }
    let (name, _) = ordo_recorder::watch::split_offset(text).ok()?;
    let spec = WatchSpec {
        target: WatchTarget::Symbol(name.to_string()),
        offset,
        size: Some(1),
        file: None,
        fields: Vec::new(),
    };
    resolver.resolve(&spec).ok()
}

fn access_site(p: &PlannedSite, symbol: usize, kind: Option<Kind>) -> Option<AccessSite> {
    let kind = kind.or_else(|| Kind::from_code(p.site.access as u16))?;
    let mut site = p.site;
    // Armed on the accessing instruction itself, wherever a uprobe would sit.
    site.ip = p.access_ip;
    Some(AccessSite {
        site,
        symbol,
        kind,
        via_register: p.via_register,
        instruction: p.instruction.clone(),
    })
}

/// One access in a recording, named as the schedule names it.
struct RecordedAccess {
    thread: ThreadRef,
    kind: Kind,
    var: String,
    occurrence: u32,
    /// File name of the module holding the site.
    module: String,
    /// Link-time address of the recorded site.
    vaddr: u64,
}

/// Every access of a recording, with its schedule name and site.
fn recorded_accesses(trace: &Path) -> Result<Vec<RecordedAccess>> {
    let (reader, events) = read_trace(trace, ReadMode::Salvage)
        .map_err(|e| anyhow!("--sites-from {}: {e}", trace.display()))?;
    let symbolizer = Symbolizer::of_trace(&reader);
    let mut namer = EventNamer::new(&reader.threads, &symbolizer);
    let mut out = Vec::new();
    for e in global_order(events) {
        let Some(name) = namer.name(&e) else { continue };
        if !e.kind.is_access() {
            continue;
        }
        let (ObjectRef::Symbol(var), Some(loc)) = (&name.object, symbolizer.locate(e.site, false))
        else {
            continue;
        };
        out.push(RecordedAccess {
            thread: name.thread.clone(),
            kind: e.kind,
            var: var.clone(),
            occurrence: name.occurrence,
            module: loc.module,
            vaddr: loc.offset,
        });
    }
    Ok(out)
}

/// The sites `event`'s thread made its accesses of that kind and variable at, up to
/// the named occurrence, in the recording; `None` unless the recording has every
/// one of them at a known site.
fn recorded_sites_of(
    recorded: &[RecordedAccess],
    event: &EventRef,
    site_of: &HashMap<(String, Kind, u64), usize>,
) -> Option<Vec<usize>> {
    let var = event.object.to_string();
    let mut used = Vec::new();
    let mut seen = 0;
    for r in recorded {
        if r.thread != event.thread
            || r.kind != event.kind
            || r.var != var
            || r.occurrence > event.occurrence
        {
            continue;
        }
        let site = *site_of.get(&(var.clone(), r.kind, r.vaddr))?;
        if !used.contains(&site) {
            used.push(site);
        }
        seen += 1;
    }
    (seen == event.occurrence as usize).then_some(used)
}
