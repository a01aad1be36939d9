//! Starting a program so that probes are attached before its first instruction runs.
//!
//! The child is forked and then blocks on a pipe before `exec`; the recorder learns
//! its pid through a second pipe, attaches probes scoped to that pid (uprobes are
//! per-inode, so they apply after `exec` too), and releases it. Raising SIGSTOP in
//! `pre_exec` would deadlock `Command::spawn`, which waits for the `exec`.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::thread::JoinHandle;

use anyhow::{anyhow, bail, Context, Result};

mod entry_stop;
pub use entry_stop::EntryStop;

/// A forked child waiting, before `exec`, for [`StoppedChild::release`].
pub struct StoppedChild {
    pid: u32,
    release: Option<OwnedFd>,
    spawner: Option<JoinHandle<io::Result<Child>>>,
}

impl StoppedChild {
    /// The child's process id (unchanged by `exec`).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Lets the child `exec` the program; returns it once `exec` succeeded.
    pub fn release(self) -> Result<Child> {
        self.release_and_join()
    }

    /// Like [`release`](Self::release), and holds the program at its entry point
    /// (its libraries mapped, none of its own code run yet) while `at_entry` runs;
    /// says whether it could (see [`EntryStop`]: when it could not, `at_entry` did
    /// not run and the program runs on normally).
    pub fn release_held_at_entry(
        mut self,
        at_entry: &mut dyn FnMut(),
    ) -> Result<(Child, EntryStop)> {
        let pid = self.pid as i32;
        if !entry_stop::seize(pid) {
            return Ok((self.release_and_join()?, EntryStop::NotHeld));
        }
        self.write_release();
        let held = entry_stop::run_to_entry(pid, at_entry);
        Ok((self.join_spawner()?, held))
    }

    fn release_and_join(mut self) -> Result<Child> {
        self.write_release();
        self.join_spawner()
    }

    fn write_release(&mut self) {
        let fd = self.release.take().expect("released once");
        let byte = [1u8];
        // SAFETY: writing one byte to a pipe we own.
        unsafe { libc::write(fd.as_raw_fd(), byte.as_ptr().cast(), 1) };
        drop(fd);
    }

    fn join_spawner(mut self) -> Result<Child> {
        let spawner = self.spawner.take().expect("released once");
        spawner
            .join()
            .map_err(|_| anyhow!("the spawning thread panicked"))?
            .context("exec failed")
    }
}

impl Drop for StoppedChild {
    fn drop(&mut self) {
        // Not released: closing the pipe makes the child exit instead of exec'ing.
        self.release.take();
        if let Some(spawner) = self.spawner.take() {
            let _ = spawner.join();
        }
    }
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid array of two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 returned two new descriptors we now own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Finds `program` the way a shell would and checks it can be executed, so a typo
/// is reported before anything is loaded into the kernel.
pub fn find_program(program: &str) -> Result<PathBuf> {
    let candidates: Vec<PathBuf> = if program.contains('/') {
        vec![PathBuf::from(program)]
    } else {
        std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).map(|d| d.join(program)).collect())
            .unwrap_or_default()
    };
    let mut denied = None;
    for path in &candidates {
        match std::fs::metadata(path) {
            Ok(meta) => {
                use std::os::unix::fs::PermissionsExt;
                if meta.is_dir() {
                    bail!("{program}: is a directory");
                }
                if meta.permissions().mode() & 0o111 == 0 {
                    bail!("{program}: is not executable");
                }
                return Ok(path.clone());
            }
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                denied.get_or_insert_with(|| path.clone());
            }
            Err(_) => {}
        }
    }
    if let Some(path) = denied {
        bail!(
            "{}: permission denied (a directory on its path cannot be searched by this user)",
            path.display()
        );
    }
    if program.contains('/') {
        bail!("{program}: no such file");
    }
    bail!("{program}: command not found in PATH");
}

/// Forks `command` with extra environment `env`, stopped before `exec`.
pub fn spawn_stopped(command: &[String], env: &[(OsString, OsString)]) -> Result<StoppedChild> {
    spawn_stopped_with(command, env, false)
}

/// Load address of a position-independent executable started without address-space
/// randomization (x86_64, 47-bit user space: two thirds of the address space).
pub const NO_ASLR_PIE_BASE: u64 = 0x5555_5555_4000;

/// Like [`spawn_stopped`]; with `no_aslr` the program runs without address-space
/// randomization, so the addresses of its globals are known before it starts
/// (hardware watchpoints must be armed with runtime addresses).
pub fn spawn_stopped_with(
    command: &[String],
    env: &[(OsString, OsString)],
    no_aslr: bool,
) -> Result<StoppedChild> {
    spawn_stopped_inheriting(command, env, no_aslr, &[])
}

