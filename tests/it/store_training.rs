//! The engine's numbers and events reach the store: compared with what the same run printed, and
//! through a `kill -9` and a resume.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::harness::{Fixture, conelab, s, succeeded};
use conelab_core::series::split;
use conelab_store::query;
use polars::prelude::*;

/// `key=value` of a log line.
fn field(line: &str, key: &str) -> Option<f64> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .and_then(|v| v.parse().ok())
}

fn kinds_and_steps(events: &DataFrame) -> Vec<(String, u64)> {
    let kinds = events.column("kind").expect("kind").str().expect("str");
    let steps = events.column("step").expect("step").u64().expect("u64");
    kinds
        .iter()
        .zip(steps.into_no_null_iter())
        .map(|(k, s)| (k.unwrap_or_default().to_string(), s))
        .collect()
}

#[test]
fn a_run_records_every_step_evaluation_embedding_and_event() {
    let f = Fixture::new();
    let out = f.train(
        "run",
        &[
            "--steps",
            "6",
            "--eval-every",
            "3",
            "--snapshot-every",
            "3",
            "--checkpoint-every",
            "3",
            "--log-every",
            "1",
        ],
    );
    let stdout = succeeded(&out);
    let st = conelab_store::load(&f.path("run")).expect("the run has a store");
    assert!(st.warnings().is_empty(), "{:?}", st.warnings());
    let metrics = &st.metrics();

    // Every step's loss, as printed (4 decimals) by the same run.
    let h = query::history(metrics, split::TRAIN, "total", "loss", 0).expect("history");
    assert_eq!(h.steps, (1..=6).collect::<Vec<u64>>());
    for line in stdout.lines().filter(|l| l.starts_with("step=")) {
        let step = field(line, "step").expect("step") as usize;
        let printed = field(line, "loss").expect("loss");
        assert!(
            (h.values[step - 1] - printed).abs() <= 5e-5,
            "step {step}: store {} printed {printed}",
            h.values[step - 1]
        );
    }
    // Each evaluation and embedding analysis, as printed.
    for line in stdout.lines() {
        if line.starts_with("eval ") {
            let step = field(line, "step").expect("step") as u64;
            let sp = line
                .split_whitespace()
                .find_map(|w| w.strip_prefix("split="))
                .expect("split");
            for (group, key) in [("total", "ppl"), ("frequent", "frequent"), ("rare", "rare")] {
                let stored = query::value_at(metrics, sp, group, "ppl", step)
                    .expect("query")
                    .expect("stored");
                let printed = field(line, key).expect("printed");
                assert!(
                    (stored - printed).abs() <= 5e-4 * printed.max(1.0)
                        || (stored.is_nan() && printed.is_nan()),
                    "{sp} {group} step {step}: {stored} vs {printed}"
                );
            }
            let uniq = query::value_at(metrics, sp, "total", "uniq", step)
                .expect("q")
                .expect("uniq");
            assert_eq!(uniq, field(line, "uniq").expect("uniq"));
        }
        if line.starts_with("embedding ") {
            let step = field(line, "step").expect("step") as u64;
            for (group, key) in [
                ("total", "i1"),
                ("rare", "i1_rare"),
                ("frequent", "i1_frequent"),
            ] {
                let stored = query::value_at(metrics, split::EMBEDDING, group, "i1", step)
                    .expect("q")
                    .expect("i1");
                assert!(
                    (stored - field(line, key).expect("i1")).abs() <= 5e-5,
                    "{group} step {step}"
                );
            }
            let spectrum =
                query::value_at(metrics, split::SPECTRUM, "total", "sv0000", step).expect("q");
            assert_eq!(spectrum, Some(1.0), "normalised spectrum starts at 1");
        }
    }
    assert!(stdout.contains("split=test"), "{stdout}");
    let test_ppl = query::last_values_vec(metrics)
        .expect("last")
        .into_iter()
        .any(|v| v.split == "test" && v.metric == "ppl");
    assert!(test_ppl, "the final test evaluation is stored");
    // Events, in order, with their steps.
    let events = kinds_and_steps(st.events());
    assert_eq!(
        events,
        vec![
            ("start".into(), 0),
            ("checkpoint".into(), 3),
            ("checkpoint".into(), 6),
            ("finish".into(), 6)
        ]
    );
    // The run record; the end of the run compacted the store.
    assert_eq!(st.run().run_id, "run");
    assert!(
        st.run().config_toml.contains("[train]") || st.run().config_toml.contains("steps"),
        "{}",
        st.run().config_toml
    );
    let files: Vec<String> = std::fs::read_dir(f.path("run").join("store"))
        .expect("store")
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().to_string()))
        .filter(|n| n.ends_with(".parquet"))
        .collect();
    assert_eq!(
        files.len(),
        2,
        "one metrics and one events segment after the end: {files:?}"
    );
    assert_eq!(
        conelab_store::writer::live_writer(&f.path("run/store")).expect("probe"),
        None,
        "the OS lock is released (its file stays: a lock file is never deleted)"
    );

    // The corpus's reference models, recorded as the run started (issue #38), are those
    // `data baseline` computes for the corpus; the groups table carries them and the gain.
    let baseline = conelab(&["data", "baseline", s(&f.path("corpus")), "--json"]);
    succeeded(&baseline);
    let baseline: serde_json::Value = serde_json::from_slice(&baseline.stdout).expect("json");
    let kn3 = &baseline["splits"][0]["kn3"];
    assert_eq!(baseline["splits"][0]["split"], "valid");
    let stored = |group: &str| {
        query::value_at(metrics, split::VALID, group, "ref_ppl", 0)
            .expect("a query")
            .expect("a reference row at step 0")
    };
    for (i, group) in ["frequent", "medium", "rare"].iter().enumerate() {
        let want = kn3["groups"][i].as_f64().expect("a PPL");
        assert!((stored(group) - want).abs() < 1e-9 * want, "{group}");
    }
    let groups = conelab(&[
        "export",
        s(&f.path("run")),
        "--table",
        "groups",
        "--format",
        "json",
    ]);
    succeeded(&groups);
    let rows: serde_json::Value = serde_json::from_slice(&groups.stdout).expect("json");
    let row = &rows[0];
    let total_ref = kn3["total"].as_f64().expect("total");
    assert!((row["total_kn3_ppl"].as_f64().expect("kn3") - total_ref).abs() < 1e-9 * total_ref);
    let ppl = row["total_ppl"].as_f64().expect("ppl");
    let gain = row["total_kn3_gain"].as_f64().expect("gain");
    assert!((gain - (total_ref / ppl).ln()).abs() < 1e-9, "{row}");

    // The same run through `conelab export`.
    let csv = conelab(&[
        "export",
        s(&f.path("run")),
        "--table",
        "curves",
        "--format",
        "csv",
    ]);
    let text = succeeded(&csv);
    assert_eq!(
        text.lines().next(),
        Some("run_id,run,run_uuid,step,train/loss,valid/ppl,embedding/i1")
    );
    assert_eq!(text.lines().count(), 1 + 6);

    // Neighbours at the checkpoint, as `conelab inspect` computes them from the same files.
    let vocab = std::fs::read_to_string(f.path("run/vocab.tsv")).expect("vocab");
    let word = vocab
        .lines()
        .nth(5)
        .and_then(|l| l.split('\t').next())
        .expect("a word")
        .to_string();
    let run = f.path("run");
    // `export --table neighbors` of the word, top k, in a format (none: Markdown).
    let neighbors = |k: &str, format: &[&str]| {
        let mut args = vec!["export", s(&run), "--table", "neighbors", "--words", &word];
        args.extend(["-k", k]);
        args.extend(format);
        succeeded(&conelab(&args))
    };
    let text = neighbors("3", &["--format", "csv"]);
    let rows: Vec<Vec<&str>> = text
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    assert_eq!(rows.len(), 3, "{text}");
    let inspect = conelab(&[
        "inspect",
        s(&f.path("run")),
        "--neighbors",
        &word,
        "-k",
        "3",
        "--json",
    ]);
    let json: serde_json::Value = serde_json::from_slice(&inspect.stdout).expect("inspect json");
    let want = json["neighbors"][&word].as_array().expect("neighbours");
    for (row, w) in rows.iter().zip(want) {
        // run_id, run, word, rank, neighbor, cosine, group
        assert_eq!(row[4], w["token"].as_str().expect("token"));
        let cos: f64 = row[5].parse().expect("cosine");
        assert!(
            (cos - w["cosine"].as_f64().expect("cosine")).abs() < 1e-6,
            "{row:?} vs {w}"
        );
    }
    let md = neighbors("3", &[]);
    assert!(md.starts_with("| word | rank | MLE |"), "{md}");
    assert_eq!(md.lines().count(), 2 + 3, "{md}");
    // A -k beyond the vocabulary: every other row once, not a line per rank asked.
    let all = neighbors("99999999999", &[]);
    assert_eq!(all.lines().count(), 2 + vocab.lines().count() - 1, "{all}");
}

