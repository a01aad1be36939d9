//! The probe table: which libc functions are probed, what each one does, and where
//! in the file its probe goes.
//!
//! One generic entry program and one generic return program serve every row; the
//! row's op and via travel in the uprobe cookie. Releases are probed at entry, moved
//! to the first instruction the kernel emulates ([`cheap_entry_offset`]). The hot
//! acquisitions (rows with `placed`) are decoded by [`placement`]: their outcome is
//! recorded by one probe (`ordo_site`, a cookie indexing `PROBE_SITES`) on the last
//! conditional jump before each return, with no return probe; when decoding does
//! not fit, they fall back to entry + return at the function start. [`plan`] turns
//! the table into the list of attachments and a human-readable report of every site.

pub mod placement;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use object::elf;
use object::read::elf::{ElfFile64, ProgramHeader, Sym};
use object::{Endianness, SymbolIndex};
use ordo_probe_common::{cookie, op, via};

/// One probed function.
#[derive(Clone, Copy, Debug)]
pub struct ProbeRow {
    /// Exported symbol in libc.so.6.
    pub function: &'static str,
    /// What the function does (`ordo_probe_common::op`).
    pub op: u8,
    /// How it acquires (`ordo_probe_common::via`).
    pub via: u8,
    /// Whether a return probe is needed (acquisitions and waits report on return).
    pub on_return: bool,
    /// Byte offset of the entry probe from the function start, or [`AUTO_OFFSET`] to
    /// let [`cheap_entry_offset`] choose. Only offsets where the argument registers and
    /// the return address on the stack are still intact are valid.
    pub offset: u64,
    /// Whether [`placement`] may replace the entry + return pair by probes inside the
    /// function (acquisitions whose placement is tested end to end).
    pub placed: bool,
}

/// Marks a row whose entry probe may move to the first instruction the kernel
/// emulates, found by decoding the function's entry.
pub const AUTO_OFFSET: u64 = u64::MAX;

const fn row(function: &'static str, op: u8, via: u8, on_return: bool) -> ProbeRow {
    // A return probe traps at the function's first instruction anyway, so its entry
    // probe stays there (one trap serves both); entry-only probes may move.
    ProbeRow {
        function,
        op,
        via,
        on_return,
        offset: if on_return { 0 } else { AUTO_OFFSET },
        placed: false,
    }
}

const fn placed(function: &'static str, op: u8, via: u8) -> ProbeRow {
    ProbeRow {
        placed: true,
        ..row(function, op, via, true)
    }
}

/// The offset of the first instruction in a function's straight-line entry that the
/// kernel emulates instead of single-stepping (a relative jmp or call, a register
/// push, a nop: ~1 µs a hit instead of ~8 µs here), provided nothing before it
/// writes rdi (the first argument, which every probe reads) or rsp (the return
/// address must still be on top of the stack). 0 when there is none.
pub fn cheap_entry_offset(code: &[u8], address: u64) -> u64 {
    use iced_x86::{
        Code, Decoder, DecoderOptions, FlowControl, InstructionInfoFactory, Mnemonic, OpAccess,
        Register,
    };
    let mut decoder = Decoder::with_ip(64, code, address, DecoderOptions::NONE);
    let mut info = InstructionInfoFactory::new();
    for _ in 0..16 {
        if !decoder.can_decode() {
            break;
        }
        let insn = decoder.decode();
        if insn.is_invalid() {
            break;
        }
        let emulated = matches!(
            insn.code(),
            Code::Jmp_rel8_64 | Code::Jmp_rel32_64 | Code::Call_rel32_64 | Code::Push_r64
        ) || insn.mnemonic() == Mnemonic::Nop;
        if emulated {
            return insn.ip() - address;
        }
        if insn.flow_control() != FlowControl::Next {
            break;
        }
        let writes_protected = info.info(&insn).used_registers().iter().any(|r| {
            matches!(r.register().full_register(), Register::RDI | Register::RSP)
                && matches!(
                    r.access(),
                    OpAccess::Write
                        | OpAccess::ReadWrite
                        | OpAccess::CondWrite
                        | OpAccess::ReadCondWrite
                )
        });
        if writes_protected {
            break;
        }
    }
    0
}

