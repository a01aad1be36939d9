//! Watch planning on real binaries: C, C++ and Rust programs compiled here, with
//! binutils (`nm`, `objdump`) as the independent judge of addresses and of which
//! instructions reference a variable.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use iced_x86::{Decoder, DecoderOptions};
use object::{Object, ObjectSymbol, SymbolKind};
use ordo_probe_common::{kind, reg, via};

use super::*;

/// A compiled test program in its own temporary directory.
struct Program {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

fn run(command: &mut Command) -> String {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("running {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn repo_file(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(relative)
}

/// Compiles `tests/programs/NAME.c` with `cc -g` and the given extra flags.
fn build_c(name: &str, flags: &[&str]) -> Program {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    run(Command::new("cc")
        .args(["-g", "-pthread"])
        .args(flags)
        .arg("-o")
        .arg(&path)
        .arg(repo_file(&format!("tests/programs/{name}.c"))));
    Program { _dir: dir, path }
}

fn build_testdata(file: &str, compiler: &str, flags: &[&str]) -> Program {
    let dir = tempfile::tempdir().unwrap();
    let stem = Path::new(file).file_stem().unwrap().to_str().unwrap();
    let path = dir.path().join(stem);
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/watch/testdata")
        .join(file);
    run(Command::new(compiler)
        .args(flags)
        .arg("-o")
        .arg(&path)
        .arg(source));
    Program { _dir: dir, path }
}

/// `nm`'s address for a symbol (raw name).
fn nm_address(binary: &Path, symbol: &str) -> u64 {
    let out = run(Command::new("nm").arg(binary));
    out.lines()
        .find_map(|line| {
            let mut parts = line.split_whitespace();
            let (addr, _, name) = (parts.next()?, parts.next()?, parts.next()?);
            (name == symbol).then(|| u64::from_str_radix(addr, 16).unwrap())
        })
        .unwrap_or_else(|| panic!("nm has no {symbol} in {}", binary.display()))
}

/// Addresses of the instructions objdump annotates with `<LABEL>`, except `lea`
/// (which computes the address without accessing it).
fn objdump_references(binary: &Path, label: &str) -> BTreeSet<u64> {
    let out = run(Command::new("objdump")
        .args(["-d", "--no-show-raw-insn", "-M", "att"])
        .arg(binary));
    let needle = format!("<{label}>");
    out.lines()
        .filter(|line| line.ends_with(&needle) && line.contains('#') && !line.contains("\tlea "))
        .map(|line| u64::from_str_radix(line.split(':').next().unwrap().trim(), 16).unwrap())
        .collect()
}

/// The function containing each address.
fn functions_of(binary: &Path, addresses: impl IntoIterator<Item = u64>) -> Vec<String> {
    let data = std::fs::read(binary).unwrap();
    let file = object::File::parse(data.as_slice()).unwrap();
    let functions: Vec<(u64, u64, String)> = file
        .symbols()
        .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0)
        .map(|s| {
            (
                s.address(),
                s.size(),
                ordo_trace::symbolize::demangle(s.name().unwrap()),
            )
        })
        .collect();
    addresses
        .into_iter()
        .map(|a| {
            functions
                .iter()
                .find(|(start, size, _)| *start <= a && a < start + size)
                .map(|f| f.2.clone())
                .unwrap_or_else(|| format!("{a:#x}"))
        })
        .collect()
}

fn plan(binary: &Path, spec: &str) -> WatchPlan {
    let watch = resolve(&WatchSpec::parse(spec).unwrap(), binary, &[]).unwrap();
    plan_sites(&watch).unwrap()
}

/// (function, access kind, atomic) of each site, sorted.
fn summary(binary: &Path, plan: &WatchPlan) -> Vec<(String, u16, bool)> {
    let functions = functions_of(binary, plan.sites.iter().map(|s| s.access_ip));
    let mut out: Vec<_> = functions
        .into_iter()
        .zip(&plan.sites)
        .map(|(f, s)| (f, s.site.access as u16, s.atomic))
        .collect();
    out.sort();
    out
}

/// The bytes at each site's file offset are a probeable instruction at `site.ip`,
/// and the accessing instruction is where `access_ip` says.
fn assert_file_offsets_match(binary: &Path, plan: &WatchPlan) {
    let data = std::fs::read(binary).unwrap();
    for s in &plan.sites {
        let bytes = &data[s.file_offset as usize..];
        let probed = Decoder::with_ip(64, bytes, s.site.ip, DecoderOptions::NONE).decode();
        assert!(
            super::uprobe::kernel_accepts(&probed, bytes),
            "{probed} at {:#x}",
            s.file_offset
        );
        let access_offset = (s.file_offset + s.access_ip).wrapping_sub(s.site.ip) as usize;
        let access = Decoder::with_ip(
            64,
            &data[access_offset..],
            s.access_ip,
            DecoderOptions::NONE,
        )
        .decode();
        assert_eq!(
            access.to_string(),
            s.instruction,
            "file offset {access_offset:#x}"
        );
        let expected_probe_ip = match s.probe {
            ProbePoint::Instruction => s.access_ip,
            ProbePoint::Previous => s.access_ip - probed.len() as u64,
            ProbePoint::Next => access.next_ip(),
        };
        assert_eq!(s.site.ip, expected_probe_ip, "{s:?}");
    }
}

#[test]
fn global_written_in_three_places_and_read_in_two() {
    for opt in ["-O1", "-O2"] {
        let program = build_c("watch_globals", &[opt]);
        let bin = &program.path;
        let watch = resolve(&WatchSpec::parse("shared_value").unwrap(), bin, &[]).unwrap();
        assert_eq!(watch.vaddr, nm_address(bin, "shared_value"));
        assert_eq!(
            (watch.size, watch.name.as_str(), &watch.module),
            (4, "shared_value", bin)
        );
        let plan = plan_sites(&watch).unwrap();
        let found: BTreeSet<u64> = plan.sites.iter().map(|s| s.access_ip).collect();
        assert_eq!(found, objdump_references(bin, "shared_value"), "{opt}");
        assert!(plan
            .sites
            .iter()
            .all(|s| s.probe == ProbePoint::Instruction && s.site.ip == s.access_ip));
        assert_eq!(
            summary(bin, &plan),
            vec![
                ("get_value".into(), kind::READ, false),
                ("is_done".into(), kind::READ, false),
                ("mark_done".into(), kind::WRITE, false),
                ("reset_value".into(), kind::WRITE, false),
                ("set_value".into(), kind::WRITE, false),
            ],
            "{opt}"
        );
        let by_function: BTreeMap<String, &PlannedSite> =
            functions_of(bin, plan.sites.iter().map(|s| s.access_ip))
                .into_iter()
                .zip(&plan.sites)
                .collect();
        let set = by_function["set_value"].site;
        assert_eq!((set.value_reg, set.value_is_imm), (reg::RDI, 0));
        let reset = by_function["reset_value"].site;
        assert_eq!(
            (reset.value_reg, reset.value_is_imm, reset.imm),
            (reg::NONE, 1, 0)
        );
        let done = by_function["mark_done"].site;
        assert_eq!(
            (done.value_reg, done.value_is_imm, done.imm),
            (reg::NONE, 1, 4242)
        );
        for s in &plan.sites {
            assert!(s.value_known && !s.via_register);
            assert_eq!(
                (s.site.size, s.site.watch_len, s.site.watch_addr),
                (4, 4, watch.vaddr)
            );
            assert_eq!(
                (s.site.base, s.site.index, s.site.disp),
                (reg::NONE, reg::NONE, watch.vaddr as i64)
            );
        }
        assert_file_offsets_match(bin, &plan);
    }
}

#[test]
fn struct_field_matches_only_that_field() {
    let program = build_c("watch_field", &["-O1"]);
    let bin = &program.path;
    let hits = plan(bin, "stats+8:4");
    assert_eq!(hits.watch.name, "stats+8");
    assert_eq!(hits.watch.vaddr, nm_address(bin, "stats") + 8);
    let found: BTreeSet<u64> = hits.sites.iter().map(|s| s.access_ip).collect();
    assert_eq!(found, objdump_references(bin, "stats+0x8"));
    assert_eq!(
        summary(bin, &hits),
        vec![
            ("hit_count".into(), kind::READ, false),
            ("record_hit".into(), kind::RMW, false)
        ]
    );
    // `clear_stats(&stats)` passes the address away: reported, not a site.
    assert_eq!(
        functions_of(bin, hits.address_refs.iter().copied()),
        vec!["main".to_string()]
    );

    let misses = plan(bin, "stats+12:4");
    let found: BTreeSet<u64> = misses.sites.iter().map(|s| s.access_ip).collect();
    assert_eq!(found, objdump_references(bin, "stats+0xc"));
    assert!(summary(bin, &misses).contains(&("record_miss".into(), kind::RMW, false)));
    assert!(found.is_disjoint(&hits.sites.iter().map(|s| s.access_ip).collect()));
    assert_file_offsets_match(bin, &hits);
}

#[test]
fn array_element_reached_through_a_register() {
    for flags in [&["-O1"][..], &["-O2"], &["-O1", "-no-pie", "-fno-pie"]] {
        let program = build_c("watch_field", flags);
        let bin = &program.path;
        let slot = plan(bin, "slots+8:4");
        assert_eq!(
            summary(bin, &slot),
            vec![
                ("bump_slot".into(), kind::RMW, false),
                ("read_slot".into(), kind::READ, false)
            ],
            "{flags:?}"
        );
        for s in &slot.sites {
            assert!(s.via_register, "{flags:?}: {}", s.instruction);
            assert_ne!(s.site.index, reg::NONE, "{}", s.instruction);
            assert_eq!(s.site.scale, 4, "{}", s.instruction);
        }
        // Another element of the same array is reached by the same instructions.
        assert_eq!(plan(bin, "slots+20:4").sites.len(), 2, "{flags:?}");
        // Position-independent code loads the array's address with `lea` first;
        // position-dependent code indexes from the absolute address.
        let pie = !flags.contains(&"-no-pie");
        assert_eq!(!slot.address_refs.is_empty(), pie, "{flags:?}");
        assert!(
            slot.sites.iter().all(|s| (s.site.base != reg::NONE) == pie),
            "{flags:?}"
        );
    }
}

#[test]
fn atomic_counter_is_an_atomic_read_modify_write() {
    for opt in ["-O1", "-O2"] {
        atomic_counter_at(opt);
    }
}

fn atomic_counter_at(opt: &str) {
    let program = build_c("watch_atomic", &[opt]);
    let bin = &program.path;
    let atomic = plan(bin, "atomic_total");
    assert_eq!(atomic.watch.size, 8);
    assert_eq!(
        summary(bin, &atomic),
        vec![
            ("add_atomic".into(), kind::RMW, true),
            ("add_atomic_fetch".into(), kind::RMW, true),
            ("load_atomic".into(), kind::READ, false),
            ("swap_atomic".into(), kind::RMW, true),
        ]
    );
    let by_function: BTreeMap<String, &PlannedSite> =
        functions_of(bin, atomic.sites.iter().map(|s| s.access_ip))
            .into_iter()
            .zip(&atomic.sites)
            .collect();
    // The kernel refuses uprobes on lock-prefixed instructions: `lock add` starts its
    // function (entered by calls), so the probe goes on the `ret` after it; `lock
    // xadd` follows a plain `mov`, which gets the probe. `xchg` has no prefix.
    assert_eq!(by_function["add_atomic"].probe, ProbePoint::Next);
    assert_eq!(by_function["add_atomic_fetch"].probe, ProbePoint::Previous);
    assert_eq!(by_function["swap_atomic"].probe, ProbePoint::Instruction);
    assert_eq!(by_function["load_atomic"].probe, ProbePoint::Instruction);
    // The events of atomic instructions say so (the race detector relies on it).
    for s in &atomic.sites {
        let expected = if s.atomic { via::ATOMIC } else { via::PLAIN };
        assert_eq!(s.site.via, expected, "{}", s.instruction);
    }
    assert!(atomic.unprobeable.is_empty());
    assert_file_offsets_match(bin, &atomic);

    // In `add_pair`'s loop, `lock add pair_a` is the jump target and is followed by
    // `lock add pair_b`: no probe can see it. `lock add pair_b` is probed after.
    let pair_a = plan(bin, "pair_a");
    assert_eq!(
        functions_of(bin, pair_a.unprobeable.iter().map(|s| s.access_ip)),
        vec!["add_pair".to_string()]
    );
    assert!(
        pair_a
            .sites
            .iter()
            .all(|s| functions_of(bin, [s.access_ip])[0] != "add_pair"),
        "{opt}"
    );
    let pair_b = plan(bin, "pair_b");
    let in_loop: Vec<&PlannedSite> = pair_b
        .sites
        .iter()
        .filter(|s| functions_of(bin, [s.access_ip])[0] == "add_pair")
        .collect();
    assert_eq!(in_loop.len(), 1);
    assert_eq!(
        (in_loop[0].probe, in_loop[0].atomic),
        (ProbePoint::Next, true)
    );
    assert_file_offsets_match(bin, &pair_b);

    let plain = plan(bin, "plain_total");
    let functions = summary(bin, &plain);
    assert!(
        functions.contains(&("add_plain".into(), kind::RMW, false)),
        "{functions:?}"
    );
    assert!(functions.iter().all(|(_, _, atomic)| !atomic));
    assert_eq!(
        plain.sites.len(),
        objdump_references(bin, "plain_total").len()
    );
}

#[test]
fn c_statics_by_source_name() {
    for opt in ["-O1", "-O2"] {
        c_statics_at(opt);
    }
}

fn c_statics_at(opt: &str) {
    let program = build_c("watch_static", &[opt]);
    let bin = &program.path;
    let file_static = plan(bin, "hidden_state");
    assert_eq!(
        summary(bin, &file_static),
        vec![
            ("get_state".into(), kind::READ, false),
            ("set_state".into(), kind::WRITE, false)
        ]
    );
    // GCC names a function-local static `calls.0` in the symbol table.
    let local = resolve(&WatchSpec::parse("calls").unwrap(), bin, &[]).unwrap();
    let by_dwarf = resolve(&WatchSpec::parse("count_call::calls").unwrap(), bin, &[]).unwrap();
    assert_eq!(local.vaddr, by_dwarf.vaddr);
    assert_eq!((local.size, by_dwarf.size), (4, 4));
    let sites = plan_sites(&local).unwrap();
    let kinds: Vec<u16> = summary(bin, &sites)
        .into_iter()
        .map(|(_, k, _)| k)
        .collect();
    assert!(
        kinds.contains(&kind::READ) && kinds.contains(&kind::WRITE),
        "{kinds:?}"
    );

    let err = resolve(&WatchSpec::parse("per_thread_calls").unwrap(), bin, &[]).unwrap_err();
    assert!(err.contains("thread-local"), "{err}");
}

#[test]
fn static_without_a_symbol_is_found_through_dwarf() {
    let program = build_c("watch_static", &["-O1"]);
    let stripped = program.path.with_extension("nosym");
    run(Command::new("objcopy")
        .args(["--strip-symbol=hidden_state"])
        .arg(&program.path)
        .arg(&stripped));
    assert!(!run(Command::new("nm").arg(&stripped)).contains("hidden_state"));
    let watch = resolve(&WatchSpec::parse("hidden_state").unwrap(), &stripped, &[]).unwrap();
    assert_eq!(watch.vaddr, nm_address(&program.path, "hidden_state"));
    assert_eq!(watch.size, 4);
    assert_eq!(plan_sites(&watch).unwrap().sites.len(), 2);
}

#[test]
fn rust_static_by_source_name() {
    let program = build_testdata(
        "watch_rust.rs",
        "rustc",
        &["-O", "-g", "--crate-name", "watch_rust"],
    );
    let bin = &program.path;
    let counter = resolve(&WatchSpec::parse("COUNTER").unwrap(), bin, &[]).unwrap();
    assert_eq!(counter.name, "watch_rust::COUNTER");
    assert_eq!(counter.size, 8);
    for spec in [
        "watch_rust::COUNTER",
        "crate::COUNTER",
        "_ZN10watch_rust7COUNTER",
    ] {
        let other = resolve(&WatchSpec::parse(spec).unwrap(), bin, &[]);
        if spec.starts_with("_ZN") {
            // A prefix of the mangled name is not a name.
            assert!(other.is_err(), "{spec}");
        } else {
            assert_eq!(other.unwrap(), counter, "{spec}");
        }
    }
    let crate_path = resolve(&WatchSpec::parse("crate::stats::HITS").unwrap(), bin, &[]).unwrap();
    assert_eq!(crate_path.name, "watch_rust::stats::HITS");
    assert!(resolve(&WatchSpec::parse("crate::HITS").unwrap(), bin, &[]).is_err());
    let plan = plan_sites(&counter).unwrap();
    let summary = summary(bin, &plan);
    assert!(
        summary.contains(&("watch_rust::bump".into(), kind::RMW, true)),
        "{summary:?}"
    );
    assert!(
        summary.iter().any(|(_, k, _)| *k == kind::READ),
        "{summary:?}"
    );

    let hits = resolve(&WatchSpec::parse("stats::HITS").unwrap(), bin, &[]).unwrap();
    assert_eq!(
        (hits.name.as_str(), hits.size),
        ("watch_rust::stats::HITS", 4)
    );

    // With the symbol gone, DWARF still knows `watch_rust::COUNTER`.
    let raw = run(Command::new("nm").arg(bin))
        .lines()
        .find_map(|l| {
            l.split_whitespace()
                .nth(2)
                .filter(|n| n.contains("10watch_rust7COUNTER"))
                .map(str::to_string)
        })
        .unwrap();
    let stripped = bin.with_extension("nosym");
    run(Command::new("objcopy")
        .arg(format!("--strip-symbol={raw}"))
        .arg(bin)
        .arg(&stripped));
    let from_dwarf = resolve(&WatchSpec::parse("COUNTER").unwrap(), &stripped, &[]).unwrap();
    assert_eq!((from_dwarf.vaddr, from_dwarf.size), (counter.vaddr, 8));
    assert_eq!(from_dwarf.name, "watch_rust::COUNTER");
}

#[test]
fn cpp_namespaced_and_static_members() {
    let program = build_testdata("watch_ns.cpp", "c++", &["-O1", "-g"]);
    let bin = &program.path;
    for (spec, name, size) in [
        ("app::Pool::live", "app::Pool::live", 4),
        ("Pool::live", "app::Pool::live", 4),
        ("live", "app::Pool::live", 4),
        ("app::cfg::level", "app::cfg::level", 8),
        ("b::count", "b::count", 4),
    ] {
        let watch = resolve(&WatchSpec::parse(spec).unwrap(), bin, &[]).unwrap();
        assert_eq!((watch.name.as_str(), watch.size), (name, size), "{spec}");
    }
    let live = plan(bin, "app::Pool::live");
    assert!(summary(bin, &live).contains(&("grow()".into(), kind::RMW, false)));
    let err = resolve(&WatchSpec::parse("count").unwrap(), bin, &[]).unwrap_err();
    assert!(
        err.contains("names 2 variables") && err.contains("a::count") && err.contains("b::count"),
        "{err}"
    );
}

#[test]
fn resolution_errors_are_clear() {
    let program = build_c("watch_globals", &["-O1"]);
    let bin = &program.path;
    let resolve_text = |text: &str| resolve(&WatchSpec::parse(text).unwrap(), bin, &[]);
    let err = resolve_text("shared_valeu").unwrap_err();
    assert!(
        err.starts_with("no global or static variable named `shared_valeu` in "),
        "{err}"
    );
    assert!(err.contains("did you mean `shared_value`"), "{err}");
    let err = resolve_text("no_such_thing_at_all").unwrap_err();
    assert!(!err.contains("did you mean"), "{err}");
    let err = resolve_text("set_value").unwrap_err();
    assert!(err.contains("`set_value` is a function"), "{err}");
    let err = resolve_text("shared_value+2:4").unwrap_err();
    assert!(
        err.contains("bytes 2..6 go past the end of `shared_value` (4 bytes)"),
        "{err}"
    );
    let err = resolve_text("0x10:4").unwrap_err();
    assert!(err.contains("0x10 is not inside any data section"), "{err}");
    let set_value = nm_address(bin, "set_value");
    let err = resolve_text(&format!("{set_value:#x}:1")).unwrap_err();
    assert!(err.contains("not inside any data section"), "{err}");
    assert!(!err.contains('\n'));

    let field = build_c("watch_field", &["-O1"]);
    let err = resolve(&WatchSpec::parse("stats").unwrap(), &field.path, &[]).unwrap_err();
    assert!(
        err.contains("`stats` is 24 bytes but a watch covers at most 8"),
        "{err}"
    );

    let missing = resolve(
        &WatchSpec::parse("x").unwrap(),
        Path::new("/nonexistent/prog"),
        &[],
    )
    .unwrap_err();
    assert!(missing.contains("/nonexistent/prog"), "{missing}");
}

#[test]
fn raw_address_in_a_stripped_binary() {
    let program = build_c("watch_globals", &["-O1", "-fno-plt"]);
    let addr = nm_address(&program.path, "shared_value");
    let with_symbols = plan(&program.path, &format!("{addr:#x}:4"));
    assert_eq!(with_symbols.watch.name, "shared_value");
    let stripped = program.path.with_extension("stripped");
    run(Command::new("strip")
        .arg("-o")
        .arg(&stripped)
        .arg(&program.path));
    let spec = WatchSpec::parse(&format!("{addr:#x}:4")).unwrap();
    let watch = resolve(&spec, &stripped, &[]).unwrap();
    assert_eq!(watch.name, format!("{addr:#x}"));
    let plan = plan_sites(&watch).unwrap();
    let ips = |p: &WatchPlan| {
        p.sites
            .iter()
            .map(|s| (s.site.ip, s.file_offset, s.site.access))
            .collect::<Vec<_>>()
    };
    assert_eq!(ips(&plan), ips(&with_symbols));
    assert_eq!(plan.sites.len(), 5);
    let err = resolve(&WatchSpec::parse("shared_value").unwrap(), &stripped, &[]).unwrap_err();
    assert!(
        err.contains("no global or static variable named `shared_value`"),
        "{err}"
    );
}

#[test]
fn code_is_found_without_section_headers() {
    let program = build_c("watch_globals", &["-O1"]);
    let mut data = std::fs::read(&program.path).unwrap();
    // Zero e_shoff, e_shnum and e_shstrndx, as `sstrip` leaves a file.
    data[0x28..0x30].fill(0);
    data[0x3c..0x40].fill(0);
    let headerless = program.path.with_extension("noshdr");
    std::fs::write(&headerless, &data).unwrap();
    let normal = plan(&program.path, "shared_value");
    let watch = ResolvedWatch {
        module: headerless,
        ..normal.watch.clone()
    };
    let plan = plan_sites(&watch).unwrap();
    let ips = |p: &WatchPlan| {
        p.sites
            .iter()
            .map(|s| (s.site.ip, s.file_offset))
            .collect::<Vec<_>>()
    };
    assert_eq!(ips(&plan), ips(&normal));
}

#[test]
fn relocation_adds_the_bias_to_absolute_addresses_only() {
    let program = build_c("watch_field", &["-O1"]);
    let bias = 0x5555_5555_4000;
    let rip_relative = plan(&program.path, "stats+8:4").sites[0].clone();
    let moved = rip_relative.relocated(bias);
    assert_eq!(moved.site.ip, rip_relative.site.ip + bias);
    assert_eq!(moved.access_ip, rip_relative.access_ip + bias);
    assert_eq!(moved.site.watch_addr, rip_relative.site.watch_addr + bias);
    assert_eq!(moved.site.disp, rip_relative.site.disp + bias as i64);
    assert_eq!(moved.file_offset, rip_relative.file_offset);
    let through_register = plan(&program.path, "slots+8:4").sites[0].clone();
    let moved = through_register.relocated(bias);
    assert_eq!(moved.site.disp, through_register.site.disp);
    assert_eq!(moved.site.ip, through_register.site.ip + bias);
}

#[test]
fn hardware_breakpoint_constraints() {
    let watch = |vaddr, size| ResolvedWatch {
        module: PathBuf::from("prog"),
        vaddr,
        size,
        name: "v".into(),
        object_vaddr: vaddr,
        object_size: 8,
        atomic: false,
        through_pointer: None,
    };
    assert!(watch(0x4010, 8).check_hw_breakpoint().is_ok());
    assert!(watch(0x4012, 2).check_hw_breakpoint().is_ok());
    assert!(watch(0x4012, 4)
        .check_hw_breakpoint()
        .unwrap_err()
        .contains("not aligned"));
    assert!(watch(0x4010, 3)
        .check_hw_breakpoint()
        .unwrap_err()
        .contains("1, 2, 4 or 8 bytes"));
}

/// The C library this test process runs with, from its own memory map.
fn running_libc() -> PathBuf {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| {
            Path::new(p)
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("libc.so"))
        })
        .map(PathBuf::from)
        .expect("libc in /proc/self/maps")
}

