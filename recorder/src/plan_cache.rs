//! Plans of an executable's code kept on disk between recordings: the Rust lock
//! sites ([`crate::rust_locks`]) and the discovery sites ([`crate::discover`])
//! come from decoding every function of the binary, ~30 ms for a 4.6-MB Rust
//! release binary, and the same binary is planned again on every recording and
//! replay of a hunt. A plan depends only on the file's bytes and on the planner,
//! so it is kept under the file's identity (device, inode, size, modification and
//! change times) and the planner's (this executable's own identity): a rebuilt
//! program or a rebuilt ordo plans afresh.
//!
//! Entries live in `$ORDO_CACHE_DIR`, else `$XDG_CACHE_HOME/ordo/plans`, else
//! `~/.cache/ordo/plans`; `ORDO_CACHE_DIR=` (empty) turns the cache off. An
//! entry is written to a temporary name and renamed, carries its whole key and
//! a checksum, and is planned afresh when either does not match: a torn, stale or
//! damaged entry costs one planning, never a wrong plan. Failures to read or
//! write the cache are not errors (the plan is computed as without it); the
//! directory keeps at most [`KEPT`] entries and [`KEPT_BYTES`], the oldest
//! removed first. Entries
//! are trusted only in a directory and files this user owns and nobody else can
//! write: a plan's sites are instruction bytes the agent runs in the program.

use std::io::Write;
use std::path::{Path, PathBuf};

use ordo_probe_common::inproc::SoftSite;

/// Entries kept in the directory at most.
const KEPT: usize = 256;
/// Bytes of entries kept in the directory at most (a large program's discovery
/// plan is 48 bytes an instruction: ~25 MB for a 50-MB server).
const KEPT_BYTES: u64 = 512 << 20;
const MAGIC: &[u8; 8] = b"ORDOPLN2";
const SITE_BYTES: usize = std::mem::size_of::<SoftSite>();

// A site is written as its bytes: it must have no padding (every byte is a
// field's) and only integer fields (every byte pattern read back is a site).
const _: () = assert!(SITE_BYTES == 8 + 8 + 16 + 8 + 4 + 4);

/// A plan as kept: numbers and sites.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Entry {
    /// The plan's numbers (counts, flags, index entries), in an order its owner fixes.
    pub numbers: Vec<u64>,
    /// The plan's sites.
    pub sites: Vec<SoftSite>,
    /// The plan's strings (names), in an order its owner fixes.
    pub strings: Vec<String>,
}

/// The directory entries go to, or `None` when the cache is off.
fn directory() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("ORDO_CACHE_DIR") {
        return (!dir.is_empty()).then(|| PathBuf::from(dir));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|d| !d.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        })?;
    Some(base.join("ordo").join("plans"))
}

/// What says a file is unchanged: its canonical path, device, inode, size and
/// modification and change times to the nanosecond.
fn identity(path: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let path = std::fs::canonicalize(path).ok()?;
    let m = std::fs::metadata(&path).ok()?;
    Some(format!(
        "{} {} {} {} {}.{} {}.{}",
        path.display(),
        m.dev(),
        m.ino(),
        m.size(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec()
    ))
}

/// The whole key of a plan of `kind` for the file at `path`: the planner's
/// identity and the file's.
fn key(kind: &str, path: &Path) -> Option<String> {
    static PLANNER: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let planner = PLANNER
        .get_or_init(|| identity(&std::env::current_exe().ok()?))
        .as_ref()?;
    Some(format!("{kind}\n{planner}\n{}", identity(path)?))
}

/// The entry's file name: the kind and a hash of the key (the key itself is
/// inside, checked on reading).
fn file_name(kind: &str, key: &str) -> String {
    format!("{kind}-{:08x}{:08x}", crc32fast::hash(key.as_bytes()), {
        let mut h = crc32fast::Hasher::new_with_initial(0x6f72_646f);
        h.update(key.as_bytes());
        h.finalize()
    })
}

/// The plan of `kind` for the file at `path` from the cache, else from `plan`
/// (then kept for the next time).
pub(crate) fn cached<T>(
    kind: &str,
    path: &Path,
    plan: impl FnOnce() -> anyhow::Result<T>,
    to_entry: impl FnOnce(&T) -> Entry,
    from_entry: impl FnOnce(Entry) -> Option<T>,
) -> anyhow::Result<T> {
    let Some(slot) = Slot::of(kind, path) else {
        return plan();
    };
    if let Some(found) = slot.load().and_then(from_entry) {
        return Ok(found);
    }
    let planned = plan()?;
    slot.save(&to_entry(&planned));
    Ok(planned)
}

/// Where the entry of one kind for one file, as the file is now, is kept.
pub struct Slot {
    dir: PathBuf,
    file: PathBuf,
    path: PathBuf,
    key: String,
}

impl Slot {
    /// The slot of `kind` for the file at `path` as it is now; `None` when the
    /// cache is off or the file cannot be identified.
    pub(crate) fn of(kind: &str, path: &Path) -> Option<Slot> {
        Self::in_dir(directory()?, kind, path)
    }

    /// [`Slot::of`], in the cache directory `dir`.
    fn in_dir(dir: PathBuf, kind: &str, path: &Path) -> Option<Slot> {
        let key = key(kind, path)?;
        Some(Slot {
            file: dir.join(file_name(kind, &key)),
            dir,
            path: path.to_path_buf(),
            key,
        })
    }

    /// The entry kept, if there is a whole one that only this user could have
    /// written.
    pub(crate) fn load(&self) -> Option<Entry> {
        if !(private(&self.dir) && private(&self.file)) {
            return None;
        }
        decode(&std::fs::read(&self.file).ok()?, &self.key)
    }

    /// Keeps `entry`, unless the file changed since the slot was taken (what
    /// was planned from it may be of either version).
    pub(crate) fn save(&self, entry: &Entry) {
        if identity(&self.path).is_some_and(|now| self.key.ends_with(&now)) {
            let _ = store(&self.dir, &self.file, &encode(entry, &self.key));
        }
    }
}

/// Writes an entry under a temporary name and renames it into place; then
/// trims the directory to [`KEPT`] entries. The directory is made private to
/// this user (an entry's sites are instructions the agent runs).
fn store(dir: &Path, file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let temporary = dir.join(format!(
        ".{}.{}",
        file.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temporary)
        .and_then(|mut out| out.write_all(bytes))
        .and_then(|()| std::fs::rename(&temporary, file));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(e);
    }
    trim(dir, KEPT, KEPT_BYTES)
}

/// Removes the oldest entries of `dir` until at most `most` are left, holding at
/// most `most_bytes` together.
fn trim(dir: &Path, most: usize, most_bytes: u64) -> std::io::Result<()> {
    let mut entries: Vec<(std::time::SystemTime, u64, PathBuf)> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            Some((meta.modified().ok()?, meta.len(), e.path()))
        })
        .collect();
    entries.sort();
    let mut bytes: u64 = entries.iter().map(|e| e.1).sum();
    let mut left = entries.len();
    for (_, len, old) in &entries {
        if left <= most && bytes <= most_bytes {
            break;
        }
        let _ = std::fs::remove_file(old);
        left -= 1;
        bytes -= len;
    }
    Ok(())
}

