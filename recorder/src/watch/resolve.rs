//! Turning a [`WatchSpec`] into a module and link-time address: ELF symbols first
//! (symtab and dynsym, demangled), DWARF variables when no symbol matches (statics
//! whose symbols are stripped, renamed or mangled beyond recognition).

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use object::{
    Object, ObjectSection, ObjectSegment, ObjectSymbol, SectionKind, SegmentFlags, SymbolKind,
};

use super::spec::{FieldStep, WatchSpec, WatchTarget, MAX_WATCH_SIZE};

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
    /// The watched bytes have an atomic type in DWARF: C11 `_Atomic`, C++
    /// `std::atomic<T>`, `std::atomic_flag`, `std::__atomic_base<T>`, Rust
    /// `core::sync::atomic::Atomic*`. Every access to them is atomic, plain `mov`s
    /// included (x86 atomic loads and release stores are plain moves, so the
    /// instruction alone cannot tell).
    pub atomic: bool,
    /// Set for `POINTER->field`: the watched bytes are inside whatever the global
    /// pointer points to when the access happens. `vaddr`, `object_vaddr` and
    /// `object_size` then describe the pointer variable, not the watched bytes.
    pub through_pointer: Option<PointerHop>,
}

/// How `POINTER->field` reaches its bytes: the pointer's value plus an offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PointerHop {
    /// Link-time address of the pointer (a global, or a field of one).
    pub pointer_vaddr: u64,
    /// Bytes from the pointed-to object's start to the first watched byte.
    pub offset: u64,
    /// Size of the pointed-to type in bytes (0 when unknown).
    pub pointee_size: u64,
}

impl ResolvedWatch {
    /// Checks that an x86 debug register can watch these bytes: the length must be
    /// 1, 2, 4 or 8 and the address aligned to it. Load biases are page-aligned, so
    /// link-time alignment is runtime alignment.
    pub fn check_hw_breakpoint(&self) -> Result<(), String> {
        if self.through_pointer.is_some() {
            return Err(format!(
                "`{}` is reached through a pointer: a hardware watch is armed at one address before the program runs, when the pointer is not set yet; watch it with --watch (its accesses are found where the pointer is loaded), or watch the pointer itself",
                self.name
            ));
        }
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
    /// From DWARF: the compilation unit's source file.
    file: Option<String>,
    /// From DWARF: the variable's type, to follow fields and tell atomics.
    ty: Option<TypeRef>,
    /// From DWARF: the variable's type is atomic.
    atomic: bool,
}

/// What [`Resolver::part_names`] said of one binary's addresses in earlier
/// recordings, kept on disk with its plans ([`crate::plan_cache`]): a hunt's
/// recordings reach the same variables run after run, and naming them anew read
/// the whole binary (~5 MB for a Rust one, ~10 ms on the CPU the recorded
/// program wanted) and walked its DWARF.
pub struct KeptPartNames {
    slot: crate::plan_cache::Slot,
    names: HashMap<u64, Option<String>>,
}

impl KeptPartNames {
    /// Most addresses kept for one binary.
    const MOST: usize = 1 << 16;

    /// The names kept for `binary` as it is now (none yet: empty); `None` when
    /// the cache is off.
    pub fn of(binary: &Path) -> Option<KeptPartNames> {
        let slot = crate::plan_cache::Slot::of("part-names", binary)?;
        let names = slot
            .load()
            .and_then(|entry| {
                let mut strings = entry.strings.into_iter();
                let pairs = entry.numbers.chunks_exact(2);
                if !pairs.remainder().is_empty() {
                    return None;
                }
                pairs
                    .map(|p| match p[1] {
                        0 => Some((p[0], None)),
                        _ => Some((p[0], Some(strings.next()?))),
                    })
                    .collect::<Option<HashMap<_, _>>>()
            })
            .unwrap_or_default();
        Some(KeptPartNames { slot, names })
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// What was said of `vaddr`: `None` if nothing, `Some(None)` if it has no
    /// part name.
    pub fn get(&self, vaddr: u64) -> Option<Option<&str>> {
        self.names.get(&vaddr).map(Option::as_deref)
    }

    /// Adds what was found now and keeps the whole (up to [`Self::MOST`]).
    pub fn add(&mut self, found: &HashMap<u64, Option<String>>) {
        for (&vaddr, name) in found {
            if self.names.len() < Self::MOST {
                self.names.insert(vaddr, name.clone());
            }
        }
        let mut sorted: Vec<(&u64, &Option<String>)> = self.names.iter().collect();
        sorted.sort();
        self.slot.save(&crate::plan_cache::Entry {
            numbers: sorted
                .iter()
                .flat_map(|(&vaddr, name)| [vaddr, name.is_some() as u64])
                .collect(),
            sites: Vec::new(),
            strings: sorted.iter().filter_map(|(_, n)| (*n).clone()).collect(),
        });
    }
}

/// A DWARF type: its unit (by offset in .debug_info) and its entry in the unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TypeRef {
    unit: gimli::DebugInfoOffset,
    entry: gimli::UnitOffset,
}

impl Candidate {
    /// Whether the candidate was defined in source file `file` (a trailing part of
    /// its path: `a.c`, `src/a.c`).
    fn in_file(&self, file: &str) -> bool {
        self.file.as_deref().is_some_and(|f| {
            f == file || f.ends_with(&format!("/{file}")) || file.ends_with(&format!("/{f}"))
        })
    }

