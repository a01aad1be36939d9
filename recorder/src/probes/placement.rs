//! Where inside an acquisition function its event can be recorded with one cheap trap.
//!
//! A uprobe on the function's first instruction (usually single-stepped by the kernel,
//! ~8 µs here) plus a return probe (~7 µs more) costs a lock/unlock pair ~13 µs. The
//! kernel emulates relative jumps and calls, conditional jumps, register pushes and
//! nops (~1 µs a hit), so this module decodes the function and finds, for every path
//! that returns, the *last decision point* before the return: the conditional jump
//! (or, after a call, the instruction it returns to) from which the function runs
//! straight to a `ret`. A probe there sees the outcome already decided — the lock is
//! taken, or the try failed — and records it once:
//!
//! * at a conditional jump, the probe program evaluates the jump's condition from the
//!   saved flags and emits the outcome of the direction that will be taken (or nothing
//!   when that direction has more decisions ahead);
//! * the result the function will return is computed by symbolically running the
//!   straight path to the `ret` (a constant, a register at the probe, or
//!   `(reg != 0) << k`);
//! * the object argument is wherever forward data flow proves it still is (a register
//!   or a stack slot), and the return address sits at `rsp + depth`, with the depth
//!   from the pushes and `sub rsp` on the way;
//! * paths that leave through a tail call (robust/PI mutexes, lock elision) get the
//!   classic entry-stash + return-probe pair at the tail `jmp` itself, where the stack
//!   is back to the caller's return address;
//! * calls in `pthread_mutex_lock` (the lock-wait routine) get a `MUTEX_BLOCK` probe.
//!
//! Every path from the entry to a `ret` has exactly one last decision point, so every
//! call is recorded exactly once. Whenever the decoded code does not fit (an
//! unresolvable indirect jump, stack depths that disagree, a result that cannot be
//! computed, the argument lost), [`place`] returns an error and the caller falls back
//! to the entry + return pair at the function start.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use anyhow::{anyhow, bail, Result};
use iced_x86::{
    Code, ConditionCode, Decoder, DecoderOptions, FlowControl, Formatter, Instruction,
    InstructionInfoFactory, IntelFormatter, Mnemonic, OpAccess, OpKind, Register,
};
use ordo_probe_common::{outcome, reg, site_action};

/// Where a value lives at a probe site.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Loc {
    /// A general-purpose register (full 64-bit register).
    Reg(Register),
    /// A stack slot at `entry_rsp + offset` (the return address is at offset 0).
    Slot(i64),
}

/// What the probe reports for one direction of a site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing: a later probe (or none, for a path that never returns) records it.
    None,
    /// The function will return this constant.
    Const(i32),
    /// The function will return what this register holds at the probe.
    Reg(Register),
    /// The function will return `(register != 0) << shift`.
    NonZeroShl(Register, u8),
}

/// One probe site inside a function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Site {
    /// Virtual address of the probed instruction.
    pub address: u64,
    /// The instruction, in Intel syntax.
    pub text: String,
    /// Whether the kernel emulates it (one trap) instead of single-stepping it.
    pub emulated: bool,
    /// What the probe does.
    pub kind: SiteKind,
    /// Bytes pushed since the function's entry: the return address is at `rsp + depth`.
    pub depth: u32,
    /// Where the object argument is at this instruction.
    pub arg: Loc,
}

/// What a probe at a [`Site`] does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SiteKind {
    /// Emits the function's outcome. For a conditional jump, `cond` is its condition
    /// code and `taken`/`fallthrough` the outcome of each direction; otherwise only
    /// `taken` applies.
    Outcome {
        /// x86 condition code (0 = O … 15 = G), or None for a non-branch site.
        cond: Option<u8>,
        /// Outcome when the jump is taken (or always, without `cond`).
        taken: Outcome,
        /// Outcome when it falls through.
        fallthrough: Outcome,
    },
    /// A call into the lock-wait routine: the thread blocks (`MUTEX_BLOCK`).
    Block,
    /// A tail call out of the function: entry stash plus a return probe here.
    TailCall,
}

/// The placement of one function.
#[derive(Clone, Debug)]
pub struct Placement {
    /// Every probe site, by address.
    pub sites: Vec<Site>,
}

/// A read-only view of the library's code and data by virtual address.
pub trait Image {
    /// `len` bytes at virtual address `vaddr`, if mapped from the file.
    fn bytes(&self, vaddr: u64, len: usize) -> Option<&[u8]>;
    /// Name of the exported function at exactly `vaddr`, if any.
    fn symbol_at(&self, vaddr: u64) -> Option<&str>;
}

/// Functions that never return: a call to one ends its path.
const NORETURN: &[&str] = &[
    "__assert_fail",
    "__libc_fatal",
    "abort",
    "__stack_chk_fail",
    "__fortify_fail",
    "__chk_fail",
    "exit",
    "_exit",
    "pthread_exit",
];

