//! Discovery of shared memory with no hints (`ordo record --discover`, and every run
//! of `ordo hunt`): the instructions of the main executable that can touch memory
//! two threads share, as a table of software breakpoints the in-process agent plants.
//!
//! The planner decodes each function of the main executable (iced-x86, from its
//! symbol's start to its end) and keeps every instruction with an explicit memory
//! operand that reads or writes data, except what cannot be shared or cannot run
//! out of line:
//! - stack accesses through `rsp` (a thread's own frame), `push`/`pop`/`call`
//!   (implicit stack operands), and `fs:`/`gs:` operands (thread-local storage);
//! - RIP-relative operands reaching read-only sections (`.rodata`, the GOT after
//!   relocation, code): never written, so never racing;
//! - `lea`, `nop`s and prefetches with memory operands (no access), string
//!   instructions, gathers, and instructions that change the flow of control;
//! - the C runtime's start-up and tear-down code (`_start`, `frame_dummy`, …).
//!
//! A stripped executable (no function symbols) has its `.text` section decoded in
//! one linear sweep instead, the runtime's functions included.
//!
//! Each kept instruction becomes an [`SoftSite`]: its bytes, its memory operand
//! (base, index, scale, displacement; the link-time target of a RIP-relative one and
//! where its displacement sits in the bytes), its access kind and whether it is
//! atomic (a `lock` prefix, `xchg`, or a store followed by `mfence`, which is how a
//! sequentially consistent store compiles). The agent (`agent/preload/src/soft.rs`)
//! plants an `int3` on each, computes the address the instruction reaches from the
//! trapped registers, records the access with the thread's arrival count at the
//! instruction, and resumes at a copy of the instruction placed out of line. Each
//! site takes at most `budget` traps in a run (all threads together), then its
//! breakpoint is removed: what discovery costs is bounded by the code's size, not
//! by how long the program runs.

use std::collections::HashSet;
use std::ffi::OsString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use iced_x86::{
    Decoder, DecoderOptions, FlowControl, Instruction, InstructionInfoFactory, Mnemonic, OpKind,
    Register,
};
use object::{Object, ObjectSection, ObjectSymbol, SectionFlags, SectionKind, SymbolKind};
use ordo_probe_common::inproc::{
    SoftHeader, SoftSite, ENV_SOFT_FD, SOFT_MAGIC, SOFT_NO_GATE, SOFT_VERSION,
};
use ordo_probe_common::{kind, reg, via};

use crate::watch::sites::{access_kind, atomic_instruction, gpr_number};

/// Traps a discovered site takes in a run (all threads together) before its
/// breakpoint is removed, by default. Enough for a few threads to show each
/// location they share many times over; a hot loop costs at most this many traps.
pub const DEFAULT_BUDGET: u32 = 1000;

/// The C runtime's functions, which run before `main` or after it and touch only
/// the runtime's own state.
const RUNTIME_FUNCTIONS: &[&str] = &[
    "_start",
    "_init",
    "_fini",
    "deregister_tm_clones",
    "register_tm_clones",
    "__do_global_dtors_aux",
    "frame_dummy",
    "__libc_csu_init",
    "__libc_csu_fini",
    "_dl_relocate_static_pie",
];

/// Rust's runtime in a Rust executable (std is linked in): per-thread bookkeeping
/// every thread does at its start and exit under std's own spin locks and atomics
/// (the stack-overflow handler's thread registry, thread-locals' destructors, the
/// current thread's handle, the exit path). Trapped, those atomics would order
/// every thread's start after the previous one's exit in the recording — an order
/// of the run, not of the program — and hide every reorder of the user's locks.
/// No user code is inlined into them.
const RUST_RUNTIME_PREFIXES: &[&str] = &[
    "std::sys::pal::unix::stack_overflow::",
    "<std::sys::pal::unix::stack_overflow::",
    "std::sys::thread_local::",
    "<std::sys::thread_local::",
    "std::thread::current::",
    "<std::thread::current::",
    "std::sys::exit::",
    "std::rt::",
    "std::panicking::",
    "<std::thread::Thread",
    "<std::thread::id::ThreadId",
];

