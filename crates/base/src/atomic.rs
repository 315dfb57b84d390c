//! Crash-safe file writes: write a temporary file beside the target, fsync it, rename it over the
//! target, fsync the directory. A reader sees the old file or the new one, never half of one.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Atomically replaces `path` with `bytes`.
pub fn write_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_file_as("atomic", path, bytes)
}

/// [`write_file`] whose fault-injection points are `KIND.write` and `KIND.rename` (besides
/// `atomic.write` and `atomic.rename`): `segment`, `export`, … (see `crate::fault`).
pub fn write_file_as(kind: &str, path: &Path, bytes: &[u8]) -> io::Result<()> {
    let resolved = replaceable(path)?;
    let path = resolved.as_path();
    let dir = parent(path);
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let tmp = dir.join(temp_name(&name.to_string_lossy()));
    let result = (|| {
        let mut f = File::create(&tmp)?;
        let injected = crate::fault::check("atomic.write")
            .and_then(|()| crate::fault::check(&format!("{kind}.write")));
        if let Err(e) = injected {
            // A disk that fills up mid-write: half the bytes, then the error.
            let _ = f.write_all(&bytes[..bytes.len() / 2]);
            return Err(e);
        }
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        crate::fault::check("atomic.rename")?;
        crate::fault::check(&format!("{kind}.rename"))?;
        fs::rename(&tmp, path)?;
        // The rename itself is durable only once the directory entry is on disk.
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// The file a write to `path` replaces: `path` itself when it is a regular file or absent, the
/// file a symbolic link leads to (so the link stays and its target gets the bytes), and an error
/// for anything else. A rename over a device, a pipe or a socket would put a plain file in its
/// place (as root, `--out /dev/full` replaced the device).
fn replaceable(path: &Path) -> io::Result<std::path::PathBuf> {
    let target = match fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(path.to_path_buf()),
        Err(e) => return Err(e),
        Ok(m) if m.file_type().is_symlink() => fs::canonicalize(path).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "{} is a link to nothing that can be read ({e})",
                    path.display()
                ),
            )
        })?,
        Ok(_) => path.to_path_buf(),
    };
    match fs::metadata(&target) {
        Ok(m) if !m.is_file() => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} is not a regular file (a folder, device, pipe or socket): nothing is written over it",
                target.display()
            ),
        )),
        _ => Ok(target),
    }
}

/// A name for a temporary file beside `name`, unique in this process.
pub fn temp_name(name: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    format!(
        ".{name}.tmp-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// fsyncs a directory, so that renames and creations in it are durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_content_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("a.txt");
        write_file(&p, b"one").expect("write");
        write_file(&p, b"two").expect("overwrite");
        assert_eq!(fs::read(&p).expect("read"), b"two");
        let names: Vec<_> = fs::read_dir(dir.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("a.txt")]);
    }

    /// A device, a pipe or a socket is never replaced by a plain file; a link keeps being a
    /// link, and the file it leads to gets the bytes.
    #[test]
    fn only_regular_files_are_replaced_and_links_are_written_through() {
        use std::os::unix::fs::FileTypeExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
        let e = write_file(&socket, b"x").expect_err("a socket");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("not a regular file"), "{e}");
        assert!(
            fs::symlink_metadata(&socket)
                .expect("still there")
                .file_type()
                .is_socket()
        );
        let e = write_file(Path::new("/dev/null"), b"x").expect_err("a device");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(
            fs::metadata("/dev/null")
                .expect("null")
                .file_type()
                .is_char_device()
        );
        assert!(write_file(dir.path(), b"x").is_err(), "a folder");

        let target = dir.path().join("target.csv");
        fs::write(&target, b"old").expect("write");
        let link = dir.path().join("link.csv");
        std::os::unix::fs::symlink("target.csv", &link).expect("symlink");
        write_file(&link, b"new").expect("through the link");
        assert!(
            fs::symlink_metadata(&link)
                .expect("link")
                .file_type()
                .is_symlink()
        );
        assert_eq!(fs::read(&target).expect("read"), b"new");
        let dangling = dir.path().join("dangling");
        std::os::unix::fs::symlink("nowhere/at/all", &dangling).expect("symlink");
        assert!(write_file(&dangling, b"x").is_err());
        assert!(
            fs::symlink_metadata(&dangling)
                .expect("kept")
                .file_type()
                .is_symlink()
        );
    }

    #[test]
    fn failure_leaves_the_old_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("no-such-dir").join("a.txt");
        assert!(write_file(&missing, b"x").is_err());
    }

    #[test]
    fn a_disk_full_mid_write_or_a_failed_rename_keeps_the_old_content_and_no_temp_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("a.txt");
        write_file(&p, b"old content").expect("write");
        for plan in [
            "atomic.write:1:ENOSPC",
            "export.write:1:EIO",
            "atomic.rename:1:EIO",
        ] {
            let e = crate::fault::with_plan(plan, || {
                write_file_as("export", &p, b"new content that does not fit")
            })
            .expect_err(plan);
            assert!(e.raw_os_error().is_some(), "{plan}: {e}");
            assert_eq!(fs::read(&p).expect("read"), b"old content", "{plan}");
            let names: Vec<_> = fs::read_dir(dir.path())
                .expect("list")
                .map(|e| e.expect("entry").file_name())
                .collect();
            assert_eq!(names, vec![std::ffi::OsString::from("a.txt")], "{plan}");
        }
    }
}
