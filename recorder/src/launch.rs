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

/// What launching needs of a 64-bit ELF executable, read from its headers and
/// dynamic section alone (a Rust binary is ~5 MB, and these answers decide which
/// probes start loading and what is preloaded).
#[derive(Debug, Default, PartialEq)]
struct ElfHead {
    /// It has an interpreter, or is position-independent.
    dynamic: bool,
    /// `ET_DYN`: position-independent.
    pie: bool,
    /// `DT_NEEDED` names, in order.
    needed: Vec<String>,
    /// `DT_RUNPATH` and `DT_RPATH` strings, in order.
    run_paths: Vec<String>,
}

impl ElfHead {
    /// Reads the headers of the file at `path`; `None` when it is not a
    /// little-endian 64-bit ELF or its headers do not hold together.
    fn read(path: &Path) -> Option<ElfHead> {
        use object::read::elf::{Dyn, FileHeader, ProgramHeader};
        use std::os::unix::fs::FileExt;
        let file = std::fs::File::open(path).ok()?;
        let at = |offset: u64, len: u64| -> Option<Vec<u8>> {
            let mut bytes = vec![0; usize::try_from(len).ok().filter(|&n| n <= 64 << 20)?];
            file.read_exact_at(&mut bytes, offset).ok()?;
            Some(bytes)
        };
        let mut head = vec![0u8; 4096];
        let n = file.read_at(&mut head, 0).ok()?;
        head.truncate(n);
        let header = object::elf::FileHeader64::<object::Endianness>::parse(&head[..]).ok()?;
        let endian = header.endian().ok()?;
        let wanted = header.e_phoff(endian)
            + u64::from(header.e_phnum(endian)) * u64::from(header.e_phentsize(endian));
        if wanted > head.len() as u64 {
            head = at(0, wanted)?;
        }
        let header = object::elf::FileHeader64::<object::Endianness>::parse(&head[..]).ok()?;
        let segments = header.program_headers(endian, &head[..]).ok()?;
        let pie = header.e_type(endian) == object::elf::ET_DYN;
        let mut elf = ElfHead {
            dynamic: pie
                || segments
                    .iter()
                    .any(|s| s.p_type(endian) == object::elf::PT_INTERP),
            pie,
            ..ElfHead::default()
        };
        let Some(dynamic) = segments
            .iter()
            .find(|s| s.p_type(endian) == object::elf::PT_DYNAMIC)
        else {
            return Some(elf);
        };
        let dynamic = at(dynamic.p_offset(endian), dynamic.p_filesz(endian))?;
        let entries: &[object::elf::Dyn64<object::Endianness>] =
            object::pod::slice_from_all_bytes(&dynamic[..dynamic.len() / 16 * 16]).ok()?;
        let value = |tag: u32| {
            entries
                .iter()
                .find(|d| d.d_tag(endian) == u64::from(tag))
                .map(|d| d.d_val(endian))
        };
        let (table, size) = (
            value(object::elf::DT_STRTAB)?,
            value(object::elf::DT_STRSZ)?,
        );
        let load = segments.iter().find(|s| {
            s.p_type(endian) == object::elf::PT_LOAD
                && s.p_vaddr(endian) <= table
                && table + size <= s.p_vaddr(endian) + s.p_filesz(endian)
        })?;
        let strings = at(table - load.p_vaddr(endian) + load.p_offset(endian), size)?;
        let string = |offset: u64| -> Option<String> {
            let rest = strings.get(usize::try_from(offset).ok()?..)?;
            let end = rest.iter().position(|&b| b == 0)?;
            Some(String::from_utf8_lossy(&rest[..end]).into_owned())
        };
        for d in entries {
            let tag = d.d_tag(endian);
            if tag == u64::from(object::elf::DT_NULL) {
                break;
            }
            let Ok(tag) = u32::try_from(tag) else {
                continue;
            };
            match tag {
                object::elf::DT_NEEDED => elf.needed.extend(string(d.d_val(endian))),
                object::elf::DT_RUNPATH | object::elf::DT_RPATH => {
                    elf.run_paths.extend(string(d.d_val(endian)))
                }
                _ => {}
            }
        }
        Some(elf)
    }

