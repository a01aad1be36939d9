//! Turning a [`WatchSpec`] into a module and link-time address: ELF symbols first
//! (symtab and dynsym, demangled), DWARF variables when no symbol matches (statics
//! whose symbols are stripped, renamed or mangled beyond recognition).

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use object::{
    Object, ObjectSection, ObjectSegment, ObjectSymbol, SectionKind, SegmentFlags, SymbolKind,
};

use super::spec::{WatchSpec, WatchTarget, MAX_WATCH_SIZE};

/// A watch located in one ELF file, in link-time terms (add the module's load
/// bias for runtime addresses).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedWatch {
    /// The ELF file that holds the variable (the main binary or a library).
    pub module: PathBuf,
    /// Link-time virtual address of the first watched byte.
    pub vaddr: u64,
    /// Number of watched bytes (1..=8).
    pub size: u32,
    /// A name for messages and traces: the demangled symbol (`prog::COUNTER`,
    /// `state+8`), or the address when no symbol covers it.
    pub name: String,
    /// Link-time address of the whole variable holding the watched bytes.
    pub object_vaddr: u64,
    /// Size of the whole variable in bytes (0 when unknown). Accesses through the
    /// variable's base address plus an offset or index are searched inside it.
    pub object_size: u64,
}

impl ResolvedWatch {
    /// Checks that an x86 debug register can watch these bytes: the length must be
    /// 1, 2, 4 or 8 and the address aligned to it. Load biases are page-aligned, so
    /// link-time alignment is runtime alignment.
    pub fn check_hw_breakpoint(&self) -> Result<(), String> {
        if !matches!(self.size, 1 | 2 | 4 | 8) {
            return Err(format!(
                "`{}`: a debug register watches 1, 2, 4 or 8 bytes, not {}",
                self.name, self.size
            ));
        }
        if !self.vaddr.is_multiple_of(self.size as u64) {
            return Err(format!(
                "`{}`: {:#x} is not aligned to its size {} (debug registers need aligned ranges)",
                self.name, self.vaddr, self.size
            ));
        }
        Ok(())
    }
}

/// Resolves one watch against the main binary, then the libraries in order.
/// See [`Resolver`] to resolve several watches without re-reading the files.
pub fn resolve(
    spec: &WatchSpec,
    main_binary: &Path,
    libs: &[PathBuf],
) -> Result<ResolvedWatch, String> {
    Resolver::new(main_binary, libs)?.resolve(spec)
}

/// What a named thing in a module is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Nature {
    Variable,
    ThreadLocal,
    Function,
}

/// One name a module defines.
#[derive(Clone, Debug)]
struct Candidate {
    /// Demangled, hash-free, path-qualified name (`prog::COUNTER`, `calls.0`).
    name: String,
    /// The raw symbol or linkage name, or the DWARF name.
    raw: String,
    vaddr: u64,
    size: u64,
    nature: Nature,
}

impl Candidate {
    /// How well `query` names this candidate: 0 exact, 1 by a trailing path, as
    /// `crate::path`, or without a compiler-added suffix, 2 the same inside Rust's standard library,
    /// `None` not at all.
    fn match_tier(&self, query: &str) -> Option<u8> {
        if self.name == query || self.raw == query {
            return Some(0);
        }
        if let Some(in_crate) = query.strip_prefix("crate::") {
            // Rust's `crate::path` is `path` in whichever crate: the name's first
            // component is the crate.
            let (_, path) = self.name.split_once("::")?;
            return (path == in_crate).then_some(1);
        }
        let tail_matches = self
            .name
            .strip_suffix(query)
            .is_some_and(|head| head.ends_with("::"));
        if !tail_matches && without_local_suffix(&self.name) != Some(query) {
            return None;
        }
        // `COUNTER` should mean the program's static, not one inside Rust's standard
        // library (std has a `ThreadId::new::COUNTER`), unless nothing else matches.
        Some(if self.in_rust_std() { 2 } else { 1 })
    }

