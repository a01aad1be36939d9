// A value handed from `main` to a worker through `Thread::unpark`/`thread::park`:
// `main` writes it and unparks the worker while the worker still sleeps, so the
// worker's `park` takes the token at once (no futex wait, nothing for the kernel
// to see) and the worker reads the value after it. The unpark happens before the
// park it ends. (A `park` may also return spuriously; this program relies on the
// token, as a test of the order it gives.) With the argument `racy`, the worker
// also reads the value before parking (a data race).
use std::time::Duration;

static mut VALUE: u64 = 0;

fn main() {
    let racy = std::env::args().nth(1).as_deref() == Some("racy");
    let worker = std::thread::spawn(move || {
        let mut seen = 0;
        if racy {
            seen += unsafe { std::ptr::read_volatile(&raw const VALUE) };
        }
        // `main` unparks meanwhile: the token is there when `park` looks.
        std::thread::sleep(Duration::from_millis(30));
        std::thread::park();
        seen + unsafe { std::ptr::read_volatile(&raw const VALUE) }
    });
    unsafe { std::ptr::write_volatile(&raw mut VALUE, 7) };
    worker.thread().unpark();
    let seen = worker.join().unwrap();
    println!("counter {}", seen.min(7));
}