/// Largest function this analysis will take on.
const MAX_FUNCTION_BYTES: u64 = 8192;

/// Decodes the function at `start` (`size` bytes) and places its probes. `blocks`
/// asks for `MUTEX_BLOCK` sites at its calls (blocking mutex acquisitions only).
pub fn place(image: &dyn Image, start: u64, size: u64, blocks: bool) -> Result<Placement> {
    if size == 0 || size > MAX_FUNCTION_BYTES {
        bail!("function size {size} is outside what placement decodes");
    }
    let code = image
        .bytes(start, size as usize)
        .ok_or_else(|| anyhow!("function bytes at {start:#x} are not in the file"))?;
    let cfg = Cfg::build(image, code, start)?;
    let flow = cfg.data_flow()?;
    cfg.choose_sites(&flow, blocks)
}

/// How a straight run of instructions (no decision on the way) ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    /// At this `ret`.
    Ret(u64),
    /// In a call that never returns, a trap, or off the function's end.
    Never,
    /// At this tail `jmp` out of the function.
    TailCall(u64),
    /// At a decision point (conditional jump, call, indirect jump) at this address.
    Decision(u64),
}

struct Cfg {
    start: u64,
    insns: BTreeMap<u64, Instruction>,
    /// Successors of each reachable instruction inside the function.
    succs: HashMap<u64, Vec<u64>>,
    preds: HashMap<u64, Vec<u64>>,
    noreturn_calls: BTreeSet<u64>,
    tail_jumps: BTreeSet<u64>,
}

/// Whether the kernel emulates `insn` (x86 uprobes: relative jmp/call, jcc, push
/// of a register, nops) rather than single-stepping it out of line.
pub fn is_emulated(insn: &Instruction) -> bool {
    matches!(
        insn.code(),
        Code::Jmp_rel8_64 | Code::Jmp_rel32_64 | Code::Call_rel32_64 | Code::Push_r64
    ) || insn.is_jcc_short_or_near()
        || insn.mnemonic() == Mnemonic::Nop
}

/// Whether `insn` synchronizes with other threads (an acquisition attempt).
fn is_atomic(insn: &Instruction) -> bool {
    insn.has_lock_prefix()
        || insn.mnemonic() == Mnemonic::Syscall
        || (insn.mnemonic() == Mnemonic::Xchg && insn.op_kind(1) == OpKind::Memory)
        || (insn.mnemonic() == Mnemonic::Xchg && insn.op_kind(0) == OpKind::Memory)
}

fn text(insn: &Instruction) -> String {
    let mut out = String::new();
    IntelFormatter::new().format(insn, &mut out);
    out
}

impl Cfg {
    fn build(image: &dyn Image, code: &[u8], start: u64) -> Result<Cfg> {
        let end = start + code.len() as u64;
        let mut decoder = Decoder::with_ip(64, code, start, DecoderOptions::NONE);
        let mut insns = BTreeMap::new();
        while decoder.can_decode() {
            let insn = decoder.decode();
            insns.insert(insn.ip(), insn);
        }
        let mut cfg = Cfg {
            start,
            insns,
            succs: HashMap::new(),
            preds: HashMap::new(),
            noreturn_calls: BTreeSet::new(),
            tail_jumps: BTreeSet::new(),
        };
        let mut todo = vec![start];
        while let Some(ip) = todo.pop() {
            if cfg.succs.contains_key(&ip) {
                continue;
            }
            let insn = *cfg
                .insns
                .get(&ip)
                .ok_or_else(|| anyhow!("a branch lands inside an instruction at {ip:#x}"))?;
            if insn.is_invalid() {
                bail!("undecodable instruction at {ip:#x}");
            }
            let inside = |a: u64| a >= start && a < end;
            let next = insn.next_ip();
            let succs: Vec<u64> = match insn.flow_control() {
                FlowControl::Next => vec![next],
                FlowControl::Return | FlowControl::Interrupt | FlowControl::Exception => vec![],
                FlowControl::UnconditionalBranch => {
                    let target = insn.near_branch_target();
                    if inside(target) {
                        vec![target]
                    } else {
                        cfg.tail_jumps.insert(ip);
                        vec![]
                    }
                }
                FlowControl::ConditionalBranch => {
                    let target = insn.near_branch_target();
                    if !insn.is_jcc_short_or_near() || !inside(target) {
                        bail!(
                            "{} at {ip:#x} is not a plain conditional jump inside the function",
                            text(&insn)
                        );
                    }
                    vec![target, next]
                }
                FlowControl::Call => {
                    let target = insn.near_branch_target();
                    if image
                        .symbol_at(target)
                        .is_some_and(|n| NORETURN.contains(&n))
                    {
                        cfg.noreturn_calls.insert(ip);
                        vec![]
                    } else {
                        vec![next]
                    }
                }
                FlowControl::IndirectCall => vec![next],
                FlowControl::IndirectBranch => cfg.jump_table(image, &insn)?,
                FlowControl::XbeginXabortXend => bail!("transactional code at {ip:#x}"),
            };
            // Falling off the end (after a call to an unexported noreturn routine)
            // ends the path.
            let succs: Vec<u64> = succs.into_iter().filter(|&s| inside(s)).collect();
            for &s in &succs {
                cfg.preds.entry(s).or_default().push(ip);
                todo.push(s);
            }
            cfg.succs.insert(ip, succs);
        }
        Ok(cfg)
    }

