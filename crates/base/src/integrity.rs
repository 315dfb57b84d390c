//! Integrity of what a run wrote: CRC-32C checksums of files (recorded when a file is committed,
//! checked when it is read), and the boundary where a decoder's panic on damaged bytes becomes an
//! error about the file instead of a crash of the reader.
//!
//! CRC-32C (Castagnoli, the `crc32c` crate, SSE 4.2 where the CPU has it: several GB/s) detects
//! every burst of up to 32 flipped bits and all but 2⁻³² of the rest: what a flipped bit on a disk
//! or in a copy needs, not a cryptographic hash.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The CRC-32C of `bytes`.
pub fn crc32c(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

/// The CRC-32C of what `crc` covered followed by `bytes` (for data read in pieces).
pub fn crc32c_append(crc: u32, bytes: &[u8]) -> u32 {
    crc32c::crc32c_append(crc, bytes)
}

/// The CRC-32C of a file's contents, read in 1 MiB blocks.
pub fn file_crc32c(path: &Path) -> std::io::Result<u32> {
    let mut file = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut crc = 0u32;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok(crc);
        }
        crc = crc32c::crc32c_append(crc, &buf[..n]);
    }
}

/// A checksum as written in names and manifests: eight lowercase hex digits.
pub fn hex(crc: u32) -> String {
    format!("{crc:08x}")
}

/// [`hex`] read back; `None` unless exactly eight lowercase hex digits (as [`hex`] writes them:
/// a flipped case bit is damage too, never silently the same number).
pub fn parse_hex(text: &str) -> Option<u32> {
    (text.len() == 8 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
        .then(|| u32::from_str_radix(text, 16).ok())
        .flatten()
}

/// The manifest of a folder's files: `checksums.json` beside them, `{"format": 1, "files":
/// {"model.safetensors": "3fa9c0d2", …}}` (a checkpoint's, the run folder's `run.toml` and
/// `vocab.tsv`, the store's `run.json`). A file rewritten in place goes through `"pending"`
/// first ([`write_recorded`]), so a crash between the file and the manifest never makes an
/// intact file read as damaged.
pub const MANIFEST: &str = "checksums.json";

/// The manifest's format (a reader refuses another one rather than trust it).
pub const MANIFEST_FORMAT: u64 = 1;

/// Damage found, or a file that could not be read to check it.
#[derive(Debug, thiserror::Error)]
pub enum IntegrityError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The bytes are not the ones written (or the manifest itself is damaged).
    #[error("{}: {reason}", path.display())]
    Damaged { path: PathBuf, reason: String },
}

fn io_at(path: &Path) -> impl FnOnce(std::io::Error) -> IntegrityError + '_ {
    move |source| IntegrityError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A folder's manifest, read or to be written.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Manifest {
    /// Each listed file's CRC-32C.
    pub files: BTreeMap<String, u32>,
    /// The checksum of a rewrite under way: the file may already hold it.
    pub pending: BTreeMap<String, u32>,
}

impl Manifest {
    /// The manifest of every plain file in `dir` (except the manifest itself).
    pub fn of_folder(dir: &Path) -> Result<Self, IntegrityError> {
        let mut files = BTreeMap::new();
        for entry in std::fs::read_dir(dir).map_err(io_at(dir))? {
            let p = entry.map_err(io_at(dir))?.path();
            let Some(name) = p.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if name == MANIFEST || !p.is_file() {
                continue;
            }
            files.insert(name.to_owned(), file_crc32c(&p).map_err(io_at(&p))?);
        }
        Ok(Self {
            files,
            pending: BTreeMap::new(),
        })
    }

    /// The manifest's bytes (pretty JSON, checksums as [`hex`]).
    pub fn encode(&self) -> Vec<u8> {
        let hexes = |m: &BTreeMap<String, u32>| -> BTreeMap<String, String> {
            m.iter().map(|(k, v)| (k.clone(), hex(*v))).collect()
        };
        let mut json =
            serde_json::json!({ "format": MANIFEST_FORMAT, "files": hexes(&self.files) });
        if !self.pending.is_empty() {
            json["pending"] = serde_json::json!(hexes(&self.pending));
        }
        serde_json::to_vec_pretty(&json).unwrap_or_default()
    }

