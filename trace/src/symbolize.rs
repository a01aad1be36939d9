//! Names for addresses: call sites to `function (file:line)`, objects to global
//! variable names, using the module table recorded in the trace.
//!
//! ELF symbols come from `object`, DWARF lines and inlined frames from `addr2line`
//! (both from the gimli project, the de-facto standard for this in Rust). A module
//! whose file changed since the recording (different build-id) is not used for
//! names: its sites print as `module+0xoffset`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::path::Path;

use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};

use crate::schema::{Mapping, ModuleRecord};

/// A symbolized address.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Location {
    /// File name of the module.
    pub module: String,
    /// Offset of the address from the module's load bias (its ELF virtual address).
    pub offset: u64,
    /// Function or variable name, demangled.
    pub symbol: Option<String>,
    /// Offset from the symbol's start.
    pub symbol_offset: u64,
    /// Source file, when debug info exists.
    pub file: Option<String>,
    /// Source line.
    pub line: Option<u32>,
    /// When the address is inside inlined code: every frame of the inline chain,
    /// innermost first (`symbol`/`file`/`line` above are the program's own frame
    /// among them, see [`Symbolizer::locate`]). Empty otherwise.
    pub inline_chain: Vec<InlineFrame>,
}

/// One frame of an inline chain: the function and where in it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InlineFrame {
    /// Function name, demangled.
    pub function: Option<String>,
    /// Source file.
    pub file: Option<String>,
    /// Source line.
    pub line: Option<u32>,
}

impl fmt::Display for InlineFrame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let function = self.function.as_deref().unwrap_or("??");
        match (&self.file, self.line) {
            (Some(file), Some(line)) => write!(f, "{function} ({file}:{line})"),
            (Some(file), None) => write!(f, "{function} ({file})"),
            _ => f.write_str(function),
        }
    }
}

/// Whether a source path is a language runtime's or a system library's header
/// rather than the program's own code: C++'s `std::mutex::lock` inlines
/// `__gthread_mutex_lock` (gthr-default.h) into every caller, Rust's `Mutex::lock`
/// its futex code, and a site should name the user's line that took the lock.
pub fn is_library_source(file: &str) -> bool {
    const PREFIXES: [&str; 5] = [
        "/usr/include/",
        "/usr/lib/gcc/",
        "/usr/lib/llvm",
        "/usr/src/rustc",
        "/rustc/",
    ];
    const PARTS: [&str; 4] = [
        "/.cargo/registry/",
        "/.rustup/toolchains/",
        "/lib/rustlib/src/",
        "/include/c++/",
    ];
    PREFIXES.iter().any(|p| file.starts_with(p)) || PARTS.iter().any(|p| file.contains(p))
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.symbol, &self.file, self.line) {
            (Some(sym), Some(file), Some(line)) => {
                let short = Path::new(file)
                    .file_name()
                    .map(|s| s.to_string_lossy())
                    .unwrap_or_default();
                write!(f, "{sym} ({short}:{line})")
            }
            (Some(sym), _, _) if self.symbol_offset == 0 => write!(f, "{sym} ({})", self.module),
            (Some(sym), _, _) => write!(f, "{sym}+{:#x} ({})", self.symbol_offset, self.module),
            _ => write!(f, "{}+{:#x}", self.module, self.offset),
        }
    }
}

/// Inline chains are cut at this depth (a hostile DWARF file cannot make one long).
const MAX_INLINE_DEPTH: usize = 64;

/// The largest module file read for symbols (a trace names the files; one naming
/// a huge or endless file must not exhaust memory).
pub const MAX_MODULE_BYTES: u64 = 2 << 30;

