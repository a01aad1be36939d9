// Control for rust_lost_update: each teller reads, computes and writes the
// balance in one `std::sync::Mutex` section. Correct under every order.
use std::sync::Mutex;

static BALANCE: Mutex<i64> = Mutex::new(100);

fn main() {
    let tellers: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(|| {
                let mut balance = BALANCE.lock().unwrap();
                let mut next = *balance;
                for i in 0..200 {
                    next = std::hint::black_box(next + i) - i;
                }
                *balance = next - 10;
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
