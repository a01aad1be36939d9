//! Generates a benchmark trace (if asked) and analyzes a trace file, printing timing
//! and the JSON stats: `cargo run --release -p ordo-analysis --example analyze_file -- TRACE [EVENTS THREADS]`.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = std::path::PathBuf::from(
        args.first()
            .expect("usage: analyze_file TRACE [EVENTS THREADS]"),
    );
    if args.len() >= 3 {
        let n: u64 = args[1].parse().expect("events");
        let t: u32 = args[2].parse().expect("threads");
        let start = std::time::Instant::now();
        let written = ordo_analysis::synthetic::write_benchmark_trace(&path, n, t).expect("write");
        eprintln!("wrote {written} events in {:?}", start.elapsed());
    }
    let start = std::time::Instant::now();
    let analysis = ordo_analysis::analyze_trace(&path).unwrap_or_else(|e| panic!("{e}"));
    let secs = start.elapsed().as_secs_f64();
    let stats = &analysis.to_json()["stats"];
    println!(
        "{} events in {secs:.3}s = {:.1} M events/s",
        stats["events"],
        stats["events"].as_f64().unwrap() / secs / 1e6
    );
    println!("{}", serde_json::to_string_pretty(stats).unwrap());
}