    /// Targets of a `jmp reg` dispatching through a table of 32-bit offsets:
    /// `cmp idx, N; ja …; lea base, [rip+T]; movsxd idx, [base+idx*4]; add idx, base;
    /// jmp idx` (what GCC emits for a switch).
    fn jump_table(&self, image: &dyn Image, jmp: &Instruction) -> Result<Vec<u64>> {
        let refuse = || {
            anyhow!(
                "indirect jump at {:#x} is not a recognized jump table",
                jmp.ip()
            )
        };
        let before: Vec<&Instruction> = self
            .insns
            .range(..jmp.ip())
            .rev()
            .take(8)
            .map(|(_, i)| i)
            .collect();
        let target_reg = jmp.op0_register();
        if jmp.op_kind(0) != OpKind::Register {
            return Err(refuse());
        }
        let add = before
            .first()
            .filter(|i| i.mnemonic() == Mnemonic::Add && i.op0_register() == target_reg)
            .ok_or_else(refuse)?;
        let base_reg = add.op1_register();
        let load = before
            .get(1)
            .filter(|i| {
                i.code() == Code::Movsxd_r64_rm32
                    && i.op0_register() == target_reg
                    && i.memory_base() == base_reg
                    && i.memory_index_scale() == 4
            })
            .ok_or_else(refuse)?;
        let index_reg = load.memory_index();
        let lea = before
            .get(2)
            .filter(|i| {
                i.mnemonic() == Mnemonic::Lea
                    && i.op0_register() == base_reg
                    && i.is_ip_rel_memory_operand()
            })
            .ok_or_else(refuse)?;
        let table = lea.ip_rel_memory_address();
        // The bound: `cmp idx32, N` right before a `ja` that skips the dispatch.
        let ja = before
            .get(3)
            .filter(|i| i.code() == Code::Ja_rel8_64 || i.code() == Code::Ja_rel32_64)
            .ok_or_else(refuse)?;
        let cmp = before
            .get(4)
            .filter(|i| {
                i.mnemonic() == Mnemonic::Cmp
                    && i.op0_register().full_register() == index_reg.full_register()
            })
            .ok_or_else(refuse)?;
        let _ = ja;
        let count = cmp.immediate(1) + 1;
        if count > 256 {
            return Err(refuse());
        }
        let bytes = image.bytes(table, count as usize * 4).ok_or_else(refuse)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|c| table.wrapping_add(i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64 as u64))
            .collect())
    }

    fn insn(&self, ip: u64) -> &Instruction {
        &self.insns[&ip]
    }

    fn is_decision(&self, ip: u64) -> bool {
        let insn = self.insn(ip);
        match insn.flow_control() {
            FlowControl::ConditionalBranch | FlowControl::IndirectBranch => true,
            FlowControl::Call | FlowControl::IndirectCall => !self.noreturn_calls.contains(&ip),
            _ => false,
        }
    }

    /// Follows the straight run from `ip` (itself not yet executed) to where it ends,
    /// returning the instructions on the way (including a final `ret`).
    fn straight(&self, ip: u64) -> (End, Vec<u64>) {
        let mut path = Vec::new();
        let mut at = ip;
        for _ in 0..4096 {
            if self.is_decision(at) {
                return (End::Decision(at), path);
            }
            path.push(at);
            if self.noreturn_calls.contains(&at) {
                return (End::Never, path);
            }
            if self.tail_jumps.contains(&at) {
                return (End::TailCall(at), path);
            }
            let insn = self.insn(at);
            if insn.flow_control() == FlowControl::Return {
                return (End::Ret(at), path);
            }
            match self.succs[&at].as_slice() {
                [next] => at = *next,
                _ => return (End::Never, path),
            }
        }
        (End::Never, path)
    }

    /// Forward data flow: stack depth and where the first argument is, before each
    /// reachable instruction.
    fn data_flow(&self) -> Result<HashMap<u64, Frame>> {
        let mut state: HashMap<u64, Frame> = HashMap::new();
        state.insert(
            self.start,
            Frame {
                depth: 0,
                arg: BTreeSet::from([Loc::Reg(Register::RDI)]),
            },
        );
        let mut todo = vec![self.start];
        let mut info = InstructionInfoFactory::new();
        while let Some(ip) = todo.pop() {
            let before = state[&ip].clone();
            let after = transfer(self.insn(ip), &before, &mut info)?;
            for &s in &self.succs[&ip] {
                let merged = match state.get(&s) {
                    None => after.clone(),
                    Some(old) => {
                        if old.depth != after.depth {
                            bail!(
                                "stack depth at {s:#x} is {} on one path and {} on another",
                                old.depth,
                                after.depth
                            );
                        }
                        Frame {
                            depth: old.depth,
                            arg: old.arg.intersection(&after.arg).copied().collect(),
                        }
                    }
                };
                if state.get(&s) != Some(&merged) {
                    state.insert(s, merged);
                    todo.push(s);
                }
            }
        }
        Ok(state)
    }

    fn choose_sites(&self, flow: &HashMap<u64, Frame>, blocks: bool) -> Result<Placement> {
        // Every edge out of a decision point (and the entry) into a straight run.
        let mut decisions: Vec<u64> = self
            .succs
            .keys()
            .copied()
            .filter(|&ip| self.is_decision(ip))
            .collect();
        decisions.sort_unstable();
        for &ip in &decisions {
            if self.insn(ip).flow_control() == FlowControl::IndirectCall {
                bail!("indirect call at {ip:#x}");
            }
        }
        let ends_at_ret = |ip: u64| matches!(self.straight(ip).0, End::Ret(_));
        // 1. Runs to a `ret` entered from a call, the entry or a jump table need a
        //    probe inside the run. A run entered from a conditional jump is recorded
        //    by the jump itself (step 2) unless that would cost the jump's other
        //    direction a trap it does not need: when the other direction goes on to
        //    an atomic instruction (it is the acquisition attempt: the hot path), or
        //    when this run is the jump's target (compilers place the likely path as the
        //    fall-through) and no other jump enters it.
        let mut run_sites: BTreeSet<u64> = BTreeSet::new();
        let mut edges: Vec<(Option<u64>, u64)> = vec![(None, self.start)];
        for &d in &decisions {
            for &s in &self.succs[&d] {
                edges.push((Some(d), s));
            }
        }
        // The other direction of `d` (seen from `to`) is the acquisition attempt.
        let other_is_atomic = |d: u64, to: u64| -> bool {
            self.succs[&d]
                .iter()
                .copied()
                .filter(|&s| s != to)
                .any(|other| {
                    let (end, path) = self.straight(other);
                    let decision = match end {
                        End::Decision(x) => Some(x),
                        _ => None,
                    };
                    path.iter()
                        .chain(decision.iter())
                        .any(|&p| is_atomic(self.insn(p)))
                })
        };
        // Instructions on a likely path: the fall-through run of a conditional jump
        // whose other direction is not the acquisition attempt. A single-stepped run
        // site there would slow the common case; the jump records it instead.
        let mut hot: BTreeSet<u64> = BTreeSet::new();
        for &d in &decisions {
            let insn = self.insn(d);
            if insn.is_jcc_short_or_near() && !other_is_atomic(d, insn.next_ip()) {
                let (end, path) = self.straight(insn.next_ip());
                if matches!(end, End::Ret(_)) {
                    hot.extend(path);
                }
            }
        }
        for &(from, to) in &edges {
            if self.is_decision(to) || !ends_at_ret(to) {
                continue;
            }
            let (_, path) = self.straight(to);
            let pick = path
                .iter()
                .copied()
                .find(|&ip| is_emulated(self.insn(ip)))
                .unwrap_or(to);
            if let Some(d) = from.filter(|&d| self.insn(d).is_jcc_short_or_near()) {
                let other = self.succs[&d].iter().copied().find(|&s| s != to);
                let jcc_covers = match other {
                    None => true,
                    Some(other) if self.is_decision(other) => {
                        (!is_emulated(self.insn(pick)) && hot.contains(&pick))
                            || !other_is_atomic(d, to)
                                && (self.preds[&to].len() > 1 || self.insn(d).next_ip() == to)
                    }
                    Some(other) => {
                        let (end, path) = self.straight(other);
                        let _ = path;
                        if matches!(end, End::Ret(_) | End::Never | End::TailCall(_))
                            || (!is_emulated(self.insn(pick)) && hot.contains(&pick))
                        {
                            true
                        } else if other_is_atomic(d, to) {
                            false
                        } else {
                            self.insn(d).next_ip() == to || self.preds[&to].len() > 1
                        }
                    }
                };
                if jcc_covers {
                    continue;
                }
            }
            run_sites.insert(pick);
        }
        // A run site downstream of another covers every path through the upstream one.
        let downstream: Vec<u64> = run_sites
            .iter()
            .copied()
            .filter(|&a| {
                let (_, path) = self.straight(a);
                path.iter().any(|&p| p != a && run_sites.contains(&p))
            })
            .collect();
        for a in downstream {
            run_sites.remove(&a);
        }
        let mut sites = Vec::new();
        let frame = |ip: u64| -> Result<(u32, Loc)> {
            let f = flow
                .get(&ip)
                .ok_or_else(|| anyhow!("no data flow at {ip:#x}"))?;
            let arg = f
                .best_arg()
                .ok_or_else(|| anyhow!("the object argument is lost at {ip:#x}"))?;
            Ok((
                u32::try_from(f.depth).map_err(|_| anyhow!("negative depth at {ip:#x}"))?,
                arg,
            ))
        };
        // The outcome of running straight from `ip` to its `ret`, unless a run site
        // on the way records it.
        let outcome_from = |ip: u64, own: Option<u64>| -> Result<Outcome> {
            let (end, path) = self.straight(ip);
            let End::Ret(_) = end else {
                return Ok(Outcome::None);
            };
            if path
                .iter()
                .any(|p| Some(*p) != own && run_sites.contains(p))
            {
                return Ok(Outcome::None);
            }
            let from = path.iter().position(|p| Some(*p) == own).unwrap_or(0);
            result_of(path[from..].iter().map(|&p| self.insn(p)))
        };
        for &ip in &run_sites {
            let (depth, arg) = frame(ip)?;
            let taken = outcome_from(ip, Some(ip))?;
            sites.push(self.site(
                ip,
                depth,
                arg,
                SiteKind::Outcome {
                    cond: None,
                    taken,
                    fallthrough: Outcome::None,
                },
            ));
        }
        // 2. Conditional jumps one of whose directions runs straight to a `ret` not
        //    already covered by a run site.
        for &d in &decisions {
            let insn = self.insn(d);
            if !insn.is_jcc_short_or_near() {
                continue;
            }
            let taken = outcome_from(insn.near_branch_target(), None)?;
            let fallthrough = outcome_from(insn.next_ip(), None)?;
            if taken == Outcome::None && fallthrough == Outcome::None {
                continue;
            }
            let (depth, arg) = frame(d)?;
            sites.push(self.site(
                d,
                depth,
                arg,
                SiteKind::Outcome {
                    cond: Some(condition_number(insn.condition_code())),
                    taken,
                    fallthrough,
                },
            ));
        }
        // 3. Tail calls: the classic stash + return probe, right on the `jmp`.
        for &t in &self.tail_jumps {
            if !self.succs.contains_key(&t) {
                continue;
            }
            let f = &flow[&t];
            if f.depth != 0 || !f.arg.contains(&Loc::Reg(Register::RDI)) {
                bail!("tail call at {t:#x} with the stack or rdi not as at entry");
            }
            sites.push(self.site(t, 0, Loc::Reg(Register::RDI), SiteKind::TailCall));
        }
        // 4. Blocking: the calls of a mutex lock are its lock waits (glibc 2.36:
        //    `__lll_lock_wait`); only when they all call the same routine.
        if blocks {
            let calls: Vec<u64> = decisions
                .iter()
                .copied()
                .filter(|&d| self.insn(d).flow_control() == FlowControl::Call)
                .collect();
            let targets: BTreeSet<u64> = calls
                .iter()
                .map(|&c| self.insn(c).near_branch_target())
                .collect();
            if targets.len() == 1 {
                for c in calls {
                    let (depth, arg) = frame(c)?;
                    sites.push(self.site(c, depth, arg, SiteKind::Block));
                }
            }
        }
        // Every `ret` must be reached by some recording site.
        sites.sort_by_key(|s| s.address);
        Ok(Placement { sites })
    }

    fn site(&self, ip: u64, depth: u32, arg: Loc, kind: SiteKind) -> Site {
        let insn = self.insn(ip);
        Site {
            address: ip,
            text: text(insn),
            emulated: is_emulated(insn),
            kind,
            depth,
            arg,
        }
    }
}

