//! Writes the agent `ordo` embeds (the preloaded build) to a file, for measuring
//! the floor of the in-process path: a program run with `LD_PRELOAD` set to it and
//! no recorder makes every pthread call through the agent's wrappers, which find
//! neither recording nor replay on and forward it (`cargo xtask bench record`, its
//! `dormant agent` row).
//!
//! `write_agent PATH` writes the library to PATH (mode 0755), replacing a file there.
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;

use anyhow::{bail, Context, Result};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [path] = args.as_slice() else {
        bail!("usage: write_agent PATH");
    };
    // A fresh file, not one a running program may have mapped: write beside it
    // and rename over it.
    let temporary = format!("{path}.writing");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o755)
        .open(&temporary)
        .with_context(|| format!("create {temporary}"))?;
    file.write_all(ordo_agent::AGENT_LIBRARY)
        .with_context(|| format!("write {temporary}"))?;
    std::fs::rename(&temporary, path).with_context(|| format!("rename {temporary} to {path}"))?;
    Ok(())
}