/// Parts of a Rust function's name that put it in std's runtime wherever they
/// appear: std's platform layer (its futex mutex, condvar, rwlock and once, its
/// thread and stack-overflow code), a spawned thread's start and end (its result
/// packet, the join), std's I/O (stdout's buffer, under its reentrant lock, which
/// is left to std), and the generic code instantiated for their types (a
/// `BTreeMap` of the stack-overflow handler's, the drop of a packet). The
/// condvar's public functions are recorded as condvar events (`rust_locks`);
/// their futex word's atomics are that, again. Not `std::sys::backtrace::
/// __rust_begin_short_backtrace`: a spawned thread's closure is inlined there.
const RUST_RUNTIME_PARTS: &[&str] = &[
    "std::sys::sync::",
    "std::sys::pal::",
    "std::sys::thread",
    "std::sys::exit",
    "std::thread::lifecycle::",
    "std::thread::JoinInner",
    "std::sync::poison::condvar::",
    "std::sync::nonpoison::condvar::",
    "std::io::",
    "std::sync::reentrant_lock::",
    // Recorded as what they are (`rust_locks`): a channel's send and receive, a
    // park. Their own atomics, loaded with plain moves, would look like plain
    // accesses racing with them, and send the hunt into std's internals.
    "std::sync::mpmc::",
    "std::thread::thread::Thread>::park",
    "std::thread::park",
];

/// Code linked into a Rust executable that never touches the program's own data:
/// formatting, string and number conversion, the backtrace and symbol machinery
/// (with its crates), environment, paths and files, the allocator's shims, thread
/// spawn hooks. Leaving them out (a name starting with one, after any `<`) keeps a
/// small program's discovery from decoding and trapping hundreds of std functions;
/// std's synchronization (`std::sync::`, its channels, `Arc`) stays in.
const RUST_NO_USER_DATA: &[&str] = &[
    "core::fmt::",
    "alloc::fmt::",
    "core::str::",
    "core::unicode::",
    "core::char::",
    "core::num::",
    "core::slice::memchr::",
    "core::panicking::",
    "core::result::unwrap_failed",
    "core::option::expect_failed",
    "core::option::unwrap_failed",
    "std::backtrace",
    "std::sys::backtrace::_print",
    "std::sys::backtrace::print",
    "std::sys::backtrace::output_filename",
    "std::env::",
    "std::ffi::",
    "std::path::",
    "std::fs::",
    "std::process::",
    "std::alloc::",
    "alloc::alloc::",
    "alloc::raw_vec::",
    "std::thread::spawnhook::",
    "rustc_demangle::",
    "gimli::",
    "addr2line::",
    "miniz_oxide::",
    "memchr::",
    "adler2::",
    "object::",
    "std_detect::",
    "__rustc::",
];

/// The discovered sites of one executable.
#[derive(Clone, Debug, Default)]
pub struct DiscoveryPlan {
    /// The instructions to plant breakpoints on, in address order.
    pub sites: Vec<SoftSite>,
    /// Functions decoded.
    pub functions: usize,
    /// Instructions with a memory operand left out (stack, thread-local, read-only,
    /// no access, cannot run out of line).
    pub skipped: usize,
}

/// Plans discovery for the executable at `path` (with the sites that record a Rust
/// program's std mutexes, [`crate::rust_locks`]).
pub fn plan_discovery(path: &Path) -> Result<DiscoveryPlan> {
    plan_discovery_with(path, &crate::rust_locks::plan_rust_locks(path)?)
}

/// [`plan_discovery`] with the Rust lock sites planned already (a recording plans
/// them anyway: decoding a Rust binary twice was a good part of its start), which
/// must be those of the same file. Kept on disk between runs
/// ([`crate::plan_cache`]).
pub fn plan_discovery_with(
    path: &Path,
    locks: &crate::rust_locks::RustLockPlan,
) -> Result<DiscoveryPlan> {
    crate::plan_cache::cached(
        "discovery",
        path,
        || plan_discovery_afresh(path, locks),
        |plan| crate::plan_cache::Entry {
            numbers: vec![plan.functions as u64, plan.skipped as u64],
            sites: plan.sites.clone(),
            strings: Vec::new(),
        },
        |entry| match entry.numbers[..] {
            [functions, skipped] => Some(DiscoveryPlan {
                sites: entry.sites,
                functions: usize::try_from(functions).ok()?,
                skipped: usize::try_from(skipped).ok()?,
            }),
            _ => None,
        },
    )
}