/// Stack depth and argument locations before an instruction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    depth: i64,
    arg: BTreeSet<Loc>,
}

impl Frame {
    /// A register holding the argument (rdi first), else a stack slot.
    fn best_arg(&self) -> Option<Loc> {
        if self.arg.contains(&Loc::Reg(Register::RDI)) {
            return Some(Loc::Reg(Register::RDI));
        }
        self.arg
            .iter()
            .copied()
            .find(|l| matches!(l, Loc::Reg(_)))
            .or_else(|| self.arg.iter().copied().next())
    }
}

const CALLER_SAVED: &[Register] = &[
    Register::RAX,
    Register::RCX,
    Register::RDX,
    Register::RSI,
    Register::RDI,
    Register::R8,
    Register::R9,
    Register::R10,
    Register::R11,
];

fn transfer(
    insn: &Instruction,
    before: &Frame,
    info: &mut InstructionInfoFactory,
) -> Result<Frame> {
    let mut f = before.clone();
    let ip = insn.ip();
    let reg_of = |i: u32| insn.op_register(i).full_register();
    let rsp_slot = |f: &Frame| -> Option<i64> {
        (insn.memory_base() == Register::RSP && insn.memory_index() == Register::None)
            .then(|| insn.memory_displacement64() as i64 - f.depth)
    };
    match insn.code() {
        Code::Push_r64 => {
            f.depth += 8;
            let slot = Loc::Slot(-f.depth);
            if f.arg.contains(&Loc::Reg(reg_of(0))) {
                f.arg.insert(slot);
            } else {
                f.arg.remove(&slot);
            }
            return Ok(f);
        }
        Code::Pop_r64 => {
            let r = reg_of(0);
            if r == Register::RSP {
                bail!("pop rsp at {ip:#x}");
            }
            if f.arg.contains(&Loc::Slot(-f.depth)) {
                f.arg.insert(Loc::Reg(r));
            } else {
                f.arg.remove(&Loc::Reg(r));
            }
            f.depth -= 8;
            return Ok(f);
        }
        Code::Sub_rm64_imm8 | Code::Sub_rm64_imm32 | Code::Add_rm64_imm8 | Code::Add_rm64_imm32
            if insn.op_kind(0) == OpKind::Register && reg_of(0) == Register::RSP =>
        {
            let n = insn.immediate(1) as i64;
            f.depth += if insn.mnemonic() == Mnemonic::Sub {
                n
            } else {
                -n
            };
            return Ok(f);
        }
        Code::Mov_r64_rm64 | Code::Mov_rm64_r64 => {
            let (dst, src) = (insn.op_kind(0), insn.op_kind(1));
            if dst == OpKind::Register && src == OpKind::Register {
                let (d, s) = (reg_of(0), reg_of(1));
                if d == Register::RSP {
                    bail!("rsp overwritten at {ip:#x}");
                }
                if f.arg.contains(&Loc::Reg(s)) {
                    f.arg.insert(Loc::Reg(d));
                } else {
                    f.arg.remove(&Loc::Reg(d));
                }
                return Ok(f);
            }
            if dst == OpKind::Memory {
                if let Some(slot) = rsp_slot(&f) {
                    clear_slots(&mut f, slot, 8);
                    if f.arg.contains(&Loc::Reg(reg_of(1))) {
                        f.arg.insert(Loc::Slot(slot));
                    }
                    return Ok(f);
                }
            } else if let Some(slot) = rsp_slot(&f) {
                let d = reg_of(0);
                if f.arg.contains(&Loc::Slot(slot)) {
                    f.arg.insert(Loc::Reg(d));
                } else {
                    f.arg.remove(&Loc::Reg(d));
                }
                return Ok(f);
            }
        }
        _ => {}
    }
    if matches!(
        insn.flow_control(),
        FlowControl::Call | FlowControl::IndirectCall
    ) {
        for r in CALLER_SAVED {
            f.arg.remove(&Loc::Reg(*r));
        }
        return Ok(f);
    }
    let used = info.info(insn);
    for r in used.used_registers() {
        let writes = matches!(
            r.access(),
            OpAccess::Write | OpAccess::ReadWrite | OpAccess::CondWrite | OpAccess::ReadCondWrite
        );
        if !writes {
            continue;
        }
        let full = r.register().full_register();
        if full == Register::RSP
            && !matches!(insn.flow_control(), FlowControl::Return | FlowControl::Call)
        {
            bail!(
                "{} at {ip:#x} changes rsp in a way placement does not follow",
                text(insn)
            );
        }
        f.arg.remove(&Loc::Reg(full));
    }
    for m in used.used_memory() {
        let writes = matches!(
            m.access(),
            OpAccess::Write | OpAccess::ReadWrite | OpAccess::CondWrite | OpAccess::ReadCondWrite
        );
        if writes && m.base() == Register::RSP && m.index() == Register::None {
            let slot = m.displacement() as i64 - f.depth;
            clear_slots(&mut f, slot, 16);
        }
    }
    Ok(f)
}

