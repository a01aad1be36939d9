//! Where ordo probes libc, and the two comparators built on the same places: a
//! bpftrace script probing the same functions the way a user would write it, and
//! *empty* probes at ordo's exact sites (the physical limit of trap-based tracing).
//!
//! The sites come from `ordo record --list-probes --json` when the binary has it;
//! otherwise from the probe table's source (`recorder/src/probes/`) at function
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

/// `(function, on_return)` of every row of the probe table's source: `row("f", op,
/// via, on_return)` rows, and `placed("f", op, via)` rows (acquisitions placed inside
/// the function, which report a result).
pub fn parse_probe_table(source: &str) -> Vec<(String, bool)> {
    let mut rows = Vec::new();
    let table = source.split("pub const PROBES").nth(1).unwrap_or("");
    let table = table.split("];").next().unwrap_or("");
    let mut rest = table;
    while let Some(pos) = rest.find('(') {
        let word_start = rest[..pos]
            .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
            .map_or(0, |i| i + 1);
        let maker = &rest[word_start..pos];
        let args = rest[pos + 1..].split(')').next().unwrap_or("");
        let fields: Vec<&str> = args.split(',').map(str::trim).collect();
        match maker {
            "row" if fields.len() >= 4 => {
                rows.push((fields[0].trim_matches('"').to_string(), fields[3] == "true"))
            }
            "placed" if fields.len() >= 3 => {
                rows.push((fields[0].trim_matches('"').to_string(), true))
            }
            _ => {}
        }
        rest = &rest[pos + 1..];
    }
    rows
}

/// The probe table's source file (it moved into a module directory).
fn probe_table_path() -> PathBuf {
    let dir = crate::root().join("recorder/src/probes/mod.rs");
    if dir.exists() {
        dir
    } else {
        crate::root().join("recorder/src/probes.rs")
    }
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
    let table_path = probe_table_path();
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
        source: "the probe table's functions at function entry (this ordo has no --list-probes)"
            .into(),
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

/// The `ordo_empty` program (an eBPF program that returns at once) at ordo's
/// instruction sites, through the recorder's `empty_probes` example: the physical
/// limit of a probe at those places, without perf's per-hit bookkeeping (tracefs
/// uprobe events counted by `perf stat` cost ~4–13 µs a hit here, against ~1.7 µs
/// for a lock/unlock pair with a bare BPF program).
pub struct EmptyProgram {
    /// `OFFSET,OFFSET,...` as `empty_probes` takes them.
    pub offsets: String,
    /// Functions where ordo also has a return probe, which `empty_probes` cannot place.
    pub uncovered_returns: Vec<String>,
}

impl EmptyProgram {
    /// The instruction sites (deduplicated offsets, in order) and the functions whose
    /// return probes are left out. Fails when no instruction site is left.
    pub fn from_sites(sites: &[Site]) -> Result<EmptyProgram> {
        let mut offsets: Vec<u64> = Vec::new();
        let mut uncovered_returns: Vec<String> = Vec::new();
        for s in sites {
            if s.on_return {
                if !uncovered_returns.contains(&s.function) {
                    uncovered_returns.push(s.function.clone());
                }
            } else if !offsets.contains(&s.file_offset) {
                offsets.push(s.file_offset);
            }
        }
        if offsets.is_empty() {
            bail!("no instruction sites for the empty program (only return probes)");
        }
        Ok(EmptyProgram {
            offsets: offsets
                .iter()
                .map(|o| format!("{o:#x}"))
                .collect::<Vec<_>>()
                .join(","),
            uncovered_returns,
        })
    }

    /// The `empty_probes` command line attaching the probes to a running process
    /// until SIGINT.
    pub fn attach_command(&self, empty_probes: &Path, pid: &str) -> Command {
        let mut c = Command::new(empty_probes);
        c.arg(&self.offsets).args(["--pid", pid]);
        c
    }

    /// The `empty_probes` command line launching `program args` under the probes.
    pub fn command(&self, empty_probes: &Path, program: &Path, args: &[String]) -> Command {
        let mut c = Command::new(empty_probes);
        c.arg(&self.offsets).arg("--").arg(program).args(args);
        c
    }
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
        let rows = parse_probe_table(&std::fs::read_to_string(probe_table_path()).unwrap());
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

    #[test]
    fn empty_program_takes_instruction_sites_once_and_names_return_probes() {
        let site = |f: &str, off: u64, on_return: bool| Site {
            function: f.into(),
            library: PathBuf::from("/lib/libc.so.6"),
            file_offset: off,
            on_return,
        };
        let e = EmptyProgram::from_sites(&[
            site("pthread_mutex_lock", 0x8c3c7, false),
            site("pthread_mutex_lock", 0x8c428, false),
            site("pthread_mutex_lock", 0x8c428, true),
            site("pthread_mutex_unlock", 0x8dd55, false),
            site("pthread_mutex_unlock", 0x8dd55, false),
            site("sem_wait", 0x10, true),
        ])
        .unwrap();
        assert_eq!(e.offsets, "0x8c3c7,0x8c428,0x8dd55");
        assert_eq!(e.uncovered_returns, ["pthread_mutex_lock", "sem_wait"]);
        let c = e.command(
            Path::new("/x/empty_probes"),
            Path::new("/bin/prog"),
            &["lock".into()],
        );
        let args: Vec<_> = c
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(args, ["0x8c3c7,0x8c428,0x8dd55", "--", "/bin/prog", "lock"]);
        let c = e.attach_command(Path::new("/x/empty_probes"), "42");
        let args: Vec<_> = c
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(args, ["0x8c3c7,0x8c428,0x8dd55", "--pid", "42"]);
        assert!(EmptyProgram::from_sites(&[site("f", 1, true)]).is_err());
    }
}
