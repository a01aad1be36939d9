// Rust std::sync::Condvar: a producer hands 2000 items to two consumers through
// a Mutex<VecDeque> and notify_one, then ends them with notify_all. Every call
// of wait, notify_one and notify_all is counted by the program and printed. The
// producer pauses before it starts and every 100 items, so the consumers find the
// queue empty and wait: on a fast machine they could otherwise never have to.
use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};

static QUEUE: Mutex<(VecDeque<u64>, bool)> = Mutex::new((VecDeque::new(), false));
static READY: Condvar = Condvar::new();
const ITEMS: u64 = 2000;

fn main() {
    let consumers: Vec<_> = (0..2)
        .map(|_| {
            std::thread::spawn(|| {
                let (mut waits, mut got) = (0u64, 0u64);
                loop {
                    let mut q = QUEUE.lock().unwrap();
                    while q.0.is_empty() && !q.1 {
                        q = READY.wait(q).unwrap();
                        waits += 1;
                    }
                    match q.0.pop_front() {
                        Some(v) => got += v,
                        None => return (waits, got),
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(20));
    for i in 1..=ITEMS {
        QUEUE.lock().unwrap().0.push_back(i);
        READY.notify_one();
        if i % 100 == 0 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    QUEUE.lock().unwrap().1 = true;
    READY.notify_all();
    let (mut waits, mut sum) = (0, 0);
    for c in consumers {
        let (w, g) = c.join().unwrap();
        waits += w;
        sum += g;
    }
    println!("waits {waits}\nnotify_one {ITEMS}\nnotify_all 1");
    std::process::exit(if sum == ITEMS * (ITEMS + 1) / 2 { 0 } else { 1 });
}