#[test]
fn library_variable_is_found_in_the_library() {
    let program = build_c("watch_globals", &["-O1"]);
    let libc = running_libc();
    let libs = vec![libc.clone()];
    let watch = resolve(
        &WatchSpec::parse("__libc_single_threaded").unwrap(),
        &program.path,
        &libs,
    )
    .unwrap();
    assert_eq!((watch.module.as_path(), watch.size), (libc.as_path(), 1));
    let started = std::time::Instant::now();
    let plan = plan_sites(&watch).unwrap();
    eprintln!(
        "planned {} sites in {} in {:?}",
        plan.sites.len(),
        libc.display(),
        started.elapsed()
    );
    // glibc tests it before taking its internal locks and sets it in pthread_create.
    assert!(
        plan.sites
            .iter()
            .any(|s| s.site.access as u16 == kind::READ),
        "{:?}",
        plan.sites
    );
    assert!(
        plan.sites
            .iter()
            .any(|s| s.site.access as u16 == kind::WRITE),
        "{:?}",
        plan.sites
    );
    assert_file_offsets_match(&libc, &plan);

    let err = resolve(
        &WatchSpec::parse("shared_valu").unwrap(),
        &program.path,
        &libs,
    )
    .unwrap_err();
    assert!(
        err.contains("or its library") && err.contains("did you mean `shared_value`"),
        "{err}"
    );
}

