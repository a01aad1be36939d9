//! The ptrace injector (`ordo_recorder::inject`) against real multithreaded C programs
//! built here with gcc: loading a library and calling it must not disturb threads
//! spinning, blocked in `pthread_cond_wait`, in `read()` or in `nanosleep`, and errors
//! must leave the target running. Needs root (skipped otherwise).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use ordo_recorder::inject::{load_and_call, symbol_in_target, StoppedProcess};

/// Four worker threads: a spinner (SIGUSR1 unblocked, like the main thread), one in
/// pthread_cond_wait, one in read() on a pipe, one in a nanosleep loop (those three
/// block SIGUSR1). The main thread answers commands read from stdin.
const TARGET: &str = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

atomic_long counter; /* exported (-rdynamic): the test reads it */
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static int go, fds[2];
static atomic_int stop;
static atomic_long naps, eintr;
static volatile sig_atomic_t usr1;
static char got[32];

static void on_usr1(int s) { (void)s; usr1++; }
static void *spin(void *a) { while (!atomic_load(&stop)) atomic_fetch_add(&counter, 1); return a; }
static void *wait_cond(void *a) {
    pthread_mutex_lock(&m);
    while (!go) pthread_cond_wait(&c, &m);
    pthread_mutex_unlock(&m);
    return a;
}
static void *read_pipe(void *a) {
    ssize_t n = read(fds[0], got, sizeof got - 1);
    if (n >= 0) got[n] = 0; else snprintf(got, sizeof got, "error-%d", errno);
    return a;
}
static void *nap(void *a) {
    while (!atomic_load(&stop)) {
        struct timespec ts = {0, 2000000};
        if (nanosleep(&ts, NULL) == 0) atomic_fetch_add(&naps, 1);
        else atomic_fetch_add(&eintr, 1);
    }
    return a;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
    if (pipe(fds) != 0) return 2;
    pthread_t t[4];
    pthread_create(&t[0], NULL, spin, NULL);
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set, &old);
    pthread_create(&t[1], NULL, wait_cond, NULL);
    pthread_create(&t[2], NULL, read_pipe, NULL);
    pthread_create(&t[3], NULL, nap, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    printf("ready\n");
    char line[4200];
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = 0;
        if (!strcmp(line, "counter")) {
            printf("counter %ld\n", atomic_load(&counter));
        } else if (!strncmp(line, "lib ", 4)) {
            void *h = dlopen(line + 4, RTLD_NOW | RTLD_NOLOAD);
            int *calls = h ? dlsym(h, "test_calls") : NULL;
            printf("lib calls %d\n", calls ? *calls : -1);
            if (h) dlclose(h);
        } else if (!strcmp(line, "finish")) {
            break;
        }
    }
    pthread_mutex_lock(&m);
    go = 1;
    pthread_cond_signal(&c);
    pthread_mutex_unlock(&m);
    if (write(fds[1], "hello", 5) != 5) return 3;
    atomic_store(&stop, 1);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    printf("done got=%s naps=%d eintr=%ld usr1=%d counter=%d\n", got, atomic_load(&naps) > 0,
           atomic_load(&eintr), (int)usr1, atomic_load(&counter) > 0);
    return 0;
}
"#;

/// The injected library: `test_entry(x)` returns `x * 2` (or -1 if called with a
/// misaligned stack) and counts its calls.
const LIBRARY: &str = r#"
#include <stdint.h>
int test_calls;
int test_entry(long x) {
    _Alignas(16) volatile char probe[16];
    probe[0] = 0;
    if (((uintptr_t)probe & 15) != 0) return -1;
    test_calls++;
    return (int)(x * 2);
}
"#;

/// The final line of a target whose blocked threads all resumed correctly (and that
/// got `usr1` SIGUSR1s).
fn expected_end(usr1: u32) -> String {
    format!("done got=hello naps=1 eintr=0 usr1={usr1} counter=1")
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("skipping: the ptrace injection tests need root");
    }
    root
}

fn gcc(dir: &Path, source: &str, name: &str, flags: &[&str]) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).unwrap();
    let out = dir.join(name);
    let status = Command::new("gcc")
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .status()
        .expect("gcc runs");
    assert!(status.success(), "gcc failed for {name}");
    out
}

/// A running target, killed if the test fails.
struct Target {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    pid: i32,
}

