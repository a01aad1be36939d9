// Control for rust_lost_wakeup: the starter sets the flag under the lock before
// it notifies, and the waiter waits in a `while` loop on the flag, so a
// notification sent before the wait is never needed.
use std::sync::{Condvar, Mutex};

static STARTED: Mutex<bool> = Mutex::new(false);
static START: Condvar = Condvar::new();

fn main() {
    let waiter = std::thread::spawn(|| {
        let mut started = STARTED.lock().unwrap();
        while !*started {
            started = START.wait(started).unwrap();
        }
    });
    let starter = std::thread::spawn(|| {
        std::thread::sleep(std::time::Duration::from_millis(5));
        *STARTED.lock().unwrap() = true;
        START.notify_one();
    });
    starter.join().unwrap();
    waiter.join().unwrap();
    println!("started");
}
