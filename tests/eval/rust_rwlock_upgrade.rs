// Bug: a read-then-write "upgrade" on a std::sync::RwLock of a release Rust
// binary. Each registrar looks its key up under the read lock and, when missing,
// inserts it under the write lock; between the two another registrar inserts the
// same key.
// Shape: check-then-act on an rwlock (read section, then write section), the
// other thread's sections between them (Rust locks: no pthread call).
// Fails: exit status 3 when the key is registered twice.
use std::sync::RwLock;

static KEYS: RwLock<Vec<u32>> = RwLock::new(Vec::new());

fn register(key: u32) {
    let found = KEYS.read().unwrap().contains(&key);
    if !found {
        KEYS.write().unwrap().push(key); // no second lookup
    }
}

fn main() {
    // The second registrar starts 5 ms later: the two rarely overlap by
    // themselves.
    let registrars: Vec<_> = (0..2u64)
        .map(|i| {
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(5 * i));
                register(42);
            })
        })
        .collect();
    for r in registrars {
        r.join().unwrap();
    }
    let n = KEYS.read().unwrap().len();
    println!("{n} key(s)");
    if n != 1 {
        eprintln!("key registered {n} times");
        std::process::exit(3);
    }
}
