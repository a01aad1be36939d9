//! `ordo record` when things go wrong around it: a disk that fills up while
//! recording, thread ids the kernel hands out again, signals and options that must
//! not be silently ignored. Real recordings of real programs on the real kernel.

use crate::common;

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

on_both_paths!(
    a_full_disk_stops_the_writing_not_the_program,
    a_reused_thread_id_is_a_new_thread,
    a_script_whose_work_runs_in_children_is_warned_about
);

/// A tmpfs of `size` mounted at `dir` while the value lives.
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn mount(dir: &Path, size: &str) -> SmallDisk {
        std::fs::create_dir_all(dir).unwrap();
        let status = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir)
            .status()
            .expect("run mount");
        assert!(
            status.success(),
            "mount a {size} tmpfs at {}",
            dir.display()
        );
        SmallDisk(dir.to_path_buf())
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// How long process `pid` has been running (from its start time in
/// `/proc/PID/stat`, in clock ticks since boot, against `/proc/uptime`).
fn running_for(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may hold spaces): state is field 3,
    // starttime field 22.
    let after_comm = &stat[stat.rfind(')').unwrap() + 2..];
    let start_ticks: f64 = after_comm.split(' ').nth(19).unwrap().parse().unwrap();
    // SAFETY: sysconf has no preconditions.
    let ticks_per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let uptime: f64 = std::fs::read_to_string("/proc/uptime")
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    Duration::from_secs_f64((uptime - start_ticks / ticks_per_second).max(0.0))
}

/// Pid of `parent`'s child named `comm`, if it runs.
fn child_named(parent: u32, comm: &str) -> Option<u32> {
    let children =
        std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children")).ok()?;
    children
        .split_whitespace()
        .filter_map(|p| p.parse::<u32>().ok())
        .find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == comm)
        })
}

