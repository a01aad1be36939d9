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

/// Reservations are made in multiples of this.
const GRANULE: usize = 64 << 10;

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

/// The room [`PassBuf::append_streaming`] lends a copier: records pushed here
/// are stored one after another, with non-temporal stores where they are whole
/// 16-byte words.
pub(crate) struct StreamOut<T> {
    at: *mut T,
    room: usize,
    written: usize,
}

/// No room: what a copier holds while it lends its room on.
impl<T> Default for StreamOut<T> {
    fn default() -> Self {
        StreamOut {
            at: std::ptr::null_mut(),
            room: 0,
            written: 0,
        }
    }
}

impl<T: Copy> StreamOut<T> {
    /// Whether records are stored with non-temporal stores: whole 16-byte words
    /// (the buffer's mapping is page-aligned, so every record is 16-byte aligned).
    const STREAMING: bool =
        cfg!(target_arch = "x86_64") && std::mem::size_of::<T>().is_multiple_of(16);

    /// Records that may still be pushed.
    #[inline(always)]
    pub(crate) fn room_left(&self) -> usize {
        self.room - self.written
    }

    /// Stores `record` after the ones pushed before, without a check of its
    /// own: a copier checks its whole output against [`StreamOut::room_left`]
    /// once, before its loop.
    ///
    /// # Safety
    /// Fewer than [`StreamOut::room_left`] records were pushed since that check.
    #[inline(always)]
    pub(crate) unsafe fn push_unchecked(&mut self, record: T) {
        // SAFETY: below the room (the caller's contract), which was checked
        // against the reservation (`append_streaming`), so in bounds.
        let to = unsafe { self.at.add(self.written) };
        #[cfg(target_arch = "x86_64")]
        if Self::STREAMING {
            use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
            // SAFETY: as above; `to` is 16-byte aligned (a page-aligned mapping
            // of records a multiple of 16 bytes long); SSE2 is part of x86_64.
            unsafe {
                let to = to.cast::<__m128i>();
                let from = (&record as *const T).cast::<__m128i>();
                for w in 0..std::mem::size_of::<T>() / 16 {
                    _mm_stream_si128(to.add(w), _mm_loadu_si128(from.add(w)));
                }
            }
            self.written += 1;
            return;
        }
        // SAFETY: as above; T is Copy.
        unsafe { to.write(record) };
        self.written += 1;
    }
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

    /// Appends the records `copy` pushes, at most `most` of them, with
    /// non-temporal stores where the records are whole 16-byte words: nothing
    /// reads a pass until the converter, usually seconds later, so its lines
    /// need not take cache room from the program while the drain fills it (the
    /// stores go to memory through write-combining buffers, and the `sfence` at
    /// the end orders them before the pass is handed on). Whatever the copier
    /// needs from the records it learns from its source as it copies, because
    /// reading the copy back would fetch each line from memory again.
    ///
    /// The copier gets the room as a [`StreamOut`] of its own, in its frame, so
    /// that its loop keeps the position in a register: the length behind `self`
    /// was read and written once a record when the loop stored through the
    /// buffer's pointer, which the compiler could not tell from `self.len`.
    #[inline(always)]
    pub(crate) fn append_streaming(&mut self, most: usize, copy: impl FnOnce(&mut StreamOut<T>)) {
        self.check_room(most);
        // Streaming stores need 16-byte alignment: every reservation is a
        // mapping of its own, page-aligned (checked once a copy, not a record).
        assert!(
            !StreamOut::<T>::STREAMING || (self.ptr.as_ptr() as usize).is_multiple_of(16),
            "PassBuf: a streaming copy into an unaligned buffer"
        );
        let mut out = StreamOut {
            // SAFETY: `len` is within the reservation.
            at: unsafe { self.ptr.as_ptr().add(self.len) },
            room: most,
            written: 0,
        };
        copy(&mut out);
        #[cfg(target_arch = "x86_64")]
        if StreamOut::<T>::STREAMING {
            // SAFETY: SSE2 is part of x86_64.
            unsafe { std::arch::x86_64::_mm_sfence() };
        }
        self.len += out.written;
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
    fn streaming_copies_keep_every_record_in_order() {
        #[derive(Clone, Copy, Debug, PartialEq)]
        #[repr(C)]
        struct Word(u64, u64);
        // Appended in pieces of odd lengths, as a ring wraps, each piece given
        // more room than it uses (a copier that folds pushes fewer).
        let source: Vec<Word> = (0..10_000u64).map(|i| Word(2 * i + 1, 2 * i + 2)).collect();
        let mut b = PassBuf::<Word>::default();
        assert!(b.reserve_total(source.len() + 10));
        for piece in [&source[..3], &source[3..9_999], &source[9_999..]] {
            b.append_streaming(piece.len() + 3, |out| {
                assert!(out.room_left() >= piece.len());
                for &w in piece {
                    // SAFETY: within the room checked above.
                    unsafe { out.push_unchecked(w) };
                }
            });
        }
        assert_eq!(b.len(), 10_000);
        assert_eq!(&b[..], &source[..]);
        // A copier that pushes fewer than its room leaves the rest unclaimed.
        // SAFETY: one record in a room of 10.
        b.append_streaming(10, |out| unsafe { out.push_unchecked(Word(7, 7)) });
        assert_eq!(b.len(), 10_001);
        assert_eq!(b[10_000], Word(7, 7));
    }

    #[test]
    #[should_panic(expected = "beyond the reservation")]
    fn a_copier_gets_no_room_past_the_reservation() {
        let mut b = PassBuf::<[u64; 2]>::default();
        assert!(b.reserve_total(100));
        b.append_streaming(5_000, |_| {});
    }

    #[test]
    #[should_panic(expected = "beyond the reservation")]
    fn extending_past_the_reservation_is_refused() {
        let mut b = PassBuf::<u8>::default();
        b.extend_from_slice(&[1]);
    }
}
