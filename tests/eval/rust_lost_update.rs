// Bug: a lost update between two `std::sync::Mutex` sections of a release Rust
// binary. Each teller reads the balance under the lock, computes, and writes it
// under the lock again; the other teller's whole withdrawal between the two loses
// one debit. std's mutex inlines its uncontended path (no pthread call).
// Shape: a check-then-act split by another thread's sections (Rust locks).
// Fails: exit status 3.
use std::sync::Mutex;

static BALANCE: Mutex<i64> = Mutex::new(100);

fn main() {
    let tellers: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(|| {
                let seen = *BALANCE.lock().unwrap();
                let mut next = seen;
                for i in 0..200 {
                    next = std::hint::black_box(next + i) - i;
                }
                *BALANCE.lock().unwrap() = next - 10;
            })
        })
        .collect();
    for t in tellers {
        t.join().unwrap();
    }
    let balance = *BALANCE.lock().unwrap();
    println!("balance {balance}");
    if balance != 80 {
        eprintln!("lost update: balance {balance}");
        std::process::exit(3);
    }
}
