//! A run is a process of its own (issue: runs outlive the terminal), through the real binary:
//! `--detach`, SIGHUP ignored with and without nohup, SIGINT/SIGTERM stop-and-save with exit 75,
//! divergence with nobody watching exits 3, `conelab runs` over every status, and the failure
//! paths of its threads (issue: nothing lost, nothing hung).

use std::path::Path;
use std::process::Command;

use crate::harness::conelab_env;
use crate::harness::{
    Fixture, assert_one_line_error, conelab, conelab_processes, copy_dir, process_gone, read_until,
    s, signal, spawn_train, spawn_train_env, store_events, store_losses, succeeded, wait_final,
    wait_until,
};

fn steps_are_contiguous_and_once(run: &Path, last: u64) {
    let steps: Vec<u64> = store_losses(run).iter().map(|p| p.0).collect();
    assert_eq!(
        steps,
        (1..=last).collect::<Vec<_>>(),
        "every step exactly once in the store"
    );
}

#[test]
fn a_detached_run_returns_at_once_trains_to_its_end_and_leaves_no_process() {
    let f = Fixture::new();
    let out = f.train(
        "run",
        &[
            "--steps",
            "60",
            "--eval-every",
            "30",
            "--checkpoint-every",
            "20",
            "--detach",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("conelab attach"), "{stdout}");
    let pid: u32 = stdout
        .split("(pid ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .and_then(|p| p.parse().ok())
        .expect("the pid is printed");
    let run = f.path("run");
    let fin = wait_final(&run);
    assert_eq!(fin["status"], "completed");
    assert_eq!(fin["exit_code"], 0);
    assert_eq!(fin["step"], 60);
    wait_until("the background run to exit", || process_gone(pid));
    assert!(conelab_processes(s(&run)).is_empty());
    let log = std::fs::read_to_string(run.join("output.log")).expect("output.log");
    assert!(log.contains("finished step=60"), "{log}");
    assert!(run.join("step-000060/model.safetensors").is_file());
    steps_are_contiguous_and_once(&run, 60);
    // The store was compacted at the end: one base segment per table.
    let segments: Vec<String> = std::fs::read_dir(run.join("store"))
        .expect("store")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".parquet"))
        .collect();
    assert!(segments.iter().all(|n| n.contains("-base")), "{segments:?}");
    assert!(!run.join("control.sock").exists(), "the socket is removed");
}

fn sighup_does_not_stop(nohup: bool) {
    let f = Fixture::new();
    let corpus = f.path("corpus");
    let config = f.path("small.toml");
    let run = f.path("run");
    let bin = env!("CARGO_BIN_EXE_conelab");
    let mut args = vec![
        "train",
        s(&corpus),
        "--config",
        s(&config),
        "--run-dir",
        s(&run),
        "--steps",
        "80",
        "--eval-every",
        "0",
        "--headless",
        "--log-every",
        "1",
    ];
    let mut child = if nohup {
        args.insert(0, bin);
        Command::new("nohup")
            .args(&args)
            .env("XDG_STATE_HOME", crate::harness::test_state_home())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("nohup")
    } else {
        crate::harness::command()
            .args(&args[..])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("conelab")
    };
    let mut out = child.stdout.take().expect("stdout");
    read_until(&mut out, "step=3 ");
    signal(child.id(), libc::SIGHUP);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).expect("rest");
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(0), "nohup={nohup}: {rest}");
    assert!(rest.contains("finished step=80 (completed)"), "{rest}");
    steps_are_contiguous_and_once(&run, 80);
}

#[test]
fn sighup_never_stops_a_headless_run() {
    sighup_does_not_stop(false);
}

#[test]
fn sighup_never_stops_a_run_under_nohup() {
    sighup_does_not_stop(true);
}

#[test]
fn sigint_and_sigterm_stop_after_the_step_with_a_checkpoint_and_exit_75() {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let f = Fixture::new();
        let mut child = spawn_train(
            &f,
            "run",
            &[
                "--steps",
                "100000",
                "--eval-every",
                "0",
                "--checkpoint-every",
                "0",
                "--log-every",
                "1",
            ],
        );
        let mut out = child.stdout.take().expect("stdout");
        read_until(&mut out, "step=4 ");
        signal(child.id(), sig);
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut out, &mut rest).expect("rest");
        let status = child.wait().expect("wait");
        assert_eq!(status.code(), Some(75), "signal {sig}: {rest}");
        let run = f.path("run");
        let fin = wait_final(&run);
        assert_eq!(fin["status"], "stopped");
        assert_eq!(fin["by_signal"], true);
        let step = fin["step"].as_u64().expect("step");
        assert!(
            run.join(format!("step-{step:06}")).is_dir(),
            "a checkpoint at the stop"
        );
        steps_are_contiguous_and_once(&run, step);
        // Resumable: the resume continues from that step.
        let out = conelab(&[
            "train",
            "--resume",
            s(&run),
            "--steps",
            &(step + 3).to_string(),
            "--log-every",
            "1",
        ]);
        succeeded(&out);
        steps_are_contiguous_and_once(&run, step + 3);
    }
}

