//! Jump patches for Rust's inlined lock operations when recording: a `jmp` to a
//! trampoline instead of an `int3`, so a recorded `Mutex`/`RwLock` operation costs
//! a call, not a signal (issue 26: ~3.5 µs a trap).
//!
//! The recorder marks the sites whose bytes may be replaced (`SoftSite::patch`,
//! see `recorder/src/rust_locks.rs`): an acquisition's `lock cmpxchg` and the
//! branch right after it, or a release's `xchg`/`lock xadd` and the few
//! instructions after it, with no branch landing inside. At start-up, before the
//! program's constructors and on its only thread, the agent writes for each a
//! trampoline within ±2 GiB of the program and replaces the region's first five
//! bytes with `jmp trampoline` (the rest with `int3`, never reached):
//!
//! - an acquisition's trampoline runs the `cmpxchg` (its `rip`-relative
//!   displacement rewritten), branches on the same condition as the original, and
//!   on each side tells the agent the outcome, then jumps to where the original
//!   branch would have gone;
//! - a release's tells the agent first (the event is recorded while the lock is
//!   held, as the breakpoint does), then runs the copied instructions and jumps
//!   back after them;
//! - a `Once` completion check's is an acquisition's with the check's load and
//!   `test` in place of the `cmpxchg` (complete is ZF set, as success is);
//!   an inlined `Thread::unpark`'s `xchg` is a release's.
//!
//! Telling the agent is `lea rsp, [rsp-128]` (the red zone), `push` of the site
//! index and outcome, `call` of one shared stub, `lea rsp, [rsp+136]`. The stub
//! saves the flags, the 15 general registers and `xmm0`–`xmm15` (the program may
//! keep values there across the lock: nothing was called in the original), aligns
//! the stack, calls [`on_patched`] with the saved registers (from which the
//! operand's address is computed, as from a breakpoint's context), and restores
//! everything. Replays keep the breakpoints: their gates hold threads in the agent.

use crate::probe_common::inproc::{
    SoftSite, SOFT_RUST_LOCK_FAST, SOFT_RUST_LOCK_GATE, SOFT_RUST_ONCE_CHECK, SOFT_RUST_ONCE_LOAD,
    SOFT_RUST_READ_FAST, SOFT_RUST_READ_GATE, SOFT_RUST_RW_UNLOCK, SOFT_RUST_TRY_FAST,
    SOFT_RUST_TRY_GATE, SOFT_RUST_UNLOCK, SOFT_RUST_UNPARK, SOFT_RUST_WRITE_FAST,
    SOFT_RUST_WRITE_GATE,
};
use crate::probe_common::reg;

const PAGE: usize = 4096;
/// Bytes of one site's trampoline (an acquisition's: the `cmpxchg` ≤ 15, two
/// calls of 23, a conditional branch and two jumps back).
const TRAMPOLINE: usize = 128;
/// Bytes before the first trampoline: the shared stub and the handler's address.
const HEADER: usize = 1024;
/// The stub's saved `xmm` registers, in bytes.
const XMM_AREA: usize = 256;
/// Bytes from the saved registers to the program's `rsp`: the `xmm` area, the
/// flags and 15 registers, the stub's return address, the pushed argument, and
/// the red zone.
const TO_PROGRAM_RSP: u64 = XMM_AREA as u64 + 16 * 8 + 8 + 8 + 128;
/// The outcome bit of the pushed argument (the rest is the site's index).
const ACQUIRED: u32 = 1 << 31;

/// A growing run of machine code.
struct Code {
    at: *mut u8,
    len: usize,
}

impl Code {
    fn here(&self) -> u64 {
        self.at as u64 + self.len as u64
    }

