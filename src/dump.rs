//! `ordo dump`: print a trace's events, symbolized, in an order consistent with
//! happens-before; or as JSON lines; or totals.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use ordo_trace::symbolize::Symbolizer;
use ordo_trace::text::escape;
use ordo_trace::thread::kernel_tid;
use ordo_trace::{global_order, read_trace, Event, Kind, ReadMode, ThreadTable};
use serde_json::{json, Map, Value};

/// Arguments of `ordo dump`.
#[derive(Args)]
pub struct DumpArgs {
    /// The trace file.
    pub trace: PathBuf,
    /// One JSON object per event.
    #[arg(long)]
    pub json: bool,
    /// Totals only.
    #[arg(long)]
    pub stats: bool,
    /// Read a damaged trace up to its last intact chunk instead of failing.
    #[arg(long)]
    pub salvage: bool,
}

pub fn run(args: DumpArgs) -> Result<u8> {
    let mode = if args.salvage {
        ReadMode::Salvage
    } else {
        ReadMode::Strict
    };
    let (reader, events) =
        read_trace(&args.trace, mode).map_err(|e| crate::analyze::salvage_hint(e, mode))?;
    if let Some(cut) = &reader.cut_short {
        crate::print_error_line(&format!("ordo: warning: {}", escape(&cut.to_string())));
    }
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    if args.stats {
        let mut by_kind: BTreeMap<&str, u64> = BTreeMap::new();
        for e in &events {
            *by_kind.entry(e.kind.name()).or_insert(0) += 1;
        }
        let stats = json!({
            "events": events.len(),
            "lost": reader.dropped,
            "threads": reader.threads.len(),
            "by_kind": by_kind,
            // From the first to the last event: how long the recorded run took,
            // without the recorder's own start-up and shutdown.
            "span_ns": events.iter().map(|e| e.ts_ns).max().unwrap_or(0) - events.iter().map(|e| e.ts_ns).min().unwrap_or(0),
        });
        if args.json {
            writeln!(out, "{stats}")?;
        } else {
            writeln!(
                out,
                "events {}  lost {}  threads {}",
                events.len(),
                reader.dropped,
                reader.threads.len()
            )?;
            for (k, n) in &by_kind {
                writeln!(out, "  {k:<20} {n}")?;
            }
        }
        out.flush()?;
        return Ok(0);
    }
    let symbolizer = Symbolizer::of_trace(&reader);
    let events = global_order(events);
    let handles = thread_handles(&events);
    let start = reader.header.start_monotonic_ns;
    if !args.json {
        writeln!(
            out,
            "# {} — pid {}, {} threads, {} events, {} lost{}",
            escape(&reader.header.command.join(" ")),
            reader.header.pid,
            reader.threads.len(),
            events.len(),
            reader.dropped,
            if reader.header.sparse_times {
                " (--sparse-times: times are lower bounds, order exact)"
            } else {
                ""
            }
        )?;
        for t in reader.threads.iter() {
            writeln!(
                out,
                "# thread {:<6} tid {:<8} {}",
                t.logical.to_string(),
                kernel_tid(t.tid),
                escape(&t.name)
            )?;
        }
    }
    let mut names: HashMap<u64, Option<String>> = HashMap::new();
    let mut sites: HashMap<u64, String> = HashMap::new();
    let mut chains: HashMap<u64, Vec<String>> = HashMap::new();
    for (i, e) in events.iter().enumerate() {
        let joined = handles.get(&i).copied();
        let object = names
            .entry(e.addr)
            .or_insert_with(|| symbolizer.data_name(e.addr))
            .clone();
        // Accesses and marks carry the instruction's address; other events a return address.
        let site = if e.kind.site_is_instruction() {
            symbolizer
                .locate(e.site, false)
                .map(|l| l.to_string())
                .unwrap_or_else(|| format!("{:#x}", e.site))
        } else {
            sites
                .entry(e.site)
                .or_insert_with(|| symbolizer.site_text(e.site))
                .clone()
        };
        if args.json {
            let mut json = event_json(e, &reader.threads, joined, object, site);
            // Inlined library code (C++ std::mutex, Rust std): the site names the
            // program's own frame; the whole chain is kept here, innermost first.
            let chain = chains
                .entry(e.site)
                .or_insert_with(|| {
                    symbolizer
                        .locate(e.site, !e.kind.is_access())
                        .map(|l| l.inline_chain.iter().map(|f| f.to_string()).collect())
                        .unwrap_or_default()
                })
                .clone();
            if !chain.is_empty() {
                json.insert("site_chain".into(), Value::from(chain));
            }
            writeln!(out, "{}", Value::Object(json))?;
        } else {
            // Symbols and module paths come from files the trace names: escaped.
            writeln!(
                out,
                "{}",
                escape(&event_text(
                    e,
                    start,
                    &reader.threads,
                    joined,
                    object,
                    &site
                ))
            )?;
        }
    }
    out.flush()?;
    Ok(0)
}

/// For each thread_join (by position in `events`, which is in global order), the
/// kernel tid it joined: the latest thread created with the same pthread_t before it
/// (glibc reuses a joined thread's descriptor for later threads).
fn thread_handles(events: &[Event]) -> HashMap<usize, u32> {
    let mut latest: HashMap<u64, u32> = HashMap::new();
    let mut joined = HashMap::new();
    for (i, e) in events.iter().enumerate() {
        if let Some(child) = e.child_tid() {
            latest.insert(e.addr, child);
        } else if e.kind == Kind::ThreadJoin {
            if let Some(&child) = latest.get(&e.addr) {
                joined.insert(i, child);
            }
        }
    }
    joined
}

