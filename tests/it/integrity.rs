//! Integrity through the binary: a bit-flip campaign over a finished run's files. Every store
//! segment carries its CRC-32C in its name and every checkpoint a manifest of its files' CRC-32C,
//! so any flipped bit in them is found — by `conelab store verify` (exit 5, the file named), by
//! `export` (the segment skipped with a warning, never a changed value) and by `train --resume`
//! (the damaged checkpoint skipped for an older intact one) — and nothing ever panics (101) or
//! aborts (134).

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::harness::{Fixture, Rng, conelab, copy_dir, s, succeeded};

/// The files whose bytes conelab verifies: the run's `run.toml`, `vocab.tsv` and `final.json`,
/// the store's `run.json`, `checksummed-from`, segments and projections, every file of every
/// checkpoint and of `best/`, and the manifests.
fn verified_files(run: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut visit = |dir: &Path, keep: &dyn Fn(&str) -> bool| {
        for e in std::fs::read_dir(dir).expect("list") {
            let p = e.expect("entry").path();
            let name = p
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default()
                .to_owned();
            if p.is_file() && keep(&name) {
                files.push(p);
            }
        }
    };
    visit(&run.join("store"), &|n| {
        (n.starts_with("metrics-") || n.starts_with("events-")) && n.ends_with(".parquet")
            || n == "run.json"
            || n == "checksums.json"
            || n == "checksummed-from"
    });
    visit(&run.join("store").join("projections"), &|n| {
        n.ends_with(".parquet")
    });
    visit(run, &|n| {
        matches!(
            n,
            "run.toml" | "vocab.tsv" | "final.json" | "checksums.json"
        )
    });
    for e in std::fs::read_dir(run).expect("list") {
        let p = e.expect("entry").path();
        if p.is_dir()
            && p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("step-") || n == "best")
        {
            visit(&p, &|_| true);
        }
    }
    files.sort();
    files
}

