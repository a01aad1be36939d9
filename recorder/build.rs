//! Builds the eBPF programs (probe-ebpf/programs) for bpfel-unknown-none and puts the
//! object in OUT_DIR, where the recorder embeds it.
//!
//! The bpf target needs Debian's rustc (which ships a prebuilt `core` for it) and
//! bpf-linker; `cargo xtask setup` installs both (see shared FACTS). aya-build is not
//! used because it overrides RUSTFLAGS, and the probes need `-C target-cpu=v3` for
//! atomic fetch-add (the per-object sequence numbers).

use std::path::PathBuf;
use std::process::Command;

const TOOLCHAIN: &str = "debian-web";

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest.parent().unwrap().to_path_buf();
    let programs = root.join("probe-ebpf/programs");
    for dir in [
        "probe-ebpf/programs/src",
        "probe-ebpf/programs/Cargo.toml",
        "probe-ebpf/common/src",
        "probe-ebpf/common/Cargo.toml",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let target_dir = out_dir.join("ebpf-target");
    let flags = [
        "--cfg=bpf_target_arch=\"x86_64\"",
        "-Cdebuginfo=2",
        "-Clink-arg=--btf",
        "-Ctarget-cpu=v3",
    ]
    .join("\x1f");
    let mut cmd = Command::new("rustup");
    cmd.args([
        "run",
        TOOLCHAIN,
        "cargo",
        "build",
        "--package",
        "ordo-probe-programs",
        "--bins",
        "--release",
    ])
    .args(["--target", "bpfel-unknown-none", "--target-dir"])
    .arg(&target_dir)
    .current_dir(&programs)
    .env("CARGO_ENCODED_RUSTFLAGS", flags)
    // aya-ebpf and the probe crate use nightly features on this stable compiler.
    .env("RUSTC_BOOTSTRAP", "aya_ebpf,ordo_probes");
    for key in [
        "RUSTC",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "RUSTDOC",
        "CARGO",
    ] {
        cmd.env_remove(key);
    }
    let output = match cmd.output() {
        Ok(o) => o,
        Err(e) => fail(&format!("cannot run rustup ({e})")),
    };
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        for line in stderr.lines() {
            println!("cargo:warning={line}");
        }
        fail("building the eBPF programs failed (see the warnings above)");
    }
    let object = target_dir.join("bpfel-unknown-none/release/ordo-probes");
    std::fs::copy(&object, out_dir.join("ordo-probes.o"))
        .unwrap_or_else(|e| fail(&format!("copy {}: {e}", object.display())));
}

fn fail(why: &str) -> ! {
    eprintln!(
        "error: {why}.\nThe eBPF probes need Debian's rustc-web toolchain (linked into rustup as `{TOOLCHAIN}`), \
         libstd-rust-web-dev-bpf and bpf-linker. Run `cargo xtask setup` to install them."
    );
    std::process::exit(1);
}