/// [`plan_discovery_with`], decoding the binary.
fn plan_discovery_afresh(
    path: &Path,
    locks: &crate::rust_locks::RustLockPlan,
) -> Result<DiscoveryPlan> {
    let data = crate::file_bytes::read(path).with_context(|| format!("read {}", path.display()))?;
    let file = object::File::parse(&data[..])
        .map_err(|e| anyhow!("{}: not an ELF file: {e}", path.display()))?;
    let read_only = read_only_ranges(&file);
    let mut functions: Vec<(u64, u64, String)> = file
        .symbols()
        .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0 && s.address() != 0)
        .filter_map(|s| Some((s.address(), s.size(), s.name().ok()?.to_string())))
        .collect();
    if functions.is_empty() {
        // A stripped binary: `.text` decoded from its start in one sweep (compilers
        // put no data there on x86-64, and pad between functions with nops).
        functions = file
            .sections()
            .filter(|s| s.kind() == SectionKind::Text && s.name() == Ok(".text"))
            .map(|s| (s.address(), s.size(), String::from(".text")))
            .collect();
    }
    if functions.is_empty() {
        bail!(
            "{}: no function symbols and no .text section: --discover has no code to decode",
            path.display()
        );
    }
    functions.sort();
    functions.dedup_by_key(|f| f.0);
    let mut plan = DiscoveryPlan::default();
    let mut seen = HashSet::new();
    let mut info = InstructionInfoFactory::new();
    for (start, size, name) in &functions {
        if RUNTIME_FUNCTIONS.contains(&name.as_str()) {
            continue;
        }
        if name.starts_with("_R") || name.starts_with("_ZN") {
            let demangled = ordo_trace::symbolize::demangle(name);
            let unqualified = demangled.trim_start_matches(['<', '&']);
            if RUST_RUNTIME_PREFIXES
                .iter()
                .any(|p| demangled.starts_with(p))
                || RUST_RUNTIME_PARTS.iter().any(|p| demangled.contains(p))
                || RUST_NO_USER_DATA.iter().any(|p| unqualified.starts_with(p))
            {
                continue;
            }
        }
        let Some(code) = code_at(&file, *start, *size) else {
            continue;
        };
        plan.functions += 1;
        let mut decoder = Decoder::with_ip(64, code, *start, DecoderOptions::NONE);
        let mut instr = Instruction::default();
        let mut previous: Option<(SoftSite, bool)> = None;
        while decoder.can_decode() {
            let offset = (decoder.ip() - start) as usize;
            decoder.decode_out(&mut instr);
            if instr.is_invalid() {
                break;
            }
            // A plain store followed by `mfence` is a sequentially consistent store.
            if let Some((mut site, store)) = previous.take() {
                if store && instr.mnemonic() == Mnemonic::Mfence {
                    site.via = via::POINT_ATOMIC;
                }
                plan.sites.push(site);
            }
            if !has_memory_operand(&instr) {
                continue;
            }
            let bytes = &code[offset..offset + instr.len()];
            let offsets = decoder.get_constant_offsets(&instr);
            match site_of(&instr, bytes, &offsets, &read_only, &mut info) {
                Some(site) if seen.insert(site.ip) => {
                    let store = site.access == kind::WRITE as u8;
                    previous = Some((site, store));
                }
                Some(_) => {}
                None => plan.skipped += 1,
            }
        }
        if let Some((site, _)) = previous {
            plan.sites.push(site);
        }
    }
    plan.sites.sort_by_key(|s| s.ip);
    // A Rust program's std mutexes are recorded at breakpoints of their own, in
    // place of the accesses discovery would trap at the same instructions.
    crate::rust_locks::merge(&mut plan.sites, &locks.sites);
    Ok(plan)
}

/// Whether `instr` has an explicit memory operand (`[base + index*scale + disp]`).
fn has_memory_operand(instr: &Instruction) -> bool {
    (0..instr.op_count()).any(|i| instr.op_kind(i) == OpKind::Memory)
}

