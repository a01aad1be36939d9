// A counter in a `static mut` that 3 threads update only when `Mutex::try_lock`
// got them the lock (correct), or, with the argument `racy`, that one thread
// updates without it (a data race). `main` holds the lock until each worker has
// tried once (a failed try each), then lets go; each worker then tries until it
// gets the lock, 100 times (the racy one updates 100 times without it). std inlines `try_lock` (a `lock cmpxchg` and no slow
// path): only a recorder that sees it orders the updates.
use std::sync::Mutex;
use std::sync::Barrier;

static LOCK: Mutex<()> = Mutex::new(());
static mut COUNTER: u64 = 0;

fn bump() {
    // SAFETY (of the program, not of ordo's test): callers hold LOCK, except the
    // racy thread on purpose.
    unsafe {
        let v = std::ptr::read_volatile(&raw const COUNTER);
        std::ptr::write_volatile(&raw mut COUNTER, v + 1);
    }
}

#[inline(never)]
fn attempt() -> bool {
    match LOCK.try_lock() {
        Ok(_guard) => {
            bump();
            true
        }
        Err(_) => false,
    }
}

fn main() {
    let racy = std::env::args().nth(1).as_deref() == Some("racy");
    let tried = std::sync::Arc::new(Barrier::new(4));
    let held = LOCK.lock().unwrap();
    let workers: Vec<_> = (0..3u64)
        .map(|t| {
            let tried = tried.clone();
            std::thread::spawn(move || {
                // `main` holds the lock until every worker has tried once.
                let mut failed = u64::from(!attempt());
                tried.wait();
                for _ in 0..100 {
                    if racy && t == 2 {
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