/// Whether `path` (an entry or its directory) is this user's and writable by
/// nobody else: an entry someone else could have written is not trusted, since
/// the agent copies its sites' bytes into the program and runs them.
fn private(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    std::fs::symlink_metadata(path).is_ok_and(|m| m.uid() == me && m.mode() & 0o022 == 0)
}

/// Magic, key length and key, numbers, sites, then a CRC-32 of all before it.
fn encode(entry: &Entry, key: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + key.len() + entry.sites.len() * SITE_BYTES);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(key.len() as u64).to_le_bytes());
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(&(entry.numbers.len() as u64).to_le_bytes());
    for count in &entry.numbers {
        out.extend_from_slice(&count.to_le_bytes());
    }
    out.extend_from_slice(&(entry.sites.len() as u64).to_le_bytes());
    for site in &entry.sites {
        // SAFETY: a site is `SITE_BYTES` bytes of integer fields without padding
        // (asserted above): all of its bytes are initialized.
        let bytes = unsafe {
            std::slice::from_raw_parts((site as *const SoftSite).cast::<u8>(), SITE_BYTES)
        };
        out.extend_from_slice(bytes);
    }
    out.extend_from_slice(&(entry.strings.len() as u64).to_le_bytes());
    for string in &entry.strings {
        out.extend_from_slice(&(string.len() as u64).to_le_bytes());
        out.extend_from_slice(string.as_bytes());
    }
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The entry in `bytes` when it is whole and kept under `key`.
fn decode(bytes: &[u8], key: &str) -> Option<Entry> {
    let (body, crc) = bytes.split_at_checked(bytes.len().checked_sub(4)?)?;
    if crc32fast::hash(body) != u32::from_le_bytes(crc.try_into().ok()?) {
        return None;
    }
    let mut rest = Reader(body.strip_prefix(MAGIC.as_slice())?);
    let key_len = usize::try_from(rest.number()?).ok()?;
    if rest.take(key_len)? != key.as_bytes() {
        return None;
    }
    let n_numbers = usize::try_from(rest.number()?).ok()?;
    let numbers = (0..n_numbers)
        .map(|_| rest.number())
        .collect::<Option<Vec<u64>>>()?;
    let n_sites = usize::try_from(rest.number()?).ok()?;
    let raw = rest.take(n_sites.checked_mul(SITE_BYTES)?)?;
    let n_strings = usize::try_from(rest.number()?).ok()?;
    let strings = (0..n_strings)
        .map(|_| {
            let len = usize::try_from(rest.number()?).ok()?;
            String::from_utf8(rest.take(len)?.to_vec()).ok()
        })
        .collect::<Option<Vec<String>>>()?;
    if !rest.0.is_empty() {
        return None;
    }
    let mut sites = vec![SoftSite::default(); n_sites];
    // SAFETY: `sites` holds `n_sites` sites, `raw` as many sites' bytes; a site's
    // fields are integers, so any bytes are a valid site.
    unsafe {
        std::ptr::copy_nonoverlapping(raw.as_ptr(), sites.as_mut_ptr().cast::<u8>(), raw.len());
    }
    Some(Entry {
        numbers,
        sites,
        strings,
    })
}

