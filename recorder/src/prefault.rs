//! Memory for the in-process drain's copies, faulted in ahead of need.
//!
//! The drain copies the agents' rings while the program runs, usually into fresh
//! memory (the converter, at idle priority, gives buffers back late), and in this
//! virtual machine a first touch of a 4 KiB page costs about 4 µs — 30 ns per
//! 32-byte ring slot, ~1 ms per half ring, time the drain (SCHED_FIFO, so often on
//! the program's own CPU) took from the program. [`PrefaultPool`] keeps a few
//! buffers faulted in by a thread at idle priority (`MADV_POPULATE_WRITE`, a loop in
//! the kernel rather than one exception per page), so a pass costs the copy only.
//! Transparent huge pages were tried and rejected: their direct compaction made
//! some passes much slower (measured in docs/ARCHITECTURE.md).
//!
//! [`PassBuf`] is a buffer with a fixed reservation in its own anonymous mapping, so
//! a whole pass is reserved once and records never move while it fills.

use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// Records ahead of the copy whose line [`PassBuf::extend_streaming`] fetches:
/// a ring's lines were last written on the producer's CPU, and fetching 8 lines
/// (of 16-byte units) ahead overlaps their transfers — in a hot loop of recorded
/// pairs the drain took ~13 % less time an event (by hand, 2026-12-07). Never
/// past the slice: the line at the ring's head may be the one its producer is
/// writing, and fetching it would take it away from that CPU.
const PREFETCH_AHEAD: usize = 32;

/// Reservations are made in multiples of this.
const GRANULE: usize = 64 << 10;

/// What [`PassBuf::extend_streaming`] shows each record as it copies it.
///
/// A trait rather than a closure so that the drain's (`inproc`) is in line in
/// the copy's loop: the closure was called once a record, not in line, and held
/// 44 % of the drain's samples in a recorded memcached (`perf`, by hand).
pub(crate) trait CopyWatch<T> {
    /// Sees `record`, with the record after it in the same piece; returns the one
    /// record to store instead of the two, or `None` to store `record` alone.
    fn take(&mut self, record: &T, next: Option<&T>) -> Option<T>;
}

/// Closures watch the copies in the tests; the drain has its own watch.
#[cfg(test)]
impl<T, F: FnMut(&T, Option<&T>) -> Option<T>> CopyWatch<T> for F {
    #[inline(always)]
    fn take(&mut self, record: &T, next: Option<&T>) -> Option<T> {
        self(record, next)
    }
}

/// A buffer of `T`s with a fixed reserved capacity in its own anonymous mapping.
pub(crate) struct PassBuf<T: Copy> {
    ptr: NonNull<T>,
    len: usize,
    /// Records the reservation holds (0: nothing mapped yet).
    cap: usize,
    /// Bytes mapped.
    mapped: usize,
    /// Bytes from the start known to be faulted in ([`PassBuf::populate_to`]).
    faulted: usize,
    _owns: PhantomData<T>,
}

// SAFETY: the buffer owns its mapping exclusively, like a Vec<T>.
unsafe impl<T: Copy + Send> Send for PassBuf<T> {}

impl<T: Copy> Default for PassBuf<T> {
    fn default() -> Self {
        PassBuf {
            ptr: NonNull::dangling(),
            len: 0,
            cap: 0,
            mapped: 0,
            faulted: 0,
            _owns: PhantomData,
        }
    }
}

