//! Issue #61: a read that skips, sets aside or cannot check data says so on every read, not
//! once; `export` carries the damage into the file where the format has room and refuses the
//! table under `--strict`; damage is one exit status (5) whichever command finds it.

use std::path::{Path, PathBuf};

use crate::harness::{Fixture, conelab, s, succeeded};

/// The run's compacted metrics segment (one after a finished run's compaction).
fn base_metrics_segment(run: &Path) -> PathBuf {
    std::fs::read_dir(run.join("store"))
        .expect("store")
        .map(|e| e.expect("entry").path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("metrics-"))
        })
        .expect("a metrics segment")
}

fn flip_byte(path: &Path, at: usize) {
    let mut bytes = std::fs::read(path).expect("read");
    let at = at.min(bytes.len() - 1);
    bytes[at] ^= 0x10;
    std::fs::write(path, bytes).expect("write");
}

/// The case: one flipped byte in the compacted segment; the resume sets it aside (said
/// once, then), and afterwards every export said nothing and exited 0 with a short table.
#[test]
fn a_set_aside_segment_is_said_on_every_read_and_strict_refuses_the_table() {
    let f = Fixture::new();
    succeeded(&f.train("run", &["--steps", "20", "--eval-every", "5"]));
    let run = f.path("run");
    flip_byte(&base_metrics_segment(&run), 200);
    let resume = conelab(&["train", "--resume", s(&run), "--steps", "25"]);
    succeeded(&resume);
    assert!(run.join("store/corrupt").is_dir(), "set aside");
    // Every later read says so, each time: two exports of two tables.
    for table in ["curves", "curves", "groups", "metrics"] {
        let out = conelab(&["export", s(&run), "--table", table, "--format", "csv"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{table}: {stderr}");
        assert!(
            stderr.contains("set aside as corrupt") && stderr.contains("not in this read"),
            "{table}: said nothing: {stderr}"
        );
    }

    // --strict: the damage said, nothing written, exit 5.
    let out_file = f.path("curves.csv");
    let strict = conelab(&[
        "export",
        s(&run),
        "--table",
        "curves",
        "--strict",
        "--out",
        s(&out_file),
    ]);
    let stderr = String::from_utf8_lossy(&strict.stderr);
    assert_eq!(strict.status.code(), Some(5), "{stderr}");
    assert!(stderr.contains("--strict") && stderr.contains("nothing written"));
    assert!(!out_file.exists(), "nothing written");
    let strict_stdout = conelab(&["export", s(&run), "--table", "curves", "--strict"]);
    assert_eq!(strict_stdout.status.code(), Some(5));
    assert!(strict_stdout.stdout.is_empty());

    // The file carries the damage where its format has room.
    let parquet = f.path("curves.parquet");
    succeeded(&conelab(&[
        "export",
        s(&run),
        "--table",
        "curves",
        "--out",
        s(&parquet),
    ]));
    let bytes = std::fs::read(&parquet).expect("parquet");
    let text = String::from_utf8_lossy(&bytes);
    assert!(
        text.contains("conelab.damage") && text.contains("set aside as corrupt"),
        "no damage note in the Parquet metadata"
    );
    for (format, marker) in [
        ("md", "<!-- conelab.damage: "),
        ("latex", "% conelab.damage: "),
    ] {
        let out = conelab(&["export", s(&run), "--table", "groups", "--format", format]);
        succeeded(&out);
        let text = String::from_utf8_lossy(&out.stdout);
        let note = text
            .lines()
            .find(|l| l.starts_with(marker))
            .unwrap_or_else(|| panic!("{format}: no damage note: {text}"));
        assert!(note.contains("set aside as corrupt"), "{note}");
    }

    // A clean run: no note, and --strict is content.
    succeeded(&f.train("clean", &["--steps", "5", "--eval-every", "5"]));
    let clean = conelab(&["export", s(&f.path("clean")), "--strict", "--format", "md"]);
    succeeded(&clean);
    assert!(!String::from_utf8_lossy(&clean.stdout).contains("conelab.damage"));
    assert!(
        clean.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&clean.stderr)
    );
}

/// Damage is exit 5 in every command that meets it: `store verify`, a resume that cannot
/// record its numbers, a run folder whose run.toml is damaged past rebuilding.
#[test]
fn damage_is_one_exit_status_across_commands() {
    let f = Fixture::new();
    succeeded(&f.train("run", &["--steps", "4", "--eval-every", "0"]));
    let run = f.path("run");
    flip_byte(&run.join("store/run.json"), 3);
    let verify = conelab(&["store", "verify", s(&run)]);
    assert_eq!(
        verify.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&verify.stderr)
    );
    assert!(String::from_utf8_lossy(&verify.stderr).contains("run.json"));
    let resume = conelab(&["train", "--resume", s(&run), "--steps", "8"]);
    assert_eq!(
        resume.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&resume.stderr)
    );
}

