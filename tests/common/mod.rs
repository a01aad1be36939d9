//! Helpers shared by the end-to-end tests: build the C test programs, run `ordo`,
//! skip with a message when a test needs root and does not have it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `ordo` binary under test.
pub fn ordo() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ordo"))
}

/// A scratch directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Compiles the bug program `tests/eval/NAME.c` with debug info (once per test
/// process, as [`build_program`]); returns the binary.
pub fn build_eval_program(name: &str) -> PathBuf {
    built_once(&format!("eval/{name}"), |key| {
        let name = key.trim_start_matches("eval/");
        compile_from("tests/eval", name, &format!("eval-{name}"), None, &[])
    })
}

/// Compiles `tests/programs/NAME.c` (or `.cpp`) with debug info; returns the binary.
pub fn build_program(name: &str) -> PathBuf {
    built_once(name, compile_program)
}

/// Compiles `tests/programs/NAME.c` (or `.cpp`) with `compiler` (`gcc`, `clang`;
/// the C++ driver is derived) and extra `flags` (e.g. `-fsanitize=address`) into
/// the binary `NAME-TAG`; built once per test process like [`build_program`].
pub fn build_program_variant(name: &str, tag: &str, compiler: &str, flags: &[&str]) -> PathBuf {
    let key = format!("{name}-{tag}");
    static BUILT: std::sync::Mutex<Vec<(String, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, path)) = built.iter().find(|(n, _)| *n == key) {
        return path.clone();
    }
    let path = compile(name, &key, Some(compiler), flags);
    built.push((key, path.clone()));
    path
}

/// Builds each test program once per test process: tests run in parallel, and
/// replacing a binary (a new inode) while another test has attached uprobes to it
/// by path would leave that test's probes on the old file, recording nothing.
fn built_once(name: &str, build: fn(&str) -> PathBuf) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<(String, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, path)) = built.iter().find(|(n, _)| n == name) {
        return path.clone();
    }
    let path = build(name);
    built.push((name.to_string(), path.clone()));
    path
}

fn compile_program(name: &str) -> PathBuf {
    compile(name, name, None, &[])
}

fn compile(name: &str, out_name: &str, compiler: Option<&str>, flags: &[&str]) -> PathBuf {
    compile_from("tests/programs", name, out_name, compiler, flags)
}