#[test]
fn a_divergence_with_nobody_watching_ends_the_run_with_status_3() {
    let f = Fixture::new();
    let out = f.train(
        "run",
        &[
            "--steps",
            "200",
            "--lr",
            "1e30",
            "--clip",
            "0",
            "--checkpoint-every",
            "0",
            "--eval-every",
            "0",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("diverged"), "{stderr}");
    // No checkpoint was written: it says so, and no "last good checkpoint" (issue #37).
    assert!(stderr.contains("before its first checkpoint"), "{stderr}");
    assert!(!stderr.contains("is kept"), "{stderr}");
    let fin = wait_final(&f.path("run"));
    assert_eq!(fin["status"], "diverged");
    assert_eq!(fin["exit_code"], 3);
    // Nothing was saved over: the run had no checkpoint and still has none.
    assert!(
        conelab_core::run_dir::checkpoints_in(&f.path("run"))
            .expect("list")
            .is_empty()
    );
}

#[test]
fn a_bad_number_is_refused_before_anything_is_created_and_a_folder_without_checkpoint_restarts() {
    let f = Fixture::new();
    let out = f.train("run", &["--store-flush-secs", "1e20"]);
    assert_one_line_error(&out, &["--store-flush-secs"]);
    assert!(!f.path("run").exists(), "nothing created");
    // A run stopped before its first checkpoint (no checkpoint: nothing to resume) ...
    let out = f.train("run", &["--steps", "3", "--eval-every", "0"]);
    assert!(out.status.success());
    for p in conelab_core::run_dir::checkpoints_in(&f.path("run")).expect("list") {
        std::fs::remove_dir_all(p).expect("rm");
    }
    // ... can be started again, by the same command and by --resume.
    let again = f.train("run", &["--steps", "4", "--eval-every", "0"]);
    succeeded(&again);
    steps_are_contiguous_and_once(&f.path("run"), 4);
    for p in conelab_core::run_dir::checkpoints_in(&f.path("run")).expect("list") {
        std::fs::remove_dir_all(p).expect("rm");
    }
    let resumed = conelab(&["train", "--resume", s(&f.path("run")), "--steps", "2"]);
    succeeded(&resumed);
    steps_are_contiguous_and_once(&f.path("run"), 2);
}

/// Issue #61: a kill before the first checkpoint, then `--resume`, starts the run over with its
/// earlier store set aside — and without the corpus's reference rows (the KN-3 bar of every
/// group) that a start records: `export --table groups` lost every KN-3 column.
#[test]
fn a_resume_that_starts_over_records_the_corpus_reference() {
    let f = Fixture::new();
    let reference_rows = |run: &Path| {
        let out = conelab(&["export", s(run), "--table", "metrics", "--format", "csv"]);
        succeeded(&out);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains(",ref_ppl,") || l.contains(",ref_unigram_ppl,"))
            .count()
    };
    succeeded(&f.train("fresh", &["--steps", "2", "--eval-every", "0"]));
    let fresh = reference_rows(&f.path("fresh"));
    assert!(fresh >= 8, "a new run records the reference: {fresh} rows");
    succeeded(&f.train("run", &["--steps", "2", "--eval-every", "0"]));
    for p in conelab_core::run_dir::checkpoints_in(&f.path("run")).expect("list") {
        std::fs::remove_dir_all(p).expect("rm");
    }
    let resumed = conelab(&["train", "--resume", s(&f.path("run")), "--steps", "2"]);
    succeeded(&resumed);
    assert_eq!(reference_rows(&f.path("run")), fresh);
}

