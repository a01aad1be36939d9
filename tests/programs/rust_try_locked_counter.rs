// A counter in a `static mut` that 3 threads update only when `Mutex::try_lock`
// got them the lock (correct), or, with the argument `racy`, that one thread
// updates without it (a data race). `main` holds the lock while each worker
// tries once (a failed try), then lets go; the workers then take turns, 100
// successful tries each. std inlines `try_lock` (a `lock cmpxchg` and no slow
// path): only a recorder that sees it orders the updates.
use std::sync::Mutex;
use std::time::Duration;

static LOCK: Mutex<()> = Mutex::new(());
static mut COUNTER: u64 = 0;

fn bump() {
    // SAFETY (of the program, not of ordo's test): callers hold LOCK, except the
    // racy thread on purpose.
    unsafe {
        let v = std::ptr::read_volatile(&raw const COUNTER);
        std::ptr::write_volatile(&raw mut COUNTER, v + 1);
    }
}

#[inline(never)]
fn attempt() -> bool {
    match LOCK.try_lock() {
        Ok(_guard) => {
            bump();
            true
        }
        Err(_) => false,
    }
}

fn main() {
    let racy = std::env::args().nth(1).as_deref() == Some("racy");
    let held = LOCK.lock().unwrap();
    let workers: Vec<_> = (0..3u64)
        .map(|t| {
            std::thread::spawn(move || {
                let failed = u64::from(!attempt());
                // After `main` let go, one worker after the other.
                std::thread::sleep(Duration::from_millis(40 + 15 * t));
                let mut got = 0;
                for _ in 0..100 {
                    if racy && t == 2 {
                        bump();
                        got += 1;
                    } else if attempt() {
                        got += 1;
                    }
                }
                (failed, got)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(20));
    drop(held);
    let (failed, got) = workers
        .into_iter()
        .map(|w| w.join().unwrap())
        .fold((0, 0), |(f, g), (a, b)| (f + a, g + b));
    let counter = unsafe { std::ptr::read_volatile(&raw const COUNTER) };
    println!("failed tries {failed}");
    println!("counter {counter} of {got}");
}
