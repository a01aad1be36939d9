//! Which x86-64 instructions the kernel lets a uprobe sit on.
//!
//! `arch_uprobe_analyze_insn` (arch/x86/kernel/uprobes.c) refuses an instruction
//! with a LOCK prefix or an ES/CS/SS/DS segment-override prefix, and one whose
//! first opcode byte is not in its `good_insns_64` table (system and I/O
//! instructions, `int3`, `hlt`, opcodes invalid in 64-bit mode, and for VEX/EVEX
//! instructions the opcode byte after the prefix is looked up the same way). A
//! refused probe does not fail at attach time when the program is not mapped yet:
//! it is silently never installed, so the planner must not choose such a site.

use iced_x86::Instruction;

/// First opcode bytes `good_insns_64` marks bad.
const BAD_OPCODES_64: &[u8] = &[
    0x06, 0x07, 0x0e, 0x16, 0x17, 0x1e, 0x1f, 0x27, 0x2f, 0x37, 0x3f, 0x60, 0x61, 0x62, 0x6c, 0x6d,
    0x6e, 0x6f, 0x82, 0x9a, 0xcc, 0xcd, 0xce, 0xcf, 0xd4, 0xd5, 0xd6, 0xe4, 0xe5, 0xe6, 0xe7, 0xea,
    0xec, 0xed, 0xee, 0xef, 0xf1, 0xf4, 0xfa, 0xfb,
];

/// Whether the kernel accepts a uprobe on `instr`, whose encoding is `bytes`
/// (at least the instruction's length).
pub fn kernel_accepts(instr: &Instruction, bytes: &[u8]) -> bool {
    let bytes = &bytes[..instr.len().min(bytes.len())];
    let mut at = 0;
    while let Some(&prefix) = bytes.get(at) {
        match prefix {
            0xf0 | 0x26 | 0x2e | 0x36 | 0x3e => return false,
            0xf2 | 0xf3 | 0x64 | 0x65 | 0x66 | 0x67 => at += 1,
            _ => break,
        }
    }
    if bytes.get(at).is_some_and(|b| (0x40..=0x4f).contains(b)) {
        at += 1;
    }
    // The kernel checks the first opcode byte: after a VEX/EVEX prefix, the byte
    // that follows it; for legacy 0x0f-escaped opcodes, 0x0f, which it accepts.
    let opcode = match bytes.get(at) {
        Some(0xc5) => bytes.get(at + 2),
        Some(0xc4) => bytes.get(at + 3),
        Some(0x62) => bytes.get(at + 4),
        other => other,
    };
    opcode.is_some_and(|op| !BAD_OPCODES_64.contains(op))
}

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::{Decoder, DecoderOptions};

    fn accepts(bytes: &[u8]) -> bool {
        let instr = Decoder::with_ip(64, bytes, 0x1000, DecoderOptions::NONE).decode();
        assert!(!instr.is_invalid(), "{bytes:x?}");
        kernel_accepts(&instr, bytes)
    }

    #[test]
    fn lock_and_legacy_segment_prefixes_are_refused() {
        // lock xadd %rax,0x4571c(%rip)
        assert!(!accepts(&[
            0xf0, 0x48, 0x0f, 0xc1, 0x05, 0x1c, 0x57, 0x04, 0x00
        ]));
        // lock incl (%rdi)
        assert!(!accepts(&[0xf0, 0xff, 0x07]));
        // cs nopw 0x0(%rax,%rax,1)
        assert!(!accepts(&[
            0x2e, 0x66, 0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00
        ]));
        // xchg %rax,0x10(%rip): implicitly locked, no prefix, accepted
        assert!(accepts(&[0x48, 0x87, 0x05, 0x10, 0x00, 0x00, 0x00]));
        // mov %fs:0x28,%rax: fs is allowed
        assert!(accepts(&[
            0x64, 0x48, 0x8b, 0x04, 0x25, 0x28, 0x00, 0x00, 0x00
        ]));
    }

    #[test]
    fn opcode_table_is_applied() {
        assert!(accepts(&[0x8b, 0x05, 0x10, 0x00, 0x00, 0x00])); // mov 0x10(%rip),%eax
        assert!(accepts(&[0x83, 0x05, 0x10, 0x00, 0x00, 0x00, 0x01])); // addl $1,0x10(%rip)
        assert!(accepts(&[0x0f, 0xb1, 0x15, 0x10, 0x00, 0x00, 0x00])); // cmpxchg %edx,0x10(%rip)
        assert!(accepts(&[0xf3, 0x0f, 0x6f, 0x05, 0x10, 0x00, 0x00, 0x00])); // movdqu 0x10(%rip),%xmm0
        assert!(!accepts(&[0xcc])); // int3
        assert!(!accepts(&[0xf4])); // hlt
        assert!(!accepts(&[0xec])); // in (%dx),%al
                                    // vmovdqu 0x10(%rip),%ymm0 (VEX, opcode byte 0x6f): refused like the kernel does
        assert!(!accepts(&[0xc5, 0xfe, 0x6f, 0x05, 0x10, 0x00, 0x00, 0x00]));
        // vmovups 0x10(%rip),%ymm0 (VEX, opcode byte 0x10): accepted
        assert!(accepts(&[0xc5, 0xfc, 0x10, 0x05, 0x10, 0x00, 0x00, 0x00]));
    }
}
