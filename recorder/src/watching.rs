//! Turning `--watch` and `--watch-hw` requests into what a [`crate::Recording`]
//! attaches: instruction sites for uprobes, runtime addresses for hardware
//! watchpoints. Errors come before the program starts.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Result};
use ordo_probe_common::WatchSite;

use crate::recording::{HwWatch, MAX_HW_WATCHES};
use crate::watch::{plan_sites, resolve_mark, Resolver, WatchSpec};

/// An instruction site to attach a watch probe at: the module file, the
/// instruction's file offset, and the site (link-time addresses).
type PlacedSite = (PathBuf, u64, WatchSite);

/// Resolved watches, ready for [`crate::RecordOptions`].
#[derive(Default, Debug)]
pub struct WatchSetup {
    /// Uprobe sites: module, file offset, site.
    pub sites: Vec<PlacedSite>,
    /// Hardware watchpoints at runtime addresses.
    pub hw: Vec<HwWatch>,
    /// One line per watch for the user (what was found, how many sites).
    pub notes: Vec<String>,
    /// Watches of a member or element, with the name their events take in the
    /// trace (the spec's path, `cfg.inner.count`): module, link-time address, name.
    pub names: Vec<(PathBuf, u64, String)>,
}

/// The name a watch's events take when it watches a member or element of a
/// variable (`cfg.inner.count`, `cfg.slots[2]`): the spec's own path, which replay
/// resolves back. `None` for a whole variable (its symbol names it), bytes
/// (`var+8:4`) and fields through pointers (each access's object differs).
fn part_watch_name(spec: &WatchSpec) -> Option<String> {
    use crate::watch::{FieldStep, WatchTarget};
    let WatchTarget::Symbol(name) = &spec.target else {
        return None;
    };
    if spec.fields.is_empty()
        || spec.offset != 0
        || spec.size.is_some()
        || spec.fields.iter().any(|f| matches!(f, FieldStep::Deref(_)))
    {
        return None;
    }
    let path: String = spec.fields.iter().map(|f| f.to_string()).collect();
    Some(format!("{name}{path}"))
}

/// Resolves `--watch` specs (instruction-site uprobes) and `--watch-hw` specs
/// (hardware watchpoints) against `main_binary` and `libs`. `load_bias` gives a
/// module's runtime load bias, needed for hardware watchpoints only.
pub fn plan(
    watch: &[String],
    watch_hw: &[String],
    main_binary: &Path,
    libs: &[PathBuf],
    load_bias: &dyn Fn(&Path) -> Option<u64>,
) -> Result<WatchSetup> {
    let mut setup = WatchSetup::default();
    if watch.is_empty() && watch_hw.is_empty() {
        return Ok(setup);
    }
    if watch_hw.len() > MAX_HW_WATCHES {
        bail!("--watch-hw given {} times: x86 has {MAX_HW_WATCHES} debug registers, so at most {MAX_HW_WATCHES} hardware watches", watch_hw.len());
    }
    let mut resolver = Resolver::new(main_binary, libs).map_err(|e| anyhow!("--watch: {e}"))?;
    for text in watch {
        let spec = WatchSpec::parse(text).map_err(|e| anyhow!("--watch {text}: {e}"))?;
        let resolved = resolver
            .resolve(&spec)
            .map_err(|e| anyhow!("--watch {text}: {e}"))?;
        let plan = plan_sites(&resolved).map_err(|e| anyhow!("--watch {text}: {e}"))?;
        if let Some(name) = part_watch_name(&spec) {
            setup
                .names
                .push((resolved.module.clone(), resolved.vaddr, name));
        }
        for skipped in &plan.unprobeable {
            setup.notes.push(format!(
                "warning: {} at {:#x} (`{}`) cannot carry a uprobe and has no probeable neighbour: its accesses are not recorded (use --watch-hw)",
                resolved.name, skipped.access_ip, skipped.instruction
            ));
        }
        if plan.sites.is_empty() {
            match &resolved.through_pointer {
                Some(_) => bail!(
                    "--watch {text}: no instruction in {} loads the pointer and then accesses the field in the same straight-line code (a pointer kept in a register across calls or jumps, or passed as an argument, is not followed)",
                    resolved.module.display()
                ),
                None => bail!(
                    "--watch {text}: no instruction in {} accesses {} directly (accesses through pointers need --watch-hw, or name them as POINTER->field)",
                    resolved.module.display(),
                    resolved.name
                ),
            }
        }
        setup.notes.push(format!(
            "watching {}{} ({} bytes in {}) at {} instruction sites",
            resolved.name,
            if resolved.atomic { ", atomic" } else { "" },
            resolved.size,
            resolved
                .module
                .file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default(),
            plan.sites.len()
        ));
        let mut added = 0;
        for planned in plan.sites {
            // An instruction already probed for an earlier --watch (the same spec
            // twice, or overlapping ones) is probed once: two probes on it would
            // record each access twice.
            if setup
                .sites
                .iter()
                .any(|(m, offset, _)| *m == resolved.module && *offset == planned.file_offset)
            {
                continue;
            }
            let mut site = planned.site;
            site._pad = (planned.access_ip as i64 - site.ip as i64) as i8 as u8;
            setup
                .sites
                .push((resolved.module.clone(), planned.file_offset, site));
            added += 1;
        }
        if added == 0 {
            setup.notes.push(format!(
                "--watch {text}: its instructions are watched already (each access is recorded once)"
            ));
        }
    }
    for text in watch_hw {
        let spec = WatchSpec::parse(text).map_err(|e| anyhow!("--watch-hw {text}: {e}"))?;
        let resolved = resolver
            .resolve(&spec)
            .map_err(|e| anyhow!("--watch-hw {text}: {e}"))?;
        resolved
            .check_hw_breakpoint()
            .map_err(|e| anyhow!("--watch-hw {text}: {e}"))?;
        if let Some(name) = part_watch_name(&spec) {
            setup
                .names
                .push((resolved.module.clone(), resolved.vaddr, name));
        }
        let bias = load_bias(&resolved.module).ok_or_else(|| {
            anyhow!("--watch-hw {text}: the runtime address of {} in {} is not known before the program starts (watch variables of the main program, or attach with --pid)", resolved.name, resolved.module.display())
        })?;
        let addr = resolved.vaddr + bias;
        if setup
            .hw
            .iter()
            .any(|w| w.addr == addr && w.size == resolved.size as u8)
        {
            setup.notes.push(format!(
                "--watch-hw {text}: watched already (each access is recorded once)"
            ));
            continue;
        }
        setup.notes.push(format!(
            "hardware watchpoint on {}{} ({} bytes, reads and writes)",
            resolved.name,
            if resolved.atomic { ", atomic" } else { "" },
            resolved.size
        ));
        setup.hw.push(HwWatch {
            addr,
            size: resolved.size as u8,
            atomic: resolved.atomic,
        });
    }
    Ok(setup)
}