    /// `dir`'s manifest: `None` when it has none (its files were written before manifests:
    /// unverified, never damaged); a manifest that does not parse is damage.
    pub fn read(dir: &Path) -> Result<Option<Self>, IntegrityError> {
        let path = dir.join(MANIFEST);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_at(&path)(e)),
        };
        let damaged = |reason: String| IntegrityError::Damaged {
            path: path.clone(),
            reason,
        };
        let json: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|e| damaged(format!("an unreadable manifest: {e}")))?;
        let (Some(format), Some(files)) = (
            json.get("format").and_then(serde_json::Value::as_u64),
            json.get("files").and_then(serde_json::Value::as_object),
        ) else {
            return Err(damaged("not a manifest of checksums".into()));
        };
        if format != MANIFEST_FORMAT {
            return Err(damaged(format!(
                "manifest format {format}, not this conelab's ({MANIFEST_FORMAT})"
            )));
        }
        let parse = |map: &serde_json::Map<String, serde_json::Value>| {
            let mut out = BTreeMap::new();
            for (name, want) in map {
                // A name is a file of this folder, never a path out of it.
                if name.is_empty() || name.contains('/') || name.contains('\\') || name == ".." {
                    return Err(damaged(format!("names {name:?}, not a file of the folder")));
                }
                let text = want.as_str().unwrap_or_default();
                let crc = parse_hex(text)
                    .ok_or_else(|| damaged(format!("{name}: {text:?} is not a checksum")))?;
                out.insert(name.clone(), crc);
            }
            Ok(out)
        };
        let pending = match json.get("pending") {
            None => BTreeMap::new(),
            Some(p) => parse(
                p.as_object()
                    .ok_or_else(|| damaged("its pending entries are not a map".into()))?,
            )?,
        };
        Ok(Some(Self {
            files: parse(files)?,
            pending,
        }))
    }

    /// Checks `name` in `dir` against this manifest: `Ok(true)` when it matches (the listed
    /// checksum or a pending one), `Ok(false)` when the manifest does not list it.
    /// A file the manifest does not list is unverified — unless the manifest lists a file that
    /// is not there: then a key of it is damaged (`vocab.usv` for `vocab.tsv`), and the file it
    /// should have named is unchecked, which is said as damage rather than passed over.
    pub fn check(&self, dir: &Path, name: &str) -> Result<bool, IntegrityError> {
        let Some(want) = self.files.get(name) else {
            if let Some(stray) = self.files.keys().find(|k| !dir.join(k).exists()) {
                return Err(IntegrityError::Damaged {
                    path: dir.join(MANIFEST),
                    reason: format!(
                        "does not list {name} but lists {stray}, which is not there: the \
                         manifest is damaged, and {name} cannot be checked"
                    ),
                });
            }
            return Ok(false);
        };
        let file = dir.join(name);
        let got = match file_crc32c(&file) {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(IntegrityError::Damaged {
                    path: dir.join(MANIFEST),
                    reason: format!(
                        "lists {name}, which is not there: the folder or its manifest is damaged"
                    ),
                });
            }
            Err(e) => return Err(io_at(&file)(e)),
        };
        if got == *want || self.pending.get(name) == Some(&got) {
            return Ok(true);
        }
        Err(IntegrityError::Damaged {
            path: file,
            reason: format!(
                "checksum mismatch (CRC-32C {} where {MANIFEST} says {}): the file or the \
                 manifest is damaged on disk",
                hex(got),
                hex(*want)
            ),
        })
    }
}

/// Checks every file `dir`'s manifest lists: `Ok(Some(n))` when all `n` match, `Ok(None)` when
/// the folder has no manifest (unverified).
pub fn verify_folder(dir: &Path) -> Result<Option<usize>, IntegrityError> {
    let Some(manifest) = Manifest::read(dir)? else {
        return Ok(None);
    };
    for name in manifest.files.keys() {
        manifest.check(dir, name)?;
    }
    Ok(Some(manifest.files.len()))
}

/// Checks one file of `dir` against the folder's manifest: `Ok(true)` verified, `Ok(false)`
/// unverified (no manifest, or the file is not listed: written before manifests).
pub fn verify_file(dir: &Path, name: &str) -> Result<bool, IntegrityError> {
    match Manifest::read(dir)? {
        Some(m) => m.check(dir, name),
        None => Ok(false),
    }
}

/// Writes `bytes` as `dir/name` atomically and records its checksum in `dir`'s manifest, in
/// three atomic steps — the new checksum as pending, the file, the manifest without the pending
/// entry — so whatever moment a crash picks, the file on disk matches its manifest. A damaged
/// manifest is replaced (its other entries are lost: those files read as unverified). `kind`
/// names the fault points of the file's write ([`crate::atomic::write_file_as`]).
pub fn write_recorded(
    kind: &str,
    dir: &Path,
    name: &str,
    bytes: &[u8],
) -> Result<(), IntegrityError> {
    let manifest_path = dir.join(MANIFEST);
    let mut manifest = Manifest::read(dir).ok().flatten().unwrap_or_default();
    let crc = crc32c(bytes);
    let unchanged = manifest.files.get(name) == Some(&crc);
    if !unchanged {
        manifest.pending.insert(name.to_owned(), crc);
        crate::atomic::write_file_as("manifest", &manifest_path, &manifest.encode())
            .map_err(io_at(&manifest_path))?;
    }
    let path = dir.join(name);
    crate::atomic::write_file_as(kind, &path, bytes).map_err(io_at(&path))?;
    if !unchanged {
        manifest.pending.remove(name);
        manifest.files.insert(name.to_owned(), crc);
        crate::atomic::write_file_as("manifest", &manifest_path, &manifest.encode())
            .map_err(io_at(&manifest_path))?;
    }
    Ok(())
}

