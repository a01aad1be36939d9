// Rust std::sync::Mutex under contention: std's mutex uses the futex syscall
// directly, so only its contended operations are visible (as futex_wait/futex_wake).
use std::sync::{Arc, Mutex};

fn main() {
    let counter = Arc::new(Mutex::new(0u64));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let counter = Arc::clone(&counter);
            std::thread::spawn(move || {
                for _ in 0..20_000 {
                    let mut guard = counter.lock().unwrap();
                    // Hold the lock long enough that the others give up spinning
                    // and sleep on the futex.
                    let mut x = *guard;
                    for i in 0..300 {
                        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
                    }
                    std::hint::black_box(x);
                    *guard += 1;
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let total = *counter.lock().unwrap();
    println!("mutex {:p}\ncounter {total}", &*counter as *const Mutex<u64>);
    std::process::exit(if total == 80_000 { 0 } else { 1 });
}
