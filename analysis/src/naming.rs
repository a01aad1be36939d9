//! Names for the analysis' events and objects: schedule-language events
//! ([`ordo_schedule::EventRef`], named exactly as [`ordo_schedule::EventNamer`]
//! names them), object names for reports, symbolized sites.

use ordo_schedule::{EventRef, Family as ScheduleFamily, ObjectRef};
use ordo_trace::symbolize::Symbolizer;
use ordo_trace::{LogicalId, ThreadTable};

use crate::engine::Object;
use crate::model::{EventId, ObjId, NO_OBJECT};

/// Resolves the analysis' compact ids into names, caching symbol lookups.
pub struct Namer<'a> {
    threads: &'a ThreadTable,
    tids: &'a [u32],
    objects: &'a [Object],
    symbolizer: &'a Symbolizer,
    symbols: std::cell::RefCell<rustc_hash::FxHashMap<ObjId, Option<String>>>,
}

impl<'a> Namer<'a> {
    /// A namer over a finished pass.
    pub fn new(
        threads: &'a ThreadTable,
        tids: &'a [u32],
        objects: &'a [Object],
        symbolizer: &'a Symbolizer,
    ) -> Namer<'a> {
        Namer {
            threads,
            tids,
            objects,
            symbolizer,
            symbols: Default::default(),
        }
    }

    /// The logical id of a dense thread index, if the thread table knows it.
    pub fn logical(&self, thread: u32) -> Option<LogicalId> {
        let tid = *self.tids.get(thread as usize)?;
        self.threads.by_tid(tid).map(|t| t.logical.clone())
    }

    /// The kernel thread id of a dense thread index in the recorded run (0:
    /// unknown).
    pub fn tid(&self, thread: u32) -> u32 {
        self.tids.get(thread as usize).copied().unwrap_or(0)
    }

    /// The logical id as text (`tid N` for a thread the table does not know).
    pub fn thread_text(&self, thread: u32) -> String {
        match self.logical(thread) {
            Some(l) => l.to_string(),
            None => format!(
                "tid {}",
                self.tids.get(thread as usize).copied().unwrap_or(0)
            ),
        }
    }

    /// The object's symbol name, if it is a global or static.
    pub fn symbol(&self, obj: ObjId) -> Option<String> {
        if obj == NO_OBJECT {
            return None;
        }
        self.symbols
            .borrow_mut()
            .entry(obj)
            .or_insert_with(|| self.symbolizer.data_name(self.objects[obj as usize].addr))
            .clone()
    }

    /// The object's address.
    pub fn addr(&self, obj: ObjId) -> u64 {
        self.objects.get(obj as usize).map(|o| o.addr).unwrap_or(0)
    }

    /// The object for reports: its symbol, else its address.
    pub fn object_text(&self, obj: ObjId) -> String {
        self.symbol(obj)
            .unwrap_or_else(|| format!("{:#x}", self.addr(obj)))
    }

    /// How a schedule names the object of `e`: its symbol when it is a global or
    /// static (thread handles are always `@K`), else the thread's `@K`.
    pub fn object_ref(&self, e: &EventId) -> ObjectRef {
        if e.obj == NO_OBJECT {
            return ObjectRef::None;
        }
        let symbol = match ScheduleFamily::of(e.kind) {
            ScheduleFamily::Thread => None,
            _ => self.symbol(e.obj),
        };
        symbol
            .map(ObjectRef::Symbol)
            .unwrap_or_else(|| ObjectRef::Nth(e.nth))
    }

    /// The schedule-language name of `e`, or `None` when no schedule can name it
    /// (a thread without logical id, or a glibc-internal call).
    pub fn event_ref(&self, e: &EventId) -> Option<EventRef> {
        if e.occurrence == 0 {
            return None;
        }
        if e.point {
            // A discovered access: its instruction, as `ordo record --mark` names it.
            return Some(EventRef {
                thread: self.logical(e.thread)?.into(),
                kind: ordo_trace::Kind::At,
                object: ObjectRef::Symbol(self.symbolizer.data_name(e.site)?),
                occurrence: e.occurrence,
                after: false,
            });
        }
        Some(EventRef {
            thread: self.logical(e.thread)?.into(),
            kind: e.kind,
            object: self.object_ref(e),
            occurrence: e.occurrence,
            after: e.after_point,
        })
    }

    /// The first statement after the call of `e` (file name, line), from DWARF.
    pub fn statement_after(&self, e: &EventId) -> Option<(String, u32)> {
        if e.site == 0 || e.kind.is_access() {
            return None;
        }
        self.symbolizer.statement_after(e.site)
    }

    /// The source file (as the debug info names it, usually a full path) and line
    /// of an event's site, when debug info has them.
    pub fn site_source(&self, e: &EventId) -> Option<(String, u32)> {
        if e.site == 0 {
            return None;
        }
        let loc = self.symbolizer.locate(e.site, !e.kind.is_access())?;
        Some((loc.file?, loc.line?))
    }

    /// The call site as text. A variable access's site is the accessing
    /// instruction itself, not a return address.
    pub fn site(&self, e: &EventId) -> String {
        if e.site == 0 {
            return "unknown site".to_string();
        }
        if e.kind.is_access() {
            return self
                .symbolizer
                .locate(e.site, false)
                .map(|l| l.to_string())
                .unwrap_or_else(|| format!("{:#x}", e.site));
        }
        self.symbolizer.site_text(e.site)
    }
}