#[test]
fn resume_applies_what_can_change_and_refuses_what_cannot() {
    let f = Fixture::new();
    assert!(
        f.train("run", &["--steps", "6", "--eval-every", "0"])
            .status
            .success()
    );
    let run = f.path("run");
    for (flag, value) in [
        ("--bptt", "4"),
        ("--batch", "3"),
        ("--model", "lstm"),
        ("--seed", "9"),
        ("--data-seed", "3"),
        ("--optimizer", "sgd"),
        ("--precision", "bf16"),
    ] {
        let out = conelab(&["train", "--resume", s(&run), flag, value]);
        assert_one_line_error(&out, &[flag, "differs from the run's own", "cannot change"]);
    }
    let out = conelab(&["train", "--resume", s(&run), "--steps", "3"]);
    assert_one_line_error(&out, &["--steps 3", "step 6"]);
    let out = conelab(&[
        "train",
        "--resume",
        s(&run),
        "--steps",
        "10",
        "--reg",
        "cos=1",
        "--lr",
        "0.005",
        "--eval-every",
        "2",
        "--keep",
        "5",
        "--log-every",
        "1",
    ]);
    let stdout = succeeded(&out);
    // The lr and the objectives apply from the step after the resume, recorded as events there.
    assert!(stdout.contains("lr=5.000e-3"), "{stdout}");
    let events = store_events(&run);
    let at = |kind: &str| {
        events
            .iter()
            .filter(|(k, _, _)| k == kind)
            .map(|(_, s, a)| (*s, a.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(at("objectives"), vec![(7, "CosReg γ=1".to_string())]);
    assert_eq!(at("lr").len(), 1);
    assert_eq!(at("lr")[0].0, 7);
    let config: Vec<(u64, String)> = at("config");
    assert!(config.contains(&(6, "2".into())), "eval_every: {events:?}");
    assert!(config.contains(&(6, "10".into())), "steps: {events:?}");
    assert!(config.contains(&(6, "5".into())), "keep: {events:?}");
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("step-000010/state.json")).expect("state"))
            .expect("json");
    assert_eq!(state["objectives"]["cos"]["enabled"], true);
    // run.toml keeps the new cadence for the next resume.
    let toml = std::fs::read_to_string(run.join("run.toml")).expect("run.toml");
    assert!(
        toml.contains("eval_every = 2") && toml.contains("steps = 10"),
        "{toml}"
    );
    steps_are_contiguous_and_once(&run, 10);
}

#[test]
fn an_engine_panic_fails_the_run_with_the_real_step_and_status_4() {
    let f = Fixture::new();
    let child = spawn_train_env(
        &f,
        "run",
        &[
            "--steps",
            "50",
            "--eval-every",
            "0",
            "--checkpoint-every",
            "0",
        ],
        &[("CONELAB_FAULT", "engine.panic:8:EIO")],
    );
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("panicked"), "{stderr}");
    assert!(
        !stderr.contains("please report"),
        "caught, not a crash: {stderr}"
    );
    let run = f.path("run");
    let fin = wait_final(&run);
    assert_eq!(fin["status"], "failed");
    // The step the engine had reached (7 done; the 8th panicked), not the one it started at.
    let failed: Vec<u64> = store_events(&run)
        .into_iter()
        .filter(|(k, _, _)| k == "failed")
        .map(|(_, s, _)| s)
        .collect();
    assert_eq!(failed, vec![7]);
    steps_are_contiguous_and_once(&run, 7);
}

/// A device out of memory at the first step (libtorch's CUDA allocator error, as tch panics
/// with it: injected): one line that says so and what needs less, exit status 4, and nothing
/// written beyond what a failed start writes (no checkpoint, no step in the store).
#[test]
fn out_of_memory_at_the_first_step_is_one_line_and_status_4() {
    let f = Fixture::new();
    let child = spawn_train_env(
        &f,
        "run",
        &["--steps", "50", "--eval-every", "0"],
        &[("CONELAB_FAULT", "engine.panic:1:ENOMEM")],
    );
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line: {stderr}");
    assert!(
        lines[0].contains("ran out of memory: CUDA out of memory. Tried to allocate 4.06 GiB")
            && lines[0].contains("--batch"),
        "{stderr}"
    );
    assert!(!stderr.contains("Exception raised"), "{stderr}");
    let run = f.path("run");
    let fin = wait_final(&run);
    assert_eq!(fin["status"], "failed");
    let checkpoints = std::fs::read_dir(&run)
        .expect("run dir")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("step-"))
        .count();
    assert_eq!(checkpoints, 0, "a checkpoint of a run that never stepped");
    assert!(store_losses(&run).is_empty(), "no step recorded");
    // The failure itself is in the store, at step 0 (the step the run had reached).
    assert!(
        store_events(&run)
            .iter()
            .any(|(k, step, _)| k == "failed" && *step == 0),
        "{:?}",
        store_events(&run)
    );
}

/// The second tier failing on a snapshot is a warning: the run completes, the panel of that
/// snapshot is recorded, and the tier runs again on a later one.
#[test]
fn a_failed_second_tier_warns_and_the_run_goes_on() {
    let f = Fixture::new();
    let child = spawn_train_env(
        &f,
        "run",
        &[
            "--steps",
            "12",
            "--eval-every",
            "0",
            "--snapshot-every",
            "3",
        ],
        &[("CONELAB_FAULT", "metrics.second_tier:1:EIO")],
    );
    let out = child.wait_with_output().expect("the run ends");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("second-tier metrics skipped: injected"),
        "{stdout}"
    );
    let run = f.path("run");
    assert_eq!(wait_final(&run)["status"], "completed");
    let csv = |metric: &str| {
        let out = conelab(&[
            "export",
            s(&run),
            "--table",
            "curves",
            "--metric",
            metric,
            "--format",
            "csv",
        ]);
        succeeded(&out);
        String::from_utf8_lossy(&out.stdout).lines().skip(1).count()
    };
    let panels = csv("embedding/total/i1");
    let tiers = csv("embedding/total/second_tier_seconds");
    assert!(tiers >= 1, "the tier ran again after the failure");
    assert!(
        tiers < panels,
        "the failed snapshot has its panel and no tier: {tiers} of {panels}"
    );
}

