//! The oracle: what counts as the bug showing in one run of the program. Shared by
//! `ordo replay` and `ordo hunt`, so both judge a run the same way.
//!
//! A run ends in one of a few ways ([`Ending`]); the oracle says which of them are
//! failures ([`FailOn`]) and what the program's normal exit status is
//! ([`Oracle::expect_exit`]). Whatever the judgement, it comes with its
//! [`Evidence`]: the exit code, the signal's name, the first line of a sanitizer
//! report and the top frame of the program's own code in it, the stderr line a
//! `stderr:REGEX` matched.
//!
//! ```
//! use ordo_replayer::oracle::{Ending, FailOn, Oracle};
//! let oracle = Oracle::new(3, vec!["signal".parse().unwrap(), "stderr:corrupt".parse().unwrap()]);
//! let judged = oracle.judge(&Ending::Exited { code: 3 }, Some("table corrupt at 7\n"));
//! assert!(judged.failed);
//! assert_eq!(judged.evidence.stderr_match.as_deref(), Some("table corrupt at 7"));
//! assert!(!Oracle::default().judge(&Ending::Exited { code: 0 }, None).failed);
//! assert_eq!(FailOn::DEFAULT.len(), 4);
//! ```

use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;

use regex::Regex;
use serde_json::json;

/// One kind of run that counts as a failure (`--fail-on`).
#[derive(Clone, Debug)]
pub enum FailOn {
    /// `exit`: the program exited with a status other than [`Oracle::expect_exit`].
    Exit,
    /// `signal`: the program died by a signal (an `abort()`ed assertion included).
    Signal,
    /// `hang`: a deadlock (every thread blocked, no progress) or still running at the
    /// timeout with no thread held by the schedule.
    Hang,
    /// `sanitizer`: an AddressSanitizer, ThreadSanitizer, UndefinedBehaviorSanitizer
    /// (…) report on stderr, whatever the exit status (UBSan's reports, for one, let
    /// the program go on and exit 0).
    Sanitizer,
    /// `stderr:REGEX`: a line of the program's stderr matches REGEX.
    Stderr(Regex),
}

impl FailOn {
    /// The kinds used when none is given: `exit`, `signal`, `hang`, `sanitizer`.
    pub const DEFAULT: [FailOn; 4] = [
        FailOn::Exit,
        FailOn::Signal,
        FailOn::Hang,
        FailOn::Sanitizer,
    ];

    fn same_kind(&self, other: &FailOn) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
    }
}

impl FromStr for FailOn {
    type Err = String;

    /// Parses `exit`, `signal`, `hang`, `sanitizer` or `stderr:REGEX`.
    fn from_str(s: &str) -> Result<FailOn, String> {
        match s {
            "exit" => Ok(FailOn::Exit),
            "signal" => Ok(FailOn::Signal),
            "hang" => Ok(FailOn::Hang),
            "sanitizer" => Ok(FailOn::Sanitizer),
            _ => match s.strip_prefix("stderr:") {
                Some("") => Err("stderr: needs a regular expression (stderr:REGEX)".into()),
                Some(re) => Regex::new(re).map(FailOn::Stderr).map_err(|e| {
                    // The regex crate's message spans lines (a caret under the pattern).
                    let last = e.to_string();
                    let why = last.lines().last().unwrap_or("").trim().to_string();
                    format!("bad regular expression {re:?}: {why}")
                }),
                None => Err(format!(
                    "{s:?}: expected exit, signal, hang, sanitizer or stderr:REGEX"
                )),
            },
        }
    }
}

impl fmt::Display for FailOn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailOn::Exit => f.write_str("exit"),
            FailOn::Signal => f.write_str("signal"),
            FailOn::Hang => f.write_str("hang"),
            FailOn::Sanitizer => f.write_str("sanitizer"),
            FailOn::Stderr(re) => write!(f, "stderr:{}", re.as_str()),
        }
    }
}

/// How a run ended, before any judgement.
#[derive(Clone, Debug, PartialEq)]
pub enum Ending {
    /// The program exited with this status.
    Exited {
        /// The exit status.
        code: i32,
    },
    /// The program died by this signal (not one ordo sent).
    Signaled {
        /// The signal number.
        signal: i32,
    },
    /// Every thread stayed blocked in a pthread call with no progress: the words say
    /// which threads in which calls. The program was then killed.
    Deadlock(String),
    /// Still running at the timeout with no thread held by the schedule; killed.
    Hang {
        /// The timeout, in seconds.
        secs: f64,
    },
}

