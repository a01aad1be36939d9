// A counter in a `static mut` that threads update only under `parking_lot`'s
// locks (correct), or, with a `racy` argument, partly outside them (a data race).
// parking_lot inlines its uncontended operations (a `lock cmpxchg` or `lock xadd`
// on the lock's word, a load and test of the condvar's; `*_slow` out of line
// under contention): only a recorder that sees them orders the updates. The
// threads yield inside the sections, so some operations go the slow way.
//
//   (none) | racy       4 workers bump under a `Mutex` (racy: worker 3 without it)
//   rw | rw-racy        2 writers bump under `RwLock::write`, 2 readers read under
//                       `read` (rw-racy: reader 3 also bumps under `read`)
//   condvar | condvar-racy
//                       2 threads take 200 turns each through a `Mutex` and a
//                       `Condvar` (one notifies with `notify_one`, the other with
//                       `notify_all`), bumping outside the lock on their turn
//                       (condvar-racy: thread 2 also bumps before it waits for
//                       its turn)
//   try                 2 threads bump COUNTER under `Mutex::try_lock`, one bumps
//                       SHARED under `RwLock::try_write` and one reads it under
//                       `try_read`, 200 successes each, and one bumps COUNTER 20
//                       times under `try_lock_for` (200 us), retrying failures
//                       (main holds both locks for a moment first); prints the
//                       failed tries and timeouts
use parking_lot::{Condvar, Mutex, RwLock};

static LOCK: Mutex<()> = Mutex::new(());
static RW: RwLock<()> = RwLock::new(());
static TURN: Mutex<u32> = Mutex::new(0);
static TURNED: Condvar = Condvar::new();
static mut COUNTER: u64 = 0;
static mut SHARED: u64 = 0;

fn bump() {
    // SAFETY (of the program, not of ordo's test): every caller holds a lock or
    // its turn, except the racy thread on purpose.
    unsafe {
        let v = std::ptr::read_volatile(&raw const COUNTER);
        std::ptr::write_volatile(&raw mut COUNTER, v + 1);
    }
}

fn counter() -> u64 {
    // SAFETY: as in `bump`.
    unsafe { std::ptr::read_volatile(&raw const COUNTER) }
}

fn mutex(racy: bool) {
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
    println!("counter {}", counter());
}

fn rwlock(racy: bool) {
    let workers: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                let mut seen = 0;
                for i in 0..500 {
                    if t < 2 {
                        let _guard = RW.write();
                        bump();
                    } else {
                        let _guard = RW.read();
                        seen += counter();
                        if racy && t == 3 {
                            bump();
                        }
                    }
                    if i % 50 == 0 {
                        std::thread::yield_now();
                    }
                }
                seen
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    println!("counter {}", counter());
}

fn condvar(racy: bool) {
    let workers: Vec<_> = (0..2u32)
        .map(|t| {
            std::thread::spawn(move || {
                for _ in 0..200 {
                    if racy && t == 1 {
                        bump();
                    }
                    let mut turn = TURN.lock();
                    while *turn % 2 != t {
                        TURNED.wait(&mut turn);
                    }
                    drop(turn);
                    bump();
                    let mut turn = TURN.lock();
                    *turn += 1;
                    drop(turn);
                    if t == 0 {
                        TURNED.notify_one();
                    } else {
                        TURNED.notify_all();
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    println!("counter {}", counter());
}

fn tries() {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    static FAILED: AtomicU64 = AtomicU64::new(0);
    let held = LOCK.lock();
    let written = RW.write();
    let workers: Vec<_> = (0..5)
        .map(|t| {
            std::thread::spawn(move || {
                // The fifth takes the mutex 20 times with `try_lock_for`.
                let successes = if t == 4 { 20 } else { 200 };
                for _ in 0..successes {
                    loop {
                        let done = match t {
                            0 | 1 => LOCK.try_lock().map(|_guard| bump()).is_some(),
                            // SAFETY: under RW's write or read lock.
                            2 => RW
                                .try_write()
                                .map(|_guard| unsafe {
                                    let v = std::ptr::read_volatile(&raw const SHARED);
                                    std::ptr::write_volatile(&raw mut SHARED, v + 1);
                                })
                                .is_some(),
                            4 => LOCK
                                .try_lock_for(std::time::Duration::from_micros(200))
                                .map(|_guard| bump())
                                .is_some(),
                            _ => RW
                                .try_read()
                                .map(|_guard| unsafe { std::ptr::read_volatile(&raw const SHARED) })
                                .is_some(),
                        };
                        if done {
                            break;
                        }
                        FAILED.fetch_add(1, Relaxed);
                        std::thread::yield_now();
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(20));
    drop(held);
    drop(written);
    for w in workers {
        w.join().unwrap();
    }
    println!("counter {} after {} failed tries", counter(), FAILED.load(Relaxed));
}

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    match mode.as_str() {
        "" | "racy" => mutex(mode == "racy"),
        "rw" | "rw-racy" => rwlock(mode == "rw-racy"),
        "condvar" | "condvar-racy" => condvar(mode == "condvar-racy"),
        "try" => tries(),
        _ => {
            eprintln!("unknown mode {mode}");
            std::process::exit(2);
        }
    }
}