fn clear_slots(f: &mut Frame, at: i64, len: i64) {
    f.arg.retain(|l| match l {
        Loc::Slot(s) => *s + 8 <= at || *s >= at + len,
        Loc::Reg(_) => true,
    });
}

/// The value in eax at the end of a straight run, in terms of registers at its start.
fn result_of<'a>(path: impl Iterator<Item = &'a Instruction>) -> Result<Outcome> {
    #[derive(Clone, Copy, PartialEq)]
    enum Val {
        Site(Register),
        Const(i32),
        NonZero(Register, u8),
        /// A byte set to `(register != 0)`, before zero extension.
        NonZeroByte(Register),
        Unknown,
    }
    let mut regs: HashMap<Register, Val> = HashMap::new();
    let get =
        |regs: &HashMap<Register, Val>, r: Register| regs.get(&r).copied().unwrap_or(Val::Site(r));
    let mut tested: Option<Val> = None;
    let mut info = InstructionInfoFactory::new();
    for insn in path {
        let r0 = insn.op0_register();
        let full0 = r0.full_register();
        let is32 = r0.is_gpr32();
        match (insn.mnemonic(), insn.op_kind(0), insn.op_count()) {
            (Mnemonic::Xor, OpKind::Register, 2)
                if insn.op_kind(1) == OpKind::Register && insn.op1_register() == r0 && is32 =>
            {
                regs.insert(full0, Val::Const(0));
                tested = None;
                continue;
            }
            (Mnemonic::Mov, OpKind::Register, 2)
                if is32 && insn.op_kind(1) == OpKind::Immediate32 =>
            {
                regs.insert(full0, Val::Const(insn.immediate(1) as i32));
                continue;
            }
            (Mnemonic::Mov, OpKind::Register, 2)
                if is32
                    && insn.op_kind(1) == OpKind::Register
                    && insn.op1_register().is_gpr32() =>
            {
                let v = get(&regs, insn.op1_register().full_register());
                regs.insert(full0, v);
                continue;
            }
            (Mnemonic::Test, OpKind::Register, 2)
                if is32 && insn.op_kind(1) == OpKind::Register && insn.op1_register() == r0 =>
            {
                tested = Some(get(&regs, full0));
                continue;
            }
            (Mnemonic::Setne, OpKind::Register, 1) if r0.is_gpr8() => {
                let v = match tested {
                    Some(Val::Site(r)) => Val::NonZeroByte(r),
                    _ => Val::Unknown,
                };
                regs.insert(full0, v);
                continue;
            }
            (Mnemonic::Movzx, OpKind::Register, 2)
                if is32 && insn.op_kind(1) == OpKind::Register && insn.op1_register().is_gpr8() =>
            {
                let v = match get(&regs, insn.op1_register().full_register()) {
                    Val::NonZeroByte(r) => Val::NonZero(r, 0),
                    _ => Val::Unknown,
                };
                regs.insert(full0, v);
                continue;
            }
            (Mnemonic::Shl, OpKind::Register, 2)
                if is32 && insn.op_kind(1) == OpKind::Immediate8 =>
            {
                let v = match get(&regs, full0) {
                    Val::NonZero(r, s) if s as u64 + insn.immediate(1) < 31 => {
                        Val::NonZero(r, s + insn.immediate(1) as u8)
                    }
                    Val::Const(c) => Val::Const(c.wrapping_shl(insn.immediate(1) as u32)),
                    _ => Val::Unknown,
                };
                regs.insert(full0, v);
                tested = None;
                continue;
            }
            _ => {}
        }
        for r in info.info(insn).used_registers() {
            if matches!(
                r.access(),
                OpAccess::Write
                    | OpAccess::ReadWrite
                    | OpAccess::CondWrite
                    | OpAccess::ReadCondWrite
            ) {
                regs.insert(r.register().full_register(), Val::Unknown);
            }
        }
        if insn.mnemonic() != Mnemonic::Pop && insn.mnemonic() != Mnemonic::Ret {
            tested = None;
        }
        if is_atomic(insn) {
            bail!(
                "{} at {:#x} synchronizes after the probe site",
                text(insn),
                insn.ip()
            );
        }
    }
    match get(&regs, Register::RAX) {
        Val::Const(c) => Ok(Outcome::Const(c)),
        Val::Site(r) => Ok(Outcome::Reg(r)),
        Val::NonZero(r, s) => Ok(Outcome::NonZeroShl(r, s)),
        _ => bail!("the function's result is not known at the probe site"),
    }
}