    /// As [`ElfHead::read`], from the whole file (section headers and all): for
    /// what the headers alone did not answer.
    fn read_whole(path: &Path) -> Option<ElfHead> {
        use object::read::elf::{Dyn, ElfFile64, FileHeader};
        use object::Object;
        let data = crate::file_bytes::read(path).ok()?;
        let parsed = object::File::parse(&data[..]).ok()?;
        let pie = parsed.kind() == object::ObjectKind::Dynamic;
        let mut elf = ElfHead {
            dynamic: pie || parsed.section_by_name(".interp").is_some(),
            pie,
            ..ElfHead::default()
        };
        let Ok(file) = ElfFile64::<object::Endianness>::parse(&data[..]) else {
            return Some(elf);
        };
        let endian = file.endian();
        let header = file.elf_header();
        let Ok(Some((dynamic, index))) = header
            .sections(endian, &data[..])
            .map(|s| s.dynamic(endian, &data[..]).ok().flatten())
        else {
            return Some(elf);
        };
        let sections = header.sections(endian, &data[..]).ok()?;
        let strings = sections.strings(endian, &data[..], index).ok()?;
        for d in dynamic {
            let Ok(value) = d.string(endian, strings) else {
                continue;
            };
            let value = String::from_utf8_lossy(value).into_owned();
            match d.d_tag(endian) as u32 {
                object::elf::DT_NEEDED => elf.needed.push(value),
                object::elf::DT_RUNPATH | object::elf::DT_RPATH => elf.run_paths.push(value),
                _ => {}
            }
        }
        Some(elf)
    }

    /// The headers of `path`, cheaply when they can be.
    fn of(path: &Path) -> Option<ElfHead> {
        Self::read(path).or_else(|| Self::read_whole(path))
    }
}

/// Whether `path` is a dynamically linked ELF (has an interpreter): statically linked
/// programs do not use libc.so.6, so the pthread probes cannot see them. A file
/// that is not an ELF (a script) counts as dynamic.
pub fn is_dynamic(path: &Path) -> bool {
    ElfHead::of(path).is_none_or(|elf| elf.dynamic)
}

/// Whether `path` is a position-independent executable (`ET_DYN`).
pub fn is_pie(path: &Path) -> bool {
    ElfHead::of(path).is_some_and(|elf| elf.pie)
}

/// The libraries `binary` will load, found the way the dynamic loader looks for them
/// (LD_LIBRARY_PATH, RUNPATH, the multiarch directories), for resolving watched
/// variables that live in a library before the program runs.
pub fn needed_libraries(binary: &Path) -> Vec<PathBuf> {
    let Some(elf) = ElfHead::of(binary) else {
        return Vec::new();
    };
    let mut search: Vec<PathBuf> = std::env::var_os("LD_LIBRARY_PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    let origin = binary
        .parent()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    for run_path in &elf.run_paths {
        search.extend(
            run_path
                .split(':')
                .map(|p| PathBuf::from(p.replace("$ORIGIN", &origin))),
        );
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
    elf.needed
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The headers-only reading answers as the whole file does, on programs and
    /// libraries of this machine, a static binary among them when gcc can link one.
    #[test]
    fn headers_alone_answer_as_the_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut files: Vec<PathBuf> = ["/bin/ls", "/bin/sh", "/lib/x86_64-linux-gnu/libc.so.6"]
            .iter()
            .map(PathBuf::from)
            .filter(|p| p.exists())
            .collect();
        files.push(std::env::current_exe().unwrap());
        let source = dir.path().join("s.c");
        std::fs::write(&source, "int main(void) { return 0; }\n").unwrap();
        let static_binary = dir.path().join("s");
        let linked = std::process::Command::new("gcc")
            .arg("-static")
            .arg("-o")
            .arg(&static_binary)
            .arg(&source)
            .status()
            .is_ok_and(|s| s.success());
        if linked {
            files.push(static_binary.clone());
            assert!(!is_dynamic(&static_binary));
        }
        assert!(!files.is_empty());
        for file in &files {
            let head = ElfHead::read(file).expect("headers read");
            assert_eq!(
                Some(&head),
                ElfHead::read_whole(file).as_ref(),
                "{}",
                file.display()
            );
        }
        assert!(is_dynamic(Path::new("/bin/ls")));
        // Not an ELF: a script runs through its interpreter, which is dynamic.
        let script = dir.path().join("script");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        assert!(ElfHead::read(&script).is_none());
        assert!(is_dynamic(&script) && !is_pie(&script));
        assert!(needed_libraries(&script).is_empty());
    }
}