    fn in_rust_std(&self) -> bool {
        let name = self.name.trim_start_matches('<');
        ["std::", "core::", "alloc::"]
            .iter()
            .any(|p| name.starts_with(p))
    }

    /// The last path component, for suggestions.
    fn short_name(&self) -> &str {
        self.name.rsplit("::").next().unwrap_or(&self.name)
    }
}

/// GCC renames function-local and some file-local statics `name.0`, `name.lto_priv.1`.
fn without_local_suffix(name: &str) -> Option<&str> {
    let (head, tail) = name.split_once('.')?;
    let generated = tail.split('.').all(|part| {
        !part.is_empty()
            && (part.bytes().all(|b| b.is_ascii_digit())
                || part == "lto_priv"
                || part == "constprop")
    });
    (generated && !head.is_empty()).then_some(head)
}

/// One ELF file's names, DWARF read on first need.
struct Module {
    path: PathBuf,
    data: Vec<u8>,
    symbols: Vec<Candidate>,
    dwarf: Option<Vec<Candidate>>,
    /// (vaddr, size) of each section holding variables or constants.
    data_ranges: Vec<(u64, u64)>,
}

impl Module {
    fn load(path: &Path) -> Result<Module, String> {
        let data =
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let file = object::File::parse(data.as_slice())
            .map_err(|e| format!("{}: not an ELF file: {e}", path.display()))?;
        let mut symbols = Vec::new();
        for sym in file.symbols().chain(file.dynamic_symbols()) {
            if sym.is_undefined() {
                continue;
            }
            let nature = match sym.kind() {
                SymbolKind::Data => Nature::Variable,
                SymbolKind::Tls => Nature::ThreadLocal,
                SymbolKind::Text => Nature::Function,
                _ => continue,
            };
            let Ok(raw) = sym.name() else { continue };
            if raw.is_empty() {
                continue;
            }
            symbols.push(Candidate {
                name: ordo_trace::symbolize::demangle(raw),
                raw: raw.to_string(),
                vaddr: sym.address(),
                size: sym.size(),
                nature,
            });
        }
        let mut data_ranges: Vec<(u64, u64)> = file
            .sections()
            .filter(|s| {
                matches!(
                    s.kind(),
                    SectionKind::Data
                        | SectionKind::UninitializedData
                        | SectionKind::ReadOnlyData
                        | SectionKind::ReadOnlyDataWithRel
                )
            })
            .map(|s| (s.address(), s.size()))
            .collect();
        if file.sections().next().is_none() {
            // No section headers: the writable segments are the data.
            data_ranges = file
                .segments()
                .filter(|s| matches!(s.flags(), SegmentFlags::Elf { p_flags } if p_flags & object::elf::PF_W != 0))
                .map(|s| (s.address(), s.size()))
                .collect();
        }
        Ok(Module {
            path: path.to_path_buf(),
            data,
            symbols,
            dwarf: None,
            data_ranges,
        })
    }

    fn dwarf_candidates(&mut self) -> &[Candidate] {
        if self.dwarf.is_none() {
            // Broken or missing debug info only means fewer names: ELF symbols remain.
            self.dwarf = Some(read_dwarf_variables(&self.data).unwrap_or_default());
        }
        self.dwarf.as_deref().unwrap_or_default()
    }

    /// The data symbol containing `vaddr`, with the offset into it.
    fn data_symbol_at(&self, vaddr: u64) -> Option<(&Candidate, u64)> {
        self.symbols
            .iter()
            .filter(|c| {
                c.nature == Nature::Variable && c.vaddr <= vaddr && vaddr < c.vaddr + c.size.max(1)
            })
            .min_by_key(|c| (c.size, c.name.len()))
            .map(|c| (c, vaddr - c.vaddr))
    }

    fn file_name(&self) -> String {
        self.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| self.path.display().to_string())
    }
}