#[test]
fn a_dead_metrics_thread_or_recorder_ends_the_run_with_a_checkpoint_and_the_store_flushed() {
    for (fault, needle) in [
        ("metrics.panic:2:EIO", "metrics thread panicked"),
        ("store.panic:9:EIO", "recorder panicked"),
    ] {
        let f = Fixture::new();
        let child = spawn_train_env(
            &f,
            "run",
            &[
                "--steps",
                "100000",
                "--eval-every",
                "0",
                "--snapshot-every",
                "3",
                "--checkpoint-every",
                "0",
            ],
            &[("CONELAB_FAULT", fault)],
        );
        let out = child.wait_with_output().expect("the run ends on its own");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(4), "{fault}: {stderr}");
        assert!(stderr.contains(needle), "{fault}: {stderr}");
        let run = f.path("run");
        let fin = wait_final(&run);
        assert_eq!(fin["status"], "failed");
        let ckpts = conelab_core::run_dir::checkpoints_in(&run).expect("list");
        if fault.starts_with("metrics") {
            // The trained state is saved, and the store holds every step up to it.
            assert_eq!(ckpts.len(), 1, "{fault}: {ckpts:?}");
            let step = conelab_core::run_dir::step_of(&ckpts[0]).expect("step");
            steps_are_contiguous_and_once(&run, step);
        } else {
            // The store stopped recording at step 9: a checkpoint after that would be ahead of
            // it, so none is put in place; the store keeps steps 1–8.
            assert!(ckpts.is_empty(), "{ckpts:?}");
            steps_are_contiguous_and_once(&run, 8);
            assert!(
                stderr.contains("not put in place")
                    || String::from_utf8_lossy(&out.stdout).contains("not put in place")
            );
        }
    }
}

#[test]
fn a_kill_just_after_a_checkpoint_loses_no_row_it_covers() {
    let f = Fixture::new();
    // The store flushes only when a checkpoint needs it (the timer is an hour). One checkpoint
    // kept: step 14's folder is gone 7 steps later, so the wait below must not depend on it
    // (with this, the old wait for step-000014 failed 3 runs of 3).
    let mut child = spawn_train(
        &f,
        "run",
        &[
            "--steps",
            "100000",
            "--eval-every",
            "0",
            "--checkpoint-every",
            "7",
            "--store-flush-secs",
            "3600",
            "--keep",
            "1",
        ],
    );
    let run = f.path("run");
    // Any checkpoint at step 14 or later: at a few ms per step, step 14's own folder is pruned
    // (the run keeps its newest few) before a 50 ms poll may see it.
    wait_until("a checkpoint at step 14 or later", || {
        conelab_core::run_dir::checkpoints_in(&run)
            .ok()
            .and_then(|c| c.last().and_then(|p| conelab_core::run_dir::step_of(p)))
            .is_some_and(|step| step >= 14)
    });
    let _ = child.kill();
    let _ = child.wait();
    let steps: Vec<u64> = store_losses(&run).iter().map(|p| p.0).collect();
    assert!(
        steps.len() >= 14 && steps[..14] == (1..=14).collect::<Vec<_>>()[..],
        "the rows up to the checkpoint are on disk: {steps:?}"
    );
    // Every checkpoint there is (the kill may land a few later) is covered by the store.
    let newest = conelab_core::run_dir::checkpoints_in(&run)
        .expect("list")
        .last()
        .and_then(|p| conelab_core::run_dir::step_of(p))
        .expect("a checkpoint");
    assert!(
        steps.len() as u64 >= newest
            && steps[..newest as usize] == (1..=newest).collect::<Vec<_>>()[..],
        "rows up to the newest checkpoint ({newest}): {steps:?}"
    );
    // The resume continues from it with every step once.
    let until = (newest + 2).to_string();
    let out = conelab(&["train", "--resume", s(&run), "--steps", &until]);
    succeeded(&out);
    steps_are_contiguous_and_once(&run, newest + 2);
}

#[test]
fn a_disk_full_during_a_checkpoint_or_a_segment_keeps_what_was_written_and_says_so_once() {
    // The second checkpoint fails half-way (between two files, or at its manifest, the last
    // file); the run goes on and the next ones are written.
    for plan in ["checkpoint.write:2:ENOSPC", "checkpoint.manifest:2:EIO"] {
        a_failed_checkpoint_is_said_once_and_left_out(plan);
    }

    // A segment that cannot be put in place (disk full): the rows stay buffered and go out with
    // the next flush; the warning comes once.
    let f = Fixture::new();
    let child = spawn_train_env(
        &f,
        "run",
        &[
            "--steps",
            "30",
            "--eval-every",
            "0",
            "--store-flush-secs",
            "0",
        ],
        &[("CONELAB_FAULT", "segment.rename:5:ENOSPC")],
    );
    let out = child.wait_with_output().expect("wait");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert_eq!(stdout.matches("metrics store:").count(), 1, "{stdout}");
    steps_are_contiguous_and_once(&f.path("run"), 30);
}