impl<T: Copy> PassBuf<T> {
    /// Makes room for `total` records in all (the records already held included):
    /// maps a new, larger reservation if needed. Returns false when the address
    /// space could not be reserved (the caller then has no room).
    pub(crate) fn reserve_total(&mut self, total: usize) -> bool {
        if total <= self.cap {
            return true;
        }
        let bytes = (total * std::mem::size_of::<T>()).next_multiple_of(GRANULE);
        // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return false;
        }
        let new = NonNull::new(p.cast::<T>()).expect("mmap returned null");
        if self.len > 0 {
            // SAFETY: both regions hold at least `len` records and do not overlap.
            unsafe { std::ptr::copy_nonoverlapping(self.ptr.as_ptr(), new.as_ptr(), self.len) };
        }
        self.unmap();
        self.ptr = new;
        self.cap = bytes / std::mem::size_of::<T>();
        self.mapped = bytes;
        self.faulted = 0;
        true
    }

    /// Faults in the pages `total` records will fill, in one call
    /// (`MADV_POPULATE_WRITE`), before they are copied: the kernel's loop does
    /// what a page fault a page would (zero and map each page) without an
    /// exception, a VMA lookup and a return per page. For the drain copying into
    /// a buffer no prefault thread made ready (on a machine the program fills,
    /// the idle-priority one gets no CPU): its page faults were ~0.5 % of a
    /// recorded memcached machine's CPU samples.
    pub(crate) fn populate_to(&mut self, total: usize) {
        let size = std::mem::size_of::<T>();
        let end = (total * size).next_multiple_of(4096).min(self.mapped);
        let start = self.faulted.max(self.len * size / 4096 * 4096);
        if end > start {
            // SAFETY: a range of our own mapping; populating only allocates its pages.
            unsafe {
                libc::madvise(
                    self.ptr.as_ptr().cast::<u8>().add(start).cast(),
                    end - start,
                    23, /* MADV_POPULATE_WRITE */
                )
            };
            self.faulted = end;
        }
    }

    /// Whether `total` records fit without a new reservation.
    pub(crate) fn has_room(&self, total: usize) -> bool {
        total <= self.cap
    }

    /// Panics unless `records` more fit in the reservation.
    fn check_room(&self, records: usize) {
        assert!(
            self.len + records <= self.cap,
            "PassBuf: extend beyond the reservation"
        );
    }

    /// Appends records; the room must have been reserved.
    pub(crate) fn extend_from_slice(&mut self, records: &[T]) {
        self.check_room(records.len());
        // SAFETY: in bounds of the reservation (checked above); no overlap with a
        // caller's slice, which cannot point into our unexposed spare room.
        unsafe {
            std::ptr::copy_nonoverlapping(
                records.as_ptr(),
                self.ptr.as_ptr().add(self.len),
                records.len(),
            )
        };
        self.len += records.len();
    }

    /// Appends records like [`PassBuf::extend_from_slice`], with non-temporal
    /// stores where the records are whole 16-byte words: nothing reads a pass until
    /// the converter, usually seconds later, so its lines need not take cache room
    /// from the program while the drain fills it (the stores go to memory through
    /// write-combining buffers, and the `sfence` at the end orders them before the
    /// pass is handed on). `take` is shown each record with the one after it, as
    /// it is copied: whatever the drain needs from the records it learns then,
    /// from the source's lines, because reading the copy back would fetch each
    /// line from memory again. Where `take` makes one record of the two, that one
    /// is stored instead of both and the next is not shown again; the buffer then
    /// holds fewer records than it was given.
    #[inline(always)]
    pub(crate) fn extend_streaming(&mut self, records: &[T], take: &mut impl CopyWatch<T>) {
        self.check_room(records.len());
        #[cfg(target_arch = "x86_64")]
        let streaming = std::mem::size_of::<T>().is_multiple_of(16)
            && (self.ptr.as_ptr() as usize).is_multiple_of(16);
        let mut i = 0;
        while i < records.len() {
            #[cfg(target_arch = "x86_64")]
            if let Some(ahead) = records.get(i + PREFETCH_AHEAD) {
                use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                // SAFETY: a prefetch of a record in the slice.
                unsafe { _mm_prefetch::<_MM_HINT_T0>((ahead as *const T).cast()) };
            }
            let one = match take.take(&records[i], records.get(i + 1)) {
                Some(one) => {
                    i += 2;
                    one
                }
                None => {
                    i += 1;
                    records[i - 1]
                }
            };
            // SAFETY (both stores): at most `records.len()` records stored, in
            // bounds of the reservation (checked above).
            #[cfg(target_arch = "x86_64")]
            if streaming {
                use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
                let words = std::mem::size_of::<T>() / 16;
                // SAFETY: as above; 16-byte aligned (the mapping is page-aligned
                // and T a multiple of 16 bytes); SSE2 is part of x86_64.
                unsafe {
                    let to = self.ptr.as_ptr().add(self.len).cast::<__m128i>();
                    let from = (&one as *const T).cast::<__m128i>();
                    for w in 0..words {
                        _mm_stream_si128(to.add(w), _mm_loadu_si128(from.add(w)));
                    }
                }
                self.len += 1;
                continue;
            }
            // SAFETY: as above; T is Copy.
            unsafe { self.ptr.as_ptr().add(self.len).write(one) };
            self.len += 1;
        }
        #[cfg(target_arch = "x86_64")]
        if streaming {
            // SAFETY: SSE2 is part of x86_64.
            unsafe { std::arch::x86_64::_mm_sfence() };
        }
    }

    /// The records' bytes rounded up to a multiple of `align` (a power of two
    /// no larger than a page), from the reservation's start, which is page-aligned:
    /// what a direct write of the records takes (`crate::spill`). The rounding
    /// stays within the reservation, whose size is a multiple of [`GRANULE`].
    pub(crate) fn aligned_bytes(&self, align: usize) -> (*const u8, usize) {
        let bytes = (self.len * std::mem::size_of::<T>()).next_multiple_of(align);
        assert!(
            bytes <= self.mapped,
            "PassBuf: aligned length beyond the mapping"
        );
        (self.ptr.as_ptr().cast::<u8>().cast_const(), bytes)
    }

    /// The start of an empty buffer's reservation, for `bytes` (a multiple of
    /// `align`, within the reservation) to be read into from a file; the records
    /// count once [`PassBuf::set_len`] says how many arrived.
    pub(crate) fn spare_aligned(&mut self, bytes: usize, align: usize) -> *mut u8 {
        assert!(
            self.len == 0 && bytes <= self.mapped && bytes.is_multiple_of(align),
            "PassBuf: {bytes} spare bytes asked of {} mapped, {} held",
            self.mapped,
            self.len
        );
        self.faulted = self.faulted.max(bytes);
        self.ptr.as_ptr().cast()
    }

    /// Counts the first `records` records as held.
    ///
    /// # Safety
    /// They must have been initialized (e.g. read in through
    /// [`PassBuf::spare_aligned`]).
    pub(crate) unsafe fn set_len(&mut self, records: usize) {
        assert!(
            records <= self.cap,
            "PassBuf: length beyond the reservation"
        );
        self.len = records;
    }

    /// Records the reservation holds.
    pub(crate) fn capacity(&self) -> usize {
        self.cap
    }

    /// Forgets the records, keeping the memory (its pages stay faulted in).
    pub(crate) fn clear(&mut self) {
        self.len = 0;
    }

    fn unmap(&mut self) {
        if self.mapped > 0 {
            // SAFETY: our own mapping, no longer referenced.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.mapped) };
            self.mapped = 0;
            self.cap = 0;
            self.faulted = 0;
        }
    }
}