/// Resolves `--mark` specs (program points) in `main_binary` into watch-probe
/// sites that record an `at` event each time a thread reaches the instruction.
/// Returns the sites and one note per mark.
pub fn plan_marks(marks: &[String], main_binary: &Path) -> Result<(Vec<PlacedSite>, Vec<String>)> {
    let mut sites = Vec::new();
    let mut notes = Vec::new();
    for text in marks {
        let mark = resolve_mark(text, main_binary).map_err(|e| anyhow!("--mark {e}"))?;
        let data = crate::file_bytes::read(main_binary)?;
        let bytes = data
            .get(mark.file_offset as usize..)
            .map(|b| &b[..b.len().min(16)])
            .unwrap_or(&[]);
        let mut decoder =
            iced_x86::Decoder::with_ip(64, bytes, mark.vaddr, iced_x86::DecoderOptions::NONE);
        let instr = decoder.decode();
        if instr.is_invalid() || !crate::watch::uprobe_accepts(&instr, bytes) {
            bail!(
                "--mark {text}: the instruction at {} ({:#x}, `{instr}`) cannot carry a uprobe; mark the next statement",
                mark.name,
                mark.vaddr
            );
        }
        notes.push(format!(
            "marking {text} at {} ({:#x})",
            mark.name, mark.vaddr
        ));
        sites.push((
            main_binary.to_path_buf(),
            mark.file_offset,
            mark.watch_site(),
        ));
    }
    Ok((sites, notes))
}

/// The load bias of `module` in a running process, from `/proc/PID/maps`.
pub fn load_bias_in(pid: u32, module: &Path) -> Option<u64> {
    let canonical = std::fs::canonicalize(module).ok()?;
    let modules = ordo_trace::symbolize::modules_of_process(pid);
    let m = modules
        .iter()
        .find(|m| std::fs::canonicalize(&m.path).ok().as_deref() == Some(canonical.as_path()))?;
    let first = m.mappings.iter().min_by_key(|map| map.file_offset)?;
    let info = ordo_trace::symbolize::ElfInfo::read(module).ok()?;
    Some(first.start - info.vaddr_of_offset(first.file_offset))
}