#[test]
fn a_disk_full_to_the_end_still_says_how_the_run_ended() {
    // From the first segment on every write of the run fails: train.log's, the store's, the
    // checkpoints', final.json's own. The run stops (exit 4); its ending is written all the
    // same, in the space set aside at its start, and the log's loss is said once.
    let f = Fixture::new();
    let plan = "log.write:3+:ENOSPC,segment.write:1+:ENOSPC,segment.rename:1+:ENOSPC,\
                checkpoint.write:1+:ENOSPC,final.write:1+:ENOSPC";
    let child = spawn_train_env(
        &f,
        "run",
        &[
            "--steps",
            "30",
            "--eval-every",
            "0",
            "--checkpoint-every",
            "10",
            "--store-flush-secs",
            "0",
        ],
        &[("CONELAB_FAULT", plan)],
    );
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(!stderr.contains("tracing-subscriber"), "{stderr}");
    assert!(
        stderr.matches("train.log: No space left").count() <= 1,
        "{stderr}"
    );
    let run = f.path("run");
    assert!(
        !run.join(conelab_core::run_dir::live::FINAL_RESERVE)
            .exists(),
        "the reserve became final.json"
    );
    match conelab_core::run_dir::live::liveness(&run).expect("liveness") {
        conelab_core::run_dir::live::Liveness::Ended(r) => {
            assert_eq!((r.status.as_str(), r.exit_code), ("failed", 4), "{r:?}");
            assert!(r.message.contains("No space left"), "{r:?}");
        }
        other => panic!("{other:?}: {stderr}"),
    }
    let listed = conelab(&["runs", s(&f.path(".")), "--json"]);
    let rows: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("runs --json");
    assert_eq!(rows[0]["status"], "failed", "{rows}");
}

fn a_failed_checkpoint_is_said_once_and_left_out(plan: &str) {
    let f = Fixture::new();
    let child = spawn_train_env(
        &f,
        "run",
        &[
            "--steps",
            "20",
            "--eval-every",
            "0",
            "--checkpoint-every",
            "5",
            "--keep",
            "10",
        ],
        &[("CONELAB_FAULT", plan)],
    );
    let out = child.wait_with_output().expect("wait");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{plan}: {stdout}");
    assert_eq!(
        stdout.matches("checkpoint failed").count(),
        1,
        "{plan}: said once: {stdout}"
    );
    let run = f.path("run");
    let steps: Vec<u64> = conelab_core::run_dir::checkpoints_in(&run)
        .expect("list")
        .iter()
        .filter_map(|p| conelab_core::run_dir::step_of(p))
        .collect();
    assert_eq!(steps, vec![5, 15, 20], "{plan}");
    let leftovers: Vec<String> = std::fs::read_dir(&run)
        .expect("list")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "{plan}: {leftovers:?}");
    steps_are_contiguous_and_once(&run, 20);
    // What was written verifies.
    let verify = conelab(&["store", "verify", s(&run)]);
    assert!(
        verify.status.success(),
        "{plan}: {}",
        String::from_utf8_lossy(&verify.stderr)
    );
}