    fn bytes(&mut self, b: &[u8]) {
        // SAFETY: the writer stays inside the mapping (each piece's size is
        // bounded by TRAMPOLINE or HEADER, checked by the builders).
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), self.at.add(self.len), b.len()) };
        self.len += b.len();
    }

    fn u32(&mut self, v: u32) {
        self.bytes(&v.to_le_bytes());
    }

    /// `rel32` to `target` from the end of a 4-byte field written now.
    fn rel32(&mut self, target: u64) {
        let rel = target.wrapping_sub(self.here() + 4) as i64 as i32;
        self.bytes(&rel.to_le_bytes());
    }

    fn jmp(&mut self, target: u64) {
        self.bytes(&[0xe9]);
        self.rel32(target);
    }

    /// `movups [rsp+disp32], xmmN` (`store`) or `movups xmmN, [rsp+disp32]`.
    fn movups(&mut self, store: bool, xmm: u8, disp: u32) {
        if xmm >= 8 {
            self.bytes(&[0x44]);
        }
        let op = if store { 0x11 } else { 0x10 };
        self.bytes(&[0x0f, op, 0x84 | ((xmm & 7) << 3), 0x24]);
        self.u32(disp);
    }

    /// Tells the agent, with `arg` (site index and outcome), through the stub.
    fn call_stub(&mut self, stub: u64, arg: u32) {
        self.bytes(&[0x48, 0x8d, 0x64, 0x24, 0x80]); // lea rsp, [rsp-128]
        self.bytes(&[0x68]); // push imm32
        self.u32(arg);
        self.bytes(&[0xe8]); // call stub
        self.rel32(stub);
        self.bytes(&[0x48, 0x8d, 0xa4, 0x24]); // lea rsp, [rsp+136]
        self.u32(136);
    }
}

/// The general registers in the order the stub pushes them (the last pushed is
/// at the lowest address): index in the saved area, by `ordo_probe_common::reg`
/// number (`rsp` apart).
const SAVED_SLOT: [usize; 16] = [
    14,         // rax
    11,         // rbx
    13,         // rcx
    12,         // rdx
    9,          // rsi
    8,          // rdi
    10,         // rbp
    usize::MAX, // rsp: computed
    7,          // r8
    6,          // r9
    5,          // r10
    4,          // r11
    3,          // r12
    2,          // r13
    1,          // r14
    0,          // r15
];

/// Called by the stub: `saved` points to the `xmm` area, the general registers
/// after it; `arg` is the site's index, with [`ACQUIRED`] for a successful
/// acquisition.
extern "C" fn on_patched(saved: *const u8, arg: u32) {
    let gprs = saved.wrapping_add(XMM_AREA) as *const u64;
    let reg = |r: u8| -> u64 {
        if r == reg::RSP {
            return saved as u64 + TO_PROGRAM_RSP;
        }
        match SAVED_SLOT.get(r as usize) {
            // SAFETY: the stub saved 16 words there, live for this call.
            Some(&i) if i != usize::MAX => unsafe { *gprs.add(i) },
            _ => 0,
        }
    };
    crate::soft::patched_operation((arg & !ACQUIRED) as usize, arg & ACQUIRED != 0, &reg);
}

/// Writes the shared stub at `code` and returns its address.
fn write_stub(code: &mut Code, handler_slot: u64) -> u64 {
    let stub = code.here();
    code.bytes(&[0x9c]); // pushfq
    code.bytes(&[0x50, 0x51, 0x52, 0x53, 0x55, 0x56, 0x57]); // rax rcx rdx rbx rbp rsi rdi
    for r in 0..8u8 {
        code.bytes(&[0x41, 0x50 + r]); // r8 .. r15
    }
    code.bytes(&[0x48, 0x81, 0xec]); // sub rsp, XMM_AREA
    code.u32(XMM_AREA as u32);
    for x in 0..16u8 {
        code.movups(true, x, 16 * x as u32);
    }
    code.bytes(&[0x48, 0x89, 0xe7]); // mov rdi, rsp
                                     // mov esi, [rsp + XMM_AREA + 16*8 + 8]: the pushed argument.
    code.bytes(&[0x8b, 0xb4, 0x24]);
    code.u32((XMM_AREA + 16 * 8 + 8) as u32);
    code.bytes(&[0x48, 0x89, 0xe3]); // mov rbx, rsp
    code.bytes(&[0x48, 0x83, 0xe4, 0xf0]); // and rsp, -16
    code.bytes(&[0xff, 0x15]); // call [rip+slot]
    code.rel32(handler_slot);
    code.bytes(&[0x48, 0x89, 0xdc]); // mov rsp, rbx
    for x in 0..16u8 {
        code.movups(false, x, 16 * x as u32);
    }
    code.bytes(&[0x48, 0x81, 0xc4]); // add rsp, XMM_AREA
    code.u32(XMM_AREA as u32);
    for r in (0..8u8).rev() {
        code.bytes(&[0x41, 0x58 + r]); // r15 .. r8
    }
    code.bytes(&[0x5f, 0x5e, 0x5d, 0x5b, 0x5a, 0x59, 0x58]); // rdi rsi rbp rbx rdx rcx rax
    code.bytes(&[0x9d]); // popfq
    code.bytes(&[0xc3]); // ret
    stub
}

