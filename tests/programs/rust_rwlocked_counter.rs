// A counter in a `static mut` that 2 threads increment only under a
// `std::sync::RwLock`'s write lock while 2 others read it under its read lock
// (correct), or, with the argument `racy`, that one reader reads without the lock
// (a data race). std's RwLock inlines its uncontended paths.
use std::sync::RwLock;

static LOCK: RwLock<()> = RwLock::new(());
static mut COUNTER: u64 = 0;

fn main() {
    let racy = std::env::args().nth(1).as_deref() == Some("racy");
    let workers: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                let mut seen = 0u64;
                for _ in 0..500 {
                    // SAFETY (of the program, not of ordo's test): every access holds
                    // LOCK as it must, except the racy reader's on purpose.
                    unsafe {
                        if t < 2 {
                            let _w = LOCK.write().unwrap();
                            let v = std::ptr::read_volatile(&raw const COUNTER);
                            std::ptr::write_volatile(&raw mut COUNTER, v + 1);
                        } else if racy && t == 3 {
                            seen += std::ptr::read_volatile(&raw const COUNTER);
                        } else {
                            let _r = LOCK.read().unwrap();
                            seen += std::ptr::read_volatile(&raw const COUNTER);
                        }
                    }
                }
                std::hint::black_box(seen);
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let _r = LOCK.read().unwrap();
    println!("counter {}", unsafe { std::ptr::read_volatile(&raw const COUNTER) });
}