/// Every probed libc function.
pub const PROBES: &[ProbeRow] = &[
    placed("pthread_mutex_lock", op::MUTEX_ACQUIRE, via::PLAIN),
    placed("pthread_mutex_trylock", op::MUTEX_ACQUIRE, via::TRY),
    row(
        "pthread_mutex_timedlock",
        op::MUTEX_ACQUIRE,
        via::TIMED,
        true,
    ),
    row(
        "pthread_mutex_clocklock",
        op::MUTEX_ACQUIRE,
        via::TIMED,
        true,
    ),
    row("pthread_mutex_unlock", op::MUTEX_RELEASE, via::PLAIN, false),
    placed("pthread_rwlock_rdlock", op::RWLOCK_READ, via::PLAIN),
    placed("pthread_rwlock_tryrdlock", op::RWLOCK_READ, via::TRY),
    row(
        "pthread_rwlock_timedrdlock",
        op::RWLOCK_READ,
        via::TIMED,
        true,
    ),
    row(
        "pthread_rwlock_clockrdlock",
        op::RWLOCK_READ,
        via::TIMED,
        true,
    ),
    placed("pthread_rwlock_wrlock", op::RWLOCK_WRITE, via::PLAIN),
    placed("pthread_rwlock_trywrlock", op::RWLOCK_WRITE, via::TRY),
    row(
        "pthread_rwlock_timedwrlock",
        op::RWLOCK_WRITE,
        via::TIMED,
        true,
    ),
    row(
        "pthread_rwlock_clockwrlock",
        op::RWLOCK_WRITE,
        via::TIMED,
        true,
    ),
    row(
        "pthread_rwlock_unlock",
        op::RWLOCK_RELEASE,
        via::PLAIN,
        false,
    ),
    row("pthread_cond_wait", op::COND_WAIT, via::PLAIN, true),
    row("pthread_cond_timedwait", op::COND_WAIT, via::TIMED, true),
    row("pthread_cond_clockwait", op::COND_WAIT, via::TIMED, true),
    row("pthread_cond_signal", op::COND_SIGNAL, via::PLAIN, false),
    row(
        "pthread_cond_broadcast",
        op::COND_BROADCAST,
        via::PLAIN,
        false,
    ),
    placed("sem_wait", op::SEM_WAIT, via::PLAIN),
    placed("sem_trywait", op::SEM_WAIT, via::TRY),
    row("sem_timedwait", op::SEM_WAIT, via::TIMED, true),
    row("sem_clockwait", op::SEM_WAIT, via::TIMED, true),
    row("sem_post", op::SEM_POST, via::PLAIN, false),
    row("pthread_barrier_wait", op::BARRIER_WAIT, via::PLAIN, true),
    row("pthread_create", op::THREAD_CREATE, via::PLAIN, true),
    row("pthread_join", op::THREAD_JOIN, via::PLAIN, true),
    row("pthread_tryjoin_np", op::THREAD_JOIN, via::TRY, true),
    row("pthread_timedjoin_np", op::THREAD_JOIN, via::TIMED, true),
    row("pthread_clockjoin_np", op::THREAD_JOIN, via::TIMED, true),
    // Marks direct futex calls (Rust std, C++ atomic wait) for the futex tracepoint.
    row("syscall", op::SYSCALL_FN, via::PLAIN, false),
];

/// The C library the target will load: the one this process uses (same system).
pub fn system_libc() -> Result<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").context("read /proc/self/maps")?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| Path::new(p).file_name().is_some_and(|n| n == "libc.so.6"))
        .map(PathBuf::from)
        .ok_or_else(|| anyhow!("libc.so.6 is not mapped in this process"))
}

/// Which eBPF program an attachment runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Program {
    /// `ordo_entry`: arguments at a function's entry (or at a tail call).
    Entry,
    /// `ordo_return`: the return probe paired with an entry stash.
    Return,
    /// `ordo_site`: a placed site; the cookie indexes `PROBE_SITES`.
    Site,
}

impl Program {
    /// The program's name in the eBPF object.
    pub fn name(self) -> &'static str {
        match self {
            Program::Entry => "ordo_entry",
            Program::Return => "ordo_return",
            Program::Site => "ordo_site",
        }
    }
}

