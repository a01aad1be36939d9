// Bug: a lost wakeup with std::sync::Condvar in a release Rust binary. The
// waiter waits for the start without a predicate; when the starter notifies
// before the waiter is waiting, the notification is lost.
// Shape: the starter's notify section before the waiter's wait (cond_signal
// ordered before cond_wait_begin), on std's futex condvar (no pthread call).
// Fails: hang (the waiter waits forever, main waits in join).
use std::sync::{Condvar, Mutex};

static START_LOCK: Mutex<u32> = Mutex::new(0);
static START: Condvar = Condvar::new();

fn main() {
    let waiter = std::thread::spawn(|| {
        let started = START_LOCK.lock().unwrap();
        let mut jobs = START.wait(started).unwrap(); // no predicate
        *jobs += 1;
    });
    let starter = std::thread::spawn(|| {
        let mut setup = 0u64;
        for i in 0..5000u64 {
            setup = std::hint::black_box(setup + i);
        }
        let _started = START_LOCK.lock().unwrap();
        START.notify_one();
        setup
    });
    starter.join().unwrap();
    waiter.join().unwrap();
    println!("{} job done", *START_LOCK.lock().unwrap());
}