fn never_crashed(out: &Output, what: &str) {
    let code = out.status.code();
    assert!(
        !matches!(code, Some(101 | 134) | None),
        "{what}: exit {code:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("internal error"), "{what}: {stderr}");
}

/// `export --table metrics` and `--table events` of a run, as CSV.
fn exports(run: &Path) -> (Output, Output) {
    let table = |t: &str| conelab(&["export", s(run), "--table", t, "--format", "csv"]);
    (table("metrics"), table("events"))
}

#[test]
fn two_hundred_flipped_bits_are_each_found_and_nothing_crashes() {
    let f = Fixture::new();
    let out = f.train(
        "run",
        &[
            "--headless",
            "--steps",
            "30",
            "--eval-every",
            "10",
            "--snapshot-every",
            "10",
            "--checkpoint-every",
            "10",
            "--keep",
            "3",
        ],
    );
    succeeded(&out);
    let pristine = f.path("run");
    let files = verified_files(&pristine);
    let segment = |p: &Path| {
        p.parent().is_some_and(|d| d.ends_with("store"))
            && p.extension().is_some_and(|e| e == "parquet")
    };
    let segments = files.iter().filter(|p| segment(p)).count();
    let kinds = |end: &str| files.iter().filter(|p| p.ends_with(end)).count();
    assert!(segments >= 2 && files.len() >= segments + 9, "{files:?}");
    assert_eq!(
        (kinds("run.toml"), kinds("vocab.tsv"), kinds("run.json")),
        (1, 1, 1)
    );
    assert!(
        kinds("checksums.json") == 6,
        "two run manifests, three checkpoints' and best/'s: {files:?}"
    );
    assert!(
        files
            .iter()
            .filter(|p| p.to_string_lossy().contains("/projections/"))
            .count()
            >= 3,
        "{files:?}"
    );
    // A folder that is not a run: one line, exit 2.
    crate::harness::assert_one_line_error(
        &conelab(&["store", "verify", s(&f.path("corpus"))]),
        &["no metrics store"],
    );
    let clean = conelab(&["store", "verify", s(&pristine)]);
    succeeded(&clean);
    assert!(
        String::from_utf8_lossy(&clean.stdout).contains("4 checkpoints verified (best/ included)"),
        "{}",
        String::from_utf8_lossy(&clean.stdout)
    );
    let (metrics, events) = exports(&pristine);
    assert!(metrics.status.success() && events.status.success());

    let listed_clean = conelab(&["runs", s(&f.path(".")), "--json"]);
    assert!(
        !String::from_utf8_lossy(&listed_clean.stdout).contains("damaged"),
        "{}",
        String::from_utf8_lossy(&listed_clean.stdout)
    );

    let mut rng = Rng(0x5EED_F11B);
    let (mut exported, mut resumed, mut listed) = (0, 0, 0);
    for flip in 0..200 {
        let copy = f.path(&format!("flip-{flip}"));
        copy_dir(&pristine, &copy);
        // Every sixth flip in a store segment (two or three among some forty files): the
        // exports of a damaged table are checked at least ten times.
        let store_segments: Vec<&PathBuf> = files.iter().filter(|p| segment(p)).collect();
        let original = if flip % 6 == 0 {
            store_segments[rng.below(store_segments.len())]
        } else {
            &files[rng.below(files.len())]
        };
        let file = copy.join(original.strip_prefix(&pristine).expect("inside"));
        let mut bytes = std::fs::read(&file).expect("read");
        let at = rng.below(bytes.len());
        let bit = rng.below(8);
        bytes[at] ^= 1 << bit;
        std::fs::write(&file, &bytes).expect("write");
        let what = format!("flip {flip}: bit {bit} of byte {at} of {}", file.display());

        // Found, always, and named.
        let verify = conelab(&["store", "verify", s(&copy)]);
        never_crashed(&verify, &what);
        assert_eq!(
            verify.status.code(),
            Some(5),
            "{what}: {}",
            String::from_utf8_lossy(&verify.stdout)
        );
        let said = String::from_utf8_lossy(&verify.stderr);
        let name = file.file_name().and_then(|n| n.to_str()).expect("name");
        assert!(
            said.contains(name) || said.contains("checksums.json"),
            "{what}: verify said {said}"
        );
        // Each damaged file's path once on its line.
        for line in said.lines() {
            let path = line.trim_start_matches("conelab: damaged: ");
            let path = path.split(": ").next().unwrap_or(path);
            assert_eq!(line.matches(path).count(), 1, "{what}: {line}");
        }

        let in_store = segment(original);
        let in_checkpoint = original
            .parent()
            .and_then(|d| d.file_name())
            .is_some_and(|n| n.to_string_lossy().starts_with("step-") || n == "best");
        if !in_store && !in_checkpoint {
            // The run's own files, the store's record and manifests, projections: `runs` lists
            // the run as damaged where it can see it without reading every byte, and the rows
            // stay exportable, unchanged.
            listed += 1;
            let is_projection = original.to_string_lossy().contains("/projections/");
            if !is_projection {
                let runs = conelab(&["runs", s(&f.path(".")), "--json"]);
                never_crashed(&runs, &what);
                let rows: serde_json::Value =
                    serde_json::from_slice(&runs.stdout).expect("runs --json");
                let row = rows
                    .as_array()
                    .and_then(|r| {
                        r.iter()
                            .find(|r| r["dir"] == format!("flip-{flip}").as_str())
                    })
                    .unwrap_or_else(|| panic!("{what}: not listed: {rows}"));
                assert_eq!(row["status"], "damaged", "{what}: {row}");
            }
            let (m, e) = exports(&copy);
            never_crashed(&m, &what);
            assert!(
                m.status.success() && e.status.success(),
                "{what}: {}",
                String::from_utf8_lossy(&m.stderr)
            );
            // The run's UUID lives in run.json alone: with it damaged, the export says so and
            // gives a stand-in; every value read from the rows is unchanged.
            // (Its checksum is in the store's manifest: a damaged manifest fails it too.)
            let record_damaged =
                original.ends_with("store/run.json") || original.ends_with("store/checksums.json");
            // (A flip in the manifest can leave run.json merely unverified: no warning then.)
            if original.ends_with("store/run.json") {
                let said = String::from_utf8_lossy(&m.stderr);
                assert!(
                    said.contains("UUID are unknown"),
                    "{what}: no warning: {said}"
                );
            }
            let rows = |out: &[u8]| {
                let text = String::from_utf8_lossy(out).to_string();
                if !record_damaged {
                    return text;
                }
                text.lines()
                    .map(|l| {
                        let mut f: Vec<&str> = l.splitn(4, ',').collect();
                        f.remove(2);
                        f.join(",")
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            assert_eq!(
                rows(&m.stdout),
                rows(&metrics.stdout),
                "{what}: an exported value changed"
            );
            assert_eq!(
                rows(&e.stdout),
                rows(&events.stdout),
                "{what}: an exported event changed"
            );
        } else if in_store && exported < 20 {
            exported += 1;
            // The damaged table is skipped with a warning naming it; the other is exported whole.
            let (m, e) = exports(&copy);
            never_crashed(&m, &what);
            never_crashed(&e, &what);
            let damaged_metrics = name.starts_with("metrics-");
            let (hit, other, other_clean) = if damaged_metrics {
                (&m, &e, &events)
            } else {
                (&e, &m, &metrics)
            };
            assert!(hit.status.success(), "{what}");
            assert!(
                String::from_utf8_lossy(&hit.stderr).contains("checksum mismatch"),
                "{what}: {}",
                String::from_utf8_lossy(&hit.stderr)
            );
            assert_eq!(
                other.stdout, other_clean.stdout,
                "{what}: the intact table changed"
            );
        } else if !in_store && resumed < 12 {
            resumed += 1;
            // Resume takes the newest intact checkpoint and trains on; never a crash, never
            // damaged weights.
            let out = conelab(&["train", "--resume", s(&copy), "--steps", "31", "--headless"]);
            never_crashed(&out, &what);
            assert!(
                out.status.success(),
                "{what}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let step_dir = file.parent().expect("step dir");
            let newest = step_dir.ends_with("step-000030");
            if newest {
                // Said where a headless run says things: its output and its log.
                let said = format!(
                    "{}{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr),
                    std::fs::read_to_string(copy.join("train.log")).unwrap_or_default()
                );
                assert!(
                    said.contains("not from the newer checkpoint(s)")
                        && said.contains("step-000030"),
                    "{what}: the damaged newest checkpoint was not named: {said}"
                );
            }
        }
        std::fs::remove_dir_all(&copy).expect("clean up");
    }
    assert!(
        exported >= 10 && resumed >= 10 && listed >= 10,
        "{exported} exports, {resumed} resumes, {listed} run files"
    );
}

/// A checkpoint's manifest lists every other file of it with its CRC-32C; a checkpoint without
/// one (written before manifests) still resumes, as unverified; and damage in such a one is
/// never a crash, whatever burn's decoders make of it.
#[test]
fn the_manifest_covers_the_checkpoint_and_an_old_checkpoint_reads_unverified() {
    use conelab_base::integrity;
    let f = Fixture::new();
    let out = f.train(
        "run",
        &[
            "--headless",
            "--steps",
            "10",
            "--eval-every",
            "0",
            "--checkpoint-every",
            "10",
        ],
    );
    succeeded(&out);
    let step = f.path("run").join("step-000010");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(step.join("checksums.json")).expect("manifest"))
            .expect("json");
    assert_eq!(manifest["format"], 1);
    let listed = manifest["files"].as_object().expect("files");
    let mut on_disk: Vec<String> = std::fs::read_dir(&step)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n != "checksums.json")
        .collect();
    on_disk.sort();
    assert_eq!(listed.keys().cloned().collect::<Vec<_>>(), on_disk);
    assert!(on_disk.contains(&"model.safetensors".to_owned()));
    for (name, sum) in listed {
        let bytes = std::fs::read(step.join(name)).expect("read");
        assert_eq!(
            sum.as_str(),
            Some(integrity::hex(integrity::crc32c(&bytes)).as_str()),
            "{name}"
        );
    }
    assert!(conelab_train::checkpoint::verify_manifest(&step).expect("verified"));

    // Before manifests: unverified, and it resumes.
    std::fs::remove_file(step.join("checksums.json")).expect("remove");
    assert!(!conelab_train::checkpoint::verify_manifest(&step).expect("unverified"));
    let copy = f.path("copy");
    copy_dir(&f.path("run"), &copy);
    let out = conelab(&["train", "--resume", s(&copy), "--steps", "11", "--headless"]);
    succeeded(&out);

    // Damage in an unverified checkpoint, its only one: an error in one line, never a panic.
    let optimizer = step.join("optimizer.bpk");
    let mut bytes = std::fs::read(&optimizer).expect("read");
    for b in bytes.iter_mut().skip(16).step_by(7) {
        *b ^= 0x5a;
    }
    std::fs::write(&optimizer, &bytes).expect("write");
    let out = conelab(&[
        "train",
        "--resume",
        s(&f.path("run")),
        "--steps",
        "11",
        "--headless",
    ]);
    never_crashed(&out, "a scrambled optimizer.bpk without a manifest");
    assert!(!out.status.success());
}
