//! Empty uprobes at chosen offsets of libc: the baseline a probe site's cost is
//! compared with ("per-event cost ≤ 1.3× an empty probe at the same site"). bpftrace
//! 0.17 (Debian 12) refuses probes in the middle of a function, so ordo's own object
//! provides one (`ordo_empty`, which returns at once).

use std::num::NonZeroU32;
use std::path::Path;

use anyhow::{anyhow, Context, Result};
use aya::programs::uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeScope};
use aya::programs::UProbe;
use aya::{Ebpf, EbpfLoader};

/// Attached empty probes; dropping this detaches them.
pub struct EmptyProbes {
    _ebpf: Ebpf,
}

/// Attaches an empty uprobe at each file offset of `library`, for `pid`'s threads.
pub fn attach_empty(pid: u32, library: &Path, offsets: &[u64]) -> Result<EmptyProbes> {
    let pid = NonZeroU32::new(pid).ok_or_else(|| anyhow!("pid 0 is not a process"))?;
    let mut ebpf = EbpfLoader::new()
        .load(crate::recording::attach::PROBE_OBJECT)
        .context("load the probe object")?;
    let prog: &mut UProbe = ebpf
        .program_mut("ordo_empty")
        .context("ordo_empty")?
        .try_into()?;
    prog.load()?;
    for &offset in offsets {
        let point = UProbeAttachPoint {
            location: UProbeAttachLocation::AbsoluteOffset(offset),
            cookie: None,
        };
        prog.attach(point, library, UProbeScope::OneProcess(pid))
            .with_context(|| {
                format!("attach an empty probe at {}+{offset:#x}", library.display())
            })?;
    }
    Ok(EmptyProbes { _ebpf: ebpf })
}