/// The site for an instruction with a memory operand, or `None` when it is left out
/// (see the module doc).
pub(crate) fn site_of(
    instr: &Instruction,
    bytes: &[u8],
    offsets: &iced_x86::ConstantOffsets,
    read_only: &[(u64, u64)],
    info: &mut InstructionInfoFactory,
) -> Option<SoftSite> {
    if instr.flow_control() != FlowControl::Next
        || instr.len() > 15
        || matches!(instr.segment_prefix(), Register::FS | Register::GS)
        || instr.memory_segment() == Register::FS
        || instr.memory_segment() == Register::GS
        || instr.is_stack_instruction()
        || instr.is_string_instruction()
        || instr.is_vsib()
        || matches!(
            instr.mnemonic(),
            Mnemonic::Lea
                | Mnemonic::Nop
                | Mnemonic::Prefetch
                | Mnemonic::Prefetchnta
                | Mnemonic::Prefetcht0
                | Mnemonic::Prefetcht1
                | Mnemonic::Prefetcht2
                | Mnemonic::Prefetchw
                | Mnemonic::Clflush
                | Mnemonic::Clflushopt
                | Mnemonic::Xlatb
        )
    {
        return None;
    }
    let base = instr.memory_base();
    let index = instr.memory_index();
    if base == Register::RSP || base == Register::ESP {
        return None;
    }
    let used = info.info(instr);
    let access = used
        .used_memory()
        .iter()
        .filter_map(|m| access_kind(m.access()))
        .max_by_key(|k| match *k {
            kind::RMW => 2,
            kind::WRITE => 1,
            _ => 0,
        })?;
    let mut site = SoftSite {
        ip: instr.ip(),
        len: instr.len() as u8,
        scale: instr.memory_index_scale() as u8,
        size: instr.memory_size().size().clamp(1, 255) as u8,
        access: access as u8,
        via: if atomic_instruction(instr, access) {
            via::POINT_ATOMIC
        } else {
            via::POINT
        },
        base: reg::NONE,
        index: reg::NONE,
        gate: SOFT_NO_GATE,
        ..SoftSite::default()
    };
    site.bytes[..bytes.len()].copy_from_slice(bytes);
    if base == Register::RIP {
        let target = instr.memory_displacement64();
        if read_only
            .iter()
            .any(|&(start, end)| target >= start && target < end)
        {
            return None;
        }
        if !offsets.has_displacement() || offsets.displacement_size() != 4 {
            return None;
        }
        site.disp = target as i64;
        site.disp_at = offsets.displacement_offset() as u8;
        return Some(site);
    }
    if base != Register::None {
        site.base = gpr_number(base)?;
    }
    if index != Register::None {
        site.index = gpr_number(index)?;
    }
    site.disp = instr.memory_displacement64() as i64;
    Some(site)
}

/// Link-time ranges never written while the program runs: code, read-only data,
/// and the GOT and other sections made read-only after relocation.
pub(crate) fn read_only_ranges(file: &object::File<'_>) -> Vec<(u64, u64)> {
    file.sections()
        .filter(|s| s.address() != 0 && s.size() != 0)
        .filter(|s| {
            let name = s.name().unwrap_or("");
            let writable = match s.flags() {
                SectionFlags::Elf { sh_flags } => sh_flags & u64::from(object::elf::SHF_WRITE) != 0,
                _ => true,
            };
            !writable
                || matches!(s.kind(), SectionKind::Text | SectionKind::ReadOnlyData)
                || name == ".got"
                || name.starts_with(".data.rel.ro")
        })
        .map(|s| (s.address(), s.address() + s.size()))
        .collect()
}

/// The bytes of `[start, start + size)` in the executable section holding them.
pub(crate) fn code_at<'d>(file: &object::File<'d>, start: u64, size: u64) -> Option<&'d [u8]> {
    let section = file.sections().find(|s| {
        s.kind() == SectionKind::Text && start >= s.address() && start < s.address() + s.size()
    })?;
    let data = section.data().ok()?;
    let from = (start - section.address()) as usize;
    let to = (from + size as usize).min(data.len());
    data.get(from..to)
}

/// The table the agent reads, in an anonymous file the program inherits.
pub struct SoftTable {
    fd: OwnedFd,
}