/// Compiles `DIR/NAME.c` (or `.cpp`) into the binary `out_name`.
fn compile_from(
    dir: &str,
    name: &str,
    out_name: &str,
    compiler: Option<&str>,
    flags: &[&str],
) -> PathBuf {
    let src_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let out_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("programs");
    std::fs::create_dir_all(&out_dir).unwrap();
    let c = src_dir.join(format!("{name}.c"));
    let cpp = src_dir.join(format!("{name}.cpp"));
    let (src, default_compiler, std) = if c.exists() {
        (c, "cc", "-std=gnu11")
    } else {
        (cpp, "c++", "-std=c++17")
    };
    let compiler = match (compiler, std) {
        (None, _) => default_compiler.to_string(),
        (Some("gcc"), "-std=c++17") => "g++".to_string(),
        (Some(cc), "-std=c++17") => format!("{cc}++"),
        (Some(cc), _) => cc.to_string(),
    };
    let out = out_dir.join(out_name);
    // Tests run in parallel and share programs: compile to a private name, then
    // rename into place atomically, so nobody executes a half-written binary.
    let tmp = out_dir.join(format!(
        ".{out_name}.{}.{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let status = Command::new(&compiler)
        .args(["-O1", "-g", std, "-pthread"])
        .args(flags)
        .arg("-o")
        .arg(&tmp)
        .arg(&src)
        .status()
        .expect("run the C compiler");
    assert!(status.success(), "compiling {}", src.display());
    std::fs::rename(&tmp, &out).unwrap();
    out
}

/// True when running as root (eBPF tests need CAP_BPF and CAP_PERFMON).
pub fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

/// Returns false (and says so) when the test must be skipped for lack of root.
/// In CI (`CI` set) a missing privilege is a failure, not a skip.
pub fn have_root(test: &str) -> bool {
    if is_root() {
        return true;
    }
    if std::env::var_os("CI").is_some() {
        panic!("{test}: needs root to load eBPF programs, and CI must run it");
    }
    eprintln!(
        "SKIPPED {test}: needs root to load eBPF programs (run as root or via `cargo xtask test`)"
    );
    false
}

/// Runs `ordo ARGS…`.
pub fn run_ordo(args: &[&str]) -> Output {
    Command::new(ordo()).args(args).output().expect("run ordo")
}

/// Records `program ARGS` into `trace`; panics with ordo's stderr on failure.
pub fn record(trace: &Path, program: &Path, args: &[&str]) -> Output {
    record_probes("auto", trace, program, args)
}

/// [`record`] with `--probes PROBES` (`inproc`, `ebpf` or `auto`).
pub fn record_probes(probes: &str, trace: &Path, program: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(ordo());
    cmd.arg("record")
        .args(probe_args(probes))
        .arg("-o")
        .arg(trace)
        .arg("--")
        .arg(program)
        .args(args);
    let out = cmd.output().expect("run ordo record");
    assert!(
        trace.exists(),
        "ordo record wrote no trace; stderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `ordo dump --stats --json` of a trace: counts by kind (`by_kind`), `lost`, …
pub fn dump_stats(trace: &Path) -> serde_json::Value {
    let out = run_ordo(&["dump", "--stats", "--json", trace.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "ordo dump --stats failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("ordo dump --stats --json")
}

/// `ordo dump --json TRACE`, parsed: one JSON object per event.
pub fn dump_json(trace: &Path) -> Vec<serde_json::Value> {
    let out = Command::new(ordo())
        .arg("dump")
        .arg("--json")
        .arg(trace)
        .output()
        .expect("run ordo dump");
    assert!(
        out.status.success(),
        "ordo dump failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// Compiles `tests/programs/NAME.rs` (or, for a name of the evaluation suite,
/// `tests/eval/NAME.rs`) with rustc (optimized, debug info).
pub fn build_rust_program(name: &str) -> PathBuf {
    built_once(&format!("{name}.rs"), |key| {
        compile_rust_program(key.trim_end_matches(".rs"))
    })
}

/// Builds `tests/programs/NAME/`, a Rust program that needs crates (its own
/// `Cargo.lock`, outside the workspace), with cargo in release mode once per test
/// run (the first build fetches the crates); returns the binary.
pub fn build_cargo_program(name: &str) -> PathBuf {
    built_once(&format!("{name}/Cargo.toml"), |key| {
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/programs")
            .join(key);
        let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cargo-programs");
        let out = Command::new(option_env!("CARGO").unwrap_or("cargo"))
            .args(["build", "--release", "--locked", "--manifest-path"])
            .arg(&manifest)
            .arg("--target-dir")
            .arg(&target)
            .output()
            .expect("run cargo");
        assert!(
            out.status.success(),
            "cargo build of {}: {}",
            manifest.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        target
            .join("release")
            .join(key.trim_end_matches("/Cargo.toml"))
    })
}

fn compile_rust_program(name: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = [root.join("tests/programs"), root.join("tests/eval")]
        .into_iter()
        .map(|dir| dir.join(format!("{name}.rs")))
        .find(|path| path.exists())
        .unwrap_or_else(|| panic!("no tests/programs/{name}.rs or tests/eval/{name}.rs"));
    let out_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("programs");
    std::fs::create_dir_all(&out_dir).unwrap();
    let out = out_dir.join(name);
    let tmp = out_dir.join(format!(
        ".{name}.{}.{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let status = Command::new("rustc")
        .args(["-O", "-g", "--edition", "2021", "-o"])
        .arg(&tmp)
        .arg(&src)
        .status()
        .expect("run rustc");
    assert!(status.success(), "compiling {}", src.display());
    std::fs::rename(&tmp, &out).unwrap();
    out
}

/// The value after `key ` on a line of the program's stdout (`lock 0x…`).
pub fn printed(stdout: &[u8], key: &str) -> String {
    let text = String::from_utf8_lossy(stdout);
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key} ")))
        .unwrap_or_else(|| panic!("program printed no `{key}` line:\n{text}"))
        .trim()
        .to_string()
}

/// Events of `events` with `kind` on object `addr`, counted per logical thread.
pub fn count_by_thread(
    events: &[serde_json::Value],
    kind: &str,
    addr: &str,
) -> std::collections::BTreeMap<String, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for e in events
        .iter()
        .filter(|e| e["kind"] == kind && e["addr"] == addr)
    {
        *counts
            .entry(e["thread"].as_str().unwrap().to_string())
            .or_insert(0) += 1;
    }
    counts
}

/// Runs `ordo replay --json ARGS --schedule SCHEDULE -- PROGRAM`; returns the exit
/// status and the JSON outcome (the last line of stdout).
/// `ordo replay ARGS --schedule SCHEDULE -- COMMAND…`, with `env` added to the
/// environment ordo (and so the program) runs in.
pub fn replay_output(
    args: &[&str],
    schedule: &Path,
    command: &[&str],
    env: &[(&str, &str)],
) -> Output {
    Command::new(ordo())
        .arg("replay")
        .args(args)
        .arg("--schedule")
        .arg(schedule)
        .arg("--")
        .args(command)
        .envs(env.iter().copied())
        .output()
        .expect("run ordo replay")
}

pub fn replay_json(args: &[&str], schedule: &Path, program: &Path) -> (i32, serde_json::Value) {
    replay_json_running(args, schedule, program, &[])
}

/// As [`replay_json`], the program run with `program_args`.
pub fn replay_json_running(
    args: &[&str],
    schedule: &Path,
    program: &Path,
    program_args: &[&str],
) -> (i32, serde_json::Value) {
    let out = Command::new(ordo())
        .args(["replay", "--json"])
        .args(args)
        .arg("--schedule")
        .arg(schedule)
        .arg("--")
        .arg(program)
        .args(program_args)
        .output()
        .expect("run ordo replay");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().unwrap_or_else(|| {
        panic!(
            "no output from ordo replay; stderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let json = serde_json::from_str(line).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {line}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), json)
}

/// `ordo record`'s options for a recording path as the tests name it: `ebpf`,
/// `inproc`, `auto`, or `inproc-sparse` (in process with `--sparse-times`).
pub fn probe_args(probes: &str) -> Vec<&'static str> {
    match probes {
        "ebpf" => vec!["--probes", "ebpf"],
        "inproc" => vec!["--probes", "inproc"],
        "auto" => vec!["--probes", "auto"],
        "inproc-sparse" => vec!["--probes", "inproc", "--sparse-times"],
        other => panic!("unknown recording path {other}"),
    }
}

/// Runs each test function once per recording path listed, as `NAME::PATH`.
#[macro_export]
macro_rules! on_paths {
    ([$($path:ident = $value:literal),*]) => {};
    ([$($path:ident = $value:literal),*] $name:ident $(, $rest:ident)* $(,)?) => {
        mod $name {$(
            #[test]
            fn $path() {
                super::$name($value)
            }
        )*}
        $crate::on_paths!([$($path = $value),*] $($rest),*);
    };
}

/// Runs a test function once per recording path, as `NAME::ebpf` and `NAME::inproc`.
#[macro_export]
macro_rules! on_both_paths {
    ($($name:ident),* $(,)?) => {
        $crate::on_paths!([ebpf = "ebpf", inproc = "inproc"] $($name),*);
    };
}

/// Like [`on_both_paths`], and once more in process with `--sparse-times`
/// (`NAME::sparse_times`): what these tests check of order and events must not
/// depend on how often the clock is read.
#[macro_export]
macro_rules! on_every_path {
    ($($name:ident),* $(,)?) => {
        $crate::on_paths!(
            [ebpf = "ebpf", inproc = "inproc", sparse_times = "inproc-sparse"]
            $($name),*
        );
    };
}

/// Tests that arm debug registers take it in turn: each arms hardware breakpoints (gates) or
/// a hardware watchpoint, and x86 has 4 debug registers: a CPU-wide watchpoint
/// cannot be set while another test holds 4 execute breakpoints or two other
/// watchpoints (`perf_event_open`: ENOSPC). A lock file makes the turns span test
/// binaries too (test runners that run binaries side by side).
pub fn debug_registers() -> DebugRegisters {
    static REGISTERS: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let guard = REGISTERS.lock().unwrap_or_else(|e| e.into_inner());
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(std::env::temp_dir().join("ordo-tests-debug-registers.lock"))
        .expect("open the debug registers' lock file");
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor this function owns; released when it closes.
    let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(locked, 0, "flock: {}", std::io::Error::last_os_error());
    DebugRegisters {
        _file: file,
        _guard: guard,
    }
}

/// A turn at the debug registers (see [`debug_registers`]), held until dropped.
pub struct DebugRegisters {
    _file: std::fs::File,
    _guard: std::sync::MutexGuard<'static, ()>,
}

/// `ordo record WATCH_ARGS -o TRACE -- PROGRAM`.
pub fn record_watching(trace: &Path, program: &Path, watch: &[&str]) {
    let out = Command::new(ordo())
        .arg("record")
        .args(watch)
        .arg("-o")
        .arg(trace)
        .arg("--")
        .arg(program)
        .output()
        .expect("run ordo record");
    assert!(
        trace.exists(),
        "ordo record wrote no trace; stderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `ordo analyze --json TRACE`: (kind, schedule) of each finding, best first.
pub fn findings(trace: &Path) -> Vec<(String, String)> {
    let out = Command::new(ordo())
        .args(["analyze", "--json"])
        .arg(trace)
        .output()
        .expect("run ordo analyze");
    assert!(
        out.status.success(),
        "ordo analyze failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("analyze JSON");
    report["findings"]
        .as_array()
        .map(|f| {
            f.iter()
                .map(|f| {
                    (
                        f["kind"].as_str().unwrap_or_default().to_string(),
                        f["schedule"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The schedule of the best race finding.
pub fn top_race(found: &[(String, String)]) -> Option<String> {
    found
        .iter()
        .find(|(kind, _)| kind == "race")
        .map(|(_, schedule)| schedule.clone())
}

/// Replays `schedule` on `program` `runs` times; returns how many reproduced.
pub fn reproductions(schedule: &Path, program: &Path, args: &[&str], runs: usize) -> usize {
    (0..runs)
        .filter(|_| {
            let (_, json) = replay_json(args, schedule, program);
            assert!(
                json["verdict"] != "infeasible",
                "{}: infeasible: {json}",
                program.display()
            );
            json["verdict"] == "reproduced"
        })
        .count()
}

/// `ordo dump --stats --json` of `trace`: events, threads, lost, counts by kind.
pub fn stats(trace: &Path) -> serde_json::Value {
    let out = run_ordo(&["dump", "--stats", "--json", trace.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The bytes of every read-only mapping of the target's modules but the agent
/// (code, and the data made read-only after relocation: the GOT of a `-z now`
/// build), as /proc/PID/mem reads them.
pub fn read_only_memory(pid: u32) -> Vec<(String, Vec<u8>)> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    let mut regions = Vec::new();
    for line in maps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(range), Some(perms), Some(path)) = (fields.first(), fields.get(1), fields.get(5))
        else {
            continue;
        };
        if !path.starts_with('/') || path.contains("libordo_attach") || perms.contains('w') {
            continue;
        }
        let (start, end) = range.split_once('-').unwrap();
        let (start, end) = (
            u64::from_str_radix(start, 16).unwrap(),
            u64::from_str_radix(end, 16).unwrap(),
        );
        let mut bytes = vec![0; (end - start) as usize];
        use std::os::unix::fs::FileExt;
        if mem.read_exact_at(&mut bytes, start).is_ok() {
            regions.push((line.to_string(), bytes));
        }
    }
    regions
}

/// The regions of `after` that differ from `before`, by their maps line.
pub fn changed_regions(before: &[(String, Vec<u8>)], after: &[(String, Vec<u8>)]) -> Vec<String> {
    before
        .iter()
        .filter(|(line, bytes)| {
            after
                .iter()
                .find(|(l, _)| l == line)
                .is_none_or(|(_, b)| b != bytes)
        })
        .map(|(line, _)| line.clone())
        .collect()
}
