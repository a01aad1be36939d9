//! Names for the analysis' events and objects: schedule-language event names
//! (`THREAD:KIND(OBJECT)#N`), object names for reports, symbolized sites.

use std::fmt;

use ordo_trace::symbolize::Symbolizer;
use ordo_trace::{LogicalId, ThreadTable};

use crate::engine::Object;
use crate::model::{EventId, ObjId, NO_OBJECT};

/// How a schedule names an object: by symbol when it is a global or static, else as
/// the thread's K-th object of its family.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ObjectName {
    /// `name` or `name+off`.
    Symbol(String),
    /// `@K`.
    Nth(u32),
    /// No object.
    None,
}

impl fmt::Display for ObjectName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ObjectName::Symbol(s) => f.write_str(s),
            ObjectName::Nth(k) => write!(f, "@{k}"),
            ObjectName::None => Ok(()),
        }
    }
}

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

    /// How a schedule names the object of `e`.
    pub fn object_name(&self, e: &EventId) -> ObjectName {
        if e.obj == NO_OBJECT {
            return ObjectName::None;
        }
        match self.symbol(e.obj) {
            Some(s) => ObjectName::Symbol(s),
            None => ObjectName::Nth(
                self.objects[e.obj as usize]
                    .naming
                    .get(e.thread as usize)
                    .map(|n| n.nth)
                    .unwrap_or(0),
            ),
        }
    }

    /// The schedule-language name of `e`, or `None` when its thread has no logical id.
    pub fn event_name(&self, e: &EventId) -> Option<String> {
        let thread = self.logical(e.thread)?;
        Some(format!(
            "{}:{}({})#{}",
            thread,
            e.kind.name(),
            self.object_name(e),
            e.occurrence
        ))
    }

    /// The call site as text.
    pub fn site(&self, e: &EventId) -> String {
        if e.site == 0 {
            return "unknown site".to_string();
        }
        self.symbolizer.site_text(e.site)
    }
}