/// Copies `s`'s instruction to `code`, its `rip`-relative displacement rewritten.
fn copy_instruction(code: &mut Code, s: &SoftSite, bias: u64) {
    let start = code.here();
    let len = s.len as usize;
    code.bytes(&s.bytes[..len]);
    if s.disp_at != 0 {
        let target = bias.wrapping_add(s.disp as u64);
        let disp = target.wrapping_sub(start + len as u64) as i64 as i32;
        // SAFETY: the displacement's 4 bytes lie inside the instruction just copied.
        unsafe {
            ((start + s.disp_at as u64) as *mut [u8; 4]).write(disp.to_le_bytes());
        }
    }
}

/// The target of the conditional branch `s` (`74`/`75 rel8`, `0f 84`/`0f 85
/// rel32`) at runtime, and whether it is a `je`.
fn branch_of(s: &SoftSite, bias: u64) -> (u64, bool) {
    let next = bias + s.ip + s.len as u64;
    let (je, disp) = match s.bytes[0] {
        0x74 | 0x75 => (s.bytes[0] == 0x74, s.bytes[1] as i8 as i64),
        _ => (
            s.bytes[1] == 0x84,
            i32::from_le_bytes([s.bytes[2], s.bytes[3], s.bytes[4], s.bytes[5]]) as i64,
        ),
    };
    (next.wrapping_add(disp as u64), je)
}

/// Whether a site can be reached through a jump patch.
fn patchable(s: &SoftSite) -> bool {
    s.patch as usize >= 5
        && matches!(
            s.access,
            SOFT_RUST_LOCK_FAST
                | SOFT_RUST_READ_FAST
                | SOFT_RUST_WRITE_FAST
                | SOFT_RUST_TRY_FAST
                | SOFT_RUST_UNLOCK
                | SOFT_RUST_RW_UNLOCK
                | SOFT_RUST_ONCE_CHECK
                | SOFT_RUST_UNPARK
        )
}

/// The regions of the program replaced by jumps, in ascending order: no
/// breakpoint is planted inside them.
pub(crate) struct Patched {
    /// (start, end) runtime addresses.
    regions: *const (u64, u64),
    n: usize,
}

impl Patched {
    pub(crate) const NONE: Patched = Patched {
        regions: std::ptr::null(),
        n: 0,
    };

    /// Whether `ip` lies in a replaced region.
    pub(crate) fn contains(&self, ip: u64) -> bool {
        if self.n == 0 {
            return false;
        }
        // SAFETY: `n` regions written by `install`, never freed.
        let regions = unsafe { std::slice::from_raw_parts(self.regions, self.n) };
        let i = regions.partition_point(|r| r.0 <= ip);
        i > 0 && ip < regions[i - 1].1
    }
}

