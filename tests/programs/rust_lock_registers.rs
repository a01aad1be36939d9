// Values kept in registers across inlined std::sync::Mutex operations: the
// floating-point accumulators live in xmm registers and the integer ones in
// general registers around each lock and unlock (nothing was called there in
// the original code), so a recorder that reaches those operations through
// trampolines must hand every register back as it found it. Prints the results:
// a recorded run must print what a native run prints.
use std::sync::Mutex;

static SHARED: Mutex<u64> = Mutex::new(0);

fn work(seed: u64) -> (f64, f64, u64, u64) {
    let (mut a, mut b) = (seed as f64 * 0.25, 1.0f64 + seed as f64);
    let (mut x, mut y) = (seed.wrapping_mul(0x9e37_79b9_7f4a_7c15), seed ^ 0xdead_beef);
    for i in 0..20_000u64 {
        a += (i as f64) * 0.5;
        b = b * 1.000_000_1 + 0.25;
        x = x.rotate_left(7) ^ i;
        y = y.wrapping_add(x);
        {
            let mut g = SHARED.lock().unwrap();
            *g = g.wrapping_add(i ^ seed);
        }
        a -= (i as f64) * 0.25;
        y ^= i;
    }
    (std::hint::black_box(a), b, x, y)
}

fn main() {
    let threads: Vec<_> = (1..=3u64).map(|s| std::thread::spawn(move || work(s))).collect();
    let mut out = Vec::new();
    for t in threads {
        out.push(t.join().unwrap());
    }
    for (a, b, x, y) in out {
        println!("{a:.6} {b:.6} {x:x} {y:x}");
    }
    println!("shared {:x}", *SHARED.lock().unwrap());
}