impl<T: Copy> std::ops::Deref for PassBuf<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: the first `len` records are initialized; a dangling pointer with
        // len 0 is a valid empty slice.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> Drop for PassBuf<T> {
    fn drop(&mut self) {
        self.unmap();
    }
}

/// Buffers faulted in ahead of need by a thread of their own, so the drain copies
/// into memory that is ready even when the converter is too far behind to give
/// buffers back. The thread runs at idle priority: on a machine whose CPUs the
/// program keeps busy it does nothing and the drain faults its own pages in, as
/// without it (at normal priority it cost memcached a third of its throughput).
/// Buffers are sized by the passes the drain asked for lately, so it does not
/// fault in more than is copied.
pub(crate) struct PrefaultPool<T: Copy + Send + 'static> {
    shared: Arc<PoolShared<T>>,
    thread: Option<JoinHandle<()>>,
}

struct PoolShared<T: Copy> {
    ready: Mutex<Vec<PassBuf<T>>>,
    /// Signalled when a buffer was taken or the wanted size grew.
    wanted: Condvar,
    /// Records the last pass needed: new buffers hold a quarter more.
    hint: AtomicUsize,
    stop: AtomicBool,
}

impl<T: Copy + Send + 'static> PrefaultPool<T> {
    /// Starts the thread that keeps `buffers` buffers faulted in, first sized for
    /// `records` records; it first runs `setup` (to lower its own priority).
    pub(crate) fn start(
        buffers: usize,
        records: usize,
        setup: impl FnOnce() + Send + 'static,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(PoolShared {
            ready: Mutex::new(Vec::with_capacity(buffers)),
            wanted: Condvar::new(),
            hint: AtomicUsize::new(records),
            stop: AtomicBool::new(false),
        });
        let thread = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("ordo-prefault".into())
                .spawn(move || {
                    setup();
                    shared.refill(buffers)
                })?
        };
        Ok(PrefaultPool {
            shared,
            thread: Some(thread),
        })
    }

    /// A faulted-in buffer with room for `records` records, if one is ready (never
    /// waits); tells the thread the size passes need now.
    pub(crate) fn take(&self, records: usize) -> Option<PassBuf<T>> {
        let old = self.shared.hint.swap(records, Ordering::Relaxed);
        let mut ready = self.shared.ready.try_lock().ok()?;
        // The smallest that fits, so big buffers stay for big passes.
        let found = (0..ready.len())
            .filter(|&i| ready[i].cap >= records)
            .min_by_key(|&i| ready[i].cap);
        let b = found.map(|i| ready.swap_remove(i));
        drop(ready);
        if b.is_some() || records > old {
            self.shared.wanted.notify_one();
        }
        b
    }
}

