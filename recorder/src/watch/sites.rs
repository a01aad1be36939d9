//! Finding the instructions that can access a watched variable: a linear sweep of
//! the module's executable code with iced-x86, keeping the instructions whose
//! memory operand can reach the watched bytes.

use std::collections::{HashMap, HashSet};

use iced_x86::{
    Decoder, DecoderOptions, FlowControl, Instruction, InstructionInfoFactory, Mnemonic, OpAccess,
    OpKind, Register,
};
use object::{
    Object, ObjectSection, ObjectSegment, ObjectSymbol, RelocationTarget, SectionKind, SymbolKind,
};
use ordo_probe_common::{kind, reg, via, WatchSite};

use super::resolve::ResolvedWatch;
use super::trapped::{data_access, find_instruction, Boundary, FoundInstruction};
use super::uprobe::kernel_accepts;

/// Where a watch uprobe sits relative to the instruction that accesses the variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbePoint {
    /// On the accessing instruction itself: the probe runs just before the access.
    Instruction,
    /// On the instruction just before it, which always falls through to it and does
    /// not change the registers of its address: the probe still sees the state before
    /// the access. Used when the kernel refuses a uprobe on the accessing
    /// instruction (any `lock`-prefixed one), and nothing jumps to it.
    Previous,
    /// On the instruction just after it, which nothing else jumps to: the probe runs
    /// just after the access, so memory already holds the value it left (for a
    /// read-modify-write, the new value). The fallback when `Previous` is not
    /// possible, and the choice for atomic loads (see [`WatchPlan::sites`]).
    Next,
}

/// One instruction to put a watch uprobe on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedSite {
    /// Offset in the module's file of the probed instruction: where the uprobe
    /// attaches (see [`PlannedSite::probe`]).
    pub file_offset: u64,
    /// What the watch uprobe needs, with LINK-TIME addresses: apply
    /// [`Relocate::relocated`] with the module's load bias before use. `site.ip` is
    /// the probed instruction (so runtime rip minus `site.ip` is the load bias);
    /// the accessing instruction is [`PlannedSite::access_ip`].
    pub site: WatchSite,
    /// Link-time address of the instruction that accesses the variable.
    pub access_ip: u64,
    /// Whether the uprobe sits on the accessing instruction or on a neighbour.
    pub probe: ProbePoint,
    /// The access is atomic: a read-modify-write with a lock prefix (`lock add`,
    /// `lock xadd`, `lock cmpxchg`) or `xchg` with memory, or any access to a
    /// variable whose type is atomic ([`ResolvedWatch::atomic`]: x86 atomic loads
    /// and release stores are plain `mov`s). Non-atomic read-modify-writes (`add
    /// $1, mem`, `inc mem`) are also [`kind::RMW`] but not atomic: they race like a
    /// read and a write.
    pub atomic: bool,
    /// Whether the probe, which runs before the instruction, can know the value
    /// accessed. Reads and read-modify-writes: yes, it reads the memory (for a
    /// read-modify-write that is the value before the update). Writes: only when
    /// the written value is a general register or an immediate (`value_reg`,
    /// `value_is_imm`); a write from an SSE register, a flag (`setcc`) or a
    /// byte-swapping `movbe` is `false` (the memory still holds the old value).
    pub value_known: bool,
    /// The memory operand is `[base + index*scale + disp]` with a register found to
    /// hold the variable's address (`lea var(%rip), %reg` earlier in the same
    /// straight-line code), not a RIP-relative or absolute operand. The probe must
    /// compute the effective address from the registers and drop accesses that do
    /// not overlap the watched bytes. Also set for `ptr->field` sites, whose base
    /// register holds the pointer's value (`site.relative`).
    pub via_register: bool,
    /// The instruction in Intel syntax, for messages.
    pub instruction: String,
}

/// The sites of one watch, and where its address escapes static analysis.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchPlan {
    /// The watch these sites are for.
    pub watch: ResolvedWatch,
    /// Instructions that access the watched bytes, in address order. Atomic loads
    /// are probed on the next instruction when possible ([`ProbePoint::Next`], the
    /// loaded register as the value): their place in the variable's order is then
    /// after the store they saw, as the acquire edge needs.
    pub sites: Vec<PlannedSite>,
    /// Instructions that access the watched bytes but that no uprobe can observe:
    /// the kernel refuses a probe on them and no neighbour qualifies (e.g. a
    /// `lock`-prefixed instruction that is a jump target and is followed by one).
    /// A hardware watchpoint sees them.
    pub unprobeable: Vec<PlannedSite>,
    /// Link-time addresses of instructions that put the address of the variable
    /// (or of a byte inside it) into a register: `lea`, a GOT load, or an
    /// absolute immediate. Accesses through such pointers after a call, a jump or
    /// in another function are not sites; when this is not empty, a hardware
    /// watchpoint (`--watch-hw`) sees what instruction sites may miss.
    pub address_refs: Vec<u64>,
}

