//! `ordo` facing hostile or damaged input as a user runs it, on traces made by
//! hand: module paths naming FIFOs and devices, terminal escapes in thread names,
//! damaged footers, output paths that are inputs or symlinks, out-of-range
//! options, a closed stderr. Each ends in output or a one-line error, never a hang
//! or a panic.

use crate::common;

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ordo_analysis::synthetic::TraceBuilder;
use ordo_trace::schema::{Mapping, ModuleRecord};

const ESCAPE_NAME: &str = "evil\x1b]0;pwned\x07\x1b[2J";

/// Two threads taking two locks in opposite orders (a deadlock finding), the
/// worker named with terminal escapes, sites inside a module at `module_path`.
fn trace(path: &Path, module_path: Option<&str>) {
    let mut b = TraceBuilder::new();
    let (t1, _) = b.ab_ba(0xa0, 0xb0, 0x40_1000);
    b.name_thread(t1, ESCAPE_NAME);
    b.command = vec!["./prog\x1b[31m".into(), "--x".into()];
    if let Some(m) = module_path {
        b.modules.push(ModuleRecord {
            path: m.to_string(),
            build_id: String::new(),
            mappings: vec![Mapping {
                start: 0x40_0000,
                end: 0x50_0000,
                file_offset: 0,
            }],
        });
    }
    b.write_to(path).unwrap();
}

