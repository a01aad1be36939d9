//! Runs a command with empty uprobes at the given libc file offsets (as printed by
//! `ordo record --list-probes`), for measuring the cost of a bare trap at a site:
//!
//! `empty_probes 0x8c3c7,0x8dd55 -- ./bench lock 100000`
use anyhow::{bail, Context, Result};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(dash) = args.iter().position(|a| a == "--") else {
        bail!("usage: empty_probes OFFSET[,OFFSET...] -- COMMAND [ARGS...]");
    };
    let offsets = args[..dash]
        .iter()
        .flat_map(|a| a.split(','))
        .filter(|s| !s.is_empty())
        .map(|s| {
            u64::from_str_radix(s.trim_start_matches("0x"), 16)
                .with_context(|| format!("offset {s}"))
        })
        .collect::<Result<Vec<u64>>>()?;
    let command = &args[dash + 1..];
    let libc = ordo_recorder::probes::system_libc()?;
    let child = ordo_recorder::spawn_stopped(command, &[])?;
    let probes = ordo_recorder::empty::attach_empty(child.pid(), &libc, &offsets)?;
    let status = child.release()?.wait()?;
    drop(probes);
    std::process::exit(status.code().unwrap_or(1));
}
