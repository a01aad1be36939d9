// Control for rust_deadlock: both transfers take CHECKING before SAVINGS,
// whichever way the money goes.
use std::sync::Mutex;

static CHECKING: Mutex<i64> = Mutex::new(100);
static SAVINGS: Mutex<i64> = Mutex::new(100);

fn transfer(to_savings: bool, amount: i64) {
    let mut checking = CHECKING.lock().unwrap();
    let mut work = 0u64;
    for i in 0..300u64 {
        work = std::hint::black_box(work + i);
    }
    let mut savings = SAVINGS.lock().unwrap();
    let moved = if to_savings { amount } else { -amount } + (work as i64 & 0);
    *checking -= moved;
    *savings += moved;
}

fn main() {
    let one = std::thread::spawn(|| transfer(true, 10));
    let two = std::thread::spawn(|| transfer(false, 20));
    one.join().unwrap();
    two.join().unwrap();
    let total = *CHECKING.lock().unwrap() + *SAVINGS.lock().unwrap();
    println!("total {total}");
}
