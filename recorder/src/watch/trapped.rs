//! What a hardware watchpoint caught: x86 data breakpoints trap *after* the
//! access, with the instruction pointer at the next instruction and no word on
//! whether it read or wrote. The recorder finds the instruction that ends there
//! by decoding its function from the symbol's start with iced-x86 (instructions
//! have variable length, so decoding backwards is ambiguous), and takes the
//! access kind and atomicity from it, as the planner does for uprobe sites.
//! [`find_instruction`] and [`data_access`] are the one decoder of single accesses:
//! the replayer's sites from a recording (`sites::access_at`, `access_ending_at`)
//! use them too.
//!
//! This runs in the recorder, once per distinct trap address (cached), rather
//! than when the trace is read: the trace then says `read`/`write`/`rmw` and names
//! the accessing instruction for every reader (`ordo dump`, `analyze`, `replay`),
//! and the module files are certainly the ones that ran (at analysis time they
//! may have been rebuilt).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use super::sites::{access_kind, atomic_instruction};
use iced_x86::{
    Decoder, DecoderOptions, Instruction, InstructionInfoFactory, OpAccess, Register, UsedMemory,
};
use object::{Object, ObjectSection, ObjectSymbol, SectionKind, SymbolKind};
use ordo_trace::schema::ModuleRecord;
use ordo_trace::symbolize::ElfInfo;

/// The access a trap was for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrappedAccess {
    /// `ordo_probe_common::kind::READ`, `WRITE` or `RMW`.
    pub kind: u16,
    /// A lock-prefixed instruction or `xchg` with memory.
    pub atomic: bool,
    /// Runtime address of the accessing instruction.
    pub ip: u64,
}

/// An instruction's data access: its first memory operand that is not the stack of
/// a push, pop or call (the stack one only when it has no other), with the access
/// kind (`ordo_probe_common::kind::READ`, `WRITE` or `RMW`) and atomicity.
pub fn data_access(
    instr: &Instruction,
    factory: &mut InstructionInfoFactory,
) -> Option<(UsedMemory, u16, bool)> {
    let info = factory.info(instr);
    let memory = *info
        .used_memory()
        .iter()
        .filter(|m| m.access() != OpAccess::NoMemAccess)
        .min_by_key(|m| m.base() == Register::RSP)?;
    let access = access_kind(memory.access())?;
    Some((memory, access, atomic_instruction(instr, access)))
}

/// The kind and atomicity of an instruction's data access (see [`data_access`]).
pub fn classify_access(
    instr: &Instruction,
    factory: &mut InstructionInfoFactory,
) -> Option<(u16, bool)> {
    data_access(instr, factory).map(|(_, access, atomic)| (access, atomic))
}

/// Which end of the instruction sought is at the given address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Boundary {
    /// The instruction starts there.
    Start,
    /// The instruction ends there (the address is the next instruction's: where a
    /// data breakpoint leaves the instruction pointer).
    End,
}

/// An instruction found in an ELF file's code, and the file offset of its first byte.
#[derive(Clone, Copy, Debug)]
pub struct FoundInstruction {
    /// The instruction, at its link-time address.
    pub instr: Instruction,
    /// Its offset in the file (where a uprobe on it goes).
    pub file_offset: u64,
}