/// One uprobe to attach to libc.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attachment {
    /// The program.
    pub program: Program,
    /// File offset in libc.
    pub offset: u64,
    /// The uprobe cookie: op | via << 8 for entry/return, the site index for `ordo_site`.
    pub cookie: u64,
}

/// One probe site, described for `ordo record -v` and `--list-probes`.
#[derive(Clone, Debug)]
pub struct SiteReport {
    /// The libc function.
    pub function: &'static str,
    /// File offset of the probed instruction in libc.
    pub offset: u64,
    /// Offset of the instruction from the function's start.
    pub function_offset: u64,
    /// The instruction (Intel syntax).
    pub instruction: String,
    /// Whether the kernel emulates it (one cheap trap) rather than single-stepping it.
    pub emulated: bool,
    /// The eBPF program.
    pub program: &'static str,
    /// What the probe records.
    pub events: String,
    /// Why the function fell back to entry + return probes, if it did.
    pub fallback: Option<String>,
}

/// Everything a recording attaches to libc.
#[derive(Clone, Debug, Default)]
pub struct ProbePlan {
    /// Every uprobe.
    pub attachments: Vec<Attachment>,
    /// The placed sites, indexed by the cookies of [`Program::Site`] attachments.
    pub sites: Vec<ordo_probe_common::ProbeSite>,
    /// One line per attachment site.
    pub report: Vec<SiteReport>,
}

/// libc's bytes by virtual address, and its exported functions by address.
struct LibcImage<'a> {
    data: &'a [u8],
    /// (vaddr, filesz, file offset) of each loadable segment.
    segments: Vec<(u64, u64, u64)>,
    functions: HashMap<u64, String>,
}

impl LibcImage<'_> {
    fn offset_of(&self, vaddr: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|(start, size, _)| vaddr >= *start && vaddr < start + size)
            .map(|(start, _, off)| vaddr - start + off)
    }
}

impl placement::Image for LibcImage<'_> {
    fn bytes(&self, vaddr: u64, len: usize) -> Option<&[u8]> {
        let off = self.offset_of(vaddr)? as usize;
        self.data.get(off..off.checked_add(len)?)
    }

    fn symbol_at(&self, vaddr: u64) -> Option<&str> {
        self.functions.get(&vaddr).map(String::as_str)
    }
}

/// The events a probe of `op` records, by trace name.
fn events_of(op: u8) -> &'static str {
    match op {
        op::MUTEX_ACQUIRE => "mutex_lock|mutex_lock_failed",
        op::MUTEX_RELEASE => "mutex_unlock",
        op::RWLOCK_READ => "rwlock_rdlock|rwlock_lock_failed",
        op::RWLOCK_WRITE => "rwlock_wrlock|rwlock_lock_failed",
        op::RWLOCK_RELEASE => "rwlock_unlock",
        op::COND_WAIT => "cond_wait_begin+mutex_unlock (return: cond_wait+mutex_lock)",
        op::COND_SIGNAL => "cond_signal",
        op::COND_BROADCAST => "cond_broadcast",
        op::SEM_WAIT => "sem_wait|sem_wait_failed",
        op::SEM_POST => "sem_post",
        op::BARRIER_WAIT => "barrier_arrive (return: barrier_wait)",
        op::THREAD_CREATE => "thread_create",
        op::THREAD_JOIN => "thread_join",
        op::SYSCALL_FN => "marks direct futex calls",
        _ => "?",
    }
}

fn describe_outcome(o: placement::Outcome) -> String {
    match o {
        placement::Outcome::None => "-".into(),
        placement::Outcome::Const(c) => format!("returns {c}"),
        placement::Outcome::Reg(r) => format!("returns {r:?}"),
        placement::Outcome::NonZeroShl(r, s) => format!("returns ({r:?}!=0)<<{s}"),
    }
}

fn describe_instruction(image: &LibcImage, vaddr: u64) -> (String, bool) {
    use iced_x86::{Decoder, DecoderOptions, Formatter, IntelFormatter};
    let Some(code) = placement::Image::bytes(image, vaddr, 16) else {
        return ("?".into(), false);
    };
    let insn = Decoder::with_ip(64, code, vaddr, DecoderOptions::NONE).decode();
    let mut text = String::new();
    IntelFormatter::new().format(&insn, &mut text);
    (text, placement::is_emulated(&insn))
}