    /// How to name this candidate alone, for ambiguity messages.
    fn pick_hint(&self) -> String {
        let mut hint = format!("`{}` at {:#x}", self.name, self.vaddr);
        if let Some(file) = &self.file {
            let short = file.rsplit('/').next().unwrap_or(file);
            hint += &format!(" (`{short}:{}`", self.name);
            if self.raw != self.name {
                hint += &format!(" or `{}`", self.raw);
            }
            hint += ")";
        } else if self.raw != self.name {
            hint += &format!(" (`{}`)", self.raw);
        }
        hint
    }

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
    data: std::sync::Arc<crate::file_bytes::FileBytes>,
    symbols: Vec<Candidate>,
    dwarf: Option<Vec<Candidate>>,
    /// DWARF types of variables by address, found by [`Module::find_types`]
    /// (`None`: the address has no typed variable).
    types: HashMap<u64, Option<TypeRef>>,
    /// (vaddr, size) of each section holding variables or constants.
    data_ranges: Vec<(u64, u64)>,
}

impl Module {
    fn load(path: &Path) -> Result<Module, String> {
        Self::load_with(path, true)
    }

    /// As [`Module::load`]; without `functions`, only the data symbols (what
    /// naming data addresses needs: a Rust binary's ~20 000 function names took
    /// ~10 ms to demangle, on a CPU the recorded program wanted).
    fn load_with(path: &Path, functions: bool) -> Result<Module, String> {
        let data = crate::file_bytes::read(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let file = object::File::parse(&data[..])
            .map_err(|e| format!("{}: not an ELF file: {e}", path.display()))?;
        let mut symbols = Vec::new();
        for sym in file.symbols().chain(file.dynamic_symbols()) {
            if sym.is_undefined() {
                continue;
            }
            let nature = match sym.kind() {
                SymbolKind::Data => Nature::Variable,
                SymbolKind::Tls => Nature::ThreadLocal,
                SymbolKind::Text if functions => Nature::Function,
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
                file: None,
                ty: None,
                atomic: false,
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
            types: HashMap::new(),
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

    /// `c` with what DWARF says of the variable at its address (source file, type,
    /// atomic), when `c` is an ELF symbol.
    fn with_dwarf_facts(&mut self, c: &Candidate) -> Candidate {
        let mut c = c.clone();
        if c.ty.is_none() {
            if let Some(d) = self
                .dwarf_candidates()
                .iter()
                .find(|d| d.vaddr == c.vaddr && d.nature == c.nature)
            {
                c.file = d.file.clone();
                c.ty = d.ty;
                c.atomic = d.atomic;
                if c.size == 0 {
                    c.size = d.size;
                }
            }
        }
        c
    }

    /// Finds the DWARF types of the variables `symbols` without one, in one walk
    /// of the debug info that looks only at variables' locations: reading every
    /// variable with its qualified name ([`Module::dwarf_candidates`]) is ~30 ms
    /// for std's debug info in a Rust binary, paid at the end of every discovery.
    fn find_types<'c>(&mut self, symbols: impl Iterator<Item = &'c Candidate>) {
        let mut wanted: std::collections::HashSet<u64> = symbols
            .filter(|c| c.ty.is_none() && !self.types.contains_key(&c.vaddr))
            .map(|c| c.vaddr)
            .collect();
        if wanted.is_empty() {
            return;
        }
        if let Some(read) = &self.dwarf {
            for &vaddr in &wanted {
                let ty = read
                    .iter()
                    .find(|d| d.vaddr == vaddr && d.nature == Nature::Variable)
                    .and_then(|d| d.ty);
                self.types.insert(vaddr, ty);
            }
            return;
        }
        // Every static variable's type, indexed in one walk of the DWARF (~12 ms
        // for a Rust binary, whose std variables come first) and kept on disk
        // with the binary's plans: a hunt names the same variables run after run.
        let data = self.data.clone();
        let index = crate::plan_cache::cached(
            "variable-types",
            &self.path,
            || Ok(variable_types(&data[..])),
            |index| crate::plan_cache::Entry {
                numbers: index
                    .iter()
                    .collect::<std::collections::BTreeMap<_, _>>()
                    .into_iter()
                    .flat_map(|(&vaddr, ty)| {
                        let (unit, entry) = ty.map_or((u64::MAX, u64::MAX), |t| {
                            (t.unit.0 as u64, t.entry.0 as u64)
                        });
                        [vaddr, unit, entry]
                    })
                    .collect(),
                sites: Vec::new(),
                strings: Vec::new(),
            },
            |entry| {
                let triples = entry.numbers.chunks_exact(3);
                (triples.remainder().is_empty()).then(|| {
                    triples
                        .map(|t| {
                            let ty = (t[1] != u64::MAX).then(|| TypeRef {
                                unit: gimli::DebugInfoOffset(t[1] as usize),
                                entry: gimli::UnitOffset(t[2] as usize),
                            });
                            (t[0], ty)
                        })
                        .collect()
                })
            },
        );
        let found: HashMap<u64, Option<TypeRef>> = index
            .unwrap_or_default()
            .into_iter()
            .filter(|(vaddr, _)| wanted.remove(vaddr))
            .collect();
        for vaddr in wanted {
            self.types.insert(vaddr, None);
        }
        self.types.extend(found);
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
fn best_matches<'c>(
    candidates: impl IntoIterator<Item = &'c Candidate>,
    query: &str,
) -> (u8, Vec<&'c Candidate>) {
    let mut found: Vec<(u8, &Candidate)> = candidates
        .into_iter()
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

    /// A resolver for [`Resolver::part_names`] alone: the main binary's data
    /// symbols only.
    pub fn for_data_names(main_binary: &Path) -> Result<Resolver, String> {
        let main = Module::load_with(main_binary, false)?;
        Ok(Resolver {
            paths: vec![main_binary.to_path_buf()],
            modules: vec![Some(main)],
        })
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

    /// How a `--watch` spec or a schedule names the bytes at `vaddr` of the main
    /// binary when they are a member or element of a variable: `conn.buf`,
    /// `cfg.slots[2]`, `cfg.inner.count` (the members and elements that contain
    /// the address, from DWARF types). `None` at the start of a scalar variable
    /// (its own name serves), outside variables, in padding or a bit-field, or
    /// without DWARF types.
    pub fn part_name(&mut self, vaddr: u64) -> Option<String> {
        self.part_names(&[vaddr]).pop().flatten()
    }

    /// [`Resolver::part_name`] of each of `vaddrs`, reading the DWARF types of
    /// only the variables they fall in, in one pass over the debug info.
    pub fn part_names(&mut self, vaddrs: &[u64]) -> Vec<Option<String>> {
        let Some(main) = self.module(0) else {
            return vec![None; vaddrs.len()];
        };
        let symbols: Vec<Option<(Candidate, u64)>> = vaddrs
            .iter()
            .map(|&v| main.data_symbol_at(v).map(|(c, o)| (c.clone(), o)))
            .collect();
        main.find_types(symbols.iter().flatten().map(|(c, _)| c));
        let wanted: Vec<Option<(String, TypeRef, u64)>> = symbols
            .into_iter()
            .map(|found| {
                let (symbol, offset) = found?;
                let ty = match symbol.ty {
                    Some(ty) => ty,
                    None => (*main.types.get(&symbol.vaddr)?)?,
                };
                Some((symbol.name, ty, offset))
            })
            .collect();
        if wanted.iter().all(Option::is_none) {
            return vec![None; vaddrs.len()];
        }
        // One parse of the DWARF and one walk of each unit for all the addresses
        // (a Rust crate's unit holds std's generics: ~1 ms a walk).
        let named = with_dwarf(&main.data[..], |dwarf| {
            let mut units: HashMap<gimli::DebugInfoOffset, Option<UnitNames<'_>>> = HashMap::new();
            Ok(wanted
                .iter()
                .map(|want| {
                    let (name, ty, offset) = want.as_ref()?;
                    let unit = units
                        .entry(ty.unit)
                        .or_insert_with(|| UnitNames::read(dwarf, ty.unit))
                        .as_ref()?;
                    let path = part_path(dwarf, unit, ty.entry, *offset)?;
                    (!path.is_empty()).then(|| format!("{name}{path}"))
                })
                .collect::<Vec<_>>())
        });
        named
            .ok()
            .flatten()
            .unwrap_or_else(|| vec![None; vaddrs.len()])
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
        // Bytes inside a variable of atomic type are accessed atomically.
        let atomic = main
            .dwarf_candidates()
            .iter()
            .any(|c| c.atomic && c.vaddr <= addr && addr + size as u64 <= c.vaddr + c.size.max(1));
        Ok(ResolvedWatch {
            module: main.path.clone(),
            vaddr: addr,
            size,
            name,
            object_vaddr,
            object_size,
            atomic,
            through_pointer: None,
        })
    }

    fn resolve_symbol(&mut self, query: &str, spec: &WatchSpec) -> Result<ResolvedWatch, String> {
        let mut function_in: Option<String> = None;
        let mut in_other_files: Vec<String> = Vec::new();
        for index in 0..self.paths.len() {
            let Some(module) = self.module(index) else {
                continue;
            };
            let found: Vec<Candidate> = if let Some(file) = &spec.file {
                // Only DWARF knows which source file defined a variable.
                let dwarf = module.dwarf_candidates();
                let (_, all) = best_matches(dwarf, query);
                in_other_files.extend(all.iter().filter_map(|c| c.file.clone()));
                let (_, found) = best_matches(dwarf.iter().filter(|c| c.in_file(file)), query);
                found.into_iter().cloned().collect()
            } else {
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
                found.into_iter().cloned().collect()
            };
            let Some(first) = found.first() else { continue };
            if first.nature == Nature::Function {
                function_in.get_or_insert_with(|| module.file_name());
                continue;
            }
            let found: Vec<Candidate> = found.iter().map(|c| module.with_dwarf_facts(c)).collect();
            if found.len() > 1 {
                let names: Vec<String> = found.iter().map(Candidate::pick_hint).collect();
                return Err(format!(
                    "`{query}` names {} variables in {}: {}; pick one as FILE:NAME, by its full or mangled name, or by address (0xADDR:SIZE)",
                    found.len(),
                    module.file_name(),
                    names.join(", ")
                ));
            }
            return finish_symbol(module, &found[0], spec);
        }
        if let Some(file) = function_in {
            return Err(format!("`{query}` is a function in {file}, not a variable"));
        }
        if let (Some(file), false) = (&spec.file, in_other_files.is_empty()) {
            in_other_files.sort();
            in_other_files.dedup();
            return Err(format!(
                "no variable named `{query}` is defined in source file `{file}`; it is defined in {}",
                in_other_files
                    .iter()
                    .map(|f| format!("`{f}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
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
    let mut name = var.name.clone();
    for step in &spec.fields {
        name += &step.to_string();
    }
    let part = if spec.fields.is_empty() {
        Part {
            offset: 0,
            size: object_size,
            atomic: var.atomic,
            pointer: None,
        }
    } else {
        let Some(ty) = var.ty else {
            return Err(format!(
                "`{}` has no DWARF type (build with -g) to follow `{}`; name the bytes as {}+OFFSET:SIZE",
                var.name,
                &name[var.name.len()..],
                var.name
            ));
        };
        follow_fields(&module.data, ty, &spec.fields).map_err(|e| format!("`{name}`: {e}"))?
    };
    let size = match spec.size {
        Some(size) => size,
        None if part.size == 0 => {
            return Err(format!("the size of `{name}` is unknown; give one: {name}:SIZE"))
        }
        None if part.size > MAX_WATCH_SIZE as u64 => {
            return Err(format!(
                "`{name}` is {} bytes but a watch covers at most {MAX_WATCH_SIZE}; name a field (.field, [n]) or the bytes as {name}+OFFSET:SIZE",
                part.size
            ))
        }
        None => part.size as u32,
    };
    let start = part.offset + spec.offset;
    let end = start + size as u64;
    let limit = match &part.pointer {
        Some((_, pointee_size)) => *pointee_size,
        None => object_size,
    };
    if limit != 0 && end > limit {
        return Err(format!(
            "bytes {start}..{end} go past the end of `{}` ({limit} bytes)",
            if part.pointer.is_some() {
                "the pointed-to object"
            } else {
                var.name.as_str()
            }
        ));
    }
    if spec.offset != 0 {
        name += &format!("+{}", spec.offset);
    }
    let (vaddr, through_pointer) = match part.pointer {
        Some((pointer_offset, pointee_size)) => (
            var.vaddr + pointer_offset,
            Some(PointerHop {
                pointer_vaddr: var.vaddr + pointer_offset,
                offset: start,
                pointee_size,
            }),
        ),
        None => (var.vaddr + start, None),
    };
    Ok(ResolvedWatch {
        module: module.path.clone(),
        vaddr,
        size,
        name,
        object_vaddr: var.vaddr,
        object_size,
        atomic: part.atomic,
        through_pointer,
    })
}

/// Where a field path leads inside a variable.
struct Part {
    /// Bytes from the variable's start (or, through a pointer, from the pointed-to
    /// object's start) to the part.
    offset: u64,
    /// The part's size in bytes (0 if unknown).
    size: u64,
    /// The part's type is atomic.
    atomic: bool,
    /// For `->`: the pointer's offset in the variable and the pointed-to type's size.
    pointer: Option<(u64, u64)>,
}

/// Follows `.member`, `[index]` and one `->member` from a variable of type `ty`.
fn follow_fields(data: &[u8], ty: TypeRef, steps: &[FieldStep]) -> Result<Part, String> {
    let dwarf_error = |e: gimli::Error| format!("reading DWARF: {e}");
    with_dwarf(data, |dwarf| Ok(follow_in(dwarf, ty, steps)))
        .map_err(dwarf_error)?
        .ok_or_else(|| "not an ELF file".to_string())?
}

fn follow_in(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    ty: TypeRef,
    steps: &[FieldStep],
) -> Result<Part, String> {
    let dwarf_error = |e: gimli::Error| format!("reading DWARF: {e}");
    let header = dwarf
        .debug_info
        .header_from_offset(ty.unit)
        .map_err(dwarf_error)?;
    let unit = dwarf.unit(header).map_err(dwarf_error)?;
    let qualified = qualified_names(dwarf, &unit).map_err(dwarf_error)?;
    let mut current = ty.entry;
    let mut offset = 0u64;
    let mut pointer = None;
    for step in steps {
        let concrete = strip_qualifiers(&unit, current);
        let entry = unit.entry(concrete).map_err(dwarf_error)?;
        let type_name = describe_type(&unit, &qualified, concrete);
        match step {
            FieldStep::Member(member) | FieldStep::Deref(member) => {
                let holder = if let FieldStep::Deref(_) = step {
                    if entry.tag() != gimli::DW_TAG_pointer_type {
                        return Err(format!("`->{member}` needs a pointer, not {type_name}"));
                    }
                    if pointer.is_some() {
                        return Err("only one `->` is supported".into());
                    }
                    let pointee = type_attr(&entry)
                        .ok_or_else(|| format!("`->{member}`: the pointer has no pointee type"))?;
                    let pointee = strip_qualifiers(&unit, pointee);
                    pointer = Some((offset, type_size(&unit, pointee, 0)));
                    offset = 0;
                    pointee
                } else {
                    if entry.tag() == gimli::DW_TAG_pointer_type {
                        return Err(format!(
                            "`.{member}`: {type_name} is a pointer; write `->{member}`"
                        ));
                    }
                    concrete
                };
                let (at, member_type) = find_member(dwarf, &unit, holder, member, 0)
                    .map_err(dwarf_error)?
                    .ok_or_else(|| {
                        format!(
                            "{} has no member `{member}`",
                            describe_type(&unit, &qualified, holder)
                        )
                    })?;
                offset += at;
                current = member_type;
            }
            FieldStep::Index(index) => {
                if entry.tag() != gimli::DW_TAG_array_type {
                    return Err(format!("`[{index}]` needs an array, not {type_name}"));
                }
                let element = type_attr(&entry)
                    .ok_or_else(|| format!("`[{index}]`: the array has no element type"))?;
                let total = type_size(&unit, concrete, 0);
                let count = first_dimension(&unit, concrete);
                let stride = match count {
                    Some(n) if n > 0 && total > 0 => total / n,
                    _ => type_size(&unit, element, 0),
                };
                if let Some(n) = count {
                    if *index >= n {
                        return Err(format!("index {index} is past the end of an array of {n}"));
                    }
                }
                offset += index * stride;
                // A multi-dimensional array's element is the rest of the array: not
                // modelled, the element type is the innermost one.
                current = element;
            }
        }
    }
    Ok(Part {
        offset,
        size: type_size(&unit, current, 0),
        atomic: is_atomic_type(&unit, current, &qualified, 0),
        pointer,
    })
}

/// The members and elements (`.inner.count`, `[2]`) from the start of a value of
/// type `ty` to the scalar at `offset` in it; `None` if `offset` is in padding,
/// inside a scalar or a bit-field, or the type cannot be read.
fn part_path(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    names: &UnitNames<'_>,
    ty: gimli::UnitOffset,
    mut offset: u64,
) -> Option<String> {
    let UnitNames { unit, qualified } = names;
    let mut current = ty;
    let mut path = String::new();
    // Nesting deeper than this is not a program's data structure.
    for _ in 0..32 {
        if is_atomic_type(unit, current, qualified, 0) {
            // `refs`, not `refs._M_i`: an atomic is one thing to its users.
            return (offset == 0).then_some(path);
        }
        if is_sync_type(dwarf, unit, current) {
            // A lock, condition variable or semaphore is named by schedules as its
            // variable and offset (`locks+40`), in sync events and accesses alike.
            return None;
        }
        let concrete = strip_qualifiers(unit, current);
        let entry = unit.entry(concrete).ok()?;
        match entry.tag() {
            gimli::DW_TAG_structure_type | gimli::DW_TAG_class_type | gimli::DW_TAG_union_type => {
                let (name, at, member) = member_at(dwarf, unit, concrete, offset)?;
                // Anonymous structs and unions and base classes add no name: a
                // spec reaches their members directly (`find_member`).
                if let Some(name) = name {
                    path.push('.');
                    path.push_str(&name);
                }
                offset -= at;
                current = member;
            }
            gimli::DW_TAG_array_type => {
                let element = type_attr(&entry)?;
                let total = type_size(unit, concrete, 0);
                let stride = match first_dimension(unit, concrete) {
                    Some(n) if n > 0 && total > 0 => total / n,
                    _ => type_size(unit, element, 0),
                };
                if stride == 0 || (total > 0 && offset >= total) {
                    return None;
                }
                let index = offset / stride;
                path.push_str(&format!("[{index}]"));
                offset -= index * stride;
                current = element;
            }
            _ => return (offset == 0).then_some(path),
        }
    }
    None
}

/// Whether a type is (a typedef chain ending in) one of the pthread or POSIX
/// semaphore types, whose insides are libc's.
fn is_sync_type(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &gimli::Unit<Reader<'_>>,
    mut offset: gimli::UnitOffset,
) -> bool {
    for _ in 0..16 {
        let Ok(entry) = unit.entry(offset) else {
            return false;
        };
        let name = entry
            .attr_value(gimli::DW_AT_name)
            .ok()
            .flatten()
            .and_then(|v| dwarf.attr_string(unit, v).ok())
            .map(|s| s.to_string_lossy().into_owned());
        if name.is_some_and(|n| n.starts_with("pthread_") || n == "sem_t") {
            return true;
        }
        match (entry.tag(), type_attr(&entry)) {
            (
                gimli::DW_TAG_typedef | gimli::DW_TAG_const_type | gimli::DW_TAG_volatile_type,
                Some(inner),
            ) => offset = inner,
            _ => return false,
        }
    }
    false
}

/// The member of a struct, class or union whose bytes hold `offset`: its name
/// (`None` for an anonymous member or a base class), offset and type.
fn member_at(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &gimli::Unit<Reader<'_>>,
    holder: gimli::UnitOffset,
    offset: u64,
) -> Option<(Option<String>, u64, gimli::UnitOffset)> {
    let mut tree = unit.entries_tree(Some(holder)).ok()?;
    let root = tree.root().ok()?;
    let mut children = root.children();
    while let Ok(Some(child)) = children.next() {
        let entry = child.entry();
        if !matches!(
            entry.tag(),
            gimli::DW_TAG_member | gimli::DW_TAG_inheritance
        ) {
            continue;
        }
        if matches!(entry.attr_value(gimli::DW_AT_bit_size), Ok(Some(_))) {
            continue;
        }
        let Some(ty) = type_attr(entry) else { continue };
        let at = match entry.attr_value(gimli::DW_AT_data_member_location) {
            Ok(Some(value)) => value.udata_value().unwrap_or(0),
            _ => 0,
        };
        let size = type_size(unit, ty, 0);
        if at <= offset && offset < at + size {
            let name = match entry.tag() {
                gimli::DW_TAG_member => entry
                    .attr_value(gimli::DW_AT_name)
                    .ok()
                    .flatten()
                    .and_then(|v| dwarf.attr_string(unit, v).ok())
                    .map(|s| s.to_string_lossy().into_owned()),
                _ => None,
            };
            return Some((name, at, ty));
        }
    }
    None
}

fn type_attr(
    entry: &gimli::DebuggingInformationEntry<'_, '_, Reader<'_>>,
) -> Option<gimli::UnitOffset> {
    match entry.attr_value(gimli::DW_AT_type) {
        Ok(Some(gimli::AttributeValue::UnitRef(offset))) => Some(offset),
        _ => None,
    }
}

/// Through typedefs and const/volatile/restrict/_Atomic qualifiers to the type itself.
fn strip_qualifiers(
    unit: &gimli::Unit<Reader<'_>>,
    mut offset: gimli::UnitOffset,
) -> gimli::UnitOffset {
    for _ in 0..16 {
        let Ok(entry) = unit.entry(offset) else {
            break;
        };
        let qualifier = matches!(
            entry.tag(),
            gimli::DW_TAG_typedef
                | gimli::DW_TAG_const_type
                | gimli::DW_TAG_volatile_type
                | gimli::DW_TAG_restrict_type
                | gimli::DW_TAG_atomic_type
        );
        match (qualifier, type_attr(&entry)) {
            (true, Some(inner)) => offset = inner,
            _ => break,
        }
    }
    offset
}

/// A type for messages: `struct Node`, `int`, `a pointer`.
fn describe_type(
    unit: &gimli::Unit<Reader<'_>>,
    qualified: &HashMap<gimli::UnitOffset, String>,
    offset: gimli::UnitOffset,
) -> String {
    let Ok(entry) = unit.entry(offset) else {
        return "an unknown type".into();
    };
    let what = match entry.tag() {
        gimli::DW_TAG_structure_type => "struct",
        gimli::DW_TAG_class_type => "class",
        gimli::DW_TAG_union_type => "union",
        gimli::DW_TAG_pointer_type => return "a pointer".into(),
        gimli::DW_TAG_array_type => return "an array".into(),
        gimli::DW_TAG_base_type => "type",
        _ => "type",
    };
    match qualified.get(&offset) {
        Some(name) => format!("{what} `{name}`"),
        None => format!("an unnamed {what}"),
    }
}

/// The member `name` of a struct, class or union: its offset and type. Looks into
/// anonymous structs and unions and into base classes.
fn find_member(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &gimli::Unit<Reader<'_>>,
    holder: gimli::UnitOffset,
    name: &str,
    depth: u32,
) -> Result<Option<(u64, gimli::UnitOffset)>, gimli::Error> {
    if depth > 8 {
        return Ok(None);
    }
    let mut tree = unit.entries_tree(Some(holder))?;
    let root = tree.root()?;
    let mut children = root.children();
    let mut nested = Vec::new();
    while let Some(child) = children.next()? {
        let entry = child.entry();
        let tag = entry.tag();
        if tag != gimli::DW_TAG_member && tag != gimli::DW_TAG_inheritance {
            continue;
        }
        let location = match entry.attr_value(gimli::DW_AT_data_member_location)? {
            Some(value) => value.udata_value().unwrap_or(0),
            None => 0,
        };
        let member_name = entry
            .attr_value(gimli::DW_AT_name)?
            .and_then(|v| dwarf.attr_string(unit, v).ok())
            .map(|s| s.to_string_lossy().into_owned());
        let Some(ty) = type_attr(entry) else { continue };
        match member_name {
            Some(n) if n == name && tag == gimli::DW_TAG_member => {
                if entry.attr_value(gimli::DW_AT_bit_size)?.is_some() {
                    // A bit-field has no byte address of its own.
                    return Ok(None);
                }
                return Ok(Some((location, ty)));
            }
            // Anonymous members and base classes: look inside them afterwards.
            None => nested.push((location, ty)),
            _ => {}
        }
    }
    for (location, ty) in nested {
        let inner = strip_qualifiers(unit, ty);
        if let Some((at, member)) = find_member(dwarf, unit, inner, name, depth + 1)? {
            return Ok(Some((location + at, member)));
        }
    }
    Ok(None)
}

/// The element count of an array type's first dimension.
fn first_dimension(unit: &gimli::Unit<Reader<'_>>, array: gimli::UnitOffset) -> Option<u64> {
    let mut tree = unit.entries_tree(Some(array)).ok()?;
    let root = tree.root().ok()?;
    let mut children = root.children();
    while let Ok(Some(child)) = children.next() {
        let sub = child.entry();
        if sub.tag() != gimli::DW_TAG_subrange_type {
            continue;
        }
        return match (
            sub.attr_value(gimli::DW_AT_count),
            sub.attr_value(gimli::DW_AT_upper_bound),
        ) {
            (Ok(Some(count)), _) => count.udata_value(),
            (_, Ok(Some(upper))) => upper.udata_value().map(|u| u + 1),
            _ => None,
        };
    }
    None
}

/// Whether a qualified type name is one of the atomic types of C++'s and Rust's
/// standard libraries (libstdc++ and libc++ spellings).
fn atomic_type_name(qualified: &str) -> bool {
    if let Some(rust) = qualified.strip_prefix("core::sync::atomic::") {
        return rust.starts_with("Atomic");
    }
    let Some(std) = qualified.strip_prefix("std::") else {
        return false;
    };
    let std = std.strip_prefix("__1::").unwrap_or(std);
    [
        "atomic<",
        "__atomic_base<",
        "__atomic_float<",
        "__cxx_atomic_impl<",
    ]
    .iter()
    .any(|p| std.starts_with(p))
        || matches!(std, "atomic_flag" | "__atomic_flag_base")
}

/// Whether a type is atomic: C11 `_Atomic` (through typedefs such as
/// `atomic_int`) or a standard library atomic class.
fn is_atomic_type(
    unit: &gimli::Unit<Reader<'_>>,
    offset: gimli::UnitOffset,
    qualified: &HashMap<gimli::UnitOffset, String>,
    depth: u32,
) -> bool {
    if depth > 16 {
        return false;
    }
    let Ok(entry) = unit.entry(offset) else {
        return false;
    };
    match entry.tag() {
        gimli::DW_TAG_atomic_type => true,
        gimli::DW_TAG_typedef
        | gimli::DW_TAG_const_type
        | gimli::DW_TAG_volatile_type
        | gimli::DW_TAG_restrict_type => {
            type_attr(&entry).is_some_and(|inner| is_atomic_type(unit, inner, qualified, depth + 1))
        }
        gimli::DW_TAG_structure_type | gimli::DW_TAG_class_type | gimli::DW_TAG_union_type => {
            qualified.get(&offset).is_some_and(|q| atomic_type_name(q))
        }
        _ => false,
    }
}

/// A DWARF unit and its entries' path-qualified names.
struct UnitNames<'d> {
    unit: gimli::Unit<Reader<'d>>,
    qualified: HashMap<gimli::UnitOffset, String>,
}

impl<'d> UnitNames<'d> {
    /// The unit at `offset` in `.debug_info`, walked once.
    fn read(dwarf: &gimli::Dwarf<Reader<'d>>, offset: gimli::DebugInfoOffset) -> Option<Self> {
        let header = dwarf.debug_info.header_from_offset(offset).ok()?;
        let unit = dwarf.unit(header).ok()?;
        let qualified = qualified_names(dwarf, &unit).ok()?;
        Some(UnitNames { unit, qualified })
    }
}

/// Every named entry of a unit by its path-qualified name.
fn qualified_names(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    unit: &gimli::Unit<Reader<'_>>,
) -> Result<HashMap<gimli::UnitOffset, String>, gimli::Error> {
    let mut qualified = HashMap::new();
    let mut pending = Vec::new();
    let mut tree = unit.entries_tree(None)?;
    walk(dwarf, unit, tree.root()?, "", &mut qualified, &mut pending)?;
    Ok(qualified)
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
    ty: Option<gimli::UnitOffset>,
}

/// A file's DWARF sections (borrowed from the file, or decompressed) and its byte
/// order.
type Sections<'d> = (gimli::DwarfSections<Cow<'d, [u8]>>, gimli::RunTimeEndian);

/// A file's DWARF sections (empty where missing) and its byte order.
pub(crate) fn dwarf_sections<'d>(file: &object::File<'d>) -> Result<Sections<'d>, gimli::Error> {
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

/// Every DWARF variable with a static location (DW_OP_addr), path-qualified by its
/// enclosing namespaces, types and functions.
fn read_dwarf_variables(data: &[u8]) -> Result<Vec<Candidate>, gimli::Error> {
    Ok(with_dwarf(data, dwarf_variables)?.unwrap_or_default())
}

/// Runs `f` on an ELF file's DWARF sections; `None` when `data` is not an ELF file.
fn with_dwarf<T>(
    data: &[u8],
    f: impl FnOnce(&gimli::Dwarf<Reader<'_>>) -> Result<T, gimli::Error>,
) -> Result<Option<T>, gimli::Error> {
    let Ok(file) = object::File::parse(data) else {
        return Ok(None);
    };
    let (sections, endian) = dwarf_sections(&file)?;
    let dwarf = sections.borrow(|section| gimli::EndianSlice::new(section, endian));
    f(&dwarf).map(Some)
}

/// The DWARF type of every static variable of the ELF file `data` (the first
/// definition at an address), by address; empty without DWARF.
fn variable_types(data: &[u8]) -> HashMap<u64, Option<TypeRef>> {
    let walked = with_dwarf(data, |dwarf| {
        let mut found = HashMap::new();
        let mut units = dwarf.units();
        while let Some(header) = units.next()? {
            let unit = dwarf.unit(header)?;
            let Some(unit_offset) = unit.header.offset().as_debug_info_offset() else {
                continue;
            };
            let mut entries = unit.entries();
            while let Some((_, entry)) = entries.next_dfs()? {
                if entry.tag() != gimli::DW_TAG_variable {
                    continue;
                }
                let Some((vaddr, false)) = static_location(dwarf, &unit, entry)? else {
                    continue;
                };
                if found.contains_key(&vaddr) {
                    continue;
                }
                // A C++ static member's definition may leave the type to its declaration.
                let ty = type_attr(entry).or_else(|| {
                    let gimli::AttributeValue::UnitRef(declared) =
                        entry.attr_value(gimli::DW_AT_specification).ok()??
                    else {
                        return None;
                    };
                    type_attr(&unit.entry(declared).ok()?)
                });
                found.insert(
                    vaddr,
                    ty.map(|entry| TypeRef {
                        unit: unit_offset,
                        entry,
                    }),
                );
            }
        }
        Ok(found)
    });
    walked.ok().flatten().unwrap_or_default()
}

fn dwarf_variables(dwarf: &gimli::Dwarf<Reader<'_>>) -> Result<Vec<Candidate>, gimli::Error> {
    let mut out = Vec::new();
    let mut units = dwarf.units();
    while let Some(header) = units.next()? {
        let unit = dwarf.unit(header)?;
        let mut qualified: HashMap<gimli::UnitOffset, String> = HashMap::new();
        let mut pending = Vec::new();
        let mut tree = unit.entries_tree(None)?;
        walk(dwarf, &unit, tree.root()?, "", &mut qualified, &mut pending)?;
        let unit_offset = unit.header.offset().as_debug_info_offset();
        let file = unit.name.map(|n| n.to_string_lossy().into_owned());
        for var in pending {
            let atomic = var
                .ty
                .is_some_and(|ty| is_atomic_type(&unit, ty, &qualified, 0));
            let ty = match (unit_offset, var.ty) {
                (Some(unit), Some(entry)) => Some(TypeRef { unit, entry }),
                _ => None,
            };
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
                file: file.clone(),
                ty,
                atomic,
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
        .map(|s| s.to_string_lossy().into_owned())
        // `nm -C` spells an unnamed namespace this way.
        .or_else(|| {
            (entry.tag() == gimli::DW_TAG_namespace).then(|| "(anonymous namespace)".to_string())
        });
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
            // A C++ static member's definition may leave the type to its declaration.
            let ty = type_attr(entry).or_else(|| {
                let declaration = unit.entry(specification?).ok()?;
                type_attr(&declaration)
            });
            let size = ty.map_or(0, |offset| type_size(unit, offset, 0));
            pending.push(PendingVariable {
                name: full.clone(),
                linkage,
                specification,
                vaddr,
                thread_local,
                size,
                ty,
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
