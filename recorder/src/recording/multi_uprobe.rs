//! Multi-uprobe links: one `BPF_LINK_CREATE` attaches a program at every probed offset
//! of one file, and closing it detaches them all after a single RCU grace period.
//!
//! Per-probe perf-event uprobes (what aya 0.14 offers) cost one grace period each on
//! detach (~90 ms here, serialized by the kernel: ~5 s for ordo's ~55 probes). The
//! kernel only accepts a program in a multi-uprobe link if it was *loaded* with
//! `expected_attach_type = BPF_TRACE_UPROBE_MULTI`, which aya cannot set for uprobes,
//! and the verifier then also picks the multi-uprobe variant of
//! `bpf_get_attach_cookie`. So these programs are loaded here: aya-obj (the crate aya
//! itself loads objects with) parses the probe object and relocates its map references
//! to the maps aya already created, and the raw `bpf()` syscall loads the instructions
//! and creates the links. The programs share every map with the aya-loaded ones.

use std::collections::HashSet;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use aya::maps::{Map, MapData};
use aya::Ebpf;
use aya_obj::generated::{
    bpf_attach_type::BPF_TRACE_UPROBE_MULTI, bpf_attr, bpf_cmd,
    bpf_prog_type::BPF_PROG_TYPE_KPROBE, BPF_F_UPROBE_MULTI_RETURN,
};
use aya_obj::Object;

/// The probe programs relocated against a loaded [`Ebpf`]'s maps, ready to load.
pub(super) struct MultiUprobePrograms {
    object: Object,
}

