//! Writes the analysis benchmark's generated traces (used by `cargo xtask bench`):
//! `bench_trace PATH EVENTS THREADS` (the mixed trace),
//! `bench_trace --stripes PATH EVENTS STRIPES` (one thread holding many locks),
//! `bench_trace --short-threads PATH THREADS` (many short-lived threads, joined),
//! `bench_trace --detached-threads PATH THREADS` (many short-lived threads, never joined).

use std::path::Path;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let number = |s: &str| -> u64 {
        s.parse().unwrap_or_else(|_| {
            eprintln!("bench_trace: {s:?} is not a number");
            std::process::exit(2)
        })
    };
    let (path, written) = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["--stripes", path, events, stripes] => (
            path,
            ordo_analysis::synthetic::write_striped_resize_trace(
                Path::new(path),
                number(events),
                number(stripes) as u32,
            ),
        ),
        ["--short-threads", path, threads] => (
            path,
            ordo_analysis::synthetic::write_short_threads_trace(
                Path::new(path),
                number(threads) as u32,
            ),
        ),
        ["--detached-threads", path, threads] => (
            path,
            ordo_analysis::synthetic::write_detached_threads_trace(
                Path::new(path),
                number(threads) as u32,
            ),
        ),
        [path, events, threads] => (
            path,
            ordo_analysis::synthetic::write_benchmark_trace(
                Path::new(path),
                number(events),
                number(threads) as u32,
            ),
        ),
        _ => {
            eprintln!("usage: bench_trace [--stripes PATH EVENTS STRIPES | --short-threads PATH THREADS | --detached-threads PATH THREADS | PATH EVENTS THREADS]");
            std::process::exit(2);
        }
    };
    match written {
        Ok(written) => println!("{written}"),
        Err(e) => {
            eprintln!("bench_trace: {path}: {e}");
            std::process::exit(1);
        }
    }
}
