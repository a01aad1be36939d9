// Three `static mut` values, each written by whichever thread first runs the
// initializer of a `std::sync::Once` (`call_once`), a `OnceLock` (`get_or_init`)
// or a `LazyLock` (its first dereference), and read by every thread after it
// (correct: the completion orders the write before every reader). With the
// argument `racy`, one thread also reads them before going through the Onces (a
// data race). std inlines the completion check: only a recorder that sees it
// orders the readers after the initializer.
use std::sync::{LazyLock, Once, OnceLock};

static INIT: Once = Once::new();
static CELL: OnceLock<u64> = OnceLock::new();
static LAZY: LazyLock<u64> = LazyLock::new(|| {
    unsafe { std::ptr::write_volatile(&raw mut LAZY_DATA, 3) };
    3
});
static mut ONCE_DATA: u64 = 0;
static mut CELL_DATA: u64 = 0;
static mut LAZY_DATA: u64 = 0;

fn read_all() -> u64 {
    // SAFETY (of the program, not of ordo's test): read after the Onces
    // completed, except by the racy thread on purpose.
    unsafe {
        std::ptr::read_volatile(&raw const ONCE_DATA)
            + std::ptr::read_volatile(&raw const CELL_DATA)
            + std::ptr::read_volatile(&raw const LAZY_DATA)
    }
}

fn main() {
    let racy = std::env::args().nth(1).as_deref() == Some("racy");
    let workers: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                let mut sum = 0;
                if racy && t == 3 {
                    sum += read_all();
                }
                for _ in 0..200 {
                    INIT.call_once(|| unsafe { std::ptr::write_volatile(&raw mut ONCE_DATA, 1) });
                    CELL.get_or_init(|| {
                        unsafe { std::ptr::write_volatile(&raw mut CELL_DATA, 2) };
                        2
                    });
                    sum += *LAZY;
                    sum += read_all();
                }
                sum
            })
        })
        .collect();
    let total: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    println!("counter {}", total.min(1) + read_all() - 1);
}