/// Like [`spawn_stopped_with`], and the program inherits the descriptors `inherit`
/// (close-on-exec here, so no other child of the recorder gets them: the flag is
/// cleared in the forked child only, just before `exec`).
pub fn spawn_stopped_inheriting(
    command: &[String],
    env: &[(OsString, OsString)],
    no_aslr: bool,
    inherit: &[i32],
) -> Result<StoppedChild> {
    spawn_stopped_redirected(command, env, no_aslr, inherit, ChildOutput::default())
}

/// Where a started program's stdout and stderr go: each `None` is inherited.
#[derive(Debug, Default)]
pub struct ChildOutput {
    /// The program's standard output.
    pub stdout: Option<OwnedFd>,
    /// The program's standard error.
    pub stderr: Option<OwnedFd>,
}

/// Like [`spawn_stopped_inheriting`], with the program's stdout and stderr sent
/// where `output` says (e.g. a pipe `ordo replay` reads sanitizer reports from).
pub fn spawn_stopped_redirected(
    command: &[String],
    env: &[(OsString, OsString)],
    no_aslr: bool,
    inherit: &[i32],
    output: ChildOutput,
) -> Result<StoppedChild> {
    let inherit = inherit.to_vec();
    let Some(program) = command.first() else {
        bail!("no command given");
    };
    let path = find_program(program)?;
    let (pid_read, pid_write) = pipe().context("pipe")?;
    let (release_read, release_write) = pipe().context("pipe")?;
    let mut cmd = Command::new(&path);
    cmd.arg0(program).args(&command[1..]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    if let Some(fd) = output.stdout {
        cmd.stdout(fd);
    }
    if let Some(fd) = output.stderr {
        cmd.stderr(fd);
    }
    let (pid_w, rel_r) = (pid_write.as_raw_fd(), release_read.as_raw_fd());
    let (pid_r, rel_w) = (pid_read.as_raw_fd(), release_write.as_raw_fd());
    // SAFETY: the closure only calls async-signal-safe functions (fcntl, getpid,
    // write, read).
    unsafe {
        cmd.pre_exec(move || {
            if no_aslr {
                const ADDR_NO_RANDOMIZE: libc::c_ulong = 0x0040000;
                libc::personality(ADDR_NO_RANDOMIZE);
            }
            // The child's copies of our ends: without closing them it would never see
            // end-of-file when the recorder gives up without releasing it.
            libc::close(pid_r);
            libc::close(rel_w);
            for &fd in &inherit {
                libc::fcntl(fd, libc::F_SETFD, 0);
            }
            let pid = libc::getpid();
            libc::write(pid_w, (&pid as *const i32).cast(), 4);
            let mut byte = 0u8;
            loop {
                let n = libc::read(rel_r, (&mut byte as *mut u8).cast(), 1);
                if n == 1 {
                    return Ok(());
                }
                if n == 0 || *libc::__errno_location() != libc::EINTR {
                    return Err(io::Error::other(
                        "the recorder went away before releasing the program",
                    ));
                }
            }
        });
    }
    let spawner = std::thread::spawn(move || {
        let child = cmd.spawn();
        drop(pid_write);
        drop(release_read);
        child
    });
    let mut pid = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        // SAFETY: reading into our own buffer.
        let n = unsafe {
            libc::read(
                pid_read.as_raw_fd(),
                pid[got..].as_mut_ptr().cast(),
                4 - got,
            )
        };
        if n <= 0 {
            let err = io::Error::last_os_error();
            if n < 0 && err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            let spawn_err = spawner.join().ok().and_then(|r| r.err());
            return Err(anyhow!(
                "cannot start {}: {}",
                path.display(),
                spawn_err
                    .map(|e| e.to_string())
                    .unwrap_or_else(|| "fork failed".into())
            ));
        }
        got += n as usize;
    }
    Ok(StoppedChild {
        pid: i32::from_ne_bytes(pid) as u32,
        release: Some(release_write),
        spawner: Some(spawner),
    })
}

/// Whether `path` has the setuid or setgid bit: the dynamic loader runs such a
/// program in secure mode and ignores `LD_PRELOAD` paths.
pub fn is_setuid(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o6000 != 0)
}