/// Matches among `candidates` at the best tier (returned too), one per address.
fn best_matches<'c>(candidates: &'c [Candidate], query: &str) -> (u8, Vec<&'c Candidate>) {
    let mut found: Vec<(u8, &Candidate)> = candidates
        .iter()
        .filter_map(|c| c.match_tier(query).map(|tier| (tier, c)))
        .collect();
    // A variable and a function of the same name: the variable is what a watch means.
    if found.iter().any(|(_, c)| c.nature != Nature::Function) {
        found.retain(|(_, c)| c.nature != Nature::Function);
    }
    let Some(best) = found.iter().map(|(tier, _)| *tier).min() else {
        return (u8::MAX, Vec::new());
    };
    found.retain(|(tier, _)| *tier == best);
    let mut unique: Vec<&Candidate> = Vec::new();
    for (_, c) in found {
        if !unique
            .iter()
            .any(|u| u.vaddr == c.vaddr && u.nature == c.nature)
        {
            unique.push(c);
        }
    }
    (best, unique)
}

/// Resolves watches against one program's files, reading each file once.
pub struct Resolver {
    /// The main binary first, then the libraries; `None` until read.
    paths: Vec<PathBuf>,
    modules: Vec<Option<Module>>,
}

impl Resolver {
    /// Reads the main binary (an error if it cannot be read); libraries are read
    /// when a name is not found in the main binary, and skipped if unreadable.
    pub fn new(main_binary: &Path, libs: &[PathBuf]) -> Result<Resolver, String> {
        let main = Module::load(main_binary)?;
        let mut paths = vec![main_binary.to_path_buf()];
        paths.extend(libs.iter().cloned());
        let mut modules: Vec<Option<Module>> = paths.iter().map(|_| None).collect();
        modules[0] = Some(main);
        Ok(Resolver { paths, modules })
    }

    fn module(&mut self, index: usize) -> Option<&mut Module> {
        if self.modules[index].is_none() {
            self.modules[index] = Module::load(&self.paths[index]).ok();
        }
        self.modules[index].as_mut()
    }

    /// Resolves one watch. Errors are one line naming the variable or address and
    /// what is wrong (callers add which option it came from).
    pub fn resolve(&mut self, spec: &WatchSpec) -> Result<ResolvedWatch, String> {
        match &spec.target {
            WatchTarget::Address(addr) => self.resolve_address(*addr, spec),
            WatchTarget::Symbol(name) => self.resolve_symbol(name, spec),
        }
    }

    fn resolve_address(&mut self, addr: u64, spec: &WatchSpec) -> Result<ResolvedWatch, String> {
        let size = spec.size.unwrap_or(1);
        let main = self
            .module(0)
            .expect("the main binary was read in Resolver::new");
        let inside = main
            .data_ranges
            .iter()
            .any(|(start, len)| *start <= addr && addr + size as u64 <= start + len);
        if !inside {
            return Err(format!(
                "{addr:#x} is not inside any data section of {}",
                main.path.display()
            ));
        }
        let (name, object_vaddr, object_size) = match main.data_symbol_at(addr) {
            Some((sym, 0)) => (sym.name.clone(), sym.vaddr, sym.size),
            Some((sym, off)) => (format!("{}+{off}", sym.name), sym.vaddr, sym.size),
            None => (format!("{addr:#x}"), addr, size as u64),
        };
        Ok(ResolvedWatch {
            module: main.path.clone(),
            vaddr: addr,
            size,
            name,
            object_vaddr,
            object_size,
        })
    }