impl<T: Copy> PoolShared<T> {
    /// The thread's body: keeps `buffers` buffers ready, new ones of the size
    /// passes need now. Smaller ones are kept (smaller passes use them): faulting
    /// memory in only to unmap it unused cost memcached 8 % of the CPU.
    fn refill(&self, buffers: usize) {
        let mut ready = self.ready.lock().unwrap();
        while !self.stop.load(Ordering::Relaxed) {
            let want = self.hint.load(Ordering::Relaxed);
            let fits = ready.iter().any(|b| b.cap >= want);
            if ready.len() >= buffers || (fits && ready.len() >= buffers / 2) {
                ready = self.wanted.wait(ready).unwrap();
                continue;
            }
            drop(ready);
            let mut b = PassBuf::default();
            let made = b.reserve_total(want + want / 4);
            if made {
                // The whole reservation, so that copying into it costs only the copy.
                b.populate_to(b.cap);
            }
            ready = self.ready.lock().unwrap();
            if made {
                if ready.len() >= buffers {
                    // Full of smaller ones: the smallest makes room.
                    let smallest = (0..ready.len()).min_by_key(|&i| ready[i].cap).unwrap();
                    ready.swap_remove(smallest);
                }
                ready.push(b);
            } else {
                // No memory: the drain faults its own in, as without a pool.
                ready = self.wanted.wait(ready).unwrap();
            }
        }
    }
}

