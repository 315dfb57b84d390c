//! A damaged run file rebuilt from the copies the run keeps, rather than a run that can no
//! longer be evaluated, resumed or attached (issue #61). Every checkpoint carries a copy of the
//! run's `run.toml` and `vocab.tsv` as they were when it was written (`run.toml.copy`,
//! `vocab.tsv.copy`, checked by the checkpoint's manifest); the store's `run.json` carries the
//! `run.toml` the run started with. A copy whose checksum is the one the run folder's manifest
//! recorded rebuilds the file exactly; otherwise the newest copy does, and the warning says what
//! it may lack. A damaged manifest is rebuilt from the files that prove themselves (a `run.toml`
//! that parses, a `vocab.tsv` equal to a checkpoint's copy, a `final.json` that parses).

use std::fs;
use std::path::{Path, PathBuf};

use conelab_base::integrity::{self, IntegrityError, MANIFEST, Manifest, crc32c};

use super::{BEST_DIR, CheckpointError, RUN_TOML, RunSpec, VOCAB_TSV, checkpoints_in, io};

/// The name of a run file's copy inside a checkpoint.
pub fn copy_name(name: &str) -> String {
    format!("{name}.copy")
}

/// Copies the run's `run.toml` and `vocab.tsv` into the checkpoint being written at `staging`
/// (before its manifest, which then lists them). A damaged file is not copied: an older
/// checkpoint keeps a good copy.
pub fn copy_into_checkpoint(run_dir: &Path, staging: &Path) -> Result<(), CheckpointError> {
    for name in [RUN_TOML, VOCAB_TSV] {
        let from = run_dir.join(name);
        match integrity::verify_file(run_dir, name) {
            Ok(_) => {}
            Err(IntegrityError::Damaged { .. }) => continue,
            Err(e) => return Err(e.into()),
        }
        let bytes = match fs::read(&from) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io(&from)(e)),
        };
        let to = staging.join(copy_name(name));
        fs::write(&to, bytes).map_err(io(&to))?;
    }
    Ok(())
}

/// A file rebuilt: its bytes, and what was done, in words (a warning).
#[derive(Debug, Clone)]
pub struct Rebuilt {
    pub bytes: Vec<u8>,
    pub said: String,
}

/// The copies of `name` the run keeps, newest first: each checkpoint's (the `step-N` folders,
/// then `best/`) that its manifest verifies, then — for `run.toml` — the store's record of the
/// run as it started.
fn copies(dir: &Path, name: &str) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut folders: Vec<PathBuf> = checkpoints_in(dir).unwrap_or_default();
    folders.reverse();
    folders.push(dir.join(BEST_DIR));
    let copy = copy_name(name);
    for folder in folders {
        if matches!(integrity::verify_file(&folder, &copy), Ok(true))
            && let Ok(bytes) = fs::read(folder.join(&copy))
        {
            let label = folder
                .file_name()
                .map(|n| format!("{}/{copy}", n.to_string_lossy()))
                .unwrap_or(copy.clone());
            out.push((label, bytes));
        }
    }
    if name == RUN_TOML {
        let store = dir.join("store");
        if integrity::verify_file(&store, "run.json").is_ok()
            && let Ok(bytes) = fs::read(store.join("run.json"))
            && let Ok(json) = serde_json::from_slice::<serde_json::Value>(&bytes)
            && let Some(toml) = json.get("config_toml").and_then(|t| t.as_str())
            && !toml.is_empty()
        {
            out.push((
                "store/run.json (the run as it started)".to_owned(),
                toml.as_bytes().to_vec(),
            ));
        }
    }
    out
}

/// Rebuilds `dir/name` (`run.toml` or `vocab.tsv`), found damaged (`damage`), from the run's
/// copies and writes it back (recorded in the manifest); `None` when the run keeps no copy.
pub fn rebuild(dir: &Path, name: &str, damage: &str) -> Option<Rebuilt> {
    let recorded = Manifest::read(dir)
        .ok()
        .flatten()
        .and_then(|m| m.files.get(name).copied());
    let copies = copies(dir, name);
    let exact = copies
        .iter()
        .find(|(_, bytes)| Some(crc32c(bytes)) == recorded);
    let (source, bytes, exact) = match exact {
        Some((s, b)) => (s.clone(), b.clone(), true),
        None => {
            let (s, b) = copies.into_iter().next()?;
            (s, b, false)
        }
    };
    let path = dir.join(name);
    let mut said = if exact {
        format!(
            "{} was damaged ({damage}): rebuilt from {source}, whose checksum is the one the run recorded",
            path.display()
        )
    } else {
        format!(
            "{} was damaged ({damage}): rebuilt from {source}, the newest copy (it may lack what a resume changed after it was written)",
            path.display()
        )
    };
    if let Err(e) = integrity::write_recorded("run", dir, name, &bytes) {
        said.push_str(&format!(
            " — kept in memory only: writing it back failed: {e}"
        ));
    }
    Some(Rebuilt { bytes, said })
}

/// Rebuilds the run folder's damaged manifest from the files that prove themselves: a
/// `run.toml` that parses as a run's settings, a `vocab.tsv` equal to a checkpoint's copy, a
/// `final.json` that parses. A file that proves nothing stays out (unverified; a reader that
/// needs it finds its damage by parsing it). `None` when nothing could be written.
pub fn rebuild_manifest(dir: &Path, damage: &str) -> Option<String> {
    let mut manifest = Manifest::default();
    let mut trusted = Vec::new();
    let read = |name: &str| fs::read(dir.join(name)).ok();
    if let Some(bytes) = read(RUN_TOML)
        && std::str::from_utf8(&bytes)
            .ok()
            .and_then(|t| toml::from_str::<RunSpec>(t).ok())
            .is_some()
    {
        manifest.files.insert(RUN_TOML.to_owned(), crc32c(&bytes));
        trusted.push("run.toml parses");
    }
    if let Some(bytes) = read(VOCAB_TSV)
        && copies(dir, VOCAB_TSV).iter().any(|(_, c)| *c == bytes)
    {
        manifest.files.insert(VOCAB_TSV.to_owned(), crc32c(&bytes));
        trusted.push("vocab.tsv equals a checkpoint's copy");
    }
    if let Some(bytes) = read(super::live::FINAL_FILE)
        && serde_json::from_slice::<super::live::FinalRecord>(&bytes).is_ok()
    {
        manifest
            .files
            .insert(super::live::FINAL_FILE.to_owned(), crc32c(&bytes));
        trusted.push("final.json parses");
    }
    let path = dir.join(MANIFEST);
    conelab_base::atomic::write_file_as("manifest", &path, &manifest.encode()).ok()?;
    Some(format!(
        "{} was damaged ({damage}): rebuilt from the files that prove themselves ({})",
        path.display(),
        if trusted.is_empty() {
            "none".to_owned()
        } else {
            trusted.join(", ")
        }
    ))
}