/// Reads a file named by a trace, only if it is a regular file of at most `limit`
/// bytes. The open is non-blocking, so a FIFO (or `/dev/stdin`) never hangs, and
/// the type is checked on the opened descriptor (`fstat`), so a path swapped
/// meanwhile cannot slip a device in.
pub fn read_regular_file(path: &Path, limit: u64) -> Result<Vec<u8>, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("{}: not a regular file", path.display()));
    }
    if meta.len() > limit {
        return Err(format!(
            "{}: {} bytes, over the {limit}-byte limit",
            path.display(),
            meta.len()
        ));
    }
    let mut data = Vec::with_capacity(meta.len() as usize);
    file.take(limit + 1)
        .read_to_end(&mut data)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if data.len() as u64 > limit {
        return Err(format!(
            "{}: grew past the {limit}-byte limit",
            path.display()
        ));
    }
    Ok(data)
}

/// An ELF file's symbols and load layout.
pub struct ElfInfo {
    /// (address, size, name) sorted by address: functions and data objects.
    symbols: Vec<(u64, u64, String)>,
    /// (vaddr - offset) of each PT_LOAD segment with its file range.
    segments: Vec<(u64, u64, u64)>,
    /// GNU build-id, hex.
    pub build_id: String,
}

impl ElfInfo {
    /// Reads the symbols and segments of an ELF file.
    pub fn read(path: &Path) -> Result<ElfInfo, String> {
        let data = read_regular_file(path, MAX_MODULE_BYTES)?;
        let file = object::File::parse(data.as_slice())
            .map_err(|e| format!("{}: not an ELF file: {e}", path.display()))?;
        let mut raw = Vec::new();
        for sym in file.symbols().chain(file.dynamic_symbols()) {
            if !matches!(
                sym.kind(),
                SymbolKind::Text | SymbolKind::Data | SymbolKind::Tls
            ) || sym.address() == 0
            {
                continue;
            }
            if let Ok(name) = sym.name() {
                if !name.is_empty() {
                    raw.push((sym.address(), sym.size(), name));
                }
            }
        }
        // Names several functions share once demangled (instances of one Rust
        // generic, legacy mangling) keep their hash, so that a point named in one
        // of them (`at(NAME+OFF)`) names that one.
        let mut at_addresses: HashMap<String, std::collections::HashSet<u64>> = HashMap::new();
        for (addr, _, name) in &raw {
            at_addresses
                .entry(demangle(name))
                .or_default()
                .insert(*addr);
        }
        let mut symbols: Vec<(u64, u64, String)> = raw
            .into_iter()
            .map(|(addr, size, name)| {
                let plain = demangle(name);
                if at_addresses.get(&plain).is_some_and(|a| a.len() > 1) {
                    (addr, size, demangle_keeping_hash(name))
                } else {
                    (addr, size, plain)
                }
            })
            .collect();
        symbols.sort();
        symbols.dedup_by(|a, b| a.0 == b.0 && a.2 == b.2);
        let segments = file
            .segments()
            .map(|s| {
                let (off, size) = s.file_range();
                (s.address().wrapping_sub(off), off, off + size.max(s.size()))
            })
            .collect();
        let build_id = file.build_id().ok().flatten().map(hex).unwrap_or_default();
        Ok(ElfInfo {
            symbols,
            segments,
            build_id,
        })
    }

    /// The load layout and build-id of an ELF file, without its symbols: read
    /// from its headers and notes alone (a few KB of a file of megabytes).
    fn read_layout(path: &Path) -> Option<ElfInfo> {
        use object::read::elf::{FileHeader, ProgramHeader};
        let file = std::fs::File::open(path).ok()?;
        let data = object::ReadCache::new(file);
        let header = object::elf::FileHeader64::<object::Endianness>::parse(&data).ok()?;
        let endian = header.endian().ok()?;
        let mut segments = Vec::new();
        let mut build_id = String::new();
        for segment in header.program_headers(endian, &data).ok()? {
            match segment.p_type(endian) {
                object::elf::PT_LOAD => {
                    let (off, size) = (segment.p_offset(endian), segment.p_filesz(endian));
                    let vaddr = segment.p_vaddr(endian);
                    segments.push((
                        vaddr.wrapping_sub(off),
                        off,
                        off + size.max(segment.p_memsz(endian)),
                    ));
                }
                object::elf::PT_NOTE if build_id.is_empty() => {
                    let Ok(Some(mut notes)) = segment.notes(endian, &data) else {
                        continue;
                    };
                    while let Ok(Some(note)) = notes.next() {
                        if note.name() == object::elf::ELF_NOTE_GNU
                            && note.n_type(endian) == object::elf::NT_GNU_BUILD_ID
                        {
                            build_id = hex(note.desc());
                        }
                    }
                }
                _ => {}
            }
        }
        Some(ElfInfo {
            symbols: Vec::new(),
            segments,
            build_id,
        })
    }

