//! Variable watches, user-space half: from a `--watch SPEC` to the instructions and
//! addresses the watch probes attach to. Pure code (files in, plans out): no eBPF,
//! no privileges.
//!
//! # Steps
//! 1. [`WatchSpec::parse`] reads `SYMBOL`, `SYMBOL:SIZE`, `SYMBOL+OFFSET:SIZE` or
//!    `0xADDR:SIZE` (a link-time address in the main binary); SIZE is 1 to 8 bytes.
//!    SYMBOL is any name `nm -C` prints (anonymous namespaces, template arguments,
//!    operators: their spaces, commas, `+`, `:` and brackets are part of the name)
//!    or a Rust path, optionally prefixed `FILE:` (the source file that defines it)
//!    and followed by fields through DWARF: `.member`, `[index]`, one `->member`.
//!    [`split_offset`] is the operator-aware `NAME+OFFSET` split, for other places
//!    that name code or data by symbol.
//! 2. [`resolve`] (or a [`Resolver`] for several watches) finds the variable: ELF
//!    symbols of the main binary, then of each library in order, matched by raw
//!    name, demangled name (`prog::COUNTER`, `ns::Pool::live`), trailing path
//!    (`COUNTER`, `Pool::live`) or without GCC's suffix for local statics
//!    (`calls` for `calls.0`). When no symbol matches, DWARF variables with a
//!    static location are searched by their source name qualified by namespace,
//!    type and function (`bump::calls`), which finds statics whose symbols are
//!    stripped. The result is a [`ResolvedWatch`]: module, link-time address,
//!    size, name, whether its DWARF type is atomic, and for `ptr->field` the
//!    pointer and the field's offset ([`PointerHop`]). Unknown names (with close
//!    matches suggested), functions, thread-locals, ambiguous names (each candidate
//!    listed with its `FILE:NAME` and mangled name) and sizes past the variable's
//!    end are errors.
//! 3. [`plan_sites`] decodes every executable section of that module (the
//!    executable segments when there are no section headers) with iced-x86 and
//!    keeps each instruction whose memory operand can reach the watched bytes:
//!    - a RIP-relative operand (or an absolute one, in position-dependent code)
//!      whose `[target, target + access size)` overlaps them;
//!    - an operand `[reg + disp]` or `[reg + index*scale + disp]` where `reg` was
//!      loaded with the variable's address earlier in the same straight-line code
//!      (`lea var(%rip), %reg`, a load of the variable's GOT slot, `mov $var, %reg`,
//!      or a copy of such a register), until the register is overwritten, a call
//!      clobbers it or control leaves (jump, return). This is how a struct field or
//!      an array element reached through the base address is found. Such sites are
//!      marked [`PlannedSite::via_register`]: the probe must check the effective
//!      address, since another path may reach the instruction with another value.
//!
//!    Each site is a [`PlannedSite`]: the file offset for the uprobe and an
//!    `ordo_probe_common::WatchSite` with link-time addresses ([`Relocate`] adds
//!    the load bias), the access kind from iced-x86's instruction info (read,
//!    write, or read-modify-write, flagged atomic for `lock`-prefixed instructions
//!    and `xchg`, and for every access to a variable of atomic type), and for plain
//!    stores the register or immediate being written. For `ptr->field` the sweep
//!    tracks registers loaded from the pointer instead, and keeps accesses
//!    `[reg + d]` that reach the field (sites relative to the register).
//! 4. Where the uprobe goes ([`ProbePoint`]). The kernel refuses a uprobe on an
//!    instruction with a `lock` prefix or an ES/CS/SS/DS override, or with an
//!    opcode outside its table (and when the program is not mapped yet, it refuses
//!    silently, at mmap time). Such an access is probed on the instruction before
//!    it, if that one always falls through to it, nothing jumps to the access and
//!    the address registers stay the same; else on the instruction after it, if
//!    nothing else jumps there; else it is listed in [`WatchPlan::unprobeable`].
//!    Jump targets are the direct branch and call targets seen in the sweep plus
//!    every function symbol. Atomic loads are probed on the next instruction
//!    when it qualifies, so their place in the variable's order is after the load.
//! 5. A hardware watchpoint's trap comes after the access: [`TrapDecoder`] finds
//!    the instruction that ended there (decoding its function from the symbol's
//!    start) and what it did.
//!
//! # Limits
//! - Accesses through pointers whose value comes from elsewhere (a function
//!   argument, a heap object, a pointer stored in memory, a register live across a
//!   jump target) are not statically reachable. [`WatchPlan::address_refs`] lists
//!   where the variable's address is put in a register, as a hint that such
//!   accesses exist; hardware watchpoints (`--watch-hw`) are the mechanism for them.
//! - Only the module holding the variable is scanned. Code in other modules that
//!   accesses it (a library's global used by the main program, or a library
//!   global copy-relocated into the main binary, which the library then reaches
//!   through its GOT) is not found.
//! - Code is found by a linear sweep of executable sections: bytes the decoder
//!   cannot decode are skipped, data embedded in code could hide an instruction,
//!   and code generated or modified at run time (JITs, self-modifying code) is
//!   never seen.
//! - String instructions (`rep movs`…), gathers/scatters and `fs:`/`gs:`-relative
//!   accesses have no static address and are not sites.
//! - A probe runs before its instruction: for a write it records the register or
//!   immediate being stored ([`PlannedSite::value_known`] is false when the
//!   source is neither), for a read-modify-write the value before the update —
//!   except a probe placed after a refused instruction ([`ProbePoint::Next`]),
//!   which sees the value after it. The probe and the access are not one atomic
//!   step: another thread's access can fall between them, so the per-variable
//!   order taken in the probe can differ from the hardware order of racing accesses.
//! - Indirect jumps (switch tables) to an access are not known as jump targets, so
//!   a neighbour probe can, rarely, miss an access reached that way.

mod mark;
mod resolve;
pub(crate) mod sites;
mod spec;
mod trapped;
mod uprobe;

#[cfg(test)]
mod tests;

pub use mark::{resolve_mark, ResolvedMark};
pub use resolve::PointerHop;
pub use resolve::{resolve, KeptPartNames, ResolvedWatch, Resolver};
pub use sites::{
    access_at, access_ending_at, plan_sites, PlannedSite, ProbePoint, Relocate, WatchPlan,
};
pub use spec::{split_offset, FieldStep, WatchSpec, WatchTarget, MAX_WATCH_SIZE};
pub use trapped::{classify_access, instruction_ending_at, TrapDecoder, TrappedAccess};
pub use uprobe::kernel_accepts as uprobe_accepts;
