//! Builds the preloaded agent (preload/src/lib.rs) as a shared library with the same
//! rustc that builds this crate, so the `ordo` binary can embed it: `ordo record`
//! and `ordo replay` work on a fresh clone after a plain `cargo build`, with no
//! separate install step. The agent has no dependencies, so one rustc call is enough
//! (no nested cargo, no lock waits). Twice, in fact: the preloaded build keeps its
//! thread-locals in the static TLS block, which a library `dlopen`ed into a running
//! process cannot have (glibc keeps a few hundred bytes spare for that; the agent
//! has kilobytes), so `ordo record --pid` loads a second build, with dynamic TLS.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    let source = manifest.join("preload/src/lib.rs");
    println!(
        "cargo:rerun-if-changed={}",
        manifest.join("preload/src").display()
    );
    println!(
        "cargo:rerun-if-changed={}",
        manifest.join("preload/glibc_versions.map").display()
    );
    // The agent compiles the shared event and ring layout in as a module.
    println!(
        "cargo:rerun-if-changed={}",
        manifest.join("../probe-ebpf/common/src").display()
    );
    build(&source, &out.join("libordo_preload.so"), &manifest, true);
    build(&source, &out.join("libordo_attach.so"), &manifest, false);
}

/// One build of the agent into `library`; `static_tls`: its thread-locals in the
/// static TLS block (preloaded only).
fn build(
    source: &std::path::Path,
    library: &std::path::Path,
    manifest: &std::path::Path,
    static_tls: bool,
) {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let target = std::env::var("TARGET").unwrap();
    let status = Command::new(rustc)
        .args([
            "--edition",
            "2021",
            "--crate-type",
            "cdylib",
            "--crate-name",
            "ordo_preload",
        ])
        .args([
            "--target",
            &target,
            "-C",
            "opt-level=3",
            "-C",
            "strip=debuginfo",
            "-C",
            "panic=unwind",
            // Call sites are read from the wrapper's frame (`[rbp + 8]`), which
            // only this build has (`site!` in preload/src/interpose.rs).
            "-C",
            "force-frame-pointers=yes",
            "--cfg",
            "ordo_frame_pointers",
            // One object, so the `.symver` aliases in lib.rs can name the wrappers.
            "-C",
            "codegen-units=1",
        ])
        // Preloaded (loaded with the program, not by dlopen), the thread-locals can
        // live in the static TLS block: one %fs-relative load instead of a
        // __tls_get_addr call per access.
        .args(if static_tls {
            &["-Z", "tls-model=initial-exec"][..]
        } else {
            &[]
        })
        .arg("-C")
        .arg(format!(
            "link-arg=-Wl,--version-script={}",
            manifest.join("preload/glibc_versions.map").display()
        ))
        .arg("-o")
        .arg(library)
        .arg(source)
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        // `-Z tls-model` is unstable; scoped to this one stable-toolchain build.
        .env("RUSTC_BOOTSTRAP", "1")
        .status()
        .expect("run rustc to build the preloaded agent");
    assert!(
        status.success(),
        "building the preloaded agent ({}) failed",
        source.display()
    );
}