/// Adds a module's load bias to link-time addresses.
pub trait Relocate {
    /// The same thing with runtime addresses, `bias` being the load bias (runtime
    /// address minus link-time address) of the module the addresses are from.
    fn relocated(&self, bias: u64) -> Self;
}

impl Relocate for WatchSite {
    fn relocated(&self, bias: u64) -> WatchSite {
        let mut site = *self;
        if site.relative == 0 {
            site.watch_addr = site.watch_addr.wrapping_add(bias);
        }
        site.ip = site.ip.wrapping_add(bias);
        // Only an operand without registers holds an absolute address; a register
        // operand's displacement is an offset from runtime register values.
        if site.base == reg::NONE && site.index == reg::NONE {
            site.disp = site.disp.wrapping_add(bias as i64);
        }
        site
    }
}

impl Relocate for PlannedSite {
    fn relocated(&self, bias: u64) -> PlannedSite {
        PlannedSite {
            site: self.site.relocated(bias),
            access_ip: self.access_ip.wrapping_add(bias),
            ..self.clone()
        }
    }
}

/// Decodes the executable code of the module holding `watch` and lists every
/// instruction whose memory operand can reach the watched bytes.
pub fn plan_sites(watch: &ResolvedWatch) -> Result<WatchPlan, String> {
    let path = &watch.module;
    let data = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let file = object::File::parse(data.as_slice())
        .map_err(|e| format!("{}: not an ELF file: {e}", path.display()))?;
    if file.architecture() != object::Architecture::X86_64 {
        return Err(format!(
            "{}: watches need x86-64 code, this file is {:?}",
            path.display(),
            file.architecture()
        ));
    }
    let got = got_targets(&file);
    let mut scanner = Scanner::new(watch, &got);
    // Functions can be entered from anywhere: their first instruction has unseen
    // predecessors.
    let functions = file
        .symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| s.kind() == SymbolKind::Text);
    scanner.targets.extend(functions.map(|s| s.address()));
    scanner.targets.insert(file.entry());
    let mut regions = 0;
    for section in file.sections() {
        if section.kind() != SectionKind::Text {
            continue;
        }
        let (Some((file_offset, _)), Ok(code)) = (section.file_range(), section.data()) else {
            continue;
        };
        scanner.scan(code, section.address(), file_offset);
        regions += 1;
    }
    if regions == 0 {
        // No section headers (e.g. `sstrip`ped): the executable segments hold the code.
        for segment in file.segments() {
            let executable = matches!(segment.flags(), object::SegmentFlags::Elf { p_flags } if p_flags & object::elf::PF_X != 0);
            let (file_offset, _) = segment.file_range();
            if let (true, Ok(code)) = (executable, segment.data()) {
                scanner.scan(code, segment.address(), file_offset);
            }
        }
    }
    scanner.place_refused_probes(&data);
    scanner.probe_atomic_loads_after(&data);
    let Scanner {
        mut sites,
        mut address_refs,
        unprobeable,
        ..
    } = scanner;
    sites.sort_by_key(|s| s.access_ip);
    address_refs.sort_unstable();
    address_refs.dedup();
    Ok(WatchPlan {
        watch: watch.clone(),
        sites,
        unprobeable,
        address_refs,
    })
}

/// GOT slot address → the link-time address it will hold, for slots filled by a
/// dynamic relocation against something this module defines.
fn got_targets(file: &object::File<'_>) -> HashMap<u64, u64> {
    let mut targets = HashMap::new();
    let Some(relocations) = file.dynamic_relocations() else {
        return targets;
    };
    for (slot, relocation) in relocations {
        let object::RelocationFlags::Elf { r_type } = relocation.flags() else {
            continue;
        };
        let target = match (r_type, relocation.target()) {
            (object::elf::R_X86_64_RELATIVE, _) => relocation.addend() as u64,
            (
                object::elf::R_X86_64_GLOB_DAT | object::elf::R_X86_64_64,
                RelocationTarget::Symbol(index),
            ) => match file.symbol_by_index(index) {
                Ok(sym) if !sym.is_undefined() => {
                    sym.address().wrapping_add(relocation.addend() as u64)
                }
                _ => continue,
            },
            _ => continue,
        };
        targets.insert(slot, target);
    }
    targets
}

