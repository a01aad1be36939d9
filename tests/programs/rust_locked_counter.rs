// A counter in a `static mut` that 4 threads update only while holding a
// `std::sync::Mutex` (correct), or, with the argument `racy`, that one thread
// updates outside it (a data race). std's mutex inlines its uncontended path:
// only a recorder that sees those inlined instructions orders the accesses.
use std::sync::Mutex;

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
                for _ in 0..500 {
                    if racy && t == 3 {
                        bump();
                    } else {
                        let _guard = LOCK.lock().unwrap();
                        bump();
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let _guard = LOCK.lock().unwrap();
    println!("counter {}", unsafe { std::ptr::read_volatile(&raw const COUNTER) });
}