/// Two C files with a `static int counter` each, and C11 atomics.
fn build_dup() -> Program {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("watch_dup");
    let testdata = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/watch/testdata");
    run(Command::new("cc")
        .args(["-O1", "-g", "-o"])
        .arg(&path)
        .arg(testdata.join("watch_dup_a.c"))
        .arg(testdata.join("watch_dup_b.c")));
    Program { _dir: dir, path }
}

#[test]
fn ambiguous_names_list_candidates_and_file_picks_one() {
    let program = build_dup();
    let bin = &program.path;
    let err = resolve(&WatchSpec::parse("counter").unwrap(), bin, &[]).unwrap_err();
    assert!(
        err.contains("names 2 variables")
            && err.contains("`watch_dup_a.c:counter`")
            && err.contains("`watch_dup_b.c:counter`")
            && err.contains("FILE:NAME")
            && !err.contains('\n'),
        "{err}"
    );
    let a = resolve(
        &WatchSpec::parse("watch_dup_a.c:counter").unwrap(),
        bin,
        &[],
    )
    .unwrap();
    let b = resolve(
        &WatchSpec::parse("watch_dup_b.c:counter:4").unwrap(),
        bin,
        &[],
    )
    .unwrap();
    assert_ne!(a.vaddr, b.vaddr);
    assert_eq!((a.size, b.size), (4, 4));
    // Each is the one its own file's code accesses.
    let functions = |w: &ResolvedWatch| -> Vec<String> {
        let sites = plan_sites(w).unwrap().sites;
        functions_of(bin, sites.iter().map(|s| s.access_ip))
    };
    assert!(
        functions(&a).iter().all(|f| f == "bump_a" || f == "main"),
        "{:?}",
        functions(&a)
    );
    assert!(
        functions(&b).iter().all(|f| f == "bump_b"),
        "{:?}",
        functions(&b)
    );
    let err = resolve(&WatchSpec::parse("other.c:counter").unwrap(), bin, &[]).unwrap_err();
    assert!(
        err.contains("not defined in source file `other.c`") || err.contains("is defined in"),
        "{err}"
    );
}