    fn resolve_symbol(&mut self, query: &str, spec: &WatchSpec) -> Result<ResolvedWatch, String> {
        let mut function_in: Option<String> = None;
        for index in 0..self.paths.len() {
            let Some(module) = self.module(index) else {
                continue;
            };
            // DWARF, read only when the symbols give no good answer, holds only
            // variables: it wins over functions and over a worse match.
            let (symbol_tier, symbol_found) = best_matches(&module.symbols, query);
            let only_functions = symbol_found.iter().all(|c| c.nature == Nature::Function);
            let from_dwarf = (symbol_tier > 1 || only_functions) && {
                let (dwarf_tier, dwarf_found) = best_matches(module.dwarf_candidates(), query);
                !dwarf_found.is_empty() && (dwarf_tier < symbol_tier || only_functions)
            };
            let candidates = if from_dwarf {
                module.dwarf.as_deref().unwrap_or_default()
            } else {
                &module.symbols
            };
            let (_, found) = best_matches(candidates, query);
            let Some(first) = found.first() else { continue };
            if first.nature == Nature::Function {
                function_in.get_or_insert_with(|| module.file_name());
                continue;
            }
            if found.len() > 1 {
                let names: Vec<String> = found
                    .iter()
                    .map(|c| format!("`{}` at {:#x}", c.name, c.vaddr))
                    .collect();
                return Err(format!(
                    "`{query}` names {} variables in {}: {}; name one in full or by address (0xADDR:SIZE)",
                    found.len(),
                    module.file_name(),
                    names.join(", ")
                ));
            }
            let var = found[0].clone();
            return finish_symbol(module, &var, spec);
        }
        if let Some(file) = function_in {
            return Err(format!("`{query}` is a function in {file}, not a variable"));
        }
        Err(self.unknown_symbol_message(query))
    }

    fn unknown_symbol_message(&mut self, query: &str) -> String {
        let mut scored: Vec<(f64, String)> = Vec::new();
        for index in 0..self.paths.len() {
            let Some(module) = self.module(index) else {
                continue;
            };
            let dwarf: Vec<Candidate> = module.dwarf_candidates().to_vec();
            for c in module
                .symbols
                .iter()
                .chain(dwarf.iter())
                .filter(|c| c.nature == Nature::Variable)
            {
                let score = strsim::jaro_winkler(query, c.short_name())
                    .max(strsim::jaro_winkler(query, &c.name));
                if score >= 0.85 && !scored.iter().any(|(_, n)| *n == c.name) {
                    scored.push((score, c.name.clone()));
                }
            }
        }
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        let libs = self.paths.len() - 1;
        let mut message = format!(
            "no global or static variable named `{query}` in {}{}",
            self.paths[0].display(),
            match libs {
                0 => String::new(),
                1 => " or its library".to_string(),
                n => format!(" or its {n} libraries"),
            }
        );
        if !scored.is_empty() {
            let names: Vec<String> = scored
                .iter()
                .take(3)
                .map(|(_, n)| format!("`{n}`"))
                .collect();
            message += &format!("; did you mean {}?", names.join(", "));
        }
        message
    }
}

fn finish_symbol(
    module: &Module,
    var: &Candidate,
    spec: &WatchSpec,
) -> Result<ResolvedWatch, String> {
    if var.nature == Nature::ThreadLocal {
        return Err(format!(
            "`{}` is thread-local (each thread has its own copy); only globals and statics can be watched",
            var.name
        ));
    }
    // DWARF may know a size the symbol table does not, and the other way round.
    let object_size = if var.size != 0 {
        var.size
    } else {
        module
            .symbols
            .iter()
            .find(|c| c.vaddr == var.vaddr && c.nature == Nature::Variable)
            .map_or(0, |c| c.size)
    };
    let size = match spec.size {
        Some(size) => size,
        None if object_size == 0 => {
            return Err(format!("the size of `{}` is unknown; give one: {}:SIZE", var.name, var.name))
        }
        None if object_size > MAX_WATCH_SIZE as u64 => {
            return Err(format!(
                "`{}` is {object_size} bytes but a watch covers at most {MAX_WATCH_SIZE}; name a field as {}+OFFSET:SIZE",
                var.name, var.name
            ))
        }
        None => object_size as u32,
    };
    let end = spec.offset + size as u64;
    if object_size != 0 && end > object_size {
        return Err(format!(
            "bytes {}..{end} go past the end of `{}` ({object_size} bytes)",
            spec.offset, var.name
        ));
    }
    let name = if spec.offset == 0 {
        var.name.clone()
    } else {
        format!("{}+{}", var.name, spec.offset)
    };
    Ok(ResolvedWatch {
        module: module.path.clone(),
        vaddr: var.vaddr + spec.offset,
        size,
        name,
        object_vaddr: var.vaddr,
        object_size,
    })
}