/// Replaces the patchable sites of `list` (in ascending `ip` order, the program
/// at `bias`) with jumps to trampolines, where a mapping near the program can be
/// had; the others keep their breakpoints.
///
/// # Safety
/// At start-up, on the only thread, before any breakpoint is planted: the
/// program's code pages can be made writable.
pub(crate) unsafe fn install(list: &[SoftSite], bias: u64) -> Patched {
    let n = list.iter().filter(|s| patchable(s)).count();
    if n == 0 {
        return Patched::NONE;
    }
    let lo = bias + list[0].ip;
    let hi = bias + list[list.len() - 1].ip + 32;
    let len = (HEADER + n * TRAMPOLINE + n * 16).div_ceil(PAGE) * PAGE;
    let Some(area) = crate::soft::map_near(lo, hi, len) else {
        return Patched::NONE;
    };
    // The regions' list, after the trampolines (read-only afterwards, like them).
    let regions = area.wrapping_add(HEADER + n * TRAMPOLINE) as *mut (u64, u64);
    // The handler's address, then the stub.
    let handler_slot = area as u64;
    // SAFETY: the first 8 bytes of the fresh mapping.
    unsafe {
        (area as *mut u64).write(on_patched as extern "C" fn(*const u8, u32) as usize as u64)
    };
    let mut code = Code { at: area, len: 16 };
    let stub = write_stub(&mut code, handler_slot);
    let mut patched = 0;
    for (i, s) in list.iter().enumerate() {
        if !patchable(s) {
            continue;
        }
        let at = area.wrapping_add(HEADER + patched * TRAMPOLINE);
        let mut code = Code { at, len: 0 };
        let (region, jump_to) = if matches!(
            s.access,
            SOFT_RUST_UNLOCK | SOFT_RUST_RW_UNLOCK | SOFT_RUST_UNPARK
        ) {
            // Tell, then the release and what follows it, then back.
            let region = bias + s.ip;
            code.call_stub(stub, i as u32);
            copy_instruction(&mut code, s, bias);
            let rest = s.patch as usize - s.len as usize;
            // SAFETY: the program's own code, `patch` bytes from the release on.
            let tail =
                unsafe { std::slice::from_raw_parts((region + s.len as u64) as *const u8, rest) };
            code.bytes(tail);
            code.jmp(region + s.patch as u64);
            (region, at as u64)
        } else {
            // The `cmpxchg` is the gate site right before the branch.
            // The instruction the branch decides on: an acquisition's `cmpxchg`
            // right before it, or a `Once` check's load (a `test` between).
            let Some(cas) = list[..i].iter().rev().find(|g| {
                if s.access == SOFT_RUST_ONCE_CHECK {
                    g.access == SOFT_RUST_ONCE_LOAD && g.ip < s.ip
                } else {
                    g.ip + g.len as u64 == s.ip
                        && matches!(
                            g.access,
                            SOFT_RUST_LOCK_GATE
                                | SOFT_RUST_READ_GATE
                                | SOFT_RUST_WRITE_GATE
                                | SOFT_RUST_TRY_GATE
                        )
                }
            }) else {
                continue;
            };
            if s.ip + s.len as u64 - cas.ip != s.patch as u64 {
                continue;
            }
            let (target, je) = branch_of(s, bias);
            let next = bias + s.ip + s.len as u64;
            copy_instruction(&mut code, cas, bias);
            let between = (s.ip - cas.ip - cas.len as u64) as usize;
            // SAFETY: the program's code between the two sites (a `test` or `cmp`
            // of registers, which runs anywhere: `recorder/src/rust_locks.rs`).
            code.bytes(unsafe {
                std::slice::from_raw_parts((bias + cas.ip + cas.len as u64) as *const u8, between)
            });
            code.bytes(&[0x0f, if je { 0x84 } else { 0x85 }]);
            let taken_field = code.here();
            code.u32(0);
            // Not taken: a `jne` falls through on success, a `je` on failure.
            code.call_stub(stub, i as u32 | if je { 0 } else { ACQUIRED });
            code.jmp(next);
            let taken = code.here();
            let rel = taken.wrapping_sub(taken_field + 4) as i64 as i32;
            // SAFETY: the branch's rel32 field written above, inside the trampoline.
            unsafe { (taken_field as *mut [u8; 4]).write(rel.to_le_bytes()) };
            code.call_stub(stub, i as u32 | if je { ACQUIRED } else { 0 });
            code.jmp(target);
            (bias + cas.ip, at as u64)
        };
        debug_assert!(code.len <= TRAMPOLINE);
        // SAFETY: the program's code, made writable around the region (the
        // caller's contract); its threads do not run yet.
        unsafe {
            if !crate::soft::make_writable(region, s.patch as usize) {
                continue;
            }
            let rel = jump_to.wrapping_sub(region + 5) as i64 as i32;
            let p = region as *mut u8;
            p.write_volatile(0xe9);
            (p.add(1) as *mut [u8; 4]).write_volatile(rel.to_le_bytes());
            for k in 5..s.patch as usize {
                p.add(k).write_volatile(0xcc);
            }
            regions
                .add(patched)
                .write((region, region + s.patch as u64));
        }
        patched += 1;
    }
    // SAFETY: our own mapping, now complete.
    unsafe { crate::soft::make_executable(area, len) };
    Patched {
        regions,
        n: patched,
    }
}