/// Issue #61: one flipped byte in `run.toml`, `vocab.tsv` or the run folder's manifest made the
/// run unusable (no eval, no resume, no attach) though the data behind it was intact. Each is
/// now rebuilt from the copies the run keeps — the checkpoints' copies, checked by their
/// manifests — with a warning, and written back: the run verifies clean afterwards, every file
/// as it was.
#[test]
fn a_damaged_small_file_is_rebuilt_from_the_runs_copies() {
    let f = Fixture::new();
    succeeded(&f.train("run", &["--steps", "6", "--eval-every", "3"]));
    let pristine = f.path("run");
    let original = |name: &str| std::fs::read(pristine.join(name)).expect("read");
    type Damage = fn(&mut Vec<u8>);
    let cases: [(&str, &str, Damage); 5] = [
        ("run.toml", "run.toml", |b| b[40] ^= 0x01),
        ("vocab.tsv", "vocab.tsv", |b| b[5] ^= 0x02),
        // A key of the manifest (`run.toml` → `run.tnml`): the file is unlisted.
        ("checksums.json", "checksums.json", |b| {
            let text = String::from_utf8(b.clone()).expect("utf-8");
            *b = text.replacen("run.toml", "run.tnml", 1).into_bytes();
        }),
        // A checksum of the manifest: run.toml fails it.
        ("checksums.json", "run.toml", |b| {
            let text = String::from_utf8(b.clone()).expect("utf-8");
            let at = text.find("\"run.toml\": \"").expect("entry") + 13;
            b[at] = if b[at] == b'0' { b'1' } else { b'0' };
        }),
        // Garbage: the manifest does not parse.
        ("checksums.json", "checksums.json", |b| b[0] = b'#'),
    ];
    for (i, (file, said, damage)) in cases.into_iter().enumerate() {
        let copy = f.path(&format!("copy-{i}"));
        crate::harness::copy_dir(&pristine, &copy);
        let path = copy.join(file);
        let mut bytes = std::fs::read(&path).expect("read");
        damage(&mut bytes);
        std::fs::write(&path, &bytes).expect("write");
        let what = format!("case {i}: {file}");
        let eval = conelab(&["eval", s(&copy), "--step", "last"]);
        let stderr = String::from_utf8_lossy(&eval.stderr);
        assert_eq!(eval.status.code(), Some(0), "{what}: {stderr}");
        assert!(
            stderr.contains("was damaged") && stderr.contains(said) && stderr.contains("rebuilt"),
            "{what}: {stderr}"
        );
        for name in ["run.toml", "vocab.tsv"] {
            assert_eq!(
                std::fs::read(copy.join(name)).expect("read"),
                original(name),
                "{what}: {name} as it was"
            );
        }
        let verify = conelab(&["store", "verify", s(&copy)]);
        assert_eq!(
            verify.status.code(),
            Some(0),
            "{what}: {}",
            String::from_utf8_lossy(&verify.stderr)
        );
        // Said once: the rebuilt file is on disk.
        let again = conelab(&["eval", s(&copy), "--step", "last"]);
        assert!(
            !String::from_utf8_lossy(&again.stderr).contains("was damaged"),
            "{what}"
        );
    }

    // A run that kept no copy (its checkpoints gone): the damage is exit 5, named.
    let bare = f.path("bare");
    crate::harness::copy_dir(&pristine, &bare);
    for p in conelab_core::run_dir::checkpoints_in(&bare).expect("list") {
        std::fs::remove_dir_all(p).expect("rm");
    }
    std::fs::remove_dir_all(bare.join("best")).expect("rm best");
    let vocab = bare.join("vocab.tsv");
    let mut bytes = std::fs::read(&vocab).expect("read");
    bytes[5] ^= 0x02;
    std::fs::write(&vocab, &bytes).expect("write");
    let verify = conelab(&["store", "verify", s(&bare)]);
    assert_eq!(verify.status.code(), Some(5));
    assert!(String::from_utf8_lossy(&verify.stderr).contains("vocab.tsv"));
}

/// Issue #58: a run whose `store/` was deleted listed as completed, with no damage line.
#[test]
fn a_run_without_its_store_lists_as_damaged() {
    let f = Fixture::new();
    succeeded(&f.train("run", &["--headless", "--steps", "2", "--eval-every", "0"]));
    std::fs::remove_dir_all(f.path("run").join("store")).expect("rm store");
    let out = conelab(&["runs", s(&f.path(".")), "--json"]);
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).expect("runs --json");
    let row = &rows[0];
    assert_eq!(row["status"], "damaged", "{row}");
    assert!(
        row["damaged"].as_array().is_some_and(|d| d
            .iter()
            .any(|l| l.as_str().is_some_and(|l| l.contains("store: missing")))),
        "{row}"
    );
}