type Reader<'a> = gimli::EndianSlice<'a, gimli::RunTimeEndian>;

/// A DWARF variable before its name is final (definitions of C++ static members
/// name their declaration instead of carrying a name).
struct PendingVariable {
    name: Option<String>,
    linkage: Option<String>,
    specification: Option<gimli::UnitOffset>,
    vaddr: u64,
    thread_local: bool,
    size: u64,
}

/// Every DWARF variable with a static location (DW_OP_addr), path-qualified by its
/// enclosing namespaces, types and functions.
/// A file's DWARF sections (empty where missing) and its byte order.
pub(crate) fn dwarf_sections<'d>(
    file: &object::File<'d>,
) -> Result<(gimli::DwarfSections<Cow<'d, [u8]>>, gimli::RunTimeEndian), gimli::Error> {
    let endian = if file.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    let sections = gimli::DwarfSections::load(|id| -> Result<Cow<'d, [u8]>, gimli::Error> {
        Ok(file
            .section_by_name(id.name())
            .and_then(|s| s.uncompressed_data().ok())
            .unwrap_or(Cow::Borrowed(&[])))
    })?;
    Ok((sections, endian))
}

fn read_dwarf_variables(data: &[u8]) -> Result<Vec<Candidate>, gimli::Error> {
    let Ok(file) = object::File::parse(data) else {
        return Ok(Vec::new());
    };
    let (sections, endian) = dwarf_sections(&file)?;
    let dwarf = sections.borrow(|section| gimli::EndianSlice::new(section, endian));
    let mut out = Vec::new();
    let mut units = dwarf.units();
    while let Some(header) = units.next()? {
        let unit = dwarf.unit(header)?;
        let mut qualified: HashMap<gimli::UnitOffset, String> = HashMap::new();
        let mut pending = Vec::new();
        let mut tree = unit.entries_tree(None)?;
        walk(
            &dwarf,
            &unit,
            tree.root()?,
            "",
            &mut qualified,
            &mut pending,
        )?;
        for var in pending {
            let name = match (var.name, var.specification.and_then(|o| qualified.get(&o))) {
                (_, Some(declared)) => declared.clone(),
                (Some(name), None) => name,
                (None, None) => continue,
            };
            let raw = var.linkage.unwrap_or_else(|| name.clone());
            let nature = if var.thread_local {
                Nature::ThreadLocal
            } else {
                Nature::Variable
            };
            out.push(Candidate {
                name,
                raw,
                vaddr: var.vaddr,
                size: var.size,
                nature,
            });
        }
    }
    Ok(out)
}

fn walk(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &gimli::Unit<Reader<'_>>,
    node: gimli::EntriesTreeNode<'_, '_, '_, Reader<'_>>,
    prefix: &str,
    qualified: &mut HashMap<gimli::UnitOffset, String>,
    pending: &mut Vec<PendingVariable>,
) -> Result<(), gimli::Error> {
    let entry = node.entry();
    let name = entry
        .attr_value(gimli::DW_AT_name)?
        .and_then(|v| dwarf.attr_string(unit, v).ok())
        .map(|s| s.to_string_lossy().into_owned());
    let full = name.as_ref().map(|n| {
        if prefix.is_empty() {
            n.clone()
        } else {
            format!("{prefix}::{n}")
        }
    });
    if let Some(full) = &full {
        qualified.insert(entry.offset(), full.clone());
    }
    let tag = entry.tag();
    if tag == gimli::DW_TAG_variable {
        if let Some((vaddr, thread_local)) = static_location(dwarf, unit, entry)? {
            let specification = match entry.attr_value(gimli::DW_AT_specification)? {
                Some(gimli::AttributeValue::UnitRef(offset)) => Some(offset),
                _ => None,
            };
            let linkage = entry
                .attr_value(gimli::DW_AT_linkage_name)?
                .or(entry.attr_value(gimli::DW_AT_MIPS_linkage_name)?)
                .and_then(|v| dwarf.attr_string(unit, v).ok())
                .map(|s| s.to_string_lossy().into_owned());
            let size = match entry.attr_value(gimli::DW_AT_type)? {
                Some(gimli::AttributeValue::UnitRef(offset)) => type_size(unit, offset, 0),
                _ => 0,
            };
            pending.push(PendingVariable {
                name: full.clone(),
                linkage,
                specification,
                vaddr,
                thread_local,
                size,
            });
        }
    }
    // Only scopes that name things extend the path of what they contain.
    let scope = matches!(
        tag,
        gimli::DW_TAG_namespace
            | gimli::DW_TAG_structure_type
            | gimli::DW_TAG_class_type
            | gimli::DW_TAG_union_type
            | gimli::DW_TAG_subprogram
    );
    let child_prefix = match (&full, scope) {
        (Some(full), true) => full.clone(),
        _ => prefix.to_string(),
    };
    let mut children = node.children();
    while let Some(child) = children.next()? {
        walk(dwarf, unit, child, &child_prefix, qualified, pending)?;
    }
    Ok(())
}