/// Records the checksum of `dir/name` as it is on disk in `dir`'s manifest (a file put in place
/// by other means than [`write_recorded`]: `final.json` written over its reserve on a full disk).
pub fn record_present(dir: &Path, name: &str) -> Result<(), IntegrityError> {
    let path = dir.join(name);
    let crc = file_crc32c(&path).map_err(io_at(&path))?;
    let manifest_path = dir.join(MANIFEST);
    let mut manifest = Manifest::read(dir).ok().flatten().unwrap_or_default();
    manifest.pending.remove(name);
    manifest.files.insert(name.to_owned(), crc);
    crate::atomic::write_file_as("manifest", &manifest_path, &manifest.encode())
        .map_err(io_at(&manifest_path))
}

/// Removes `dir/name` and its entry in `dir`'s manifest: the entry first, so that a crash between
/// the two leaves an unlisted file (unverified), never a listed one that is gone (damage).
pub fn forget_recorded(dir: &Path, name: &str) -> Result<(), IntegrityError> {
    let manifest_path = dir.join(MANIFEST);
    if let Some(mut manifest) = Manifest::read(dir).ok().flatten()
        && (manifest.files.remove(name).is_some() | manifest.pending.remove(name).is_some())
    {
        crate::atomic::write_file_as("manifest", &manifest_path, &manifest.encode())
            .map_err(io_at(&manifest_path))?;
    }
    let path = dir.join(name);
    match std::fs::remove_file(&path) {
        Ok(()) => crate::atomic::sync_dir(dir).map_err(io_at(dir)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_at(&path)(e)),
    }
}

thread_local! {
    /// Set while [`catch_panic`] runs on this thread: the process's panic hook stays quiet (the
    /// panic is expected and becomes an error).
    static CATCHING: Cell<bool> = const { Cell::new(false) };
}

/// Whether a panic on this thread now is caught by [`catch_panic`] (for the panic hook: a
/// decoder that panics on damaged bytes is not an internal error to report).
pub fn catching_panic() -> bool {
    CATCHING.with(Cell::get)
}