#[test]
fn fields_elements_and_atomic_types_through_dwarf() {
    let program = build_dup();
    let bin = &program.path;
    let stats = nm_address(bin, "stats");
    let at = |spec: &str| resolve(&WatchSpec::parse(spec).unwrap(), bin, &[]).unwrap();
    let live = at("stats.live");
    assert_eq!((live.vaddr, live.size, live.atomic), (stats + 4, 4, true));
    let hi = at("stats.range.hi");
    assert_eq!((hi.vaddr, hi.size, hi.atomic), (stats + 10, 2, false));
    let element = at("stats.history[3]");
    assert_eq!((element.vaddr, element.size), (stats + 12 + 12, 4));
    assert!(!at("stats.plain").atomic);
    // C11 `_Atomic` and the `atomic_int` typedef.
    assert!(at("c11_total").atomic && at("c11_flag").atomic);
    assert!(!at("watch_dup_a.c:counter").atomic);
    // Every access to an atomic variable is atomic, plain `mov` stores included.
    let flag = plan_sites(&at("c11_flag")).unwrap();
    assert!(!flag.sites.is_empty());
    assert!(flag
        .sites
        .iter()
        .all(|s| s.atomic && s.site.via == via::ATOMIC));
    // Through the pointer: the planner finds where `stats_ptr` is loaded and the
    // field read through it.
    let through = at("stats_ptr->range.hi");
    let hop = through.through_pointer.clone().unwrap();
    assert_eq!(hop.pointer_vaddr, nm_address(bin, "stats_ptr"));
    assert_eq!((hop.offset, through.size), (10, 2));
    assert!(through
        .check_hw_breakpoint()
        .unwrap_err()
        .contains("through a pointer"));
    let plan = plan_sites(&through).unwrap();
    assert_eq!(plan.sites.len(), 1, "{:?}", plan.sites);
    let site = &plan.sites[0];
    assert_eq!(
        (site.site.relative, site.site.watch_addr, site.site.access),
        (1, 10, kind::READ as u8)
    );
    assert!(site.via_register && site.site.base != reg::NONE);
    // Relocation leaves the offset alone.
    assert_eq!(site.site.relocated(0x1000).watch_addr, 10);
    for (spec, needle) in [
        ("stats.nothing", "has no member `nothing`"),
        ("stats.history[5]", "past the end of an array of 5"),
        ("stats.plain.x", "has no member"),
        ("stats_ptr.live", "is a pointer; write `->live`"),
        ("stats->live", "needs a pointer"),
        ("stats.history", "20 bytes"),
    ] {
        let err = resolve(&WatchSpec::parse(spec).unwrap(), bin, &[]).unwrap_err();
        assert!(err.contains(needle) && !err.contains('\n'), "{spec}: {err}");
    }
}