/// What the program's run showed, whatever the verdict: every field that applies is
/// filled in.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Evidence {
    /// The exit status, when the program exited.
    pub exit_code: Option<i32>,
    /// The signal that ended the program (ours included, when ordo killed it).
    pub signal: Option<i32>,
    /// The signal's name (`SIGSEGV`).
    pub signal_name: Option<String>,
    /// The first sanitizer report on stderr.
    pub sanitizer: Option<SanitizerReport>,
    /// The first stderr line a `stderr:REGEX` matched.
    pub stderr_match: Option<String>,
}

impl Evidence {
    /// The `--json` fields: `exit_code`, `signal`, `signal_name`, `sanitizer`
    /// (`{tool, kind, first_line, top_frame}` or null), `stderr_match`.
    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "exit_code": self.exit_code,
            "signal": self.signal,
            "signal_name": self.signal_name,
            "sanitizer": self.sanitizer.as_ref().map(|s| json!({
                "tool": s.tool,
                "kind": s.kind,
                "first_line": s.first_line,
                "top_frame": s.top_frame,
            })),
            "stderr_match": self.stderr_match,
        })
    }

    /// One line for people: `exit code 1; AddressSanitizer: heap-use-after-free in
    /// worker at uaf.c:42`.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        if let Some(code) = self.exit_code {
            parts.push(format!("exit code {code}"));
        }
        if let (Some(sig), Some(name)) = (self.signal, &self.signal_name) {
            parts.push(format!("signal {sig} ({name})"));
        }
        if let Some(s) = &self.sanitizer {
            parts.push(s.to_string());
        }
        if let Some(line) = &self.stderr_match {
            parts.push(format!("stderr: {line}"));
        }
        parts.join("; ")
    }
}

/// A sanitizer's report, as read from the program's stderr.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SanitizerReport {
    /// `AddressSanitizer`, `ThreadSanitizer`, `UndefinedBehaviorSanitizer`,
    /// `LeakSanitizer`, …
    pub tool: String,
    /// What it found: `heap-use-after-free`, `data race`, `signed integer overflow`.
    pub kind: String,
    /// The report's first line, without the `==PID==` prefix.
    pub first_line: String,
    /// The first stack frame in the program's own code: `worker at uaf.c:42`
    /// (sanitizer runtime, libc and loader frames skipped).
    pub top_frame: Option<String>,
}

impl fmt::Display for SanitizerReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.tool, self.kind)?;
        if let Some(frame) = &self.top_frame {
            write!(f, " in {frame}")?;
        }
        Ok(())
    }
}

/// An oracle's judgement of one run.
#[derive(Clone, Debug)]
pub struct Judgement {
    /// The run showed the bug.
    pub failed: bool,
    /// Why, in a few words (`exit code 1 (expected 0)`, `deadlock: …`).
    pub reason: String,
    /// What the run showed.
    pub evidence: Evidence,
}

/// What counts as a failed run: the program's normal exit status and the kinds of
/// ending that are failures. `Oracle::default()` is exit status 0 and
/// [`FailOn::DEFAULT`].
#[derive(Clone, Debug)]
pub struct Oracle {
    /// The program's normal exit status (`--expect-exit`).
    pub expect_exit: i32,
    /// The failure kinds (`--fail-on`), never empty.
    pub fail_on: Vec<FailOn>,
}

impl Default for Oracle {
    fn default() -> Oracle {
        Oracle::new(0, Vec::new())
    }
}

impl Oracle {
    /// An oracle; an empty `fail_on` means [`FailOn::DEFAULT`].
    pub fn new(expect_exit: i32, fail_on: Vec<FailOn>) -> Oracle {
        let fail_on = if fail_on.is_empty() {
            FailOn::DEFAULT.to_vec()
        } else {
            fail_on
        };
        Oracle {
            expect_exit,
            fail_on,
        }
    }

    fn fails_on(&self, kind: &FailOn) -> bool {
        self.fail_on.iter().any(|f| f.same_kind(kind))
    }

    /// Whether the program's stderr must be captured (and passed through) to judge
    /// a run: the oracle has a `stderr:REGEX`, or the program is a sanitizer build
    /// (`sanitized`), whose reports are evidence whatever the oracle.
    pub fn needs_stderr(&self, sanitized: bool) -> bool {
        sanitized || self.fail_on.iter().any(|f| matches!(f, FailOn::Stderr(_)))
    }

