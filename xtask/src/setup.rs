//! `cargo xtask setup`: install the eBPF toolchain when missing.
//!
//! What and why (docs/ARCHITECTURE.md, "Building the eBPF side"): rustup's toolchains have no `rust-src` and cannot
//! build `core` for the bpf target, but Debian's `rustc-web` with
//! `libstd-rust-web-dev-bpf` ships a prebuilt one; it is linked into rustup as the
//! `debian-web` toolchain. bpf-linker 0.13 is built against Debian's libLLVM 22 (its
//! build only needs `lib/libLLVM.so` under LLVM_PREFIX).

use std::process::Command;

use anyhow::{bail, Context, Result};

const APT_PACKAGES: &[&str] = &[
    "rustc-web",
    "cargo-web",
    "libstd-rust-web-dev-bpf",
    "libllvm22",
    "gcc",
    "g++",
    "make",
    // Sanitizer builds in the replay tests (tests/replay_verdicts.rs): gcc's runtimes
    // (linked dynamically) and clang with its own (linked statically).
    "libasan8",
    "libtsan2",
    "libubsan1",
    "clang",
    "libclang-rt-14-dev",
    // The attach-in-process fault test (tests/attach_in_process.rs): memcached
    // attached and detached 100 times under memcaslap's load.
    "memcached",
    "libmemcached-tools",
];
const TOOLCHAIN: &str = "debian-web";
const BPF_LINKER_VERSION: &str = "0.13.0";

fn installed(package: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", package])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
        .unwrap_or(false)
}

/// What `cargo xtask bench record` compares ordo with, and its workloads: bpftrace,
/// helgrind, a ThreadSanitizer-capable clang, memcached with its load generator, pigz,
/// LTTng with its pthread wrapper (and babeltrace2 to count LTTng's events), perf (to
/// count hits of empty probes). Not part of `setup` proper: tests do not need them.
const BENCH_APT_PACKAGES: &[&str] = &[
    "bpftrace",
    "valgrind",
    "clang",
    "libclang-rt-14-dev",
    "memcached",
    "libmemcached-tools",
    "pigz",
    "lttng-tools",
    "liblttng-ust1",
    "babeltrace2",
    "linux-perf",
];

/// The database workloads of `cargo xtask bench record` (`mariadb`,
/// `mariadb-attach`): a MariaDB server under sysbench's OLTP read/write load.
const DATABASE_APT_PACKAGES: &[&str] = &["mariadb-server", "sysbench"];

pub fn run() -> Result<()> {
    apt_install(APT_PACKAGES)?;
    let toolchains = Command::new("rustup")
        .args(["toolchain", "list"])
        .output()
        .context("run rustup")?;
    if !String::from_utf8_lossy(&toolchains.stdout)
        .lines()
        .any(|l| l.starts_with(TOOLCHAIN))
    {
        eprintln!("xtask: linking Debian's rustc into rustup as `{TOOLCHAIN}`");
        crate::run(Command::new("rustup").args(["toolchain", "link", TOOLCHAIN, "/usr"]))?;
    }
    let linker = Command::new("bpf-linker").arg("--version").output();
    let have_linker = linker
        .map(|o| String::from_utf8_lossy(&o.stdout).contains(BPF_LINKER_VERSION))
        .unwrap_or(false);
    if !have_linker {
        install_bpf_linker()?;
    }
    cargo_fuzz()
}

/// The fuzz targets (fuzz/, `cargo xtask fuzz`) need rustup's nightly toolchain and
/// cargo-fuzz: installs what is missing (cargo-fuzz builds in about a minute).
pub fn cargo_fuzz() -> Result<()> {
    let toolchains = Command::new("rustup")
        .args(["toolchain", "list"])
        .output()
        .context("run rustup")?;
    if !String::from_utf8_lossy(&toolchains.stdout)
        .lines()
        .any(|l| l.starts_with("nightly"))
    {
        eprintln!("xtask: installing rustup's nightly toolchain (for cargo-fuzz)");
        crate::run(Command::new("rustup").args([
            "toolchain",
            "install",
            "nightly",
            "--profile",
            "minimal",
        ]))?;
    }
    let present = Command::new("cargo")
        .args(["fuzz", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !present {
        eprintln!("xtask: installing cargo-fuzz");
        crate::run(Command::new("cargo").args(["install", "cargo-fuzz", "--locked"]))?;
    }
    Ok(())
}

/// Installs the benchmark's comparators and workloads when missing (seconds when
/// present). A package that cannot be installed is reported and skipped: the
/// benchmark says which comparator could not run and why.
pub fn bench_tools() -> Result<()> {
    if let Err(e) = apt_install(BENCH_APT_PACKAGES) {
        eprintln!("xtask: bench tools: {e:#}; comparators that need them will be skipped");
    }
    // Apart, so that a database server that cannot be installed (its service's
    // scripts) takes nothing else with it.
    if let Err(e) = apt_install(DATABASE_APT_PACKAGES) {
        eprintln!("xtask: bench tools: {e:#}; the mariadb workloads will be skipped");
    }
    Ok(())
}

/// `apt-get install`s the packages of `wanted` that are not installed. Waits for the
/// dpkg lock (other sessions on the machine may be installing too).
pub(crate) fn apt_install(wanted: &[&str]) -> Result<()> {
    let missing: Vec<&str> = wanted.iter().copied().filter(|p| !installed(p)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("xtask: installing {}", missing.join(" "));
    // SAFETY: geteuid(2) takes no arguments, touches no memory of ours and cannot
    // fail; the declaration below matches its C signature (uid_t is u32 on Linux).
    if unsafe { libc_geteuid() } != 0 {
        bail!("installing {} needs root (apt-get)", missing.join(" "));
    }
    let install = |update: bool| -> Result<()> {
        if update {
            crate::run(Command::new("apt-get").args(["update", "-q"]))?;
        }
        crate::run(
            Command::new("apt-get")
                .args(["install", "-y", "-q", "--no-install-recommends"])
                .args(["-o", "DPkg::Lock::Timeout=300"])
                .args(&missing)
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )
    };
    // Without a fresh package list only when the list is already there.
    install(false).or_else(|_| install(true))
}

fn install_bpf_linker() -> Result<()> {
    eprintln!("xtask: building bpf-linker {BPF_LINKER_VERSION} against Debian's libLLVM 22 (about 2 minutes)");
    let libdir = std::path::Path::new("/usr/lib/x86_64-linux-gnu");
    let llvm = std::fs::read_dir(libdir)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libLLVM.so.22"))
        })
        .context("libLLVM.so.22 not found after installing libllvm22")?;
    let prefix = std::env::temp_dir().join("ordo-llvm22-prefix");
    std::fs::create_dir_all(prefix.join("lib"))?;
    let link = prefix.join("lib/libLLVM.so");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&llvm, &link)?;
    crate::run(
        Command::new("cargo")
            .args([
                "install",
                "bpf-linker",
                "--version",
                BPF_LINKER_VERSION,
                "--no-default-features",
                "--features",
                "llvm-22",
            ])
            .env("LLVM_PREFIX", &prefix)
            .env("LLVM_SYS_221_PREFIX", &prefix)
            .env("LLVM_SYS_220_PREFIX", &prefix),
    )
}

extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}
