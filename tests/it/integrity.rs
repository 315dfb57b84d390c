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

/// Copies a run folder's regular files (a crashed run leaves its socket behind).
fn copy_files(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("list") {
        let e = e.expect("entry");
        let kind = e.file_type().expect("type");
        if kind.is_dir() {
            copy_files(&e.path(), &to.join(e.file_name()));
        } else if kind.is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).expect("copy");
        }
    }
}

/// Every regular file under `dir`.
fn every_file(dir: &Path, into: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("list") {
        let e = e.expect("entry");
        let kind = e.file_type().expect("type");
        if kind.is_dir() {
            every_file(&e.path(), into);
        } else if kind.is_file() && e.metadata().is_ok_and(|m| m.len() > 0) {
            into.push(e.path());
        }
    }
}

/// A file's kind: its path in the run with the step a checkpoint's or projection's name carries,
/// and the numbers and checksum of a segment's, left out (`step-#/model.safetensors`,
/// `store/metrics-segment`).
fn kind_of(run: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(run).expect("inside").to_string_lossy();
    rel.split('/')
        .map(|part| {
            if part.starts_with("step-") {
                "step-#"
            } else if part.starts_with("metrics-") {
                "metrics-segment"
            } else if part.starts_with("events-") {
                "events-segment"
            } else {
                part
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// One reading command of the campaign: its arguments, `RUN` and `PARENT` standing for the
/// run's folder and the one it is in; `attach` is the workbench's read of a stored run.
const READERS: [&[&str]; 11] = [
    &["runs", "PARENT", "--json"],
    &["export", "RUN", "--table", "metrics", "--format", "csv"],
    &["export", "RUN", "--table", "events", "--format", "csv"],
    &["export", "RUN", "--table", "curves", "--format", "csv"],
    &["export", "RUN", "--table", "groups", "--format", "json"],
    &["export", "RUN", "--table", "config", "--format", "csv"],
    &["export", "RUN", "--table", "runs", "--format", "csv"],
    &[
        "export",
        "RUN",
        "--table",
        "neighbors",
        "--words",
        "WORDS",
        "--format",
        "csv",
    ],
    &["eval", "RUN", "--json"],
    &["eval", "RUN", "--step", "best", "--json"],
    &["attach"],
];

/// What a reader gave: exit status, stdout, stderr — timings left out of `eval`'s.
#[derive(Debug, PartialEq)]
struct Said {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn read_with(reader: &[&str], run: &Path, words: &str) -> Said {
    if reader == ["attach"] {
        // What `attach` of a run that is over reads: the folder opened (small files checked,
        // rebuilt from copies where damaged), then the store's history.
        return match conelab_client::open::open(run, &conelab_run::archive::StoreArchive) {
            Err(e) => Said {
                code: Some(2),
                stdout: String::new(),
                stderr: e.to_string(),
            },
            Ok(opened) => match conelab_store::history::read(run) {
                Ok(h) => Said {
                    code: Some(0),
                    stdout: format!(
                        "{:?} {:?} {:?}",
                        opened.hello.status, h.events, h.projection_steps
                    ),
                    // What the workbench says beside the history: its read-only line
                    // (how the run ended, or that it is not known) and the read's warnings.
                    stderr: format!(
                        "{}\n{}",
                        opened.read_only.as_deref().unwrap_or_default(),
                        h.warnings.join("\n")
                    ),
                },
                Err(e) => Said {
                    code: Some(2),
                    stdout: String::new(),
                    stderr: e.to_string(),
                },
            },
        };
    }
    let parent = run.parent().expect("parent");
    let args: Vec<&str> = reader
        .iter()
        .map(|a| match *a {
            "RUN" => s(run),
            "PARENT" => s(parent),
            "WORDS" => words,
            a => a,
        })
        .collect();
    let out = conelab(&args);
    never_crashed(&out, &format!("{args:?}"));
    let mut stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if reader[0] == "eval"
        && let Ok(mut v) = serde_json::from_str::<serde_json::Value>(&stdout)
    {
        // Wall-clock figures differ between two reads of the same bytes.
        fn drop_timings(v: &mut serde_json::Value) {
            match v {
                serde_json::Value::Object(m) => {
                    m.retain(|k, _| !k.contains("seconds") && !k.contains("per_sec"));
                    m.values_mut().for_each(drop_timings);
                }
                serde_json::Value::Array(a) => a.iter_mut().for_each(drop_timings),
                _ => {}
            }
        }
        drop_timings(&mut v);
        stdout = v.to_string();
    }
    Said {
        code: out.status.code(),
        stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A run killed with SIGKILL after its second checkpoint: its store unflushed at the end, its
/// live record and lock left behind, no `final.json`.
fn crashed_run(f: &Fixture, name: &str) -> PathBuf {
    let mut child = crate::harness::spawn_train(
        f,
        name,
        &[
            "--headless",
            "--steps",
            "100000",
            "--eval-every",
            "10",
            "--snapshot-every",
            "10",
            "--checkpoint-every",
            "10",
            "--keep",
            "3",
            "--store-flush-secs",
            "1",
        ],
    );
    let run = f.path(name);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !run.join("step-000020").join("checksums.json").is_file() {
        assert!(std::time::Instant::now() < deadline, "no second checkpoint");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::thread::sleep(std::time::Duration::from_millis(1500));
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    assert!(!run.join("final.json").exists());
    run
}

#[test]
fn every_reader_of_a_flipped_finished_or_crashed_run_is_right_or_says_so() {
    let f = Fixture::new();
    let done = f.train(
        "done",
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
    succeeded(&done);
    let runs = [f.path("done"), crashed_run(&f, "crashed")];
    // A crashed run's wall time is where it stopped, not reckoned to the moment it is listed
    // (the campaign found it growing between two reads).
    let wall = || {
        let out = conelab(&["runs", s(&f.path(".")), "--json"]);
        let rows: serde_json::Value = serde_json::from_slice(&out.stdout).expect("runs --json");
        rows.as_array()
            .and_then(|r| r.iter().find(|r| r["dir"] == "crashed"))
            .map(|r| r["seconds"].clone())
            .expect("the crashed run is listed")
    };
    let first = wall();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert_eq!(wall(), first);
    // Three words of the vocabulary for the neighbour table.
    let vocab = std::fs::read_to_string(runs[0].join("vocab.tsv")).expect("vocab");
    let words: Vec<&str> = vocab
        .lines()
        .filter_map(|l| l.split('\t').next())
        .filter(|w| w.chars().all(|c| c.is_ascii_alphanumeric()) && !w.is_empty())
        .take(3)
        .collect();
    let words = words.join(",");

    // Every reader on each pristine run, read where the flipped copies will be read.
    let work = f.path("work").join("run");
    let fresh = |pristine: &Path| {
        let _ = std::fs::remove_dir_all(f.path("work"));
        copy_files(pristine, &work);
    };
    let mut clean: Vec<Vec<Said>> = Vec::new();
    let mut kinds: Vec<Vec<(String, Vec<PathBuf>)>> = Vec::new();
    for pristine in &runs {
        fresh(pristine);
        let said: Vec<Said> = READERS
            .iter()
            .map(|r| read_with(r, &work, &words))
            .collect();
        for (r, s) in READERS.iter().zip(&said) {
            assert_eq!(
                s.code,
                Some(0),
                "{r:?} on {}: {}",
                pristine.display(),
                s.stderr
            );
        }
        clean.push(said);
        let mut files = Vec::new();
        every_file(pristine, &mut files);
        let mut by_kind: std::collections::BTreeMap<String, Vec<PathBuf>> = Default::default();
        for file in files {
            by_kind
                .entry(kind_of(pristine, &file))
                .or_default()
                .push(file);
        }
        kinds.push(by_kind.into_iter().collect());
    }
    for (run, k) in runs.iter().zip(&kinds) {
        let names: Vec<&str> = k.iter().map(|(n, _)| n.as_str()).collect();
        for must in [
            "run.toml",
            "vocab.tsv",
            "store/run.json",
            "best/model.safetensors",
        ] {
            assert!(names.contains(&must), "{}: {names:?}", run.display());
        }
        assert!(names.len() >= 15, "{}: {names:?}", run.display());
    }

    let mut rng = Rng(0xC0FF_EE61);
    let mut silently_wrong = Vec::new();
    let (mut reads, mut said_so) = (0, 0);
    let mut flipped_kinds = std::collections::BTreeSet::new();
    for flip in 0..200 {
        let which = flip % 2;
        let pristine = &runs[which];
        fresh(pristine);
        // A kind first, then a file of it: every kind is hit, however many files it has.
        let (kind, files) = &kinds[which][rng.below(kinds[which].len())];
        let original = &files[rng.below(files.len())];
        flipped_kinds.insert((which, kind.clone()));
        let file = work.join(original.strip_prefix(pristine).expect("inside"));
        let mut bytes = std::fs::read(&file).expect("read");
        let at = rng.below(bytes.len());
        let bit = rng.below(8);
        bytes[at] ^= 1 << bit;
        std::fs::write(&file, &bytes).expect("write");
        // Three readers a flip, in turn: each reads some sixty flipped runs.
        for r in 0..3 {
            let i = (flip * 3 + r) % READERS.len();
            let got = read_with(READERS[i], &work, &words);
            reads += 1;
            let want = &clean[which][i];
            if got == *want {
                continue;
            }
            // `runs` says damage in its rows (status, `damaged`), not on stderr.
            let listed_damage = READERS[i][0] == "runs"
                && got.stdout.contains("damaged")
                && !want.stdout.contains("damaged");
            if got.code != want.code || got.stderr != want.stderr || listed_damage {
                said_so += 1;
                continue;
            }
            silently_wrong.push(format!(
                "{:?} after bit {bit} of byte {at} of {} ({}): {} ≠ {}",
                READERS[i],
                original.display(),
                ["finished", "crashed"][which],
                got.stdout.chars().take(300).collect::<String>(),
                want.stdout.chars().take(300).collect::<String>()
            ));
        }
    }
    eprintln!(
        "{reads} reads of 200 flipped runs over {} kinds of file: {said_so} said so, \
         silently wrong: {}",
        flipped_kinds.len(),
        silently_wrong.len()
    );
    assert!(
        silently_wrong.is_empty(),
        "silently wrong: {}\n{}",
        silently_wrong.len(),
        silently_wrong.join("\n")
    );
    assert!(
        said_so >= 20,
        "{said_so}: the flips were found too rarely to mean much"
    );
    let total_kinds: usize = kinds.iter().map(Vec::len).sum();
    assert!(
        flipped_kinds.len() * 10 >= total_kinds * 9,
        "{} of {total_kinds} kinds flipped",
        flipped_kinds.len()
    );
}