fn stats(trace: &Path, salvage: bool) -> Value {
    let mut args = vec!["dump", "--stats", "--json"];
    if salvage {
        args.push("--salvage");
    }
    args.push(trace.to_str().unwrap());
    let out = run_ordo(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The trace lives on a 256 KiB tmpfs that a 6-second program taking a lock
/// 100 000 times a second fills within a fraction of its run (about 3 bytes an
/// event): the recorder says so as soon as a write fails, in one line naming the
/// file, while the program keeps running to its normal end; `ordo record` exits 74
/// with the program's own status in the summary, and the trace holds its intact
/// chunks for `analyze --salvage` and `dump --salvage`.
fn a_full_disk_stops_the_writing_not_the_program(probes: &str) {
    if !have_root(&format!(
        "a_full_disk_stops_the_writing_not_the_program ({probes})"
    )) {
        return;
    }
    full_disk(probes, &format!("full-disk-{probes}"));
}

/// The same on a machine whose every CPU is busy (a niced spinner per CPU), where
/// the in-process recording defers its conversion until the program ends: the
/// space running out must still make it convert, and fail, while the program runs.
#[test]
fn a_full_disk_is_said_while_the_program_runs_on_a_machine_with_no_spare_cpu() {
    if !have_root("a_full_disk_is_said_while_the_program_runs_on_a_machine_with_no_spare_cpu") {
        return;
    }
    let _busy = BusyMachine::start();
    full_disk("inproc", "full-disk-busy");
}

/// A spinner at the lowest priority on every CPU while the value lives: no CPU
/// is idle, so none is spare to a recording, yet everything else still runs.
struct BusyMachine(Vec<std::process::Child>);

impl BusyMachine {
    fn start() -> BusyMachine {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        BusyMachine(
            (0..cpus)
                .map(|_| {
                    Command::new("nice")
                        .args(["-n", "19", "sh", "-c", "while :; do :; done"])
                        .spawn()
                        .expect("start a spinner")
                })
                .collect(),
        )
    }
}

impl Drop for BusyMachine {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The full-disk check on `probes`, in the scratch directory `name`.
fn full_disk(probes: &str, name: &str) {
    let dir = scratch(name);
    let disk = SmallDisk::mount(&dir.join("disk"), "256k");
    let program = build_program("record_trust");
    let trace = disk.0.join("t.ordo");
    let mut rec = Command::new(ordo())
        .arg("record")
        .args(probe_args(probes))
        .arg("-o")
        .arg(&trace)
        .arg("--")
        .arg(&program)
        .args(["paced", "1", "6000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let stderr = rec.stderr.take().unwrap();
    let (lines_tx, lines) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = lines_tx.send(line);
        }
    });
    // The error comes while the program runs.
    let mut seen = Vec::new();
    let error_at = loop {
        let line = lines
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("no write error reported; stderr so far: {seen:#?}"));
        if line.starts_with("ordo: error: writing") {
            break line;
        }
        seen.push(line);
    };
    // Timed from the program's start (it is exec'd once the probes are on), not
    // from the recorder's: attaching can wait seconds in the kernel while earlier
    // recordings' detaches finish (seen here: 5-20 s for a uprobe link right after
    // other tests' recordings), which says nothing about when the error is said.
    let program = child_named(rec.id(), "record_trust");
    assert!(
        program.is_some(),
        "the program keeps running after the write error"
    );
    let running = running_for(program.unwrap());
    assert!(
        running < Duration::from_millis(5000),
        "the write error was said {running:?} after the program started ({:?} after the recorder), not at once",
        started.elapsed()
    );
    assert!(
        error_at.contains(trace.to_str().unwrap())
            && error_at.contains("No space left on device")
            && error_at.contains("--salvage"),
        "{error_at}"
    );
    let out = rec.wait_with_output().unwrap();
    reader.join().unwrap();
    let rest: Vec<String> = lines.try_iter().collect();
    let text = rest.join("\n");
    assert_eq!(out.status.code(), Some(74), "{text}");
    assert!(
        printed(&out.stdout, "lock").starts_with("0x"),
        "the program ran to its end: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        text.contains("the program exited with status 0") && text.contains("were not written"),
        "{text}"
    );
    assert_eq!(
        rest.iter()
            .filter(|l| l.starts_with("ordo: error: writing"))
            .count(),
        1,
        "one more error line, in the summary: {text}"
    );
    // What was written is intact: read with and without --salvage.
    assert!(std::fs::metadata(&trace).unwrap().len() <= 256 << 10);
    let s = stats(&trace, true);
    assert!(s["events"].as_u64().unwrap() > 0, "{s}");
    let analyzed = run_ordo(&["analyze", "--salvage", trace.to_str().unwrap()]);
    assert!(
        analyzed.status.success(),
        "{}",
        String::from_utf8_lossy(&analyzed.stderr)
    );
    let strict = run_ordo(&["dump", "--stats", trace.to_str().unwrap()]);
    assert!(
        strict.status.success(),
        "a trace cut at a chunk boundary reads without --salvage too: {}",
        String::from_utf8_lossy(&strict.stderr)
    );
    drop(disk);
}

/// `/proc/sys/kernel/pid_max` lowered while the value lives, restored after. One
/// at a time: the test's variants run side by side, and one restoring the value
/// while the other churns threads left that one without a reused tid.
struct LowPidMax {
    before: String,
    _turn: std::sync::MutexGuard<'static, ()>,
}

impl LowPidMax {
    fn set(max: u32) -> LowPidMax {
        static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let path = "/proc/sys/kernel/pid_max";
        let before = std::fs::read_to_string(path).unwrap();
        std::fs::write(path, max.to_string()).unwrap();
        LowPidMax {
            before,
            _turn: turn,
        }
    }
}

impl Drop for LowPidMax {
    fn drop(&mut self) {
        let _ = std::fs::write("/proc/sys/kernel/pid_max", self.before.trim());
    }
}

/// With pid_max at 4096, 6000 threads created one after the other get fewer than
/// 4096 distinct tids (the program counts them): each is still its own logical
/// thread, with its own start, lock and exit, and the thread count is the number
/// created.
fn a_reused_thread_id_is_a_new_thread(probes: &str) {
    if !have_root(&format!("a_reused_thread_id_is_a_new_thread ({probes})")) {
        return;
    }
    let dir = scratch(&format!("tid-reuse-{probes}"));
    let program = build_program("record_trust");
    let trace = dir.join("t.ordo");
    const THREADS: usize = 6000;
    let out = {
        let _low = LowPidMax::set(4096);
        record_probes(probes, &trace, &program, &["churn", &THREADS.to_string()])
    };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let distinct: usize = printed(&out.stdout, "tids").parse().unwrap();
    assert!(
        distinct < THREADS,
        "the kernel reused no tid ({distinct} distinct): the test proves nothing"
    );
    let s = stats(&trace, false);
    assert_eq!(s["threads"].as_u64(), Some(THREADS as u64 + 1), "{s}");
    let events = dump_json(&trace);
    let lock = printed(&out.stdout, "lock");
    let locks = count_by_thread(&events, "mutex_lock", &lock);
    let unlocks = count_by_thread(&events, "mutex_unlock", &lock);
    // Every thread is its own logical thread with at most its one lock and unlock;
    // on a loaded machine a few events may be dropped, but never silently: what
    // is missing is exactly what the trace says was lost.
    for (what, counted) in [("mutex_lock", &locks), ("mutex_unlock", &unlocks)] {
        assert!(
            counted
                .iter()
                .all(|(t, &n)| n == 1 && (1..=THREADS).contains(&t.parse().unwrap())),
            "{what}: a thread outside 1..={THREADS} or with more than one"
        );
    }
    let missing = 2 * THREADS - locks.len() - unlocks.len();
    assert_eq!(
        missing as u64,
        s["lost"].as_u64().unwrap(),
        "lock/unlock events missing vs lost: {s}"
    );
    assert!(missing < THREADS / 10, "{missing} events lost: {s}");
    for kind in ["thread_start", "thread_exit"] {
        let mut per_thread = std::collections::BTreeMap::new();
        for e in events.iter().filter(|e| e["kind"] == kind) {
            *per_thread
                .entry(e["thread"].as_str().unwrap().to_string())
                .or_insert(0) += 1;
        }
        assert!(
            per_thread.len() >= THREADS && per_thread.values().all(|&n| n == 1),
            "{kind}: {} threads, some more than once",
            per_thread.len()
        );
    }
}

/// A shell script whose work runs in child processes (forked by the shell, which
/// dash does with vfork, running no atfork handlers): one warning line that they
/// were not followed. A program that only creates threads gets none.
fn a_script_whose_work_runs_in_children_is_warned_about(probes: &str) {
    if !have_root(&format!(
        "a_script_whose_work_runs_in_children_is_warned_about ({probes})"
    )) {
        return;
    }
    let dir = scratch(&format!("children-{probes}"));
    let program = build_program("record_trust");
    let trace = dir.join("t.ordo");
    let run = program.to_str().unwrap();
    let script = format!("{run} churn 3; {run} churn 3");
    let out = Command::new(ordo())
        .arg("record")
        .args(probe_args(probes))
        .arg("-o")
        .arg(&trace)
        .args(["--", "sh", "-c", &script])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("child process"))
        .collect();
    assert_eq!(
        warnings,
        ["ordo: warning: 2 forked child processes not followed: ordo records the launched (or attached) process only; record a child's program on its own"],
        "{stderr}"
    );
    let threads_only = record_probes(
        probes,
        &dir.join("threads.ordo"),
        &program,
        &["churn", "20"],
    );
    let stderr = String::from_utf8_lossy(&threads_only.stderr);
    assert!(
        threads_only.status.success() && !stderr.contains("child process"),
        "{stderr}"
    );
}

