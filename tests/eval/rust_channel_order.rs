// Bug: a result announced on a std channel before it is stored. The worker sends
// "done" and then stores its result; `main`, woken by the message, reads the
// result. Usually the store lands first (`main` needs a wake-up to run), so the
// bug is rare in a plain run.
// Shape: `main`'s read of the result between the worker's send and its store (a
// plain read ordered before a plain write that the channel does not order).
// Fails: exit status 3 (`main` read the stale 0).
use std::sync::mpsc;

static mut RESULT: u64 = 0;

fn main() {
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let worker = std::thread::spawn(move || {
        let result = std::hint::black_box(6u64) * 7;
        done_tx.send(()).unwrap();
        unsafe { std::ptr::write_volatile(&raw mut RESULT, result) };
    });
    done_rx.recv().unwrap();
    // Logging the completion (and letting the worker finish if the wake-up put
    // `main` on its CPU): the worker's store usually lands meanwhile.
    std::thread::yield_now();
    let mut log = 0u64;
    for i in 0..20_000u64 {
        log = std::hint::black_box(log.wrapping_add(i));
    }
    let result = unsafe { std::ptr::read_volatile(&raw const RESULT) };
    worker.join().unwrap();
    if result != 42 {
        eprintln!("main: read result {result} before the worker stored it");
        std::process::exit(3);
    }
    println!("result {result} (log {})", log % 10);
}