/// The instruction that starts or ends (`boundary`) at link-time address `address`
/// in an ELF file's code. Instructions have variable length, so it is decoded from
/// the start of the function symbol holding it — it must be an instruction of that
/// function, not bytes inside another. Without a symbol: the instruction decoded at
/// `address` (`Start`), or the longest instruction with a memory operand that ends
/// exactly there (`End`).
pub fn find_instruction(data: &[u8], address: u64, boundary: Boundary) -> Option<FoundInstruction> {
    let file = object::File::parse(data).ok()?;
    // A byte of the instruction, and where decoding may stop (at most 15 bytes long).
    let (inside, until) = match boundary {
        Boundary::Start => (address, address.checked_add(15)?),
        Boundary::End => (address.checked_sub(1)?, address),
    };
    let function = file
        .symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| s.kind() == SymbolKind::Text && s.address() <= inside)
        .filter(|s| s.size() == 0 || inside < s.address() + s.size())
        .max_by_key(|s| s.address())
        .map(|s| s.address());
    let (section_vaddr, section_offset, code) = file.sections().find_map(|section| {
        let base = section.address();
        let holds =
            section.kind() == SectionKind::Text && base <= inside && inside < base + section.size();
        holds.then(|| Some((base, section.file_range()?.0, section.data().ok()?)))?
    })?;
    let until = until.min(section_vaddr + code.len() as u64);
    let bytes_from = |start: u64| {
        code.get(start.checked_sub(section_vaddr)? as usize..(until - section_vaddr) as usize)
    };
    let found = |instr: Instruction| FoundInstruction {
        instr,
        file_offset: section_offset + (instr.ip() - section_vaddr),
    };
    let at = |instr: &Instruction| match boundary {
        Boundary::Start => instr.ip() == address,
        Boundary::End => instr.next_ip() == address,
    };
    if let Some(start) = function.filter(|f| *f >= section_vaddr) {
        let mut decoder = Decoder::with_ip(64, bytes_from(start)?, start, DecoderOptions::NONE);
        let mut instr = Instruction::default();
        while decoder.can_decode() {
            decoder.decode_out(&mut instr);
            if at(&instr) && !instr.is_invalid() {
                return Some(found(instr));
            }
        }
        return None;
    }
    if boundary == Boundary::Start {
        let instr =
            Decoder::with_ip(64, bytes_from(address)?, address, DecoderOptions::NONE).decode();
        return (!instr.is_invalid()).then(|| found(instr));
    }
    // No symbol: an x86 instruction is at most 15 bytes.
    (1..=15u64.min(address - section_vaddr))
        .rev()
        .find_map(|len| {
            let start = address - len;
            let instr =
                Decoder::with_ip(64, bytes_from(start)?, start, DecoderOptions::NONE).decode();
            let memory =
                (0..instr.op_count()).any(|i| instr.op_kind(i) == iced_x86::OpKind::Memory);
            (!instr.is_invalid() && instr.len() as u64 == len && memory).then_some(instr)
        })
        .map(found)
}

/// The instruction that ends at link-time address `after` in an ELF file's code
/// ([`find_instruction`] with [`Boundary::End`]).
pub fn instruction_ending_at(data: &[u8], after: u64) -> Option<Instruction> {
    find_instruction(data, after, Boundary::End).map(|f| f.instr)
}

/// A module file's bytes and layout, shared by the traps in it.
type ModuleFile = Arc<(Vec<u8>, ElfInfo)>;

/// Classifies hardware-watchpoint traps by the instruction before the trap
/// address, caching by address (a loop traps at the same few addresses).
#[derive(Default)]
pub struct TrapDecoder {
    by_ip: HashMap<u64, Option<TrappedAccess>>,
    /// Module path → its bytes and layout (`None`: unreadable).
    files: HashMap<String, Option<ModuleFile>>,
}

impl TrapDecoder {
    /// The access that trapped with the instruction pointer at runtime address
    /// `after`, in one of `modules` (the process's mappings).
    pub fn classify(&mut self, after: u64, modules: &[ModuleRecord]) -> Option<TrappedAccess> {
        if let Some(known) = self.by_ip.get(&after) {
            return *known;
        }
        let found = self.decode(after, modules);
        // Not cached while the module is unknown: a later scan of the mappings may find it.
        if found.is_some() {
            self.by_ip.insert(after, found);
        }
        found
    }

    fn decode(&mut self, after: u64, modules: &[ModuleRecord]) -> Option<TrappedAccess> {
        let inside = after.checked_sub(1)?;
        let (module, mapping) = modules.iter().find_map(|m| {
            m.mappings
                .iter()
                .find(|map| map.start <= inside && inside < map.end)
                .map(|map| (m, map))
        })?;
        let file = self
            .files
            .entry(module.path.clone())
            .or_insert_with(|| {
                let path = Path::new(&module.path);
                let data = std::fs::read(path).ok()?;
                let info = ElfInfo::read(path).ok()?;
                Some(Arc::new((data, info)))
            })
            .clone()?;
        let (data, info) = &*file;
        let bias = mapping
            .start
            .wrapping_sub(info.vaddr_of_offset(mapping.file_offset));
        let instr = instruction_ending_at(data, after.wrapping_sub(bias))?;
        let (kind, atomic) = classify_access(&instr, &mut InstructionInfoFactory::new())?;
        Some(TrappedAccess {
            kind,
            atomic,
            ip: instr.ip().wrapping_add(bias),
        })
    }
}