/// The x86 encoding's condition number (the low nibble of `0x70+cc`).
fn condition_number(cc: ConditionCode) -> u8 {
    match cc {
        ConditionCode::o => 0,
        ConditionCode::no => 1,
        ConditionCode::b => 2,
        ConditionCode::ae => 3,
        ConditionCode::e => 4,
        ConditionCode::ne => 5,
        ConditionCode::be => 6,
        ConditionCode::a => 7,
        ConditionCode::s => 8,
        ConditionCode::ns => 9,
        ConditionCode::p => 10,
        ConditionCode::np => 11,
        ConditionCode::l => 12,
        ConditionCode::ge => 13,
        ConditionCode::le => 14,
        ConditionCode::g => 15,
        ConditionCode::None => 0xff,
    }
}

/// `ordo_probe_common::reg` number of a full 64-bit register (`None` for a
/// narrower one: its value is not the whole register).
pub fn reg_number(r: Register) -> Option<u8> {
    if r.full_register() != r {
        return None;
    }
    crate::watch::sites::gpr_number(r)
}

/// The kernel-side encoding of an [`Outcome`].
pub fn encode_outcome(o: Outcome) -> ordo_probe_common::Outcome {
    let (kind, reg_, shift, value) = match o {
        Outcome::None => (outcome::NONE, 0, 0, 0),
        Outcome::Const(c) => (outcome::CONST, 0, 0, c),
        Outcome::Reg(r) => (outcome::REG, reg_number(r).unwrap_or(reg::NONE), 0, 0),
        Outcome::NonZeroShl(r, s) => (
            outcome::NONZERO_SHL,
            reg_number(r).unwrap_or(reg::NONE),
            s,
            0,
        ),
    };
    ordo_probe_common::Outcome {
        kind,
        reg: reg_,
        shift,
        _pad: 0,
        value,
    }
}

