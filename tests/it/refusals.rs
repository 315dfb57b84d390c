//! Issue #61: a command that refuses writes nothing. Every check that can refuse a resume or a
//! start runs before the first byte is written: each refusal below leaves every file of the run
//! folder as it was, its bytes and its modification time (the run's lock excepted: taking it
//! writes who holds it, which is how a folder is held).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::harness::{Fixture, conelab, s, succeeded};

/// Every file under `dir` (but the run's lock): its bytes and modification time.
fn files(dir: &Path) -> BTreeMap<PathBuf, (Vec<u8>, SystemTime)> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).expect("read_dir") {
            let p = entry.expect("entry").path();
            if p.is_dir() {
                todo.push(p);
            } else if p.file_name().is_some_and(|n| n != "run.lock") {
                let modified = std::fs::metadata(&p)
                    .and_then(|m| m.modified())
                    .expect("mtime");
                out.insert(p.clone(), (std::fs::read(&p).expect("read"), modified));
            }
        }
    }
    out
}

/// Runs `args`, which must fail with one line on stderr, and checks `dir` is as it was.
fn refused_writes_nothing(dir: &Path, args: &[&str], says: &str) {
    let before = files(dir);
    let out = conelab(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} was not refused: {stderr}");
    assert!(stderr.contains(says), "{args:?}: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    let after = files(dir);
    let changed: Vec<&PathBuf> = before
        .keys()
        .chain(after.keys())
        .filter(|p| before.get(*p) != after.get(*p))
        .collect();
    assert!(changed.is_empty(), "{args:?} wrote {changed:?}");
}

#[test]
fn every_refused_resume_leaves_the_run_folder_as_it_was() {
    let f = Fixture::new();
    succeeded(&f.train("run", &["--steps", "3", "--eval-every", "0"]));
    let run = f.path("run");
    let r = s(&run);
    for (args, says) in [
        (vec!["--steps", "1"], "behind the run"),
        (vec!["--steps", "150", "--patience", "0"], "patience 0"),
        (vec!["--steps", "150", "--model", "small"], "--model"),
        (vec!["--steps", "150", "--bptt", "9"], "--bptt"),
        (vec!["--steps", "150", "--reg", "cos=-1"], "cos weight -1"),
        (vec!["--steps", "150", "--reg", "cos=nan"], "cos weight NaN"),
    ] {
        let mut full = vec!["train", "--resume", r];
        full.extend(args);
        refused_writes_nothing(&run, &full, says);
    }
    // A damaged store record: the resume could not record the run's numbers. It used to write
    // run.toml (`steps = 150`) and the store's manifest before it found out.
    let record = run.join("store/run.json");
    let mut bytes = std::fs::read(&record).expect("run.json");
    let at = bytes.iter().position(|&b| b == b'{').expect("json") + 1;
    bytes[at] ^= 0x20;
    std::fs::write(&record, &bytes).expect("flip");
    refused_writes_nothing(
        &run,
        &["train", "--resume", r, "--steps", "150"],
        "run.json",
    );
}

/// Issue #61: `--bptt 65536 --batch 1` passed the memory check (it counted the parameters and
/// the logits, not a window's attention) and aborted allocating 16 GiB, leaving a crashed run
/// folder; `--config /dev/zero` was read for ever.
#[test]
fn impossible_shapes_and_endless_config_files_are_refused_before_a_folder_exists() {
    let f = Fixture::new();
    // A training text longer than the window, so that the window is what the check weighs.
    let big = f.path("big");
    succeeded(&conelab(&[
        "data",
        "synth",
        "--out",
        s(&big),
        "--vocab",
        "150",
        "--tokens",
        "150000",
    ]));
    let out = conelab(&[
        "train",
        s(&big),
        "--config",
        s(&f.path("small.toml")),
        "--run-dir",
        s(&f.path("long")),
        "--bptt",
        "65536",
        "--batch",
        "1",
        "--steps",
        "2",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("needs at least"), "{stderr}");
    assert!(!f.path("long").exists(), "nothing created");
    let zero = f.path("zero");
    let out = conelab(&[
        "train",
        s(&f.path("corpus")),
        "--config",
        "/dev/zero",
        "--run-dir",
        s(&zero),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("longer than 1024 KiB"), "{stderr}");
    assert!(!zero.exists(), "nothing created");
}

/// Issue #58: a weight of 1e300 was refused with its 301-digit integer expansion; an absurd
/// number is refused in one short line that writes it as it was given.
#[test]
fn an_absurd_number_is_refused_in_a_short_line() {
    let f = Fixture::new();
    for (flag, value, says) in [
        ("--reg", "cosreg=1e300", "weight 1e300"),
        ("--weight-decay", "1e300", "weight_decay 1e300"),
    ] {
        let out = conelab(&[
            "train",
            s(&f.path("corpus")),
            "--config",
            s(&f.path("small.toml")),
            "--run-dir",
            s(&f.path("absurd")),
            "--steps",
            "2",
            flag,
            value,
        ]);
        let line = crate::harness::assert_one_line_error(&out, &[says]);
        assert!(line.len() < 200, "{line}");
        assert!(!f.path("absurd").exists(), "nothing created");
    }
}