#[test]
fn runs_lists_every_status_and_never_fails_on_one_folder() {
    let f = Fixture::new();
    let root = f.path("runs");
    std::fs::create_dir_all(&root).expect("mkdir");
    let train = |name: &str, extra: &[&str]| f.train(&format!("runs/{name}"), extra);
    // completed, named and tagged
    assert!(
        train(
            "done",
            &[
                "--steps",
                "4",
                "--eval-every",
                "2",
                "--name",
                "baseline run",
                "--tag",
                "ptb",
                "--tag",
                "seed1",
                "--notes",
                "first try",
            ]
        )
        .status
        .success()
    );
    // diverged
    assert_eq!(
        train("nan", &["--steps", "50", "--lr", "1e30", "--clip", "0"])
            .status
            .code(),
        Some(3)
    );
    // stopped (by a signal)
    let mut child = spawn_train(
        &f,
        "runs/stopped",
        &["--steps", "100000", "--eval-every", "0", "--log-every", "1"],
    );
    let mut out = child.stdout.take().expect("stdout");
    read_until(&mut out, "step=2 ");
    signal(child.id(), libc::SIGTERM);
    assert_eq!(child.wait().expect("wait").code(), Some(75));
    // crashed: kill -9 mid-run
    let mut child = spawn_train(
        &f,
        "runs/crashed",
        &["--steps", "100000", "--eval-every", "0", "--log-every", "1"],
    );
    let mut out = child.stdout.take().expect("stdout");
    read_until(&mut out, "step=2 ");
    child.kill().expect("kill -9");
    let _ = child.wait();
    // live
    let live = f.train(
        "runs/live",
        &["--steps", "100000000", "--eval-every", "0", "--detach"],
    );
    assert!(live.status.success());
    // unreadable
    std::fs::create_dir_all(root.join("broken")).expect("mkdir");
    std::fs::write(root.join("broken/run.toml"), "this is = not [valid").expect("write");

    let out = conelab(&["runs", s(&root), "--json"]);
    succeeded(&out);
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("json");
    let by = |name: &str| {
        rows.iter()
            .find(|r| r["dir"] == name)
            .unwrap_or_else(|| panic!("{name} missing: {rows:?}"))
            .clone()
    };
    for key in [
        "name",
        "dir",
        "path",
        "status",
        "host",
        "pid",
        "step",
        "total_steps",
        "device",
        "objective",
        "best_valid_ppl",
        "i1",
        "mean_cos",
        "started",
        "seconds",
    ] {
        assert!(by("done").get(key).is_some(), "key {key}");
    }
    assert_eq!(by("done")["status"], "completed");
    assert_eq!(by("done")["name"], "baseline run");
    assert_eq!(by("done")["tags"], serde_json::json!(["ptb", "seed1"]));
    assert_eq!(by("done")["notes"], "first try");
    assert_eq!(by("nan")["name"], "nan", "unnamed: the folder's name");
    assert_eq!(by("nan")["tags"], serde_json::json!([]));
    assert_eq!(by("done")["step"], 4);
    assert_eq!(by("done")["total_steps"], 4);
    assert_eq!(by("done")["objective"], "MLE");
    assert!(
        by("done")["best_valid_ppl"]
            .as_f64()
            .is_some_and(|p| p > 1.0)
    );
    assert!(by("done")["i1"].as_f64().is_some());
    assert_eq!(by("nan")["status"], "diverged");
    // Its step is the steps trained: the one before the step that diverged, which its reason
    // names (issue #37: runs said 5/60 where the run finished at step 4).
    let diverged_at: u64 = by("nan")["reason"]
        .as_str()
        .and_then(|r| r.rsplit("at step ").next())
        .and_then(|n| n.trim().parse().ok())
        .expect("the divergent step in the reason");
    assert_eq!(by("nan")["step"].as_u64(), Some(diverged_at - 1));
    assert_eq!(by("stopped")["status"], "stopped");
    assert_eq!(by("crashed")["status"], "crashed");
    assert_eq!(by("live")["status"], "live");
    assert!(by("live")["pid"].as_u64().is_some());
    // A run.toml that does not parse is damage, said with the file.
    assert_eq!(by("broken")["status"], "damaged");
    assert!(
        by("broken")["damaged"][0]
            .as_str()
            .is_some_and(|r| r.contains("run.toml")),
        "{}",
        by("broken")
    );
    // The table too.
    let table = conelab(&["runs", s(&root)]);
    let text = String::from_utf8_lossy(&table.stdout);
    // `done` is named: its name stands for it.
    for name in ["nan", "stopped", "crashed", "live", "broken"] {
        assert!(text.contains(name), "{text}");
    }
    assert!(
        text.contains("baseline run") && text.contains("ptb,seed1"),
        "{text}"
    );
    // Columns line up under their headers, two spaces apart, no trailing blanks.
    let header = text.lines().next().unwrap_or_default();
    let row = text
        .lines()
        .find(|l| l.starts_with("baseline run"))
        .unwrap_or_else(|| panic!("{text}"));
    assert_eq!(header.find("tags"), row.find("ptb,seed1"), "{text}");
    assert!(header.starts_with("name") && !text.lines().any(|l| l.ends_with(' ')));

    // Labels edited afterwards: a run that is over in place, a live one through its socket.
    let run_json = |name: &str| -> serde_json::Value {
        let text =
            std::fs::read_to_string(root.join(name).join("store/run.json")).expect("run.json");
        serde_json::from_str(&text).expect("json")
    };
    let done = root.join("done");
    let out = conelab(&["tag", s(&done), "+x", "-seed1"]);
    succeeded(&out);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "tags: ptb, x\n");
    assert_eq!(run_json("done")["tags"], serde_json::json!(["ptb", "x"]));
    assert_eq!(
        run_json("done")["run_id"],
        "done",
        "the rest of run.json kept"
    );
    let out = conelab(&["rename", s(&done), ""]);
    assert!(out.status.success());
    assert!(run_json("done")["name"].is_null());
    let live_dir = root.join("live");
    let out = conelab(&["tag", s(&live_dir), "+hot"]);
    succeeded(&out);
    assert_eq!(run_json("live")["tags"], serde_json::json!(["hot"]));
    let out = conelab(&["note", s(&live_dir), "watch the rare group"]);
    succeeded(&out);
    assert_eq!(run_json("live")["notes"], "watch the rare group");
    let out = conelab(&["rename", s(&live_dir), "the live one"]);
    succeeded(&out);
    let out = conelab(&["runs", s(&root), "--json"]);
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("json");
    let live_row = rows.iter().find(|r| r["dir"] == "live").expect("live row");
    assert_eq!(live_row["name"], "the live one");
    // Refused edits: one line, exit 2, nothing changed.
    assert_one_line_error(
        &conelab(&["tag", s(&live_dir), "two words"]),
        &["contains ' '"],
    );
    assert_one_line_error(
        &conelab(&["tag", s(&done), "-absent"]),
        &["no tag `absent`"],
    );
    assert_one_line_error(
        &conelab(&["note", s(&root.join("nope")), "x"]),
        &["nope: no such run"],
    );
    assert_eq!(run_json("live")["tags"], serde_json::json!(["hot"]));

    // End the live one.
    let pid = by("live")["pid"].as_u64().expect("pid") as u32;
    signal(pid, libc::SIGTERM);
    wait_until("the live run to stop", || process_gone(pid));
}

