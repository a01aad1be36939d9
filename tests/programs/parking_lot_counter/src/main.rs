// A counter in a `static mut` that 4 threads update only while holding a
// `parking_lot::Mutex` (correct), or, with the argument `racy`, that one thread
// updates outside it (a data race). parking_lot inlines its uncontended lock and
// unlock (a `lock cmpxchg` on the lock's byte; `lock_slow`/`unlock_slow` out of
// line under contention): only a recorder that sees them orders the updates. The
// threads yield inside the section, so some acquisitions go the slow way.
use parking_lot::Mutex;

static LOCK: Mutex<()> = Mutex::new(());
static mut COUNTER: u64 = 0;

fn bump() {
    // SAFETY (of the program, not of ordo's test): every caller holds LOCK,
    // except the racy thread on purpose.
    unsafe {
        let v = std::ptr::read_volatile(&raw const COUNTER);
        std::ptr::write_volatile(&raw mut COUNTER, v + 1);
    }
}

fn main() {
    let racy = std::env::args().nth(1).as_deref() == Some("racy");
    let workers: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                for i in 0..500 {
                    if racy && t == 3 {
                        bump();
                    } else {
                        let _guard = LOCK.lock();
                        bump();
                        if i % 50 == 0 {
                            std::thread::yield_now();
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let _guard = LOCK.lock();
    println!("counter {}", unsafe { std::ptr::read_volatile(&raw const COUNTER) });
}
