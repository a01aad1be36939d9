//! `--mark SPEC` and `at(SPEC)`: a program point by `function`, `function+OFFSET`
//! (decimal or `0x` hex) or `file.c:LINE` (the first statement address the DWARF
//! line table gives that line), resolved in the main binary to one instruction.
//! `ordo record --mark` probes it (the watch uprobe program, recording an `at`
//! event); `ordo replay` arms a hardware execute breakpoint on it, like an access gate.

use std::path::Path;

use object::{Object, ObjectSection, ObjectSymbol, SectionKind, SymbolKind};
use ordo_probe_common::{kind, reg, via, WatchSite};
use ordo_trace::symbolize::{demangle, demangle_keeping_hash};

/// A program point located in the main binary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedMark {
    /// Link-time address of the instruction.
    pub vaddr: u64,
    /// Its offset in the file (where a uprobe attaches).
    pub file_offset: u64,
    /// The name a trace gives the point: `function` or `function+OFFSET` (decimal),
    /// the form `ordo dump` prints and the analysis proposes.
    pub name: String,
}

impl ResolvedMark {
    /// The watch-probe description that records an `at` event when a thread reaches
    /// the point (link-time addresses: relocate with the load bias).
    pub fn watch_site(&self) -> WatchSite {
        WatchSite {
            watch_addr: self.vaddr,
            watch_len: 1,
            ip: self.vaddr,
            disp: self.vaddr as i64,
            base: reg::NONE,
            index: reg::NONE,
            scale: 1,
            size: 1,
            access: kind::AT as u8,
            value_reg: reg::NONE,
            via: via::PLAIN,
            ..WatchSite::default()
        }
    }
}

/// Resolves `spec` in `binary`.
pub fn resolve_mark(spec: &str, binary: &Path) -> Result<ResolvedMark, String> {
    let data =
        std::fs::read(binary).map_err(|e| format!("cannot read {}: {e}", binary.display()))?;
    let file = object::File::parse(data.as_slice())
        .map_err(|e| format!("{}: not an ELF file: {e}", binary.display()))?;
    let vaddr = match spec.rsplit_once(':') {
        Some((path, line)) if !path.is_empty() && line.bytes().all(|b| b.is_ascii_digit()) => {
            let line: u64 = line
                .parse()
                .map_err(|_| format!("`{spec}`: LINE is not a number"))?;
            line_address(&file, path, line)
                .map_err(|e| format!("`{spec}`: {e}"))?
                .ok_or_else(|| {
                    format!(
                        "`{spec}`: no code for line {line} of {path} in {} (no debug info, or the line has no statement)",
                        binary.display()
                    )
                })?
        }
        _ => {
            let (name, offset) = match spec.rsplit_once('+') {
                Some((name, off)) if !name.is_empty() => (
                    name,
                    super::spec::parse_number(off)
                        .ok_or_else(|| format!("`{spec}`: OFFSET `{off}` is not a number"))?,
                ),
                _ => (spec, 0),
            };
            let mut functions: Vec<(u64, u64)> = file
                .symbols()
                .chain(file.dynamic_symbols())
                .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0)
                .filter(|s| {
                    s.name().is_ok_and(|n| {
                        n == name || demangle(n) == name || demangle_keeping_hash(n) == name
                    })
                })
                .map(|s| (s.address(), s.size()))
                .collect();
            functions.sort_unstable();
            functions.dedup();
            let Some(&(_, size)) = functions.first() else {
                return Err(format!(
                    "`{spec}`: no function `{name}` in {}",
                    binary.display()
                ));
            };
            // Instances of one generic that demangle alike: the one long enough.
            let fitting: Vec<u64> = functions
                .iter()
                .filter(|(_, size)| *size == 0 || offset < *size)
                .map(|(address, _)| *address)
                .collect();
            match fitting[..] {
                [address] => address + offset,
                [] => return Err(format!("`{spec}`: {name} is only {size} bytes long")),
                _ => {
                    return Err(format!(
                        "`{spec}`: {} functions are named {name}: name one by its symbol with its hash (`nm` prints them)",
                        fitting.len()
                    ))
                }
            }
        }
    };
    let file_offset = file
        .sections()
        .filter(|s| s.kind() == SectionKind::Text)
        .find_map(|s| {
            let (offset, len) = s.file_range()?;
            (s.address() <= vaddr && vaddr < s.address() + len)
                .then(|| offset + vaddr - s.address())
        })
        .ok_or_else(|| {
            format!(
                "`{spec}`: {vaddr:#x} is not in the code of {}",
                binary.display()
            )
        })?;
    let name = file
        .symbols()
        .filter(|s| {
            s.kind() == SymbolKind::Text
                && s.address() <= vaddr
                && vaddr < s.address() + s.size().max(1)
        })
        .max_by_key(|s| s.address())
        .and_then(|s| {
            let base = demangle(s.name().ok()?);
            Some(match vaddr - s.address() {
                0 => base,
                off => format!("{base}+{off}"),
            })
        })
        .unwrap_or_else(|| format!("{vaddr:#x}"));
    Ok(ResolvedMark {
        vaddr,
        file_offset,
        name,
    })
}

/// The lowest statement address of `line` in a file whose name ends with `path`.
fn line_address(file: &object::File<'_>, path: &str, line: u64) -> Result<Option<u64>, String> {
    let (sections, endian) = super::resolve::dwarf_sections(file).map_err(|e| e.to_string())?;
    let dwarf = sections.borrow(|section| gimli::EndianSlice::new(section, endian));
    let mut best: Option<u64> = None;
    let mut units = dwarf.units();
    while let Some(header) = units.next().map_err(|e| e.to_string())? {
        let unit = dwarf.unit(header).map_err(|e| e.to_string())?;
        let Some(program) = unit.line_program.clone() else {
            continue;
        };
        let mut rows = program.rows();
        while let Some((header, row)) = rows.next_row().map_err(|e| e.to_string())? {
            if row.end_sequence() || !row.is_stmt() || row.line().map(|l| l.get()) != Some(line) {
                continue;
            }
            let Some(entry) = row.file(header) else {
                continue;
            };
            let Ok(name) = dwarf.attr_string(&unit, entry.path_name()) else {
                continue;
            };
            let name = name.to_string_lossy();
            let matches = name == path
                || path.ends_with(&format!("/{name}"))
                || name.ends_with(&format!("/{path}"))
                || Path::new(path)
                    .file_name()
                    .is_some_and(|f| f.to_string_lossy() == name);
            if matches {
                best = Some(best.map_or(row.address(), |b| b.min(row.address())));
            }
        }
    }
    Ok(best)
}