/// Whether `path` is a dynamically linked ELF (has an interpreter): statically linked
/// programs do not use libc.so.6, so the pthread probes cannot see them.
pub fn is_dynamic(path: &Path) -> bool {
    use object::Object;
    let Ok(data) = crate::file_bytes::read(path) else {
        return true;
    };
    match object::File::parse(&data[..]) {
        Ok(file) => {
            file.section_by_name(".interp").is_some() || file.kind() == object::ObjectKind::Dynamic
        }
        Err(_) => true,
    }
}

/// The libraries `binary` will load, found the way the dynamic loader looks for them
/// (LD_LIBRARY_PATH, RUNPATH, the multiarch directories), for resolving watched
/// variables that live in a library before the program runs.
pub fn needed_libraries(binary: &Path) -> Vec<PathBuf> {
    use object::read::elf::{Dyn, ElfFile64, FileHeader};
    let Ok(data) = crate::file_bytes::read(binary) else {
        return Vec::new();
    };
    let Ok(file) = ElfFile64::<object::Endianness>::parse(&data[..]) else {
        return Vec::new();
    };
    let endian = file.endian();
    let header = file.elf_header();
    let Ok(Some((dynamic, index))) = header
        .sections(endian, &data[..])
        .map(|s| s.dynamic(endian, &data[..]).ok().flatten())
    else {
        return Vec::new();
    };
    let Ok(sections) = header.sections(endian, &data[..]) else {
        return Vec::new();
    };
    let Ok(strings) = sections.strings(endian, &data[..], index) else {
        return Vec::new();
    };
    let mut needed = Vec::new();
    let mut search: Vec<PathBuf> = std::env::var_os("LD_LIBRARY_PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    for d in dynamic {
        let tag = d.d_tag(endian) as u32;
        let Ok(value) = d.string(endian, strings) else {
            continue;
        };
        let value = String::from_utf8_lossy(value).into_owned();
        match tag {
            object::elf::DT_NEEDED => needed.push(value),
            object::elf::DT_RUNPATH | object::elf::DT_RPATH => {
                let origin = binary
                    .parent()
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default();
                search.extend(
                    value
                        .split(':')
                        .map(|p| PathBuf::from(p.replace("$ORIGIN", &origin))),
                );
            }
            _ => {}
        }
    }
    search.extend(
        [
            "/lib/x86_64-linux-gnu",
            "/usr/lib/x86_64-linux-gnu",
            "/lib64",
            "/usr/lib",
            "/lib",
        ]
        .map(PathBuf::from),
    );
    needed
        .iter()
        .filter_map(|name| search.iter().map(|dir| dir.join(name)).find(|p| p.exists()))
        .collect()
}

/// Whether a library's file name is a sanitizer runtime (gcc's `libasan.so.8`,
/// `libtsan.so.2`, `libubsan.so.1`, `liblsan.so.0`, `libhwasan.so.0`; clang's
/// `libclang_rt.asan-x86_64.so` and relatives).
fn is_sanitizer_runtime(name: &str) -> bool {
    [
        "libasan.so",
        "libtsan.so",
        "libubsan.so",
        "liblsan.so",
        "libhwasan.so",
    ]
    .iter()
    .any(|p| name.starts_with(p))
        || (name.starts_with("libclang_rt.") && name.contains(".so"))
}

/// The sanitizer runtimes `binary` links dynamically (its `DT_NEEDED`), resolved the
/// way the loader finds them. A preloaded library must come after them: ASan
/// refuses to start unless its runtime is the first library loaded.
pub fn sanitizer_runtimes(binary: &Path) -> Vec<PathBuf> {
    needed_libraries(binary)
        .into_iter()
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(is_sanitizer_runtime)
        })
        .collect()
}

/// Whether `binary` is a sanitizer build: it links a sanitizer runtime dynamically,
/// or refers to (or, linked statically as clang does by default, defines) a
/// runtime entry point such as `__asan_init`, `__tsan_init` or a
/// `__ubsan_handle_…` handler. Its reports then go to stderr.
pub fn is_sanitizer_build(binary: &Path) -> bool {
    use object::{Object, ObjectSymbol};
    if !sanitizer_runtimes(binary).is_empty() {
        return true;
    }
    let Ok(data) = crate::file_bytes::read(binary) else {
        return false;
    };
    let Ok(file) = object::File::parse(&data[..]) else {
        return false;
    };
    file.dynamic_symbols().chain(file.symbols()).any(|s| {
        s.name().is_ok_and(|n| {
            n.starts_with("__asan_init")
                || n == "__tsan_init"
                || n.starts_with("__ubsan_handle_")
                || n.starts_with("__hwasan_init")
        })
    })
}