/// Runs ordo with stdin an open pipe nobody writes to (so reading /dev/stdin would
/// block), killing it after 30 s; returns (exit code, stdout, stderr).
fn run_guarded(args: &[&str]) -> (Option<i32>, Vec<u8>, String) {
    let mut child = Command::new(common::ordo())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _stdin = child.stdin.take();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stdout.read_to_end(&mut v);
        v
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("ordo {args:?} hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = reader.join().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status.code(), out, err)
}

#[test]
fn module_paths_naming_fifos_and_devices_neither_hang_nor_eat_memory() {
    let dir = common::scratch("trust_modules");
    let fifo = dir.join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    for module in [fifo.to_str().unwrap(), "/dev/zero", "/dev/stdin"] {
        let t = dir.join("t.ordo");
        trace(&t, Some(module));
        for command in ["dump", "analyze"] {
            let (code, out, err) = run_guarded(&[command, t.to_str().unwrap()]);
            assert_eq!(code, Some(0), "{command} {module}: {err}");
            // Sites are named by module and offset instead.
            let text = String::from_utf8_lossy(&out);
            assert!(text.contains("+0x"), "{command} {module}: {text}");
        }
    }
}

#[test]
fn terminal_escapes_from_the_trace_never_reach_the_terminal() {
    let dir = common::scratch("trust_escapes");
    let t = dir.join("t.ordo");
    trace(&t, None);
    for args in [vec!["dump"], vec!["analyze"]] {
        let (code, out, err) = run_guarded(&[args.as_slice(), &[t.to_str().unwrap()]].concat());
        assert_eq!(code, Some(0), "{err}");
        assert!(
            !out.iter().any(|&b| b == 0x1b || b == 0x07),
            "{args:?} printed a control character"
        );
        let text = String::from_utf8(out).unwrap();
        if args == ["dump"] {
            assert!(text.contains("evil\\x1b]0;pwned\\x07"), "{text}");
            assert!(text.contains("./prog\\x1b[31m"), "{text}");
        }
    }
    // Perfetto track names and the command line are escaped too.
    let pf = dir.join("t.pftrace");
    let (code, _, err) = run_guarded(&[
        "export",
        "--perfetto",
        t.to_str().unwrap(),
        "-o",
        pf.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{err}");
    let decoded = ordo_analysis::perfetto::Trace::from_bytes(&std::fs::read(&pf).unwrap()).unwrap();
    let mut names = 0;
    for p in &decoded.packet {
        if let Some(d) = &p.track_descriptor {
            let name = d.name.clone().unwrap_or_default();
            assert!(!name.chars().any(char::is_control), "{name:?}");
            names += name.contains("evil\\x1b") as usize;
            if let Some(proc_) = &d.process {
                assert!(proc_
                    .cmdline
                    .iter()
                    .all(|c| !c.chars().any(char::is_control)));
            }
        }
    }
    assert_eq!(names, 1);
}

#[test]
fn damaged_footer_suggests_salvage_and_salvage_analyzes_the_chunks() {
    let dir = common::scratch("trust_salvage");
    let t = dir.join("t.ordo");
    trace(&t, None);
    let mut bytes = std::fs::read(&t).unwrap();
    let n = bytes.len();
    let footer = u64::from_le_bytes(bytes[n - 16..n - 8].try_into().unwrap()) as usize;
    bytes[footer + 12] ^= 0xff;
    std::fs::write(&t, &bytes).unwrap();
    for command in ["analyze", "dump"] {
        let (code, _, err) = run_guarded(&[command, t.to_str().unwrap()]);
        assert_eq!(code, Some(2), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains("t.ordo: at byte") && err.contains("--salvage"),
            "{err}"
        );
        let (code, out, err) = run_guarded(&[command, "--salvage", t.to_str().unwrap()]);
        assert_eq!(code, Some(0), "{command} --salvage: {err}");
        assert!(err.contains("warning"), "{err}");
        if command == "analyze" {
            assert!(String::from_utf8_lossy(&out).contains("deadlock"));
        }
    }
}

#[test]
fn outputs_never_overwrite_inputs_or_follow_symlinks() {
    let dir = common::scratch("trust_outputs");
    let t = dir.join("t.ordo");
    trace(&t, None);
    let original = std::fs::read(&t).unwrap();
    let export = |out: &Path, force: bool| {
        let mut args = vec![
            "export",
            "--perfetto",
            t.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ];
        if force {
            args.push("--force");
        }
        run_guarded(&args)
    };
    // The input itself, by name or through a symlink, even with --force.
    let link_to_input = dir.join("link.pftrace");
    std::os::unix::fs::symlink(&t, &link_to_input).unwrap();
    for out in [&t, &link_to_input] {
        let (code, _, err) = export(out, true);
        assert_eq!(code, Some(2), "{err}");
        assert!(
            err.contains("refusing to overwrite") && err.lines().count() == 1,
            "{err}"
        );
    }
    assert_eq!(std::fs::read(&t).unwrap(), original);
    // An existing file needs --force.
    let existing = dir.join("existing.pftrace");
    std::fs::write(&existing, b"keep").unwrap();
    let (code, _, err) = export(&existing, false);
    assert_eq!(code, Some(2));
    assert!(err.contains("use --force"), "{err}");
    assert_eq!(std::fs::read(&existing).unwrap(), b"keep");
    let (code, _, err) = export(&existing, true);
    assert_eq!(code, Some(0), "{err}");
    assert_ne!(std::fs::read(&existing).unwrap(), b"keep");
    // A symlink to another file: refused, then with --force the link is replaced
    // and its target untouched.
    let victim = dir.join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let planted = dir.join("planted.pftrace");
    std::os::unix::fs::symlink(&victim, &planted).unwrap();
    let (code, _, err) = export(&planted, false);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("symlink"), "{err}");
    let (code, _, err) = export(&planted, true);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert!(!std::fs::symlink_metadata(&planted)
        .unwrap()
        .file_type()
        .is_symlink());
    // A device is never replaced.
    let (code, _, err) = export(Path::new("/dev/null"), true);
    assert_eq!(code, Some(2), "{err}");
    assert!(Path::new("/dev/null")
        .metadata()
        .unwrap()
        .file_type()
        .is_char_device_like());
    // No temporary file is left behind.
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

trait CharDevice {
    fn is_char_device_like(&self) -> bool;
}

impl CharDevice for std::fs::FileType {
    fn is_char_device_like(&self) -> bool {
        std::os::unix::fs::FileTypeExt::is_char_device(self)
    }
}

#[test]
fn out_of_range_options_and_a_closed_stderr_are_not_panics() {
    for value in ["1e30", "-1", "0", "nan", "inf", "soon"] {
        let option = format!("--timeout={value}");
        let out = common::run_ordo(&["replay", &option, "--schedule", "x", "--", "true"]);
        assert_eq!(out.status.code(), Some(2), "--timeout {value}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with("ordo: ") && err.contains("--timeout"),
            "{err}"
        );
    }
    // `ordo dump missing 2>&-`: the error has nowhere to go, and that is no panic.
    let out = Command::new(common::ordo())
        .args(["dump", "/nonexistent/t.ordo"])
        .stdout(Stdio::null())
        .process_group(0)
        .pre_exec_close_stderr()
        .status()
        .unwrap();
    assert_eq!(out.code(), Some(2));
}

trait CloseStderr {
    fn pre_exec_close_stderr(&mut self) -> &mut Self;
}

impl CloseStderr for Command {
    fn pre_exec_close_stderr(&mut self) -> &mut Self {
        // SAFETY: close(2) is async-signal-safe.
        unsafe {
            self.pre_exec(|| {
                libc::close(2);
                Ok(())
            })
        }
    }
}
