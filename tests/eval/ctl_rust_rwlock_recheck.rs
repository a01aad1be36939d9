// Control for rust_rwlock_upgrade: the insert looks the key up again under the
// write lock, so a registrar that lost the race inserts nothing.
use std::sync::RwLock;

static KEYS: RwLock<Vec<u32>> = RwLock::new(Vec::new());

fn register(key: u32) {
    let found = KEYS.read().unwrap().contains(&key);
    if !found {
        let mut keys = KEYS.write().unwrap();
        if !keys.contains(&key) {
            keys.push(key);
        }
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
        std::process::exit(3);
    }
}