impl<T: Copy + Send + 'static> Drop for PrefaultPool<T> {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        {
            let _ready = self.shared.ready.lock().unwrap();
            self.shared.wanted.notify_all();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_without_losing_records_and_clears_keeping_room() {
        let mut b = PassBuf::<u64>::default();
        assert!(b.is_empty());
        assert!(b.reserve_total(3));
        b.extend_from_slice(&[1, 2, 3]);
        let cap = b.cap;
        assert!(cap >= GRANULE / 8);
        assert!(b.reserve_total(cap + 1));
        assert!(b.cap > cap);
        b.extend_from_slice(&vec![7; cap - 2]);
        assert_eq!(&b[..4], &[1, 2, 3, 7]);
        assert_eq!(b.len(), cap + 1);
        b.clear();
        assert!(b.is_empty());
        assert!(b.cap > cap, "clear keeps the reservation");
    }

    #[test]
    fn the_pool_hands_out_faulted_in_buffers_and_refills() {
        let pool = PrefaultPool::<u64>::start(2, 1000, || {}).unwrap();
        let take = |records: usize| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            loop {
                if let Some(b) = pool.take(records) {
                    return b;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "no buffer for {records} records"
                );
                std::thread::yield_now();
            }
        };
        let got: Vec<_> = (0..3).map(|_| take(1000)).collect();
        for b in &got {
            assert!(b.is_empty() && b.cap >= 1000);
        }
        // Asked for more than it had: later buffers hold that many.
        let big = take(GRANULE);
        assert!(big.cap >= GRANULE);
        drop(pool); // joins its thread
    }

    /// The pages a pass will fill are resident before the copy, and no more.
    #[test]
    fn populating_ahead_faults_in_the_pages_to_fill() {
        let resident = |b: &PassBuf<u64>, pages: usize| -> usize {
            let mut v = vec![0u8; pages];
            // SAFETY: the buffer's own mapping, `pages` pages long.
            let r = unsafe { libc::mincore(b.ptr.as_ptr().cast(), pages * 4096, v.as_mut_ptr()) };
            assert_eq!(r, 0);
            v.iter().filter(|&&p| p & 1 != 0).count()
        };
        let mut b = PassBuf::<u64>::default();
        assert!(b.reserve_total(64 * 512));
        assert_eq!(resident(&b, 16), 0);
        b.populate_to(3 * 512 + 1);
        assert_eq!(resident(&b, 16), 4);
        b.extend_from_slice(&[7; 2048]);
        b.populate_to(8 * 512);
        assert_eq!(resident(&b, 16), 8);
        assert_eq!(b[2047], 7);
    }

    #[test]
    fn streaming_copies_keep_and_show_every_record_in_order() {
        #[derive(Clone, Copy, Debug, PartialEq)]
        #[repr(C)]
        struct Word(u64, u64);
        // A source that is not 16-byte aligned (the stores' side must be, the
        // loads' need not), copied in pieces of odd lengths, as a ring wraps.
        let words: Vec<u64> = (0..20_001u64).collect();
        // SAFETY: 10 000 `Word`s of initialized u64 pairs starting one u64 in;
        // `Word` is two u64s with their alignment.
        let source: &[Word] =
            unsafe { std::slice::from_raw_parts(words.as_ptr().add(1).cast(), 10_000) };
        let mut b = PassBuf::<Word>::default();
        assert!(b.reserve_total(source.len()));
        let mut seen = Vec::new();
        let mut see = |w: &Word, _: Option<&Word>| {
            seen.push(*w);
            None
        };
        b.extend_streaming(&source[..3], &mut see);
        b.extend_streaming(&source[3..9_999], &mut see);
        b.extend_streaming(&source[9_999..], &mut see);
        assert_eq!(b.len(), 10_000);
        assert_eq!(
            &seen[..],
            &b[..],
            "each record is shown as it is copied, in order"
        );
        for (i, w) in b.iter().enumerate() {
            assert_eq!(*w, Word(2 * i as u64 + 1, 2 * i as u64 + 2));
        }

        // Folding: a record whose first word is a multiple of 6 and the one after
        // it become one (their sum); every record is still shown, once, in order.
        let mut f = PassBuf::<Word>::default();
        assert!(f.reserve_total(source.len()));
        let mut seen = Vec::new();
        let mut fold = |a: &Word, next: Option<&Word>| {
            seen.push(*a);
            let b = next.filter(|_| a.0 % 6 == 1)?;
            seen.push(*b);
            Some(Word(a.0 + b.0, 0))
        };
        f.extend_streaming(&source[..5], &mut fold);
        f.extend_streaming(&source[5..], &mut fold);
        assert_eq!(&seen[..], source, "every record shown once, in order");
        let mut expected = Vec::new();
        let mut i = 0;
        while i < source.len() {
            if source[i].0 % 6 == 1 && i + 1 < source.len() && i + 1 != 5 {
                expected.push(Word(source[i].0 + source[i + 1].0, 0));
                i += 2;
            } else {
                expected.push(source[i]);
                i += 1;
            }
        }
        assert!(expected.len() < 7_000, "{}", expected.len());
        assert_eq!(&f[..], &expected[..]);
    }

    #[test]
    #[should_panic(expected = "beyond the reservation")]
    fn extending_past_the_reservation_is_refused() {
        let mut b = PassBuf::<u8>::default();
        b.extend_from_slice(&[1]);
    }
}