impl MultiUprobePrograms {
    /// Parses `object` and points its map references at the maps `ebpf` created.
    /// `taken` are maps taken out of `ebpf` already (the ring buffer, mapped
    /// while the probes were loaded ahead): by name, their descriptors.
    pub(super) fn relocate(
        object: &[u8],
        ebpf: &Ebpf,
        taken: &[(&str, std::os::fd::BorrowedFd<'_>)],
    ) -> Result<MultiUprobePrograms> {
        let mut object = Object::parse(object).context("parse the probe object")?;
        let text_sections: HashSet<usize> = object
            .functions
            .keys()
            .map(|(section, _)| *section)
            .collect();
        let maps = std::mem::take(&mut object.maps);
        let mut fds = Vec::new();
        for name in maps.keys() {
            if let Some((_, fd)) = taken.iter().find(|(taken, _)| taken == name) {
                fds.push((name.as_str(), fd.as_raw_fd()));
                continue;
            }
            let map = ebpf
                .map(name)
                .ok_or_else(|| anyhow!("map {name} was not created"))?;
            fds.push((name.as_str(), map_data(map)?.fd().as_fd().as_raw_fd()));
        }
        object
            .relocate_maps(
                fds.iter().map(|(name, fd)| (*name, *fd, &maps[*name])),
                &text_sections,
            )
            .map_err(|e| anyhow!("relocate the probe object's maps: {e}"))?;
        object
            .relocate_calls(&text_sections)
            .map_err(|e| anyhow!("link the probe object's functions: {e}"))?;
        Ok(MultiUprobePrograms { object })
    }

    /// Loads program `name` for multi-uprobe links.
    pub(super) fn load(&self, name: &str) -> Result<OwnedFd> {
        let program = self
            .object
            .programs
            .get(name)
            .ok_or_else(|| anyhow!("no program {name} in the probe object"))?;
        let function = &self.object.functions[&program.function_key()];
        let license = CString::new("GPL").expect("no NUL");
        let mut log = vec![0u8; 1 << 16];
        // SAFETY: bpf_attr is a plain C union; all-zero is its documented default.
        let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
        // SAFETY: writing the BPF_PROG_LOAD member of the union.
        let load = unsafe { &mut attr.__bindgen_anon_3 };
        load.prog_type = BPF_PROG_TYPE_KPROBE as u32;
        load.expected_attach_type = BPF_TRACE_UPROBE_MULTI as u32;
        load.insn_cnt = function.instructions.len() as u32;
        load.insns = function.instructions.as_ptr() as u64;
        load.license = license.as_ptr() as u64;
        for (dst, src) in load.prog_name.iter_mut().zip(name.bytes().take(15)) {
            *dst = src as _;
        }
        let fd = match bpf(bpf_cmd::BPF_PROG_LOAD, &mut attr) {
            Ok(fd) => fd,
            Err(_) => {
                // Load again with the verifier's log, to say why.
                // SAFETY: as above.
                let load = unsafe { &mut attr.__bindgen_anon_3 };
                load.log_level = 1;
                load.log_buf = log.as_mut_ptr() as u64;
                load.log_size = log.len() as u32;
                let err = bpf(bpf_cmd::BPF_PROG_LOAD, &mut attr).err();
                let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                let text = String::from_utf8_lossy(&log[..end]);
                let tail: Vec<&str> = text.lines().rev().take(3).collect();
                bail!(
                    "load {name} for multi-uprobe links: {} ({})",
                    err.map(|e| e.to_string()).unwrap_or_default(),
                    tail.join(" / ")
                );
            }
        };
        Ok(fd)
    }
}

/// Attaches `program` at `offsets` (file offsets) of `file` with per-site `cookies`,
/// firing only in process `pid` (all its threads, also after `exec`); `on_return`
/// makes them return probes. Closing the returned link detaches every site at once.
pub(super) fn attach(
    program: BorrowedFd<'_>,
    file: &Path,
    offsets: &[u64],
    cookies: &[u64],
    pid: u32,
    on_return: bool,
) -> Result<OwnedFd> {
    assert_eq!(offsets.len(), cookies.len(), "one cookie per offset");
    if offsets.is_empty() {
        bail!("no offsets to attach in {}", file.display());
    }
    let path = CString::new(file.as_os_str().as_bytes())
        .with_context(|| format!("{}: path with a NUL byte", file.display()))?;
    // SAFETY: bpf_attr is a plain C union; all-zero is its documented default.
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    // SAFETY: writing the BPF_LINK_CREATE member of the union.
    let link = unsafe { &mut attr.link_create };
    link.__bindgen_anon_1.prog_fd = program.as_raw_fd() as u32;
    link.attach_type = BPF_TRACE_UPROBE_MULTI as u32;
    // SAFETY: writing the uprobe_multi member of the link_create union.
    let multi = unsafe { &mut link.__bindgen_anon_3.uprobe_multi };
    multi.path = path.as_ptr() as u64;
    multi.offsets = offsets.as_ptr() as u64;
    multi.cookies = cookies.as_ptr() as u64;
    multi.cnt = offsets.len() as u32;
    multi.flags = if on_return {
        BPF_F_UPROBE_MULTI_RETURN
    } else {
        0
    };
    multi.pid = pid;
    bpf(bpf_cmd::BPF_LINK_CREATE, &mut attr).with_context(|| {
        format!(
            "attach {} {} probes to {}",
            offsets.len(),
            if on_return { "return" } else { "entry" },
            file.display()
        )
    })
}

/// The `MapData` behind an aya map (every variant holds one).
fn map_data(map: &Map) -> Result<&MapData> {
    Ok(match map {
        Map::Array(m)
        | Map::HashMap(m)
        | Map::LruHashMap(m)
        | Map::PerCpuArray(m)
        | Map::PerCpuHashMap(m)
        | Map::RingBuf(m)
        | Map::ProgramArray(m)
        | Map::Unsupported(m) => m,
        _ => bail!("unexpected map type in the probe object"),
    })
}

/// The `bpf()` syscall for commands that return a new descriptor.
fn bpf(cmd: bpf_cmd, attr: &mut bpf_attr) -> io::Result<OwnedFd> {
    // SAFETY: attr is a valid, fully initialized bpf_attr of the size we pass.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            attr as *mut bpf_attr,
            std::mem::size_of::<bpf_attr>(),
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new descriptor that we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(ret as i32) })
}
