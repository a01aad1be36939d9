// A counter in a `static mut` that 2 threads update only when
// `RwLock::try_write` got them the write lock, and 2 threads read only when
// `RwLock::try_read` got them a read lock (correct), or, with the argument
// `racy`, that one updater updates without it (a data race). `main` holds the
// write lock until each worker has tried once (a failed try each), then lets go;
// each worker then tries until it gets the lock, 100 times (the racy one updates
// 100 times without it). std inlines `try_read` and `try_write` (a loop of a
// check and a `lock cmpxchg`, no slow path): only a recorder that sees them
// orders the accesses.
use std::sync::{Barrier, RwLock};

static LOCK: RwLock<()> = RwLock::new(());
static mut COUNTER: u64 = 0;

fn bump() {
    // SAFETY (of the program, not of ordo's test): callers hold LOCK for writing,
    // except the racy thread on purpose.
    unsafe {
        let v = std::ptr::read_volatile(&raw const COUNTER);
        std::ptr::write_volatile(&raw mut COUNTER, v + 1);
    }
}

#[inline(never)]
fn attempt_write() -> bool {
    match LOCK.try_write() {
        Ok(_guard) => {
            bump();
            true
        }
        Err(_) => false,
    }
}

#[inline(never)]
fn attempt_read(seen: &mut u64) -> bool {
    match LOCK.try_read() {
        Ok(_guard) => {
            // SAFETY: as in `bump`, under a read lock.
            *seen = (*seen).max(unsafe { std::ptr::read_volatile(&raw const COUNTER) });
            true
        }
        Err(_) => false,
    }
}

fn main() {
    let racy = std::env::args().nth(1).as_deref() == Some("racy");
    let tried = std::sync::Arc::new(Barrier::new(5));
    let held = LOCK.write().unwrap();
    let workers: Vec<_> = (0..4u64)
        .map(|t| {
            let tried = tried.clone();
            std::thread::spawn(move || {
                let mut seen = 0;
                let reader = t >= 2;
                let mut attempt = || {
                    if reader {
                        attempt_read(&mut seen)
                    } else {
                        attempt_write()
                    }
                };
                // `main` holds the lock until every worker has tried once.
                let mut failed = u64::from(!attempt());
                tried.wait();
                for _ in 0..100 {
                    if racy && t == 1 {
                        bump();
                        continue;
                    }
                    while !attempt() {
                        failed += 1;
                        std::thread::yield_now();
                    }
                }
                failed
            })
        })
        .collect();
    tried.wait();
    drop(held);
    let failed: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    let counter = unsafe { std::ptr::read_volatile(&raw const COUNTER) };
    println!("counter {counter} after {failed} failed tries");
}
