//! A Rust program whose statics a watch finds by source name: `COUNTER` (or
//! `watch_rust::COUNTER`) and `stats::HITS`. Usage: watch_rust [THREADS] [ROUNDS].
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

static COUNTER: AtomicU64 = AtomicU64::new(0);

mod stats {
    use std::sync::atomic::AtomicU32;
    pub static HITS: AtomicU32 = AtomicU32::new(0);
}

#[inline(never)]
fn bump(n: u64) -> u64 {
    COUNTER.fetch_add(n, Ordering::SeqCst)
}

#[inline(never)]
fn hit(hits: &AtomicU32) {
    hits.fetch_add(1, Ordering::Relaxed);
}

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u64>().unwrap_or(0));
    let threads = args.next().filter(|n| *n > 0).unwrap_or(2);
    let rounds = args.next().filter(|n| *n > 0).unwrap_or(100);
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            std::thread::spawn(move || {
                for _ in 0..rounds {
                    bump(1);
                    hit(&stats::HITS);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    println!("counter {} hits {}", COUNTER.load(Ordering::SeqCst), stats::HITS.load(Ordering::SeqCst));
}
