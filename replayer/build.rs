//! Builds the replay agent (agent/src/lib.rs) as a shared library with the same rustc
//! that builds this crate, so the `ordo` binary can embed it: `ordo replay` works on a
//! fresh clone after a plain `cargo build`, with no separate install step. The agent
//! has no dependencies, so one rustc call is enough (no nested cargo, no lock waits).

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    let source = manifest.join("agent/src/lib.rs");
    println!(
        "cargo:rerun-if-changed={}",
        manifest.join("agent/src").display()
    );
    // The agent compiles the shared event layout in as a module.
    println!(
        "cargo:rerun-if-changed={}",
        manifest.join("../probe-ebpf/common/src/lib.rs").display()
    );
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let target = std::env::var("TARGET").unwrap();
    let library = out.join("libordo_replay_agent.so");
    let status = Command::new(rustc)
        .args([
            "--edition",
            "2021",
            "--crate-type",
            "cdylib",
            "--crate-name",
            "ordo_replay_agent",
        ])
        .args([
            "--target",
            &target,
            "-C",
            "opt-level=2",
            "-C",
            "strip=debuginfo",
            "-C",
            "panic=unwind",
        ])
        .arg("-o")
        .arg(&library)
        .arg(&source)
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .status()
        .expect("run rustc to build the replay agent");
    assert!(
        status.success(),
        "building the replay agent ({}) failed",
        source.display()
    );
}