#[test]
fn kill_9_leaves_a_loadable_store_and_a_resume_continues_it_without_duplicates() {
    let f = Fixture::new();
    let run = f.path("run");
    let mut child = crate::harness::command()
        .args([
            "train",
            s(&f.path("corpus")),
            "--config",
            s(&f.path("small.toml")),
            "--run-dir",
            s(&run),
            "--steps",
            "100000",
            "--eval-every",
            "7",
            "--checkpoint-every",
            "10",
            "--log-every",
            "1",
            "--store-flush-secs",
            "0",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    // Wait for a few dozen segments (one per event at --store-flush-secs 0), then kill -9.
    let start = Instant::now();
    loop {
        let segments = std::fs::read_dir(run.join("store"))
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter(|e| e.file_name().to_string_lossy().starts_with("metrics-"))
                    .count()
            })
            .unwrap_or(0);
        if segments >= 40 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "training too slow: {segments} segments"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().expect("SIGKILL");
    let _ = child.wait();

    let st = conelab_store::load(&run).expect("the store loads after kill -9");
    let h = query::history(st.metrics(), split::TRAIN, "total", "loss", 0).expect("history");
    let reached = *h.steps.last().expect("steps were stored");
    assert_eq!(
        h.steps,
        (1..=reached).collect::<Vec<u64>>(),
        "whole steps, none missing inside"
    );
    assert!(
        run.join("store/writer.lock").exists(),
        "a killed writer leaves its lock"
    );

    // Resume from the newest checkpoint (≤ reached) and run 15 steps past the crash.
    let total = reached + 15;
    let out = conelab(&[
        "train",
        "--resume",
        s(&run),
        "--steps",
        &total.to_string(),
        "--log-every",
        "1",
    ]);
    succeeded(&out);
    let st = conelab_store::load(&run).expect("load");
    let h = query::history(st.metrics(), split::TRAIN, "total", "loss", 0).expect("history");
    let starts: Vec<u64> = kinds_and_steps(st.events())
        .into_iter()
        .filter(|(k, _)| k == "start")
        .map(|(_, s)| s)
        .collect();
    assert_eq!(starts.len(), 2, "{starts:?}");
    let resumed_at = starts[1];
    assert!(
        resumed_at.is_multiple_of(10) && resumed_at > 0,
        "resumed at a checkpoint: {starts:?}"
    );
    // Steps the store had before the crash, up to the checkpoint, and every step after it. The
    // checkpoint may be a step or two ahead of the store (the kill took the recorder's buffer).
    let want: Vec<u64> = (1..=reached.min(resumed_at))
        .chain(resumed_at + 1..=total)
        .collect();
    assert_eq!(h.steps, want);
    let keys = ["step", "split", "group", "metric"].map(String::from);
    let unique = st
        .metrics()
        .unique_stable(Some(&keys), UniqueKeepStrategy::First, None)
        .expect("unique");
    assert_eq!(
        unique.height(),
        st.metrics().height(),
        "no duplicate (step, split, group, metric)"
    );
    // The resumed losses are the ones the resumed process printed.
    let stdout = String::from_utf8_lossy(&out.stdout);
    for line in stdout.lines().filter(|l| l.starts_with("step=")) {
        let step = field(line, "step").expect("step") as u64;
        let i = h
            .steps
            .iter()
            .position(|&s| s == step)
            .expect("printed step is stored");
        assert!(
            (h.values[i] - field(line, "loss").expect("loss")).abs() <= 5e-5,
            "step {step}"
        );
    }
    assert_eq!(starts[0], 0);
}

/// The embedding rows of `run`'s store at `step` (its analysed snapshot).
fn embedding_rows_at(run: &std::path::Path, step: u64) -> usize {
    let st = conelab_store::load(run).expect("the run's store");
    let steps = st
        .metrics()
        .column("step")
        .expect("step")
        .u64()
        .expect("u64")
        .clone();
    let splits = st
        .metrics()
        .column("split")
        .expect("split")
        .str()
        .expect("str")
        .clone();
    steps
        .iter()
        .zip(splits.iter())
        .filter(|(s, sp)| *s == Some(step) && *sp == Some("embedding"))
        .count()
}

/// Killed just after its checkpoint (fault point `checkpoint.committed`: the process aborts
/// right after the folder is in place), a run loses that step's analysis — its rows reach the
/// store after the commit. The resume takes that snapshot again before its first step: the
/// checkpoint's step is analysed in the store at the end, once.
#[test]
fn a_kill_just_after_a_checkpoint_keeps_that_steps_analysis() {
    let f = crate::harness::Fixture::new();
    let (run, corpus, config) = (f.path("run"), f.path("corpus"), f.path("small.toml"));
    let args = [
        "train",
        crate::harness::s(&corpus),
        "--config",
        crate::harness::s(&config),
        "--run-dir",
        crate::harness::s(&run),
        "--headless",
        "--steps",
        "20",
        "--eval-every",
        "0",
        "--snapshot-every",
        "10",
        "--checkpoint-every",
        "10",
    ];
    let killed =
        crate::harness::conelab_env(&args, &[("CONELAB_FAULT", "checkpoint.committed:1:EIO")]);
    assert!(!killed.status.success(), "the fault killed it");
    assert!(
        run.join("step-000010").is_dir(),
        "the checkpoint is in place"
    );
    // The analysis of step 10 is lost with the process (it comes after the commit), or made it
    // by chance before the kill: either way the resumed run's store has it exactly once.
    let before = embedding_rows_at(&run, 10);
    let out =
        crate::harness::conelab(&["train", "--resume", crate::harness::s(&run), "--headless"]);
    succeeded(&out);
    let after = embedding_rows_at(&run, 10);
    assert!(
        after > 0,
        "step 10's analysis is in the store ({before} rows before the resume)"
    );
    assert!(
        before == 0 || before == after,
        "taken again though it was there"
    );
    assert!(embedding_rows_at(&run, 20) > 0);
    eprintln!("embedding rows at step 10: {before} after the kill, {after} after the resume");
}

/// Issue #38 part 5: under spectrum control every analysed snapshot stores how far σ is from its
/// prior and from W's own singular values; with the proximal σ step the gap to the prior closes.
#[test]
fn spectrum_control_stores_its_gap_to_the_prior_and_to_w() {
    let f = Fixture::new();
    let out = f.train(
        "run",
        &[
            "--steps",
            "30",
            "--snapshot-every",
            "10",
            "--reg",
            "sc=exp:1:c1=3",
        ],
    );
    succeeded(&out);
    let run = f.path("run");
    let metrics = [
        "sc_prior_gap",
        "sc_sigma_vs_w",
        "sc_target_max",
        "sc_u_orth",
    ];
    let mut args = vec!["export", s(&run), "--table", "curves", "--format", "csv"];
    let names: Vec<String> = metrics
        .iter()
        .map(|m| format!("embedding/total/{m}"))
        .collect();
    for n in &names {
        args.extend(["--metric", n.as_str()]);
    }
    let out = conelab(&args);
    let csv = succeeded(&out);
    let rows: Vec<Vec<f64>> = csv
        .lines()
        .skip(1)
        .map(|l| {
            l.split(',')
                .skip(4)
                .map(|v| v.parse().expect("number"))
                .collect()
        })
        .collect();
    assert_eq!(rows.len(), 3, "snapshots at 10, 20, 30:\n{csv}");
    // t_1 = c1·exp(−c2·1) with c2 = 0.01, by hand.
    let t1 = 3.0 * (-0.01f64).exp();
    for r in &rows {
        assert!((r[2] - t1).abs() < 1e-5, "t_1 {} vs {t1}", r[2]);
        assert!(
            r[1] < 0.05 && r[3] < 0.2,
            "σ vs W {}, ‖UᵀU − I‖ {}",
            r[1],
            r[3]
        );
    }
    assert!(
        rows[2][0] < rows[0][0] && rows[2][0] < 0.1,
        "the gap to the prior closes: {csv}"
    );
}

/// Issue #39 part 1: a run samples its own process from its first moment (the store's thread, not
/// the training one): its resident memory and the host's are in the store, the RSS against
/// the size the run's own weights alone take.
#[test]
fn a_run_stores_its_process_load() {
    let f = Fixture::new();
    let out = f.train("run", &["--steps", "4", "--eval-every", "0"]);
    succeeded(&out);
    let run = f.path("run");
    let out = conelab(&[
        "export",
        s(&run),
        "--table",
        "curves",
        "--format",
        "csv",
        "--metric",
        "system/total/rss_mib",
        "--metric",
        "system/total/host_total_mib",
    ]);
    let csv = succeeded(&out);
    let row: Vec<f64> = csv
        .lines()
        .nth(1)
        .expect("a sample")
        .split(',')
        .skip(4)
        .map(|v| v.parse().expect("number"))
        .collect();
    let meminfo = std::fs::read_to_string("/proc/meminfo").expect("meminfo");
    let total_kb: f64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("MemTotal");
    assert!(
        row[0] > 1.0 && row[0] < total_kb / 1024.0,
        "rss {} MiB",
        row[0]
    );
    assert!(
        (row[1] - total_kb / 1024.0).abs() < 1.0,
        "{} vs {}",
        row[1],
        total_kb / 1024.0
    );
}
