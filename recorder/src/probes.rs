//! The probe table: which libc functions are probed, what each one does, and where
//! in the file its probe goes.
//!
//! One generic entry program and one generic return program serve every row; the
//! row's op and via travel in the uprobe cookie. The table is data, so moving a
//! probe off a single-stepped first instruction (about 8 µs a hit on this machine)
//! to an emulated one (about 1 µs) is a change of `offset`, not of code.

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
    row("pthread_mutex_lock", op::MUTEX_ACQUIRE, via::PLAIN, true),
    row("pthread_mutex_trylock", op::MUTEX_ACQUIRE, via::TRY, true),
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
    row("pthread_rwlock_rdlock", op::RWLOCK_READ, via::PLAIN, true),
    row("pthread_rwlock_tryrdlock", op::RWLOCK_READ, via::TRY, true),
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
    row("pthread_rwlock_wrlock", op::RWLOCK_WRITE, via::PLAIN, true),
    row("pthread_rwlock_trywrlock", op::RWLOCK_WRITE, via::TRY, true),
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
    row("sem_wait", op::SEM_WAIT, via::PLAIN, true),
    row("sem_trywait", op::SEM_WAIT, via::TRY, true),
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

/// A probe resolved to a place in the library file.
#[derive(Clone, Debug)]
pub struct ResolvedProbe {
    /// The table row.
    pub row: ProbeRow,
    /// File offset of the entry probe.
    pub entry_offset: u64,
    /// File offset of the function start (return probes attach there).
    pub function_offset: u64,
    /// The uprobe cookie.
    pub cookie: u64,
}

/// The C library the target will load: the one this process uses (same system).
pub fn system_libc() -> Result<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").context("read /proc/self/maps")?;
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| Path::new(p).file_name().is_some_and(|n| n == "libc.so.6"))
        .map(PathBuf::from)
        .ok_or_else(|| anyhow!("libc.so.6 is not mapped in this process"))
}

/// Resolves every table row present in `libc` to file offsets. Versioned symbols
/// resolve to their default version (`pthread_cond_wait@@GLIBC_2.3.2`, not the compat
/// `@GLIBC_2.2.5` one that old binaries bind to).
pub fn resolve(libc: &Path) -> Result<Vec<ResolvedProbe>> {
    let data = std::fs::read(libc).with_context(|| format!("read {}", libc.display()))?;
    let file = ElfFile64::<Endianness>::parse(data.as_slice())
        .with_context(|| format!("{}: not a 64-bit ELF", libc.display()))?;
    let endian = file.endian();
    let sections = file.elf_section_table();
    let symbols = sections
        .symbols(endian, data.as_slice(), elf::SHT_DYNSYM)
        .with_context(|| format!("{}: dynamic symbols", libc.display()))?;
    let versions = sections.versions(endian, data.as_slice()).ok().flatten();
    let segments = file.elf_program_headers();
    let vaddr_to_offset = |vaddr: u64| -> Option<u64> {
        segments.iter().find_map(|ph| {
            if ph.p_type(endian) != elf::PT_LOAD {
                return None;
            }
            let (start, size, off) = (ph.p_vaddr(endian), ph.p_filesz(endian), ph.p_offset(endian));
            (vaddr >= start && vaddr < start + size).then(|| vaddr - start + off)
        })
    };
    let mut resolved = Vec::new();
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
                found = Some(sym.st_value(endian));
                break;
            }
        }
        let Some(vaddr) = found else { continue };
        let Some(function_offset) = vaddr_to_offset(vaddr) else {
            bail!(
                "{}: {} is outside every loadable segment",
                libc.display(),
                row.function
            );
        };
        let offset = match row.offset {
            AUTO_OFFSET => {
                let start = function_offset as usize;
                let code = data
                    .get(start..(start + 64).min(data.len()))
                    .unwrap_or_default();
                cheap_entry_offset(code, vaddr)
            }
            fixed => fixed,
        };
        resolved.push(ResolvedProbe {
            row: *row,
            entry_offset: function_offset + offset,
            function_offset,
            cookie: cookie(row.op, row.via),
        });
    }
    if !resolved
        .iter()
        .any(|p| p.row.function == "pthread_mutex_lock")
    {
        bail!(
            "{}: no pthread_mutex_lock: not a glibc with the pthread API",
            libc.display()
        );
    }
    Ok(resolved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_the_system_libc() {
        let libc = system_libc().unwrap();
        let probes = resolve(&libc).unwrap();
        let names: Vec<_> = probes.iter().map(|p| p.row.function).collect();
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
        // Return-probed functions keep their entry probe at the start.
        assert!(probes
            .iter()
            .filter(|p| p.row.on_return)
            .all(|p| p.entry_offset == p.function_offset));
        let wait = probes
            .iter()
            .find(|p| p.row.function == "pthread_cond_wait")
            .unwrap();
        let lock = probes
            .iter()
            .find(|p| p.row.function == "pthread_mutex_lock")
            .unwrap();
        assert_ne!(wait.function_offset, lock.function_offset);
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
