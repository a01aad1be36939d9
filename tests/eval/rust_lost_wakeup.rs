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
        // Setup: long enough that the waiter is waiting by then, even on a
        // loaded machine.
        std::thread::sleep(std::time::Duration::from_millis(5));
        let _started = START_LOCK.lock().unwrap();
        START.notify_one();
    });
    starter.join().unwrap();
    waiter.join().unwrap();
    println!("{} job done", *START_LOCK.lock().unwrap());
}
