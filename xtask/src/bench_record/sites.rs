//! Where ordo probes libc, and the two comparators built on the same places: a
//! bpftrace script probing the same functions the way a user would write it, and
//! *empty* probes at ordo's exact sites (the physical limit of trap-based tracing).
//!
//! The sites come from `ordo record --list-probes --json` when the binary has it;
//! otherwise from the probe table's source (`recorder/src/probes.rs`) at function
//! entry, plus a return probe where the table has one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::Value;

/// One place ordo puts a probe.
#[derive(Clone, Debug, PartialEq)]
pub struct Site {
    pub function: String,
    pub library: PathBuf,
    /// File offset of the probed instruction (of the function start for a return probe).
    pub file_offset: u64,
    /// A return probe (uretprobe) rather than an instruction probe.
    pub on_return: bool,
}

/// The sites and where they came from (printed with the results).
pub struct Sites {
    pub sites: Vec<Site>,
    pub source: String,
    /// Whether these are ordo's own sites (from `--list-probes`), not function entries.
    pub exact: bool,
}

/// The C library programs here load.
pub fn libc_path() -> PathBuf {
    for candidate in [
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
    ] {
        if Path::new(candidate).exists() {
            return PathBuf::from(candidate);
        }
    }
    PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6")
}

/// Dynamic function symbols of a library: name → file offset (default versions first).
fn function_offsets(library: &Path) -> Result<BTreeMap<String, u64>> {
    let out = Command::new("readelf")
        .args(["-W", "--dyn-syms"])
        .arg(library)
        .output()
        .context("run readelf")?;
    let segments = Command::new("readelf")
        .args(["-lW"])
        .arg(library)
        .output()?;
    // (vaddr, filesz, offset) of each PT_LOAD, to turn a symbol's address into a file offset.
    let loads: Vec<(u64, u64, u64)> = String::from_utf8_lossy(&segments.stdout)
        .lines()
        .filter(|l| l.trim_start().starts_with("LOAD"))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
            Some((hex(f.get(2)?)?, hex(f.get(4)?)?, hex(f.get(1)?)?))
        })
        .collect();
    let mut map = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 || f[3] != "FUNC" {
            continue;
        }
        let Ok(vaddr) = u64::from_str_radix(f[1], 16) else {
            continue;
        };
        let (name, default) = match f[7].split_once("@@") {
            Some((n, _)) => (n, true),
            None => (f[7].split('@').next().unwrap_or(f[7]), !f[7].contains('@')),
        };
        let Some(offset) = loads
            .iter()
            .find(|(start, size, _)| vaddr >= *start && vaddr < start + size)
            .map(|(start, _, off)| vaddr - start + off)
        else {
            continue;
        };
        if default || !map.contains_key(name) {
            map.insert(name.to_string(), offset);
        }
    }
    Ok(map)
}

/// Sites from `ordo record --list-probes --json`: a JSON array (or an object holding
/// one under `probes`/`sites`, or one object per line) of sites with `function` and a
/// file offset (`file_offset` or `offset`, number or hex string), optionally
/// `library`/`path` and a return flag (`return`, `on_return`, or `kind: "return"`),
/// or `program` naming the eBPF programs at the site (`ordo_entry+ordo_return`: an
/// instruction probe and a return probe at the same offset; `ordo_return`: only the
/// latter).
pub fn parse_list_probes(text: &str, default_library: &Path) -> Result<Vec<Site>> {
    let items: Vec<Value> = match serde_json::from_str::<Value>(text) {
        Ok(Value::Array(a)) => a,
        Ok(Value::Object(o)) => match o.get("probes").or(o.get("sites")) {
            Some(Value::Array(a)) => a.clone(),
            _ => vec![Value::Object(o)],
        },
        _ => text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(serde_json::from_str)
            .collect::<std::result::Result<_, _>>()
            .context("--list-probes --json: neither a JSON document nor JSON lines")?,
    };
    let number = |v: &Value| -> Option<u64> {
        v.as_u64().or_else(|| {
            let s = v.as_str()?;
            match s.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16).ok(),
                None => s.parse().ok(),
            }
        })
    };
    let mut sites = Vec::new();
    for item in items {
        let Some(function) = item["function"].as_str() else {
            bail!("--list-probes --json: a site without `function`: {item}");
        };
        let Some(file_offset) = number(&item["file_offset"]).or_else(|| number(&item["offset"]))
        else {
            bail!("--list-probes --json: site {function} has no file offset: {item}");
        };
        let library = item["library"]
            .as_str()
            .or(item["path"].as_str())
            .map(PathBuf::from)
            .unwrap_or_else(|| default_library.to_path_buf());
        let program = item["program"].as_str().unwrap_or("");
        let only_return = item["return"].as_bool() == Some(true)
            || item["on_return"].as_bool() == Some(true)
            || item["kind"].as_str() == Some("return")
            || program == "ordo_return";
        let also_return = !only_return && program.split('+').any(|p| p.contains("return"));
        let site = |on_return| Site {
            function: function.into(),
            library: library.clone(),
            file_offset,
            on_return,
        };
        sites.push(site(only_return));
        if also_return {
            sites.push(site(true));
        }
    }
    Ok(sites)
}