/// The kernel-side action of a site kind.
pub fn action_of(kind: &SiteKind) -> u8 {
    match kind {
        SiteKind::Outcome { .. } => site_action::OUTCOME,
        SiteKind::Block => site_action::BLOCK,
        SiteKind::TailCall => site_action::TAIL_CALL,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hand-written code at one address, no symbols.
    struct Bytes(u64, Vec<u8>);

    impl Image for Bytes {
        fn bytes(&self, vaddr: u64, len: usize) -> Option<&[u8]> {
            let off = vaddr.checked_sub(self.0)? as usize;
            self.1.get(off..off + len)
        }
        fn symbol_at(&self, _: u64) -> Option<&str> {
            None
        }
    }

    fn place_bytes(code: &[u8]) -> Result<Placement> {
        let image = Bytes(0x1000, code.to_vec());
        place(&image, 0x1000, code.len() as u64, false)
    }

    #[test]
    fn a_trylock_shape_gets_one_site_reporting_both_directions() {
        // lock cmpxchg [rdi],edx ; jne fail ; xor eax,eax ; ret ; fail: mov eax,16 ; ret
        let code = [
            0xf0, 0x0f, 0xb1, 0x17, 0x75, 0x03, 0x31, 0xc0, 0xc3, 0xb8, 0x10, 0, 0, 0, 0xc3,
        ];
        let placed = place_bytes(&code).unwrap();
        assert_eq!(placed.sites.len(), 1, "{:?}", placed.sites);
        let site = &placed.sites[0];
        assert_eq!(site.address, 0x1004);
        assert!(site.emulated);
        assert_eq!((site.depth, site.arg), (0, Loc::Reg(Register::RDI)));
        assert_eq!(
            site.kind,
            SiteKind::Outcome {
                cond: Some(5), // ne
                taken: Outcome::Const(16),
                fallthrough: Outcome::Const(0),
            }
        );
    }

    #[test]
    fn shapes_it_cannot_follow_are_refused() {
        // jmp rax: an indirect jump that is no recognizable jump table.
        let err = place_bytes(&[0xff, 0xe0]).unwrap_err();
        assert!(format!("{err}").contains("jump table"), "{err}");
        // Two paths reach `xor` with different stack depths.
        let err = place_bytes(&[0x85, 0xc0, 0x74, 0x02, 0x53, 0x90, 0x31, 0xc0, 0xc3]).unwrap_err();
        assert!(format!("{err}").contains("stack depth"), "{err}");
        // mov rdi,rsi before the decision: the object is nowhere at the probe.
        let err = place_bytes(&[
            0x48, 0x89, 0xf7, 0x85, 0xc0, 0x75, 0x01, 0xc3, 0x31, 0xc0, 0xc3,
        ])
        .unwrap_err();
        assert!(format!("{err}").contains("lost"), "{err}");
        // push rbx ; jmp elsewhere: a tail call with the return address not on top.
        let err = place_bytes(&[0x53, 0xe9, 0x00, 0x10, 0x00, 0x00]).unwrap_err();
        assert!(format!("{err}").contains("tail call"), "{err}");
    }

    #[test]
    fn the_object_is_followed_through_registers_and_stack_slots() {
        // push rbx ; mov rbx,rdi ; mov [rsp+0],rdi(via rbx) ; xor edi,edi ;
        // test eax,eax ; jne +3 ; pop rbx ; xor eax,eax ; ret ; pop rbx ; mov eax,16 ; ret
        let code = [
            0x53, // push rbx                 depth 8
            0x48, 0x89, 0xfb, // mov rbx,rdi
            0x31, 0xff, // xor edi,edi        rdi no longer the object
            0x85, 0xc0, // test eax,eax
            0x75, 0x04, // jne +4 -> fail
            0x5b, // pop rbx
            0x31, 0xc0, // xor eax,eax
            0xc3, // ret
            0x5b, // fail: pop rbx
            0xb8, 0x10, 0, 0, 0, // mov eax,16
            0xc3,
        ];
        let placed = place_bytes(&code).unwrap();
        let site = &placed.sites[0];
        assert_eq!(site.address, 0x1008);
        assert_eq!((site.depth, site.arg), (8, Loc::Reg(Register::RBX)));
    }
}