impl Target {
    fn start(program: &Path) -> Target {
        let mut child = Command::new(program)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("target starts");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let pid = child.id() as i32;
        let mut target = Target {
            child,
            stdin,
            stdout,
            pid,
        };
        assert_eq!(target.line(), "ready");
        target.wait_until_blocked();
        target
    }

    /// Waits until the condvar waiter is in futex and both the pipe reader and the
    /// main thread are in read (the states the injection must preserve).
    fn wait_until_blocked(&self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let mut syscalls = Vec::new();
            for entry in std::fs::read_dir(format!("/proc/{}/task", self.pid)).unwrap() {
                let path = entry.unwrap().path().join("syscall");
                let text = std::fs::read_to_string(path).unwrap_or_default();
                syscalls.push(text.split(' ').next().unwrap_or("").trim().to_string());
            }
            let count = |nr: &str| syscalls.iter().filter(|s| *s == nr).count();
            if syscalls.len() == 5 && count("202") >= 1 && count("0") >= 2 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "threads never blocked: {syscalls:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        line.trim_end().to_string()
    }

    fn ask(&mut self, command: &str) -> String {
        writeln!(self.stdin, "{command}").unwrap();
        self.line()
    }

    fn counter(&mut self) -> i64 {
        let answer = self.ask("counter");
        answer.strip_prefix("counter ").unwrap().parse().unwrap()
    }

