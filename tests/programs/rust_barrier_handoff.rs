// A worker writes a `static mut` and meets main at a `std::sync::Barrier`; main
// reads it after the barrier (correct), or, with the argument `racy`, the worker
// writes it after the barrier instead (a data race). std's Barrier is a Mutex
// and a Condvar: only a recorder that sees those orders the accesses.
use std::sync::Barrier;

static BARRIER: Barrier = Barrier::new(2);
static mut DATA: u64 = 0;

fn main() {
    let racy = std::env::args().nth(1).as_deref() == Some("racy");
    let worker = std::thread::spawn(move || {
        // SAFETY (of the program, not of ordo's test): the barrier orders this
        // write before main's read, except in the racy variant on purpose.
        unsafe {
            if !racy {
                std::ptr::write_volatile(&raw mut DATA, 5);
            }
            BARRIER.wait();
            if racy {
                std::ptr::write_volatile(&raw mut DATA, 5);
            }
        }
    });
    BARRIER.wait();
    let seen = unsafe { std::ptr::read_volatile(&raw const DATA) };
    worker.join().unwrap();
    println!("counter {seen}");
}