impl SoftTable {
    /// Writes `sites` with a per-site `budget` (0: never removed).
    pub fn create(sites: &[SoftSite], budget: u32) -> Result<SoftTable> {
        let header = SoftHeader {
            magic: SOFT_MAGIC,
            version: SOFT_VERSION,
            n_sites: sites.len() as u32,
            budget,
            flags: 0,
        };
        let mut bytes =
            Vec::with_capacity(std::mem::size_of::<SoftHeader>() + std::mem::size_of_val(sites));
        // SAFETY: both types are repr(C), Copy and without padding (their sizes are
        // asserted where they are defined): their bytes are initialized.
        unsafe {
            bytes.extend_from_slice(std::slice::from_raw_parts(
                (&header as *const SoftHeader).cast::<u8>(),
                std::mem::size_of::<SoftHeader>(),
            ));
            bytes.extend_from_slice(std::slice::from_raw_parts(
                sites.as_ptr().cast::<u8>(),
                std::mem::size_of_val(sites),
            ));
        }
        // SAFETY: a NUL-terminated name. Close-on-exec: the launch passes it on to
        // the program alone (its `inherit` list), like the recording's mapping.
        let raw = unsafe { libc::memfd_create(c"ordo-soft-sites".as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            return Err(std::io::Error::last_os_error()).context("memfd_create for --discover");
        }
        // SAFETY: a descriptor we just created and own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut file = std::fs::File::from(fd.try_clone()?);
        std::io::Write::write_all(&mut file, &bytes).context("write the --discover table")?;
        Ok(SoftTable { fd })
    }

    /// The descriptor the program inherits.
    pub fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// The environment telling the agent where the table is.
    pub fn env(&self) -> (OsString, OsString) {
        (ENV_SOFT_FD.into(), self.raw_fd().to_string().into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_one(bytes: &[u8], ip: u64) -> Option<SoftSite> {
        let mut decoder = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE);
        let instr = decoder.decode();
        let offsets = decoder.get_constant_offsets(&instr);
        site_of(
            &instr,
            bytes,
            &offsets,
            &[(0x2000, 0x3000)],
            &mut InstructionInfoFactory::new(),
        )
    }

    #[test]
    fn keeps_data_accesses_and_leaves_out_the_stack_tls_and_read_only_data() {
        // mov eax, [rdi+8]: a read through a register.
        let s = decode_one(&[0x8b, 0x47, 0x08], 0x1000).unwrap();
        assert_eq!(
            (s.access, s.base, s.disp, s.size),
            (kind::READ as u8, reg::RDI, 8, 4)
        );
        // mov [rip+0x1000], eax at 0x1000 (6 bytes): a write to 0x2006 — read-only here.
        assert!(decode_one(&[0x89, 0x05, 0x00, 0x10, 0x00, 0x00], 0x1000).is_none());
        // ...and to 0x4006 (writable): kept, target and displacement offset known.
        let s = decode_one(&[0x89, 0x05, 0x00, 0x30, 0x00, 0x00], 0x1000).unwrap();
        assert_eq!(
            (s.access, s.disp, s.disp_at),
            (kind::WRITE as u8, 0x4006, 2)
        );
        // mov eax, [rsp+8]: the thread's own stack.
        assert!(decode_one(&[0x8b, 0x44, 0x24, 0x08], 0x1000).is_none());
        // mov rax, fs:[0x28]: thread-local.
        assert!(decode_one(&[0x64, 0x48, 0x8b, 0x04, 0x25, 0x28, 0, 0, 0], 0x1000).is_none());
        // lea rax, [rdi+8]: no access.
        assert!(decode_one(&[0x48, 0x8d, 0x47, 0x08], 0x1000).is_none());
        // lock add [rdi], 1: an atomic read-modify-write.
        let s = decode_one(&[0xf0, 0x83, 0x07, 0x01], 0x1000).unwrap();
        assert_eq!((s.access, s.via), (kind::RMW as u8, via::POINT_ATOMIC));
        // call [rax]: changes the flow of control.
        assert!(decode_one(&[0xff, 0x10], 0x1000).is_none());
    }

    #[test]
    fn plans_this_test_binary() {
        let me = std::env::current_exe().unwrap();
        let plan = plan_discovery(&me).unwrap();
        assert!(plan.functions > 100, "{}", plan.functions);
        assert!(!plan.sites.is_empty());
        assert!(plan.sites.windows(2).all(|w| w[0].ip < w[1].ip));
        assert!(plan
            .sites
            .iter()
            .all(|s| s.len as usize <= 15 && s.base != reg::RSP));
    }
}