    /// Sends `finish`, returns the final line once the target exited 0.
    fn finish(mut self) -> String {
        let end = self.ask("finish");
        let status = self.child.wait().unwrap();
        assert!(status.success(), "target ended with {status}");
        end
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Builds the target and the library in `dir`.
fn build(dir: &Path) -> (PathBuf, PathBuf) {
    let target = gcc(
        dir,
        TARGET,
        "inject_target",
        &["-O1", "-pthread", "-rdynamic"],
    );
    let library = gcc(dir, LIBRARY, "libinjected.so", &["-O0", "-shared", "-fPIC"]);
    (target, library)
}

/// 1. One injection into a target with a spinning thread and threads blocked in
///    pthread_cond_wait, read() and nanosleep: the entry runs (with an ABI-aligned
///    stack) and returns x * 2, the library stays loaded, and afterwards every blocked
///    thread completes normally (the read gets its data, nanosleep never sees EINTR)
///    and the target exits 0.
#[test]
fn load_and_call_leaves_blocked_threads_working() {
    if !is_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (program, library) = build(dir.path());
    let mut target = Target::start(&program);
    let before = target.counter();
    let result = load_and_call(target.pid, &library, "test_entry", 21).expect("injection");
    assert_eq!(result as i32, 42);
    assert_eq!(
        target.ask(&format!("lib {}", library.display())),
        "lib calls 1"
    );
    std::thread::sleep(Duration::from_millis(20));
    assert!(target.counter() > before, "the spinner stopped spinning");
    assert_eq!(target.finish(), expected_end(0));
}

/// 2. Fifty injections into the same running target: each returns x * 2, the spinner
///    keeps advancing between them, the entry ran 50 times, the target exits cleanly.
///    Prints the median time of one load_and_call.
#[test]
fn repeated_injection_keeps_working() {
    if !is_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (program, library) = build(dir.path());
    let mut target = Target::start(&program);
    let mut last = target.counter();
    let mut times = Vec::new();
    for i in 0..50u64 {
        let start = Instant::now();
        let result = load_and_call(target.pid, &library, "test_entry", i).expect("injection");
        times.push(start.elapsed());
        assert_eq!(result as i32, (2 * i) as i32);
        if i % 10 == 9 {
            std::thread::sleep(Duration::from_millis(5));
            let now = target.counter();
            assert!(
                now > last,
                "counter stuck at {now} after {} injections",
                i + 1
            );
            last = now;
        }
    }
    assert_eq!(
        target.ask(&format!("lib {}", library.display())),
        "lib calls 50"
    );
    assert_eq!(target.finish(), expected_end(0));
    let median = |t: &mut [Duration]| {
        t.sort();
        t[t.len() / 2]
    };
    let first20 = median(&mut times[..20].to_vec());
    println!(
        "load_and_call: median of the first 20 {first20:?}, of all 50 {:?}",
        median(&mut times)
    );
}

/// 3. Errors are clear and leave the target unaffected: a pid that does not exist, a
///    library that does not exist (the target's dlerror text surfaces), an entry the
///    library lacks, a second tracer (one-line reason naming the pid and the tracer);
///    then an injection still works and the target ends normally.
#[test]
fn errors_are_clear_and_harmless() {
    if !is_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (program, library) = build(dir.path());

    let no_pid = load_and_call(2_000_000_000, &library, "test_entry", 1).unwrap_err();
    assert!(format!("{no_pid:#}").contains("2000000000"), "{no_pid:#}");
    let no_pid = StoppedProcess::stop(2_000_000_000)
        .err()
        .expect("no such pid");
    assert_eq!(no_pid.to_string(), "no process with pid 2000000000");

    let mut target = Target::start(&program);
    let pid = target.pid;
    let missing = dir.path().join("libmissing.so");
    let err = format!(
        "{:#}",
        load_and_call(pid, &missing, "test_entry", 1).unwrap_err()
    );
    assert!(
        err.contains("dlopen(") && err.contains(&format!("failed in pid {pid}")),
        "{err}"
    );
    assert!(
        err.contains("libmissing.so: cannot open shared object file"),
        "{err}"
    );

    let err = format!(
        "{:#}",
        load_and_call(pid, &library, "no_such_entry", 1).unwrap_err()
    );
    assert!(
        err.contains("no_such_entry not found") && err.contains("undefined symbol"),
        "{err}"
    );

    let held = StoppedProcess::stop(pid).expect("first tracer");
    let err = StoppedProcess::stop(pid)
        .err()
        .expect("second tracer refused")
        .to_string();
    // TracerPid names the tracing thread.
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::gettid() };
    assert!(
        err.starts_with(&format!(
            "cannot ptrace pid {pid}: it is already traced by pid {me}"
        )),
        "{err}"
    );
    assert!(!err.contains('\n'), "{err}");
    held.detach().unwrap();

    assert_eq!(
        load_and_call(pid, &library, "test_entry", 5).unwrap() as i32,
        10
    );
    assert_eq!(
        target.ask(&format!("lib {}", library.display())),
        "lib calls 1"
    );
    assert_eq!(target.finish(), expected_end(0));
}

/// 4. The StoppedProcess API: every thread is stopped (the spinner's counter does not
///    move between two reads), scratch memory round-trips, a remote getpid returns the
///    pid, a called function that crashes is reported and leaves the target intact,
///    read-only code can be written, and a SIGUSR1 sent while the process is held is
///    delivered exactly once after.
#[test]
fn stopped_process_holds_every_thread_and_keeps_signals() {
    if !is_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (program, _) = build(dir.path());
    let mut target = Target::start(&program);
    let pid = target.pid;
    let counter = symbol_in_target(pid, "inject_target", "counter").expect("counter");
    let getpid = symbol_in_target(pid, "libc.so.6", "getpid").expect("getpid");

    let mut process = StoppedProcess::stop(pid).expect("stop");
    assert_eq!(process.threads().len(), 5);
    assert_eq!(process.threads()[0], pid);
    let read_counter = |p: &StoppedProcess| {
        i64::from_ne_bytes(p.read_memory(counter, 8).unwrap().try_into().unwrap())
    };
    let first = read_counter(&process);
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(read_counter(&process), first, "a thread kept running");
    assert!(first > 0);

    // SAFETY: kill takes integers only.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGUSR1) }, 0);
    let addr = process.write_scratch(b"scratch bytes\0").unwrap();
    assert_eq!(process.read_memory(addr, 14).unwrap(), b"scratch bytes\0");
    assert_eq!(process.call(getpid, &[]).unwrap(), pid as u64);
    // A called function that crashes: reported, suppressed, the thread restored.
    let crash = format!("{:#}", process.call(0x8, &[]).unwrap_err());
    assert!(crash.contains("crashed: SIGSEGV at rip 0x8"), "{crash}");
    assert_eq!(process.call(getpid, &[]).unwrap(), pid as u64);
    // /proc/PID/mem writes read-only code pages of a traced process.
    let code = process.read_memory(getpid, 4).unwrap();
    process.write_memory(getpid, &code).unwrap();
    process.detach().unwrap();

    assert!(target.counter() >= first);
    assert_eq!(target.finish(), expected_end(1));
}

/// A target whose second thread holds an exported mutex for 1.5 s (announcing it), then
/// keeps taking it briefly.
const LOCK_TARGET: &str = r#"
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER; /* exported (-rdynamic) */
static atomic_int stop;

static void *hold(void *a) {
    pthread_mutex_lock(&shared_lock);
    printf("held\n");
    usleep(1500000);
    pthread_mutex_unlock(&shared_lock);
    while (!atomic_load(&stop)) {
        pthread_mutex_lock(&shared_lock);
        usleep(1000);
        pthread_mutex_unlock(&shared_lock);
        usleep(1000);
    }
    return a;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    pthread_t t;
    pthread_create(&t, NULL, hold, NULL);
    char line[64];
    while (fgets(line, sizeof line, stdin) && strcmp(line, "finish\n") != 0) {}
    atomic_store(&stop, 1);
    pthread_join(t, NULL);
    printf("done\n");
    return 0;
}
"#;

/// The injected library for LOCK_TARGET: takes the target's mutex.
const LOCK_LIBRARY: &str = r#"
#include <pthread.h>
extern pthread_mutex_t shared_lock;
int lock_entry(long x) {
    pthread_mutex_lock(&shared_lock);
    pthread_mutex_unlock(&shared_lock);
    return (int)(x + 1);
}
"#;

/// 5. The injected code needs a lock a stopped thread holds: after the grace period
///    the other threads are resumed, the holder releases it, the call returns, and the
///    target goes on and exits cleanly.
#[test]
fn a_call_waiting_for_a_stopped_threads_lock_completes() {
    if !is_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let program = gcc(
        dir.path(),
        LOCK_TARGET,
        "lock_target",
        &["-O1", "-pthread", "-rdynamic"],
    );
    let library = gcc(
        dir.path(),
        LOCK_LIBRARY,
        "liblock.so",
        &["-O0", "-shared", "-fPIC"],
    );
    let mut child = Command::new(&program)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("target starts");
    let mut target = Target {
        stdin: child.stdin.take().unwrap(),
        stdout: BufReader::new(child.stdout.take().unwrap()),
        pid: child.id() as i32,
        child,
    };
    assert_eq!(target.line(), "held");
    let start = Instant::now();
    let result = load_and_call(target.pid, &library, "lock_entry", 41).expect("injection");
    let took = start.elapsed();
    assert_eq!(result as i32, 42);
    assert!(
        took >= ordo_recorder::inject::CALL_GRACE,
        "the lock was free? took {took:?}"
    );
    assert_eq!(target.finish(), "done");
}

/// 6. A remote call on each thread in turn (the spinner and the threads blocked in
///    pthread_cond_wait's futex, in read() on the pipe and on stdin, in nanosleep):
///    each blocked thread goes back into the very system call it was in (restarted,
///    not failed with EINTR) and the target ends normally.
#[test]
fn a_call_on_each_blocked_thread_restarts_its_system_call() {
    if !is_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (program, _) = build(dir.path());
    let target = Target::start(&program);
    let pid = target.pid;
    let getpid = symbol_in_target(pid, "libc.so.6", "getpid").expect("getpid");
    let syscall_of = |tid: i32| {
        let text = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).unwrap();
        text.split(' ').next().unwrap().trim().to_string()
    };
    let tids = StoppedProcess::stop(pid).unwrap().threads().to_vec();
    assert_eq!(tids.len(), 5);
    let mut blocked = 0;
    let mut seen = Vec::new();
    for tid in tids {
        // The previous round interrupted every thread: let them block again.
        target.wait_until_blocked();
        let before = syscall_of(tid);
        seen.push(before.clone());
        let mut process = StoppedProcess::stop(pid).unwrap();
        process.set_calling_thread(tid).unwrap();
        assert_eq!(process.call(getpid, &[]).unwrap(), pid as u64);
        process.detach().unwrap();
        if before == "202" || before == "0" {
            blocked += 1;
            std::thread::sleep(Duration::from_millis(20));
            assert_eq!(syscall_of(tid), before, "thread {tid} left its system call");
        }
    }
    assert_eq!(blocked, 3, "futex, read(pipe), read(stdin) in {seen:?}");
    assert_eq!(target.finish(), expected_end(0));
}
