//! Writes the analysis benchmark's generated trace (used by `cargo xtask bench`):
//! `bench_trace PATH EVENTS THREADS`.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [path, events, threads] = args.as_slice() else {
        eprintln!("usage: bench_trace PATH EVENTS THREADS");
        std::process::exit(2);
    };
    let (Ok(events), Ok(threads)) = (events.parse::<u64>(), threads.parse::<u32>()) else {
        eprintln!("bench_trace: EVENTS and THREADS must be numbers");
        std::process::exit(2);
    };
    match ordo_analysis::synthetic::write_benchmark_trace(
        std::path::Path::new(path),
        events,
        threads,
    ) {
        Ok(written) => println!("{written}"),
        Err(e) => {
            eprintln!("bench_trace: {path}: {e}");
            std::process::exit(1);
        }
    }
}