/// The [`reg`] number of a general-purpose register (any width), `None` for other
/// registers. The high-byte registers (AH…) are `None` too: their value is not the
/// low bits of the full register.
pub(crate) fn gpr_number(register: Register) -> Option<u8> {
    if matches!(
        register,
        Register::AH | Register::BH | Register::CH | Register::DH
    ) || !register.is_gpr()
    {
        return None;
    }
    Some(match register.full_register() {
        Register::RAX => reg::RAX,
        Register::RBX => reg::RBX,
        Register::RCX => reg::RCX,
        Register::RDX => reg::RDX,
        Register::RSI => reg::RSI,
        Register::RDI => reg::RDI,
        Register::RBP => reg::RBP,
        Register::RSP => reg::RSP,
        Register::R8 => reg::R8,
        Register::R9 => reg::R9,
        Register::R10 => reg::R10,
        Register::R11 => reg::R11,
        Register::R12 => reg::R12,
        Register::R13 => reg::R13,
        Register::R14 => reg::R14,
        Register::R15 => reg::R15,
        _ => return None,
    })
}

/// Registers a call may change (System V x86-64 ABI).
const CALLER_SAVED: [u8; 9] = [
    reg::RAX,
    reg::RCX,
    reg::RDX,
    reg::RSI,
    reg::RDI,
    reg::R8,
    reg::R9,
    reg::R10,
    reg::R11,
];

/// Where an instruction's memory operand points, statically.
enum Operand {
    /// RIP-relative or absolute: the address is known.
    Fixed(u64),
    /// A register known to hold `value` plus the displacement, no index.
    Based(u64),
    /// A register known to hold an address inside the variable, plus an index.
    Indexed,
}

struct Scanner<'w> {
    watch: &'w ResolvedWatch,
    got: &'w HashMap<u64, u64>,
    /// The variable's whole extent: a register value inside it is worth tracking.
    object: std::ops::Range<u64>,
    factory: InstructionInfoFactory,
    /// Registers known to hold an address inside the variable (index: [`reg`] number).
    known: [Option<u64>; 16],
    /// For `ptr->field` watches: registers known to hold the pointer's value (loaded
    /// from it in the same straight-line code).
    pointee: [bool; 16],
    sites: Vec<PlannedSite>,
    address_refs: Vec<u64>,
    /// Every address something may jump or call to (direct branch targets,
    /// function starts): instructions there have predecessors besides the previous one.
    targets: HashSet<u64>,
    /// Decoded code: (link-time address, length, file offset).
    regions: Vec<(u64, u64, u64)>,
    /// The previous instruction in this region, if it always falls through.
    previous: Option<u64>,
    /// Sites the kernel will not probe (index into `sites`), with the previous
    /// instruction when it falls through to them.
    refused: Vec<(usize, Option<u64>)>,
    unprobeable: Vec<PlannedSite>,
}