    /// The symbol containing `vaddr` (or the nearest one below it, for symbols
    /// without size), with the offset into it.
    pub fn symbol_at(&self, vaddr: u64) -> Option<(&str, u64)> {
        let i = self.symbols.partition_point(|s| s.0 <= vaddr);
        let (start, size, name) = self.symbols.get(i.checked_sub(1)?)?;
        let off = vaddr - start;
        (size == &0 && off < 4096 || off < *size).then_some((name.as_str(), off))
    }

    /// The address and size of a symbol by (demangled or raw) name.
    pub fn symbol_named(&self, name: &str) -> Option<(u64, u64)> {
        self.symbols
            .iter()
            .find(|s| s.2 == name)
            .map(|s| (s.0, s.1))
    }

    /// The ELF virtual address of a file offset.
    pub fn vaddr_of_offset(&self, offset: u64) -> u64 {
        // Mappings start at page-aligned offsets, which can fall in the previous
        // segment's last page: take the last segment starting at or before it.
        self.segments
            .iter()
            .filter(|(_, start, end)| start & !0xfff <= offset && offset < *end)
            .max_by_key(|(_, start, _)| *start)
            .map(|(delta, _, _)| offset.wrapping_add(*delta))
            .unwrap_or(offset)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Demangles Rust and C++ names; leaves C names alone.
///
/// Only mangled-looking names are demangled: `_Z…` (Itanium C++, and Rust's legacy
/// `_ZN…E` scheme) and `_R…` (Rust v0). A C++ demangler given any other name reads it
/// as a type encoding (`m` would become `unsigned long`, `x` `long long`).
pub fn demangle(name: &str) -> String {
    if !(name.starts_with("_Z") || name.starts_with("_R")) {
        return name.to_string();
    }
    let s = cxx_demangle(name)
        .unwrap_or_else(|| addr2line::demangle_auto(name.into(), None).into_owned());
    // Drop Rust's trailing hash (`::h0123…`).
    let s = match s.rfind("::h") {
        Some(i) if s.len() - i == 19 && s[i + 3..].chars().all(|c| c.is_ascii_hexdigit()) => {
            s[..i].to_string()
        }
        _ => s,
    };
    // A C++ name in an anonymous namespace without templates (`_ZN12_GLOBAL__N_14hitsE`)
    // also reads as a Rust legacy name, which leaves GCC's `_GLOBAL__N_1` in it:
    // print it as `nm -C` does.
    if s.contains("_GLOBAL__N") {
        return s
            .split("::")
            .map(|part| {
                if part.starts_with("_GLOBAL__N") {
                    "(anonymous namespace)"
                } else {
                    part
                }
            })
            .collect::<Vec<_>>()
            .join("::");
    }
    s
}

/// [`demangle`], keeping a Rust legacy name's hash (`…::h0123456789abcdef`): the
/// name of one instance of a generic function among several that demangle alike.
pub fn demangle_keeping_hash(name: &str) -> String {
    if !name.starts_with("_ZN") || !name.ends_with('E') {
        return demangle(name);
    }
    // The hash is the legacy name's last path element: `17h` and 16 hex digits.
    let inner = &name[..name.len() - 1];
    match inner.len().checked_sub(19).and_then(|i| inner.get(i..)) {
        Some(tail)
            if tail.starts_with("17h") && tail[3..].bytes().all(|b| b.is_ascii_hexdigit()) =>
        {
            format!("{}::{}", demangle(name), &tail[2..])
        }
        _ => demangle(name),
    }
}

/// A C++ local entity (`_ZZ…`: a static inside a function) demangled as `nm -C`
/// prints it: the enclosing template function without its return type
/// (`get<int>()::inst`, not `int& get<int>()::inst`), so the names a user copies
/// from `nm -C` are the names ordo prints and accepts. `None` for other names
/// (functions keep their return type, as `nm -C` prints them) or what does not
/// parse.
fn cxx_demangle(name: &str) -> Option<String> {
    if !name.starts_with("_ZZ") {
        return None;
    }
    let symbol = cpp_demangle::Symbol::new(name).ok()?;
    symbol
        .demangle(&cpp_demangle::DemangleOptions::new().no_return_type())
        .ok()
}

struct Loaded {
    info: Option<ElfInfo>,
    dwarf: Option<addr2line::Loader>,
}

/// Symbolizes addresses of one recorded process.
pub struct Symbolizer {
    modules: Vec<ModuleRecord>,
    loaded: RefCell<HashMap<usize, Loaded>>,
    /// Load layouts of modules read for [`Symbolizer::module_vaddr`] alone.
    layouts: RefCell<HashMap<usize, Option<ElfInfo>>>,
    /// Names of parts of variables the recorder read from DWARF (address → name).
    data_names: HashMap<u64, String>,
}

impl Symbolizer {
    /// A symbolizer over a trace's module table.
    pub fn new(modules: &[ModuleRecord]) -> Symbolizer {
        Symbolizer {
            modules: modules.to_vec(),
            loaded: RefCell::new(HashMap::new()),
            layouts: RefCell::new(HashMap::new()),
            data_names: HashMap::new(),
        }
    }

    /// A symbolizer over a trace's modules that names the parts of variables as
    /// the recorder did (`conn.buf` rather than `conn+8`).
    pub fn of_trace(reader: &crate::TraceReader) -> Symbolizer {
        let mut symbolizer = Symbolizer::new(&reader.modules);
        symbolizer.data_names = reader
            .data_names()
            .iter()
            .map(|d| (d.addr, d.name.clone()))
            .collect();
        symbolizer
    }

    /// The ELF file (its path) and virtual address of a
    /// runtime address.
    ///
    /// Reads only the module's program headers and build-id (not its symbols
    /// and debug info, as symbolizing does) unless it was loaded already.
    pub fn module_vaddr(&self, addr: u64) -> Option<(&str, u64)> {
        let (index, map) = self.module_of(addr)?;
        let base = match self.loaded.borrow().get(&index) {
            Some(loaded) => loaded
                .info
                .as_ref()
                .map(|i| i.vaddr_of_offset(map.file_offset)),
            None => {
                let mut layouts = self.layouts.borrow_mut();
                let record = &self.modules[index];
                layouts
                    .entry(index)
                    .or_insert_with(|| {
                        ElfInfo::read_layout(Path::new(&record.path))
                            .filter(|i| record.build_id.is_empty() || i.build_id == record.build_id)
                    })
                    .as_ref()
                    .map(|i| i.vaddr_of_offset(map.file_offset))
            }
        }
        .unwrap_or(map.file_offset);
        Some((self.modules[index].path.as_str(), addr - map.start + base))
    }

    fn module_of(&self, addr: u64) -> Option<(usize, &Mapping)> {
        for (i, m) in self.modules.iter().enumerate() {
            for map in &m.mappings {
                if (map.start..map.end).contains(&addr) {
                    return Some((i, map));
                }
            }
        }
        // .bss lies in an anonymous mapping right after a module's last file mapping.
        self.modules.iter().enumerate().find_map(|(i, m)| {
            let last = m.mappings.iter().max_by_key(|map| map.end)?;
            (addr >= last.end && addr < last.end + (64 << 20)).then_some((i, last))
        })
    }

    fn with_loaded<T>(&self, index: usize, f: impl FnOnce(&Loaded) -> T) -> T {
        let mut cache = self.loaded.borrow_mut();
        let loaded = cache.entry(index).or_insert_with(|| {
            let record = &self.modules[index];
            let path = Path::new(&record.path);
            let info = ElfInfo::read(path)
                .ok()
                .filter(|i| record.build_id.is_empty() || i.build_id == record.build_id);
            let dwarf = info
                .as_ref()
                .and_then(|_| addr2line::Loader::new(path).ok());
            Loaded { info, dwarf }
        });
        f(loaded)
    }

    /// The ELF virtual address of a runtime address, with its module index.
    fn vaddr(&self, addr: u64) -> Option<(usize, u64)> {
        let (index, map) = self.module_of(addr)?;
        let base = self.with_loaded(index, |l| {
            l.info
                .as_ref()
                .map(|i| i.vaddr_of_offset(map.file_offset))
                .unwrap_or(map.file_offset)
        });
        Some((index, addr - map.start + base))
    }

    /// Symbolizes a code address. For a return address pass `is_return = true`: the
    /// line of the call instruction is reported, not the one after it.
    pub fn locate(&self, addr: u64, is_return: bool) -> Option<Location> {
        let (index, vaddr) = self.vaddr(addr)?;
        let module = module_name(&self.modules[index].path);
        let probe = if is_return {
            vaddr.saturating_sub(1)
        } else {
            vaddr
        };
        Some(self.with_loaded(index, |l| {
            let mut loc = Location {
                module,
                offset: vaddr,
                ..Default::default()
            };
            if let Some(info) = &l.info {
                if let Some((name, off)) = info.symbol_at(probe) {
                    loc.symbol = Some(name.to_string());
                    loc.symbol_offset = off + (vaddr - probe);
                }
            }
            if let Some(dwarf) = &l.dwarf {
                if let Ok(mut frames) = dwarf.find_frames(probe) {
                    let mut chain = Vec::new();
                    while let Ok(Some(frame)) = frames.next() {
                        chain.push(InlineFrame {
                            function: frame
                                .function
                                .as_ref()
                                .and_then(|f| f.demangle().ok())
                                .map(|f| demangle(&f)),
                            file: frame
                                .location
                                .as_ref()
                                .and_then(|l| l.file.map(str::to_string)),
                            line: frame.location.as_ref().and_then(|l| l.line),
                        });
                        if chain.len() == MAX_INLINE_DEPTH {
                            break;
                        }
                    }
                    // The innermost frame in the program's own code; when every
                    // frame is library code, the innermost (as before).
                    let own = chain
                        .iter()
                        .position(|f| f.file.as_deref().is_some_and(|p| !is_library_source(p)))
                        .unwrap_or(0);
                    if let Some(frame) = chain.get(own) {
                        if frame.function.is_some() {
                            loc.symbol = frame.function.clone();
                        }
                        loc.file = frame.file.clone();
                        loc.line = frame.line;
                    }
                    if chain.len() > 1 {
                        loc.inline_chain = chain;
                    }
                }
            }
            loc
        }))
    }

    /// The first statement after a call, for the return address `ret`: the first
    /// line-table row from `ret` on (within 512 bytes) in the source file of the
    /// call's own frame (the program's, past inlined library code such as
    /// `std::mutex`) on another line, as (file name, line) — what
    /// `ordo record --mark FILE:LINE` takes to stop a thread there. `None` without
    /// DWARF line info.
    pub fn statement_after(&self, ret: u64) -> Option<(String, u32)> {
        let call = self.locate(ret, true)?;
        let (file, line) = (call.file?, call.line?);
        let file = file.as_str();
        let (index, vaddr) = self.vaddr(ret)?;
        self.with_loaded(index, |l| {
            let dwarf = l.dwarf.as_ref()?;
            let rows = dwarf.find_location_range(vaddr, vaddr + 512).ok()?;
            for (row, _, loc) in rows {
                // Past the end of the calling function the next statement is the
                // caller's, which a mark here cannot name.
                if outer_function(dwarf, row) != outer_function(dwarf, vaddr - 1) {
                    return None;
                }
                if loc.file != Some(file) {
                    continue;
                }
                match loc.line {
                    Some(l) if l != line && l != 0 => {
                        let name = Path::new(file)
                            .file_name()
                            .map(|n| n.to_string_lossy().into_owned())
                            .unwrap_or_else(|| file.to_string());
                        return Some((name, l));
                    }
                    _ => {}
                }
            }
            None
        })
    }

    /// The name of the global or static variable at `addr` (`name` or `name+off`),
    /// or of its member or element there when the recorder named it (`name.field`).
    pub fn data_name(&self, addr: u64) -> Option<String> {
        if let Some(name) = self.data_names.get(&addr) {
            return Some(name.clone());
        }
        let (index, vaddr) = self.vaddr(addr)?;
        self.with_loaded(index, |l| {
            let (name, off) = l.info.as_ref()?.symbol_at(vaddr)?;
            Some(if off == 0 {
                name.to_string()
            } else {
                format!("{name}+{off}")
            })
        })
    }

    /// A site as text: symbolized when possible, `0x…` otherwise.
    pub fn site_text(&self, addr: u64) -> String {
        if addr == 0 {
            return String::new();
        }
        self.locate(addr, true)
            .map(|l| l.to_string())
            .unwrap_or_else(|| format!("{addr:#x}"))
    }
}

/// The raw name of the outermost function containing `vaddr` (not an inlined one).
fn outer_function(dwarf: &addr2line::Loader, vaddr: u64) -> Option<String> {
    let mut frames = dwarf.find_frames(vaddr).ok()?;
    let mut last = None;
    while let Ok(Some(f)) = frames.next() {
        last = f.function.map(|f| f.raw_name().map(|n| n.into_owned()));
    }
    last.and_then(Result::ok)
}

fn module_name(path: &str) -> String {
    Path::new(path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.to_string())
}

/// Reads `/proc/PID/maps` into module records (file-backed mappings only, build-ids
/// read from the files). Returns an empty list if the process is gone.
pub fn modules_of_process(pid: u32) -> Vec<ModuleRecord> {
    let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return Vec::new();
    };
    let mut modules: Vec<ModuleRecord> = Vec::new();
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let (Some(range), Some(_perms), Some(offset), Some(_dev), Some(inode)) = (
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
        ) else {
            continue;
        };
        let path: String = fields.collect::<Vec<_>>().join(" ");
        if inode == "0" || !path.starts_with('/') {
            continue;
        }
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end), Ok(file_offset)) = (
            u64::from_str_radix(start, 16),
            u64::from_str_radix(end, 16),
            u64::from_str_radix(offset, 16),
        ) else {
            continue;
        };
        let mapping = Mapping {
            start,
            end,
            file_offset,
        };
        match modules.iter_mut().find(|m| m.path == path) {
            Some(m) => m.mappings.push(mapping),
            None => modules.push(ModuleRecord {
                path,
                build_id: String::new(),
                mappings: vec![mapping],
            }),
        }
    }
    for m in &mut modules {
        m.build_id = build_id_of(Path::new(&m.path)).unwrap_or_default();
    }
    modules
}