/// The poisoned-checkpoint repro (issue: "the last good checkpoint can be poisoned"): at an lr of
/// 1e30 the first step's loss is finite but its update takes the weights to ~1e30, and the next
/// loss is not finite. With a checkpoint due after every step, that first checkpoint is refused
/// (a warning that names the step and the bound) instead of being committed as the newest.
#[test]
fn weights_beyond_the_bound_are_never_checkpointed() {
    let f = Fixture::new();
    let out = f.train(
        "run",
        &[
            "--steps",
            "5",
            "--lr",
            "1e30",
            "--clip",
            "0",
            "--warmup",
            "0",
            "--eval-every",
            "0",
            "--checkpoint-every",
            "1",
            "--log-every",
            "1",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "diverged: {stdout}");
    assert!(
        stdout.contains("weights at step 1 are not checkpointed")
            && stdout.contains("beyond the bound 1e6"),
        "{stdout}"
    );
    let run = f.path("run");
    assert!(
        !run.join("step-000001").exists(),
        "the blown-up weights were committed"
    );
}

/// Resume skips newer checkpoints that cannot be used (an empty `step-N/` folder, a truncated
/// model file) for the newest intact one, says which and why, and trains the skipped steps again:
/// the store ends with every step exactly once.
#[test]
fn resume_falls_back_to_the_newest_intact_checkpoint() {
    let f = Fixture::new();
    assert!(
        f.train(
            "run",
            &[
                "--steps",
                "6",
                "--eval-every",
                "0",
                "--checkpoint-every",
                "2",
                "--keep",
                "3"
            ],
        )
        .status
        .success()
    );
    let run = f.path("run");
    // The newest checkpoint's folder left empty, the one before it truncated.
    for entry in std::fs::read_dir(run.join("step-000006")).expect("step 6") {
        std::fs::remove_file(entry.expect("entry").path()).expect("rm");
    }
    let model = run.join("step-000004/model.safetensors");
    let bytes = std::fs::read(&model).expect("read");
    std::fs::write(&model, &bytes[..bytes.len() / 3]).expect("truncate");
    let out = conelab(&[
        "train",
        "--resume",
        s(&run),
        "--steps",
        "8",
        "--log-every",
        "1",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("start step=2 total=8"), "{stdout}");
    let warning = stdout
        .lines()
        .find(|l| l.contains("resumed from step 2"))
        .unwrap_or_else(|| panic!("no warning: {stdout}"));
    assert!(
        warning.contains("step-000006") && warning.contains("step-000004"),
        "{warning}"
    );
    steps_are_contiguous_and_once(&run, 8);
    // Nothing intact at all: the newest checkpoint's error, in one line.
    for entry in std::fs::read_dir(&run).expect("run") {
        let dir = entry.expect("entry").path();
        if dir
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("step-"))
        {
            std::fs::remove_file(dir.join("model.safetensors")).expect("rm");
        }
    }
    let out = conelab(&["train", "--resume", s(&run)]);
    crate::harness::assert_one_line_damage(&out, &["step-000008", "model.safetensors"]);
}

/// The run's own command line with `--resume` appended (a requeue script that reruns the job's
/// command): corpus, config file, run folder and seed given again with the run's own values are
/// accepted; one different value is refused, naming the flag and both values.
#[test]
fn resume_accepts_the_runs_own_values_given_again() {
    let f = Fixture::new();
    let first = ["--eval-every", "0", "--seed", "1"];
    assert!(
        f.train("run", &[&first[..], &["--steps", "4"]].concat())
            .status
            .success()
    );
    let run = f.path("run");
    let again = [&first[..], &["--resume", s(&run), "--steps", "6"]].concat();
    let own = f.train("run", &again);
    succeeded(&own);
    steps_are_contiguous_and_once(&run, 6);
    let out = f.train("run", &["--seed", "2", "--resume", s(&run), "--steps", "8"]);
    assert_one_line_error(&out, &["--seed 2 differs from the run's own 1"]);
}

/// The corpus given to `--resume` is compared by what its files hold: the same corpus moved
/// elsewhere is accepted (and read from there from now on, said once), a corpus whose files
/// differ is refused naming both places, and a run whose corpus is gone says how to give it.
#[test]
fn resume_knows_a_moved_corpus_by_its_files() {
    let f = Fixture::new();
    let run = f.path("run");
    assert!(
        f.train("run", &["--eval-every", "0", "--steps", "3"])
            .status
            .success()
    );
    let toml = std::fs::read_to_string(run.join("run.toml")).expect("run.toml");
    assert!(toml.contains("fingerprint = \"crc32c:"), "{toml}");
    // The corpus moves; the run cannot find it on its own.
    let moved = f.path("moved-corpus");
    std::fs::rename(f.path("corpus"), &moved).expect("move");
    assert_one_line_error(
        &conelab(&["train", "--resume", s(&run), "--steps", "4"]),
        &["is not there any more", "--resume"],
    );
    let out = conelab(&[
        "train",
        s(&moved),
        "--resume",
        s(&run),
        "--steps",
        "4",
        "--headless",
    ]);
    succeeded(&out);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("the corpus is read from"), "{said}");
    // From now on the run reads it there, without being told.
    let out = conelab(&["train", "--resume", s(&run), "--steps", "5", "--headless"]);
    succeeded(&out);
    steps_are_contiguous_and_once(&run, 5);
    // Another corpus (its files differ by one byte) is refused, naming it and the run's own.
    let other = f.path("other-corpus");
    copy_dir(&moved, &other);
    let train = other.join("train.txt");
    let text = std::fs::read_to_string(&train).expect("train.txt");
    std::fs::write(&train, text.replacen(' ', "  ", 1)).expect("write");
    assert_one_line_error(
        &conelab(&["train", s(&other), "--resume", s(&run), "--steps", "6"]),
        &[
            "CORPUS",
            "other-corpus",
            "differs from the run's own",
            "moved-corpus",
        ],
    );
}