/// Resolves every table row present in `libc` to the probes a recording attaches.
/// Versioned symbols resolve to their default version (`pthread_cond_wait@@GLIBC_2.3.2`,
/// not the compat `@GLIBC_2.2.5` one that old binaries bind to).
pub fn plan(libc: &Path) -> Result<ProbePlan> {
    let data = std::fs::read(libc).with_context(|| format!("read {}", libc.display()))?;
    let file = ElfFile64::<Endianness>::parse(data.as_slice())
        .with_context(|| format!("{}: not a 64-bit ELF", libc.display()))?;
    let endian = file.endian();
    let sections = file.elf_section_table();
    let symbols = sections
        .symbols(endian, data.as_slice(), elf::SHT_DYNSYM)
        .with_context(|| format!("{}: dynamic symbols", libc.display()))?;
    let versions = sections.versions(endian, data.as_slice()).ok().flatten();
    let segments = file
        .elf_program_headers()
        .iter()
        .filter(|ph| ph.p_type(endian) == elf::PT_LOAD)
        .map(|ph| (ph.p_vaddr(endian), ph.p_filesz(endian), ph.p_offset(endian)))
        .collect();
    let mut functions = HashMap::new();
    for sym in symbols.symbols().iter() {
        if sym.st_type() == elf::STT_FUNC && sym.st_value(endian) != 0 {
            if let Ok(name) = symbols.symbol_name(endian, sym) {
                functions.insert(
                    sym.st_value(endian),
                    String::from_utf8_lossy(name).into_owned(),
                );
            }
        }
    }
    let image = LibcImage {
        data: &data,
        segments,
        functions,
    };
    let mut out = ProbePlan {
        attachments: Vec::new(),
        sites: Vec::new(),
        report: Vec::new(),
    };
    let mut found_lock = false;
    for row in PROBES {
        let mut found = None;
        for (index, sym) in symbols.symbols().iter().enumerate() {
            if sym.st_value(endian) == 0 || sym.st_type() != elf::STT_FUNC {
                continue;
            }
            if symbols.symbol_name(endian, sym).ok() != Some(row.function.as_bytes()) {
                continue;
            }
            let hidden = versions
                .as_ref()
                .is_some_and(|v| v.version_index(endian, SymbolIndex(index)).is_hidden());
            if !hidden {
                found = Some((sym.st_value(endian), sym.st_size(endian)));
                break;
            }
        }
        let Some((vaddr, size)) = found else { continue };
        found_lock |= row.function == "pthread_mutex_lock";
        let Some(function_offset) = image.offset_of(vaddr) else {
            bail!(
                "{}: {} is outside every loadable segment",
                libc.display(),
                row.function
            );
        };
        let mut fallback = None;
        if row.placed {
            let blocks = row.op == op::MUTEX_ACQUIRE && row.via == via::PLAIN;
            match placement::place(&image, vaddr, size, blocks) {
                Ok(placed) => {
                    add_placed(&mut out, row, vaddr, function_offset, &placed)?;
                    continue;
                }
                Err(e) => fallback = Some(format!("{e:#}")),
            }
        }
        let entry = match row.offset {
            AUTO_OFFSET => {
                let code = placement::Image::bytes(&image, vaddr, 64.min(size.max(16) as usize))
                    .unwrap_or_default();
                cheap_entry_offset(code, vaddr)
            }
            fixed => fixed,
        };
        let cookie = cookie(row.op, row.via);
        let (instruction, emulated) = describe_instruction(&image, vaddr + entry);
        out.attachments.push(Attachment {
            program: Program::Entry,
            offset: function_offset + entry,
            cookie,
        });
        let mut events = events_of(row.op).to_string();
        if row.on_return {
            out.attachments.push(Attachment {
                program: Program::Return,
                offset: function_offset,
                cookie,
            });
            events = format!("{events} (entry stash + return probe)");
        }
        out.report.push(SiteReport {
            function: row.function,
            offset: function_offset + entry,
            function_offset: entry,
            instruction,
            emulated,
            program: if row.on_return {
                "ordo_entry+ordo_return"
            } else {
                "ordo_entry"
            },
            events,
            fallback,
        });
    }
    if !found_lock {
        bail!(
            "{}: no pthread_mutex_lock: not a glibc with the pthread API",
            libc.display()
        );
    }
    Ok(out)
}

