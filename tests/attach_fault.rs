//! Issue 27's fault test, a test binary of its own so that it runs alone: it
//! judges memcached's throughput before and after 100 attaches, which the end to
//! end suite's other tests, run in parallel, would make a measure of them.

#[allow(
    dead_code,
    reason = "the helpers shared with the end-to-end tests; this binary uses a few"
)]
#[macro_use]
mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{changed_regions, have_root, ordo, read_only_memory, scratch};

/// A free TCP port on the loopback.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// memcaslap's workload (its default: 64-byte keys, 1 KiB values, 10 % sets),
/// in a file of our own: without `-F` memcaslap writes `~/.memslap.cnf` on its
/// first run, and two first runs at once (the attached server's load and the
/// control's) read each other's half-written file ("Bad configuration file").
fn memcaslap_config() -> &'static Path {
    static CONFIG: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    CONFIG.get_or_init(|| {
        let path = scratch("memcaslap-config").join("memslap.cnf");
        std::fs::write(
            &path,
            "key\n64 64 1\nvalue\n1024 1024 1\ncmd\n0 0.1\n1 0.9\n",
        )
        .unwrap();
        path
    })
}

/// memcaslap's throughput against `port` for `seconds`, and whatever in its
/// output reports an error.
fn load(port: u16, seconds: u32) -> (f64, Vec<String>) {
    let t = format!("{seconds}s");
    let out = Command::new("memcaslap")
        .arg("-F")
        .arg(memcaslap_config())
        .args([
            "-s",
            &format!("127.0.0.1:{port}"),
            "-T",
            "2",
            "-c",
            "16",
            "-t",
            &t,
        ])
        .stdin(Stdio::null())
        .output()
        .expect("run memcaslap");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let tps = text
        .lines()
        .rfind(|l| l.contains("TPS:"))
        .and_then(|l| {
            l.split("TPS:")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no throughput from memcaslap: {text}"));
    let errors = text
        .lines()
        .filter(|l| {
            let l = l.to_lowercase();
            l.contains("error") || l.contains("fail") || l.contains("unexpected")
        })
        .map(str::to_string)
        .collect();
    (tps, errors)
}

/// CPU time process `pid` has used (all its threads), in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // After the command name (in parentheses, which may hold spaces): fields 14
    // and 15 of stat(5), utime and stime, are the 12th and 13th.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// A memcached (`-t 2`, loopback) listening on a free port, with room for everything the
/// test's loads store (at the default 64 MiB a fast machine fills it, and memcached
/// answers `SERVER_ERROR out of memory storing object`, its own limit, not a fault).
fn memcached() -> (Child, u16) {
    let port = free_port();
    let server = Command::new("/usr/bin/memcached")
        .args([
            "-t",
            "2",
            "-m",
            "1024",
            "-U",
            "0",
            "-l",
            "127.0.0.1",
            "-u",
            "root",
            "-p",
        ])
        .arg(port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "memcached never listened"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (server, port)
}

/// How the attached memcached (`servers[0]`) serves against the control
/// (`servers[1]`), `rounds` times: each round loads both at once for 2 s (so
/// both see the machine alike) and gives the ratio of their operations per
/// second of CPU they used. CPU time, because operations per wall second would
/// mostly say how busy the machine keeps the CPUs; a redirected GOT or a
/// recording agent would cost CPU per operation. Loaded one after the other, two
/// identical servers differed by ±15 % a round here; loaded together, by ±6 %.
fn served_against_control(servers: [(u32, u16); 2], rounds: usize) -> Vec<f64> {
    // SAFETY: no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (0..rounds)
        .map(|_| {
            let before = servers.map(|(pid, _)| cpu_ticks(pid));
            let loads = servers.map(|(_, port)| std::thread::spawn(move || load(port, 2)));
            let [attached, control] = loads.map(|l| l.join().unwrap());
            let used = [0, 1].map(|i| (cpu_ticks(servers[i].0) - before[i]).max(1) as f64 / hz);
            assert_eq!(attached.1, Vec::<String>::new());
            assert_eq!(control.1, Vec::<String>::new());
            (attached.0 / used[0]) / (control.0 / used[1])
        })
        .collect()
}

/// The median of `ratios`.
fn median(mut ratios: Vec<f64>) -> f64 {
    ratios.sort_by(f64::total_cmp);
    ratios[ratios.len() / 2]
}

/// Issue 27's fault test: 100 attaches and detaches to memcached while memcaslap
/// loads it — memcached never crashes, memcaslap reports no error, and after the
/// last detach memcached serves at ≥ 95 % of its throughput before the first —
/// per second of CPU it uses, relative to a memcached never attached, loaded alike
/// and together with it ([`served_against_control`]) — its code and GOT as they were.
#[test]
fn attaching_and_detaching_100_times_to_a_loaded_memcached() {
    if !have_root("attaching_and_detaching_100_times_to_a_loaded_memcached") {
        return;
    }
    if Command::new("memcaslap").arg("--help").output().is_err()
        || !Path::new("/usr/bin/memcached").exists()
    {
        // `cargo xtask test` installs both (xtask/src/setup.rs).
        panic!("memcached and memcaslap (libmemcached-tools) are needed");
    }
    let dir = scratch("attach_in_process_memcached");
    let (mut server, port) = memcached();
    // Never attached: what the machine's load does to a memcached meanwhile.
    let (control, control_port) = memcached();
    let pid = server.id();
    let servers = [(pid, port), (control.id(), control_port)];
    let code_and_got = read_only_memory(pid);
    let before = median(served_against_control(servers, 9));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Both servers are loaded alike meanwhile, so that what the load leaves in
    // them (items, slabs, connections) does not tell them apart afterwards.
    let loading = [port, control_port].map(|port| {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut errors = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                errors.extend(load(port, 2).1);
            }
            errors
        })
    });
    let trace = dir.join("t.ordo");
    let mut in_process = 0;
    for i in 0..100 {
        let output = Command::new(ordo())
            .args(["record", "-v", "--force", "--pid", &pid.to_string()])
            .args(["--duration", "0.05", "-o"])
            .arg(&trace)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "attach {i}: {stderr}");
        in_process += stderr.contains("GOT slots restored") as usize;
        assert!(
            server.try_wait().unwrap().is_none(),
            "memcached died at attach {i}"
        );
    }
    assert_eq!(in_process, 100);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for loader in loading {
        assert_eq!(loader.join().unwrap(), Vec::<String>::new());
    }
    let mut after_rounds = served_against_control(servers, 9);
    let mut after = median(after_rounds.clone());
    if after < 0.95 * before {
        // Nine rounds' medians of two identical servers still differ by a few
        // per cent now and then: a real loss stays when the rounds double.
        after_rounds.extend(served_against_control(servers, 9));
        after = median(after_rounds);
    }
    eprintln!(
        "memcached's ops per CPU second against a control's, loaded together (median of 9 or 18 rounds): {before:.3}× before the first attach, {after:.3}× after the last detach"
    );
    assert!(
        after >= 0.95 * before,
        "after the last detach memcached serves {after:.3}× the control's ops per CPU second, before the first {before:.3}×"
    );
    assert_eq!(
        changed_regions(&code_and_got, &read_only_memory(pid)),
        Vec::<String>::new()
    );
    assert!(
        server.try_wait().unwrap().is_none(),
        "memcached still serving"
    );
    for mut m in [server, control] {
        let _ = m.kill();
        let _ = m.wait();
    }
}