    /// Judges a run from how it ended and (when captured) its stderr.
    pub fn judge(&self, ending: &Ending, stderr: Option<&str>) -> Judgement {
        let mut evidence = Evidence::default();
        let mut failures = Vec::new();
        let mut facts = Vec::new();
        let (kind, what) = match ending {
            Ending::Exited { code } => {
                evidence.exit_code = Some(*code);
                if *code == self.expect_exit {
                    (None, format!("exit code {code}"))
                } else {
                    (
                        Some(FailOn::Exit),
                        format!("exit code {code} (expected {})", self.expect_exit),
                    )
                }
            }
            Ending::Signaled { signal } => {
                evidence.signal = Some(*signal);
                let what = format!("killed by signal {signal} ({})", signal_name(*signal));
                (Some(FailOn::Signal), what)
            }
            // ordo killed the program: the evidence says so.
            Ending::Deadlock(what) => {
                evidence.signal = Some(libc::SIGKILL);
                (Some(FailOn::Hang), format!("deadlock: {what}"))
            }
            Ending::Hang { secs } => {
                evidence.signal = Some(libc::SIGKILL);
                let what = format!("hang: still running after {secs} s; killed");
                (Some(FailOn::Hang), what)
            }
        };
        evidence.signal_name = evidence.signal.map(signal_name);
        match kind {
            Some(kind) if self.fails_on(&kind) => failures.push(what),
            _ => facts.push(what),
        }
        if let Some(text) = stderr {
            evidence.sanitizer = parse_sanitizer_report(text);
            if let Some(report) = &evidence.sanitizer {
                if self.fails_on(&FailOn::Sanitizer) {
                    failures.push(report.to_string());
                } else {
                    facts.push(report.to_string());
                }
            }
            for f in &self.fail_on {
                let FailOn::Stderr(re) = f else { continue };
                if let Some(line) = text.lines().find(|l| re.is_match(l)) {
                    evidence.stderr_match = Some(line.to_string());
                    failures.push(format!("stderr matched /{}/: {line}", re.as_str()));
                    break;
                }
            }
        }
        let failed = !failures.is_empty();
        let reason = if failed {
            failures.join("; ")
        } else {
            facts.join("; ")
        };
        Judgement {
            failed,
            reason,
            evidence,
        }
    }
}

/// A signal's name (`SIGSEGV`), or `signal N` for one without a standard name.
pub fn signal_name(signal: i32) -> String {
    const NAMES: [&str; 32] = [
        "",
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    match signal {
        1..=31 => NAMES[signal as usize].to_string(),
        s if (libc::SIGRTMIN()..=libc::SIGRTMAX()).contains(&s) => {
            format!("SIGRTMIN+{}", s - libc::SIGRTMIN())
        }
        s => format!("signal {s}"),
    }
}

/// Finds the first sanitizer report in a program's stderr: AddressSanitizer and its
/// relatives (`==PID==ERROR: AddressSanitizer: KIND on …`), ThreadSanitizer
/// (`WARNING: ThreadSanitizer: KIND (pid=…)`) and UndefinedBehaviorSanitizer
/// (`FILE:LINE:COL: runtime error: KIND`).
pub fn parse_sanitizer_report(stderr: &str) -> Option<SanitizerReport> {
    static PATTERNS: OnceLock<[Regex; 3]> = OnceLock::new();
    let [asan, tsan, ubsan] = PATTERNS.get_or_init(|| {
        [
            Regex::new(r"^(?:==\d+==)?ERROR: (\w+Sanitizer): (.*)$").unwrap(),
            Regex::new(r"^(?:==\d+==)?WARNING: (ThreadSanitizer): (.*)$").unwrap(),
            Regex::new(r"^(\S+?):(\d+)(?::\d+)?: runtime error: (.*)$").unwrap(),
        ]
    });
    let lines: Vec<&str> = stderr.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let line = line.trim_end();
        let report = if let Some(c) = asan.captures(line).or_else(|| tsan.captures(line)) {
            let body = c[2].to_string();
            // `heap-use-after-free on address 0x…`, `data race (pid=12)`.
            let kind = body
                .split(" on ")
                .next()
                .unwrap_or(&body)
                .split(" (pid=")
                .next()
                .unwrap_or(&body)
                .trim()
                .to_string();
            let first_line = line
                .trim_start_matches(|c: char| c == '=' || c.is_ascii_digit())
                .to_string();
            SanitizerReport {
                tool: c[1].to_string(),
                kind,
                first_line,
                top_frame: top_user_frame(&lines[i + 1..]),
            }
        } else if let Some(c) = ubsan.captures(line) {
            let body = c[3].to_string();
            let kind = body.split(": ").next().unwrap_or(&body).trim().to_string();
            let file = c[1].rsplit('/').next().unwrap_or(&c[1]);
            SanitizerReport {
                tool: "UndefinedBehaviorSanitizer".to_string(),
                kind,
                first_line: line.to_string(),
                top_frame: Some(format!("{file}:{}", &c[2])),
            }
        } else {
            continue;
        };
        return Some(report);
    }
    None
}

