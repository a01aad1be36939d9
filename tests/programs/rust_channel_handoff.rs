// Values handed from a worker to `main` through std's channels: unbounded
// (`mpsc::channel`, the `list` flavor) for a small and a large message type,
// bounded (`sync_channel(4)`, `array`) and rendezvous (`sync_channel(0)`, `zero`),
// so that every flavor and both ways std passes a channel to its out-of-line
// `send`/`recv` are met (a large message's `send` returns its result through
// memory, a `recv` often does). Each value is written before the send whose
// receive `main` reads it after: the send happens before the receive. With the
// argument `racy`, `main` also reads the large message's value before receiving
// it (a data race).
use std::sync::mpsc;

static mut SMALL: u64 = 0;
static mut BOUNDED: u64 = 0;
static mut BIG: u64 = 0;
static mut RENDEZVOUS: u64 = 0;

fn main() {
    let racy = std::env::args().nth(1).as_deref() == Some("racy");
    let (small_tx, small_rx) = mpsc::channel::<u8>();
    let (bounded_tx, bounded_rx) = mpsc::sync_channel::<usize>(4);
    let (big_tx, big_rx) = mpsc::channel::<[u64; 16]>();
    let (meet_tx, meet_rx) = mpsc::sync_channel::<usize>(0);
    let worker = std::thread::spawn(move || {
        unsafe { std::ptr::write_volatile(&raw mut SMALL, 7) };
        small_tx.send(1).unwrap();
        unsafe { std::ptr::write_volatile(&raw mut BOUNDED, 8) };
        bounded_tx.send(2).unwrap();
        unsafe { std::ptr::write_volatile(&raw mut BIG, 9) };
        big_tx.send([3; 16]).unwrap();
        unsafe { std::ptr::write_volatile(&raw mut RENDEZVOUS, 10) };
        meet_tx.send(4).unwrap();
    });
    let mut sum = u64::from(small_rx.recv().unwrap());
    sum += unsafe { std::ptr::read_volatile(&raw const SMALL) };
    sum += bounded_rx.recv().unwrap() as u64;
    sum += unsafe { std::ptr::read_volatile(&raw const BOUNDED) };
    if racy {
        // Before its message: 0 or 9, whichever the worker got to.
        sum += unsafe { std::ptr::read_volatile(&raw const BIG) } * 0;
    }
    sum += big_rx.recv().unwrap().iter().sum::<u64>();
    sum += unsafe { std::ptr::read_volatile(&raw const BIG) };
    sum += meet_rx.recv().unwrap() as u64;
    sum += unsafe { std::ptr::read_volatile(&raw const RENDEZVOUS) };
    worker.join().unwrap();
    // 1 + 7 + 2 + 8 + 48 + 9 + 4 + 10
    println!("counter {sum}");
}