/// `(function, on_return)` of every row of the probe table's source.
pub fn parse_probe_table(source: &str) -> Vec<(String, bool)> {
    let mut rows = Vec::new();
    let table = source.split("pub const PROBES").nth(1).unwrap_or("");
    for call in table.split("row(").skip(1) {
        let Some(args) = call.split(')').next() else {
            continue;
        };
        let fields: Vec<&str> = args.split(',').map(str::trim).collect();
        if fields.len() >= 4 {
            let name = fields[0].trim_matches('"');
            rows.push((name.to_string(), fields[3] == "true"));
        }
    }
    rows
}

/// The sites of the `ordo` binary at hand.
pub fn discover(ordo: &Path, list_probes: bool) -> Result<Sites> {
    let libc = libc_path();
    if list_probes {
        let out = Command::new(ordo)
            .args(["record", "--list-probes", "--json"])
            .output()?;
        if out.status.success() {
            let sites = parse_list_probes(&String::from_utf8_lossy(&out.stdout), &libc)?;
            if !sites.is_empty() {
                return Ok(Sites {
                    sites,
                    source: "ordo record --list-probes --json".into(),
                    exact: true,
                });
            }
        }
        eprintln!(
            "bench: `ordo record --list-probes --json` failed ({}); using the probe table at function entry",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let table_path = crate::root().join("recorder/src/probes.rs");
    let table = std::fs::read_to_string(&table_path)
        .with_context(|| format!("read {}", table_path.display()))?;
    let offsets = function_offsets(&libc)?;
    let mut sites = Vec::new();
    for (function, on_return) in parse_probe_table(&table) {
        let Some(&offset) = offsets.get(&function) else {
            continue;
        };
        sites.push(Site {
            function: function.clone(),
            library: libc.clone(),
            file_offset: offset,
            on_return: false,
        });
        if on_return {
            sites.push(Site {
                function,
                library: libc.clone(),
                file_offset: offset,
                on_return: true,
            });
        }
    }
    if sites.is_empty() {
        bail!(
            "no probe sites: {} has no rows that resolve in {}",
            table_path.display(),
            libc.display()
        );
    }
    Ok(Sites {
        sites,
        source: "recorder/src/probes.rs at function entry (this ordo has no --list-probes)".into(),
        exact: false,
    })
}

/// Whether a naive tracer would take this function's return value: acquisitions and
/// waits report their result, releases and signals do not.
fn reports_result(function: &str) -> bool {
    !(function.contains("unlock")
        || function.contains("signal")
        || function.contains("broadcast")
        || function.contains("post")
        || function == "syscall")
}

/// A bpftrace script probing the same functions as ordo the way a user would: an
/// entry probe on each, printing (time, tid, function, object) — and for functions
/// whose result ordo records, the object stashed at entry and printed at return with
/// the result. bpftrace of this Debian release cannot probe at an offset, so all
/// its probes are at function entry. `target` is the bpftrace expression of the
/// traced pid (`cpid` with `-c`, `$1` with `-p PID` and the pid as argument): its
/// library probes are not scoped to the process, so each probe filters on it.
pub fn bpftrace_script(sites: &[Site], target: &str) -> String {
    let mut functions: Vec<(&str, &Path)> = Vec::new();
    for s in sites {
        if !functions.iter().any(|(f, _)| *f == s.function) {
            functions.push((&s.function, &s.library));
        }
    }
    let mut script = String::from(
        "// Generated by `cargo xtask bench record`: the naive tracer of the same functions.\n",
    );
    for (i, (function, library)) in functions.iter().enumerate() {
        let lib = library.display();
        if reports_result(function) {
            script.push_str(&format!(
                "uprobe:{lib}:{function} /pid == {target}/ {{ @arg{i}[tid] = arg0; }}\n\
                 uretprobe:{lib}:{function} /pid == {target}/ {{ printf(\"%lu %d {i} %lx %d\\n\", nsecs, tid, @arg{i}[tid], retval); delete(@arg{i}[tid]); }}\n"
            ));
        } else {
            script.push_str(&format!(
                "uprobe:{lib}:{function} /pid == {target}/ {{ printf(\"%lu %d {i} %lx\\n\", nsecs, tid, arg0); }}\n"
            ));
        }
    }
    script
}

const TRACEFS: &str = "/sys/kernel/tracing";
const GROUP: &str = "ordobench";

/// Empty probes at ordo's sites: kernel uprobe events (tracefs `uprobe_events`) with
/// no BPF program, counted by `perf stat` — a trap at each site and nothing else.
/// bpftrace would be the obvious tool, but Debian's bpftrace 0.17 refuses probes at
/// an offset inside a function ("compiled without (k|u)probe offset support").
pub struct EmptyProbes {
    names: Vec<String>,
    mounted_tracefs: bool,
}

impl EmptyProbes {
    /// Defines one uprobe event per site (group `ordobench`), mounting tracefs if needed.
    pub fn define(sites: &[Site]) -> Result<EmptyProbes> {
        let events = Path::new(TRACEFS).join("uprobe_events");
        let mut mounted_tracefs = false;
        if !events.exists() {
            crate::run(Command::new("mount").args(["-t", "tracefs", "tracefs", TRACEFS]))
                .context("mount tracefs for the empty probes")?;
            mounted_tracefs = true;
        }
        let mut probes = EmptyProbes {
            names: Vec::new(),
            mounted_tracefs,
        };
        probes.remove_all();
        let mut text = String::new();
        for (i, s) in sites.iter().enumerate() {
            let name = format!("s{i}_{}", s.function.chars().take(40).collect::<String>());
            let kind = if s.on_return { 'r' } else { 'p' };
            text.push_str(&format!(
                "{kind}:{GROUP}/{name} {}:0x{:x}\n",
                s.library.display(),
                s.file_offset
            ));
            probes.names.push(name);
        }
        for line in text.lines() {
            append(&events, line).with_context(|| format!("define uprobe event `{line}`"))?;
        }
        Ok(probes)
    }

    /// `perf stat` arguments counting every empty probe (its output to `out`).
    pub fn perf_args(&self, out: &Path) -> Vec<String> {
        vec![
            "stat".into(),
            "-x,".into(),
            "-e".into(),
            format!("{GROUP}:*"),
            "-o".into(),
            out.display().to_string(),
        ]
    }

    /// Total hits in a `perf stat -x,` output file.
    pub fn hits(out: &Path) -> Option<u64> {
        let text = std::fs::read_to_string(out).ok()?;
        let mut total = None;
        for line in text.lines().filter(|l| l.contains(GROUP)) {
            let count: u64 = line.split(',').next()?.trim().parse().ok()?;
            *total.get_or_insert(0) += count;
        }
        total
    }

    fn remove_all(&self) {
        let events = Path::new(TRACEFS).join("uprobe_events");
        let Ok(defined) = std::fs::read_to_string(&events) else {
            return;
        };
        for line in defined.lines() {
            // "p:ordobench/NAME /path:0x..." — remove only our own group's events.
            if let Some(name) = line
                .split_whitespace()
                .next()
                .and_then(|d| d.split_once(':'))
                .map(|(_, n)| n)
            {
                if name.starts_with(&format!("{GROUP}/")) {
                    let _ = append(&events, &format!("-:{name}"));
                }
            }
        }
    }
}

impl Drop for EmptyProbes {
    fn drop(&mut self) {
        self.remove_all();
        if self.mounted_tracefs {
            let _ = Command::new("umount").arg(TRACEFS).status();
        }
    }
}

fn append(path: &Path, line: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().append(true).open(path)?;
    f.write_all(format!("{line}\n").as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_probes_json_in_its_likely_shapes() {
        let lib = Path::new("/lib/libc.so.6");
        let array = r#"[{"function":"pthread_mutex_lock","file_offset":574468,"instruction":"jne","emulated":true,"events":["mutex_lock"]},
                        {"function":"pthread_mutex_unlock","offset":"0x8dd55","return":false}]"#;
        let sites = parse_list_probes(array, lib).unwrap();
        assert_eq!(sites.len(), 2);
        assert_eq!(sites[0].file_offset, 574468);
        assert_eq!(sites[1].file_offset, 0x8dd55);
        // The shape `ordo record --list-probes --json` of the placement work prints.
        let placed = "{\"emulated\":true,\"function\":\"pthread_mutex_lock\",\"function_offset\":184,\"offset\":\"0x8c428\",\"program\":\"ordo_entry+ordo_return\"}\n\
                      {\"emulated\":true,\"function\":\"pthread_mutex_lock\",\"function_offset\":87,\"offset\":\"0x8c3c7\",\"program\":\"ordo_site\"}\n";
        let sites = parse_list_probes(placed, lib).unwrap();
        assert_eq!(sites.len(), 3, "{sites:?}");
        assert_eq!((sites[0].file_offset, sites[0].on_return), (0x8c428, false));
        assert_eq!((sites[1].file_offset, sites[1].on_return), (0x8c428, true));
        assert_eq!((sites[2].file_offset, sites[2].on_return), (0x8c3c7, false));
        let lines = "{\"function\":\"sem_wait\",\"file_offset\":10,\"kind\":\"return\",\"library\":\"/x.so\"}\n";
        let sites = parse_list_probes(lines, lib).unwrap();
        assert!(sites[0].on_return);
        assert_eq!(sites[0].library, Path::new("/x.so"));
        assert!(parse_list_probes(r#"[{"function":"f"}]"#, lib).is_err());
    }

    #[test]
    fn probe_table_rows_are_read_from_the_source() {
        let rows = parse_probe_table(
            &std::fs::read_to_string(crate::root().join("recorder/src/probes.rs")).unwrap(),
        );
        assert!(
            rows.contains(&("pthread_mutex_lock".to_string(), true)),
            "{rows:?}"
        );
        assert!(
            rows.contains(&("pthread_mutex_unlock".to_string(), false)),
            "{rows:?}"
        );
        assert!(rows.len() >= 10, "{rows:?}");
    }

    #[test]
    fn bpftrace_script_takes_results_of_acquisitions_only() {
        let lib = PathBuf::from("/lib/libc.so.6");
        let site = |f: &str| Site {
            function: f.into(),
            library: lib.clone(),
            file_offset: 0,
            on_return: false,
        };
        let script = bpftrace_script(
            &[
                site("pthread_mutex_lock"),
                site("pthread_mutex_unlock"),
                site("pthread_mutex_lock"),
            ],
            "cpid",
        );
        assert_eq!(
            script
                .matches("uretprobe:/lib/libc.so.6:pthread_mutex_lock")
                .count(),
            1,
            "{script}"
        );
        assert!(
            !script.contains("uretprobe:/lib/libc.so.6:pthread_mutex_unlock"),
            "{script}"
        );
        assert!(
            script.contains("uprobe:/lib/libc.so.6:pthread_mutex_unlock /pid == cpid/ { printf"),
            "{script}"
        );
    }
}