fn add_placed(
    out: &mut ProbePlan,
    row: &ProbeRow,
    vaddr: u64,
    function_offset: u64,
    placed: &placement::Placement,
) -> Result<()> {
    use placement::SiteKind;
    for site in &placed.sites {
        let offset = function_offset + (site.address - vaddr);
        let cookie_ = cookie(row.op, row.via);
        let (program, events) = match &site.kind {
            SiteKind::TailCall => {
                out.attachments.push(Attachment {
                    program: Program::Entry,
                    offset,
                    cookie: cookie_,
                });
                out.attachments.push(Attachment {
                    program: Program::Return,
                    offset,
                    cookie: cookie_,
                });
                (
                    "ordo_entry+ordo_return",
                    format!(
                        "{} (tail call: entry stash + return probe)",
                        events_of(row.op)
                    ),
                )
            }
            kind => {
                let index = out.sites.len() as u64;
                if index >= u64::from(ordo_probe_common::MAX_PROBE_SITES) {
                    bail!(
                        "more than {} placed probe sites",
                        ordo_probe_common::MAX_PROBE_SITES
                    );
                }
                let (arg_reg, arg_disp) = match site.arg {
                    placement::Loc::Reg(r) => (
                        placement::reg_number(r)
                            .ok_or_else(|| anyhow!("{r:?} is not a general-purpose register"))?,
                        0,
                    ),
                    placement::Loc::Slot(k) => {
                        (ordo_probe_common::reg::RSP, (site.depth as i64 + k) as i32)
                    }
                };
                let (cond, taken, fallthrough) = match kind {
                    SiteKind::Outcome {
                        cond,
                        taken,
                        fallthrough,
                    } => (*cond, *taken, *fallthrough),
                    _ => (None, placement::Outcome::None, placement::Outcome::None),
                };
                out.sites.push(ordo_probe_common::ProbeSite {
                    depth: site.depth,
                    arg_disp,
                    taken: placement::encode_outcome(taken),
                    fallthrough: placement::encode_outcome(fallthrough),
                    op: row.op,
                    via: row.via,
                    action: placement::action_of(kind),
                    cond: cond.unwrap_or(ordo_probe_common::reg::NONE),
                    arg_reg,
                    _reserved: [0; 3],
                });
                out.attachments.push(Attachment {
                    program: Program::Site,
                    offset,
                    cookie: index,
                });
                let events = match kind {
                    SiteKind::Block => "mutex_block".to_string(),
                    _ if cond.is_some() => format!(
                        "{} (jump taken: {}; falls through: {})",
                        events_of(row.op),
                        describe_outcome(taken),
                        describe_outcome(fallthrough)
                    ),
                    _ => format!("{} ({})", events_of(row.op), describe_outcome(taken)),
                };
                ("ordo_site", events)
            }
        };
        out.report.push(SiteReport {
            function: row.function,
            offset,
            function_offset: site.address - vaddr,
            instruction: site.text.clone(),
            emulated: site.emulated,
            program,
            events,
            fallback: None,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_the_system_libc() {
        let libc = system_libc().unwrap();
        let plan = plan(&libc).unwrap();
        for line in &plan.report {
            eprintln!(
                "{:28} {:#8x} +{:<4x} {:32} emulated={:5} {} {} {}",
                line.function,
                line.offset,
                line.function_offset,
                line.instruction,
                line.emulated,
                line.program,
                line.events,
                line.fallback.as_deref().unwrap_or("")
            );
        }
        let names: Vec<_> = plan.report.iter().map(|p| p.function).collect();
        for f in [
            "pthread_mutex_lock",
            "pthread_mutex_unlock",
            "pthread_cond_wait",
            "sem_post",
            "pthread_create",
            "syscall",
        ] {
            assert!(names.contains(&f), "{f} missing from {names:?}");
        }
        // The hot acquisitions are placed inside the function: no return probe at
        // their start, and every site of the common path is emulated.
        let start_of = |f: &str| {
            plan.report
                .iter()
                .find(|r| r.function == f)
                .map(|r| r.offset - r.function_offset)
                .unwrap()
        };
        for f in [
            "pthread_mutex_lock",
            "pthread_mutex_trylock",
            "pthread_rwlock_rdlock",
            "pthread_rwlock_wrlock",
            "pthread_rwlock_trywrlock",
            "sem_wait",
            "sem_trywait",
        ] {
            let start = start_of(f);
            assert!(
                !plan
                    .attachments
                    .iter()
                    .any(|a| a.program == Program::Return && a.offset == start),
                "{f} still has a return probe at its start"
            );
            let sites: Vec<_> = plan.report.iter().filter(|r| r.function == f).collect();
            assert!(sites.iter().all(|r| r.fallback.is_none()), "{f} fell back");
            assert!(
                sites.iter().any(|r| r.emulated && r.program == "ordo_site"),
                "{f} has no emulated site"
            );
        }
        // pthread_mutex_lock's fast path falls straight through from the entry to its
        // site: the depth decoding gives must be the pushes and `sub rsp` on the way,
        // and the mutex still in rdi (nothing on the way writes it).
        let libc_bytes = std::fs::read(&libc).unwrap();
        let lock = start_of("pthread_mutex_lock");
        let fast = plan
            .attachments
            .iter()
            .zip(0..)
            .filter(|(a, _)| a.program == Program::Site && a.offset > lock)
            .map(|(a, _)| a)
            .min_by_key(|a| a.offset)
            .unwrap();
        let site = plan.sites[fast.cookie as usize];
        let code = &libc_bytes[lock as usize..fast.offset as usize];
        let mut decoder = iced_x86::Decoder::new(64, code, iced_x86::DecoderOptions::NONE);
        let (mut depth, mut rdi_written) = (0i64, false);
        let mut info = iced_x86::InstructionInfoFactory::new();
        for insn in &mut decoder {
            match insn.code() {
                iced_x86::Code::Push_r64 => depth += 8,
                iced_x86::Code::Sub_rm64_imm8 | iced_x86::Code::Sub_rm64_imm32 => {
                    depth += insn.immediate(1) as i64
                }
                _ => {}
            }
            rdi_written |= info.info(&insn).used_registers().iter().any(|r| {
                r.register().full_register() == iced_x86::Register::RDI
                    && r.access() != iced_x86::OpAccess::Read
            });
        }
        assert_eq!(site.depth as i64, depth);
        assert!(!rdi_written);
        assert_eq!(site.arg_reg, ordo_probe_common::reg::RDI);
        assert_eq!(site.fallthrough.kind, ordo_probe_common::outcome::CONST);
        assert_eq!(site.fallthrough.value, 0);
        // Site cookies index the site table.
        for a in plan
            .attachments
            .iter()
            .filter(|a| a.program == Program::Site)
        {
            assert!((a.cookie as usize) < plan.sites.len());
        }
    }
}

#[cfg(test)]
mod placement_tests {
    use super::cheap_entry_offset;

    #[test]
    fn moves_to_the_first_emulated_instruction() {
        // mov $1,%esi ; jmp rel32 (glibc 2.36's pthread_mutex_unlock)
        let unlock = [0xbe, 0x01, 0, 0, 0, 0xe9, 0xf6, 0xfe, 0xff, 0xff];
        assert_eq!(cheap_entry_offset(&unlock, 0x8dd50), 5);
        // push %r15 first: already emulated at 0.
        assert_eq!(cheap_entry_offset(&[0x41, 0x57, 0x41, 0x56], 0x1000), 0);
        // mov %rdi,%rax ; mov %rsi,%rdi ; ... : rdi is rewritten before anything
        // emulated, so the probe stays at the start (syscall()).
        let syscall = [
            0x48, 0x89, 0xf8, 0x48, 0x89, 0xf7, 0x48, 0x89, 0xd6, 0xe9, 0, 0, 0, 0,
        ];
        assert_eq!(cheap_entry_offset(&syscall, 0x1000), 0);
        // A branch before any emulated instruction: stay at the start.
        let branchy = [0x8b, 0x47, 0x10, 0x85, 0xc0, 0x75, 0x02, 0x53];
        assert_eq!(cheap_entry_offset(&branchy, 0x1000), 0);
        // sub $8,%rsp before the push: the return address moved, stay at the start.
        let stack = [0x48, 0x83, 0xec, 0x08, 0x53];
        assert_eq!(cheap_entry_offset(&stack, 0x1000), 0);
    }
}