impl<'w> Scanner<'w> {
    fn new(watch: &'w ResolvedWatch, got: &'w HashMap<u64, u64>) -> Scanner<'w> {
        let object_end = watch.object_vaddr + watch.object_size.max(1);
        let object = match &watch.through_pointer {
            // The pointer is what is loaded; the watched bytes are elsewhere.
            Some(hop) => {
                watch.object_vaddr.min(hop.pointer_vaddr)..object_end.max(hop.pointer_vaddr + 8)
            }
            None => {
                watch.object_vaddr.min(watch.vaddr)..object_end.max(watch.vaddr + watch.size as u64)
            }
        };
        Scanner {
            watch,
            got,
            object,
            factory: InstructionInfoFactory::new(),
            known: [None; 16],
            pointee: [false; 16],
            sites: Vec::new(),
            address_refs: Vec::new(),
            targets: HashSet::new(),
            regions: Vec::new(),
            previous: None,
            refused: Vec::new(),
            unprobeable: Vec::new(),
        }
    }

    fn overlaps(&self, address: u64, len: u64) -> bool {
        address < self.watch.vaddr + self.watch.size as u64
            && self.watch.vaddr < address.wrapping_add(len.max(1))
    }

    fn scan(&mut self, code: &[u8], vaddr: u64, file_offset: u64) {
        self.known = [None; 16];
        self.pointee = [false; 16];
        self.previous = None;
        self.regions.push((vaddr, code.len() as u64, file_offset));
        let mut decoder = Decoder::with_ip(64, code, vaddr, DecoderOptions::NONE);
        let mut instr = Instruction::default();
        while decoder.can_decode() {
            decoder.decode_out(&mut instr);
            if instr.is_invalid() {
                self.known = [None; 16];
                self.pointee = [false; 16];
                self.previous = None;
                continue;
            }
            let offset = (instr.ip() - vaddr) as usize;
            self.visit(
                &instr,
                &code[offset..offset + instr.len()],
                file_offset + offset as u64,
            );
            let flow = instr.flow_control();
            let direct = matches!(
                instr.op0_kind(),
                OpKind::NearBranch64 | OpKind::NearBranch32
            );
            if direct && flow != FlowControl::Next {
                self.targets.insert(instr.near_branch_target());
            }
            self.previous = (flow == FlowControl::Next).then_some(instr.ip());
        }
    }

    /// The file offset of link-time address `ip` in decoded code, and the bytes
    /// from there to the end of its region.
    fn code_at<'d>(&self, data: &'d [u8], ip: u64) -> Option<(u64, &'d [u8])> {
        let (vaddr, len, file_offset) = self
            .regions
            .iter()
            .find(|(v, l, _)| *v <= ip && ip < v + l)?;
        let offset = file_offset + (ip - vaddr);
        Some((
            offset,
            data.get(offset as usize..(file_offset + len) as usize)?,
        ))
    }

    /// The instruction at `ip` and its file offset, if the kernel can probe it.
    fn probeable_at(&self, data: &[u8], ip: u64) -> Option<(u64, Instruction)> {
        let (offset, bytes) = self.code_at(data, ip)?;
        let instr = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE).decode();
        (!instr.is_invalid() && kernel_accepts(&instr, bytes)).then_some((offset, instr))
    }

    /// Whether `instr` writes any of the registers (by [`reg`] number).
    fn writes_any(&mut self, instr: &Instruction, registers: &[u8]) -> bool {
        let info = self.factory.info(instr);
        info.used_registers().iter().any(|used| {
            matches!(
                used.access(),
                OpAccess::Write
                    | OpAccess::CondWrite
                    | OpAccess::ReadWrite
                    | OpAccess::ReadCondWrite
            ) && gpr_number(used.register()).is_some_and(|r| registers.contains(&r))
        })
    }

    /// Moves the probe of each atomic load onto the next instruction, so the event
    /// takes its place in the variable's order *after* the load: a load that saw a
    /// store is then always ordered after it (the store's probe ran before the
    /// store), which is what the acquire edge needs. A probe before the load could
    /// be overtaken by the store it then reads. The value recorded is the loaded
    /// register's. Only when nothing jumps to the next instruction and the load
    /// leaves its address registers alone; otherwise the probe stays before it.
    fn probe_atomic_loads_after(&mut self, data: &[u8]) {
        for index in 0..self.sites.len() {
            let planned = &self.sites[index];
            if !planned.atomic
                || planned.probe != ProbePoint::Instruction
                || planned.site.access != kind::READ as u8
            {
                continue;
            }
            let site = planned.site;
            let Some(access) = self.code_at(data, planned.access_ip).map(|(_, bytes)| {
                Decoder::with_ip(64, bytes, planned.access_ip, DecoderOptions::NONE).decode()
            }) else {
                continue;
            };
            let address_registers: Vec<u8> = [site.base, site.index]
                .into_iter()
                .filter(|r| *r != reg::NONE)
                .collect();
            let next_ip = access.next_ip();
            if self.targets.contains(&next_ip) || self.writes_any(&access, &address_registers) {
                continue;
            }
            let Some((offset, after)) = self.probeable_at(data, next_ip) else {
                continue;
            };
            // `mov`/`movzx`/`movsx` into a general register: that register holds
            // what was loaded (the memory may have changed since).
            let loaded = matches!(
                access.mnemonic(),
                Mnemonic::Mov | Mnemonic::Movzx | Mnemonic::Movsx | Mnemonic::Movsxd
            ) && access.op0_kind() == OpKind::Register;
            let planned = &mut self.sites[index];
            planned.file_offset = offset;
            planned.site.ip = after.ip();
            planned.probe = ProbePoint::Next;
            if loaded {
                if let Some(dest) = gpr_number(access.op0_register()) {
                    planned.site.value_reg = dest;
                }
            }
        }
    }

    /// Moves the probe of each site the kernel refuses onto a neighbour that sees
    /// the same accesses, or the site into `unprobeable`.
    fn place_refused_probes(&mut self, data: &[u8]) {
        let mut unplaced = Vec::new();
        for (index, previous) in std::mem::take(&mut self.refused) {
            let access_ip = self.sites[index].access_ip;
            let site = self.sites[index].site;
            // The probe reads these registers: the neighbour must leave them as the
            // access sees them.
            let address_registers: Vec<u8> = [site.base, site.index, site.value_reg]
                .into_iter()
                .filter(|r| *r != reg::NONE)
                .collect();
            let mut placed = None;
            if !self.targets.contains(&access_ip) {
                if let Some((offset, before)) = previous.and_then(|ip| self.probeable_at(data, ip))
                {
                    if !self.writes_any(&before, &address_registers) {
                        placed = Some((offset, before.ip(), ProbePoint::Previous));
                    }
                }
            }
            if placed.is_none() {
                let access = self.code_at(data, access_ip).map(|(_, bytes)| {
                    Decoder::with_ip(64, bytes, access_ip, DecoderOptions::NONE).decode()
                });
                if let Some(access) = access {
                    let next_ip = access.next_ip();
                    if !self.targets.contains(&next_ip)
                        && !self.writes_any(&access, &address_registers)
                    {
                        if let Some((offset, after)) = self.probeable_at(data, next_ip) {
                            placed = Some((offset, after.ip(), ProbePoint::Next));
                        }
                    }
                }
            }
            match placed {
                Some((offset, ip, probe)) => {
                    let planned = &mut self.sites[index];
                    planned.file_offset = offset;
                    planned.site.ip = ip;
                    planned.probe = probe;
                }
                None => unplaced.push(index),
            }
        }
        for index in unplaced.into_iter().rev() {
            let site = self.sites.remove(index);
            self.unprobeable.push(site);
        }
        self.unprobeable.sort_by_key(|s| s.access_ip);
    }

    fn visit(&mut self, instr: &Instruction, bytes: &[u8], file_offset: u64) {
        let memory_operand = (0..instr.op_count()).find(|&i| instr.op_kind(i) == OpKind::Memory);
        let operand = memory_operand.and_then(|_| self.operand(instr));
        let mut new_value = None;
        let mut new_pointee = None;
        if self.watch.through_pointer.is_some() {
            if let Some(dest) = self.pointer_load(instr, operand.as_ref()) {
                new_pointee = Some(dest);
            } else if memory_operand.is_some() {
                self.consider_pointee_site(instr, bytes, file_offset);
            }
        }
        if let Some(operand) = &operand {
            new_value = self.address_load(instr, operand);
            if new_value.is_none() && self.watch.through_pointer.is_none() {
                self.consider_site(instr, operand, bytes, file_offset);
            }
        } else if let Some(value) = self.immediate_address(instr) {
            new_value = Some(value);
        } else if instr.mnemonic() == Mnemonic::Mov && instr.op_count() == 2 {
            // A copy of a tracked register is tracked too.
            if let (OpKind::Register, OpKind::Register) = (instr.op0_kind(), instr.op1_kind()) {
                if instr.op1_register().size() == 8 {
                    let source = gpr_number(instr.op1_register());
                    new_value = source.and_then(|r| self.known[r as usize]);
                    if source.is_some_and(|r| self.pointee[r as usize]) {
                        new_pointee = gpr_number(instr.op0_register());
                    }
                }
            }
        }
        if let Some(value) = new_value {
            self.address_refs.push(instr.ip());
            let dest =
                gpr_number(instr.op0_register()).filter(|_| instr.op0_register().size() == 8);
            self.forget_written(instr);
            if let Some(dest) = dest {
                self.known[dest as usize] = Some(value);
            }
        } else if self.known.iter().any(Option::is_some) || self.pointee.contains(&true) {
            self.forget_written(instr);
        }
        if let Some(dest) = new_pointee {
            self.pointee[dest as usize] = true;
        }
        match instr.flow_control() {
            FlowControl::Next | FlowControl::ConditionalBranch | FlowControl::XbeginXabortXend => {}
            FlowControl::Call | FlowControl::IndirectCall => {
                for r in CALLER_SAVED {
                    self.known[r as usize] = None;
                    self.pointee[r as usize] = false;
                }
            }
            _ => {
                self.known = [None; 16];
                self.pointee = [false; 16];
            }
        }
    }

    /// For `ptr->field`: the register an instruction loads the pointer's value
    /// into (`mov ptr(%rip), %reg`, or through a register holding its address).
    fn pointer_load(&self, instr: &Instruction, operand: Option<&Operand>) -> Option<u8> {
        let hop = self.watch.through_pointer.as_ref()?;
        let address = match operand? {
            Operand::Fixed(a) | Operand::Based(a) => *a,
            Operand::Indexed => return None,
        };
        let loads = instr.mnemonic() == Mnemonic::Mov
            && instr.op0_kind() == OpKind::Register
            && instr.op0_register().size() == 8;
        (loads && address == hop.pointer_vaddr).then(|| gpr_number(instr.op0_register()))?
    }

    /// For `ptr->field`: an access `[reg + disp]` (or with an index) where `reg`
    /// holds the pointer's value and the bytes can reach the field.
    fn consider_pointee_site(&mut self, instr: &Instruction, bytes: &[u8], file_offset: u64) {
        let Some(hop) = self.watch.through_pointer.clone() else {
            return;
        };
        let base = instr.memory_base();
        let Some(base_number) = gpr_number(base).filter(|_| base.size() == 8) else {
            return;
        };
        if !self.pointee[base_number as usize] {
            return;
        }
        let disp = instr.memory_displacement64();
        let len = instr.memory_size().size() as u64;
        let field = hop.offset..hop.offset + self.watch.size as u64;
        let reachable = if instr.memory_index() == Register::None {
            disp < field.end && field.start < disp.wrapping_add(len.max(1))
        } else {
            // An index into an array inside the object: checked at run time.
            hop.pointee_size == 0 || disp < hop.pointee_size
        };
        if !reachable {
            return;
        }
        let info = self.factory.info(instr);
        let access = info
            .used_memory()
            .iter()
            .find(|m| m.base() == base && m.index() == instr.memory_index())
            .map(|m| m.access());
        let Some(access) = access.and_then(access_kind) else {
            return;
        };
        let atomic = self.watch.atomic || atomic_instruction(instr, access);
        let site = WatchSite {
            watch_addr: hop.offset,
            watch_len: self.watch.size,
            ip: instr.ip(),
            size: len.min(u8::MAX as u64) as u8,
            access: access as u8,
            value_reg: reg::NONE,
            via: if atomic { via::ATOMIC } else { via::PLAIN },
            relative: 1,
            base: base_number,
            index: gpr_number(instr.memory_index()).unwrap_or(reg::NONE),
            scale: instr.memory_index_scale() as u8,
            disp: disp as i64,
            ..WatchSite::default()
        };
        self.add_site(instr, site, atomic, true, bytes, file_offset);
    }

    /// Records a site (and whether the kernel will refuse a uprobe on it).
    fn add_site(
        &mut self,
        instr: &Instruction,
        mut site: WatchSite,
        atomic: bool,
        via_register: bool,
        bytes: &[u8],
        file_offset: u64,
    ) {
        let value_known = site.access != kind::WRITE as u8 || fill_written_value(instr, &mut site);
        if !kernel_accepts(instr, bytes) {
            self.refused.push((self.sites.len(), self.previous));
        }
        self.sites.push(PlannedSite {
            file_offset,
            site,
            access_ip: instr.ip(),
            probe: ProbePoint::Instruction,
            atomic,
            value_known,
            via_register,
            instruction: instr.to_string(),
        });
    }

    /// The memory operand's static target, if it has one that matters here.
    fn operand(&self, instr: &Instruction) -> Option<Operand> {
        let base = instr.memory_base();
        let index = instr.memory_index();
        if base == Register::RIP {
            return Some(Operand::Fixed(instr.memory_displacement64()));
        }
        if base == Register::None && index == Register::None {
            // fs:/gs: operands are offsets into thread-local storage, not addresses.
            return match instr.memory_segment() {
                Register::FS | Register::GS => None,
                _ => Some(Operand::Fixed(instr.memory_displacement64())),
            };
        }
        if base == Register::None {
            // `var(,%idx,4)` in position-dependent code: an array indexed from its
            // absolute address.
            let address = instr.memory_displacement64();
            gpr_number(index)?;
            return self.object.contains(&address).then_some(Operand::Indexed);
        }
        let value = self.known[gpr_number(base).filter(|_| base.size() == 8)? as usize]?;
        let address = value.wrapping_add(instr.memory_displacement64());
        if index == Register::None {
            Some(Operand::Based(address))
        } else {
            gpr_number(index)?;
            self.object.contains(&address).then_some(Operand::Indexed)
        }
    }

    /// If the instruction loads the variable's address into a register (`lea` of
    /// it, or a load from the GOT slot holding it), that address.
    fn address_load(&self, instr: &Instruction, operand: &Operand) -> Option<u64> {
        let address = match operand {
            Operand::Fixed(a) | Operand::Based(a) => *a,
            Operand::Indexed => return None,
        };
        let loaded = match instr.mnemonic() {
            Mnemonic::Lea => address,
            Mnemonic::Mov
                if instr.op0_kind() == OpKind::Register && instr.op0_register().size() == 8 =>
            {
                *self.got.get(&address)?
            }
            _ => return None,
        };
        self.object.contains(&loaded).then_some(loaded)
    }

    /// A `mov $var, %reg` in position-dependent code.
    fn immediate_address(&self, instr: &Instruction) -> Option<u64> {
        if instr.mnemonic() != Mnemonic::Mov || instr.op0_kind() != OpKind::Register {
            return None;
        }
        let value = match instr.op1_kind() {
            OpKind::Immediate32 | OpKind::Immediate32to64 | OpKind::Immediate64 => {
                instr.immediate(1)
            }
            _ => return None,
        };
        self.object.contains(&value).then_some(value)
    }

    /// Drops what the instruction overwrites from the tracked registers.
    fn forget_written(&mut self, instr: &Instruction) {
        let info = self.factory.info(instr);
        for used in info.used_registers() {
            let written = matches!(
                used.access(),
                OpAccess::Write
                    | OpAccess::CondWrite
                    | OpAccess::ReadWrite
                    | OpAccess::ReadCondWrite
            );
            if let (true, Some(r)) = (written, gpr_number(used.register())) {
                self.known[r as usize] = None;
                self.pointee[r as usize] = false;
            }
        }
    }

    fn consider_site(
        &mut self,
        instr: &Instruction,
        operand: &Operand,
        bytes: &[u8],
        file_offset: u64,
    ) {
        let len = instr.memory_size().size() as u64;
        let reachable = match operand {
            Operand::Fixed(address) | Operand::Based(address) => self.overlaps(*address, len),
            Operand::Indexed => true,
        };
        if !reachable {
            return;
        }
        let base = instr.memory_base();
        let index = instr.memory_index();
        let info = self.factory.info(instr);
        let access = info
            .used_memory()
            .iter()
            .find(|m| match operand {
                Operand::Fixed(address) => {
                    m.base() == Register::None
                        && m.index() == Register::None
                        && m.displacement() == *address
                }
                _ => m.base() == base && m.index() == index,
            })
            .map(|m| m.access());
        // lea, prefetch, nop with a memory operand: no access.
        let Some(access) = access.and_then(access_kind) else {
            return;
        };
        let atomic = self.watch.atomic || atomic_instruction(instr, access);
        let mut site = WatchSite {
            watch_addr: self.watch.vaddr,
            watch_len: self.watch.size,
            ip: instr.ip(),
            size: len.min(u8::MAX as u64) as u8,
            access: access as u8,
            value_reg: reg::NONE,
            via: if atomic { via::ATOMIC } else { via::PLAIN },
            ..WatchSite::default()
        };
        let via_register = match operand {
            Operand::Fixed(address) => {
                site.base = reg::NONE;
                site.index = reg::NONE;
                site.scale = 1;
                site.disp = *address as i64;
                false
            }
            Operand::Based(_) | Operand::Indexed => {
                site.base = gpr_number(base).unwrap_or(reg::NONE);
                site.index = gpr_number(index).unwrap_or(reg::NONE);
                site.scale = instr.memory_index_scale() as u8;
                site.disp = instr.memory_displacement64() as i64;
                true
            }
        };
        self.add_site(instr, site, atomic, via_register, bytes, file_offset);
    }
}