/// The address of a variable whose location is a single `DW_OP_addr`/`DW_OP_addrx`,
/// and whether it is thread-local (the address then is an offset in the TLS block).
fn static_location(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &gimli::Unit<Reader<'_>>,
    entry: &gimli::DebuggingInformationEntry<'_, '_, Reader<'_>>,
) -> Result<Option<(u64, bool)>, gimli::Error> {
    let Some(gimli::AttributeValue::Exprloc(expr)) = entry.attr_value(gimli::DW_AT_location)?
    else {
        return Ok(None);
    };
    let mut ops = expr.operations(unit.encoding());
    let mut address = None;
    let mut thread_local = false;
    while let Some(op) = ops.next()? {
        match op {
            gimli::Operation::Address { address: a } => address = Some(a),
            gimli::Operation::AddressIndex { index } => address = Some(dwarf.address(unit, index)?),
            gimli::Operation::UnsignedConstant { value } => address = Some(value),
            gimli::Operation::TLS => thread_local = true,
            // Anything else (registers, frame base, pieces) is not one static address.
            _ => return Ok(None),
        }
    }
    Ok(address
        .filter(|a| *a != 0 || thread_local)
        .map(|a| (a, thread_local)))
}

/// The byte size of a DWARF type, through typedefs, qualifiers and arrays (0 if unknown).
fn type_size(unit: &gimli::Unit<Reader<'_>>, offset: gimli::UnitOffset, depth: u32) -> u64 {
    if depth > 16 {
        return 0;
    }
    let Ok(entry) = unit.entry(offset) else {
        return 0;
    };
    if let Ok(Some(size)) = entry.attr_value(gimli::DW_AT_byte_size) {
        if let Some(size) = size.udata_value() {
            return size;
        }
    }
    let inner = match entry.attr_value(gimli::DW_AT_type) {
        Ok(Some(gimli::AttributeValue::UnitRef(inner))) => inner,
        _ => return 0,
    };
    let element = type_size(unit, inner, depth + 1);
    if entry.tag() != gimli::DW_TAG_array_type {
        return element;
    }
    // An array's size is its element size times each dimension's count.
    let mut total = element;
    let Ok(mut tree) = unit.entries_tree(Some(offset)) else {
        return 0;
    };
    let Ok(root) = tree.root() else { return 0 };
    let mut children = root.children();
    while let Ok(Some(child)) = children.next() {
        let sub = child.entry();
        if sub.tag() != gimli::DW_TAG_subrange_type {
            continue;
        }
        let count = match (
            sub.attr_value(gimli::DW_AT_count),
            sub.attr_value(gimli::DW_AT_upper_bound),
        ) {
            (Ok(Some(count)), _) => count.udata_value(),
            (_, Ok(Some(upper))) => upper.udata_value().map(|u| u + 1),
            _ => None,
        };
        total = total.saturating_mul(count.unwrap_or(0));
    }
    total
}