/// A recorder that is slow to read the launched program's modules (stopped here,
/// as a loaded machine can deschedule it for long) holds the program in its
/// agent's start-up instead of letting it run on and exit with its code never
/// symbolized: the discovered global is still named, and nothing is warned.
#[test]
fn a_recorder_slow_to_read_the_modules_holds_the_program_not_its_symbols() {
    if !have_root("a_recorder_slow_to_read_the_modules_holds_the_program_not_its_symbols") {
        return;
    }
    let dir = scratch("slow-modules");
    let program = build_eval_program("plain_unlock_free");
    let trace = dir.join("t.ordo");
    // The program runs ~2 ms: the recorder is stopped as soon as it has exec'd
    // it, which now and then is too late (the map was read already); try again.
    for _ in 0..20 {
        let rec = Command::new(ordo())
            .args(["record", "--discover", "--force", "-o"])
            .arg(&trace)
            .arg("--")
            .arg(&program)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let recorder = rec.id() as i32;
        let deadline = Instant::now() + Duration::from_secs(60);
        let target = loop {
            if let Some(pid) = child_named(rec.id(), "eval-plain_unlo") {
                break pid;
            }
            assert!(Instant::now() < deadline, "the program never started");
            std::thread::yield_now();
        };
        // SAFETY: signals to the recorder this test started.
        unsafe { libc::kill(recorder, libc::SIGSTOP) };
        std::thread::sleep(Duration::from_millis(500));
        let state = std::fs::read_to_string(format!("/proc/{target}/stat"))
            .ok()
            .and_then(|s| s[s.rfind(')')? + 2..].chars().next());
        // SAFETY: as above.
        unsafe { libc::kill(recorder, libc::SIGCONT) };
        let out = rec.wait_with_output().unwrap();
        // (The program's own exit status does not matter: its bug may strike.)
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("ordo: recorded"), "{stderr}");
        if state.is_none_or(|s| s == 'Z') {
            continue; // it had run to its end before the recorder stopped
        }
        assert!(!stderr.contains("unsymbolized"), "{stderr}");
        let analysis = run_ordo(&["analyze", "--json", trace.to_str().unwrap()]);
        let doc: Value = serde_json::from_slice(&analysis.stdout).unwrap();
        let shared = &doc["shared_locations"];
        assert!(
            shared
                .as_array()
                .unwrap()
                .iter()
                .any(|l| l["location"] == "current"),
            "`current` not named among {shared}"
        );
        return;
    }
    panic!("the program ran to its end before the recorder could be stopped, 20 times");
}