/// The first frame of a sanitizer stack trace in the program's own code, as
/// `FUNCTION at FILE:LINE` (the file's last component), or the raw frame when it
/// was not symbolized. Frames of the sanitizer runtime, the agent, libc and the
/// loader are skipped; the search stops at the end of the first stack trace.
fn top_user_frame(lines: &[&str]) -> Option<String> {
    static FRAME: OnceLock<[Regex; 2]> = OnceLock::new();
    // ASan: `#0 0x55d3 in worker /src/uaf.c:42:7`; TSan: `#0 worker /src/uaf.c:42
    // (prog+0x1234)`; unsymbolized: `#0 0x401234  (/path/prog+0x1234)`. C++ names
    // hold spaces (`main::{lambda()#1}::operator()() const`): the location is the
    // last `FILE:LINE[:COL]` token, the function everything before it.
    let [frame, location] = FRAME.get_or_init(|| {
        [
            Regex::new(r"^\s*#\d+ (?:0x[0-9a-f]+ )?(?:in )?(.*?)\s*(\([^()]*\+0x[0-9a-f]+\))?$")
                .unwrap(),
            Regex::new(r"^(.*?)\s*([^\s:]+):(\d+)(?::\d+)?$").unwrap(),
        ]
    });
    const RUNTIME: [&str; 14] = [
        "libsanitizer",
        "compiler-rt",
        "sanitizer_common",
        "libasan",
        "libtsan",
        "libubsan",
        "liblsan",
        "libclang_rt",
        "libordo_preload",
        "libc.so",
        "ld-linux",
        "sysdeps/",
        "nptl/",
        "csu/",
    ];
    const RUNTIME_FUNCTIONS: [&str; 7] = [
        "__interceptor_",
        "__asan",
        "__tsan",
        "__sanitizer",
        "__ubsan",
        "__libc_",
        "ordo_preload::",
    ];
    // Headers of the C++ library and the compiler: inlined library code, not the
    // program's.
    const SYSTEM: [&str; 3] = ["/usr/include/", "/include/c++/", "/lib/gcc/"];
    let mut seen_frames = false;
    let mut fallback = None;
    for line in lines {
        // clang's runtimes end a frame with ` (BuildId: …)`.
        let line = match line.find(" (BuildId: ") {
            Some(i) => &line[..i],
            None => line,
        };
        let Some(c) = frame.captures(line) else {
            if seen_frames && line.trim().is_empty() {
                break;
            }
            continue;
        };
        seen_frames = true;
        let body = c.get(1).map_or("", |m| m.as_str());
        let module = c.get(2).map_or("", |m| m.as_str());
        let (function, file, line_no) = match location.captures(body) {
            Some(l) => (
                l.get(1).map_or("", |m| m.as_str()),
                l.get(2).map_or("", |m| m.as_str()),
                l.get(3).map_or("", |m| m.as_str()),
            ),
            None => (body, "", ""),
        };
        if RUNTIME_FUNCTIONS.iter().any(|f| function.starts_with(f))
            || RUNTIME
                .iter()
                .any(|r| file.contains(r) || module.contains(r))
        {
            continue;
        }
        let system = SYSTEM.iter().any(|d| file.contains(d));
        if file.is_empty() || file == "<null>" || system {
            // No line information, or library code inlined from a header: the
            // answer only if no frame of the program's own source follows.
            if fallback.is_none() {
                fallback = Some(if system {
                    format!(
                        "{function} at {}:{line_no}",
                        file.rsplit('/').next().unwrap_or(file)
                    )
                } else {
                    format!("{function} {module}").trim().to_string()
                });
            }
            continue;
        }
        let file = file.rsplit('/').next().unwrap_or(file);
        return Some(format!("{function} at {file}:{line_no}").trim().to_string());
    }
    fallback
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fail_on_parses_every_kind_and_rejects_bad_values() {
        for s in ["exit", "signal", "hang", "sanitizer", "stderr:^panic"] {
            assert_eq!(s.parse::<FailOn>().unwrap().to_string(), s);
        }
        assert!("stderr:("
            .parse::<FailOn>()
            .unwrap_err()
            .contains("bad regular expression"));
        assert!("stderr:".parse::<FailOn>().is_err());
        assert!("crash"
            .parse::<FailOn>()
            .unwrap_err()
            .contains("expected exit"));
    }

    #[test]
    fn expect_exit_and_fail_on_decide_the_judgement() {
        let default = Oracle::default();
        assert!(default.judge(&Ending::Exited { code: 1 }, None).failed);
        assert!(default.judge(&Ending::Signaled { signal: 11 }, None).failed);
        assert!(default.judge(&Ending::Deadlock("x".into()), None).failed);
        let three = Oracle::new(3, vec![FailOn::Exit]);
        assert!(!three.judge(&Ending::Exited { code: 3 }, None).failed);
        assert!(three.judge(&Ending::Exited { code: 0 }, None).failed);
        // Signals are not failures for this oracle, but the evidence names them.
        let j = three.judge(&Ending::Signaled { signal: 6 }, None);
        assert!(!j.failed);
        assert_eq!(j.evidence.signal_name.as_deref(), Some("SIGABRT"));
    }

    #[test]
    fn sanitizer_reports_are_read_with_their_top_user_frame() {
        let asan = "=================================================================\n\
==4242==ERROR: AddressSanitizer: heap-use-after-free on address 0x602000000010 at pc 0x1 bp 0x2 sp 0x3\n\
READ of size 4 at 0x602000000010 thread T2\n\
    #0 0x55d3a1 in __interceptor_memcpy ../../../../src/libsanitizer/sanitizer_common/x.inc:827\n\
    #1 0x55d3a2 in worker /home/u/uaf.c:42\n\
    #2 0x7f01 in asan_thread_start ../../../../src/libsanitizer/asan/asan_interceptors.cpp:234\n";
        let r = parse_sanitizer_report(asan).unwrap();
        assert_eq!(r.tool, "AddressSanitizer");
        assert_eq!(r.kind, "heap-use-after-free");
        assert!(r
            .first_line
            .starts_with("ERROR: AddressSanitizer: heap-use-after-free"));
        assert_eq!(r.top_frame.as_deref(), Some("worker at uaf.c:42"));
        let tsan = "==================\nWARNING: ThreadSanitizer: data race (pid=77)\n  Write of size 4 at 0x1 by thread T1:\n    #0 bump /src/race.c:9 (race+0x11a9)\n";
        let r = parse_sanitizer_report(tsan).unwrap();
        assert_eq!(
            (r.tool.as_str(), r.kind.as_str()),
            ("ThreadSanitizer", "data race")
        );
        assert_eq!(r.top_frame.as_deref(), Some("bump at race.c:9"));
        let cxx = "==9==ERROR: AddressSanitizer: heap-use-after-free on address 0x1\n\
    #0 0x4011 in main::{lambda()#1}::operator()() const /src/cache.cpp:21:12\n";
        let r = parse_sanitizer_report(cxx).unwrap();
        assert_eq!(
            r.top_frame.as_deref(),
            Some("main::{lambda()#1}::operator()() const at cache.cpp:21")
        );
        let raw = "WARNING: ThreadSanitizer: data race (pid=1)\n    #0 <null> (prog+0x11a9)\n";
        let r = parse_sanitizer_report(raw).unwrap();
        assert_eq!(r.top_frame.as_deref(), Some("<null> (prog+0x11a9)"));
        let ubsan = "/src/ub.c:12:9: runtime error: signed integer overflow: 2147483647 + 1 cannot be represented in type 'int'\n";
        let r = parse_sanitizer_report(ubsan).unwrap();
        assert_eq!(r.kind, "signed integer overflow");
        assert_eq!(r.top_frame.as_deref(), Some("ub.c:12"));
        assert!(parse_sanitizer_report("all fine\n").is_none());
    }
}
