//! Files ordo writes (traces, exports): created without following symlinks,
//! without clobbering, and never over one of the command's own inputs.
//!
//! ordo often runs as root, so an output path is treated as hostile: a symlink
//! planted at it must not redirect the write, an existing file is replaced only when
//! asked (`--force`), and a path naming an input (`ordo export t.ordo -o t.ordo`, or
//! a trace written over the program it records) is refused outright. The data goes
//! into a fresh file created with `O_EXCL` in the same directory (the `tempfile`
//! crate), which is renamed over the path: `rename` replaces a symlink itself and
//! never the file it points to, and the old file's inode (a running binary, say) is
//! left untouched.

use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use tempfile::NamedTempFile;

/// An output file being written; it appears at its path on [`Output::commit`].
pub struct Output {
    temp: NamedTempFile,
    path: PathBuf,
    force: bool,
}

fn refuse(path: &Path, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!("{}: {why}", path.display()),
    )
}

/// Checks that `path` may be written: not one of `inputs` (by device and inode,
/// through symlinks), and, unless `force`, not an existing file (a symlink counts
/// as existing, dangling or not).
pub fn check(path: &Path, force: bool, inputs: &[&Path]) -> io::Result<()> {
    let target = std::fs::metadata(path).ok();
    for input in inputs {
        let same = match (&target, std::fs::metadata(input)) {
            (Some(t), Ok(i)) => t.dev() == i.dev() && t.ino() == i.ino(),
            _ => false,
        };
        if same {
            return Err(refuse(
                path,
                &format!("is the input {}: refusing to overwrite it", input.display()),
            ));
        }
    }
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        let kind = meta.file_type();
        if !kind.is_file() && !kind.is_symlink() {
            // A device (`-o /dev/null`), FIFO or directory is never replaced.
            return Err(refuse(
                path,
                "is not a regular file: refusing to replace it",
            ));
        }
    }
    if !force {
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            let what = if meta.file_type().is_symlink() {
                "is a symlink"
            } else {
                "exists"
            };
            return Err(refuse(path, &format!("{what} (use --force to replace it)")));
        }
    }
    Ok(())
}

impl Output {
    /// Starts writing `path` (see [`check`] for what is refused). Mode 0600.
    pub fn create(path: &Path, force: bool, inputs: &[&Path]) -> io::Result<Output> {
        check(path, force, inputs)?;
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let name = path
            .file_name()
            .ok_or_else(|| io::Error::other(format!("{}: not a file name", path.display())))?;
        let temp = tempfile::Builder::new()
            .prefix(&format!(".{}.", name.to_string_lossy()))
            .suffix(".tmp")
            .tempfile_in(dir)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
        Ok(Output {
            temp,
            path: path.to_path_buf(),
            force,
        })
    }

    /// The file to write to.
    pub fn file(&mut self) -> &mut File {
        self.temp.as_file_mut()
    }

    /// Moves the file to its path (replacing what is there only when forced).
    pub fn commit(self) -> io::Result<File> {
        let path = self.path;
        let persisted = if self.force {
            self.temp.persist(&path)
        } else {
            self.temp.persist_noclobber(&path)
        };
        persisted.map_err(|e| {
            let kind = e.error.kind();
            let why = if kind == io::ErrorKind::AlreadyExists {
                "appeared meanwhile (use --force to replace it)".to_string()
            } else {
                e.error.to_string()
            };
            io::Error::new(kind, format!("{}: {why}", path.display()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn refuses_existing_files_symlinks_and_inputs() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in");
        std::fs::write(&input, b"input").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&input, &link).unwrap();
        let fresh = dir.path().join("out");

        // An input, directly or through a symlink, is refused even when forced.
        for path in [&input, &link] {
            let e = Output::create(path, true, &[&input]).err().unwrap();
            assert!(e.to_string().contains("refusing to overwrite"), "{e}");
        }
        // Existing files and symlinks need force.
        let e = Output::create(&link, false, &[]).err().unwrap();
        assert!(e.to_string().contains("is a symlink (use --force"), "{e}");
        let e = Output::create(&input, false, &[]).err().unwrap();
        assert!(e.to_string().contains("exists (use --force"), "{e}");

        // Forced over a symlink: the link is replaced, its target untouched.
        let mut out = Output::create(&link, true, &[]).unwrap();
        out.file().write_all(b"new").unwrap();
        out.commit().unwrap();
        assert_eq!(std::fs::read(&input).unwrap(), b"input");
        assert!(!std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&link).unwrap(), b"new");

        // Devices are never replaced.
        let e = Output::create(Path::new("/dev/null"), true, &[])
            .err()
            .unwrap();
        assert!(e.to_string().contains("not a regular file"), "{e}");

        // Nothing appears before the commit; a dropped output leaves nothing.
        let out = Output::create(&fresh, false, &[]).unwrap();
        assert!(!fresh.exists());
        drop(out);
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            2,
            "in, link"
        );
    }
}