/// `--duration` bounds an attached recording; without `--pid` it is refused, not
/// ignored.
#[test]
fn duration_without_pid_is_refused() {
    let out = run_ordo(&["record", "--duration", "1", "--", "true"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--duration works with --pid only") && stderr.lines().count() == 1,
        "{stderr}"
    );
    assert!(!Path::new("true.ordo").exists());
}

/// The same variable watched twice (the same spec given twice) is probed once:
/// each access is recorded once, with a note, by uprobe and by hardware watchpoint.
#[test]
fn a_duplicated_watch_records_each_access_once() {
    if !have_root("a_duplicated_watch_records_each_access_once") {
        return;
    }
    let _registers = debug_registers();
    let dir = scratch("watch-twice");
    let program = build_program("record_watch");
    for flag in ["--watch=hits", "--watch-hw=hits"] {
        let trace = dir.join("t.ordo");
        let out = Command::new(ordo())
            .args(["record", "--force", "-o"])
            .arg(&trace)
            .args([flag, flag, "--"])
            .arg(&program)
            .args(["plain", "3", "500"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{flag}: {stderr}");
        assert!(stderr.contains("watched already"), "{flag}: {stderr}");
        let addr = printed(&out.stdout, "hits_addr");
        let events = dump_json(&trace);
        let writes = count_by_thread(&events, "write", &addr);
        let each: std::collections::BTreeMap<String, usize> = ["1", "2", "3"]
            .iter()
            .map(|t| (t.to_string(), 500))
            .collect();
        assert_eq!(writes, each, "{flag}: writes per thread");
    }
}

/// A long `ordo analyze` draws a progress bar on a terminal (a pseudo-terminal
/// from script(1) here), and nothing when stderr is not one.
#[test]
fn a_long_analysis_shows_progress_on_a_terminal_only() {
    let dir = scratch("progress");
    let trace = dir.join("big.ordo");
    // Long enough to outlast the bar's delay (`progress::SHOW_AFTER`) in either
    // build: a release build analyzes 2 M events before it.
    let events = if cfg!(debug_assertions) {
        2_000_000
    } else {
        16_000_000
    };
    ordo_analysis::synthetic::write_benchmark_trace(&trace, events, 4).unwrap();
    let plain = run_ordo(&["analyze", trace.to_str().unwrap()]);
    assert!(plain.status.success());
    assert!(
        plain.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&plain.stderr)
    );
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("SKIPPED the terminal half: no script(1) to make a pseudo-terminal");
        return;
    }
    let command = format!(
        "{} analyze {} > /dev/null",
        ordo().display(),
        trace.display()
    );
    let on_terminal = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let drawn = String::from_utf8_lossy(&on_terminal.stdout);
    assert!(on_terminal.status.success(), "{drawn}");
    assert!(
        drawn.contains("ordo: analyzing") && drawn.contains("MiB"),
        "no progress bar on the terminal: {drawn:?}"
    );
}
