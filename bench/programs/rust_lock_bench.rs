// The lock micro-benchmark in Rust (issue 26): THREADS threads × ITERS
// acquisitions of one std::sync::Mutex, each incrementing a counter — the same
// work as sync_bench's `lock` mode, with std's inlined futex mutex instead of
// pthread's. Prints what sync_bench prints:
//   span_ns N   the timed span (threads created to threads joined)
//   ops N       lock/unlock pairs done in it
//   start_ns N  CLOCK_MONOTONIC when the span began
//   end_ns N    CLOCK_MONOTONIC just before main returns
// Usage: rust_lock_bench lock THREADS ITERS
use std::sync::Mutex;

#[repr(C)]
struct Timespec {
    sec: i64,
    nsec: i64,
}

extern "C" {
    fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
}

fn now_ns() -> i64 {
    let mut ts = Timespec { sec: 0, nsec: 0 };
    // SAFETY: CLOCK_MONOTONIC (1) into a valid timespec.
    unsafe { clock_gettime(1, &mut ts) };
    ts.sec * 1_000_000_000 + ts.nsec
}

static COUNTER: Mutex<u64> = Mutex::new(0);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (threads, iters) = match args.get(1).map(String::as_str) {
        Some("lock") if args.len() == 4 => match (args[2].parse::<u64>(), args[3].parse::<u64>()) {
            (Ok(t), Ok(i)) if t > 0 => (t, i),
            _ => usage(),
        },
        _ => usage(),
    };
    let start = now_ns();
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            std::thread::spawn(move || {
                for _ in 0..iters {
                    *COUNTER.lock().unwrap() += 1;
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let span = now_ns() - start;
    let ops = threads * iters;
    let counter = *COUNTER.lock().unwrap();
    if counter != ops {
        eprintln!("rust_lock_bench: counter {counter}, expected {ops}");
        std::process::exit(1);
    }
    println!("span_ns {span}\nops {ops}\nstart_ns {start}\nend_ns {}", now_ns());
}

fn usage() -> ! {
    eprintln!("usage: rust_lock_bench lock THREADS ITERS");
    std::process::exit(2);
}
