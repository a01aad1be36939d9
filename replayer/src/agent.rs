//! The agent library, embedded in the binary at build time and written to a private
//! directory when a replay starts (`LD_PRELOAD` needs a path).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use anyhow::{Context, Result};

/// The agent shared library, as built by `build.rs`.
pub static AGENT_LIBRARY: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/libordo_replay_agent.so"));

/// The agent written to a fresh private (0700) directory, removed on drop.
pub struct AgentFile {
    dir: tempfile::TempDir,
    path: PathBuf,
}

impl AgentFile {
    /// Writes the embedded agent out.
    pub fn write() -> Result<AgentFile> {
        let dir = tempfile::Builder::new()
            .prefix("ordo-replay-")
            .tempdir()
            .context("create a directory for the replay agent")?;
        let path = dir.path().join("libordo_replay_agent.so");
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o500)
            .open(&path)
            .with_context(|| format!("write {}", path.display()))?;
        file.write_all(AGENT_LIBRARY)
            .with_context(|| format!("write {}", path.display()))?;
        Ok(AgentFile { dir, path })
    }

    /// Path of the library.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// The directory holding it.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }
}
