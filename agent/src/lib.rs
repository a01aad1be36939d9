//! The agent ordo preloads into programs (`agent/preload`, a dependency-free cdylib),
//! embedded in the binary at build time and written to a private directory when a
//! recording or a replay starts (`LD_PRELOAD` needs a path). Both the recorder (its
//! in-process path) and the replayer (its gates) use it.

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The agent shared library, as built by `build.rs`.
pub static AGENT_LIBRARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libordo_preload.so"));

/// The same agent built to be `dlopen`ed into a running process (`ordo record
/// --pid`): its thread-locals in dynamic TLS, which a library loaded late can have.
pub static AGENT_ATTACH_LIBRARY: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/libordo_attach.so"));

/// Environment variable carrying the user's own `LD_PRELOAD`, restored by the agent
/// at start-up (absent: there was none), so the program and what it runs see the
/// environment they would have had without ordo.
pub const ENV_ORIGINAL_PRELOAD: &str = "ORDO_ORIGINAL_PRELOAD";

/// The agent written to a fresh private (0700) directory, removed on drop.
pub struct AgentFile {
    dir: tempfile::TempDir,
    path: PathBuf,
    /// Held locked while the directory is in use: a directory whose lock can be
    /// taken was left by an ordo that was killed ([`sweep_abandoned`]).
    _lock: std::fs::File,
}

/// The agent directories' names begin so, in the temporary directory.
const DIR_PREFIX: &str = "ordo-agent-";
/// In each, the file its owner keeps locked, and the library.
const LOCK_FILE: &str = "in-use";
const LIBRARY_FILE: &str = "libordo_preload.so";

/// Removes the agent directories that killed recordings and replays (SIGKILL,
/// a crash) left behind: those whose lock file nobody holds. A directory still
/// being made has no library yet (its lock is taken first) and is left alone;
/// one of an ordo from before the lock file was added has no lock file and is
/// left alone too. Another user's cannot be removed (the sticky temporary
/// directory) and is skipped.
fn sweep_abandoned(temp: &Path) {
    let Ok(entries) = std::fs::read_dir(temp) else {
        return;
    };
    for entry in entries.flatten() {
        let dir = entry.path();
        let ours = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(DIR_PREFIX));
        if !ours || !dir.join(LIBRARY_FILE).exists() {
            continue;
        }
        let Ok(lock) = std::fs::File::open(dir.join(LOCK_FILE)) else {
            continue;
        };
        if lock.try_lock().is_ok() {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

impl AgentFile {
    /// Writes the embedded agent out (and removes what killed ordos left).
    pub fn write() -> Result<AgentFile> {
        let temp = std::env::temp_dir();
        sweep_abandoned(&temp);
        let dir = tempfile::Builder::new()
            .prefix(DIR_PREFIX)
            .tempdir_in(&temp)
            .context("create a directory for the preloaded agent")?;
        // Private: only this user's programs load what is in it.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))
            .context("make the agent's directory private")?;
        let lock_path = dir.path().join(LOCK_FILE);
        let lock = std::fs::File::create(&lock_path)
            .and_then(|f| f.lock().map(|()| f))
            .with_context(|| format!("lock {}", lock_path.display()))?;
        let path = dir.path().join(LIBRARY_FILE);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o500)
            .open(&path)
            .with_context(|| format!("write {}", path.display()))?;
        file.write_all(AGENT_LIBRARY)
            .with_context(|| format!("write {}", path.display()))?;
        Ok(AgentFile {
            dir,
            path,
            _lock: lock,
        })
    }

    /// Path of the library.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory holding it.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The environment that preloads the agent ahead of the user's own `LD_PRELOAD`
    /// (kept after ours, and restored by the agent at start-up), with the program's
    /// sanitizer runtimes `runtimes` ahead of the agent (see [`AgentFile::preload_env_over`]).
    pub fn preload_env(&self, runtimes: &[PathBuf]) -> Vec<(OsString, OsString)> {
        self.preload_env_over(runtimes, std::env::var_os("LD_PRELOAD"))
    }

    /// Like [`AgentFile::preload_env`], with `original` as the user's `LD_PRELOAD`.
    ///
    /// `LD_PRELOAD` becomes `RUNTIMES:AGENT:ORIGINAL`. A sanitizer runtime the program
    /// links dynamically (gcc's `libasan.so.8`, `libtsan.so.2`, `libubsan.so.1`) must
    /// be the first library loaded (ASan refuses to start otherwise); preloaded first,
    /// it still intercepts the program's calls first and finds the agent's wrappers
    /// as the "real" functions (`dlsym(RTLD_NEXT)`), so the agent sees every call the
    /// program makes, after the sanitizer did. The agent restores `ORIGINAL` at
    /// start-up, so nothing the program runs inherits the runtimes or the agent.
    pub fn preload_env_over(
        &self,
        runtimes: &[PathBuf],
        original: Option<OsString>,
    ) -> Vec<(OsString, OsString)> {
        let mut preload = OsString::new();
        for runtime in runtimes {
            preload.push(runtime.as_os_str());
            preload.push(":");
        }
        preload.push(self.path.as_os_str());
        if let Some(orig) = &original {
            preload.push(":");
            preload.push(orig);
        }
        let mut env = vec![("LD_PRELOAD".into(), preload)];
        if let Some(orig) = original {
            env.push((ENV_ORIGINAL_PRELOAD.into(), orig));
        }
        env
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a directory whose lock nobody holds, with its library written, goes.
    #[test]
    fn only_abandoned_agent_directories_are_swept() {
        let temp = tempfile::tempdir().unwrap();
        let make = |name: &str, library: bool, lock: bool| {
            let dir = temp.path().join(name);
            std::fs::create_dir(&dir).unwrap();
            if library {
                std::fs::write(dir.join(LIBRARY_FILE), b"").unwrap();
            }
            lock.then(|| std::fs::File::create(dir.join(LOCK_FILE)).unwrap())
        };
        make("ordo-agent-dead", true, true);
        let live = make("ordo-agent-live", true, true).unwrap();
        live.lock().unwrap();
        make("ordo-agent-old", true, false);
        make("ordo-agent-making", false, true);
        make("something-else", true, true);
        sweep_abandoned(temp.path());
        let mut left: Vec<String> = std::fs::read_dir(temp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "ordo-agent-live",
                "ordo-agent-making",
                "ordo-agent-old",
                "something-else"
            ]
        );
        drop(live);
        sweep_abandoned(temp.path());
        assert!(!temp.path().join("ordo-agent-live").exists());
    }
}