/// The bytes of an entry not read yet.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    /// The next `n` bytes, if there are as many.
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, tail) = self.0.split_at_checked(n)?;
        self.0 = tail;
        Some(head)
    }

    /// The next little-endian `u64`.
    fn number(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sets `file`'s modification time to `seconds` after the epoch.
    fn set_age(file: &Path, seconds: u64) {
        let age = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(seconds);
        std::fs::File::options()
            .write(true)
            .open(file)
            .unwrap()
            .set_modified(age)
            .unwrap();
    }

    fn site(ip: u64) -> SoftSite {
        SoftSite {
            ip,
            disp: -8,
            bytes: [
                0x48, 0x8b, 0x47, 0xf8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x99,
            ],
            len: 4,
            base: 7,
            size: 8,
            gate: u32::MAX,
            patch: 3,
            ..SoftSite::default()
        }
    }

    /// An entry reads back as written, under its own key only; any damage to
    /// its bytes (a torn write, a flipped bit) makes it unreadable, not wrong.
    #[test]
    fn an_entry_reads_back_whole_or_not_at_all() {
        let entry = Entry {
            numbers: vec![1, u64::MAX, 0],
            sites: vec![site(0x1000), site(0x2000)],
            strings: vec!["cfg.slots[2]".into(), String::new(), "é".into()],
        };
        let bytes = encode(&entry, "kind\nplanner\nfile");
        assert_eq!(decode(&bytes, "kind\nplanner\nfile"), Some(entry));
        assert_eq!(decode(&bytes, "kind\nplanner\nother file"), None);
        for cut in [0, 1, 8, bytes.len() / 2, bytes.len() - 1] {
            assert_eq!(
                decode(&bytes[..cut], "kind\nplanner\nfile"),
                None,
                "cut at {cut}"
            );
        }
        for at in [0, 9, 40, bytes.len() - 30, bytes.len() - 2] {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x10;
            assert_eq!(
                decode(&damaged, "kind\nplanner\nfile"),
                None,
                "bit flipped at {at}"
            );
        }
    }

    /// A plan is computed once for a file and read back after; a file changed
    /// in place (same path, new bytes) is planned again; without a cache
    /// directory every call plans.
    #[test]
    fn a_changed_file_is_planned_again() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        let program = dir.path().join("program");
        std::fs::write(&program, b"first").unwrap();
        let plans = std::cell::Cell::new(0);
        let plan = |cache: &Path| {
            let slot = Slot::in_dir(cache.to_path_buf(), "test", &program).unwrap();
            let found = slot.load();
            found.unwrap_or_else(|| {
                plans.set(plans.get() + 1);
                let entry = Entry {
                    numbers: vec![std::fs::read(&program).unwrap().len() as u64],
                    ..Entry::default()
                };
                slot.save(&entry);
                entry
            })
        };
        assert_eq!(plan(&cache).numbers, [5]);
        assert_eq!(plan(&cache).numbers, [5]);
        assert_eq!(plans.get(), 1);
        std::thread::sleep(std::time::Duration::from_millis(10));
        std::fs::write(&program, b"second").unwrap();
        assert_eq!(plan(&cache).numbers, [6]);
        assert_eq!(plan(&cache).numbers, [6]);
        assert_eq!(plans.get(), 2);
    }

    /// An entry in a directory others can write to is not read (its sites'
    /// bytes would run in the program).
    #[test]
    fn an_entry_others_could_write_is_not_trusted() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        let program = dir.path().join("program");
        std::fs::write(&program, b"bytes").unwrap();
        let slot = Slot::in_dir(cache.clone(), "test", &program).unwrap();
        let entry = Entry {
            sites: vec![site(0x1000)],
            ..Entry::default()
        };
        slot.save(&entry);
        assert_eq!(slot.load(), Some(entry.clone()));
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(slot.load(), None, "a world-writable directory was trusted");
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::set_permissions(&slot.file, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert_eq!(slot.load(), None, "a world-writable entry was trusted");
    }

    /// The oldest entries go first when the directory holds too many bytes.
    #[test]
    fn the_directory_keeps_its_bytes_bounded() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..10u64 {
            let file = dir.path().join(format!("e{i}"));
            std::fs::write(&file, vec![0u8; 1000]).unwrap();
            set_age(&file, 1000 + i);
        }
        trim(dir.path(), 100, 4500).unwrap();
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["e6", "e7", "e8", "e9"]);
    }

    /// The directory keeps at most `KEPT` entries, the oldest removed.
    #[test]
    fn the_directory_is_trimmed() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..KEPT + 5 {
            let file = dir.path().join(format!("e{i:03}"));
            store(dir.path(), &file, b"x").unwrap();
            set_age(&file, 1_000_000 + i as u64);
        }
        let left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(left.len() <= KEPT + 1, "{} entries", left.len());
        assert!(!left.contains(&"e000".to_string()));
    }
}
