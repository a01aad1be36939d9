//! Call sites behind sanitizer interceptors. In a ThreadSanitizer or ASan build the
//! program's pthread calls reach the agent through the runtime's interceptor
//! (`__interceptor_pthread_mutex_lock` in `libtsan.so`), so a wrapper's return
//! address lies in the runtime, not in the program, and every site would read
//! `sanitizer_common_interceptors.inc`. The runtimes are built without frame
//! pointers, so the program's return address is found by scanning the interceptor's
//! frame from the top of the wrapper's: the first word that points just past a call
//! instruction in an executable segment of a module that is neither a sanitizer
//! runtime nor libc, the dynamic loader or the agent. Without a sanitizer runtime
//! loaded, a site costs one more load and compare.

use std::ffi::{c_int, c_void, CStr};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::*};

use crate::{dl_iterate_phdr, DlPhdrInfo};

/// Code ranges of sanitizer runtimes.
const MAX_RUNTIME: usize = 8;
/// Code ranges of the modules a program's call can come from.
const MAX_CODE: usize = 64;
/// Stack words scanned above the wrapper's frame (the interceptor's frame is
/// smaller: a few saved registers and locals).
const SCAN_WORDS: usize = 48;

const PT_LOAD: u32 = 1;
const PF_X: u32 = 1;

#[allow(
    clippy::declare_interior_mutable_const,
    reason = "only the initializer of the tables' entries below, never used as a shared value"
)]
const EMPTY: (AtomicU64, AtomicU64) = (AtomicU64::new(0), AtomicU64::new(0));
static RUNTIME: [(AtomicU64, AtomicU64); MAX_RUNTIME] = [EMPTY; MAX_RUNTIME];
static N_RUNTIME: AtomicUsize = AtomicUsize::new(0);
static CODE: [(AtomicU64, AtomicU64); MAX_CODE] = [EMPTY; MAX_CODE];
static N_CODE: AtomicUsize = AtomicUsize::new(0);

/// The start of `Elf64_Phdr`.
#[repr(C)]
pub(crate) struct PhdrStart {
    p_type: u32,
    p_flags: u32,
    p_offset: u64,
    p_vaddr: u64,
    p_paddr: u64,
    p_filesz: u64,
    p_memsz: u64,
}

/// A whole `Elf64_Phdr` (56 bytes): the table's stride.
#[repr(C)]
struct Phdr64 {
    head: PhdrStart,
    p_align: u64,
}

/// Finds the code of the sanitizer runtimes and of the program's modules (call it
/// once at start-up: the runtimes are loaded before the agent's constructor runs).
pub(crate) fn init() {
    // SAFETY: the callback only reads what glibc passes it.
    unsafe { dl_iterate_phdr(collect, null_mut()) };
}

fn push(table: &[(AtomicU64, AtomicU64)], n: &AtomicUsize, start: u64, end: u64) {
    let i = n.load(Relaxed);
    if i < table.len() {
        table[i].0.store(start, Relaxed);
        table[i].1.store(end, Relaxed);
        n.store(i + 1, Release);
    }
}

/// `dl_iterate_phdr`'s callback: notes the executable segments of one module.
///
/// # Safety
/// `info` must be the module description glibc passes the callback, valid for the
/// call.
unsafe extern "C" fn collect(info: *mut DlPhdrInfo, _size: usize, _data: *mut c_void) -> c_int {
    // SAFETY: glibc's description of the module, valid during the callback.
    let info = unsafe { &*info };
    let name = if info.name.is_null() {
        &b""[..]
    } else {
        // SAFETY: a non-null module name is a NUL-terminated string glibc owns.
        unsafe { CStr::from_ptr(info.name) }.to_bytes()
    };
    let contains = |needle: &[u8]| name.windows(needle.len()).any(|w| w == needle);
    let runtime = contains(b"san.so");
    let mut agent = false;
    let mut ranges = [(0u64, 0u64); 4];
    let mut n = 0;
    for i in 0..info.phnum as usize {
        // SAFETY: `phdr` is the module's table of `phnum` program headers, 56 bytes each.
        let ph = unsafe { &*info.phdr.cast::<Phdr64>().add(i) };
        let ph = &ph.head;
        if ph.p_type != PT_LOAD || ph.p_flags & PF_X == 0 || n == ranges.len() {
            continue;
        }
        let start = info.addr + ph.p_vaddr;
        let end = start + ph.p_memsz;
        agent |= (start..end).contains(&(init as *const () as u64));
        ranges[n] = (start, end);
        n += 1;
    }
    let system = contains(b"libc.so") || contains(b"ld-linux") || contains(b"linux-vdso");
    for &(start, end) in &ranges[..n] {
        if runtime {
            push(&RUNTIME, &N_RUNTIME, start, end);
        } else if !system && !agent {
            push(&CODE, &N_CODE, start, end);
        }
    }
    0
}

fn find(table: &[(AtomicU64, AtomicU64)], n: &AtomicUsize, pc: u64) -> Option<u64> {
    table[..n.load(Acquire)].iter().find_map(|(s, e)| {
        let start = s.load(Relaxed);
        (start..e.load(Relaxed)).contains(&pc).then_some(start)
    })
}

/// Whether `pc` lies in a sanitizer runtime: one load where none is loaded; the
/// search out of line, so that it does not sit inside every wrapper's path.
#[inline(always)]
pub(crate) fn in_runtime(pc: u64) -> bool {
    N_RUNTIME.load(Relaxed) != 0 && in_a_runtime(pc)
}

/// [`in_runtime`]'s search, once a runtime is loaded.
#[inline(never)]
fn in_a_runtime(pc: u64) -> bool {
    find(&RUNTIME, &N_RUNTIME, pc).is_some()
}

/// Whether the bytes before `ret` (in a code range starting at `start`) end with a
/// call instruction: `call rel32`, `call *disp32(%rip)`, `call *%reg`,
/// `call *disp8(%reg)`, `call *disp32(%reg)`.
///
/// # Safety
/// `ret` must lie in a mapped code range starting at `start`.
unsafe fn after_call(ret: u64, start: u64) -> bool {
    if ret < start + 7 {
        return false;
    }
    // SAFETY: the 7 bytes before `ret` lie in its code range (checked above), which
    // is mapped (the caller's contract).
    let b = |back: u64| unsafe { *((ret - back) as *const u8) };
    b(5) == 0xe8
        || (b(6) == 0xff && b(5) == 0x15)
        || (b(2) == 0xff && b(1) & 0xf8 == 0xd0)
        || (b(3) == 0xff && b(2) & 0xf8 == 0x50)
        || (b(6) == 0xff && b(5) & 0xf8 == 0x90)
}

/// The program's return address above an interceptor's frame: `above` is the
/// wrapper's caller's stack (`rbp + 16`); `fallback` is what to report when none is
/// found (the interceptor's own site).
///
/// # Safety
/// `above` must point into the calling thread's stack with [`SCAN_WORDS`] words
/// above it (the interceptor's and the program's frames are there).
pub(crate) unsafe fn program_site(above: *const u64, fallback: u64) -> u64 {
    for i in 0..SCAN_WORDS {
        // SAFETY: i < SCAN_WORDS, which lie on the thread's stack (the caller's contract).
        let word = unsafe { *above.add(i) };
        if let Some(start) = find(&CODE, &N_CODE, word) {
            // SAFETY: `word` lies in a code range of a loaded module, starting at `start`.
            if unsafe { after_call(word, start) } {
                return word;
            }
        }
    }
    fallback
}