/// The watch event kind of a memory operand's access ([`kind::READ`],
/// [`kind::WRITE`], [`kind::RMW`]); `None` when it does not access memory.
pub(crate) fn access_kind(access: OpAccess) -> Option<u16> {
    match access {
        OpAccess::Read | OpAccess::CondRead => Some(kind::READ),
        OpAccess::Write | OpAccess::CondWrite => Some(kind::WRITE),
        OpAccess::ReadWrite | OpAccess::ReadCondWrite => Some(kind::RMW),
        _ => None,
    }
}

/// Whether an access of kind `access` by `instr` is atomic by the instruction
/// alone: a read-modify-write with a lock prefix (`lock add`, `lock xadd`, `lock
/// cmpxchg`…) or `xchg` with memory (implicitly locked).
pub(crate) fn atomic_instruction(instr: &Instruction, access: u16) -> bool {
    access == kind::RMW && (instr.has_lock_prefix() || instr.mnemonic() == Mnemonic::Xchg)
}

/// Fills `value_reg` or `imm` for a plain store; false when the value written is
/// not a general register or an immediate.
fn fill_written_value(instr: &Instruction, site: &mut WatchSite) -> bool {
    if !matches!(instr.mnemonic(), Mnemonic::Mov | Mnemonic::Movnti) {
        return false;
    }
    let Some(source) = (0..instr.op_count()).find(|&i| instr.op_kind(i) != OpKind::Memory) else {
        return false;
    };
    match instr.op_kind(source) {
        OpKind::Register => match gpr_number(instr.op_register(source)) {
            Some(r) => {
                site.value_reg = r;
                true
            }
            None => false,
        },
        OpKind::Immediate8
        | OpKind::Immediate16
        | OpKind::Immediate32
        | OpKind::Immediate64
        | OpKind::Immediate8to16
        | OpKind::Immediate8to32
        | OpKind::Immediate8to64
        | OpKind::Immediate32to64 => {
            site.value_is_imm = 1;
            site.imm = instr.immediate(source);
            true
        }
        _ => false,
    }
}