/// `conelab attach` without a name while several runs are live, with no terminal to ask on:
/// one line naming them (it asked "Attach to which?" where nobody could answer, then failed).
#[test]
fn attach_without_a_name_or_a_terminal_names_the_live_runs() {
    let f = Fixture::new();
    let state = f.path("state");
    let env = [("XDG_STATE_HOME", s(&state))];
    let long = ["--steps", "100000", "--eval-every", "0", "--headless"];
    let mut runs: Vec<_> = ["first", "second"]
        .iter()
        .map(|name| {
            let mut child = spawn_train_env(&f, name, &long, &env);
            crate::harness::drain(&mut child);
            child
        })
        .collect();
    for name in ["first", "second"] {
        let live = f.path(name).join("live.json");
        wait_until("the run is live", || live.exists());
    }
    let out = conelab_env(&["attach"], &env);
    assert_one_line_error(
        &out,
        &["2 runs are live", "first", "second", "conelab attach RUN"],
    );
    for child in &mut runs {
        signal(child.id(), libc::SIGTERM);
    }
    for mut child in runs {
        child.wait().expect("wait");
    }
}

/// Issue #58: `--detach` with a relative run folder printed `conelab attach checkpoints/…`,
/// which fails from any other folder; the hints are absolute.
#[test]
fn a_detached_run_names_its_folder_absolutely() {
    let f = Fixture::new();
    let out = crate::harness::command()
        .current_dir(f.path("."))
        .args([
            "train",
            "corpus",
            "--config",
            "small.toml",
            "--run-dir",
            "rel",
            "--steps",
            "2",
            "--eval-every",
            "0",
            "--detach",
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{stdout}");
    let absolute = std::fs::canonicalize(f.path("rel")).expect("the run folder");
    assert!(
        stdout.contains(&format!("conelab attach {}\n", absolute.display())),
        "{stdout}"
    );
    let fin = wait_final(&f.path("rel"));
    assert_eq!(fin["status"], "completed");
}

/// Issue #58: `tag` on a live run that does not answer (stopped, hung) exited 2, as if the
/// user had typed something wrong; it is the machine's trouble, exit 4, in one line.
#[test]
fn a_live_run_that_does_not_answer_is_exit_4() {
    let f = Fixture::new();
    let mut child = spawn_train(
        &f,
        "run",
        &["--headless", "--steps", "100000000", "--eval-every", "0"],
    );
    let run = f.path("run");
    wait_until("the run to be live", || run.join("live.json").is_file());
    signal(child.id(), libc::SIGSTOP);
    let out = conelab(&["tag", s(&run), "+stopped"]);
    signal(child.id(), libc::SIGCONT);
    let _ = child.kill();
    let _ = child.wait();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("did not answer"), "{stderr}");
}

/// Issue #58: a run started or resumed with a relative folder recorded its checkpoints'
/// paths relative (`run/step-000002`), meaningless from any other folder; they are absolute.
#[test]
fn checkpoint_paths_in_the_events_are_absolute_whatever_the_folder_was_given_as() {
    let f = Fixture::new();
    let in_fixture = |args: &[&str]| {
        let out = crate::harness::command()
            .current_dir(f.path("."))
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("runs");
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    in_fixture(&[
        "train",
        "corpus",
        "--config",
        "small.toml",
        "--run-dir",
        "rel",
        "--headless",
        "--steps",
        "2",
        "--eval-every",
        "0",
        "--checkpoint-every",
        "2",
    ]);
    in_fixture(&["train", "--resume", "rel", "--headless", "--steps", "4"]);
    let absolute = std::fs::canonicalize(f.path("rel")).expect("the run");
    let events = conelab(&[
        "export",
        s(&f.path("rel")),
        "--table",
        "events",
        "--format",
        "csv",
    ]);
    let csv = String::from_utf8_lossy(&events.stdout).to_string();
    // `…,checkpoint,DETAIL,BEFORE,AFTER`: the detail is the checkpoint's path.
    let checkpoints: Vec<String> = csv
        .lines()
        .filter_map(|l| l.split_once(",checkpoint,"))
        .map(|(_, rest)| rest.split(',').next().unwrap_or_default().to_owned())
        .collect();
    assert!(checkpoints.len() >= 2, "{checkpoints:?}");
    for path in &checkpoints {
        assert!(path.starts_with(&*absolute.to_string_lossy()), "{path}");
    }
}
