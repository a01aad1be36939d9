// Bug: a lock-order deadlock between two std::sync::Mutex of a release Rust
// binary: one transfer locks FROM then TO, the other TO then FROM.
// Shape: lock-order inversion, 2 threads (Rust locks: no pthread call).
// Fails: deadlock.
use std::sync::Mutex;

static CHECKING: Mutex<i64> = Mutex::new(100);
static SAVINGS: Mutex<i64> = Mutex::new(100);

fn transfer(from: &Mutex<i64>, to: &Mutex<i64>, amount: i64) {
    let mut a = from.lock().unwrap();
    let mut work = 0u64;
    for i in 0..300u64 {
        work = std::hint::black_box(work + i);
    }
    let mut b = to.lock().unwrap();
    *a -= amount;
    *b += amount + (work as i64 & 0);
}

fn main() {
    let one = std::thread::spawn(|| transfer(&CHECKING, &SAVINGS, 10));
    let two = std::thread::spawn(|| transfer(&SAVINGS, &CHECKING, 20));
    one.join().unwrap();
    two.join().unwrap();
    let total = *CHECKING.lock().unwrap() + *SAVINGS.lock().unwrap();
    println!("total {total}");
}