/// Runs `f` (a decoder of bytes read from a file); a panic inside it becomes `Err` with its
/// message. For third-party decoders (polars' Parquet reader, burn's records) that panic on
/// some damaged inputs instead of returning an error: the caller reports the file as corrupt.
pub fn catch_panic<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    let before = CATCHING.with(|c| c.replace(true));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    CATCHING.with(|c| c.set(before));
    result.map_err(|payload| {
        payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".into())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The standard check value of CRC-32C (RFC 3720, B.4): "123456789" → 0xE3069283; 32 zero
    /// bytes → 0x8A9136AA.
    #[test]
    fn crc32c_gives_the_published_check_values() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(hex(0xE306_9283), "e3069283");
        assert_eq!(parse_hex("e3069283"), Some(0xE306_9283));
        for bad in [
            "e306928",
            "e30692833",
            "e306928g",
            "",
            "+3069283",
            "E3069283",
        ] {
            assert_eq!(parse_hex(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_file_is_checked_in_blocks_as_a_whole() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("f");
        let bytes: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &bytes).expect("write");
        assert_eq!(file_crc32c(&path).expect("crc"), crc32c(&bytes));
        // One flipped bit anywhere changes it.
        let mut flipped = bytes.clone();
        flipped[2_345_678] ^= 0x10;
        std::fs::write(&path, &flipped).expect("write");
        assert_ne!(file_crc32c(&path).expect("crc"), crc32c(&bytes));
    }

    #[test]
    fn a_panic_becomes_an_error_and_the_flag_is_reset() {
        assert!(!catching_panic());
        let caught = catch_panic(|| -> u32 {
            assert!(catching_panic());
            panic!("range end index 9 out of range")
        });
        assert_eq!(caught, Err("range end index 9 out of range".into()));
        assert!(!catching_panic());
        assert_eq!(catch_panic(|| 7), Ok(7));
    }

    #[test]
    fn a_folder_manifest_verifies_its_files_and_names_the_damaged_one() {
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::write(dir.path().join("a"), b"alpha").expect("write");
        std::fs::write(dir.path().join("b"), b"beta").expect("write");
        assert_eq!(
            verify_folder(dir.path()).expect("none"),
            None,
            "no manifest: unverified"
        );
        let m = Manifest::of_folder(dir.path()).expect("manifest");
        assert_eq!(m.files.get("a"), Some(&crc32c(b"alpha")));
        std::fs::write(dir.path().join(MANIFEST), m.encode()).expect("write");
        assert_eq!(verify_folder(dir.path()).expect("ok"), Some(2));
        assert!(verify_file(dir.path(), "a").expect("a"));
        assert!(!verify_file(dir.path(), "c").expect("not listed"));
        std::fs::write(dir.path().join("b"), b"bets").expect("write");
        match verify_folder(dir.path()) {
            Err(IntegrityError::Damaged { path, reason }) => {
                assert!(path.ends_with("b"), "{path:?}");
                assert!(reason.contains("checksum mismatch"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        std::fs::remove_file(dir.path().join("b")).expect("rm");
        let e = verify_folder(dir.path()).expect_err("missing");
        assert!(e.to_string().contains("lists b, which is not there"), "{e}");
        // A manifest naming a path out of the folder, or not JSON, is damage itself.
        for bad in [
            r#"{"format": 1, "files": {"../x": "00000000"}}"#,
            r#"{"format": 2, "files": {}}"#,
            r#"{"format": 1, "files": {"a": "0000000"}}"#,
            "{\"format\": 1, \"fi",
        ] {
            std::fs::write(dir.path().join(MANIFEST), bad).expect("write");
            assert!(
                matches!(
                    verify_folder(dir.path()),
                    Err(IntegrityError::Damaged { .. })
                ),
                "{bad}"
            );
        }
    }

    /// Issue #61: a flipped key (`vocab.usv` for `vocab.tsv`) left the file it named unchecked
    /// by every reader but `verify`: the file is now damage to each of them, named.
    #[test]
    fn a_damaged_manifest_key_is_damage_not_an_unlisted_file() {
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::write(dir.path().join("vocab.tsv"), b"a\t1\n").expect("write");
        std::fs::write(dir.path().join("run.toml"), b"x = 1\n").expect("write");
        let m = Manifest::of_folder(dir.path()).expect("manifest");
        let text = String::from_utf8(m.encode()).expect("utf-8");
        std::fs::write(
            dir.path().join(MANIFEST),
            text.replace("vocab.tsv", "vocab.usv"),
        )
        .expect("write");
        let e = verify_file(dir.path(), "vocab.tsv").expect_err("a key flipped");
        assert!(
            e.to_string()
                .contains("does not list vocab.tsv but lists vocab.usv, which is not there"),
            "{e}"
        );
        // What the manifest lists still checks; a file it never listed, with every key
        // present, is unverified as before (written before manifests).
        std::fs::write(dir.path().join(MANIFEST), m.encode()).expect("write");
        assert!(verify_file(dir.path(), "vocab.tsv").expect("listed"));
        assert!(!verify_file(dir.path(), "new.json").expect("not listed"));
    }

    /// A rewrite crashed at each of its steps (the manifest with the pending entry, the file,
    /// the final manifest): the file on disk always verifies, as the old bytes or the new.
    #[test]
    fn a_rewrite_interrupted_anywhere_leaves_a_file_that_verifies() {
        for (plan, want) in [
            ("manifest.write:1:ENOSPC", &b"old"[..]),
            ("labels.write:1:EIO", b"old"),
            ("labels.rename:1:EIO", b"old"),
            ("manifest.write:2:ENOSPC", b"new"),
            ("manifest.rename:2:EIO", b"new"),
            ("", b"new"),
        ] {
            let dir = tempfile::tempdir().expect("tmp");
            write_recorded("labels", dir.path(), "run.json", b"old").expect("first");
            let result = crate::fault::with_plan(plan, || {
                write_recorded("labels", dir.path(), "run.json", b"new")
            });
            assert_eq!(result.is_err(), !plan.is_empty(), "{plan}");
            assert_eq!(
                std::fs::read(dir.path().join("run.json")).expect("read"),
                want,
                "{plan}"
            );
            assert!(verify_file(dir.path(), "run.json").expect(plan), "{plan}");
            // And once damaged, it is found whatever the pending entry says.
            std::fs::write(dir.path().join("run.json"), b"nex").expect("flip");
            assert!(verify_file(dir.path(), "run.json").is_err(), "{plan}");
        }
    }
}