/// The instruction that made an access a hardware watchpoint recorded: such a
/// watchpoint traps *after* the access, so the recorded site (`after`, a link-time
/// address in `watch.module`) is the instruction following it. Decodes the function
/// holding `after - 1` from its start and returns the instruction that ends at
/// `after`, as a site whose operand the replay agent checks against the variable
/// at run time (the access went through a pointer the static sweep could not
/// follow). `Ok(None)` when no function covers the address or no instruction ends
/// exactly there with a memory access.
pub fn access_ending_at(watch: &ResolvedWatch, after: u64) -> Result<Option<PlannedSite>, String> {
    access_found_by(watch, after, true)
}

/// Like [`access_ending_at`] for the instruction that starts at `ip` (what a
/// hardware-watch recording names since the recorder decodes the trap: the
/// accessing instruction itself).
pub fn access_at(watch: &ResolvedWatch, ip: u64) -> Result<Option<PlannedSite>, String> {
    access_found_by(watch, ip, false)
}

/// The access instruction that ends at `address` (`ends`) or starts there, found
/// and classified by the trap decoder's [`find_instruction`] and [`data_access`].
fn access_found_by(
    watch: &ResolvedWatch,
    address: u64,
    ends: bool,
) -> Result<Option<PlannedSite>, String> {
    let path = &watch.module;
    let data = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    object::File::parse(data.as_slice())
        .map_err(|e| format!("{}: not an ELF file: {e}", path.display()))?;
    let boundary = if ends { Boundary::End } else { Boundary::Start };
    let Some(FoundInstruction { instr, file_offset }) = find_instruction(&data, address, boundary)
    else {
        return Ok(None);
    };
    let Some((memory, access, atomic)) = data_access(&instr, &mut InstructionInfoFactory::new())
    else {
        return Ok(None);
    };
    let fixed = matches!(
        memory.base(),
        Register::None | Register::RIP | Register::EIP
    ) && memory.index() == Register::None;
    let mut site = WatchSite {
        watch_addr: watch.vaddr,
        watch_len: watch.size,
        ip: instr.ip(),
        size: instr.memory_size().size().min(u8::MAX as usize) as u8,
        access: access as u8,
        value_reg: reg::NONE,
        via: if atomic { via::ATOMIC } else { via::PLAIN },
        base: reg::NONE,
        index: reg::NONE,
        scale: 1,
        disp: memory.displacement() as i64,
        ..WatchSite::default()
    };
    if !fixed {
        site.base = gpr_number(memory.base()).unwrap_or(reg::NONE);
        site.index = gpr_number(memory.index()).unwrap_or(reg::NONE);
        site.scale = memory.scale() as u8;
    }
    let value_known = access != kind::WRITE || fill_written_value(&instr, &mut site);
    Ok(Some(PlannedSite {
        file_offset,
        site,
        access_ip: instr.ip(),
        probe: ProbePoint::Instruction,
        atomic,
        value_known,
        via_register: !fixed,
        instruction: instr.to_string(),
    }))
}