fn logical(threads: &ThreadTable, tid: u32) -> String {
    threads
        .by_tid(tid)
        .map(|t| t.logical.to_string())
        .unwrap_or_else(|| format!("tid{tid}"))
}

fn event_json(
    e: &Event,
    threads: &ThreadTable,
    joined: Option<u32>,
    object: Option<String>,
    site: String,
) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("thread".into(), json!(logical(threads, e.tid)));
    m.insert("tid".into(), json!(kernel_tid(e.tid)));
    m.insert("kind".into(), json!(e.kind.name()));
    m.insert("addr".into(), json!(format!("{:#x}", e.addr)));
    if let Some(name) = object {
        m.insert("object".into(), json!(name));
    }
    m.insert("site".into(), json!(site));
    m.insert("ts_ns".into(), json!(e.ts_ns));
    if e.kind.is_sequenced() {
        m.insert("seq".into(), json!(e.seq));
    }
    match e.kind {
        Kind::MutexLock
        | Kind::MutexLockFailed
        | Kind::RwlockRdlock
        | Kind::RwlockWrlock
        | Kind::RwlockLockFailed
        | Kind::MutexUnlock => {
            m.insert("via".into(), json!(e.via.name()));
        }
        Kind::Read | Kind::Write | Kind::Rmw => {
            m.insert("atomic".into(), json!(e.via.is_atomic()));
            if e.via.is_point() {
                // A discovered access: its thread's arrival count at the instruction
                // (the `#N` of `at(function+OFFSET)#N`).
                m.insert("arrival".into(), json!(e.result));
                m.insert("size".into(), json!(e.size));
            }
        }
        _ => {}
    }
    if matches!(e.kind, Kind::CondWaitBegin | Kind::CondWait)
        || (e.via == ordo_trace::Via::CondWait && e.addr2 != 0)
    {
        let key = if matches!(e.kind, Kind::CondWaitBegin | Kind::CondWait) {
            "mutex"
        } else {
            "cond"
        };
        m.insert(key.into(), json!(format!("{:#x}", e.addr2)));
    }
    if e.kind.has_result() {
        m.insert("result".into(), json!(e.result));
    }
    match e.kind {
        Kind::ThreadCreate => {
            if let Some(child) = e.child_tid() {
                m.insert("child".into(), json!(logical(threads, child)));
                m.insert("child_tid".into(), json!(kernel_tid(child)));
            }
        }
        Kind::ThreadJoin => {
            if let Some(child) = joined {
                m.insert("joined".into(), json!(logical(threads, child)));
            }
        }
        Kind::Read | Kind::Write | Kind::Rmw => {
            m.insert("value".into(), json!(e.value));
            m.insert("size".into(), json!(e.size));
        }
        Kind::FutexWait | Kind::FutexWake => {
            m.insert("futex_op".into(), json!(e.addr2));
            m.insert("value".into(), json!(e.value));
        }
        Kind::Blocked => {
            if let Some(waited) = Kind::from_code(e.value as u16) {
                m.insert("waiting_in".into(), json!(waited.name()));
            }
        }
        _ => {}
    }
    m
}

fn event_text(
    e: &Event,
    start: u64,
    threads: &ThreadTable,
    joined: Option<u32>,
    object: Option<String>,
    site: &str,
) -> String {
    let rel = e.ts_ns.saturating_sub(start) as f64 / 1e6;
    let obj = match object {
        Some(name) => format!("{name} ({:#x})", e.addr),
        None => format!("{:#x}", e.addr),
    };
    let mut extra = String::new();
    if matches!(
        e.via,
        ordo_trace::Via::Try | ordo_trace::Via::Timed | ordo_trace::Via::CondWait
    ) && e.kind != Kind::CondWait
    {
        extra.push_str(&format!(" via {}", e.via.name()));
    }
    if e.via.is_atomic() {
        extra.push_str(" atomic");
    }
    if e.kind.has_result() && e.result != 0 {
        extra.push_str(&format!(" result {}", e.result));
    }
    match e.kind {
        Kind::ThreadCreate => {
            if let Some(child) = e.child_tid() {
                extra.push_str(&format!(" → thread {}", logical(threads, child)));
            }
        }
        Kind::ThreadJoin => {
            if let Some(child) = joined {
                extra.push_str(&format!(" ← thread {}", logical(threads, child)));
            }
        }
        Kind::Read | Kind::Write | Kind::Rmw if e.via.is_point() => extra.push_str(&format!(
            " size {} (arrival #{} at the instruction)",
            e.size, e.result
        )),
        Kind::Read | Kind::Write | Kind::Rmw => {
            extra.push_str(&format!(" value {} size {}", e.value, e.size))
        }
        Kind::Blocked => {
            if let Some(waited) = Kind::from_code(e.value as u16) {
                extra.push_str(&format!(" in {}", waited.name()));
            }
        }
        _ => {}
    }
    let obj = if matches!(e.kind, Kind::ThreadStart | Kind::ThreadExit) {
        String::new()
    } else {
        obj
    };
    format!(
        "{rel:>12.6} ms  [{:>5}] {:<17} {obj}{extra}  @ {site}",
        logical(threads, e.tid),
        e.kind.name()
    )
}