#[test]
fn parts_of_variables_are_named_as_specs_write_them() {
    let program = build_testdata("watch_parts.c", "cc", &["-g", "-O0", "-pthread"]);
    let conns = nm_address(&program.path, "conns");
    let plain = nm_address(&program.path, "plain");
    let mut resolver = Resolver::new(&program.path, &[]).unwrap();
    // struct conn: id 0, buf 8, in 16 (tag 16, count 20), slots 24, union 40, lock 48;
    // 88 bytes.
    let size = 88;
    let cases = [
        (0, Some("conns[0].id")),
        (8, Some("conns[0].buf")),
        (16, Some("conns[0].in.tag")),
        (17, None), // padding
        (20, Some("conns[0].in.count")),
        (24 + 8, Some("conns[0].slots[2]")),
        (40, Some("conns[0].as_long")), // an anonymous union adds no name
        (48, None),                     // the mutex: named by its offset, as sync events are
        (size + 8, Some("conns[1].buf")),
        (size + 24 + 12, Some("conns[1].slots[3]")),
        (2, None), // inside a scalar
    ];
    for (offset, expected) in cases {
        assert_eq!(
            resolver.part_name(conns + offset).as_deref(),
            expected,
            "conns+{offset}"
        );
    }
    // A scalar variable's start is its own name: nothing to add.
    assert_eq!(resolver.part_name(plain), None);
}