/// The GNU build-id of an ELF file as hex, reading only its headers and notes:
/// a recording reads it for every module of the program while the program waits,
/// and a whole libc parsed for symbols took most of a short recording's time.
pub fn build_id_of(path: &Path) -> Option<String> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let cache = object::ReadCache::new(file);
    let elf = object::File::parse(&cache).ok()?;
    elf.build_id().ok().flatten().map(hex)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbolizes_this_test_binary() {
        // A function and a static of this very process, through its own maps.
        static MARKER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let modules = modules_of_process(std::process::id());
        assert!(!modules.is_empty());
        let sym = Symbolizer::new(&modules);
        let f = symbolizes_this_test_binary as *const () as u64;
        let loc = sym.locate(f, false).expect("located");
        assert!(
            loc.symbol
                .as_deref()
                .unwrap_or("")
                .contains("symbolizes_this_test_binary"),
            "{loc:?}"
        );
        let name = sym.data_name(&MARKER as *const _ as u64).expect("named");
        assert!(name.contains("MARKER"), "{name}");
        assert_eq!(demangle("_ZN3foo3barE"), "foo::bar");
        assert_eq!(demangle("pthread_mutex_lock"), "pthread_mutex_lock");
    }

    /// `module_vaddr` from the headers alone gives what the whole file's
    /// layout gives, for a code, a data and a .bss address of this process.
    #[test]
    fn a_module_vaddr_from_the_headers_alone_is_the_whole_files() {
        static mut BSS: [u64; 4] = [0; 4];
        static DATA: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(7);
        let modules = modules_of_process(std::process::id());
        let light = Symbolizer::new(&modules);
        let whole = Symbolizer::new(&modules);
        let code = a_module_vaddr_from_the_headers_alone_is_the_whole_files as *const () as u64;
        let bss = (&raw const BSS) as u64 + 8;
        for addr in [code, &DATA as *const _ as u64, bss] {
            let expected = whole.vaddr(addr).map(|(i, v)| (modules[i].path.clone(), v));
            assert!(expected.is_some(), "{addr:#x} is in a module");
            let got = light.module_vaddr(addr).map(|(p, v)| (p.to_string(), v));
            assert_eq!(got, expected, "{addr:#x}");
        }
        for path in [Path::new("/bin/true"), &std::env::current_exe().unwrap()] {
            let (light, whole) = (
                ElfInfo::read_layout(path).unwrap(),
                ElfInfo::read(path).unwrap(),
            );
            assert_eq!(light.segments, whole.segments, "{}", path.display());
        }
        let info = ElfInfo::read_layout(&std::env::current_exe().unwrap()).unwrap();
        assert_eq!(
            info.build_id,
            ElfInfo::read(&std::env::current_exe().unwrap())
                .unwrap()
                .build_id
        );
        assert!(ElfInfo::read_layout(Path::new("/etc/hostname")).is_none());
    }

    #[test]
    fn a_build_id_read_from_the_notes_alone_is_the_whole_files() {
        let this = std::env::current_exe().unwrap();
        for path in [Path::new("/bin/true"), this.as_path()] {
            let whole = ElfInfo::read(path).unwrap().build_id;
            assert!(!whole.is_empty(), "{} has a build-id", path.display());
            assert_eq!(build_id_of(path).as_deref(), Some(whole.as_str()));
        }
        assert_eq!(build_id_of(Path::new("/dev/zero")), None);
        assert_eq!(build_id_of(Path::new("/etc/hostname")), None);
    }

    #[test]
    fn a_rust_legacy_name_can_keep_its_hash() {
        let name = "_ZN3std3sys9backtrace28__rust_begin_short_backtrace17h51e4e95df9b41d9dE";
        assert_eq!(
            demangle(name),
            "std::sys::backtrace::__rust_begin_short_backtrace"
        );
        assert_eq!(
            demangle_keeping_hash(name),
            "std::sys::backtrace::__rust_begin_short_backtrace::h51e4e95df9b41d9d"
        );
        assert_eq!(demangle_keeping_hash("_ZN3foo3barE"), "foo::bar");
        assert_eq!(demangle_keeping_hash("main"), "main");
    }

    #[test]
    fn modules_that_are_not_regular_files_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // A FIFO with no writer would block a plain open forever; /dev/zero never
        // ends; /dev/stdin may be a terminal or pipe.
        for path in [
            fifo.as_path(),
            Path::new("/dev/zero"),
            Path::new("/dev/stdin"),
        ] {
            let e = read_regular_file(path, 1 << 20).unwrap_err();
            assert!(
                e.contains("not a regular file") || e.contains("No such"),
                "{e}"
            );
        }
        let big = dir.path().join("big");
        std::fs::write(&big, vec![0u8; 4096]).unwrap();
        let e = read_regular_file(&big, 1000).unwrap_err();
        assert!(e.contains("over the 1000-byte limit"), "{e}");
        // A symbolizer over such modules names sites by module and offset.
        let module = |path: &Path| ModuleRecord {
            path: path.display().to_string(),
            build_id: String::new(),
            mappings: vec![crate::schema::Mapping {
                start: 0x1000,
                end: 0x2000,
                file_offset: 0,
            }],
        };
        let s = Symbolizer::new(&[module(&fifo)]);
        assert!(
            s.site_text(0x1010).contains("fifo+0x"),
            "{}",
            s.site_text(0x1010)
        );
    }

    #[test]
    fn template_functions_and_their_statics_are_named_as_nm_c_does() {
        // `nm -C` of a g++ 12 build of tests/programs/watch_names.cpp's kind.
        assert_eq!(demangle("_ZZ3getIiERT_vE4inst"), "get<int>()::inst");
        assert_eq!(demangle("_Z3getIiERT_v"), "int& get<int>()");
        assert_eq!(demangle("_ZZN2ns1WILi3EE3cntEvE1c"), "ns::W<3>::cnt()::c");
        // A Rust legacy name stays Rust's, hash dropped.
        assert_eq!(
            demangle("_ZN4core3ptr13drop_in_place17h0123456789abcdefE"),
            "core::ptr::drop_in_place"
        );
    }

    #[test]
    fn demangles_anonymous_namespaces_as_nm_does() {
        assert_eq!(
            demangle("_ZN12_GLOBAL__N_14hitsE"),
            "(anonymous namespace)::hits"
        );
        assert_eq!(
            demangle("_ZN2ns12_GLOBAL__N_15countE"),
            "ns::(anonymous namespace)::count"
        );
    }

    #[test]
    fn library_sources_are_headers_and_runtimes_not_the_program() {
        for file in [
            "/usr/include/x86_64-linux-gnu/c++/12/bits/gthr-default.h",
            "/usr/include/c++/12/bits/std_mutex.h",
            "/rustc/59807616e1fa2540724bfbac14d7976d7e4a3860/library/std/src/sys/pal/unix/futex.rs",
            "/root/.cargo/registry/src/index.crates.io-6f17d22bba15001f/parking_lot-0.12.1/src/mutex.rs",
            "/usr/lib/gcc/x86_64-linux-gnu/12/include/stdatomic.h",
        ] {
            assert!(is_library_source(file), "{file}");
        }
        for file in [
            "/work/main/tests/programs/record_cxx_mutex.cpp",
            "src/main.rs",
            "bank.c",
        ] {
            assert!(!is_library_source(file), "{file}");
        }
    }

    #[test]
    fn demangles_only_mangled_names() {
        // Short C names read as C++ builtin types by a demangler given them bare.
        for c in [
            "m",
            "x",
            "i",
            "j",
            "l",
            "y",
            "v",
            "counter",
            "main",
            "Z",
            "R",
            "_",
            "_start",
            "__libc_start_main",
        ] {
            assert_eq!(demangle(c), c);
        }
        // Itanium C++.
        assert_eq!(demangle("_Z3fooi"), "foo(int)");
        assert_eq!(demangle("_ZN2ns4Pool4liveE"), "ns::Pool::live");
        // Rust legacy, with its hash dropped.
        assert_eq!(
            demangle("_ZN4prog7COUNTER17h0123456789abcdefE"),
            "prog::COUNTER"
        );
        // Rust v0.
        assert_eq!(demangle("_RNvCs1234_4prog7COUNTER"), "prog::COUNTER");
        // Already demangled names (DWARF function names) stay as they are.
        assert_eq!(demangle("prog::worker"), "prog::worker");
    }
}
