//! Shared helpers for the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `../shared/datasets/NAME`, or `$CONELAB_DATASETS/NAME`. `None` (with the reason printed) when the
/// folder is absent, so the calling test can skip.
pub fn shared_dataset(name: &str) -> Option<PathBuf> {
    let root = std::env::var_os("CONELAB_DATASETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/datasets"));
    let dir = root.join(name);
    if dir.join("train.txt").is_file() {
        Some(dir)
    } else {
        eprintln!(
            "SKIPPED: {} not found (set CONELAB_DATASETS to the folder holding ptb/ and wikitext-2/)",
            dir.display()
        );
        None
    }
}

/// Runs the `conelab` binary with no stdin.
pub fn conelab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_conelab"))
        .args(args)
        .stdin(std::process::Stdio::null())
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("the conelab binary runs")
}

/// Asserts the run failed the way every bad input must: exit status 2 and exactly one line on
/// stderr that contains each of `needles`, no panic, no backtrace.
pub fn assert_one_line_error(out: &Output, needles: &[&str]) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "exit status; stderr: {stderr}");
    assert_eq!(
        stderr.lines().count(),
        1,
        "one line expected, got: {stderr}"
    );
    assert!(
        !stderr.contains("panicked") && !stderr.contains("internal error"),
        "{stderr}"
    );
    assert!(!stderr.to_lowercase().contains("backtrace"), "{stderr}");
    for n in needles {
        assert!(stderr.contains(n), "stderr lacks {n:?}: {stderr}");
    }
    stderr
}

/// A corpus directory with the given split contents.
pub fn corpus_dir(train: &[u8], valid: &[u8], test: &[u8]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, bytes) in [
        ("train.txt", train),
        ("valid.txt", valid),
        ("test.txt", test),
    ] {
        std::fs::write(dir.path().join(name), bytes).expect("write split");
    }
    dir
}
